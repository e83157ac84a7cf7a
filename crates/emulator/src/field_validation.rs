//! `fieldValidation`, as kube-apiserver honours it on create, update and patch: fields the
//! schema does not declare are refused (`Strict`, what kubectl sends by default: a 400 in
//! the server's words, `strict decoding error: unknown field "spec.foo"`, or for a patch
//! a 422 about the object it produced), reported in a `Warning` header (`Warn`, the
//! server's default) or dropped silently (`Ignore`).
//! Either way they are not stored: custom resources are pruned (the `validation` module),
//! built-in kinds lose them as the server's decoding into their Go types does.

use std::collections::HashMap;

use axum::http::{HeaderValue, header};
use axum::response::Response;
use serde_json::Value;

use crate::errors::ApiError;
use crate::openapi::{drop_unknown_fields, unknown_fields};
use crate::store::ResourceInfo;

/// The request's `fieldValidation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Directive {
    Ignore,
    Warn,
    Strict,
}

impl Directive {
    pub(crate) fn from_query(q: &HashMap<String, String>) -> Result<Self, ApiError> {
        match q.get("fieldValidation").map(String::as_str) {
            None | Some("" | "Warn") => Ok(Self::Warn),
            Some("Ignore") => Ok(Self::Ignore),
            Some("Strict") => Ok(Self::Strict),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation: Unsupported value: \"{other}\": supported values: \"Ignore\", \"Strict\", \"Warn\""
            ))),
        }
    }

    /// The warnings to send (`Warn`), or the refusal (`Strict`), for the fields of a created
    /// or updated object.
    pub(crate) fn check(
        self,
        info: &ResourceInfo,
        body: &mut Value,
    ) -> Result<Vec<String>, ApiError> {
        let unknown = self.unknown(info, body);
        if self == Self::Strict && !unknown.is_empty() {
            return Err(ApiError::bad_request(format!(
                "{kind} in version \"{v}\" cannot be handled as a {kind}: strict decoding error: {}",
                unknown.join(", "),
                kind = info.kind,
                v = info.version,
            )));
        }
        Ok(unknown)
    }

    /// The same for a patch (merge, strategic merge or JSON). The server applies the patch,
    /// then strict-decodes the object it produced: a field the patch deletes
    /// (`"dta": null`, how kubectl's apply removes a field gone from the file) is no error,
    /// and one the object keeps is. A refusal is the 422 the server's patcher answers with.
    pub(crate) fn check_patched(
        self,
        info: &ResourceInfo,
        patched: &mut Value,
    ) -> Result<Vec<String>, ApiError> {
        let unknown = self.unknown(info, patched);
        if self == Self::Strict && !unknown.is_empty() {
            let object = serde_json::to_string(&*patched).unwrap_or_default();
            let message = format!(
                "patch: Invalid value: {object:?}: strict decoding error: {}",
                unknown.join(", ")
            );
            return Err(ApiError::invalid(
                "",
                "",
                "",
                vec![("patch".into(), message)],
            ));
        }
        Ok(unknown)
    }

    /// `unknown field "..."` for each field the schema does not declare (none under Ignore).
    /// Unless refused, a built-in kind's object loses those fields, as the server's decoding
    /// into the Go type drops them; custom resources are pruned later (`validation`).
    fn unknown(self, info: &ResourceInfo, obj: &mut Value) -> Vec<String> {
        let found = unknown_fields(info, obj);
        if found.is_empty() {
            return found;
        }
        if self != Self::Strict && info.schema.is_none() {
            drop_unknown_fields(info, obj);
        }
        if self == Self::Ignore {
            return vec![];
        }
        found
            .into_iter()
            .map(|f| format!("unknown field \"{f}\""))
            .collect()
    }
}

/// Adds each warning as a `Warning: 299 - "..."` header, as the server sends them.
pub(crate) fn with_warnings(mut r: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let text = format!("299 - {}", serde_json::Value::String(w.clone()));
        if let Ok(v) = HeaderValue::from_str(&text) {
            r.headers_mut().append(header::WARNING, v);
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strict_refuses_warn_reports_ignore_passes() {
        let pods = ResourceInfo::builtin("", "v1", "pods", "Pod", true, true);
        let pod = json!({"metadata": {"name": "p"}, "spec": {"foo": 1}});
        let e = Directive::Strict
            .check(&pods, &mut pod.clone())
            .unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "Pod in version \"v1\" cannot be handled as a Pod: strict decoding error: unknown field \"spec.foo\""
        );
        assert_eq!(
            Directive::Warn.check(&pods, &mut pod.clone()).unwrap(),
            vec!["unknown field \"spec.foo\""]
        );
        assert!(
            Directive::Ignore
                .check(&pods, &mut pod.clone())
                .unwrap()
                .is_empty()
        );
        let q = [("fieldValidation".to_string(), "Loose".to_string())]
            .into_iter()
            .collect();
        assert_eq!(Directive::from_query(&q).unwrap_err().code, 400);
    }
}
