//! Field management on writes, as kube-apiserver does it (structured-merge-diff): an
//! `Update` entry for what a create, update or non-apply patch changed, and server-side
//! apply with ownership, conflicts, `force`, and removal of fields a manager stops applying.

use serde_json::{Value, json};

use super::entries::{Entry, decode, encode};
use super::fieldset::FieldSet;
use super::shape::Shape;
use super::tree::{compare, config_fields, merge, prune};
use crate::errors::ApiError;

/// Who a write records as the owner of the fields it changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ownership<'a> {
    /// Nobody: a write of the emulator's own (seeding, CRD install); `managedFields` stay.
    Untracked,
    /// An `Update` entry of this manager (create, update, non-apply patch).
    Update(&'a str),
    /// The object carries the `managedFields` server-side apply computed.
    Applied,
}

/// The resource a write goes to.
#[derive(Debug, Clone)]
pub(crate) struct Target<'a> {
    pub kind: &'a str,
    pub api_version: String,
    /// A custom resource's `openAPIV3Schema`.
    pub schema: Option<&'a Value>,
    /// The kind has a `/status` subresource.
    pub has_status: bool,
    /// The write goes through this subresource (`status`).
    pub subresource: Option<&'a str>,
}

impl Target<'_> {
    fn shape(&self) -> Shape<'_> {
        Shape::root(self.kind, self.schema)
    }

    /// Keeps the fields this endpoint may own: only `.status` through `/status`, all but
    /// `.status` through the main endpoint of a kind with a status subresource.
    fn scope(&self, set: &mut FieldSet) {
        if self.subresource == Some("status") {
            set.children.retain(|k, _| k == "f:status");
        } else if self.has_status {
            set.remove("f:status");
        }
    }

    fn scope_config(&self, config: &mut Value) {
        let Some(m) = config.as_object_mut() else {
            return;
        };
        if self.subresource == Some("status") {
            m.retain(|k, _| matches!(k.as_str(), "status" | "apiVersion" | "kind"));
        } else if self.has_status {
            m.remove("status");
        }
    }
}

fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The object a create is compared with: built-in kinds start with their top-level structs
/// (so, as on the real server, `f:spec` is not itself owned), custom resources with nothing.
fn empty_like(t: &Target, new: &Value) -> Value {
    let mut base = json!({});
    if t.schema.is_none() {
        for k in ["metadata", "spec", "status"] {
            if new.get(k).is_some_and(Value::is_object) {
                base[k] = json!({});
            }
        }
    }
    base
}

/// Records in `new.metadata.managedFields` that `manager` changed what differs from `old`
/// (`None` for a create): its `Update` entry gains those fields, every other entry loses
/// them (and fields that were removed).
pub(crate) fn record_update(t: &Target, old: Option<&Value>, new: &mut Value, manager: &str) {
    let empty;
    let base = match old {
        Some(o) => o,
        None => {
            empty = empty_like(t, new);
            &empty
        }
    };
    let cmp = compare(base, new, &t.shape());
    let mut changed = cmp.changed();
    t.scope(&mut changed);
    if changed.is_empty() && cmp.removed.is_empty() {
        return; // nothing changed hands: `new` keeps the stored entries
    }
    let mut entries = old.map(decode).unwrap_or_default();
    for e in &mut entries {
        e.fields = e.fields.difference(&changed).difference(&cmp.removed);
    }
    if !changed.is_empty() {
        let sub = t.subresource;
        match entries
            .iter_mut()
            .find(|e| e.is(manager, "Update", &t.api_version, sub))
        {
            Some(e) => {
                e.fields.union_with(&changed);
                e.time = Some(now());
            }
            None => entries.push(Entry {
                manager: manager.to_string(),
                operation: "Update".into(),
                api_version: t.api_version.clone(),
                time: Some(now()),
                subresource: sub.map(str::to_string),
                fields: changed,
            }),
        }
    }
    encode(new, entries);
}

/// Checks an applied configuration as the server does before merging it.
pub(crate) fn check_config(
    t: &Target,
    config: &Value,
    ns: &str,
    name: &str,
) -> Result<(), ApiError> {
    let version = config
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    if version != t.api_version.as_str() {
        return Err(ApiError::bad_request(format!(
            "Incorrect version specified in apply patch. Specified patch version: {version}, expected: {}",
            t.api_version
        )));
    }
    if config.pointer("/metadata/managedFields").is_some() {
        return Err(ApiError::bad_request("metadata.managedFields must be nil"));
    }
    let kind = config.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind != t.kind {
        let (group, v) = version.split_once('/').unwrap_or(("", version));
        let gvk = format!("{group}/{v}, Kind={kind}");
        return Err(ApiError::bad_request(format!(
            "failed to create typed patch object ({ns}/{name}; {gvk}): no corresponding type for {gvk}"
        )));
    }
    if let Some(path) = t
        .schema
        .and_then(|s| super::declared::undeclared(config, s))
    {
        return Err(not_declared(config, ns, name, &path));
    }
    Ok(())
}

/// The server's refusal of an applied configuration naming a field (`.spec.foo`) its
/// schema does not declare.
pub(crate) fn not_declared(config: &Value, ns: &str, name: &str, path: &str) -> ApiError {
    let s = |f: &str| config.get(f).and_then(Value::as_str).unwrap_or("");
    let (version, kind) = (s("apiVersion"), s("kind"));
    let (group, v) = version.split_once('/').unwrap_or(("", version));
    // kube-apiserver answers this with a bare error: HTTP 500, no reason.
    ApiError::new(
        500,
        "",
        format!(
            "failed to create typed patch object ({ns}/{name}; {group}/{v}, Kind={kind}): {path}: field not declared in schema"
        ),
    )
}

/// Server-side apply of `config` by `manager` to `live` (`None`: the object is created).
/// Returns the merged object, its `managedFields` set; 409 on conflicts unless `force`.
pub(crate) fn apply(
    t: &Target,
    live: Option<&Value>,
    mut config: Value,
    manager: &str,
    force: bool,
) -> Result<Value, ApiError> {
    t.scope_config(&mut config);
    let shape = t.shape();
    let base = live.cloned().unwrap_or_else(|| json!({}));
    let mut entries = decode(&base);
    let mut merged = merge(&base, &config, &shape);
    let mut applied = config_fields(&config, &shape);
    t.scope(&mut applied);
    let sub = t.subresource;
    let mine = match entries.iter().position(|e| e.is(manager, "Apply", "", sub)) {
        Some(i) => i,
        None => {
            entries.push(Entry {
                manager: manager.to_string(),
                operation: "Apply".into(),
                api_version: t.api_version.clone(),
                time: None,
                subresource: sub.map(str::to_string),
                fields: FieldSet::default(),
            });
            entries.len() - 1
        }
    };
    let last = std::mem::replace(&mut entries[mine].fields, applied.clone());
    entries[mine].api_version = t.api_version.to_string();
    let mut owned = FieldSet::default();
    entries.iter().for_each(|e| owned.union_with(&e.fields));
    prune(&mut merged, &last.difference(&owned), &shape);
    let cmp = compare(&base, &merged, &shape);
    let changed = cmp.changed();
    let conflicts: Vec<(String, FieldSet)> = entries
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != mine)
        .map(|(_, e)| (e.describe(), e.fields.intersection(&changed)))
        .filter(|(_, c)| !c.is_empty())
        .collect();
    if !force && !conflicts.is_empty() {
        return Err(conflict_error(&conflicts));
    }
    for (i, e) in entries.iter_mut().enumerate() {
        if i != mine {
            e.fields = e.fields.difference(&changed).difference(&cmp.removed);
        }
    }
    let object_changed =
        !cmp.added.is_empty() || !cmp.removed.is_empty() || !cmp.modified.is_empty();
    if object_changed || entries[mine].time.is_none() || last != applied {
        entries[mine].time = Some(now());
    }
    encode(&mut merged, entries);
    Ok(merged)
}

/// 409 Conflict, worded as the server words it.
fn conflict_error(conflicts: &[(String, FieldSet)]) -> ApiError {
    let mut all: Vec<(&str, String)> = Vec::new();
    for (who, set) in conflicts {
        for p in set.paths() {
            all.push((who, p));
        }
    }
    all.sort();
    let message = if all.len() == 1 {
        format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            all[0].0, all[0].1
        )
    } else {
        let mut lines = Vec::new();
        let mut current = "";
        for (who, path) in &all {
            if *who != current {
                lines.push(format!("conflict with {who}:"));
                current = who;
            }
            lines.push(format!("- {path}"));
        }
        format!(
            "Apply failed with {} conflicts: {}",
            all.len(),
            lines.join("\n")
        )
    };
    let causes: Vec<Value> = all
        .iter()
        .map(|(who, path)| {
            json!({"reason": "FieldManagerConflict", "message": format!("conflict with {who}"), "field": path})
        })
        .collect();
    let mut e = ApiError::new(409, "Conflict", message);
    e.details = Some(json!({ "causes": causes }));
    e
}
