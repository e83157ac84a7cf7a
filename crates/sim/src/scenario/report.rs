//! Progress of a timeline: one [`StepReport`] per step start, progress note and completion.

use std::time::Duration;

use super::duration::format_duration;

/// What happened to a step, for progress output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepStatus {
    /// The step's `at`/`after` is satisfied; the action starts.
    Started,
    /// Intermediate progress (e.g. a preemption phase).
    Progress(String),
    /// The action was applied.
    Applied,
}

/// One report of [`run_timeline`](super::run_timeline).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepReport {
    /// Index in `scenario.timeline`.
    pub index: usize,
    /// Time since the timeline started (tokio clock).
    pub elapsed: Duration,
    pub description: String,
    pub status: StepStatus,
}

impl std::fmt::Display for StepReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let status = match &self.status {
            StepStatus::Started => "start".to_string(),
            StepStatus::Progress(p) => p.clone(),
            StepStatus::Applied => "done".to_string(),
        };
        write!(
            f,
            "[{:>8}] step {} {}: {}",
            format_duration(Duration::from_millis(self.elapsed.as_millis() as u64)),
            self.index,
            self.description,
            status
        )
    }
}
