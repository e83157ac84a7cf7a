//! Scenario settings beyond pools and steps: the start costs of the fake kubelet
//! (`kubelet.startCosts`), goodput accounting (`goodput`) and the side-by-side comparison
//! (`compare`).
//!
//! ```yaml
//! kubelet:
//!   startDelay: 1s
//!   startCosts: {imagePull: {cold: 8s, warm: 0s}, containerStart: 1s, tpuInit: 2s}
//! goodput: {warmup: 5s}           # checkpoint restore + compile after each (re)start
//! compare: {withoutSpares: true}  # run again with every slices.spares set to 0
//! ```

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::duration::SimDuration;
use crate::kubelet::StartCosts;

/// `kubelet.startCosts`: what a pod start costs after `startDelay` (every field optional,
/// 0 when absent).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StartCostSettings {
    #[serde(default)]
    pub image_pull: ImagePullSettings,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_start: Option<SimDuration>,
    /// From Running to Ready, for TPU workers (not for hot spare placeholders).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpu_init: Option<SimDuration>,
}

/// `imagePull`: on a node that never pulled the image (`cold`), or that did (`warm`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImagePullSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cold: Option<SimDuration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm: Option<SimDuration>,
}

impl StartCostSettings {
    pub fn costs(&self) -> StartCosts {
        let d = |v: Option<SimDuration>| v.map(|d| d.0).unwrap_or(Duration::ZERO);
        StartCosts {
            image_pull_cold: d(self.image_pull.cold),
            image_pull_warm: d(self.image_pull.warm),
            container_start: d(self.container_start),
            tpu_init: d(self.tpu_init),
        }
    }
}

/// `goodput`: how `simulate` counts productive slice-time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GoodputSettings {
    /// After each (re)start, the job restores its checkpoint and compiles before it trains:
    /// a cluster counts as productive only once it has run at full size this long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup: Option<SimDuration>,
}

impl GoodputSettings {
    pub fn warmup(&self) -> Duration {
        self.warmup.map(|d| d.0).unwrap_or(Duration::ZERO)
    }
}

/// `compare`: run the scenario again, changed, on a fresh emulator and operator, and print
/// both runs side by side.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompareSettings {
    /// The second run has every worker group's `slices.spares` set to 0.
    #[serde(default)]
    pub without_spares: bool,
}

/// The scenario's TrainCluster manifests with every worker group's `slices.spares` set to
/// 0 (groups without `slices` are left alone). Returns how many groups had spares.
pub fn without_spares(manifests: &mut [serde_json::Value]) -> usize {
    let mut changed = 0;
    for m in manifests {
        let Some(groups) = m
            .pointer_mut("/spec/workerGroups")
            .and_then(|g| g.as_array_mut())
        else {
            continue;
        };
        for g in groups {
            if let Some(slices) = g.get_mut("slices").and_then(|s| s.as_object_mut()) {
                if slices.get("spares").and_then(|s| s.as_u64()).unwrap_or(0) > 0 {
                    changed += 1;
                }
                slices.insert("spares".into(), serde_json::json!(0));
            }
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_costs_parse_with_defaults() {
        let s: StartCostSettings = serde_yaml::from_str(
            "{imagePull: {cold: 8s, warm: 0s}, containerStart: 1s, tpuInit: 2500ms}",
        )
        .unwrap();
        assert_eq!(
            s.costs(),
            StartCosts {
                image_pull_cold: Duration::from_secs(8),
                image_pull_warm: Duration::ZERO,
                container_start: Duration::from_secs(1),
                tpu_init: Duration::from_millis(2500),
            }
        );
        let only_cold: StartCostSettings = serde_yaml::from_str("{imagePull: {cold: 3s}}").unwrap();
        assert_eq!(only_cold.costs().tpu_init, Duration::ZERO);
        assert!(serde_yaml::from_str::<StartCostSettings>("{imagePul: {cold: 3s}}").is_err());
    }

    #[test]
    fn spares_set_to_zero_in_every_group() {
        let mut ms = vec![serde_json::json!({"spec": {"workerGroups": [
            {"name": "a", "slices": {"min": 1, "max": 4, "spares": 2}},
            {"name": "b", "slices": {"min": 1, "max": 2}},
            {"name": "c"},
        ]}})];
        assert_eq!(without_spares(&mut ms), 1);
        assert_eq!(ms[0]["spec"]["workerGroups"][0]["slices"]["spares"], 0);
        assert_eq!(ms[0]["spec"]["workerGroups"][0]["slices"]["max"], 4);
        assert_eq!(ms[0]["spec"]["workerGroups"][1]["slices"]["spares"], 0);
        assert!(ms[0]["spec"]["workerGroups"][2].get("slices").is_none());
    }
}
