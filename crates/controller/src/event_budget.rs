//! The per-object event limit: client-go's event spam filter (a burst of 25, then one every
//! 5 minutes per object). Events over it are dropped; the status conditions still say what
//! happened.

use std::time::{Duration, Instant};

/// Events one object may emit at once.
pub const EVENT_BURST: u32 = 25;
/// How often one more event is allowed after the burst.
pub const EVENT_REFILL: Duration = Duration::from_secs(300);

/// A token bucket: [`EVENT_BURST`] tokens, one more every [`EVENT_REFILL`].
#[derive(Debug)]
pub struct EventBudget {
    tokens: u32,
    refilled: Instant,
}

impl EventBudget {
    pub fn new(now: Instant) -> EventBudget {
        EventBudget {
            tokens: EVENT_BURST,
            refilled: now,
        }
    }

    /// Take one token if there is one.
    pub fn take(&mut self, now: Instant) -> bool {
        let earned = now.duration_since(self.refilled).as_secs() / EVENT_REFILL.as_secs();
        if earned > 0 {
            self.tokens = (self.tokens as u64 + earned).min(EVENT_BURST as u64) as u32;
            self.refilled += EVENT_REFILL * earned as u32;
        }
        if self.tokens == 0 {
            return false;
        }
        self.tokens -= 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_one_event_per_refill() {
        let start = Instant::now();
        let mut budget = EventBudget::new(start);
        for i in 0..EVENT_BURST {
            assert!(budget.take(start), "event {i} of the burst");
        }
        assert!(!budget.take(start), "over the burst");
        assert!(!budget.take(start + EVENT_REFILL - Duration::from_secs(1)));
        assert!(budget.take(start + EVENT_REFILL));
        assert!(!budget.take(start + EVENT_REFILL));
        // A long quiet spell refills the burst, no more.
        let later = start + EVENT_REFILL * 1000;
        for _ in 0..EVENT_BURST {
            assert!(budget.take(later));
        }
        assert!(!budget.take(later));
    }
}
