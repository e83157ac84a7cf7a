//! Server-side printing: the `Table` (meta.k8s.io/v1) a client gets when it asks for one
//! in Accept (`application/json;as=Table;v=v1;g=meta.k8s.io`, as `kubectl get` does).
//! Pods, nodes and events (core/v1 and events.k8s.io/v1) get the columns of
//! kube-apiserver's printers (`pods`, `nodes`, `events`); a custom resource its CRD's
//! `additionalPrinterColumns` (`crd`). Any other kind gets NAME and CREATED AT, the
//! server's table for kinds without a printer: not what the real server prints for the
//! built-in kinds that have one (services, configmaps, namespaces, ...). Every row carries the
//! object as `includeObject` asks: `Metadata` (the default: a PartialObjectMetadata),
//! `Object`, or `None`.

mod cells;
mod crd;
mod events;
mod jsonpath;
mod nodes;
mod pods;

use std::collections::HashMap;

use axum::http::{HeaderMap, header};
use serde_json::{Value, json};

use crate::errors::ApiError;
use crate::event_versions::view;
use crate::store::{Obj, ResourceInfo};

/// What each row carries of its object (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Include {
    None,
    Metadata,
    Object,
}

/// A Table the client asked for: its version and what each row carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TableRequest {
    pub(crate) api_version: &'static str,
    pub(crate) include: Include,
}

impl TableRequest {
    /// The Table the request asks for, if any: the first media type in Accept the server
    /// can give wins, as content negotiation has it.
    pub(crate) fn from(
        headers: &HeaderMap,
        q: &HashMap<String, String>,
    ) -> Result<Option<Self>, ApiError> {
        let accept = headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let Some(api_version) = accept.split(',').find_map(media_type).flatten() else {
            return Ok(None);
        };
        let include = match q.get("includeObject").map(String::as_str) {
            None | Some("" | "Metadata") => Include::Metadata,
            Some("Object") => Include::Object,
            Some("None") => Include::None,
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "includeObject: Unsupported value: \"{other}\": supported values: \"Metadata\", \"None\", \"Object\""
                )));
            }
        };
        Ok(Some(Self {
            api_version,
            include,
        }))
    }

    /// The Content-Type of the answer.
    pub(crate) fn content_type(&self) -> String {
        let v = self.api_version.trim_start_matches("meta.k8s.io/");
        format!("application/json;as=Table;v={v};g=meta.k8s.io")
    }

    /// The Table of `items` (a list's, or one object's), with the list's metadata.
    pub(crate) fn table(&self, info: &ResourceInfo, items: &[Obj], metadata: Value) -> Value {
        let now = jiff::Timestamp::now();
        let rows: Vec<Value> = items.iter().map(|o| self.row(info, o, now)).collect();
        json!({
            "kind": "Table",
            "apiVersion": self.api_version,
            "metadata": metadata,
            "columnDefinitions": columns(info),
            "rows": rows,
        })
    }

    fn row(&self, info: &ResourceInfo, obj: &Obj, now: jiff::Timestamp) -> Value {
        let (cells, conditions) = cells(info, obj, now);
        let object = match self.include {
            Include::None => Value::Null,
            Include::Object => (**obj).clone(),
            Include::Metadata => json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": self.api_version,
                "metadata": obj.get("metadata").cloned().unwrap_or(json!({})),
            }),
        };
        let mut row = json!({"cells": cells, "object": object});
        if let Some(c) = conditions {
            row["conditions"] = c;
        }
        row
    }
}

/// `None` for a media type the server gives as a plain object; `Some(version)` for a
/// Table; skipped (outer `None`) for one it cannot give.
fn media_type(m: &str) -> Option<Option<&'static str>> {
    let mut parts = m.split(';').map(str::trim);
    let base = parts.next().unwrap_or_default();
    if !matches!(base, "application/json" | "application/*" | "*/*") {
        return None;
    }
    let params: HashMap<&str, &str> = parts.filter_map(|p| p.split_once('=')).collect();
    match (params.get("as"), params.get("g"), params.get("v")) {
        (None, _, _) => Some(None),
        (Some(&"Table"), Some(&"meta.k8s.io"), Some(&"v1")) => Some(Some("meta.k8s.io/v1")),
        (Some(&"Table"), Some(&"meta.k8s.io"), Some(&"v1beta1")) => {
            Some(Some("meta.k8s.io/v1beta1"))
        }
        _ => None,
    }
}

fn is_core(info: &ResourceInfo, plural: &str) -> bool {
    info.crd_name.is_none() && info.is("", plural)
}

/// Events in either version: the server prints both with one printer.
fn is_event(info: &ResourceInfo) -> bool {
    is_core(info, "events") || (info.crd_name.is_none() && info.is("events.k8s.io", "events"))
}

fn columns(info: &ResourceInfo) -> Vec<Value> {
    match () {
        _ if info.crd_name.is_some() => crd::columns(&info.printer_columns),
        _ if is_core(info, "pods") => pods::columns(),
        _ if is_core(info, "nodes") => nodes::columns(),
        _ if is_event(info) => events::columns(),
        _ => vec![
            cells::name_column(),
            cells::column("Created At", "date", "", cells::AGE, 0),
        ],
    }
}

fn cells(info: &ResourceInfo, obj: &Obj, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    match () {
        _ if info.crd_name.is_some() => (crd::cells(&info.printer_columns, obj, now), None),
        _ if is_core(info, "pods") => pods::row(obj, now),
        _ if is_core(info, "nodes") => (nodes::cells(obj, now), None),
        _ if is_event(info) => (events::cells(&view("v1", obj), now), None),
        _ => {
            let meta = |f: &str| {
                obj.pointer(&format!("/metadata/{f}"))
                    .cloned()
                    .unwrap_or(Value::Null)
            };
            (vec![meta("name"), meta("creationTimestamp")], None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn request(accept: &str, include: Option<&str>) -> Result<Option<TableRequest>, ApiError> {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, accept.parse().unwrap());
        let q = include
            .map(|i| ("includeObject".to_string(), i.to_string()))
            .into_iter()
            .collect();
        TableRequest::from(&headers, &q)
    }

    const KUBECTL: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

    #[test]
    fn the_accept_header_decides() {
        let t = request(KUBECTL, None).unwrap().unwrap();
        assert_eq!(
            (t.api_version, t.include),
            ("meta.k8s.io/v1", Include::Metadata)
        );
        assert_eq!(request("application/json", None).unwrap(), None);
        assert_eq!(
            request(
                "application/json, application/json;as=Table;v=v1;g=meta.k8s.io",
                None
            )
            .unwrap(),
            None
        );
        assert_eq!(
            request(KUBECTL, Some("None")).unwrap().unwrap().include,
            Include::None
        );
        assert_eq!(request(KUBECTL, Some("bogus")).unwrap_err().code, 400);
    }

    #[test]
    fn rows_carry_what_include_object_asks() {
        let info = ResourceInfo::builtin("", "v1", "configmaps", "ConfigMap", true, false);
        let cm: Obj = Arc::new(
            json!({"metadata": {"name": "c", "creationTimestamp": "2026-01-01T00:00:00Z"}, "data": {"k": "v"}}),
        );
        let table = |include| {
            TableRequest {
                api_version: "meta.k8s.io/v1",
                include,
            }
            .table(
                &info,
                std::slice::from_ref(&cm),
                json!({"resourceVersion": "7"}),
            )
        };
        let t = table(Include::Metadata);
        assert_eq!(t["rows"][0]["cells"], json!(["c", "2026-01-01T00:00:00Z"]));
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert!(t["rows"][0]["object"].get("data").is_none());
        assert_eq!(t["metadata"]["resourceVersion"], "7");
        assert_eq!(
            table(Include::Object)["rows"][0]["object"]["data"]["k"],
            "v"
        );
        assert!(table(Include::None)["rows"][0]["object"].is_null());
    }

    #[test]
    fn events_k8s_io_events_print_as_core_events() {
        let info = ResourceInfo::builtin("events.k8s.io", "v1", "events", "Event", true, false);
        let ev: Obj = Arc::new(json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "demo.1"}, "type": "Normal", "reason": "GroupCreated",
            "regarding": {"kind": "TrainCluster", "name": "demo"}, "note": "created",
            "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "slice-operator"}));
        let request = TableRequest {
            api_version: "meta.k8s.io/v1",
            include: Include::None,
        };
        let t = request.table(&info, std::slice::from_ref(&ev), json!({}));
        assert_eq!(t["columnDefinitions"][0]["name"], "Last Seen");
        let cells = &t["rows"][0]["cells"];
        assert_eq!(cells[3], "traincluster/demo");
        assert_eq!(
            (&cells[5], &cells[6]),
            (&json!("slice-operator"), &json!("created"))
        );
    }
}
