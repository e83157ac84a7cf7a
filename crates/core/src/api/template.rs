//! A pod template checked as the API server will check its pods (`ValidatePodSpec`, v1.36),
//! for what a template can get wrong: volume names, container and init container names
//! (DNS labels, unique across both), images, ports, env names, volume mounts and resource
//! quantities, and its labels and annotations ([`super::metadata`]). Each error is the
//! server's own words for the template's field, then the fix, so the cluster is reported
//! `Invalid` before any pod is sent. The emulator holds the same rules on the server's side.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Container, PodTemplateSpec, ResourceRequirements};

use super::field_error::FieldError;
use super::quantity;

const DNS_LABEL: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const ENV_NAME: &str = "a valid environment variable name must consist only of printable ASCII characters other than '='";
const PORT_RANGE: &str = "must be between 1 and 65535, inclusive";

struct Errors<'a> {
    out: &'a mut Vec<FieldError>,
}

impl Errors<'_> {
    fn push(&mut self, field: String, body: String, fix: &str) {
        self.out.push(FieldError {
            field,
            message: format!("{body}; {fix}"),
        });
    }
    fn required(&mut self, field: String, fix: &str) {
        self.push(field, "Required value".into(), fix);
    }
    fn invalid(&mut self, field: String, value: &str, why: &str, fix: &str) {
        self.push(field, format!("Invalid value: {value:?}: {why}"), fix);
    }
    fn duplicate(&mut self, field: String, value: &str, fix: &str) {
        self.push(field, format!("Duplicate value: {value:?}"), fix);
    }
    fn dns_label(&mut self, field: String, value: &str, fix: &str) {
        if let Some(why) = dns_label_problem(value) {
            self.invalid(field, value, why, fix);
        }
    }
}

/// Every problem the API server would find in a pod of `template` (at `at`, the template's
/// field path in the TrainCluster).
pub fn check(template: &PodTemplateSpec, at: &str) -> Vec<FieldError> {
    let mut out = super::metadata::check(template, at);
    let Some(spec) = template.spec.as_ref() else {
        return out;
    };
    let mut errs = Errors { out: &mut out };
    let mut volumes = BTreeSet::new();
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        let field = format!("{at}.spec.volumes[{i}].name");
        let fix = "name each volume with a DNS label unique in the pod";
        let before = errs.out.len();
        match v.name.as_str() {
            "" => errs.required(field.clone(), fix),
            n => errs.dns_label(field.clone(), n, fix),
        }
        if volumes.contains(&v.name) {
            errs.duplicate(field, &v.name, fix);
        }
        if errs.out.len() == before {
            volumes.insert(v.name.clone());
        }
    }
    let mut names = BTreeSet::new();
    let lists = [
        ("containers", spec.containers.as_slice()),
        (
            "initContainers",
            spec.init_containers.as_deref().unwrap_or_default(),
        ),
    ];
    for (list, containers) in lists {
        for (i, c) in containers.iter().enumerate() {
            let at = format!("{at}.spec.{list}[{i}]");
            container(c, &at, &volumes, &mut errs);
            if !names.insert(c.name.as_str()) {
                let fix = "give each container and init container a name of its own";
                errs.duplicate(format!("{at}.name"), &c.name, fix);
            }
        }
    }
    out
}

fn container(c: &Container, at: &str, volumes: &BTreeSet<String>, errs: &mut Errors<'_>) {
    let fix = "name the container with a DNS label (lowercase letters, digits and '-')";
    match c.name.as_str() {
        "" => errs.required(format!("{at}.name"), fix),
        n => errs.dns_label(format!("{at}.name"), n, fix),
    }
    match c.image.as_deref().unwrap_or_default() {
        "" => errs.required(format!("{at}.image"), "set the container's image"),
        i if i.trim() != i => errs.invalid(
            format!("{at}.image"),
            i,
            "must not have leading or trailing whitespace",
            "remove the spaces around the image",
        ),
        _ => {}
    }
    let mut port_names = BTreeSet::new();
    for (i, p) in c.ports.iter().flatten().enumerate() {
        let at = format!("{at}.ports[{i}]");
        if let Some(name) = p.name.as_deref().filter(|n| !n.is_empty()) {
            let fix = "name ports with at most 15 lowercase letters, digits and single '-', at least one letter, unique in the container";
            match port_name_problem(name) {
                Some(why) => errs.invalid(format!("{at}.name"), name, why, fix),
                None if !port_names.insert(name) => errs.duplicate(format!("{at}.name"), name, fix),
                None => {}
            }
        }
        let fix = "use a port number from 1 to 65535";
        match p.container_port {
            0 => errs.required(format!("{at}.containerPort"), fix),
            n if !(1..=65535).contains(&n) => errs.push(
                format!("{at}.containerPort"),
                format!("Invalid value: {n}: {PORT_RANGE}"),
                fix,
            ),
            _ => {}
        }
        if let Some(n) = p.host_port.filter(|n| *n != 0 && !(1..=65535).contains(n)) {
            errs.push(
                format!("{at}.hostPort"),
                format!("Invalid value: {n}: {PORT_RANGE}"),
                fix,
            );
        }
        if let Some(protocol) = p.protocol.as_deref()
            && !["TCP", "UDP", "SCTP"].contains(&protocol)
        {
            errs.push(
                format!("{at}.protocol"),
                format!(
                    "Unsupported value: {protocol:?}: supported values: \"SCTP\", \"TCP\", \"UDP\""
                ),
                "use TCP, UDP or SCTP",
            );
        }
    }
    for (i, e) in c.env.iter().flatten().enumerate() {
        let field = format!("{at}.env[{i}].name");
        let fix = "name the variable with printable ASCII characters other than '='";
        match e.name.as_str() {
            "" => errs.required(field, fix),
            n if !n.bytes().all(|b| (0x20..0x7f).contains(&b) && b != b'=') => {
                errs.invalid(field, n, ENV_NAME, fix)
            }
            _ => {}
        }
    }
    let mut paths = BTreeSet::new();
    for (i, m) in c.volume_mounts.iter().flatten().enumerate() {
        let at = format!("{at}.volumeMounts[{i}]");
        let fix = "mount a volume listed in the template's volumes, or add it there";
        if m.name.is_empty() {
            errs.required(format!("{at}.name"), fix);
        }
        if !volumes.contains(&m.name) {
            errs.push(
                format!("{at}.name"),
                format!("Not found: {:?}", m.name),
                fix,
            );
        }
        let fix = "mount each volume at a path of its own";
        if m.mount_path.is_empty() {
            errs.required(format!("{at}.mountPath"), fix);
        }
        if !paths.insert(m.mount_path.as_str()) {
            errs.invalid(
                format!("{at}.mountPath"),
                &m.mount_path,
                "must be unique",
                fix,
            );
        }
    }
    if let Some(r) = &c.resources {
        resources(r, &format!("{at}.resources"), errs);
    }
}

/// `IsNativeResource`: no domain, or `kubernetes.io/`. Others (`google.com/tpu`) are
/// extended: whole numbers, and a request must equal its limit.
fn native(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

fn resources(r: &ResourceRequirements, at: &str, errs: &mut Errors<'_>) {
    let mut parsed = |kind: &str, map: &Option<std::collections::BTreeMap<String, _>>| {
        let mut values = Vec::new();
        for (name, q) in map.iter().flatten() {
            let q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity = q;
            let field = format!("{at}.{kind}[{name}]");
            let fix = "write a quantity such as 4, 500m or 16Gi";
            match quantity::nanos(&q.0) {
                Err(why) => errs.invalid(field, &q.0, why, fix),
                Ok(n) if n < 0 => {
                    errs.invalid(field, &q.0, "must be greater than or equal to 0", fix)
                }
                Ok(n) if !native(name) && n % 1_000_000_000 != 0 => errs.invalid(
                    field,
                    &q.0,
                    "must be an integer",
                    "extended resources come in whole units",
                ),
                Ok(n) => values.push((name.clone(), n, q.0.clone())),
            }
        }
        values
    };
    let limits = parsed("limits", &r.limits);
    let requests = parsed("requests", &r.requests);
    for (name, n, text) in &requests {
        let limit = limits.iter().find(|(l, _, _)| l == name);
        let overcommit = native(name) && !name.starts_with("hugepages-");
        let field = format!("{at}.requests");
        match limit {
            Some((_, l, lt)) if l != n && !overcommit => errs.invalid(
                field,
                text,
                &format!("must be equal to {name} limit of {lt}"),
                "set the request equal to the limit, or drop the request",
            ),
            Some((_, l, lt)) if n > l => errs.invalid(
                field,
                text,
                &format!("must be less than or equal to {name} limit of {lt}"),
                "lower the request or raise the limit",
            ),
            None if !overcommit && r.limits.as_ref().is_none_or(|m| !m.contains_key(name)) => errs
                .push(
                    format!("{at}.limits"),
                    "Required value: Limit must be set for non overcommitable resources".into(),
                    &format!("set a limit of {name} equal to the request"),
                ),
            _ => {}
        }
    }
}

/// `IsDNS1123Label`'s first complaint, if any.
fn dns_label_problem(s: &str) -> Option<&'static str> {
    let label = |p: &str| {
        !p.is_empty()
            && p.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !p.starts_with('-')
            && !p.ends_with('-')
    };
    if s.len() > 63 {
        Some("must be no more than 63 characters")
    } else if label(s) {
        None
    } else if s.split('.').all(label) {
        Some("must not contain dots")
    } else {
        Some(DNS_LABEL)
    }
}

/// `IsValidPortName`'s first complaint, if any.
fn port_name_problem(name: &str) -> Option<&'static str> {
    let charset = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if name.len() > 15 {
        Some("must be no more than 15 characters")
    } else if !charset {
        Some("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    } else if !name.bytes().any(|b| b.is_ascii_lowercase()) {
        Some("must contain at least one letter (a-z)")
    } else if name.contains("--") {
        Some("must not contain consecutive hyphens")
    } else if name.starts_with('-') || name.ends_with('-') {
        Some("must not begin or end with a hyphen")
    } else {
        None
    }
}

#[cfg(test)]
#[path = "template_tests.rs"]
mod tests;
