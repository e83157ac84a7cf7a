//! Which of a plan's actions went through: only the events of actions that happened are
//! published, and only the creates that were not made are withdrawn from the expectations.

use std::collections::BTreeSet;

use slice_core::planner::{self, GroupCreate};

/// Which of a plan's actions went through (by index in the plan).
#[derive(Debug, Default)]
pub struct Progress {
    pub deleted: BTreeSet<usize>,
    pub created: BTreeSet<usize>,
    pub head: bool,
}

impl Progress {
    /// Whether the action an event reports went through.
    pub fn done(&self, after: Option<planner::EventAfter>) -> bool {
        match after {
            None => true,
            Some(planner::EventAfter::Delete(i)) => self.deleted.contains(&i),
            Some(planner::EventAfter::Create(i)) => self.created.contains(&i),
            Some(planner::EventAfter::Head) => self.head,
        }
    }

    /// The planned creates that were not made.
    pub fn not_created<'p>(
        &self,
        plan: &'p planner::Plan,
    ) -> impl Iterator<Item = &'p GroupCreate> {
        plan.create
            .iter()
            .enumerate()
            .filter(|(i, _)| !self.created.contains(i))
            .map(|(_, c)| c)
    }
}
