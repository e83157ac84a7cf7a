//! API errors rendered as `meta/v1 Status` objects, exactly as the real API server does.

use serde_json::{Value, json};

/// An error returned by the emulated API server; rendered as a `Status` (kind Status,
/// apiVersion v1, status Failure) so `kube::Error::Api` parses it.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// Machine-readable reason (`NotFound`, `Conflict`, `Invalid`, ...).
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// Optional `details` object.
    pub details: Option<Value>,
}

/// How a resource is named in messages: `pods` or `foos.example.com`.
pub(crate) fn qualified(plural: &str, group: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

fn details(name: &str, group: &str, kind: &str) -> Value {
    let mut d = json!({ "name": name, "kind": kind });
    if !group.is_empty() {
        d["group"] = json!(group);
    }
    d
}

impl ApiError {
    pub(crate) fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason: reason.to_string(),
            message: message.into(),
            details: None,
        }
    }

    pub(crate) fn not_found(plural: &str, group: &str, name: &str) -> Self {
        let mut e = Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(plural, group)),
        );
        e.details = Some(details(name, group, plural));
        e
    }

    pub(crate) fn already_exists(plural: &str, group: &str, name: &str) -> Self {
        let mut e = Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(plural, group)),
        );
        e.details = Some(details(name, group, plural));
        e
    }

    pub(crate) fn conflict(plural: &str, group: &str, name: &str, why: &str) -> Self {
        let mut e = Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                qualified(plural, group)
            ),
        );
        e.details = Some(details(name, group, plural));
        e
    }

    pub(crate) fn stale(plural: &str, group: &str, name: &str) -> Self {
        Self::conflict(
            plural,
            group,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 Invalid. `causes` are `(field, message)` pairs, each message already of the form
    /// `field: Invalid value: ...`.
    pub(crate) fn invalid(
        kind: &str,
        group: &str,
        name: &str,
        causes: Vec<(String, String)>,
    ) -> Self {
        let qk = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let joined = if causes.len() == 1 {
            causes[0].1.clone()
        } else {
            format!(
                "[{}]",
                causes
                    .iter()
                    .map(|c| c.1.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let mut d = details(name, group, kind);
        d["causes"] = Value::Array(
            causes
                .iter()
                .map(|(field, msg)| {
                    // As `NewInvalid` builds them: the error's type, and its body without the
                    // field (which is a cause of its own).
                    let body = msg.strip_prefix(&format!("{field}: ")).unwrap_or(msg);
                    json!({"reason": cause_reason(body), "message": body, "field": field})
                })
                .collect(),
        );
        let mut e = Self::new(
            422,
            "Invalid",
            format!("{qk} \"{name}\" is invalid: {joined}"),
        );
        e.details = Some(d);
        e
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub(crate) fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub(crate) fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    }

    /// A generic error for a status code (used by fault injection).
    pub(crate) fn for_code(code: u16, message: impl Into<String>) -> Self {
        let reason = match code {
            400 => "BadRequest",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "NotFound",
            409 => "Conflict",
            410 => "Expired",
            422 => "Invalid",
            429 => "TooManyRequests",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "InternalError",
        };
        Self::new(code, reason, message)
    }

    /// The `Status` object for this error.
    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

/// The `field.ErrorType` of a field error, from the way its body begins.
fn cause_reason(body: &str) -> &'static str {
    [
        ("Required value", "FieldValueRequired"),
        ("Duplicate value", "FieldValueDuplicate"),
        ("Not found", "FieldValueNotFound"),
        ("Unsupported value", "FieldValueNotSupported"),
        ("Forbidden", "FieldValueForbidden"),
        ("Too long", "FieldValueTooLong"),
        ("Too many", "FieldValueTooMany"),
    ]
    .into_iter()
    .find(|(start, _)| body.starts_with(start))
    .map_or("FieldValueInvalid", |(_, reason)| reason)
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}
