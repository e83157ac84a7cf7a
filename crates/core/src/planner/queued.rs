//! Queued provisioning (`spec.provisioning.mode: Queued`): missing slices are asked for by
//! ProvisioningRequests, all or nothing. A Multislice group makes one request per epoch for
//! every slice it misses, and its workers start once it is `Provisioned` (gang start:
//! `place::create_replicas` then finds every slice free); independent replicas make one per
//! slice. Workers created while a request is provisioned consume it (the autoscaler's
//! annotations, our `slices.dev/provisioning-request` label). A request that fails, expires
//! unused, is revoked or times out is deleted and made again after a wait
//! (`Problem::retry_after`), never charged; replicas running on revoked capacity are
//! replaced, uncharged. Everything the planner needs after a restart is in the request
//! objects and `groups[].queued`.

mod objects;
mod verdict;

use std::collections::{BTreeMap, BTreeSet};

use jiff::SignedDuration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use self::objects::{Asked, request_name, request_objects};
use self::verdict::{Verdict, Viewing, judge};
use super::observe::PodFacts;
use super::reason::DeleteReason;
use super::state::Planner;
use super::types::{EventType, RequestCreate, RequestDelete};
use crate::api::validate::ResolvedGroup;
use crate::api::{GroupStatus, Membership, QueuedStatus};
use crate::autoscaling::LeanRequest;
use crate::constants::{
    LABEL_PROVISIONING_REQUEST, REQUEST_BACKOFF_MAX_DOUBLINGS, REQUEST_POLL_SECONDS,
};
use crate::lean::LeanPod;

/// A cluster without the ProvisioningRequest API cannot queue: the reason and message of
/// its `SpecValid` condition.
pub(super) const API_MISSING: (&str, &str) = (
    "ProvisioningRequestsUnavailable",
    "spec.provisioning.mode Queued needs the ProvisioningRequest API (autoscaling.x-k8s.io/v1), \
     which this cluster does not serve: enable the cluster autoscaler's ProvisioningRequest \
     support (on GKE, a cluster version with queued provisioning), or use mode Autoscale",
);

/// The cluster asks for missing slices by ProvisioningRequests.
pub(super) fn asks_for_requests(tc: &crate::api::TrainCluster) -> bool {
    tc.spec.queues()
}

/// Requests are listed, not watched: while the group has one, it is looked at again this
/// often (a condition set, capacity revoked).
const REQUEST_POLL: SignedDuration = SignedDuration::from_secs(REQUEST_POLL_SECONDS);

/// What the group's requests allow its workers this round.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Gate {
    /// No worker is created: a Multislice group that runs nothing waits for its request.
    pub closed: bool,
    /// Provisioned requests the workers created now consume (the replica each is for, if
    /// any, and its name), unconsumed ones first.
    pub consume: Vec<(Option<u32>, String)>,
    pub class: String,
}

/// What the group is, as its requests are kept at what it wants.
pub(super) struct Asking<'p, 'a> {
    /// Slices the group can use now.
    pub usable: usize,
    /// Suspended, failed or finished: it asks for nothing.
    pub stopped: bool,
    /// Some replica of the group runs (is kept).
    pub running: bool,
    /// Replica indexes whose pods exist.
    pub occupied: BTreeSet<u32>,
    pub pods: &'p [PodFacts<'a>],
}

impl<'a> Planner<'a> {
    /// Keep the group's requests at what it wants; returns what its workers may do now.
    /// Records `groups[].queued`.
    pub(super) fn queue_requests(
        &mut self,
        group: &ResolvedGroup<'_>,
        memory: &mut GroupStatus,
        asking: &Asking<'_, '_>,
    ) -> Gate {
        let provisioning = self.tc.spec.provisioning_of(group.spec);
        let (Some(class), Some(_)) = (provisioning.and_then(|p| p.queued_class()), &group.shape)
        else {
            // Kept while requests of the group are left, so they are listed (and withdrawn)
            // until they are gone.
            let left = self
                .requests
                .iter()
                .any(|r| r.group.as_deref() == Some(group.name()));
            memory.queued = memory.queued.take().filter(|_| left);
            return Gate::default();
        };
        let class = class.to_string();
        let timeout = provisioning.map_or(0, |p| p.timeout_seconds);
        let mut status = memory.queued.take().unwrap_or_default();
        let multislice = self.tc.spec.membership == Membership::Multislice;
        let consumers = consumers(asking.pods);
        // Requests whose capacity workers took, now or before (`groups[].queued.used`).
        let used_before = std::mem::take(&mut status.used);
        let used = |r: &LeanRequest| {
            consumers.contains_key(r.name.as_str()) || used_before.contains(&r.name)
        };
        let want = match asking.stopped {
            true => 0,
            false => (group.spec.slices.max as usize).saturating_sub(asking.usable) as u32,
        };
        let viewing = Viewing {
            template_hash: &memory.template_hash,
            epoch: multislice.then_some(memory.epoch),
            want,
            timeout: SignedDuration::from_secs(i64::from(timeout)),
            now: self.now,
            consumed: false,
            stopped: asking.stopped,
        };
        let (pending, provisioned) =
            self.judge_requests(group.name(), &viewing, &used, &consumers, &mut status);
        let asked = need(want, &pending, &provisioned, &used, &asking.occupied);
        let made = match asked.slices {
            0 => Vec::new(),
            _ => self.ask(group, memory, &mut status, &class, &asked),
        };
        // Fresh capacity first: the workers created now are what it was asked for.
        let mut consume: Vec<&LeanRequest> = provisioned.clone();
        consume.sort_by_key(|r| (used(r), r.name.clone()));
        let mut taken: Vec<String> = provisioned
            .iter()
            .filter(|r| used(r))
            .map(|r| r.name.clone())
            .collect();
        taken.sort();
        status.used = taken;
        let waiting = !pending.is_empty() || !made.is_empty();
        self.wake_for_requests(&pending, !made.is_empty(), timeout);
        if !pending.is_empty() || !provisioned.is_empty() || !made.is_empty() {
            self.wake_at(self.now + REQUEST_POLL);
        }
        if !provisioned.is_empty() {
            status.streak = 0;
        }
        record(&mut status, want, &pending, &provisioned, &made, self.now);
        memory.queued = (status.made > 0 || want > 0).then_some(status);
        Gate {
            closed: multislice && waiting && !asking.running,
            consume: consume
                .iter()
                .map(|r| (r.replica, r.name.clone()))
                .collect(),
            class,
        }
    }

    /// Judge each of the group's requests: kept (pending, provisioned), withdrawn or given
    /// up (both deleted).
    fn judge_requests<'r>(
        &mut self,
        group: &str,
        viewing: &Viewing<'_>,
        used: &dyn Fn(&LeanRequest) -> bool,
        consumers: &Consumers<'_>,
        status: &mut QueuedStatus,
    ) -> (Vec<&'r LeanRequest>, Vec<&'r LeanRequest>)
    where
        'a: 'r,
    {
        let (mut pending, mut provisioned) = (Vec::new(), Vec::new());
        let requests: &'r [LeanRequest] = self.requests;
        let mine = requests
            .iter()
            .filter(|r| r.group.as_deref() == Some(group));
        for request in mine.filter(|r| !r.deleting) {
            let viewing = Viewing {
                consumed: used(request),
                ..*viewing
            };
            match judge(request, &viewing) {
                Verdict::Pending => pending.push(request),
                Verdict::Provisioned => provisioned.push(request),
                Verdict::Withdraw(why) => self.withdraw_request(group, request, &why),
                Verdict::GiveUp(problem, why) => {
                    let problem = GivenUp { problem, why };
                    self.give_up(group, request, &problem, consumers, status);
                }
            }
        }
        (pending, provisioned)
    }

    /// Requests of groups that no longer queue (their mode changed, or they were removed)
    /// are withdrawn: nobody would take their capacity.
    pub(super) fn withdraw_unqueued_requests(&mut self, groups: &[ResolvedGroup<'_>]) {
        let queueing: BTreeSet<&str> = groups
            .iter()
            .filter(|g| g.shape.is_some())
            .filter(|g| {
                let provisioning = self.tc.spec.provisioning_of(g.spec);
                provisioning.and_then(|p| p.queued_class()).is_some()
            })
            .map(|g| g.name())
            .collect();
        let requests: &[LeanRequest] = self.requests;
        for request in requests.iter().filter(|r| !r.deleting) {
            let group = request.group.as_deref().unwrap_or_default();
            if !queueing.contains(group) {
                self.withdraw_request(group, request, "the group no longer queues");
            }
        }
    }

    /// Make the requests for `need` slices: one for them all (Multislice, unless one of
    /// this epoch is pending already), or one per slice. Not while the last one given up is
    /// recent, nor while creates are refused.
    fn ask(
        &mut self,
        group: &ResolvedGroup<'_>,
        memory: &GroupStatus,
        status: &mut QueuedStatus,
        class: &str,
        asked: &Need,
    ) -> Vec<String> {
        let multislice = self.tc.spec.membership == Membership::Multislice;
        let need = asked.slices;
        if multislice && asked.pending {
            return Vec::new();
        }
        let retry_at = status.retry_at.as_ref().map(|t| t.0);
        if let Some(until) = retry_at.filter(|t| *t > self.now).or(self.create_hold) {
            self.wake_at(until);
            return Vec::new();
        }
        status.retry_at = None;
        let (replicas, slices): (Vec<Option<u32>>, u32) = match multislice {
            true => (vec![None], need),
            false => (asked.replicas.iter().copied().map(Some).collect(), 1),
        };
        let mut made = Vec::new();
        for replica in replicas {
            let name = request_name(self.tc, group.name(), status.made);
            status.made += 1;
            let asked = Asked {
                name: name.clone(),
                class,
                slices,
                epoch: multislice.then_some(memory.epoch),
                replica,
                template_hash: &memory.template_hash,
            };
            let (template, request) = request_objects(self.tc, group, &asked);
            self.plan.requests.create.push(RequestCreate {
                group: group.name().to_string(),
                template,
                request,
            });
            made.push(name);
        }
        self.emit(
            EventType::Normal,
            "ProvisioningRequested",
            format!(
                "group {}: asking for {need} slices ({} hosts each) by ProvisioningRequest {} of class {class}",
                group.name(),
                group.hosts,
                made.join(", ")
            ),
        );
        made
    }

    /// A request failed, expired unused, was revoked or timed out: deleted (with the
    /// replicas on revoked capacity), counted and said, and the next one made later.
    fn give_up(
        &mut self,
        group: &str,
        request: &LeanRequest,
        given_up: &GivenUp,
        consumers: &Consumers<'_>,
        status: &mut QueuedStatus,
    ) {
        let (problem, why) = (
            given_up.problem,
            format!("request {}: {}", request.name, given_up.why),
        );
        self.withdraw_request(group, request, &why);
        let replaced = match problem {
            verdict::Problem::Revoked => self.replace_consumers(group, request, consumers),
            _ => 0,
        };
        let replaced = match replaced {
            0 => String::new(),
            n => format!("; {n} replicas on its capacity are replaced"),
        };
        self.emit(
            EventType::Warning,
            problem.code(),
            format!("group {group}: {why}; deleted, a new request follows (not charged){replaced}"),
        );
        problem.count(status);
        status.last_problem = Some(format!("{}: {why}", problem.code()));
        // A backoff: each request given up in a row doubles the wait, up to 16 times.
        let doubling = 1 << status.streak.min(REQUEST_BACKOFF_MAX_DOUBLINGS);
        status.streak += 1;
        let retry = self.now.checked_add(problem.retry_after() * doubling).ok();
        status.retry_at = retry.map(Time);
    }

    fn withdraw_request(&mut self, group: &str, request: &LeanRequest, why: &str) {
        self.plan.requests.delete.push(RequestDelete {
            group: group.to_string(),
            name: request.name.clone(),
            uid: request.uid.clone(),
        });
        if !why.starts_with("request ") {
            self.emit(
                EventType::Normal,
                "ProvisioningWithdrawn",
                format!("group {group}: withdrawing request {}: {why}", request.name),
            );
        }
    }

    /// The replicas running on a revoked request's capacity go, whole and uncharged.
    fn replace_consumers(
        &mut self,
        group: &str,
        request: &LeanRequest,
        consumers: &Consumers<'_>,
    ) -> usize {
        let Some(replicas) = consumers.get(request.name.as_str()) else {
            return 0;
        };
        for (replica, pods) in replicas {
            let reason = DeleteReason::CapacityRevoked {
                request: request.name.clone(),
            };
            self.delete_whole(group, Some(*replica), reason, pods);
        }
        replicas.len()
    }

    /// Look again when a pending request (or one made now) times out.
    fn wake_for_requests(&mut self, pending: &[&LeanRequest], made: bool, timeout: u32) {
        let timeout = SignedDuration::from_secs(i64::from(timeout));
        let created = pending.iter().filter_map(|r| r.created);
        let made = made.then_some(self.now);
        let deadlines = created
            .chain(made)
            .filter_map(|t| t.checked_add(timeout).ok());
        if let Some(first) = deadlines.min() {
            self.wake_at(first);
        }
    }

    /// Workers created in this plan from `first_create` on consume the provisioned
    /// requests: a Multislice job all the first, independent replicas one each.
    pub(super) fn consume_requests(&mut self, group: &str, first_create: usize, gate: &Gate) {
        if gate.consume.is_empty() {
            return;
        }
        let multislice = self.tc.spec.membership == Membership::Multislice;
        let mut left: Vec<&(Option<u32>, String)> = gate.consume.iter().collect();
        let creates = self.plan.create[first_create..]
            .iter_mut()
            .filter(|c| !c.spare && c.group == group);
        for create in creates {
            let request = match multislice {
                true => left.first().copied(),
                // The request made for this replica, else any left.
                false => {
                    let own = left.iter().position(|(r, _)| *r == Some(create.replica));
                    own.or((!left.is_empty()).then_some(0))
                        .map(|i| left.remove(i))
                }
            };
            if let Some((_, request)) = request {
                create.pods = create.pods.clone().consuming(request, &gate.class);
            }
        }
    }
}

/// What is asked for: `slices`, while a request is `pending` or not, and the replica
/// indexes independent replicas' requests are for.
struct Need {
    slices: u32,
    pending: bool,
    replicas: Vec<u32>,
}

/// What is still to ask for: the slices wanted less those asked for already (pending
/// requests, and provisioned capacity no worker took yet: its nodes may not be Ready, or
/// counted, yet; capacity taken before and left, its slice lost, covers nothing), and for
/// independent replicas the replica indexes no pod nor request has.
fn need(
    want: u32,
    pending: &[&LeanRequest],
    provisioned: &[&LeanRequest],
    used: &dyn Fn(&LeanRequest) -> bool,
    occupied: &BTreeSet<u32>,
) -> Need {
    let fresh = provisioned.iter().filter(|r| !used(r));
    let open: Vec<&&LeanRequest> = pending.iter().chain(fresh).collect();
    let covered: u32 = open.iter().map(|r| r.slices).sum();
    let slices = want.saturating_sub(covered);
    let spoken_for: BTreeSet<u32> = open
        .iter()
        .filter_map(|r| r.replica)
        .chain(occupied.iter().copied())
        .collect();
    Need {
        slices,
        pending: !pending.is_empty(),
        replicas: (0..)
            .filter(|r| !spoken_for.contains(r))
            .take(slices as usize)
            .collect(),
    }
}

/// A request given up, and why.
struct GivenUp {
    problem: verdict::Problem,
    why: String,
}

/// The group's pods by the request they consume, then by replica.
type Consumers<'a> = BTreeMap<&'a str, BTreeMap<u32, Vec<&'a LeanPod>>>;

fn consumers<'a>(pods: &[PodFacts<'a>]) -> Consumers<'a> {
    let mut by: Consumers<'a> = BTreeMap::new();
    for facts in pods {
        if let (Some(request), Some(replica)) =
            (facts.pod.label(LABEL_PROVISIONING_REQUEST), facts.replica)
        {
            by.entry(request)
                .or_default()
                .entry(replica)
                .or_default()
                .push(facts.pod);
        }
    }
    by
}

fn record(
    status: &mut QueuedStatus,
    want: u32,
    pending: &[&LeanRequest],
    provisioned: &[&LeanRequest],
    made: &[String],
    now: jiff::Timestamp,
) {
    status.wanted = want;
    let names =
        |rs: &[&LeanRequest]| -> Vec<String> { rs.iter().map(|r| r.name.clone()).collect() };
    status.pending = names(pending);
    status.pending.extend(made.iter().cloned());
    status.pending.sort();
    status.provisioned = names(provisioned);
    status.provisioned.sort();
    let oldest = pending.iter().filter_map(|r| r.created).min();
    let since = oldest.or((!made.is_empty()).then_some(now));
    status.waiting_since = since.map(Time);
}
