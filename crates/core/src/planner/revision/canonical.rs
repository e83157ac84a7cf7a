//! The canonical text a template hash is taken of. It is written here, not by a serializer:
//! a serializer's output changes with its features (`serde_json`'s `preserve_order`, turned
//! on by any crate in the build), with the typed API's version (a field it now keeps, an
//! optional one written as `null`), and neither may restart a running job.
//!
//! The rules: object keys in byte order; a field whose value is `null` or `[]` is left out
//! (an optional field of a newer API version is `null` until set, and an empty list means
//! what no list means); `{}` is kept, since it is not unset: `labelSelector: {}` selects
//! every pod where no selector selects none, and `emptyDir: {}` is a volume's source;
//! strings are quoted with only `"`, `\` and control characters escaped; numbers as
//! integers where they are, else in Rust's shortest round-trip form.

use serde_json::Value;

/// The canonical text of `value` (empty for a value that is left out).
pub fn text(value: &Value) -> String {
    let mut out = String::new();
    write(value, &mut out);
    out
}

/// A value that means what its absence means.
fn is_unset(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(items) => items.is_empty(),
        _ => false,
    }
}

fn write(value: &Value, out: &mut String) {
    match value {
        Value::Null => {}
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                // A null inside a list keeps its place: positions matter in a list.
                match is_unset(item) {
                    true => out.push_str("null"),
                    false => write(item, out),
                }
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().filter(|k| !is_unset(&map[*k])).collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write(&map[key], out);
            }
            out.push('}');
        }
    }
}

fn write_number(n: &serde_json::Number, out: &mut String) {
    use std::fmt::Write;
    let _ = match (n.as_i64(), n.as_u64(), n.as_f64()) {
        (Some(i), _, _) => write!(out, "{i}"),
        (_, Some(u), _) => write!(out, "{u}"),
        (_, _, Some(f)) => write!(out, "{f:?}"),
        _ => write!(out, "{n}"),
    };
}

fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn keys_are_sorted_and_unset_values_left_out() {
        let value = json!({"b": 1, "a": {"z": null, "y": []}, "c": [null, [], "x\"\n"], "e": null});
        assert_eq!(
            text(&value),
            r#"{"a":{},"b":1,"c":[null,null,"x\"\u000a"]}"#
        );
    }

    /// `{}` is not unset: an empty selector selects every pod (no selector selects none),
    /// and an empty `emptyDir` is a volume's whole source.
    #[test]
    fn an_empty_object_is_kept_apart_from_no_value() {
        let all = json!({"labelSelector": {}, "topologyKey": "zone"});
        let none = json!({"labelSelector": null, "topologyKey": "zone"});
        assert_ne!(text(&all), text(&none));
        assert_eq!(text(&all), r#"{"labelSelector":{},"topologyKey":"zone"}"#);
        let empty_dir = json!({"name": "v", "emptyDir": {}});
        let downward = json!({"name": "v", "downwardAPI": {}});
        assert_ne!(text(&empty_dir), text(&downward));
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|i| json!(i)),
            "[a-z\"\\\\ ]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-d]{1,2}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// The same object with its keys in reverse order (what `preserve_order` would keep).
    fn reversed(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut out = serde_json::Map::new();
                for (k, v) in map.iter().rev() {
                    out.insert(k.clone(), reversed(v));
                }
                Value::Object(out)
            }
            Value::Array(items) => Value::Array(items.iter().map(reversed).collect()),
            other => other.clone(),
        }
    }

    /// Adds a `null` field to every object (a new optional field of a newer API version).
    fn with_nulls(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut out: serde_json::Map<String, Value> = map
                    .iter()
                    .map(|(k, v)| (k.clone(), with_nulls(v)))
                    .collect();
                out.insert("newOptionalField".into(), Value::Null);
                Value::Object(out)
            }
            Value::Array(items) => Value::Array(items.iter().map(with_nulls).collect()),
            other => other.clone(),
        }
    }

    proptest! {
        #[test]
        fn neither_key_order_nor_new_null_fields_change_the_text(v in json_value()) {
            prop_assert_eq!(text(&reversed(&v)), text(&v));
            prop_assert_eq!(text(&with_nulls(&v)), text(&v));
        }
    }
}
