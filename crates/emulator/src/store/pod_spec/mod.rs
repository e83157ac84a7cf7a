//! The part of kube-apiserver's pod validation (`ValidatePodSpec` in
//! `pkg/apis/core/validation`, v1.36) a controller's rendered pods most often trip over:
//! volumes (DNS-label names, unique), containers and init containers (DNS-label names unique
//! across both, an image, ports, env names, volume mounts, resources; `container`), and a
//! known restart policy. Field paths, messages and their order are the real server's; an
//! unparseable quantity is the decoder's 400, as there (`quantity`).

mod container;
mod errs;
pub(super) mod quantity;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;

use serde_json::Value;

use errs::{Causes, Errs};

/// Why the API server would not decode this pod at all (a 400 before validation), if so.
pub(super) fn decode_problem(pod: &Value) -> Option<String> {
    let spec = &pod["spec"];
    let lists = ["containers", "initContainers"].into_iter();
    let containers = lists.flat_map(|l| spec[l].as_array().into_iter().flatten());
    let quantities = containers.flat_map(|c| {
        ["limits", "requests"]
            .into_iter()
            .flat_map(|k| c["resources"][k].as_object().into_iter().flatten())
    });
    quantities
        .filter_map(|(_, q)| quantity::parse_json(q).err())
        .map(|e| format!("Pod in version \"v1\" cannot be handled as a Pod: {e}"))
        .next()
}

/// `(field, message)` causes, empty when the pod spec passes.
pub(super) fn problems(pod: &Value) -> Causes {
    let spec = &pod["spec"];
    let mut errs = Errs::default();
    let volumes = volumes(spec, &mut errs);
    let containers = spec["containers"].as_array().cloned().unwrap_or_default();
    if containers.is_empty() {
        errs.required("spec.containers", "");
    }
    let mut names = BTreeSet::new();
    for (i, c) in containers.iter().enumerate() {
        let at = format!("spec.containers[{i}]");
        container::common(c, &at, &volumes, &mut errs);
        let name = c["name"].as_str().unwrap_or_default();
        if !names.insert(name.to_string()) {
            errs.duplicate(&format!("{at}.name"), name);
        }
    }
    let init = spec["initContainers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for (i, c) in init.iter().enumerate() {
        let at = format!("spec.initContainers[{i}]");
        container::common(c, &at, &volumes, &mut errs);
        let name = c["name"].as_str().unwrap_or_default();
        if names.contains(name) {
            errs.duplicate(&format!("{at}.name"), name);
        } else if !name.is_empty() {
            names.insert(name.to_string());
        }
    }
    if let Some(policy) = spec["restartPolicy"].as_str()
        && !["Always", "OnFailure", "Never"].contains(&policy)
    {
        // `validateRestartPolicy` lists them in this order, not sorted.
        errs.not_supported(
            "spec.restartPolicy",
            policy,
            &["Always", "OnFailure", "Never"],
        );
    }
    // `validateContainersOnlyForPod`: for pods, not templates, so after the spec's checks.
    for (list, cs) in [("containers", &containers), ("initContainers", &init)] {
        for (i, c) in cs.iter().enumerate() {
            let image = c["image"].as_str().unwrap_or_default();
            if image.trim() != image {
                let at = format!("spec.{list}[{i}].image");
                errs.invalid(
                    &at,
                    &format!("{image:?}"),
                    "must not have leading or trailing whitespace",
                );
            }
        }
    }
    errs.0
}

/// `ValidateVolumes`: the names of the volumes that passed (mounts may name only those).
fn volumes(spec: &Value, errs: &mut Errs) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (i, v) in spec["volumes"].as_array().into_iter().flatten().enumerate() {
        let at = format!("spec.volumes[{i}].name");
        let name = v["name"].as_str().unwrap_or_default();
        let mut own = Errs::default();
        match name {
            "" => own.required(&at, ""),
            n => own.dns_label(&at, n),
        }
        if names.contains(name) {
            own.duplicate(&at, name);
        }
        if own.0.is_empty() {
            names.insert(name.to_string());
        }
        errs.0.extend(own.0);
    }
    names
}
