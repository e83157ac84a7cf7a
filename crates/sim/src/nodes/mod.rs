//! Fake GKE TPU node pools: building Nodes, adding/restoring pools, preemption in GKE's order,
//! NotReady/Ready and cordon of single nodes.
//!
//! * `labels`: the labels on the simulator's nodes ([`SIM_NODE_LABEL`]).
//! * `pool_spec`: [`NodePoolSpec`] and GKE's topology → hosts × chips arithmetic.
//! * `node_object`: the Node objects written (labels, status, addresses, taints).
//! * `node_edits`: changes to one node: taints, status, cordon, deletion.
//! * `lifecycle`: the Ready condition and the taints the node lifecycle controller keeps in
//!   step with it ([`set_node_readiness`], [`set_node_ready`]).
//! * `pool_lifecycle`: creating, restoring and deleting whole pools.
//! * `preemption`: GKE's preemption sequence ([`preempt_pool`]).

mod labels;
mod lifecycle;
mod node_edits;
mod node_object;
mod pool_lifecycle;
mod pool_spec;
mod preemption;

pub use labels::{SIM_NODE_LABEL, SIM_NODE_SELECTOR};
pub use lifecycle::{
    KUBELET_DOWN_MESSAGE, NodeLifecycleTiming, NodeReadiness, follow_readiness,
    lifecycle_taint_key, node_readiness, readiness_condition, reconcile_lifecycle_taints,
    set_node_readiness, set_node_ready,
};
pub use node_edits::{add_taint, cordon_node, delete_node, set_taints};
pub use node_object::{build_node, node_ip, node_labels, node_status, ready_condition, taint};
pub use pool_lifecycle::{add_pool, add_pools, delete_sim_nodes, pool_node_names, restore_pool};
pub use pool_spec::{Autoscale, NodePoolSpec, default_chips_per_host, topology_chips};
pub use preemption::{PreemptionPhase, PreemptionTiming, preempt_pool, preemption_plan};
