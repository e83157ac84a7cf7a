//! The walks over objects that field management needs, each guided by a `Shape`: the field
//! set of an applied configuration, the comparison of two objects, merging a configuration
//! into a live object, and removing fields a manager gave up.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::fieldset::FieldSet;
use super::shape::{ListKind, Shape};

/// The fields a configuration sets: its leaves, empty maps, and list items (as members),
/// an atomic list or map as one field.
pub(crate) fn config_fields(config: &Value, shape: &Shape) -> FieldSet {
    let mut out = FieldSet::default();
    fields_of(config, shape, &mut out);
    out
}

fn fields_of(v: &Value, shape: &Shape, node: &mut FieldSet) {
    match v {
        Value::Object(m) if !shape.map_atomic() => {
            for (k, c) in m {
                if shape.ignored(k) {
                    continue;
                }
                let mut child = FieldSet::default();
                let cs = shape.field(k);
                match c {
                    Value::Object(cm) if !cm.is_empty() && !cs.map_atomic() => {
                        fields_of(c, &cs, &mut child)
                    }
                    Value::Array(items) => list_fields(items, &cs, &mut child),
                    _ => child.member = true,
                }
                // A map of only server-managed fields (`metadata: {name}`) sets nothing.
                if !child.is_empty() {
                    node.children.insert(format!("f:{k}"), child);
                }
            }
        }
        _ => node.member = true,
    }
}

fn list_fields(items: &[Value], shape: &Shape, node: &mut FieldSet) {
    let kind = shape.list_kind();
    if kind == ListKind::Atomic {
        node.member = true;
        return;
    }
    let item_shape = shape.items();
    for (i, item) in items.iter().enumerate() {
        let child = node.child(kind.element(item, i));
        child.member = true;
        if item.is_object() {
            fields_of(item, &item_shape, child);
            child.member = true;
        }
    }
}

/// What changed from one object to another.
#[derive(Debug, Default)]
pub(crate) struct Comparison {
    pub added: FieldSet,
    pub removed: FieldSet,
    pub modified: FieldSet,
}

impl Comparison {
    /// Added or modified fields.
    pub fn changed(&self) -> FieldSet {
        let mut c = self.added.clone();
        c.union_with(&self.modified);
        c
    }
}

/// Compares `old` with `new`: leaves added, removed or modified, and containers added or
/// removed (as the server's structured-merge-diff does).
pub(crate) fn compare(old: &Value, new: &Value, shape: &Shape) -> Comparison {
    let mut c = Comparison::default();
    let mut path = Vec::new();
    diff(Some(old), Some(new), shape, &mut path, &mut c);
    c
}

fn is_container(v: &Value, shape: &Shape) -> bool {
    match v {
        Value::Object(_) => !shape.map_atomic(),
        Value::Array(_) => shape.list_kind() != ListKind::Atomic,
        _ => false,
    }
}

fn diff(
    old: Option<&Value>,
    new: Option<&Value>,
    shape: &Shape,
    path: &mut Vec<String>,
    c: &mut Comparison,
) {
    if let (Some(o), Some(n)) = (old, new)
        && o == n
    {
        return; // equal subtrees have no changes: most of an object on most writes
    }
    let container = old.is_none_or(|o| is_container(o, shape))
        && new.is_none_or(|n| is_container(n, shape))
        && match (old, new) {
            (Some(o), Some(n)) => o.is_object() == n.is_object(),
            _ => true,
        };
    if !container {
        match (old, new) {
            (None, Some(_)) => c.added.insert(path),
            (Some(_), None) => c.removed.insert(path),
            (Some(o), Some(n)) if o != n => c.modified.insert(path),
            _ => {}
        }
        return;
    }
    let children = children_of(old, new, shape);
    for (elem, o, n, s) in children {
        path.push(elem);
        diff(o, n, &s, path, c);
        path.pop();
    }
    // The root and `metadata` itself are never owned (the server strips them).
    if path.is_empty() || (path.len() == 1 && path[0] == "f:metadata") {
        return;
    }
    match (old, new) {
        (None, Some(_)) if !shape.present_when_empty() => c.added.insert(path),
        (Some(_), None) => c.removed.insert(path),
        _ => {}
    }
}

type Child<'v, 's> = (String, Option<&'v Value>, Option<&'v Value>, Shape<'s>);

/// The children of two containers of the same kind, matched by path element.
fn children_of<'v, 's>(
    old: Option<&'v Value>,
    new: Option<&'v Value>,
    shape: &Shape<'s>,
) -> Vec<Child<'v, 's>> {
    let mut out: Vec<Child> = Vec::new();
    let is_list = old.or(new).is_some_and(Value::is_array);
    if !is_list {
        let empty = Map::new();
        let om = old.and_then(Value::as_object).unwrap_or(&empty);
        let nm = new.and_then(Value::as_object).unwrap_or(&empty);
        for k in om.keys().chain(nm.keys().filter(|k| !om.contains_key(*k))) {
            if shape.ignored(k) {
                continue;
            }
            let (o, n) = (old.and_then(|v| v.get(k)), new.and_then(|v| v.get(k)));
            out.push((format!("f:{k}"), o, n, shape.field(k)));
        }
        return out;
    }
    let kind = shape.list_kind();
    let item_shape = shape.items();
    let keyed = |v: Option<&'v Value>| -> Vec<(String, &'v Value)> {
        v.and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .enumerate()
                    .map(|(i, x)| (kind.element(x, i), x))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (ol, nl) = (keyed(old), keyed(new));
    let new_by_key: HashMap<&str, &'v Value> = nl.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    let old_keys: HashSet<&str> = ol.iter().map(|(k, _)| k.as_str()).collect();
    for (k, o) in &ol {
        let n = new_by_key.get(k.as_str()).copied();
        out.push((k.clone(), Some(*o), n, item_shape.clone()));
    }
    for (k, n) in &nl {
        if !old_keys.contains(k.as_str()) {
            out.push((k.clone(), None, Some(*n), item_shape.clone()));
        }
    }
    out
}

/// Merges an applied configuration into the live object: maps field by field, list-maps
/// and sets item by item (new items appended), everything else replaced. A `null` in the
/// configuration removes the field.
pub(crate) fn merge(live: &Value, config: &Value, shape: &Shape) -> Value {
    match (live, config) {
        (Value::Object(l), Value::Object(c)) if !shape.map_atomic() => {
            let mut out = l.clone();
            for (k, cv) in c {
                if cv.is_null() {
                    out.remove(k);
                    continue;
                }
                let merged = match out.get(k) {
                    Some(lv) => merge(lv, cv, &shape.field(k)),
                    None => cv.clone(),
                };
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        (Value::Array(l), Value::Array(c)) if shape.list_kind() != ListKind::Atomic => {
            merge_list(l, c, shape)
        }
        _ => config.clone(),
    }
}

fn merge_list(live: &[Value], config: &[Value], shape: &Shape) -> Value {
    let kind = shape.list_kind();
    let item_shape = shape.items();
    let mut out = live.to_vec();
    let mut index: HashMap<String, usize> = out
        .iter()
        .enumerate()
        .map(|(i, x)| (kind.element(x, i), i))
        .collect();
    for (i, item) in config.iter().enumerate() {
        let key = kind.element(item, i);
        match index.get(&key) {
            Some(&j) => out[j] = merge(&out[j], item, &item_shape),
            None => {
                index.insert(key, out.len());
                out.push(item.clone());
            }
        }
    }
    Value::Array(out)
}

/// Removes from `v` the fields in `gone` (fields a manager stopped applying that nobody else
/// owns). A map or list item in `gone` goes only when nothing else is left in it, and a
/// surviving list item keeps its key fields.
pub(crate) fn prune(v: &mut Value, gone: &FieldSet, shape: &Shape) {
    match v {
        Value::Object(m) => {
            for (elem, g) in &gone.children {
                let Some(name) = elem.strip_prefix("f:") else {
                    continue;
                };
                let cs = shape.field(name);
                let Some(cv) = m.get_mut(name) else { continue };
                let was_empty = is_empty(cv);
                prune(cv, g, &cs);
                // As on the server, a map or list emptied by the removal goes too.
                if (g.member && is_empty_or_leaf(cv, &cs)) || (!was_empty && is_empty(cv)) {
                    m.remove(name);
                }
            }
        }
        Value::Array(items) => prune_items(items, gone, shape),
        _ => {}
    }
}

fn prune_items(items: &mut Vec<Value>, gone: &FieldSet, shape: &Shape) {
    let kind = shape.list_kind();
    let keys = kind.key_fields();
    let item_shape = shape.items();
    let mut keep = Vec::with_capacity(items.len());
    for (i, mut item) in std::mem::take(items).into_iter().enumerate() {
        let Some(g) = gone.children.get(&kind.element(&item, i)) else {
            keep.push(item);
            continue;
        };
        let mut g = g.clone();
        for k in &keys {
            g.remove(&format!("f:{k}"));
        }
        prune(&mut item, &g, &item_shape);
        let only_keys = item
            .as_object()
            .is_none_or(|m| m.keys().all(|k| keys.contains(&k.as_str())));
        if !(g.member && only_keys) {
            keep.push(item);
        }
    }
    *items = keep;
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

fn is_empty_or_leaf(v: &Value, shape: &Shape) -> bool {
    match v {
        Value::Object(m) => m.is_empty() || shape.map_atomic(),
        Value::Array(a) => a.is_empty() || shape.list_kind() == ListKind::Atomic,
        _ => true,
    }
}
