//! Times the planner writes into the status.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// `t` as a status time, to the whole second: `metav1.Time` is written with seconds only, so
/// a status the planner writes equals the one read back (no endless rewrite of a fraction).
pub(super) fn stamp(t: Timestamp) -> Time {
    Time(Timestamp::from_second(t.as_second()).unwrap_or(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamped_time_reads_back_equal() {
        let now: Timestamp = "2026-01-01T00:00:10.75Z".parse().unwrap();
        let written = serde_json::to_string(&stamp(now)).unwrap();
        assert_eq!(written, "\"2026-01-01T00:00:10Z\"");
        let read: Time = serde_json::from_str(&written).unwrap();
        assert_eq!(read, stamp(now));
    }
}
