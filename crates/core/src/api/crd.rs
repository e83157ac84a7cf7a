//! The CustomResourceDefinition, generated from the Rust types plus what derive cannot say.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::json;

use super::spec::TrainCluster;

/// Longest TrainCluster name: `<name>-headless` must be a valid Service name (63).
pub const MAX_NAME: usize = 54;

/// The TrainCluster CRD. Beyond the derived schema, `metadata.name` is constrained in the
/// schema itself (the API server allows exactly `name` and `generateName` there), so a bad
/// name is reported on `metadata.name`, not on the object as a whole.
pub fn crd() -> CustomResourceDefinition {
    let mut crd = TrainCluster::crd();
    for version in &mut crd.spec.versions {
        let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        let metadata = json!({
            "type": "object",
            "properties": {"name": {
                "type": "string",
                "maxLength": MAX_NAME,
                "pattern": "^[a-z]([-a-z0-9]*[a-z0-9])?$",
                "description": "A DNS label starting with a letter, at most 54 characters, so that '<name>-headless' is a valid Service name."
            }}
        });
        let properties = schema.properties.get_or_insert_with(Default::default);
        properties.insert(
            "metadata".into(),
            serde_json::from_value(metadata).expect("a valid schema"),
        );
    }
    crd
}
