//! What the schema says about a field, as far as field management needs it: how a list is
//! merged (atomic, a set, or a map keyed by some of its items' fields) and whether a map is
//! atomic. Custom resources read their CRD's structural schema
//! (`x-kubernetes-list-type`, `x-kubernetes-list-map-keys`, `x-kubernetes-map-type`);
//! built-in kinds know the associative lists of their OpenAPI schema that an operator
//! touches (see `BUILTIN_LISTS`); every other built-in list is atomic.

use serde_json::Value;

/// How a list's items are identified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ListKind {
    /// The list is one value.
    Atomic,
    /// Scalar items identified by their value.
    Set,
    /// Object items identified by these fields.
    Map(Vec<&'static str>),
    /// A custom resource's list-map (keys from the CRD).
    MapOwned(Vec<String>),
}

/// Associative lists of built-in kinds: (kind or `*`, path with `[]` for list items, keys).
/// An empty key list is a set.
const BUILTIN_LISTS: &[(&str, &str, &[&str])] = &[
    ("*", ".metadata.ownerReferences", &["uid"]),
    ("*", ".metadata.finalizers", &[]),
    ("Service", ".spec.ports", &["port", "protocol"]),
    ("Pod", ".spec.containers", &["name"]),
    ("Pod", ".spec.initContainers", &["name"]),
    ("Pod", ".spec.containers[].env", &["name"]),
    ("Pod", ".spec.initContainers[].env", &["name"]),
    (
        "Pod",
        ".spec.containers[].ports",
        &["containerPort", "protocol"],
    ),
    (
        "Pod",
        ".spec.initContainers[].ports",
        &["containerPort", "protocol"],
    ),
    ("Pod", ".spec.containers[].volumeMounts", &["mountPath"]),
    ("Pod", ".spec.initContainers[].volumeMounts", &["mountPath"]),
    ("Pod", ".spec.volumes", &["name"]),
    ("Pod", ".status.conditions", &["type"]),
    ("Node", ".status.conditions", &["type"]),
];

/// Fields of built-in kinds that an empty object of the kind already has (the API types do
/// not omit them when empty), so a create does not own the field itself, only its content.
const BUILTIN_ALWAYS_PRESENT: &[(&str, &str)] = &[("Pod", ".spec.containers")];

/// Atomic maps of built-in kinds (kind, path).
const BUILTIN_ATOMIC_MAPS: &[(&str, &str)] = &[("Service", ".spec.selector")];

/// Key fields with a server default, used when an item leaves them out (as the real server
/// does since the schema declares the default).
pub(crate) fn key_default(field: &str) -> Option<Value> {
    (field == "protocol").then(|| Value::String("TCP".into()))
}

/// A position in an object's schema.
#[derive(Debug, Clone)]
pub(crate) struct Shape<'a> {
    kind: &'a str,
    path: String,
    /// The CRD schema node here (custom resources outside `metadata`).
    crd: Option<&'a Value>,
}

impl<'a> Shape<'a> {
    /// The root of an object of `kind`, with the CRD's `openAPIV3Schema` for custom
    /// resources.
    pub fn root(kind: &'a str, schema: Option<&'a Value>) -> Self {
        Self {
            kind,
            path: String::new(),
            crd: schema,
        }
    }

    pub fn is_root(&self) -> bool {
        self.path.is_empty()
    }

    /// Fields the server leaves out of every field set (they are server-managed).
    pub fn ignored(&self, key: &str) -> bool {
        match self.path.as_str() {
            "" => matches!(key, "apiVersion" | "kind"),
            ".metadata" => matches!(
                key,
                "name"
                    | "namespace"
                    | "creationTimestamp"
                    | "selfLink"
                    | "uid"
                    | "clusterName"
                    | "generation"
                    | "managedFields"
                    | "resourceVersion"
                    | "deletionTimestamp"
                    | "deletionGracePeriodSeconds"
            ),
            _ => false,
        }
    }

    pub fn field(&self, name: &str) -> Shape<'a> {
        let crd = if self.is_root() && name == "metadata" {
            None
        } else {
            self.crd.and_then(|n| {
                n.get("properties")
                    .and_then(|p| p.get(name))
                    .or_else(|| n.get("additionalProperties").filter(|a| a.is_object()))
            })
        };
        Shape {
            kind: self.kind,
            path: format!("{}.{name}", self.path),
            crd,
        }
    }

    pub fn items(&self) -> Shape<'a> {
        Shape {
            kind: self.kind,
            path: format!("{}[]", self.path),
            crd: self.crd.and_then(|n| n.get("items")),
        }
    }

    pub fn list_kind(&self) -> ListKind {
        if let Some(n) = self.crd {
            return match n.get("x-kubernetes-list-type").and_then(Value::as_str) {
                Some("set") => ListKind::Set,
                Some("map") => ListKind::MapOwned(
                    n.get("x-kubernetes-list-map-keys")
                        .and_then(Value::as_array)
                        .map(|a| {
                            a.iter()
                                .filter_map(|k| k.as_str().map(str::to_string))
                                .collect()
                        })
                        .unwrap_or_default(),
                ),
                _ => ListKind::Atomic,
            };
        }
        BUILTIN_LISTS
            .iter()
            .find(|(k, p, _)| (*k == "*" || *k == self.kind) && *p == self.path)
            .map_or(ListKind::Atomic, |(_, _, keys)| {
                if keys.is_empty() {
                    ListKind::Set
                } else {
                    ListKind::Map(keys.to_vec())
                }
            })
    }

    pub fn present_when_empty(&self) -> bool {
        self.crd.is_none()
            && BUILTIN_ALWAYS_PRESENT
                .iter()
                .any(|(k, p)| *k == self.kind && *p == self.path)
    }

    pub fn map_atomic(&self) -> bool {
        match self.crd {
            Some(n) => n.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic"),
            None => BUILTIN_ATOMIC_MAPS
                .iter()
                .any(|(k, p)| *k == self.kind && *p == self.path),
        }
    }
}

impl ListKind {
    fn keys(&self) -> Vec<&str> {
        match self {
            ListKind::Map(k) => k.clone(),
            ListKind::MapOwned(k) => k.iter().map(String::as_str).collect(),
            _ => Vec::new(),
        }
    }

    /// The key fields of a list-map's items (empty for other lists).
    pub fn key_fields(&self) -> Vec<&str> {
        self.keys()
    }

    /// The encoded path element of the `index`th item.
    pub fn element(&self, item: &Value, index: usize) -> String {
        match self {
            ListKind::Atomic => format!("i:{index}"),
            ListKind::Set => format!("v:{item}"),
            ListKind::Map(_) | ListKind::MapOwned(_) => {
                // Keys sorted by name, as the server encodes them.
                let mut keys = self.keys();
                keys.sort_unstable();
                let parts: Vec<String> = keys
                    .iter()
                    .filter_map(|k| {
                        let v = item.get(*k).cloned().or_else(|| key_default(k))?;
                        Some(format!("{}:{v}", Value::String((*k).to_string())))
                    })
                    .collect();
                format!("k:{{{}}}", parts.join(","))
            }
        }
    }
}
