//! The `TrainCluster` custom resource (`slices.dev/v1alpha1`).

mod crd;
pub mod naming;
mod spec;
mod status;
pub mod validate;

pub use crd::crd;
pub use spec::*;
pub use status::*;
