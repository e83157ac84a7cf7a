//! Field sets in the `FieldsV1` format of `metadata.managedFields`: a tree whose keys are
//! the encoded path elements (`f:name`, `k:{"name":"x"}`, `v:"x"`, `i:0`) and whose nodes
//! may themselves be members (`.` in FieldsV1 when the node also has children).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// A set of field paths.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSet {
    /// The path ending at this node is in the set.
    pub member: bool,
    /// Longer paths, by their next element.
    pub children: BTreeMap<String, FieldSet>,
}

impl FieldSet {
    pub fn is_empty(&self) -> bool {
        !self.member && self.children.is_empty()
    }

    /// The node for `elem` below this one, created when missing.
    pub fn child(&mut self, elem: String) -> &mut FieldSet {
        self.children.entry(elem).or_default()
    }

    /// Adds the path `path` (a list of encoded elements).
    pub fn insert(&mut self, path: &[String]) {
        let mut node = self;
        for e in path {
            node = node.child(e.clone());
        }
        node.member = true;
    }

    pub fn union_with(&mut self, other: &FieldSet) {
        self.member |= other.member;
        for (k, o) in &other.children {
            self.child(k.clone()).union_with(o);
        }
    }

    /// The paths of `self` that are not in `other`.
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && !other.member,
            children: BTreeMap::new(),
        };
        for (k, c) in &self.children {
            let d = match other.children.get(k) {
                Some(o) => c.difference(o),
                None => c.clone(),
            };
            if !d.is_empty() {
                out.children.insert(k.clone(), d);
            }
        }
        out
    }

    /// The paths in both sets.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && other.member,
            children: BTreeMap::new(),
        };
        for (k, c) in &self.children {
            if let Some(o) = other.children.get(k) {
                let i = c.intersection(o);
                if !i.is_empty() {
                    out.children.insert(k.clone(), i);
                }
            }
        }
        out
    }

    /// Removes the subtree at `elem` (a direct child).
    pub fn remove(&mut self, elem: &str) {
        self.children.remove(elem);
    }

    /// Parses a `fieldsV1` object.
    pub fn from_fields_v1(v: &Value) -> FieldSet {
        let mut out = FieldSet::default();
        if let Some(m) = v.as_object() {
            for (k, c) in m {
                if k == "." {
                    out.member = true;
                    continue;
                }
                let mut child = FieldSet::from_fields_v1(c);
                if c.as_object().is_none_or(Map::is_empty) {
                    child.member = true;
                }
                out.children.insert(k.clone(), child);
            }
        }
        out
    }

    /// Renders the set as a `fieldsV1` object.
    pub fn to_fields_v1(&self) -> Value {
        let mut m = Map::new();
        if self.member && !self.children.is_empty() {
            m.insert(".".into(), Value::Object(Map::new()));
        }
        for (k, c) in &self.children {
            m.insert(k.clone(), c.to_fields_v1());
        }
        Value::Object(m)
    }

    /// Every member path, in order, as the server prints them (`.spec.x`, `[name="a"]`).
    pub fn paths(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.collect_paths(&mut String::new(), &mut out);
        out
    }

    fn collect_paths(&self, prefix: &mut String, out: &mut Vec<String>) {
        if self.member {
            out.push(prefix.clone());
        }
        for (k, c) in &self.children {
            let len = prefix.len();
            prefix.push_str(&print_element(k));
            c.collect_paths(prefix, out);
            prefix.truncate(len);
        }
    }
}

/// An encoded path element as the server prints it in paths.
fn print_element(e: &str) -> String {
    if let Some(f) = e.strip_prefix("f:") {
        return format!(".{f}");
    }
    if let Some(i) = e.strip_prefix("i:") {
        return format!("[{i}]");
    }
    if let Some(v) = e.strip_prefix("v:") {
        return format!("[={v}]");
    }
    let keys: Option<Map<String, Value>> = e
        .strip_prefix("k:")
        .and_then(|k| serde_json::from_str(k).ok());
    match keys {
        Some(keys) => {
            let mut parts: Vec<String> = keys.iter().map(|(k, v)| format!("{k}={v}")).collect();
            parts.sort();
            format!("[{}]", parts.join(","))
        }
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_v1_round_trip_and_set_algebra() {
        let v = json!({"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {"f:ports": {"k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:port": {}}}}});
        let s = FieldSet::from_fields_v1(&v);
        assert_eq!(s.to_fields_v1(), v);
        assert_eq!(
            s.paths(),
            vec![
                ".metadata.labels",
                ".metadata.labels.app",
                ".spec.ports[port=80,protocol=\"TCP\"]",
                ".spec.ports[port=80,protocol=\"TCP\"].port",
            ]
        );
        let mut one = FieldSet::default();
        one.insert(&["f:metadata".into(), "f:labels".into(), "f:app".into()]);
        assert_eq!(s.intersection(&one), one);
        let rest = s.difference(&one);
        assert!(rest.intersection(&one).is_empty());
        let mut back = rest.clone();
        back.union_with(&one);
        assert_eq!(back, s);
    }
}
