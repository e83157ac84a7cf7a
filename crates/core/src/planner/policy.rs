//! The elastic, slice-granular sizing policy and the restart budget. Pure arithmetic on
//! counts and times, so it can be tested exhaustively.

use jiff::{SignedDuration, Timestamp};

/// The largest slice count that fits `available` within `[.., max]`, restricted to `allowed`
/// when that is non-empty.
pub fn fit(available: u32, max: u32, allowed: &[u32]) -> u32 {
    let cap = available.min(max);
    if allowed.is_empty() {
        cap
    } else {
        allowed
            .iter()
            .copied()
            .filter(|n| *n <= cap)
            .max()
            .unwrap_or(0)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizeDecision {
    pub target: u32,
    /// Fewer than `min` slices are available: nothing runs.
    pub waiting: bool,
    /// When a pending growth may happen (the resize interval has not yet passed).
    pub grow_at: Option<Timestamp>,
}

pub struct SizeInput<'a> {
    pub available: u32,
    pub min: u32,
    pub max: u32,
    pub allowed: &'a [u32],
    pub previous_target: u32,
    pub last_resize: Option<Timestamp>,
    pub resize_interval: SignedDuration,
    pub now: Timestamp,
}

/// Start when at least `min` fit, shrink at once, grow at most once per resize interval.
pub fn decide_size(input: &SizeInput<'_>) -> SizeDecision {
    let candidate = fit(input.available, input.max, input.allowed);
    let hold = |target| SizeDecision {
        target,
        waiting: false,
        grow_at: None,
    };
    if candidate == 0 || candidate < input.min {
        return SizeDecision {
            target: 0,
            waiting: true,
            grow_at: None,
        };
    }
    let previous = input.previous_target;
    if previous == 0 || candidate <= previous {
        return hold(candidate);
    }
    let due = input
        .last_resize
        .and_then(|t| t.saturating_add(input.resize_interval).ok());
    match due {
        Some(due) if due > input.now => SizeDecision {
            target: previous,
            waiting: false,
            grow_at: Some(due),
        },
        _ => hold(candidate),
    }
}

/// Exponential backoff before the `restarts`-th restart: `base * 2^(restarts-1)`, capped.
pub fn backoff(restarts: u32, base: SignedDuration, cap: SignedDuration) -> SignedDuration {
    if restarts == 0 {
        return SignedDuration::ZERO;
    }
    let factor = 1i64
        .checked_shl(restarts.saturating_sub(1).min(62))
        .unwrap_or(i64::MAX);
    let secs = base.as_secs().saturating_mul(factor);
    SignedDuration::from_secs(secs).min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    fn input(
        available: u32,
        previous_target: u32,
        last_resize: Option<i64>,
        now: i64,
    ) -> SizeDecision {
        decide_size(&SizeInput {
            available,
            min: 2,
            max: 4,
            allowed: &[],
            previous_target,
            last_resize: last_resize.map(at),
            resize_interval: SignedDuration::from_secs(60),
            now: at(now),
        })
    }

    #[test]
    fn fit_clamps_and_respects_allowed_counts() {
        assert_eq!(fit(3, 8, &[]), 3);
        assert_eq!(fit(10, 8, &[]), 8);
        assert_eq!(fit(7, 8, &[1, 2, 4, 8]), 4);
        assert_eq!(fit(8, 8, &[1, 2, 4, 8]), 8);
        assert_eq!(fit(0, 8, &[1, 2, 4, 8]), 0);
        assert_eq!(fit(3, 8, &[4, 8]), 0);
    }

    #[test]
    fn waits_below_min_and_starts_at_min() {
        assert_eq!(
            input(1, 0, None, 0),
            SizeDecision {
                target: 0,
                waiting: true,
                grow_at: None
            }
        );
        assert_eq!(input(2, 0, None, 0).target, 2);
        assert_eq!(input(9, 0, None, 0).target, 4, "clamped to max");
    }

    #[test]
    fn shrinks_immediately_even_just_after_a_resize() {
        assert_eq!(input(3, 4, Some(0), 1).target, 3);
        assert!(input(1, 4, Some(0), 1).waiting, "below min waits");
    }

    #[test]
    fn grows_only_after_the_interval() {
        let early = input(4, 3, Some(0), 30);
        assert_eq!(early.target, 3);
        assert_eq!(early.grow_at, Some(at(60)));
        assert_eq!(input(4, 3, Some(0), 60).target, 4);
        assert_eq!(input(4, 3, None, 5).target, 4, "no resize remembered");
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let b = |n| {
            backoff(
                n,
                SignedDuration::from_secs(10),
                SignedDuration::from_secs(300),
            )
            .as_secs()
        };
        assert_eq!(
            [b(0), b(1), b(2), b(3), b(5), b(6), b(40)],
            [0, 10, 20, 40, 160, 300, 300]
        );
    }
}
