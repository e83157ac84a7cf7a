//! Whether a plan's status is worth a write before its pod actions.

use crate::api::TrainClusterStatus;

/// Whether `next` says anything `memory` (the status the plan was made from) does not, beyond
/// the incarnation numbers this plan's creates take. Those need no write of their own: each
/// pod carries its incarnation in a label and the planner never numbers below what it
/// observes, so a number in use is never given again. A create the API server refuses takes
/// none, so its next try has the same number and, refused for the same reason, writes nothing.
pub fn worth_writing(memory: Option<&TrainClusterStatus>, next: &TrainClusterStatus) -> bool {
    let Some(memory) = memory else {
        return true;
    };
    if memory.groups.len() != next.groups.len() {
        return true;
    }
    let mut unspent = next.clone();
    for (group, remembered) in unspent.groups.iter_mut().zip(&memory.groups) {
        if group.name == remembered.name && group.next_incarnation > remembered.next_incarnation {
            group.next_incarnation = remembered.next_incarnation;
        }
    }
    unspent != *memory
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{GroupStatus, Phase};

    fn status(next_incarnation: u64) -> TrainClusterStatus {
        TrainClusterStatus {
            groups: vec![GroupStatus {
                name: "workers".into(),
                next_incarnation,
                ..GroupStatus::default()
            }],
            ..TrainClusterStatus::default()
        }
    }

    #[test]
    fn numbers_taken_by_creates_alone_are_not_worth_a_write() {
        assert!(!worth_writing(Some(&status(3)), &status(3)));
        assert!(!worth_writing(Some(&status(3)), &status(5)));
    }

    #[test]
    fn anything_else_is() {
        assert!(worth_writing(None, &status(3)));
        let mut next = status(5);
        next.phase = Phase::Running;
        assert!(worth_writing(Some(&status(3)), &next));
        assert!(
            worth_writing(Some(&status(5)), &status(3)),
            "a counter set back is written"
        );
        let mut renamed = status(5);
        renamed.groups[0].name = "other".into();
        assert!(worth_writing(Some(&status(3)), &renamed));
        let mut more = status(3);
        more.groups.push(GroupStatus::default());
        assert!(worth_writing(Some(&status(3)), &more));
    }
}
