//! Field errors as `k8s.io/apimachinery/pkg/util/validation/field` prints them, and the
//! DNS label rule several fields share.

/// `(field, message)` causes, each message as `field.Error()` prints it.
pub(crate) type Causes = Vec<(String, String)>;

/// Field errors, built as `k8s.io/apimachinery/pkg/util/validation/field` builds them.
#[derive(Default)]
pub(super) struct Errs(pub(super) Causes);

impl Errs {
    fn push(&mut self, field: &str, body: String) {
        self.0.push((field.to_string(), format!("{field}: {body}")));
    }
    pub(super) fn required(&mut self, field: &str, detail: &str) {
        match detail {
            "" => self.push(field, "Required value".into()),
            d => self.push(field, format!("Required value: {d}")),
        }
    }
    /// `value` is the bad value as Go prints it: quoted for strings, bare for numbers.
    pub(super) fn invalid(&mut self, field: &str, value: &str, detail: &str) {
        self.push(field, format!("Invalid value: {value}: {detail}"));
    }
    pub(super) fn duplicate(&mut self, field: &str, value: &str) {
        self.push(field, format!("Duplicate value: {value:?}"));
    }
    pub(super) fn not_found(&mut self, field: &str, value: &str) {
        self.push(field, format!("Not found: {value:?}"));
    }
    pub(super) fn not_supported(&mut self, field: &str, value: &str, supported: &[&str]) {
        let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        self.push(
            field,
            format!(
                "Unsupported value: {value:?}: supported values: {}",
                list.join(", ")
            ),
        );
    }
    /// `ValidateDNS1123Label`: one error per message of `IsDNS1123Label`.
    pub(super) fn dns_label(&mut self, field: &str, value: &str) {
        for message in dns_label_problems(value) {
            self.invalid(field, &format!("{value:?}"), &message);
        }
    }
}

const DNS_LABEL: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

/// `validation.IsDNS1123Label`.
pub(super) fn dns_label_problems(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 63 {
        out.push("must be no more than 63 characters".into());
    }
    let label = |p: &str| {
        !p.is_empty()
            && p.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !p.starts_with('-')
            && !p.ends_with('-')
    };
    if !label(s) {
        match s.split('.').all(label) {
            true => out.push("must not contain dots".into()),
            false => out.push(DNS_LABEL.into()),
        }
    }
    out
}
