//! The `TrainCluster` custom resource (`slices.dev/v1alpha1`).

mod crd;
mod failure;
mod field_error;
pub mod metadata;
pub mod naming;
mod provisioning;
pub mod quantity;
mod queued_status;
mod spec;
mod status;
pub mod template;
pub mod validate;

pub use crd::crd;
pub use failure::*;
pub use provisioning::*;
pub use queued_status::*;
pub use spec::*;
pub use status::*;
