//! The core/v1 event table, as kube-apiserver's printer (`printEvent`) builds it: LAST
//! SEEN (with the series' count), TYPE, REASON, OBJECT (`kind/name`), MESSAGE.

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

pub(crate) fn cells(ev: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let s = |p: &str| {
        ev.pointer(p)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let first = s("/firstTimestamp").or(s("/eventTime"));
    let last = s("/lastTimestamp").or(first);
    let last_seen = match (
        ev.pointer("/series/count").and_then(Value::as_i64),
        s("/series/lastObservedTime"),
    ) {
        (Some(n), Some(at)) => {
            format!("{} (x{n} over {})", since(Some(at), now), since(first, now))
        }
        _ => since(last, now),
    };
    let object = format!(
        "{}/{}",
        s("/involvedObject/kind").unwrap_or_default().to_lowercase(),
        s("/involvedObject/name").unwrap_or_default()
    );
    let source = s("/source/component")
        .or(s("/reportingComponent"))
        .unwrap_or_default();
    let count = ev
        .pointer("/series/count")
        .or(ev.pointer("/count"))
        .and_then(Value::as_i64)
        .unwrap_or(1);
    vec![
        json!(last_seen),
        json!(s("/type").unwrap_or_default()),
        json!(s("/reason").unwrap_or_default()),
        json!(object),
        json!(s("/involvedObject/fieldPath").unwrap_or_default()),
        json!(source),
        json!(s("/message").unwrap_or_default().trim()),
        json!(since(first, now)),
        json!(count.to_string()),
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
    }
}
