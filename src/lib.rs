#![forbid(unsafe_code)]
//! slice-operator: elastic, multi-host TPU training clusters on Kubernetes.

pub mod constants;
pub mod sim;
