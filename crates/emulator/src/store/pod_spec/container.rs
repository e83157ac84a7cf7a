//! `validateContainerCommon`: what every container (regular or init) must get right, in the
//! server's order: name, image, ports, env, volume mounts, resources.

use std::collections::BTreeSet;

use serde_json::Value;

use super::errs::Errs;
use super::quantity;

pub(super) fn common(c: &Value, at: &str, volumes: &BTreeSet<String>, errs: &mut Errs) {
    let name = c["name"].as_str().unwrap_or_default();
    match name {
        "" => errs.required(&format!("{at}.name"), ""),
        n => errs.dns_label(&format!("{at}.name"), n),
    }
    if c["image"].as_str().unwrap_or_default().is_empty() {
        errs.required(&format!("{at}.image"), "");
    }
    ports(&c["ports"], &format!("{at}.ports"), errs);
    env(&c["env"], &format!("{at}.env"), errs);
    mounts(
        &c["volumeMounts"],
        &format!("{at}.volumeMounts"),
        volumes,
        errs,
    );
    quantity::resources(&c["resources"], &format!("{at}.resources"), errs);
}

/// `validateContainerPorts` (a missing protocol is defaulted to TCP before validation).
fn ports(ports: &Value, at: &str, errs: &mut Errs) {
    let mut names = BTreeSet::new();
    for (i, p) in ports.as_array().into_iter().flatten().enumerate() {
        let at = format!("{at}[{i}]");
        let name = p["name"].as_str().unwrap_or_default();
        if !name.is_empty() {
            let problems = port_name_problems(name);
            for m in &problems {
                errs.invalid(&format!("{at}.name"), &format!("{name:?}"), m);
            }
            if problems.is_empty() && !names.insert(name) {
                errs.duplicate(&format!("{at}.name"), name);
            }
        }
        match p["containerPort"].as_i64().unwrap_or(0) {
            0 => errs.required(&format!("{at}.containerPort"), ""),
            n if !(1..=65535).contains(&n) => errs.invalid(
                &format!("{at}.containerPort"),
                &n.to_string(),
                "must be between 1 and 65535, inclusive",
            ),
            _ => {}
        }
        match p["hostPort"].as_i64().unwrap_or(0) {
            n if n != 0 && !(1..=65535).contains(&n) => errs.invalid(
                &format!("{at}.hostPort"),
                &n.to_string(),
                "must be between 1 and 65535, inclusive",
            ),
            _ => {}
        }
        let protocol = p["protocol"].as_str().unwrap_or("TCP");
        match protocol {
            "TCP" | "UDP" | "SCTP" => {}
            "" => errs.required(&format!("{at}.protocol"), ""),
            other => errs.not_supported(&format!("{at}.protocol"), other, &["SCTP", "TCP", "UDP"]),
        }
    }
}

/// `validation.IsValidPortName` (an IANA_SVC_NAME).
pub(super) fn port_name_problems(name: &str) -> Vec<&'static str> {
    let mut out = Vec::new();
    if name.len() > 15 {
        out.push("must be no more than 15 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        out.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)");
    }
    if !name.bytes().any(|b| b.is_ascii_lowercase()) {
        out.push("must contain at least one letter (a-z)");
    }
    if name.contains("--") {
        out.push("must not contain consecutive hyphens");
    }
    if name.starts_with('-') || name.ends_with('-') {
        out.push("must not begin or end with a hyphen");
    }
    out
}

/// `ValidateEnv` with the relaxed names of v1.34 and later (`IsRelaxedEnvVarName`, the
/// `RelaxedEnvironmentVariableValidation` gate locked on).
fn env(env: &Value, at: &str, errs: &mut Errs) {
    for (i, e) in env.as_array().into_iter().flatten().enumerate() {
        let at = format!("{at}[{i}].name");
        match e["name"].as_str().unwrap_or_default() {
            "" => errs.required(&at, ""),
            n if !n.bytes().all(|b| (0x20..0x7f).contains(&b) && b != b'=') => errs.invalid(
                &at,
                &format!("{n:?}"),
                "a valid environment variable name must consist only of printable ASCII characters other than '='",
            ),
            _ => {}
        }
    }
}

/// `ValidateVolumeMounts`: each mount names a volume of the pod, at a path of its own.
fn mounts(mounts: &Value, at: &str, volumes: &BTreeSet<String>, errs: &mut Errs) {
    let mut paths = BTreeSet::new();
    for (i, m) in mounts.as_array().into_iter().flatten().enumerate() {
        let at = format!("{at}[{i}]");
        let name = m["name"].as_str().unwrap_or_default();
        if name.is_empty() {
            errs.required(&format!("{at}.name"), "");
        }
        if !volumes.contains(name) {
            errs.not_found(&format!("{at}.name"), name);
        }
        let path = m["mountPath"].as_str().unwrap_or_default();
        if path.is_empty() {
            errs.required(&format!("{at}.mountPath"), "");
        }
        if !paths.insert(path) {
            errs.invalid(
                &format!("{at}.mountPath"),
                &format!("{path:?}"),
                "must be unique",
            );
        }
    }
}
