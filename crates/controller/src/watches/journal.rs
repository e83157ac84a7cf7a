//! The changes a watch applied to its store, in order, for a consumer that keeps state of
//! its own from them (the live inventory): it reads what changed instead of rescanning the
//! store. The watch task only appends (a short lock, no work under it); the consumer takes
//! the whole log at once.
//!
//! A consumer that falls behind by more than [`Journal::capacity`] changes, or a relist,
//! turns the log into [`Entries::Relisted`]: start again from the store. Nothing grows
//! without bound while nobody reads (a standby operator plans nothing).

use std::sync::{Arc, Mutex};

/// One applied change.
#[derive(Debug)]
pub enum Change<K> {
    Applied(Arc<K>),
    Deleted(Arc<K>),
}

/// What a consumer takes: the changes since it last took, or word to start again.
#[derive(Debug)]
pub enum Entries<K> {
    Changes(Vec<Change<K>>),
    /// Read the whole store: it was listed again, or too much changed to keep the log.
    Relisted,
}

pub struct Journal<K> {
    capacity: usize,
    log: Mutex<Entries<K>>,
}

impl<K> Journal<K> {
    /// A journal that starts as [`Entries::Relisted`]: a new consumer reads the store first.
    pub fn new(capacity: usize) -> Journal<K> {
        Journal {
            capacity,
            log: Mutex::new(Entries::Relisted),
        }
    }

    /// Most changes kept before the log turns into [`Entries::Relisted`].
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Append a change the store has just applied.
    pub fn push(&self, change: Change<K>) {
        let mut log = self.log.lock().expect("journal lock poisoned");
        match &mut *log {
            Entries::Relisted => {}
            Entries::Changes(changes) if changes.len() >= self.capacity => {
                *log = Entries::Relisted;
            }
            Entries::Changes(changes) => changes.push(change),
        }
    }

    /// The store was listed again: every consumer starts from it.
    pub fn relisted(&self) {
        *self.log.lock().expect("journal lock poisoned") = Entries::Relisted;
    }

    /// Everything since the last take. After it, the log is empty.
    pub fn take(&self) -> Entries<K> {
        let mut log = self.log.lock().expect("journal lock poisoned");
        std::mem::replace(&mut *log, Entries::Changes(Vec::new()))
    }
}

/// Shared between the watch task and the consumer.
pub type SharedJournal<K> = Arc<Journal<K>>;

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(entries: Entries<u32>) -> Vec<u32> {
        match entries {
            Entries::Changes(changes) => changes
                .into_iter()
                .map(|c| match c {
                    Change::Applied(k) => *k,
                    Change::Deleted(k) => 1000 + *k,
                })
                .collect(),
            Entries::Relisted => panic!("relisted"),
        }
    }

    #[test]
    fn a_new_consumer_reads_the_store_then_the_changes_in_order() {
        let journal = Journal::new(10);
        journal.push(Change::Applied(Arc::new(1)));
        assert!(matches!(journal.take(), Entries::Relisted));
        journal.push(Change::Applied(Arc::new(2)));
        journal.push(Change::Deleted(Arc::new(2)));
        assert_eq!(applied(journal.take()), [2, 1002]);
        assert_eq!(applied(journal.take()), Vec::<u32>::new());
    }

    #[test]
    fn a_consumer_too_far_behind_or_a_relist_starts_again_from_the_store() {
        let journal = Journal::new(3);
        let _ = journal.take();
        for i in 0..10 {
            journal.push(Change::Applied(Arc::new(i)));
        }
        assert!(matches!(journal.take(), Entries::Relisted), "bounded");
        journal.push(Change::Applied(Arc::new(1)));
        journal.relisted();
        assert!(matches!(journal.take(), Entries::Relisted));
    }
}
