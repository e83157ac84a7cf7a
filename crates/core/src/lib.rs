#![forbid(unsafe_code)]
//! The functional core of slice-operator: pure functions of (spec, observed pods, observed
//! nodes, clock). No IO and no async runtime; this crate's manifest is the proof.
//!
//! * [`api`]: the `TrainCluster` types (the CRD is generated from them) and validation.
//! * [`autoscaling`]: the cluster autoscaler's `ProvisioningRequest`, and its lean view.
//! * [`tpu`]: slice math: accelerator labels, topologies, chips and hosts per slice.
//! * [`lean`]: the watched Pods and Nodes, reduced to the fields the planner reads.
//! * [`fit`]: the scheduler's node filters: could a pod run on a node.
//! * [`inventory`]: Nodes to whole slices: readiness, grace periods, occupancy.
//! * [`planner`]: what the cluster should look like next, as a [`planner::Plan`].
//! * [`owner`]: owner references, read one way: who controls an object.
//! * [`constants`]: every label, annotation, env var name and the field manager.

pub mod api;
pub mod autoscaling;
pub mod constants;
pub mod fit;
pub mod inventory;
pub mod lean;
pub mod owner;
pub mod planner;
/// The test kit (`crates/testkit`), compiled into this crate's own unit tests so that they
/// build objects of this crate's types; everyone else uses it as `slice_testkit`.
#[cfg(test)]
#[path = "../../testkit/src/lib.rs"]
#[allow(dead_code, unused_imports)] // the kit serves every crate; these tests use a part
mod testing;
// The test kit names the core `slice_core`, as every other crate does.
#[cfg(test)]
extern crate self as slice_core;
pub mod tpu;
