//! Following the TrainClusters through a run, pure: one progress line per visible change,
//! recoveries (from the first change away from Running with every desired slice ready back
//! to it) and each cluster's goodput account. Times are offsets from the run's start.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kube::ResourceExt;

use super::goodput::{Goodput, GoodputAccount, GoodputSample};
use super::summary::{Point, Recovery};
use slice_core::api::{Phase, TrainCluster, TrainClusterStatus};

#[derive(Debug, Default)]
pub struct Tracker {
    warmup: Duration,
    /// The last timeline step started, named as a recovery's cause.
    pub last_step: String,
    /// Cluster -> (when it left Running, the step before).
    disrupted: BTreeMap<String, (Duration, String)>,
    /// Clusters seen Running at least once: bring-up is not a disruption.
    seen_running: BTreeSet<String>,
    pub recoveries: Vec<Recovery>,
    last_line: BTreeMap<String, String>,
    /// Per cluster, its state at each change (the picture's data).
    pub history: BTreeMap<String, Vec<Point>>,
    /// Each timeline step, when it started.
    pub steps: Vec<(f64, String)>,
    goodput: BTreeMap<String, GoodputAccount>,
}

impl Tracker {
    /// `warmup`: see [`GoodputAccount::new`].
    pub fn new(warmup: Duration) -> Self {
        Tracker {
            warmup,
            ..Default::default()
        }
    }

    /// The cluster as the watch saw it at `at`. Returns its progress line when that changed.
    pub fn observe(&mut self, at: Duration, tc: &TrainCluster) -> Option<String> {
        let name = tc.name_any();
        let warmup = self.warmup;
        self.goodput
            .entry(name.clone())
            .or_insert_with(|| GoodputAccount::new(warmup))
            .observe(at, GoodputSample::of(tc));
        let status = tc.status.as_ref()?;
        self.record(&name, at, status);
        let epoch = status.groups.iter().map(|g| g.epoch).max().unwrap_or(0);
        let line = format!(
            "{name}: {:?}, {}/{} slices ready ({} available), epoch {epoch}, restarts {}, preemptions {}",
            status.phase,
            status.ready_slices,
            status.desired_slices,
            status.available_slices,
            status.restarts,
            status.preemptions
        );
        if self.last_line.get(&name) == Some(&line) {
            return None;
        }
        self.last_line.insert(name.clone(), line.clone());
        let running =
            status.phase == Phase::Running && status.ready_slices == status.desired_slices;
        if running {
            self.seen_running.insert(name.clone());
            if let Some((since, cause)) = self.disrupted.remove(&name) {
                self.recoveries.push(Recovery {
                    cluster: name,
                    cause,
                    at: since,
                    took: at.saturating_sub(since),
                    ready_slices: status.ready_slices,
                });
            }
        } else if status.phase == Phase::Succeeded {
            // A finished run is done, not disrupted: it recovers to nothing.
            self.disrupted.remove(&name);
        } else if self.seen_running.contains(&name) && !self.disrupted.contains_key(&name) {
            self.disrupted.insert(name, (at, self.last_step.clone()));
        }
        Some(line)
    }

    /// A timeline step started at `at`: named as the cause of what follows.
    pub fn step_started(&mut self, at: Duration, step: String) {
        self.steps.push((at.as_secs_f64(), step.clone()));
        self.last_step = step;
    }

    fn record(&mut self, name: &str, at: Duration, status: &TrainClusterStatus) {
        let point = Point {
            at: at.as_secs_f64(),
            phase: status.phase,
            ready: status.ready_slices,
            desired: status.desired_slices,
            spares: GoodputSample::of_status(status).spare_slices,
        };
        let points = self.history.entry(name.to_string()).or_default();
        let same = |p: &Point| {
            (p.phase, p.ready, p.desired, p.spares)
                == (point.phase, point.ready, point.desired, point.spares)
        };
        if points.last().is_none_or(|p| !same(p)) {
            points.push(point);
        }
    }

    /// No cluster is between a disruption and its recovery.
    pub fn undisrupted(&self) -> bool {
        self.disrupted.is_empty()
    }

    /// Each cluster's goodput with its last status held until `end`.
    pub fn goodput(&self, end: Duration) -> BTreeMap<String, Goodput> {
        self.goodput
            .iter()
            .map(|(name, a)| (name.clone(), a.finish(end)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slice_core::api::TrainClusterStatus;

    fn tc(phase: Phase, ready: u32, desired: u32, epoch: u64) -> TrainCluster {
        let mut tc: TrainCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "slices.dev/v1alpha1", "kind": "TrainCluster",
            "metadata": {"name": "train", "namespace": "default"},
            "spec": {"workerGroups": [{"name": "workers",
                "tpu": {"accelerator": "tpu-v6e-slice", "topology": "4x4"},
                "slices": {"min": 1, "max": 4},
                "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}]},
        }))
        .unwrap();
        let mut status = TrainClusterStatus {
            phase,
            ready_slices: ready,
            desired_slices: desired,
            ..Default::default()
        };
        status.groups.push(slice_core::api::GroupStatus {
            epoch,
            ..Default::default()
        });
        tc.status = Some(status);
        tc
    }

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn a_finished_run_is_no_disruption() {
        let mut t = Tracker::new(s(5));
        t.observe(s(1), &tc(Phase::Running, 1, 1, 1));
        t.observe(s(2), &tc(Phase::Restarting, 0, 1, 1));
        assert!(!t.undisrupted());
        t.observe(s(3), &tc(Phase::Succeeded, 1, 1, 1));
        assert!(t.undisrupted(), "settled once it succeeded");
        assert!(t.recoveries.is_empty());
    }

    #[test]
    fn recoveries_lines_and_goodput() {
        let mut t = Tracker::new(s(5));
        let mut created = tc(Phase::Pending, 0, 4, 1);
        created.status = None;
        assert_eq!(t.observe(s(0), &created), None, "no status, no line");
        assert!(t.observe(s(2), &tc(Phase::Running, 4, 4, 1)).is_some());
        assert_eq!(
            t.observe(s(3), &tc(Phase::Running, 4, 4, 1)),
            None,
            "unchanged"
        );
        t.step_started(s(29), "step 1 preemptSlice pool-1".into());
        let line = t.observe(s(30), &tc(Phase::Restarting, 0, 4, 2)).unwrap();
        assert!(line.contains("epoch 2"), "{line}");
        assert!(!t.undisrupted());
        t.observe(s(33), &tc(Phase::Running, 4, 4, 2));
        assert!(t.undisrupted());
        assert_eq!(t.recoveries.len(), 1);
        assert_eq!(t.recoveries[0].took, s(3));
        assert_eq!(t.recoveries[0].cause, "step 1 preemptSlice pool-1");
        assert_eq!(t.recoveries[0].at, s(30));
        assert_eq!(
            t.steps,
            vec![(29.0, "step 1 preemptSlice pool-1".to_string())]
        );
        let ready: Vec<u32> = t.history["train"].iter().map(|p| p.ready).collect();
        assert_eq!(ready, vec![4, 0, 4], "one point per change");
        let g = t.goodput(s(40))["train"];
        assert_eq!(g.wanted, 160.0, "4 slices wanted from creation at 0 to 40");
        // Productive: 7..30 (after the 5 s warmup from 2) and 38..40.
        assert_eq!(g.productive, 4.0 * (23.0 + 2.0));
    }
}
