//! What the operator remembers about each TrainCluster (by uid) between reconciles, reached
//! only through named verbs: what a reconcile checks before it plans, what it records when it
//! has planned and when it has applied, and what is forgotten when the cluster is gone.
//! Nothing here outlives the process; what must survive a restart is in the status.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use slice_core::api::{TrainCluster, TrainClusterStatus};
use slice_core::lean::LeanPod;
use slice_core::planner::creates::RetryClock;
use slice_core::planner::{Plan, PodRef};

use crate::event_budget::EventBudget;
use crate::freshness::{Freshness, Outstanding};
use crate::ledger::patches::PatchMemory;

/// One cluster's memory.
#[derive(Default)]
struct Entry {
    /// Namespace and name, to drop its metrics once the cluster is gone.
    key: Option<(String, String)>,
    /// Our writes the caches do not show yet (see [`crate::freshness`]).
    outstanding: Outstanding,
    /// Consecutive failed reconciles, for the error backoff.
    errors: u32,
    /// Generation of a malformed object already reported.
    malformed_generation: Option<Option<i64>>,
    /// When the first failure of the current disruption was detected.
    disrupted_since: Option<Instant>,
    /// The slices its last plan reserved (`GroupStatus::reserved_slices`), recorded while
    /// planning: the next cluster to plan sees them before the status is written and cached.
    reserved: Option<Vec<String>>,
    /// Whether its last plan accepted its spec (it holds its pod names), recorded while
    /// planning: the next cluster to plan sees it before the status is written and cached.
    holds_names: Option<bool>,
    /// Events this cluster may still emit.
    events: Option<EventBudget>,
    /// The wait after a create refused again for the same reason: not written (the status
    /// would say nothing new), only remembered; the next status write carries it.
    retry: Option<RetryClock>,
    /// Its label patches refused, and reported, in its current generation.
    patches: PatchMemory,
    /// The resourceVersion of the object its last plan's memory came from: a status write
    /// made from that memory is refused if anyone wrote the object since (a standby that
    /// took over, a deposed leader's late write).
    version: Option<String>,
}

/// A cluster the ledger has let go of.
#[derive(Debug, PartialEq, Eq)]
pub struct Forgotten {
    /// Namespace and name, if it was ever reconciled.
    pub key: Option<(String, String)>,
    /// Its last plan kept slices for replicas it had not created: no pod event will say
    /// they are free again.
    pub held_reservations: bool,
}

/// Every cluster's memory.
#[derive(Default)]
pub struct Ledger {
    entries: Mutex<HashMap<String, Entry>>,
}

impl Ledger {
    fn entries(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|poisoned| {
            // Every verb leaves an entry whole: a panic elsewhere does not void the ledger.
            self.entries.clear_poison();
            poisoned.into_inner()
        })
    }

    /// A verb on a cluster the ledger knows. Only [`Ledger::reconciling`] makes an entry: a
    /// reconcile still running when its cluster was forgotten records nothing after it.
    fn entry<T: Default>(&self, uid: &str, f: impl FnOnce(&mut Entry) -> T) -> T {
        self.entries().get_mut(uid).map(f).unwrap_or_default()
    }

    // --- before planning -------------------------------------------------------------

    /// A reconcile of this cluster begins: remember who it is.
    pub fn reconciling(&self, uid: &str, namespace: &str, name: &str) {
        let mut all = self.entries();
        let entry = all.entry(uid.to_string()).or_default();
        entry
            .key
            .get_or_insert_with(|| (namespace.to_string(), name.to_string()));
    }

    /// True while the ledger holds this cluster (it was reconciled, and not forgotten since).
    pub fn knows(&self, uid: &str) -> bool {
        self.entries().contains_key(uid)
    }

    /// Whether the pod cache (this cluster's pods, at `relists` lists) shows our writes.
    pub fn freshness(&self, uid: &str, pods: &[Arc<LeanPod>], relists: u64) -> Freshness {
        let mut all = self.entries();
        match all.get_mut(uid) {
            Some(e) => e.outstanding.check(pods, relists, Instant::now()),
            None => Freshness::Fresh,
        }
    }

    /// The pod cache stopped showing our writes and is being listed again: what we expected
    /// of it is void.
    pub fn cache_stalled(&self, uid: &str) {
        self.entry(uid, |e| e.outstanding.clear_pods());
    }

    /// True when our last status write may or may not have applied: read it back first.
    pub fn status_in_doubt(&self, uid: &str) -> bool {
        self.entry(uid, |e| e.outstanding.needs_status_read())
    }

    /// The planner's memory: the status we last wrote while the cache has not shown it,
    /// else the cached one.
    /// `cached_version`: the cached object's resourceVersion.
    pub fn memory_for_planning(
        &self,
        uid: &str,
        cached: Option<&TrainClusterStatus>,
        cached_version: Option<&str>,
    ) -> Option<TrainClusterStatus> {
        let mut all = self.entries();
        match all.get_mut(uid) {
            Some(e) => {
                let mut status = e.outstanding.status_for_planning(cached);
                e.version = e.outstanding.version_for_planning(cached_version);
                if let (Some(clock), Some(status)) = (&e.retry, status.as_mut()) {
                    clock.set(status);
                }
                status
            }
            None => cached.cloned(),
        }
    }

    /// A malformed object of this generation was already reported.
    pub fn malformed_reported(&self, uid: &str, generation: Option<i64>) -> bool {
        self.entry(uid, |e| e.malformed_generation == Some(generation))
    }

    // --- planned (under the planning lock) ---------------------------------------------

    /// A plan was made at `relists` pod lists: its creates are expected (their slices
    /// taken), its reservations and whether it holds its pod names are what the next
    /// cluster to plan sees.
    pub fn planned(&self, uid: &str, plan: &Plan, relists: u64) {
        self.entry(uid, |e| {
            e.holds_names = Some(slice_core::api::naming::spec_accepted(&plan.status));
            let pods = plan
                .create
                .iter()
                .flat_map(|c| c.pods.names().map(|n| (n, c.slice.clone())));
            e.outstanding.expect_created(pods, relists, Instant::now());
            e.reserved = Some(plan.status.reserved_slices().map(str::to_string).collect());
        });
    }

    /// Slices clusters other than `uid` have taken though the inventory (built from the pod
    /// cache) cannot show it: placed their pending creates on, or reserved while they
    /// (re)create replicas (as last planned here, else as their cached status says, which is
    /// what survives an operator restart). `others`: every TrainCluster the controller knows;
    /// what the ledger holds of any other (forgotten meanwhile) takes nothing.
    pub fn slices_taken_by_others<'a>(
        &self,
        uid: &str,
        others: impl IntoIterator<Item = &'a TrainCluster>,
    ) -> HashSet<String> {
        let all = self.entries();
        let mut taken = HashSet::new();
        for tc in others {
            let other = tc.metadata.uid.as_deref().unwrap_or_default();
            // Being deleted: it creates nothing more. Gone (not among `others`): neither.
            if other == uid || tc.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let entry = all.get(other);
            let pending = entry.into_iter().flat_map(|e| e.outstanding.slices_taken());
            taken.extend(pending.map(str::to_string));
            match entry.and_then(|e| e.reserved.as_ref()) {
                Some(planned) => taken.extend(planned.iter().cloned()),
                None => taken.extend(
                    tc.status
                        .iter()
                        .flat_map(|s| s.reserved_slices())
                        .map(str::to_string),
                ),
            }
        }
        taken
    }

    /// Whether `tc` holds its pod names against a colliding cluster (see
    /// `slice_core::api::naming`): as its last plan here says, else as its status says
    /// (what survives an operator restart).
    pub fn holds_names(&self, tc: &TrainCluster) -> bool {
        let uid = tc.metadata.uid.as_deref().unwrap_or_default();
        let planned = self.entries().get(uid).and_then(|e| e.holds_names);
        planned.unwrap_or_else(|| slice_core::api::naming::holds_names(tc))
    }

    // --- applied -----------------------------------------------------------------------

    /// The server accepted this status (which carries the latest retry wait, if any) and
    /// gave the object `version`; or the status was read back at `version`.
    pub fn status_written(&self, uid: &str, status: TrainClusterStatus, version: Option<String>) {
        self.entry(uid, |e| {
            e.retry = None;
            e.version = version.clone();
            e.outstanding.wrote_status(status, version)
        });
    }

    /// The TrainCluster watch delivered this cluster at `version` (see
    /// [`Outstanding::cache_shows`]).
    pub fn train_cluster_cached(&self, uid: &str, version: &str) {
        self.entry(uid, |e| e.outstanding.cache_shows(version));
    }

    /// The resourceVersion a status write from the last plan's memory must find.
    pub fn status_precondition(&self, uid: &str) -> Option<String> {
        self.entry(uid, |e| e.version.clone())
    }

    /// A create was refused again for the same reason: the next try waits as `clock` says,
    /// without a status write.
    pub fn retry_deferred(&self, uid: &str, clock: RetryClock) {
        self.entry(uid, |e| e.retry = Some(clock));
    }

    /// A status write failed in a way that may or may not have applied it.
    pub fn status_write_unknown(&self, uid: &str) {
        self.entry(uid, |e| e.outstanding.status_unknown());
    }

    /// Pods (by uid) whose deletion the server accepted at `relists` pod lists; `force`:
    /// with grace period 0.
    pub fn pods_deleted(&self, uid: &str, uids: Vec<String>, force: bool, relists: u64) {
        self.entry(uid, |e| {
            e.outstanding
                .expect_deleted(uids, force, relists, Instant::now())
        });
    }

    /// Label patches the server accepted at `relists` pod lists: (pod uid, the metadata
    /// hash each set). Until the cache shows them the cluster does not plan (and patch) again.
    pub fn pods_patched(&self, uid: &str, patched: Vec<(String, String)>, relists: u64) {
        self.entry(uid, |e| {
            e.outstanding
                .expect_patched(patched, relists, Instant::now())
        });
    }

    /// The API server answered a write of this cluster (a group's creates): the cache has
    /// the expectation timeout from now to show what is outstanding.
    pub fn writes_answered(&self, uid: &str) {
        self.entry(uid, |e| e.outstanding.answered(Instant::now()));
    }

    /// Pods we force-deleted that a finalizer keeps, not reported yet (once each).
    pub fn held_by_finalizers(&self, uid: &str) -> Vec<String> {
        self.entry(uid, |e| e.outstanding.take_held())
    }

    /// Planned pods that were not created (not attempted, or rolled back): nothing of
    /// theirs is coming, and they hold no slice.
    pub fn pods_not_created(&self, uid: &str, names: impl IntoIterator<Item = String>) {
        self.entry(uid, |e| e.outstanding.withdraw_created(names));
    }

    /// A group was lost to a disruption (not maintenance): the recovery clock starts, unless
    /// it is already running.
    pub fn disrupted(&self, uid: &str) {
        self.entry(uid, |e| {
            e.disrupted_since.get_or_insert_with(Instant::now);
        });
    }

    /// The cluster is Running again: when its disruption began, if one was running.
    pub fn recovered(&self, uid: &str) -> Option<Instant> {
        self.entry(uid, |e| e.disrupted_since.take())
    }

    /// Whether `pod`'s label patch was refused as invalid in this generation (so it is not
    /// sent again before the spec changes).
    pub fn patch_refused(&self, uid: &str, generation: Option<i64>, pod: &PodRef) -> bool {
        self.entry(uid, |e| e.patches.refused(generation, pod))
    }

    /// Label patches failed (`refused`: those refused as invalid). True the first time in
    /// this generation: the failure is reported once.
    pub fn patches_failed<'a>(
        &self,
        uid: &str,
        generation: Option<i64>,
        refused: impl IntoIterator<Item = &'a PodRef>,
    ) -> bool {
        self.entry(uid, |e| e.patches.failed(generation, refused))
    }

    /// The malformed object of this generation is reported.
    pub fn malformed_reported_now(&self, uid: &str, generation: Option<i64>) {
        self.entry(uid, |e| e.malformed_generation = Some(generation));
    }

    /// One more event of this cluster, if its budget allows.
    pub fn take_event_token(&self, uid: &str) -> bool {
        self.entry(uid, |e| {
            e.events
                .get_or_insert_with(|| EventBudget::new(Instant::now()))
                .take(Instant::now())
        })
    }

    /// A reconcile succeeded: the error backoff starts over.
    pub fn reconciled(&self, uid: &str) {
        self.entry(uid, |e| e.errors = 0);
    }

    /// A reconcile failed: how many in a row now.
    pub fn reconcile_failed(&self, uid: &str) -> u32 {
        self.entry(uid, |e| {
            e.errors = e.errors.saturating_add(1);
            e.errors
        })
    }

    // --- forgotten ---------------------------------------------------------------------

    /// Let go of every cluster whose uid is not in `live`.
    pub fn forget_all_but(&self, live: &HashSet<String>) -> Vec<Forgotten> {
        let mut all = self.entries();
        let gone: Vec<String> = all.keys().filter(|u| !live.contains(*u)).cloned().collect();
        gone.iter()
            .filter_map(|uid| all.remove(uid))
            .map(|e| Forgotten {
                key: e.key,
                held_reservations: e.reserved.is_some_and(|r| !r.is_empty()),
            })
            .collect()
    }

    /// How many clusters the ledger holds.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries().len()
    }
}

mod patches;
#[cfg(test)]
mod tests;
