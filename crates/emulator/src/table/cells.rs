//! What every table shares: column definitions, and ages as kubectl shows them
//! (apimachinery's `duration.HumanDuration`).

use serde_json::{Value, json};

/// A `TableColumnDefinition`.
pub(crate) fn column(
    name: &str,
    kind: &str,
    format: &str,
    description: &str,
    priority: i64,
) -> Value {
    json!({"name": name, "type": kind, "format": format, "description": description, "priority": priority})
}

/// The Name column every table starts with.
pub(crate) fn name_column() -> Value {
    column(
        "Name",
        "string",
        "name",
        "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
        0,
    )
}

/// The description the server gives an Age column.
pub(crate) const AGE: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// The time since an RFC 3339 timestamp, as the server prints it: `<unknown>` when
/// missing, `<invalid>` when unparsable.
pub(crate) fn since(ts: Option<&str>, now: jiff::Timestamp) -> String {
    match ts
        .filter(|t| !t.is_empty())
        .map(str::parse::<jiff::Timestamp>)
    {
        None => "<unknown>".into(),
        Some(Err(_)) => "<invalid>".into(),
        Some(Ok(t)) => human_duration(now.as_second() - t.as_second()),
    }
}

/// The age of an object (its `metadata.creationTimestamp`).
pub(crate) fn age(obj: &Value, now: jiff::Timestamp) -> String {
    since(
        obj.pointer("/metadata/creationTimestamp")
            .and_then(Value::as_str),
        now,
    )
}

/// `duration.HumanDuration` of a number of seconds.
pub(crate) fn human_duration(secs: i64) -> String {
    let with = |big: i64, unit: &str, small: i64, small_unit: &str| match small {
        0 => format!("{big}{unit}"),
        s => format!("{big}{unit}{s}{small_unit}"),
    };
    let (minutes, hours) = (secs / 60, secs / 3600);
    let days = hours / 24;
    match secs {
        s if s < -1 => "<invalid>".into(),
        s if s < 0 => "0s".into(),
        s if s < 120 => format!("{s}s"),
        _ if minutes < 10 => with(minutes, "m", secs % 60, "s"),
        _ if minutes < 180 => format!("{minutes}m"),
        _ if hours < 8 => with(hours, "h", minutes % 60, "m"),
        _ if hours < 48 => format!("{hours}h"),
        _ if hours < 24 * 8 => with(days, "d", hours % 24, "h"),
        _ if hours < 24 * 365 * 2 => format!("{days}d"),
        _ if hours < 24 * 365 * 8 => with(days / 365, "y", days % 365, "d"),
        _ => format!("{}y", days / 365),
    }
}

/// A string field, or the server's `<none>` for an empty one.
pub(crate) fn or_none(v: Option<&Value>) -> String {
    match v.and_then(Value::as_str) {
        Some(s) if !s.is_empty() => s.to_string(),
        _ => "<none>".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_kubectl_prints_them() {
        let cases = [
            (-5, "<invalid>"),
            (-1, "0s"),
            (59, "59s"),
            (119, "119s"),
            (125, "2m5s"),
            (600, "10m"),
            (3 * 3600 + 60, "3h1m"),
            (30 * 3600, "30h"),
            (3 * 86400 + 3600, "3d1h"),
            (30 * 86400, "30d"),
            (3 * 365 * 86400, "3y"),
        ];
        for (secs, want) in cases {
            assert_eq!(human_duration(secs), want, "{secs}s");
        }
        let now: jiff::Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        assert_eq!(since(Some("2026-01-01T00:00:00Z"), now), "60s");
        assert_eq!(since(None, now), "<unknown>");
    }
}
