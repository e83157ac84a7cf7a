//! The part of kube-apiserver's pod validation (`ValidatePodCreate` in
//! `pkg/apis/core/validation`) a controller's rendered pods most often trip over: every
//! pod needs containers, each with a DNS-label name (unique in the pod) and an image, and a
//! known restart policy. Messages and field paths are the real server's.

use serde_json::Value;

/// `(field, message)` causes, empty when the pod spec passes.
pub(super) fn problems(pod: &Value) -> Vec<(String, String)> {
    let spec = &pod["spec"];
    let mut causes = Vec::new();
    let mut required = |field: String| {
        let message = format!("{field}: Required value");
        causes.push((field, message));
    };
    let containers = spec["containers"].as_array().cloned().unwrap_or_default();
    if containers.is_empty() {
        required("spec.containers".into());
    }
    let mut invalid = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (i, c) in containers.iter().enumerate() {
        let at = format!("spec.containers[{i}]");
        match c["name"].as_str().filter(|n| !n.is_empty()) {
            None => required(format!("{at}.name")),
            Some(n) if !is_dns_label(n) => invalid.push((
                format!("{at}.name"),
                format!(
                    "{at}.name: Invalid value: \"{n}\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"
                ),
            )),
            Some(n) if !seen.insert(n.to_string()) => invalid.push((
                format!("{at}.name"),
                format!("{at}.name: Duplicate value: \"{n}\""),
            )),
            Some(_) => {}
        }
        if c["image"].as_str().is_none_or(|s| s.trim().is_empty()) {
            required(format!("{at}.image"));
        }
    }
    if let Some(policy) = spec["restartPolicy"].as_str()
        && !["Always", "OnFailure", "Never"].contains(&policy)
    {
        invalid.push((
            "spec.restartPolicy".into(),
            format!(
                "spec.restartPolicy: Unsupported value: \"{policy}\": supported values: \"Always\", \"OnFailure\", \"Never\""
            ),
        ));
    }
    causes.extend(invalid);
    causes
}

fn is_dns_label(s: &str) -> bool {
    s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pod_needs_named_containers_with_images() {
        let ok = json!({"spec": {"containers": [{"name": "main", "image": "busybox"}]}});
        assert!(problems(&ok).is_empty());
        let none = json!({"spec": {}});
        assert_eq!(problems(&none)[0].1, "spec.containers: Required value");
        let bad = json!({"spec": {"restartPolicy": "Sometimes", "containers": [
            {"name": "main"}, {"name": "main", "image": "x"}, {"name": "Bad_Name", "image": "x"}
        ]}});
        let messages: Vec<_> = problems(&bad).into_iter().map(|(_, m)| m).collect();
        assert_eq!(messages[0], "spec.containers[0].image: Required value");
        assert_eq!(
            messages[1],
            "spec.containers[1].name: Duplicate value: \"main\""
        );
        assert!(messages[2].starts_with("spec.containers[2].name: Invalid value: \"Bad_Name\""));
        assert!(messages[3].starts_with("spec.restartPolicy: Unsupported value: \"Sometimes\""));
    }
}
