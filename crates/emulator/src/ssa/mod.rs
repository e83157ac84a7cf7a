//! Server-side apply and `metadata.managedFields`, as kube-apiserver keeps them.
//!
//! * `fieldset`: field sets in the `FieldsV1` format.
//! * `shape`: list and map types (CRD structural schema, built-in associative lists).
//! * `tree`: the walks over objects (field set of a configuration, compare, merge, prune).
//! * `entries`: decoding and encoding `managedFields` entries.
//! * `declared`: an applied configuration names only fields the CRD's schema declares.
//! * `manage`: recording updates and applying configurations.

mod declared;
mod entries;
mod fieldset;
mod manage;
mod shape;
mod tree;

pub(crate) use manage::{Ownership, Target, apply, check_config, not_declared, record_update};

#[cfg(test)]
mod tests;
