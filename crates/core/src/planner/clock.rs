//! Times the planner writes into the status.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// `t` as a status time, rounded up to the whole second: `metav1.Time` is written with
/// seconds only, so the status the planner writes equals the one read back (no endless
/// rewrite of a fraction), and rounding up never ends a wait (backoff, resize interval,
/// cool-down) before the time the planner decided on.
pub(super) fn stamp(t: Timestamp) -> Time {
    let second = t.as_second() + i64::from(t.subsec_nanosecond() > 0);
    Time(Timestamp::from_second(second).unwrap_or(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamped_time_reads_back_equal() {
        let now: Timestamp = "2026-01-01T00:00:10.75Z".parse().unwrap();
        let written = serde_json::to_string(&stamp(now)).unwrap();
        assert_eq!(
            written, "\"2026-01-01T00:00:11Z\"",
            "rounded up, never earlier"
        );
        let read: Time = serde_json::from_str(&written).unwrap();
        assert_eq!(read, stamp(now));
    }

    #[test]
    fn a_whole_second_is_kept() {
        let now: Timestamp = "2026-01-01T00:00:10Z".parse().unwrap();
        assert_eq!(stamp(now), Time(now));
    }
}
