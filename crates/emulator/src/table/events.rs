//! The event table, as kube-apiserver's printer (`printEvent`) builds it for both core/v1
//! and events.k8s.io/v1 (one storage, one printer): LAST SEEN (the age of the last
//! observation; the `(x3 over 5m)` form is kubectl describe's own), TYPE, REASON, OBJECT
//! (`kind/name`), MESSAGE, and at priority 1 SUBOBJECT, SOURCE, FIRST SEEN, COUNT, NAME.

use serde_json::{Value, json};

use super::cells::{column, name_column, since};

pub(crate) fn columns() -> Vec<Value> {
    let mut name = name_column();
    name["priority"] = json!(1);
    vec![
        column(
            "Last Seen",
            "string",
            "",
            "Time when last event from the group was observed.",
            0,
        ),
        column(
            "Type",
            "string",
            "",
            "Type of this event (Normal, Warning), new types could be added in the future.",
            0,
        ),
        column(
            "Reason",
            "string",
            "",
            "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
            0,
        ),
        column(
            "Object",
            "string",
            "",
            "The object that this event is about.",
            0,
        ),
        column(
            "Subobject",
            "string",
            "",
            "The field of the object that this event is about.",
            1,
        ),
        column(
            "Source",
            "string",
            "",
            "The component reporting this event.",
            1,
        ),
        column(
            "Message",
            "string",
            "",
            "A human-readable description of the status of this operation.",
            0,
        ),
        column(
            "First Seen",
            "string",
            "",
            "The time at which the event was first recorded.",
            1,
        ),
        column(
            "Count",
            "string",
            "",
            "The number of times this event has occurred.",
            1,
        ),
        name,
    ]
}

/// The cells of a core/v1 event (an events.k8s.io/v1 one is converted first).
pub(crate) fn cells(ev: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let s = |p: &str| {
        ev.pointer(p)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let first = s("/firstTimestamp").or(s("/eventTime"));
    let series = ev.get("series").filter(|v| !v.is_null());
    let (last_seen, count) = match series {
        Some(series) => (
            since(series["lastObservedTime"].as_str(), now),
            series["count"].as_i64().unwrap_or(0),
        ),
        None => (
            since(s("/lastTimestamp").or(first), now),
            // A singleton event has no count in the new API.
            ev["count"].as_i64().filter(|n| *n != 0).unwrap_or(1),
        ),
    };
    let kind = s("/involvedObject/kind").unwrap_or_default().to_lowercase();
    let object = match s("/involvedObject/name") {
        Some(name) => format!("{kind}/{name}"),
        None => kind,
    };
    let component = s("/source/component").or(s("/reportingComponent"));
    let instance = s("/source/host").or(s("/reportingInstance"));
    let source = match (component.unwrap_or_default(), instance) {
        (c, Some(i)) => format!("{c}, {i}"),
        (c, None) => c.to_string(),
    };
    vec![
        json!(last_seen),
        json!(s("/type").unwrap_or_default()),
        json!(s("/reason").unwrap_or_default()),
        json!(object),
        json!(s("/involvedObject/fieldPath").unwrap_or_default()),
        json!(source),
        json!(s("/message").unwrap_or_default().trim()),
        json!(since(first, now)),
        json!(count),
        json!(s("/metadata/name").unwrap_or_default()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_operator_event_reads_as_kubectl_shows_it() {
        let ev = json!({"metadata": {"name": "demo.1"}, "type": "Normal", "reason": "GroupCreated",
            "involvedObject": {"kind": "TrainCluster", "name": "demo"}, "message": "created group 0",
            "eventTime": "2026-01-01T00:00:00.000000Z", "reportingComponent": "slice-operator"});
        let now = "2026-01-01T00:00:10Z".parse().unwrap();
        let cells = cells(&ev, now);
        assert_eq!(
            &cells[..4],
            &[
                json!("10s"),
                json!("Normal"),
                json!("GroupCreated"),
                json!("traincluster/demo")
            ]
        );
        assert_eq!(cells[5], json!("slice-operator"));
        assert_eq!(cells[6], json!("created group 0"));
        assert_eq!(cells[8], json!(1));
    }

    #[test]
    fn a_series_reads_as_its_last_observation() {
        let ev = json!({"metadata": {"name": "n.2"}, "type": "Normal", "reason": "Resized",
            "involvedObject": {"kind": "Node"}, "message": "m",
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "series": {"count": 3, "lastObservedTime": "2026-01-01T00:00:50.000000Z"},
            "reportingComponent": "slice-operator", "reportingInstance": "op-0"});
        let now = "2026-01-01T00:01:00Z".parse().unwrap();
        let cells = cells(&ev, now);
        assert_eq!(cells[0], json!("10s"));
        assert_eq!(cells[3], json!("node"));
        assert_eq!(cells[5], json!("slice-operator, op-0"));
        assert_eq!((&cells[7], &cells[8]), (&json!("60s"), &json!(3)));
    }
}
