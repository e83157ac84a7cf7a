#![forbid(unsafe_code)]
//! slice-operator: elastic, multi-host TPU training clusters on Kubernetes.
//!
//! Functional core: [`tpu`] (slice math), [`lean`] (the watched Pods and Nodes, as the
//! planner reads them), [`inventory`] (nodes to slices), [`planner`] (what the cluster
//! should look like next). Imperative shell: [`operator`] (watch, apply).
//! Test and demo infrastructure: [`emulator`] (in-process API server), [`sim`] (fake TPU
//! node pools and kubelet, scenarios).

pub mod api;
pub mod constants;
pub mod emulator;
pub mod error;
pub mod inventory;
pub mod lean;
pub mod operator;
pub mod planner;
pub mod sim;
pub mod simulate;
#[doc(hidden)]
pub mod testing;
pub mod tpu;
