//! Defaulting and update rules for built-in types, following the real API server (and its
//! default admission plugins) for the fields operators usually compare against:
//!
//! * Pods: `restartPolicy`, `dnsPolicy`, `schedulerName`, `terminationGracePeriodSeconds`,
//!   `securityContext`, `enableServiceLinks`, `serviceAccountName`/`serviceAccount`
//!   (`default`), `priority` 0 + `preemptionPolicy`, the not-ready/unreachable
//!   `NoExecute` tolerations (300 s), per container `terminationMessagePath`,
//!   `terminationMessagePolicy`, `imagePullPolicy`, `resources` (requests default to
//!   limits), port `protocol`; `status.qosClass` on create. Pod spec updates may only change
//!   container images, `activeDeadlineSeconds`, `tolerations` (additions) and
//!   `schedulingGates` (removals are not distinguished from additions here).
//! * Services: `type`, `sessionAffinity`, a fake `clusterIP`/`clusterIPs` from 10.96.0.0/16
//!   (kept across updates), `ipFamilies`, `ipFamilyPolicy`, `internalTrafficPolicy`, port
//!   `protocol` and `targetPort`.
//!
//! Everything else (e.g. volumes' defaults, probes' defaults, LimitRanger) is not applied.

use serde_json::{Map, Value, json};

use super::errors::ApiError;

fn set_default(m: &mut Map<String, Value>, k: &str, v: Value) {
    if m.get(k).is_none_or(Value::is_null) {
        m.insert(k.to_string(), v);
    }
}

fn default_container(c: &mut Value) {
    let Some(m) = c.as_object_mut() else { return };
    set_default(m, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(m, "terminationMessagePolicy", json!("File"));
    let image = m.get("image").and_then(Value::as_str).unwrap_or("");
    let last = image.rsplit('/').next().unwrap_or("");
    let tag_latest = !image.contains('@') && (!last.contains(':') || last.ends_with(":latest"));
    set_default(
        m,
        "imagePullPolicy",
        json!(if tag_latest { "Always" } else { "IfNotPresent" }),
    );
    set_default(m, "resources", json!({}));
    if let Some(r) = m.get_mut("resources").and_then(Value::as_object_mut)
        && let Some(limits) = r.get("limits").and_then(Value::as_object).cloned()
    {
        let req = r.entry("requests").or_insert_with(|| json!({}));
        if let Some(req) = req.as_object_mut() {
            for (k, v) in limits {
                req.entry(k).or_insert(v);
            }
        }
    }
    if let Some(ports) = m.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            set_default(p, "protocol", json!("TCP"));
        }
    }
}

/// Apply pod spec defaults in place.
pub(crate) fn default_pod(pod: &mut Value) {
    if !pod.get("spec").is_some_and(Value::is_object) {
        pod["spec"] = json!({});
    }
    let spec = pod["spec"].as_object_mut().expect("object");
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "securityContext", json!({}));
    set_default(spec, "enableServiceLinks", json!(true));
    let sa = spec
        .get("serviceAccountName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or("default")
        .to_string();
    spec.insert("serviceAccountName".into(), json!(sa));
    spec.insert("serviceAccount".into(), json!(sa));
    set_default(spec, "priority", json!(0));
    set_default(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
    let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
    if let Some(t) = tolerations.as_array_mut() {
        for key in [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        ] {
            let has = t.iter().any(|x| {
                x.get("key").and_then(Value::as_str) == Some(key)
                    || (x.get("key").is_none()
                        && x.get("operator").and_then(Value::as_str) == Some("Exists"))
            });
            if !has {
                t.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
            }
        }
    }
    for list in ["containers", "initContainers"] {
        if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
            cs.iter_mut().for_each(default_container);
        }
    }
}

/// The pod's QoS class, from its (defaulted) containers.
pub(crate) fn qos_class(pod: &Value) -> &'static str {
    let cs: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|l| pod.pointer(&format!("/spec/{l}")).and_then(Value::as_array))
        .flatten()
        .collect();
    let get =
        |c: &Value, kind: &str, res: &str| c.pointer(&format!("/resources/{kind}/{res}")).cloned();
    let any = cs.iter().any(|c| {
        ["requests", "limits"].iter().any(|k| {
            c.pointer(&format!("/resources/{k}"))
                .and_then(Value::as_object)
                .is_some_and(|m| !m.is_empty())
        })
    });
    if !any {
        return "BestEffort";
    }
    let guaranteed = cs.iter().all(|c| {
        ["cpu", "memory"].iter().all(|r| {
            let l = get(c, "limits", r);
            l.is_some() && l == get(c, "requests", r)
        })
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// Reject pod spec updates the real server forbids.
pub(crate) fn check_pod_update(old: &Value, new: &Value, name: &str) -> Result<(), ApiError> {
    let strip = |v: &Value| -> Value {
        let mut s = v.get("spec").cloned().unwrap_or(json!({}));
        if let Some(m) = s.as_object_mut() {
            for k in ["activeDeadlineSeconds", "tolerations", "schedulingGates"] {
                m.remove(k);
            }
            for list in ["containers", "initContainers"] {
                if let Some(cs) = m.get_mut(list).and_then(Value::as_array_mut) {
                    for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                        c.remove("image");
                    }
                }
            }
        }
        s
    };
    if strip(old) != strip(new) {
        return Err(ApiError::invalid(
            "Pod",
            "",
            name,
            vec![(
                "spec".into(),
                "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)".into(),
            )],
        ));
    }
    Ok(())
}

/// Apply service defaults in place; `old` keeps the allocated clusterIP across updates and
/// `next_ip` allocates a new one.
pub(crate) fn default_service(svc: &mut Value, old: Option<&Value>, next_ip: &mut u32) {
    if !svc.get("spec").is_some_and(Value::is_object) {
        svc["spec"] = json!({});
    }
    let spec = svc["spec"].as_object_mut().expect("object");
    set_default(spec, "type", json!("ClusterIP"));
    set_default(spec, "sessionAffinity", json!("None"));
    if spec.get("type").and_then(Value::as_str) != Some("ExternalName") {
        if spec.get("clusterIP").is_none_or(|v| v.is_null() || v == "") {
            let ip = old
                .and_then(|o| o.pointer("/spec/clusterIP"))
                .cloned()
                .unwrap_or_else(|| {
                    *next_ip += 1;
                    json!(format!(
                        "10.96.{}.{}",
                        (*next_ip >> 8) & 0xff,
                        *next_ip & 0xff
                    ))
                });
            spec.insert("clusterIP".into(), ip);
        }
        let ip = spec["clusterIP"].clone();
        set_default(spec, "clusterIPs", json!([ip]));
        set_default(spec, "ipFamilies", json!(["IPv4"]));
        set_default(spec, "ipFamilyPolicy", json!("SingleStack"));
        set_default(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            set_default(p, "protocol", json!("TCP"));
            if let Some(port) = p.get("port").cloned() {
                set_default(p, "targetPort", port);
            }
        }
    }
}

/// Service validation the API server does on every write that an operator's merge can get
/// wrong: with more than one port, each is named; names are unique, and so is each
/// port/protocol pair (`ValidateService`). 422 in the server's words.
pub(crate) fn check_service(svc: &Value, name: &str) -> Result<(), ApiError> {
    let ports = svc
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut causes = Vec::new();
    let mut names = std::collections::HashSet::new();
    let mut keys = std::collections::HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        let port_name = port.get("name").and_then(Value::as_str).unwrap_or("");
        if ports.len() > 1 && port_name.is_empty() {
            let field = format!("spec.ports[{i}].name");
            causes.push((field.clone(), format!("{field}: Required value")));
        } else if !port_name.is_empty() && !names.insert(port_name.to_string()) {
            let field = format!("spec.ports[{i}].name");
            causes.push((
                field.clone(),
                format!("{field}: Duplicate value: \"{port_name}\""),
            ));
        }
        let key = (port.get("port").cloned(), port.get("protocol").cloned());
        if !keys.insert(key) {
            let field = format!("spec.ports[{i}]");
            let value = serde_json::to_string(port).unwrap_or_default();
            causes.push((field.clone(), format!("{field}: Duplicate value: {value}")));
        }
    }
    if causes.is_empty() {
        return Ok(());
    }
    Err(ApiError::invalid("Service", "", name, causes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_defaults_and_qos() {
        let mut p = json!({"spec": {"containers": [
            {"name": "a", "image": "img:1.0", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
        ]}});
        default_pod(&mut p);
        assert_eq!(p["spec"]["restartPolicy"], "Always");
        assert_eq!(
            p["spec"]["containers"][0]["imagePullPolicy"],
            "IfNotPresent"
        );
        assert_eq!(
            p["spec"]["containers"][0]["resources"]["requests"]["cpu"],
            "1"
        );
        assert_eq!(p["spec"]["tolerations"].as_array().unwrap().len(), 2);
        assert_eq!(qos_class(&p), "Guaranteed");
        let mut b = json!({"spec": {"containers": [{"name": "a", "image": "img"}]}});
        default_pod(&mut b);
        assert_eq!(b["spec"]["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(qos_class(&b), "BestEffort");
        // defaulting is idempotent
        let mut again = b.clone();
        default_pod(&mut again);
        assert_eq!(again, b);
        let mut changed = b.clone();
        changed["spec"]["containers"][0]["image"] = json!("img:2");
        assert!(check_pod_update(&b, &changed, "p").is_ok());
        changed["spec"]["nodeName"] = json!("n1");
        assert!(check_pod_update(&b, &changed, "p").is_err());
    }

    #[test]
    fn service_defaults() {
        let mut ip = 0;
        let mut s = json!({"spec": {"ports": [{"port": 80}]}});
        default_service(&mut s, None, &mut ip);
        assert_eq!(s["spec"]["clusterIP"], "10.96.0.1");
        assert_eq!(s["spec"]["ports"][0]["targetPort"], 80);
        let mut h = json!({"spec": {"clusterIP": "None"}});
        default_service(&mut h, None, &mut ip);
        assert_eq!(h["spec"]["clusterIP"], "None");
        let mut u = json!({"spec": {}});
        default_service(&mut u, Some(&s), &mut ip);
        assert_eq!(u["spec"]["clusterIP"], "10.96.0.1");
    }

    #[test]
    fn service_ports_are_named_and_unique() {
        let svc = |ports: Value| json!({"spec": {"ports": ports}});
        let one = svc(json!([{"port": 80, "protocol": "TCP"}]));
        assert!(
            check_service(&one, "s").is_ok(),
            "a single port may go unnamed"
        );
        let two = svc(json!([{"name": "a", "port": 80, "protocol": "TCP"},
                             {"name": "b", "port": 81, "protocol": "TCP"}]));
        assert!(check_service(&two, "s").is_ok());
        let same_name = svc(json!([{"name": "a", "port": 80, "protocol": "TCP"},
                                   {"name": "a", "port": 81, "protocol": "TCP"}]));
        let e = check_service(&same_name, "s").unwrap_err();
        assert_eq!(e.code, 422);
        assert!(
            e.message
                .contains("spec.ports[1].name: Duplicate value: \"a\""),
            "{}",
            e.message
        );
        let same_port = svc(json!([{"name": "a", "port": 80, "protocol": "TCP"},
                                   {"name": "b", "port": 80, "protocol": "TCP"}]));
        assert!(
            check_service(&same_port, "s")
                .unwrap_err()
                .message
                .contains("spec.ports[1]: Duplicate value")
        );
        let unnamed = svc(json!([{"name": "a", "port": 80}, {"port": 81}]));
        assert!(
            check_service(&unnamed, "s")
                .unwrap_err()
                .message
                .contains("spec.ports[1].name: Required value")
        );
    }
}
