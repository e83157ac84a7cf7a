//! What the chart installs beside the operator, for an emulated API server.

use serde::Deserialize;

use crate::error::SimError;

/// The chart rendered at its defaults (`deploy/`, drift-checked by `make test`).
const MANIFESTS: &str = include_str!("../../../deploy/slice-operator.yaml");

/// Install into an emulated API server what the chart installs beside the operator: the
/// TrainCluster CRD, the PriorityClass of hot spare placeholders (kube-apiserver's
/// Priority admission refuses pods naming a class that does not exist, and so does the
/// emulator), and the FlowSchemas that give the operator's requests their API priority.
pub fn install_chart_objects(emulator: &slice_emulator::Emulator) -> Result<(), SimError> {
    use slice_core::constants::{SPARE_PRIORITY_CLASS, SPARE_PRIORITY_VALUE};
    emulator
        .install_crd(&slice_core::api::crd())
        .map_err(|e| SimError::Invalid(format!("installing the CRD: {e}")))?;
    let class = serde_json::json!({
        "metadata": {"name": SPARE_PRIORITY_CLASS},
        "value": SPARE_PRIORITY_VALUE,
        "preemptionPolicy": "Never",
        "globalDefault": false,
    });
    emulator
        .create_object("scheduling.k8s.io/v1", "priorityclasses", None, class)
        .map_err(|e| SimError::Invalid(format!("creating the spare PriorityClass: {e:?}")))?;
    for schema in chart_documents("FlowSchema") {
        emulator
            .create_object(
                "flowcontrol.apiserver.k8s.io/v1",
                "flowschemas",
                None,
                schema,
            )
            .map_err(|e| SimError::Invalid(format!("creating a FlowSchema: {e:?}")))?;
    }
    Ok(())
}

/// The chart's objects of one kind.
pub fn chart_documents(kind: &str) -> Vec<serde_json::Value> {
    serde_yaml::Deserializer::from_str(MANIFESTS)
        .filter_map(|doc| serde_json::Value::deserialize(doc).ok())
        .filter(|doc| doc["kind"] == kind)
        .collect()
}

/// `(namespace, name)` of the ServiceAccount the chart's Deployment runs the operator as.
pub fn operator_service_account() -> (String, String) {
    let deployment = chart_documents("Deployment").into_iter().next();
    let field = |d: &serde_json::Value, path: &[&str]| {
        path.iter()
            .fold(d, |v, k| &v[*k])
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    deployment
        .map(|d| {
            (
                field(&d, &["metadata", "namespace"]),
                field(&d, &["spec", "template", "spec", "serviceAccountName"]),
            )
        })
        .expect("the chart renders a Deployment")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chart_runs_the_operator_as_its_service_account_with_two_flowschemas() {
        assert_eq!(
            operator_service_account(),
            ("slice-operator".to_string(), "slice-operator".to_string())
        );
        let schemas = chart_documents("FlowSchema");
        let levels: Vec<&str> = schemas
            .iter()
            .filter_map(|s| s["spec"]["priorityLevelConfiguration"]["name"].as_str())
            .collect();
        assert_eq!(levels, ["leader-election", "workload-high"]);
    }
}
