//! A custom resource's table, as apiextensions-apiserver's table convertor builds it: Name,
//! then each `additionalPrinterColumns` entry of the served version (an Age column when
//! the CRD names none), each cell the first result of the column's JSONPath typed by the
//! column's type (a value of another type, or none, is a null cell: kubectl prints
//! `<none>`).

use serde_json::{Value, json};

use super::cells::{AGE, column, name_column, since};
use super::jsonpath::{JsonPath, text};

/// The columns a version defines, or the Age column the server serves when it names none.
fn printer_columns(defined: &[Value]) -> Vec<Value> {
    if defined.is_empty() {
        return vec![
            json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp", "description": AGE}),
        ];
    }
    defined.to_vec()
}

pub(crate) fn columns(defined: &[Value]) -> Vec<Value> {
    let s = |c: &Value, f: &str| c[f].as_str().unwrap_or_default().to_string();
    let mut out = vec![name_column()];
    for c in printer_columns(defined) {
        let path = s(&c, "jsonPath");
        let description = match s(&c, "description") {
            d if d.is_empty() => {
                format!("Custom resource definition column (in JSONPath format): {path}")
            }
            d => d,
        };
        let priority = c["priority"].as_i64().unwrap_or(0);
        out.push(column(
            &s(&c, "name"),
            &s(&c, "type"),
            &s(&c, "format"),
            &description,
            priority,
        ));
    }
    out
}

pub(crate) fn cells(defined: &[Value], obj: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let name = obj
        .pointer("/metadata/name")
        .cloned()
        .unwrap_or(Value::Null);
    let mut cells = vec![name];
    for c in printer_columns(defined) {
        let path = c["jsonPath"].as_str().and_then(JsonPath::parse);
        let found = path.as_ref().and_then(|p| p.first(obj));
        cells.push(found.map_or(Value::Null, |v| {
            typed(c["type"].as_str().unwrap_or_default(), v, now)
        }));
    }
    cells
}

/// `cellForJSONValue`: the value as the column's type, or null. A string column prints any
/// value as a JSONPath template does.
fn typed(kind: &str, v: &Value, now: jiff::Timestamp) -> Value {
    match (kind, v) {
        ("string", v) => json!(text(v)),
        ("integer", Value::Number(n)) => n
            .as_i64()
            .or(n.as_f64().map(|f| f as i64))
            .map_or(Value::Null, |i| json!(i)),
        ("number", Value::Number(n)) => n.as_f64().map_or(Value::Null, |f| json!(f)),
        ("boolean", Value::Bool(b)) => json!(b),
        ("date", Value::String(s)) => json!(since(Some(s), now)),
        _ => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printer_columns_with_values() {
        let defined = vec![
            json!({"name": "Ready", "type": "integer", "jsonPath": ".status.readySlices"}),
            json!({"name": "Phase", "type": "string", "jsonPath": ".status.phase"}),
            json!({"name": "Completed", "type": "date", "jsonPath": ".status.completionTime", "priority": 1}),
            json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}),
        ];
        let obj = json!({"metadata": {"name": "demo", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"readySlices": 3, "phase": "Running"}});
        let now = "2026-01-01T00:02:05Z".parse().unwrap();
        assert_eq!(
            cells(&defined, &obj, now),
            vec![
                json!("demo"),
                json!(3),
                json!("Running"),
                Value::Null,
                json!("2m5s")
            ]
        );
        let cols = columns(&defined);
        assert_eq!(cols.len(), 5);
        assert_eq!(cols[3]["priority"], 1);
        assert_eq!(
            cols[1]["description"],
            "Custom resource definition column (in JSONPath format): .status.readySlices"
        );
        // No columns defined: Name and Age, as the server serves them.
        let bare = columns(&[]);
        assert_eq!(
            bare.iter().map(|c| c["name"].clone()).collect::<Vec<_>>(),
            vec![json!("Name"), json!("Age")]
        );
    }
}
