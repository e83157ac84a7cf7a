//! The Priority admission plugin, as kube-apiserver runs it on every pod create: a pod's
//! `priorityClassName` must name a PriorityClass (or a built-in `system-` class), else the
//! create is Forbidden; `priority` and `preemptionPolicy` are filled in from the class; a
//! `priority` the client set that disagrees is Forbidden too. A pod without a class gets the
//! `globalDefault` class, if any, else priority 0.

use serde_json::{Value, json};

use super::state::Store;
use crate::errors::ApiError;

const CLASSES: &str = "priorityclasses.scheduling.k8s.io";
const SYSTEM: [(&str, i64); 2] = [
    ("system-node-critical", 2_000_001_000),
    ("system-cluster-critical", 2_000_000_000),
];

impl Store {
    pub(super) fn admit_priority(&self, pod: &mut Value, name: &str) -> Result<(), ApiError> {
        if !pod.get("spec").is_some_and(Value::is_object) {
            return Ok(()); // refused by validation
        }
        let spec = &pod["spec"];
        let class_name = spec
            .get("priorityClassName")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        let mut default_class = None;
        let (priority, policy) = match class_name {
            Some(class) => self.priority_class(class).ok_or_else(|| {
                forbidden(
                    name,
                    &format!("no PriorityClass with name {class} was found"),
                )
            })?,
            None => match self.global_default() {
                Some((class, value, policy)) => {
                    default_class = Some(class);
                    (value, policy)
                }
                None => (0, None),
            },
        };
        if let (Some(given), Some(computed)) = (
            spec.get("preemptionPolicy").and_then(Value::as_str),
            policy.as_deref(),
        ) && given != computed
        {
            return Err(forbidden(
                name,
                &format!(
                    "the string value of PreemptionPolicy ({given}) must not be provided in pod spec; \
                     priority admission controller computed {computed} from the given PriorityClass name"
                ),
            ));
        }
        if let Some(given) = spec.get("priority").and_then(Value::as_i64)
            && given != priority
        {
            return Err(forbidden(
                name,
                &format!(
                    "the integer value of priority ({given}) must not be provided in pod spec; \
                     priority admission controller computed {priority} from the given PriorityClass name"
                ),
            ));
        }
        let spec = pod["spec"].as_object_mut().expect("pod spec is an object");
        spec.insert("priority".into(), json!(priority));
        if let Some(class) = default_class {
            spec.insert("priorityClassName".into(), json!(class));
        }
        if let Some(policy) = policy {
            spec.insert("preemptionPolicy".into(), json!(policy));
        }
        Ok(())
    }

    /// (value, preemptionPolicy) of a class.
    fn priority_class(&self, name: &str) -> Option<(i64, Option<String>)> {
        if let Some((_, value)) = SYSTEM.iter().find(|(n, _)| *n == name) {
            return Some((*value, Some("PreemptLowerPriority".into())));
        }
        let class = self
            .data
            .get(CLASSES)?
            .get(&(String::new(), name.to_string()))?;
        Some(class_values(class))
    }

    /// (name, value, preemptionPolicy) of the `globalDefault` class.
    fn global_default(&self) -> Option<(String, i64, Option<String>)> {
        let class = self
            .data
            .get(CLASSES)?
            .values()
            .find(|c| c.get("globalDefault").and_then(Value::as_bool) == Some(true))?;
        let name = class.pointer("/metadata/name")?.as_str()?.to_string();
        let (value, policy) = class_values(class);
        Some((name, value, policy))
    }
}

fn class_values(class: &Value) -> (i64, Option<String>) {
    let value = class.get("value").and_then(Value::as_i64).unwrap_or(0);
    let policy = class
        .get("preemptionPolicy")
        .and_then(Value::as_str)
        .unwrap_or("PreemptLowerPriority");
    (value, Some(policy.to_string()))
}

/// A pod create an admission plugin refuses, in the server's words.
pub(super) fn forbidden(pod: &str, why: &str) -> ApiError {
    let mut e = ApiError::new(
        403,
        "Forbidden",
        format!("pods \"{pod}\" is forbidden: {why}"),
    );
    e.details = Some(json!({"name": pod, "kind": "pods"}));
    e
}
