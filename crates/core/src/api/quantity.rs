//! Resource quantities as the API server parses them (`resource.ParseQuantity`), to check a
//! template before any pod is sent. The emulator holds its own copy (it depends on nothing of
//! the operator); the two keep the server's messages.

/// The server's message for a quantity it cannot parse at all.
pub const FORMAT: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
/// The server's message for an unknown suffix.
pub const SUFFIX: &str = "unable to parse quantity's suffix";

/// A quantity's value in billionths (saturating; fractions of a billionth round up).
pub fn nanos(s: &str) -> Result<i128, &'static str> {
    // The server trims a quantity's JSON string before parsing it.
    let s = s.trim();
    let (negative, rest) = match s.as_bytes().first() {
        None => return Err(FORMAT),
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let digits = |t: &str| t.bytes().take_while(u8::is_ascii_digit).count();
    let (whole, mut tail) = rest.split_at(digits(rest));
    let mut fraction = "";
    if let Some(after) = tail.strip_prefix('.') {
        let n = digits(after);
        fraction = &after[..n];
        tail = &after[n..];
    }
    let letters = tail
        .bytes()
        .take_while(|b| b"eEinumkKMGTP".contains(b))
        .count();
    let signed = tail[letters..]
        .strip_prefix(['-', '+'])
        .unwrap_or(&tail[letters..]);
    if digits(signed) != signed.len() {
        return Err(FORMAT);
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
        t if t.len() > 1 && t.starts_with(['e', 'E']) => {
            (t[1..].parse::<i32>().map_err(|_| SUFFIX)?, 0)
        }
        _ => return Err(SUFFIX),
    };
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
    Ok(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_as_the_server_parses_them() {
        for (text, want) in [
            ("1", 1_000_000_000),
            ("1500m", 1_500_000_000),
            ("1Ki", 1_024_000_000_000),
            ("1e3", 1_000_000_000_000),
            ("0.5", 500_000_000),
            ("-2", -2_000_000_000),
            (" 4 ", 4_000_000_000), // the server trims the JSON string first
        ] {
            assert_eq!(nanos(text), Ok(want), "{text}");
        }
        assert_eq!(nanos("four"), Err(FORMAT));
        assert_eq!(nanos(""), Err(FORMAT));
        assert_eq!(nanos("1mi"), Err(SUFFIX));
    }
}
