#![forbid(unsafe_code)]
//! slice-operator: elastic, multi-host TPU training clusters on Kubernetes.

pub mod api;
pub mod constants;
<<<<<<< HEAD
pub mod error;
pub mod inventory;
pub mod operator;
pub mod planner;
#[doc(hidden)]
pub mod testing;
pub mod tpu;
=======
pub mod emulator;
>>>>>>> emulator
