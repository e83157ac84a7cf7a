//! A pod template's labels and annotations checked as the API server checks a pod's
//! (`ValidateLabels`, `ValidateAnnotations`): they are patched onto running pods, and a patch
//! the server refuses would be refused for every pod at every reconcile. Each error is the
//! server's own words for the template's field, then the fix, so the cluster is reported
//! `Invalid` before any pod is sent or patched.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;

use super::field_error::FieldError;

const QUALIFIED_NAME: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const TOO_MANY_SLASHES: &str = "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')";
const DNS_SUBDOMAIN: &str = "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_VALUE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
/// `TotalAnnotationSizeLimitB`: the keys and values of a pod's annotations together.
const ANNOTATIONS_LIMIT: usize = 256 * 1024;

const KEY_FIX: &str = "use a key of letters, digits, '-', '_' and '.' (at most 63, starting and ending with a letter or digit), optionally after a DNS subdomain prefix and '/'";
const VALUE_FIX: &str = "use a value of at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit (or empty); put free text in an annotation";

/// Every problem the API server would find in the labels and annotations of a pod of
/// `template` (at `at`, the template's field path in the TrainCluster).
pub fn check(template: &PodTemplateSpec, at: &str) -> Vec<FieldError> {
    let mut out = Vec::new();
    let Some(meta) = &template.metadata else {
        return out;
    };
    let empty = BTreeMap::new();
    for (key, value) in meta.labels.as_ref().unwrap_or(&empty) {
        let field = format!("{at}.metadata.labels[{key}]");
        if let Some(why) = qualified_name_problem(key) {
            out.push(invalid(&field, key, &why, KEY_FIX));
        }
        if let Some(why) = label_value_problem(value) {
            out.push(invalid(&field, value, why, VALUE_FIX));
        }
    }
    let annotations = meta.annotations.as_ref().unwrap_or(&empty);
    for key in annotations.keys() {
        if let Some(why) = qualified_name_problem(&key.to_lowercase()) {
            let field = format!("{at}.metadata.annotations[{key}]");
            out.push(invalid(&field, key, &why, KEY_FIX));
        }
    }
    let size: usize = annotations.iter().map(|(k, v)| k.len() + v.len()).sum();
    if size > ANNOTATIONS_LIMIT {
        out.push(FieldError {
            field: format!("{at}.metadata.annotations"),
            message: format!("Too long: may not be more than {ANNOTATIONS_LIMIT} bytes; keep large data out of annotations (a ConfigMap, a volume)"),
        });
    }
    out
}

fn invalid(field: &str, value: &str, why: &str, fix: &str) -> FieldError {
    FieldError {
        field: field.to_string(),
        message: format!("Invalid value: {value:?}: {why}; {fix}"),
    }
}

/// `[A-Za-z0-9]`, then `[-A-Za-z0-9_.]`, ending with `[A-Za-z0-9]`.
fn is_name_part(s: &str) -> bool {
    let edge = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_alphanumeric());
    let inner = |b: u8| b.is_ascii_alphanumeric() || b"-_.".contains(&b);
    edge(s.bytes().next()) && edge(s.bytes().last()) && s.bytes().all(inner)
}

/// `IsDNS1123Subdomain`: lowercase labels joined by dots.
fn is_dns_subdomain(s: &str) -> bool {
    let label = |p: &str| {
        let edge = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        edge(p.bytes().next())
            && edge(p.bytes().last())
            && p.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    s.split('.').all(label)
}

/// `IsQualifiedName`'s complaints, joined as the server joins them.
fn qualified_name_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.split('/').collect::<Vec<_>>()[..] {
        [name] => (None, name),
        [prefix, name] => (Some(prefix), name),
        _ => return Some(TOO_MANY_SLASHES.into()),
    };
    let mut problems = Vec::new();
    match prefix {
        Some("") => problems.push("prefix part must be non-empty".to_string()),
        Some(p) if p.len() > 253 => {
            problems.push("prefix part must be no more than 253 characters".into())
        }
        Some(p) if !is_dns_subdomain(p) => problems.push(DNS_SUBDOMAIN.into()),
        _ => {}
    }
    if name.is_empty() {
        problems.push("name part must be non-empty".into());
    } else if name.len() > 63 {
        problems.push("name part must be no more than 63 characters".into());
    }
    if !name.is_empty() && !is_name_part(name) {
        problems.push(QUALIFIED_NAME.into());
    }
    (!problems.is_empty()).then(|| problems.join(", "))
}

/// `IsValidLabelValue`'s first complaint.
fn label_value_problem(value: &str) -> Option<&'static str> {
    if value.len() > 63 {
        Some("must be no more than 63 characters")
    } else if !value.is_empty() && !is_name_part(value) {
        Some(LABEL_VALUE)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_qualified_names_with_an_optional_subdomain_prefix() {
        for good in ["team", "example.com/team", "a.b_c-D", "x", "A1"] {
            assert_eq!(qualified_name_problem(good), None, "{good}");
        }
        let long = "a".repeat(64);
        for bad in [
            "",
            "-team",
            "team-",
            "a b",
            "Example.com/team",
            "/team",
            "a/b/c",
            &long,
        ] {
            assert!(qualified_name_problem(bad).is_some(), "{bad}");
        }
        let prefix = format!("{}.com/team", "a".repeat(250));
        assert_eq!(
            qualified_name_problem(&prefix).as_deref(),
            Some("prefix part must be no more than 253 characters")
        );
    }

    #[test]
    fn values_are_empty_or_short_names() {
        for good in ["", "ml", "ML_team.1", &"a".repeat(63)] {
            assert_eq!(label_value_problem(good), None, "{good}");
        }
        assert_eq!(label_value_problem("alice@x.com"), Some(LABEL_VALUE));
        assert_eq!(
            label_value_problem(&"a".repeat(64)),
            Some("must be no more than 63 characters")
        );
    }
}
