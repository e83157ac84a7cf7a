//! The `TrainCluster` custom resource (`slices.dev/v1alpha1`).

mod spec;
mod status;
pub mod validate;

pub use spec::*;
pub use status::*;
