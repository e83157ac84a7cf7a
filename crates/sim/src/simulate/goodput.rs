//! Goodput accounting, pure: fed by (time, status) samples of one TrainCluster, it
//! integrates piecewise-constant between samples.
//!
//! * Wanted slice-time: the sum over worker groups of `slices.max`, times the time from the
//!   cluster's first sample (its creation, as the watch saw it) to the end of the run.
//! * Productive slice-time: while the cluster is Running with every desired slice ready,
//!   and has been so continuously for at least `warmup` (the job restores its checkpoint
//!   and compiles after each (re)start), each ready slice counts.
//! * Lost slice-time: wanted minus productive. Goodput: productive / wanted.
//! * Spare slice-time: hot spare slices held (`status.groups[].spares.held`), on top.
//! * Time waiting for capacity: while not Running at full size and some group has a request
//!   for a slice pending (`status.groups[].capacity.pending`); time running: while Running
//!   at full size.

use std::time::Duration;

use slice_core::api::{Phase, TrainCluster, TrainClusterStatus};

/// What one status says for goodput.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GoodputSample {
    /// Phase Running and every desired slice ready.
    pub full: bool,
    pub ready_slices: u32,
    /// Sum over worker groups of `slices.max`.
    pub wanted_slices: u32,
    /// Hot spare slices held, over all groups.
    pub spare_slices: u32,
    /// Some group waits for a slice it asked for (`spec.provisioning`: a placeholder or a
    /// ProvisioningRequest pending).
    pub asking: bool,
}

impl GoodputSample {
    /// The sample of a TrainCluster as the watch sees it (no status yet: nothing ready).
    pub fn of(tc: &TrainCluster) -> Self {
        let wanted_slices = tc.spec.worker_groups.iter().map(|g| g.slices.max).sum();
        let status = tc.status.clone().unwrap_or_default();
        GoodputSample {
            wanted_slices,
            ..Self::of_status(&status)
        }
    }

    /// The status part of a sample (`wanted_slices` 0).
    pub fn of_status(status: &TrainClusterStatus) -> Self {
        GoodputSample {
            full: status.phase == Phase::Running && status.ready_slices == status.desired_slices,
            ready_slices: status.ready_slices,
            wanted_slices: 0,
            spare_slices: status
                .groups
                .iter()
                .filter_map(|g| g.spares.as_ref())
                .map(|s| s.held)
                .sum(),
            asking: status.groups.iter().any(|g| {
                let placeholders = g.capacity.as_ref().is_some_and(|c| c.pending > 0);
                let requests = g.queued.as_ref().is_some_and(|q| !q.pending.is_empty());
                placeholders || requests
            }),
        }
    }
}

/// The integrals so far, in slice-seconds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Goodput {
    pub wanted: f64,
    pub productive: f64,
    /// Slice-seconds of hot spares held (not part of `wanted`).
    pub spares_held: f64,
    /// Seconds waiting for slices asked for, not running at full size.
    pub waiting_for_capacity: f64,
    /// Seconds running at full size.
    pub running: f64,
}

impl Goodput {
    /// Wanted minus productive slice-seconds.
    pub fn lost(&self) -> f64 {
        (self.wanted - self.productive).max(0.0)
    }

    /// Productive / wanted slice-time (`None` before any slice-time was wanted).
    pub fn ratio(&self) -> Option<f64> {
        (self.wanted > 0.0).then(|| self.productive / self.wanted)
    }
}

/// One cluster's goodput account. Times are offsets from any fixed origin (e.g. the start
/// of the run); samples must come in time order (an earlier one is taken as simultaneous).
#[derive(Debug, Clone, Default)]
pub struct GoodputAccount {
    warmup: Duration,
    last: Option<(Duration, GoodputSample)>,
    /// Start of the current stretch of full, Running samples.
    full_since: Option<Duration>,
    totals: Goodput,
}

impl GoodputAccount {
    pub fn new(warmup: Duration) -> Self {
        GoodputAccount {
            warmup,
            ..Default::default()
        }
    }

    /// The cluster's status at `at` (it holds until the next sample).
    pub fn observe(&mut self, at: Duration, sample: GoodputSample) {
        let at = self.advance(at);
        if !sample.full {
            self.full_since = None;
        } else if self.full_since.is_none() {
            self.full_since = Some(at);
        }
        self.last = Some((at, sample));
    }

    /// The totals with the last sample held until `end` (the end of the run).
    pub fn finish(&self, end: Duration) -> Goodput {
        let mut closed = self.clone();
        closed.advance(end);
        closed.totals
    }

    /// Integrates the last sample up to `to`; returns `to` (or the last sample's time, if
    /// later).
    fn advance(&mut self, to: Duration) -> Duration {
        let Some((from, s)) = self.last else {
            return to;
        };
        if to <= from {
            return from;
        }
        let secs = |a: Duration, b: Duration| b.saturating_sub(a).as_secs_f64();
        let t = &mut self.totals;
        t.wanted += f64::from(s.wanted_slices) * secs(from, to);
        t.spares_held += f64::from(s.spare_slices) * secs(from, to);
        match (s.full, s.asking) {
            (true, _) => t.running += secs(from, to),
            (false, true) => t.waiting_for_capacity += secs(from, to),
            (false, false) => {}
        }
        if let (true, Some(since)) = (s.full, self.full_since) {
            let productive_from = from.max(since + self.warmup);
            t.productive += f64::from(s.ready_slices) * secs(productive_from, to);
        }
        self.last = Some((to, s));
        to
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn full(ready: u32) -> GoodputSample {
        GoodputSample {
            full: true,
            ready_slices: ready,
            wanted_slices: 4,
            spare_slices: 0,
            asking: false,
        }
    }

    fn down(ready: u32) -> GoodputSample {
        GoodputSample {
            full: false,
            ..full(ready)
        }
    }

    #[test]
    fn no_warmup_counts_every_full_second() {
        let mut a = GoodputAccount::new(Duration::ZERO);
        a.observe(s(0), down(0));
        a.observe(s(10), full(4));
        let g = a.finish(s(100));
        assert_eq!(g.wanted, 400.0);
        assert_eq!(g.productive, 360.0);
        assert_eq!(g.lost(), 40.0);
        assert_eq!(g.ratio(), Some(0.9));
    }

    #[test]
    fn warmup_after_each_restart_is_lost() {
        let mut a = GoodputAccount::new(s(5));
        a.observe(s(0), down(0));
        a.observe(s(10), full(4)); // productive from 15
        a.observe(s(50), down(0)); // restart
        a.observe(s(53), full(4)); // productive from 58
        let g = a.finish(s(100));
        assert_eq!(g.productive, 4.0 * (35.0 + 42.0));
        assert_eq!(g.wanted, 400.0);
        assert_eq!(g.lost(), 400.0 - 308.0);
    }

    #[test]
    fn a_stretch_shorter_than_the_warmup_counts_nothing() {
        let mut a = GoodputAccount::new(s(5));
        a.observe(s(0), full(4));
        a.observe(s(3), down(2));
        a.observe(s(4), full(4));
        assert_eq!(a.finish(s(8)).productive, 0.0);
        assert_eq!(a.finish(s(10)).productive, 4.0);
    }

    #[test]
    fn full_at_a_smaller_size_counts_the_ready_slices() {
        // Shrunk to 3 of 4 after a preemption: 3 slices productive, the 4th lost.
        let mut a = GoodputAccount::new(Duration::ZERO);
        a.observe(s(0), full(4));
        a.observe(s(10), down(0));
        a.observe(s(12), full(3));
        let g = a.finish(s(20));
        assert_eq!(g.productive, 40.0 + 24.0);
        assert_eq!(g.lost(), 80.0 - 64.0);
    }

    #[test]
    fn status_changes_within_a_full_stretch_keep_it() {
        // A sample that stays full (e.g. a spare refilled) does not restart the warmup.
        let mut a = GoodputAccount::new(s(5));
        a.observe(s(0), full(4));
        a.observe(
            s(6),
            GoodputSample {
                spare_slices: 1,
                ..full(4)
            },
        );
        let g = a.finish(s(10));
        assert_eq!(g.productive, 4.0 * 5.0);
        assert_eq!(g.spares_held, 4.0);
    }

    #[test]
    fn finish_is_repeatable_and_samples_out_of_order_are_simultaneous() {
        let mut a = GoodputAccount::new(Duration::ZERO);
        assert_eq!(
            a.finish(s(10)),
            Goodput::default(),
            "no sample: nothing wanted"
        );
        assert_eq!(a.finish(s(10)).ratio(), None);
        a.observe(s(5), full(2));
        a.observe(s(4), down(0)); // late: taken at 5
        a.observe(s(7), full(2));
        assert_eq!(a.finish(s(9)), a.finish(s(9)));
        assert_eq!(a.finish(s(9)).productive, 4.0);
        assert_eq!(a.finish(s(9)).wanted, 16.0);
    }

    #[test]
    fn sample_of_a_status() {
        use slice_core::api::{GroupStatus, SpareStatus};
        let status = TrainClusterStatus {
            phase: Phase::Running,
            desired_slices: 4,
            ready_slices: 4,
            groups: vec![GroupStatus {
                spares: Some(SpareStatus {
                    wanted: 1,
                    held: 1,
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        };
        let sm = GoodputSample::of_status(&status);
        assert!(sm.full);
        assert_eq!((sm.ready_slices, sm.spare_slices), (4, 1));
        let restarting = TrainClusterStatus {
            phase: Phase::Restarting,
            ..status
        };
        assert!(!GoodputSample::of_status(&restarting).full);
    }

    #[test]
    fn time_waiting_for_capacity_is_told_apart_from_time_running() {
        let mut a = GoodputAccount::new(Duration::ZERO);
        let asking = GoodputSample {
            asking: true,
            ..down(0)
        };
        a.observe(s(0), asking);
        a.observe(s(30), full(4));
        a.observe(s(50), down(3));
        a.observe(s(60), asking);
        a.observe(s(80), full(4));
        let g = a.finish(s(100));
        assert_eq!(g.waiting_for_capacity, 50.0);
        assert_eq!(g.running, 40.0);
    }
}
