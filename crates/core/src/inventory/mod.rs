//! Node inventory: which whole TPU slices exist, whether they are ready, and who holds them.
//!
//! Built from the Nodes carrying the GKE TPU accelerator label and the pods the operator sees.
//! One multi-host slice is one node pool; a single-host slice is one node.

mod fit;
mod live;
mod nodes;
mod occupancy;
mod partition;
mod types;
pub use live::LiveInventory;
pub(crate) use nodes::is_terminal;
pub use nodes::node_health;
pub use occupancy::{ForeignUse, Holder, Occupancy, train_cluster_owner};
pub use types::{Inventory, NodeHealth, NodeState, Slice, ZoneCount};

#[cfg(test)]
mod tests;
