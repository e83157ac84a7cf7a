//! The labels the simulator puts on its nodes.

/// Label put on every node the simulator creates (value `"true"`), so a fake kubelet running
/// against a real cluster can restrict itself to fake nodes.
pub const SIM_NODE_LABEL: &str = "sim.slices.dev/fake";
/// Label selector matching the simulator's nodes.
pub const SIM_NODE_SELECTOR: &str = "sim.slices.dev/fake=true";
/// The well-known label a node's hostname is in.
pub(super) const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
