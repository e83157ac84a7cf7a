//! Events are one resource in two API versions: core/v1 (`involvedObject`, `message`,
//! `source`) and events.k8s.io/v1 (`regarding`, `note`, `reportingController`). The real
//! server keeps them in one storage and converts on read, so an event a controller
//! publishes through events.k8s.io/v1 is what `kubectl describe` finds through core/v1.
//! Here too both versions share one storage key; each object stays in the version it was
//! written in and is converted when read through the other (the field pairs below follow
//! the server's conversion functions).

use std::sync::Arc;

use serde_json::{Map, Value};

/// (events.k8s.io/v1 field, core/v1 field) that carry the same value.
const RENAMED: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

const EVENTS_V1: &str = "events.k8s.io/v1";

/// The object as `api_version` shows it: an event stored in the other version is
/// converted; anything else is returned as stored.
pub(crate) fn view(api_version: &str, obj: &Arc<Value>) -> Arc<Value> {
    let stored = obj["apiVersion"].as_str().unwrap_or_default();
    if obj["kind"] != "Event" || stored == api_version {
        return obj.clone();
    }
    match (stored, api_version) {
        ("v1", EVENTS_V1) => Arc::new(convert(obj, EVENTS_V1, true)),
        (EVENTS_V1, "v1") => Arc::new(convert(obj, "v1", false)),
        _ => obj.clone(),
    }
}

fn convert(obj: &Value, to: &str, core_to_v1: bool) -> Value {
    let mut out: Map<String, Value> = obj.as_object().cloned().unwrap_or_default();
    for &(v1, core) in RENAMED {
        let (from, into) = if core_to_v1 { (core, v1) } else { (v1, core) };
        if let Some(v) = out.remove(from) {
            out.insert(into.to_string(), v);
        }
    }
    out.insert("apiVersion".into(), Value::String(to.into()));
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_events_v1_event_reads_as_core_and_back() {
        let v1 = Arc::new(json!({
            "apiVersion": EVENTS_V1, "kind": "Event", "metadata": {"name": "e"},
            "regarding": {"kind": "TrainCluster", "name": "demo"}, "note": "created",
            "reason": "GroupCreated", "reportingController": "slice-operator",
        }));
        let core = view("v1", &v1);
        assert_eq!(core["involvedObject"]["name"], "demo");
        assert_eq!(core["message"], "created");
        assert_eq!(core["reportingComponent"], "slice-operator");
        assert_eq!(core["reason"], "GroupCreated");
        assert!(core.get("regarding").is_none());
        assert_eq!(*view(EVENTS_V1, &core), *v1);
        // Anything else, or the same version, is the stored object itself.
        assert!(Arc::ptr_eq(&view(EVENTS_V1, &v1), &v1));
    }
}
