//! The one freshness mechanism: what the operator wrote that its caches do not show yet.
//!
//! A plan is only as good as what it observes. Our own writes reach the caches a moment
//! later (a watch event), or never (a stalled watch). For each TrainCluster the operator
//! keeps the writes still outstanding, and nothing else:
//!
//! * **pods created** (by name, with the slice each was placed on): until the pod cache
//!   shows them, the cluster does not plan again, and no other cluster may take that slice;
//! * **pods deleted** (by uid): until the pod cache shows them gone or Terminating;
//! * **pods relabelled** (by uid, with the metadata hash the patch gave them): until the pod
//!   cache shows that hash (or the pod gone), so a reconcile in between does not patch again;
//! * **the status written**: until the TrainCluster cache shows it, the planner's memory is
//!   the status we wrote, not the older one cached. When a write's outcome is unknown (it
//!   timed out, or the connection dropped), the status is read back before the next plan.
//!
//! A fresh list (a relist) is authoritative and ends every pod expectation. Expectations the
//! cache has not met within [`EXPECTATION_TIMEOUT`] mean the watch stopped delivering: the
//! cache is relisted and `/readyz` fails until it has. Nothing here depends on a resync.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use slice_core::api::TrainClusterStatus;
use slice_core::lean::LeanPod;

/// How long the pod cache may take to show our own writes before it counts as stalled (a
/// real watch shows them in well under a second).
pub const EXPECTATION_TIMEOUT: Duration = Duration::from_secs(15);

/// How many of a TrainCluster's latest cached versions are remembered.
const CACHED_VERSIONS: usize = 8;

/// Whether the caches show this cluster's own last writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freshness {
    Fresh,
    /// Not yet, within [`EXPECTATION_TIMEOUT`].
    Catching,
    /// Not within [`EXPECTATION_TIMEOUT`]: the watch has stopped delivering.
    Stalled,
}

/// One cluster's writes not yet seen in the caches.
#[derive(Debug, Default)]
pub struct Outstanding {
    /// Pods (by uid) we force-deleted whose deletion took effect (grace period 0) but which
    /// stay, held by a finalizer: not our write unshown, reported once by name.
    held: HashMap<String, String>,
    /// Of `held`, those not reported yet.
    unreported: Vec<String>,
    /// Pod name -> the slice it was placed on, if pinned.
    created: HashMap<String, Option<String>>,
    /// Deleted gracefully: shown once Terminating (or gone).
    deleted: HashSet<String>,
    /// Deleted with grace period 0 (already Terminating before): shown once gone.
    removed: HashSet<String>,
    /// Pod uid -> the metadata hash label its accepted patch set.
    patched: HashMap<String, String>,
    deadline: Option<Instant>,
    /// The pod cache's relist count when the pod expectations were made.
    relists: u64,
    status: Option<TrainClusterStatus>,
    /// The resourceVersion the server gave the TrainCluster with `status` (or read back).
    status_version: Option<String>,
    /// The TrainCluster's last few versions the cache has held (a watch event can arrive
    /// before the answer to the write that made it).
    cached_versions: std::collections::VecDeque<String>,
    status_unknown: bool,
}

impl Outstanding {
    /// Pods about to be created, each with its slice. Recorded before the planning lock is
    /// released, so no other cluster plans onto those slices in between.
    pub fn expect_created(
        &mut self,
        pods: impl IntoIterator<Item = (String, Option<String>)>,
        relists: u64,
        now: Instant,
    ) {
        let before = self.created.len();
        self.created.extend(pods);
        if self.created.len() != before {
            self.arm(relists, now);
        }
    }

    /// Pods whose creation was not attempted or failed: nothing of theirs is coming.
    pub fn withdraw_created<S: AsRef<str>>(&mut self, names: impl IntoIterator<Item = S>) {
        for name in names {
            self.created.remove(name.as_ref());
        }
    }

    /// Pods (by uid) whose deletion the server accepted; `force`: with grace period 0, so
    /// the cache shows it when they are gone (they were Terminating already).
    pub fn expect_deleted(
        &mut self,
        uids: impl IntoIterator<Item = String>,
        force: bool,
        relists: u64,
        now: Instant,
    ) {
        let set = if force {
            &mut self.removed
        } else {
            &mut self.deleted
        };
        let before = set.len();
        set.extend(uids);
        if set.len() != before {
            self.arm(relists, now);
        }
    }

    /// Pods (by uid) whose label patch the server accepted, each with the metadata hash
    /// label it set: shown once the cache has that label on the pod (or the pod is gone).
    pub fn expect_patched(
        &mut self,
        patched: impl IntoIterator<Item = (String, String)>,
        relists: u64,
        now: Instant,
    ) {
        let before = self.patched.len();
        self.patched.extend(patched);
        if self.patched.len() != before {
            self.arm(relists, now);
        }
    }

    fn arm(&mut self, relists: u64, now: Instant) {
        self.relists = relists;
        self.deadline = Some(now + EXPECTATION_TIMEOUT);
    }

    /// The API server answered one of our writes at `now`: the cache has until
    /// [`EXPECTATION_TIMEOUT`] after that to show what is outstanding. Creates are expected
    /// when planned (their slices are taken from then), but a long apply phase (a thousand
    /// pods, a slow admission webhook, throttling) is not a watch that stopped delivering.
    pub fn answered(&mut self, now: Instant) {
        if let Some(deadline) = self.deadline.as_mut() {
            *deadline = (*deadline).max(now + EXPECTATION_TIMEOUT);
        }
    }

    /// Pods held by a finalizer after our force delete not reported yet (once each).
    pub fn take_held(&mut self) -> Vec<String> {
        std::mem::take(&mut self.unreported)
    }

    /// The server accepted this status, and gave the object `version`.
    pub fn wrote_status(&mut self, status: TrainClusterStatus, version: Option<String>) {
        let shown = version
            .as_ref()
            .is_some_and(|v| self.cached_versions.contains(v));
        self.status = (!shown).then_some(status);
        self.status_version = version.filter(|_| !shown);
        self.status_unknown = false;
    }

    /// A status write failed in a way that may or may not have applied it.
    pub fn status_unknown(&mut self) {
        self.status = None;
        self.status_version = None;
        self.status_unknown = true;
    }

    /// True when the status must be read back from the server before planning.
    pub fn needs_status_read(&self) -> bool {
        self.status_unknown
    }

    /// The planner's memory: our last written status while the cache has not shown it, else
    /// the cached one. Drops ours once the cache has caught up.
    pub fn status_for_planning(
        &mut self,
        cached: Option<&TrainClusterStatus>,
    ) -> Option<TrainClusterStatus> {
        if self
            .status
            .as_ref()
            .is_some_and(|ours| Some(ours) == cached)
        {
            self.status = None;
            self.status_version = None;
        }
        self.status.clone().or_else(|| cached.cloned())
    }

    /// The TrainCluster cache now holds the object at `version`: if that is the version our
    /// status write made, the cache has shown it, and whatever it holds from now on is as
    /// new (a later write of someone else's included: a stale writer's is planned from).
    pub fn cache_shows(&mut self, version: &str) {
        if self.status_version.as_deref() == Some(version) {
            self.status = None;
            self.status_version = None;
        }
        if self.cached_versions.len() == CACHED_VERSIONS {
            self.cached_versions.pop_front();
        }
        self.cached_versions.push_back(version.to_string());
    }

    /// The resourceVersion of the object the planner's memory comes from: ours while the
    /// cache has not shown our write, else `cached` (the cached object's).
    pub fn version_for_planning(&self, cached: Option<&str>) -> Option<String> {
        match &self.status {
            Some(_) => self.status_version.clone(),
            None => cached.map(str::to_string),
        }
    }

    /// Compare the expectations with the pod cache (this cluster's pods) and say whether a
    /// plan may be made. `relists`: the pod cache's relist count now.
    pub fn check(&mut self, pods: &[Arc<LeanPod>], relists: u64, now: Instant) -> Freshness {
        if self.relists != relists {
            // A fresh list is authoritative: whatever it lacks is not coming.
            self.clear_pods();
        }
        if !self.created.is_empty() {
            let names: HashSet<&str> = pods
                .iter()
                .filter_map(|p| p.metadata.name.as_deref())
                .collect();
            self.created
                .retain(|name, _| !names.contains(name.as_str()));
        }
        if !self.deleted.is_empty() {
            // Still there and not Terminating: our delete is not shown yet.
            let live: HashSet<&str> = pods
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter_map(|p| p.metadata.uid.as_deref())
                .collect();
            self.deleted.retain(|uid| live.contains(uid.as_str()));
        }
        if !self.removed.is_empty() {
            self.check_removed(pods);
        }
        if !self.held.is_empty() {
            let present: HashSet<&str> = pods
                .iter()
                .filter_map(|p| p.metadata.uid.as_deref())
                .collect();
            self.held.retain(|uid, _| present.contains(uid.as_str()));
        }
        if !self.patched.is_empty() {
            let label = slice_core::constants::LABEL_METADATA_HASH;
            let unshown: HashMap<&str, Option<&str>> = pods
                .iter()
                .filter_map(|p| Some((p.metadata.uid.as_deref()?, p.label(label))))
                .collect();
            self.patched.retain(|uid, hash| {
                unshown
                    .get(uid.as_str())
                    .is_some_and(|shown| *shown != Some(hash.as_str()))
            });
        }
        if self.created.is_empty()
            && self.deleted.is_empty()
            && self.removed.is_empty()
            && self.patched.is_empty()
        {
            self.clear_pods();
            return Freshness::Fresh;
        }
        match self.deadline {
            Some(deadline) if deadline <= now => Freshness::Stalled,
            _ => Freshness::Catching,
        }
    }

    /// Force-deleted pods: shown once gone, or once the cache shows the grace period 0 our
    /// delete set while a finalizer keeps the pod (that is another's to lift: reported, not
    /// waited for, else the cache would be declared stalled and listed again for ever).
    fn check_removed(&mut self, pods: &[Arc<LeanPod>]) {
        let present: HashMap<&str, &LeanPod> = pods
            .iter()
            .filter_map(|p| Some((p.metadata.uid.as_deref()?, p.as_ref())))
            .collect();
        let (held, unreported) = (&mut self.held, &mut self.unreported);
        self.removed.retain(|uid| {
            let Some(pod) = present.get(uid.as_str()) else {
                return false;
            };
            if pod.metadata.deletion_grace_period_seconds != Some(0) {
                return true;
            }
            let name = pod.metadata.name.clone().unwrap_or_default();
            if held.insert(uid.clone(), name.clone()).is_none() {
                unreported.push(name);
            }
            false
        });
    }

    /// Forget the pod expectations (the cache is being relisted).
    pub fn clear_pods(&mut self) {
        self.created.clear();
        self.deleted.clear();
        self.removed.clear();
        self.patched.clear();
        self.deadline = None;
    }

    /// Slices our pending creates were placed on.
    pub fn slices_taken(&self) -> impl Iterator<Item = &str> {
        self.created.values().filter_map(|s| s.as_deref())
    }
}

#[cfg(test)]
mod tests;
