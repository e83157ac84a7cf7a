#![forbid(unsafe_code)]
//! Builders for Nodes, Pods and TrainClusters used by tests, property tests and benchmarks,
//! and a [`World`] that drives the planner. Test equipment: only ever a dev-dependency.
//!
//! slice-core's own unit tests compile this very source as their `testing` module (its
//! `lib.rs` names itself `slice_core` for them), so the core's tests and everyone else's use
//! one set of builders with the core's own types.

mod builders;
pub mod requests;
mod world;

pub use builders::*;
pub use world::{World, settled_v6e_world};
