//! Builders for Nodes, Pods and TrainClusters used by tests, property tests, benchmarks and
//! the simulator, and a [`World`] that drives the planner. Not part of the operator's
//! behaviour.

mod builders;
mod world;

pub use builders::*;
pub use world::{World, settled_v6e_world};
