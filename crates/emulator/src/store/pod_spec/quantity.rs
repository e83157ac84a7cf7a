//! Resource quantities as `k8s.io/apimachinery/pkg/api/resource` parses them, and
//! `validateResourceRequirements`: not negative, whole numbers of extended resources,
//! requests within limits (equal to them for resources that cannot be overcommitted).

use serde_json::Value;

use super::errs::Errs;

const FORMAT: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

/// A parsed quantity: its value in billionths (saturating), and how the server prints it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Quantity {
    pub nanos: i128,
    pub text: String,
}

/// A quantity as JSON carries it: a string or a number.
pub(crate) fn parse_json(v: &Value) -> Result<Quantity, String> {
    match v {
        // The server trims a quantity's JSON string before parsing it (`UnmarshalJSON`).
        Value::String(s) => parse(s.trim()),
        Value::Number(n) => parse(&n.to_string()),
        _ => Err(FORMAT.into()),
    }
}

/// `resource.ParseQuantity`: the server's errors, word for word.
pub(super) fn parse(s: &str) -> Result<Quantity, String> {
    let (negative, rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let digits = |t: &str| t.bytes().take_while(u8::is_ascii_digit).count();
    let whole_len = digits(rest);
    let (whole, mut tail) = rest.split_at(whole_len);
    let mut fraction = "";
    if let Some(after) = tail.strip_prefix('.') {
        let n = digits(after);
        fraction = &after[..n];
        tail = &after[n..];
    }
    // The server's scanner is lenient: "-", "." or "k" are all zero; only "" is refused here.
    if s.is_empty() {
        return Err(FORMAT.into());
    }
    let letters = tail
        .bytes()
        .take_while(|b| b"eEinumkKMGTP".contains(b))
        .count();
    let (_, after_letters) = tail.split_at(letters);
    let signed = after_letters
        .strip_prefix(['-', '+'])
        .unwrap_or(after_letters);
    if digits(signed) != signed.len() {
        return Err(FORMAT.into());
    }
    let (ten, two) = match tail {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        t if t.len() > 1 && t.starts_with(['e', 'E']) => match t[1..].parse::<i32>() {
            Ok(e) => (e, 0),
            Err(_) => return Err("unable to parse quantity's suffix".into()),
        },
        _ => return Err("unable to parse quantity's suffix".into()),
    };
    // Digits scaled to billionths, then by the suffix; past i128 it saturates, and
    // fractions of a billionth round up (the server keeps them; nothing here compares them).
    let mut value: i128 = 0;
    for b in whole.bytes().chain(fraction.bytes()) {
        value = value
            .saturating_mul(10)
            .saturating_add(i128::from(b - b'0'));
    }
    let exponent = ten + 9 - fraction.len() as i32;
    if exponent > 0 {
        value = value.saturating_mul(10i128.saturating_pow(exponent.min(60) as u32));
    } else if exponent < 0 {
        let divisor = 10i128.saturating_pow((-exponent).min(38) as u32);
        value = value / divisor + i128::from(value % divisor != 0);
    }
    value = value.saturating_mul(1i128 << two);
    let value = if negative { -value } else { value };
    Ok(Quantity {
        nanos: value,
        text: canonical(value, two > 0),
    })
}

/// `Quantity.String()`, for the values a template holds: the largest SI suffix (or binary,
/// when written so and whole) that keeps the number whole.
fn canonical(nanos: i128, binary: bool) -> String {
    if nanos == 0 {
        return "0".into();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    if binary && n.is_multiple_of(1_000_000_000) {
        let mut whole = n / 1_000_000_000;
        let mut suffix = 0;
        while whole.is_multiple_of(1024) && suffix < 6 {
            whole /= 1024;
            suffix += 1;
        }
        if suffix > 0 {
            let s = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][suffix];
            return format!("{sign}{whole}{s}");
        }
    }
    let suffixes = ["n", "u", "m", "", "k", "M", "G", "T", "P", "E"];
    let (mut value, mut at) = (n, 0);
    while value % 1000 == 0 && at + 1 < suffixes.len() {
        value /= 1000;
        at += 1;
    }
    format!("{sign}{value}{}", suffixes[at])
}

/// `IsNativeResource`: no domain, or `kubernetes.io/`.
fn native(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

/// Resources the scheduler cannot overcommit: anything not native, and hugepages.
fn overcommit_allowed(name: &str) -> bool {
    native(name) && !name.starts_with("hugepages-")
}

/// `validateResourceRequirements` (quantities only; names are not checked here).
pub(super) fn resources(resources: &Value, at: &str, errs: &mut Errs) {
    let parsed = |k: &str| -> Vec<(String, Quantity)> {
        let map = resources[k].as_object().into_iter().flatten();
        map.filter_map(|(n, v)| Some((n.clone(), parse_json(v).ok()?)))
            .collect()
    };
    let (limits, requests) = (parsed("limits"), parsed("requests"));
    let check = |errs: &mut Errs, field: &str, name: &str, q: &Quantity| {
        if q.nanos < 0 {
            errs.invalid(
                field,
                &format!("{:?}", q.text),
                "must be greater than or equal to 0",
            );
        }
        // `IsIntegerResourceName`: extended resources (a container holds no other kind).
        if !native(name) && q.nanos % 1_000_000_000 != 0 {
            errs.invalid(field, &format!("{:?}", q.text), "must be an integer");
        }
    };
    for (name, q) in &limits {
        check(errs, &format!("{at}.limits[{name}]"), name, q);
    }
    for (name, q) in &requests {
        check(errs, &format!("{at}.requests[{name}]"), name, q);
        let limit = limits.iter().find(|(n, _)| n == name).map(|(_, l)| l);
        let requests_at = format!("{at}.requests");
        match limit {
            Some(l) if q.nanos != l.nanos && !overcommit_allowed(name) => errs.invalid(
                &requests_at,
                &format!("{:?}", q.text),
                &format!("must be equal to {name} limit of {}", l.text),
            ),
            Some(l) if q.nanos > l.nanos => errs.invalid(
                &requests_at,
                &format!("{:?}", q.text),
                &format!("must be less than or equal to {name} limit of {}", l.text),
            ),
            Some(_) => {}
            None if !overcommit_allowed(name) => errs.required(
                &format!("{at}.limits"),
                "Limit must be set for non overcommitable resources",
            ),
            None => {}
        }
    }
}
