//! Fake GKE TPU node pools: building Nodes, adding/restoring pools, preemption in GKE's order,
//! NotReady/Ready and cordon of single nodes.
//!
//! * `pool_spec`: [`NodePoolSpec`] and GKE's topology → hosts × chips arithmetic.
//! * `node_object`: the Node objects written (labels, status, addresses, taints).
//! * `node_edits`: changes to one node: taints, Ready, cordon, deletion.
//! * `lifecycle`: the Ready condition and the taints the node lifecycle controller keeps in
//!   step with it ([`set_node_readiness`]).
//! * `pool_lifecycle`: creating, restoring and deleting whole pools.
//! * `preemption`: GKE's preemption sequence ([`preempt_pool`]).

mod lifecycle;
mod node_edits;
mod node_object;
mod pool_lifecycle;
mod pool_spec;
mod preemption;

pub use lifecycle::{
    KUBELET_DOWN_MESSAGE, NodeLifecycleTiming, NodeReadiness, follow_readiness,
    lifecycle_taint_key, node_readiness, readiness_condition, reconcile_lifecycle_taints,
    set_node_readiness,
};
pub use node_edits::{add_taint, cordon_node, delete_node, set_node_ready, set_taints};
pub use node_object::{build_node, node_ip, node_labels, node_status, taint};
pub use pool_lifecycle::{add_pool, add_pools, delete_sim_nodes, pool_node_names, restore_pool};
pub use pool_spec::{NodePoolSpec, default_chips_per_host, topology_chips};
pub use preemption::{PreemptionPhase, PreemptionTiming, preempt_pool, preemption_plan};

/// Label put on every node the simulator creates (value `"true"`), so a fake kubelet running
/// against a real cluster can restrict itself to fake nodes.
pub const SIM_NODE_LABEL: &str = "sim.slices.dev/fake";
/// Label selector matching the simulator's nodes.
pub const SIM_NODE_SELECTOR: &str = "sim.slices.dev/fake=true";
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
