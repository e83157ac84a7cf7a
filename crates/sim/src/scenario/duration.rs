//! Durations as scenario files write them: `10s`, `1m30s`, `500ms`, `2h`, `1.5s`, or a bare
//! number of seconds.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Parses `10s`, `1m30s`, `500ms`, `2h`, `1.5s`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("empty duration".into());
    }
    if let Ok(secs) = s.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).map_err(|e| format!("{s:?}: {e}"));
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let (secs, after) = leading_term(s, rest)?;
        total += Duration::try_from_secs_f64(secs).map_err(|e| format!("{s:?}: {e}"))?;
        rest = after;
    }
    Ok(total)
}

/// Splits one `<number><unit>` term off the front of `rest` (a suffix of `s`, which errors
/// quote): its length in seconds and what follows it.
fn leading_term<'a>(s: &str, rest: &'a str) -> Result<(f64, &'a str), String> {
    let num_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("{s:?}: missing unit"))?;
    if num_end == 0 {
        return Err(format!("{s:?}: expected a number"));
    }
    let value: f64 = rest[..num_end]
        .parse()
        .map_err(|_| format!("{s:?}: bad number"))?;
    let after = &rest[num_end..];
    let unit_end = after
        .find(|c: char| c.is_ascii_digit() || c == '.')
        .unwrap_or(after.len());
    let unit = after[..unit_end].trim();
    let secs = match unit {
        "ms" => value / 1000.0,
        "s" | "sec" | "secs" => value,
        "m" | "min" | "mins" => value * 60.0,
        "h" | "hr" | "hrs" => value * 3600.0,
        _ => return Err(format!("{s:?}: unknown unit {unit:?}")),
    };
    Ok((secs, &after[unit_end..]))
}

/// Formats a duration as `1m30s`, `500ms`, `0s`.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    if !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    let mut secs = ms / 1000;
    let mut out = String::new();
    for (unit, size) in [("h", 3600), ("m", 60)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    if secs > 0 {
        out.push_str(&format!("{secs}s"));
    }
    out
}

/// A duration written as `10s` / `1m30s` / `500ms` (or a number of seconds) in YAML.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct SimDuration(pub Duration);

impl Serialize for SimDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(self.0))
    }
}

impl<'de> Deserialize<'de> for SimDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Num(f64),
            Str(String),
        }
        let d = match Raw::deserialize(d)? {
            Raw::Num(n) => Duration::try_from_secs_f64(n).map_err(serde::de::Error::custom)?,
            Raw::Str(s) => parse_duration(&s).map_err(serde::de::Error::custom)?,
        };
        Ok(SimDuration(d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let d = |s| parse_duration(s).unwrap();
        assert_eq!(d("10s"), Duration::from_secs(10));
        assert_eq!(d("1m30s"), Duration::from_secs(90));
        assert_eq!(d("500ms"), Duration::from_millis(500));
        assert_eq!(d("2h"), Duration::from_secs(7200));
        assert_eq!(d("1.5s"), Duration::from_millis(1500));
        assert_eq!(d("3"), Duration::from_secs(3));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("10").is_ok());
        assert!(parse_duration("10x").is_err());
        assert!(parse_duration("s").is_err());
        assert_eq!(format_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format_duration(Duration::ZERO), "0s");
    }

    proptest::proptest! {
        #[test]
        fn duration_round_trip(ms in 0u64..100_000_000) {
            let d = Duration::from_millis(ms);
            proptest::prop_assert_eq!(parse_duration(&format_duration(d)).unwrap(), d);
        }
    }
}
