//! What became of a cluster's label patches in its current generation: the pods whose patch
//! the server refused as invalid (not sent again: it would be refused again), and whether
//! the generation's failures were reported. A new generation starts afresh: its template may
//! have fixed what was refused.

use std::collections::HashSet;

use slice_core::planner::PodRef;

#[derive(Debug, Default)]
pub struct PatchMemory {
    generation: Option<i64>,
    reported: bool,
    /// Pods (by uid, else name) whose patch was refused as invalid.
    refused: HashSet<String>,
}

fn key(pod: &PodRef) -> &str {
    pod.uid.as_deref().unwrap_or(&pod.name)
}

impl PatchMemory {
    fn of(&mut self, generation: Option<i64>) -> &mut Self {
        if self.generation != generation {
            *self = PatchMemory {
                generation,
                ..Default::default()
            };
        }
        self
    }

    /// Whether `pod`'s patch was refused as invalid in this generation.
    pub fn refused(&mut self, generation: Option<i64>, pod: &PodRef) -> bool {
        self.of(generation).refused.contains(key(pod))
    }

    /// Patches failed: remember those refused as invalid; true if the generation's failures
    /// were not reported yet (the caller reports them now).
    pub fn failed<'a>(
        &mut self,
        generation: Option<i64>,
        refused: impl IntoIterator<Item = &'a PodRef>,
    ) -> bool {
        let memory = self.of(generation);
        memory
            .refused
            .extend(refused.into_iter().map(|p| key(p).to_string()));
        !std::mem::replace(&mut memory.reported, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str) -> PodRef {
        PodRef {
            name: format!("name-{uid}"),
            uid: Some(uid.into()),
        }
    }

    #[test]
    fn failures_are_reported_once_per_generation_and_refusals_kept_for_it() {
        let mut memory = PatchMemory::default();
        assert!(memory.failed(Some(1), [&pod("a")]), "first failure: report");
        assert!(
            !memory.failed(Some(1), []),
            "again in the same generation: not"
        );
        assert!(memory.refused(Some(1), &pod("a")));
        assert!(!memory.refused(Some(1), &pod("b")), "only the refused pod");
        // A new generation may have fixed the template: sent again, reported again.
        assert!(!memory.refused(Some(2), &pod("a")));
        assert!(memory.failed(Some(2), []));
    }
}
