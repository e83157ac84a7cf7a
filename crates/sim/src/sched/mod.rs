//! Pure scheduling logic of the fake scheduler: node fit, free-chip accounting and placement.
//!
//! What is checked, in the order a real scheduler's filter plugins would: node Ready and
//! schedulable (`spec.unschedulable`), taints with effect `NoSchedule`/`NoExecute` against the
//! pod's tolerations, `spec.nodeSelector`, required node affinity (`nodeSelectorTerms` with
//! `In`/`NotIn`/`Exists`/`DoesNotExist`/`Gt`/`Lt` and `matchFields` on `metadata.name`), and free
//! `google.com/tpu` (allocatable minus the requests of the pods bound to the node that are not
//! terminal or are still terminating: a pod being deleted keeps its chips until it is gone).
//!
//! Required inter-pod anti-affinity is checked (`anti_affinity`), in both directions.
//!
//! Not checked: cpu/memory/pods capacity, required pod affinity and topology spread
//! constraints, host ports, volumes. Instead of pod affinity the placement prefers, for a pod labelled
//! with [`LABEL_GROUP_KEY`](slice_core::constants::LABEL_GROUP_KEY), the node pool already
//! holding pods of the same group key, then empty pools, so that one slice's pods land in one
//! pool; this is a preference, not a guarantee.
//!
//! * `fit`: does one pod fit one node ([`check_fit`]).
//! * `resources`: `google.com/tpu` requested, allocatable and in use.
//! * `state`: what state a node or pod is in (Ready, terminal, bound).
//! * `placement`: [`schedule`], first fit by name with the group-key preference.

mod anti_affinity;
mod fit;
mod placement;
mod resources;
mod state;

pub use fit::{
    Unfit, check_fit, node_selector_matches, required_affinity_matches, tolerates,
    toleration_matches,
};
pub use placement::{Placement, node_pool_of, schedule};
pub use resources::{node_tpu_allocatable, parse_count, pod_tpu_request, tpu_usage};
pub use state::{node_is_ready, pod_is_terminal, pod_node};
