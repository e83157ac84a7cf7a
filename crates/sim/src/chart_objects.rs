//! What the chart installs beside the operator, for an emulated API server.

use crate::error::SimError;

/// Install into an emulated API server what the chart installs beside the operator: the
/// TrainCluster CRD and the PriorityClass of hot spare placeholders (kube-apiserver's
/// Priority admission refuses pods naming a class that does not exist, and so does the
/// emulator).
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
    Ok(())
}
