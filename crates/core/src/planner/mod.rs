//! The planner: a pure function from (spec, observed pods, node inventory, its own past
//! decisions in `.status`, now) to a [`Plan`]. No IO; the reconciler applies the plan.

pub mod observe;
pub mod policy;
pub mod reason;
pub mod render;
mod status;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Pod, Service};

use crate::lean::LeanPod;

use crate::api::validate::{self, FieldError, ResolvedGroup};
use crate::api::{GroupStatus, Membership, Phase, TrainCluster, TrainClusterStatus};
use crate::constants::*;
use crate::inventory::{Inventory, Occupancy, Slice};
use observe::{ObservedReplica, PodFacts, Verdict};
use rayon::prelude::*;
pub use reason::{DeleteReason, DisruptionKind};
use render::{GroupPlacement, PinnedSlice};

/// Everything the planner looks at.
pub struct PlanInput<'a> {
    pub cluster: &'a TrainCluster,
    /// Pods carrying this cluster's `slices.dev/cluster` label (others are ignored; pods not
    /// controlled by this TrainCluster's uid are never touched).
    pub pods: &'a [Arc<LeanPod>],
    pub inventory: &'a Inventory,
    /// Free slices another TrainCluster was just given but whose pods the caches do not show
    /// yet: not free for this plan.
    pub reserved: &'a HashSet<String>,
    pub now: Timestamp,
}

/// The next step: what to create and delete, the status to write, events to emit.
#[derive(Clone, Debug)]
pub struct Plan {
    pub create: Vec<GroupCreate>,
    pub delete: Vec<GroupDelete>,
    pub create_head: Option<Pod>,
    pub service: Service,
    pub status: TrainClusterStatus,
    pub events: Vec<PlannedEvent>,
    /// Look again after this long even if nothing changes (backoff, resize interval, grace).
    pub requeue_after: Option<Duration>,
}

/// A whole replica group to create: all `hosts` pods, or none.
#[derive(Clone, Debug)]
pub struct GroupCreate {
    pub group: String,
    pub replica: u32,
    pub epoch: u64,
    pub slice: Option<String>,
    pub pods: Vec<Pod>,
}

/// A whole replica group (or stray pods) to delete, with the reason.
#[derive(Clone, Debug)]
pub struct GroupDelete {
    pub group: String,
    pub replica: Option<u32>,
    pub reason: DeleteReason,
    pub pods: Vec<PodRef>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRef {
    pub name: String,
    pub uid: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedEvent {
    pub type_: EventType,
    pub reason: &'static str,
    pub note: String,
}

impl Plan {
    /// True when applying the plan changes nothing but possibly the status.
    pub fn is_noop(&self) -> bool {
        self.create.is_empty() && self.delete.is_empty() && self.create_head.is_none()
    }
}

/// Compute the next step for one TrainCluster.
pub fn plan(input: &PlanInput<'_>) -> Plan {
    let tc = input.cluster;
    let previous = tc.status.clone().unwrap_or_default();
    let service = render::headless_service(tc);
    let cluster = tc.metadata.name.as_deref();
    let uid = tc.metadata.uid.as_deref();
    // Reading 64,000 pods is bound by memory latency; spread it over the cores.
    let owned: Vec<PodFacts<'_>> = input
        .pods
        .par_iter()
        .map(|p| PodFacts::of(p))
        .filter(|f| f.cluster == cluster && is_controlled_by(f.pod, uid))
        .collect();
    match validate::resolve(tc) {
        Err(errors) => invalid_plan(tc, &previous, errors, service, input.now),
        Ok(groups) => Planner {
            tc,
            previous: &previous,
            inventory: input.inventory,
            now: input.now,
            claimed: input.reserved.clone(),
            plan: Plan {
                create: Vec::new(),
                delete: Vec::new(),
                create_head: None,
                service,
                status: TrainClusterStatus::default(),
                events: Vec::new(),
                requeue_after: None,
            },
            wake: None,
        }
        .run(&groups, &owned),
    }
}

/// Pods are the operator's only if this TrainCluster (by uid) controls them.
fn is_controlled_by(pod: &LeanPod, uid: Option<&str>) -> bool {
    pod.metadata
        .owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|o| o.controller == Some(true) && Some(o.uid.as_str()) == uid)
}

fn invalid_plan(
    tc: &TrainCluster,
    previous: &TrainClusterStatus,
    errors: Vec<FieldError>,
    service: Service,
    now: Timestamp,
) -> Plan {
    let message = errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    let mut status = previous.clone();
    status.phase = Phase::Invalid;
    status.observed_generation = tc.metadata.generation;
    let mut events = Vec::new();
    let changed = status::set_condition(
        &mut status,
        crate::api::CONDITION_VALID,
        false,
        "InvalidSpec",
        &message,
        tc.metadata.generation,
        now,
    );
    if changed {
        events.push(PlannedEvent {
            type_: EventType::Warning,
            reason: "InvalidSpec",
            note: truncate(&message, 1000),
        });
    }
    // Nothing is deleted for an invalid spec: running groups keep running until it is fixed.
    Plan {
        create: Vec::new(),
        delete: Vec::new(),
        create_head: None,
        service,
        status,
        events,
        requeue_after: None,
    }
}

struct Planner<'a> {
    tc: &'a TrainCluster,
    previous: &'a TrainClusterStatus,
    inventory: &'a Inventory,
    now: Timestamp,
    /// Free slices already promised: to another cluster (reservations) or to an earlier
    /// worker group in this plan.
    claimed: HashSet<String>,
    plan: Plan,
    wake: Option<Timestamp>,
}

/// What one worker group contributes to the cluster-wide status.
struct GroupSummary {
    status: GroupStatus,
    waiting: bool,
    restarting: bool,
    exhausted: Option<String>,
    min: u32,
}

impl<'a> Planner<'a> {
    fn run(mut self, groups: &[ResolvedGroup<'a>], pods: &[PodFacts<'a>]) -> Plan {
        let cluster = self.tc.metadata.name.clone().unwrap_or_default();
        // Slices our pods are pinned to are taken, whatever a moment-old inventory says.
        self.claimed
            .extend(pods.iter().filter_map(|f| f.slice.map(str::to_string)));
        let generation = self.tc.metadata.generation;
        // A Failed cluster stays failed until its spec changes; a new spec gets a new budget.
        let failed_before = self.previous.phase == Phase::Failed;
        let sticky_failed = failed_before && self.previous.observed_generation == generation;
        let reset_budget = failed_before && !sticky_failed;

        let mut by_group: BTreeMap<&str, Vec<PodFacts<'a>>> = BTreeMap::new();
        let mut head_pods = Vec::new();
        for facts in pods {
            match facts.role {
                Some(ROLE_HEAD) => head_pods.push(facts.pod),
                _ => by_group
                    .entry(facts.group.unwrap_or(""))
                    .or_default()
                    .push(*facts),
            }
        }
        let mut summaries = Vec::new();
        for group in groups {
            let pods = by_group.remove(group.name()).unwrap_or_default();
            let mut memory = self
                .previous
                .groups
                .iter()
                .find(|g| g.name == group.name())
                .cloned()
                .unwrap_or_else(|| GroupStatus {
                    name: group.name().to_string(),
                    ..Default::default()
                });
            if reset_budget {
                memory.restarts = 0;
                memory.preemptions = 0;
                memory.backoff_until = None;
            }
            summaries.push(self.plan_group(group, &pods, memory, sticky_failed));
        }
        // Pods of groups no longer in the spec go, whole.
        for (name, facts) in by_group {
            let pods: Vec<&LeanPod> = facts.iter().map(|f| f.pod).collect();
            self.delete_whole(
                name,
                None,
                DeleteReason::UnknownGroup {
                    group: name.to_string(),
                },
                &pods,
            );
        }
        self.plan_head(&cluster, &head_pods);
        self.finish_status(summaries)
    }

    fn plan_group(
        &mut self,
        group: &ResolvedGroup<'a>,
        pods: &[PodFacts<'a>],
        mut memory: GroupStatus,
        sticky_failed: bool,
    ) -> GroupSummary {
        let spec = &self.tc.spec;
        let policy = &spec.failure_policy;
        let now = self.now;
        let grace = SignedDuration::from_secs(policy.node_not_ready_grace_seconds.into());
        let name = group.name().to_string();
        let multislice = spec.membership == Membership::Multislice;
        let (observed, strays) = observe::replicas(
            pods,
            group.hosts,
            group.shape.is_some(),
            self.inventory,
            now,
            grace,
        );
        if !strays.is_empty() {
            self.delete_whole(&name, None, DeleteReason::BadReplicaIndex, &strays);
        }
        memory.next_incarnation = memory.next_incarnation.max(
            observed
                .values()
                .map(|r| r.incarnation + 1)
                .max()
                .unwrap_or(0),
        );

        // 1. Judge every replica: keep, wait for, or delete.
        let mut kept: Vec<&ObservedReplica<'a>> = Vec::new();
        let mut draining = 0u32;
        let (mut failures, mut preemptions) = (0u32, 0u32);
        let mut broken_current_epoch = false;
        for replica in observed.values() {
            match &replica.verdict {
                Verdict::Draining => draining += 1,
                // Kept (it occupies its index and slice); looked at again when the grace ends.
                Verdict::Settling { .. } | Verdict::Healthy
                    if multislice && replica.epoch != Some(memory.epoch) =>
                {
                    self.delete_replica(
                        &name,
                        replica,
                        DeleteReason::EpochChanged {
                            epoch: memory.epoch,
                        },
                    );
                }
                Verdict::Settling { until } => {
                    self.wake_at(*until);
                    kept.push(replica);
                }
                Verdict::Broken(reason) => {
                    match reason.kind() {
                        DisruptionKind::Failure => failures += 1,
                        DisruptionKind::Preemption => preemptions += 1,
                        DisruptionKind::Maintenance => {}
                    }
                    broken_current_epoch |= replica.epoch == Some(memory.epoch);
                    self.delete_replica(&name, replica, reason.clone());
                }
                Verdict::Healthy if multislice && replica.epoch != Some(memory.epoch) => {
                    self.delete_replica(
                        &name,
                        replica,
                        DeleteReason::EpochChanged {
                            epoch: memory.epoch,
                        },
                    );
                }
                Verdict::Healthy => kept.push(replica),
            }
        }
        // A multislice job restarts as one: one restart however many slices failed.
        if multislice {
            failures = failures.min(1);
            preemptions = preemptions.min(1);
        }

        // 2. Budget and backoff.
        memory.restarts += failures;
        memory.preemptions += preemptions;
        if failures > 0 {
            memory.last_failure_time = Some(now.to_string());
            let wait = policy::backoff(
                memory.restarts,
                SignedDuration::from_secs(policy.backoff_seconds.into()),
                SignedDuration::from_secs(policy.max_backoff_seconds.into()),
            );
            memory.backoff_until = now.saturating_add(wait).ok().map(|t| t.to_string());
        }
        let exhausted = if memory.restarts > policy.max_restarts {
            Some(format!(
                "group {name}: {} restarts exceed failurePolicy.maxRestarts ({}); fix the workload, then edit the spec to start over",
                memory.restarts, policy.max_restarts
            ))
        } else {
            policy
                .max_preemptions
                .filter(|m| memory.preemptions > *m)
                .map(|m| {
                    format!(
                        "group {name}: {} preemptions exceed failurePolicy.maxPreemptions ({m})",
                        memory.preemptions
                    )
                })
        };
        let failed = sticky_failed || exhausted.is_some();
        if failures > 0 || preemptions > 0 {
            self.emit(
                EventType::Warning,
                "GroupFailed",
                format!(
                    "group {name}: {failures} failure(s), {preemptions} preemption(s); restarts {}/{}, preemptions {}",
                    memory.restarts, policy.max_restarts, memory.preemptions
                ),
            );
        }

        // 3. Slices this group holds or can take.
        let own: HashSet<&str> = observed.values().filter_map(|r| r.slice).collect();
        let usable = self.usable_slices(group, &name, &own, grace);
        memory.available_slices = usable.len() as u32;

        // 4. Size.
        let previous_target = memory.desired_slices;
        let decision = if failed || spec.suspend {
            policy::SizeDecision {
                target: 0,
                waiting: false,
                grow_at: None,
            }
        } else if group.shape.is_none() || !spec.elastic.wait_for_ready_slices {
            policy::SizeDecision {
                target: policy::fit(
                    group.spec.slices.max,
                    group.spec.slices.max,
                    &spec.elastic.allowed_slice_counts,
                ),
                waiting: false,
                grow_at: None,
            }
        } else {
            policy::decide_size(&policy::SizeInput {
                available: memory.available_slices,
                min: group.spec.slices.min,
                max: group.spec.slices.max,
                allowed: &spec.elastic.allowed_slice_counts,
                previous_target,
                last_resize: parse_time(memory.last_resize_time.as_deref()),
                resize_interval: SignedDuration::from_secs(
                    spec.elastic.resize_interval_seconds.into(),
                ),
                now,
            })
        };
        let target = decision.target;
        if let Some(at) = decision.grow_at {
            self.wake_at(at);
        }
        if target != previous_target {
            memory.last_resize_time = Some(now.to_string());
            if !failed && !spec.suspend {
                let verb = if previous_target == 0 {
                    "starting with"
                } else {
                    "resizing to"
                };
                self.emit(
                    EventType::Normal,
                    "Resized",
                    format!(
                        "group {name}: {verb} {target} slice(s) (was {previous_target}; {} available, range [{}, {}])",
                        memory.available_slices, group.spec.slices.min, group.spec.slices.max
                    ),
                );
            }
        }
        if decision.waiting && !(self.previous.phase == Phase::WaitingForSlices) {
            self.emit(
                EventType::Warning,
                "WaitingForSlices",
                format!(
                    "group {name}: {} whole, ready, free slice(s) of {} available; waiting for slices.min = {}",
                    memory.available_slices,
                    shape_text(group),
                    group.spec.slices.min
                ),
            );
        }
        memory.desired_slices = target;

        // 5. Scale down, or restart the multislice job, as whole groups.
        let stop_reason = if failed {
            Some(DeleteReason::BudgetExhausted)
        } else if spec.suspend {
            Some(DeleteReason::Suspended)
        } else if decision.waiting {
            Some(DeleteReason::NotEnoughSlices)
        } else {
            None
        };
        if let Some(reason) = stop_reason {
            for replica in kept.drain(..) {
                self.delete_replica(&name, replica, reason.clone());
            }
        } else if multislice {
            let membership_changed = broken_current_epoch
                || (target != previous_target && !kept.is_empty())
                || kept.iter().any(|r| r.replica >= target);
            if membership_changed || (target != previous_target && observed.is_empty()) {
                memory.epoch += 1;
                // One event for the whole restart, not one per group (a job may have 1,000).
                let restarted = kept.len();
                let reason = DeleteReason::EpochChanged {
                    epoch: memory.epoch,
                };
                for replica in kept.drain(..) {
                    self.delete_quietly(&name, replica, reason.clone());
                }
                if restarted > 0 {
                    self.emit(
                        EventType::Normal,
                        "GroupDeleted",
                        format!("group {name}: deleting {restarted} replica group(s): {reason}"),
                    );
                }
            }
        } else if kept.len() as u32 > target {
            // Highest replica indexes go first (never a random choice).
            let excess = kept.len() - target as usize;
            for replica in kept.split_off(kept.len() - excess).into_iter().rev() {
                self.delete_replica(&name, replica, DeleteReason::ScaledDown { target });
            }
        }

        // 6. Create missing groups, whole, never reusing an index whose pods still exist.
        let backoff_until = parse_time(memory.backoff_until.as_deref()).filter(|t| *t > now);
        if let Some(t) = backoff_until {
            self.wake_at(t);
        }
        let occupied: BTreeSet<u32> = observed.keys().copied().collect();
        let deleting = observed.len() - kept.len();
        let mut free_slices: Vec<&Slice> = usable
            .iter()
            .filter(|s| s.is_free() && !own.contains(s.id.as_str()))
            .copied()
            .collect();
        let mut created = Vec::new();
        if target > 0 && backoff_until.is_none() && !failed {
            let wanted: Vec<u32> = if multislice {
                // A new epoch starts only when every pod of the old one is gone.
                if deleting > 0 || draining > 0 {
                    Vec::new()
                } else {
                    (0..target).filter(|r| !occupied.contains(r)).collect()
                }
            } else {
                let slots = (target as usize).saturating_sub(kept.len() + deleting);
                (0..)
                    .filter(|r| !occupied.contains(r))
                    .take(slots)
                    .collect()
            };
            let needs_slice = group.shape.is_some() && spec.elastic.wait_for_ready_slices;
            if needs_slice && multislice && free_slices.len() < wanted.len() {
                // Never start part of a multislice job: wait for enough free slices.
                self.wake_at(now + SignedDuration::from_secs(5));
            } else {
                for replica in wanted {
                    let slice = if group.shape.is_some() && !free_slices.is_empty() {
                        Some(free_slices.remove(0))
                    } else if needs_slice {
                        self.wake_at(now + SignedDuration::from_secs(5));
                        break;
                    } else {
                        None
                    };
                    let placement = GroupPlacement {
                        replica,
                        epoch: memory.epoch,
                        incarnation: memory.next_incarnation,
                        slices_in_job: target,
                        slice: slice.map(|s| PinnedSlice {
                            id: s.id.clone(),
                            single_host: s.single_host,
                        }),
                    };
                    memory.next_incarnation += 1;
                    if let Some(s) = slice {
                        self.claimed.insert(s.id.clone());
                    }
                    created.push(replica);
                    self.emit(
                        EventType::Normal,
                        "GroupCreated",
                        format!(
                            "group {name}: creating replica {replica} ({} pods){}, epoch {}",
                            group.hosts,
                            slice
                                .map(|s| format!(" on slice {}", s.id))
                                .unwrap_or_default(),
                            memory.epoch
                        ),
                    );
                    self.plan.create.push(GroupCreate {
                        group: name.clone(),
                        replica,
                        epoch: memory.epoch,
                        slice: slice.map(|s| s.id.clone()),
                        pods: render::group_pods(self.tc, group, &placement),
                    });
                }
            }
        }
        // Free slices this group may still grow into stay promised to it.
        let still_wanted = (target as usize).saturating_sub(kept.len() + created.len());
        for s in free_slices.iter().take(still_wanted) {
            self.claimed.insert(s.id.clone());
        }
        if deleting > 0 || draining > 0 {
            self.wake_at(now + SignedDuration::from_secs(2));
        }
        for slice in &usable {
            if let Some(t) = self.inventory.grace_deadline(slice, grace) {
                self.wake_at(t);
            }
        }

        memory.ready_slices = kept.iter().filter(|r| r.ready).count() as u32;
        let mut replicas: BTreeSet<u32> = occupied;
        replicas.extend(created.iter().copied());
        memory.replicas = replicas.into_iter().collect();
        let restarting =
            !failed && (backoff_until.is_some() || deleting > 0 || draining > 0) && target > 0;
        GroupSummary {
            status: memory,
            waiting: decision.waiting,
            restarting,
            exhausted: exhausted.or_else(|| {
                sticky_failed.then(|| {
                    "the failure budget was spent; edit the spec to start over".to_string()
                })
            }),
            min: group.spec.slices.min,
        }
    }

    /// Whole slices of the group's shape this group may run on: ones it holds that are not
    /// lost, then ready free ones not promised to another group, in name order.
    fn usable_slices(
        &self,
        group: &ResolvedGroup<'_>,
        name: &str,
        own: &HashSet<&str>,
        grace: SignedDuration,
    ) -> Vec<&'a Slice> {
        let Some(shape) = &group.shape else {
            return Vec::new();
        };
        let namespace = self.tc.metadata.namespace.as_deref().unwrap_or_default();
        let cluster = self.tc.metadata.name.as_deref().unwrap_or_default();
        let accelerator = shape.generation.accelerator_label();
        let topology = shape.topology.to_string();
        let mut held = Vec::new();
        let mut free = Vec::new();
        for slice in self.inventory.slices() {
            if !slice.matches(accelerator, &topology, shape.hosts) {
                continue;
            }
            let ours = |h: &crate::inventory::Holder| {
                h.namespace == namespace && h.cluster == cluster && h.group == name
            };
            // Our own pods are the fresher witness: the inventory may be a moment old.
            let held_by_us = own.contains(slice.id.as_str())
                || match &slice.occupancy {
                    Occupancy::Held(h) => ours(h),
                    // e.g. a leftover pod with our labels but another owner on our slice
                    Occupancy::Contended(hs) => hs.iter().any(ours),
                    _ => false,
                };
            if held_by_us {
                if self.inventory.slice_lost(slice, self.now, grace).is_none() {
                    held.push(slice);
                }
                continue;
            }
            match &slice.occupancy {
                Occupancy::Free if slice.is_ready() && !self.claimed.contains(&slice.id) => {
                    free.push(slice)
                }
                _ => {}
            }
        }
        held.extend(free);
        held
    }

    fn delete_replica(&mut self, group: &str, replica: &ObservedReplica<'_>, reason: DeleteReason) {
        self.delete_whole(group, Some(replica.replica), reason, &replica.pods);
    }

    /// Like [`Planner::delete_replica`] without an event of its own (the caller emits one).
    fn delete_quietly(&mut self, group: &str, replica: &ObservedReplica<'_>, reason: DeleteReason) {
        let pods = live_refs(&replica.pods);
        if !pods.is_empty() {
            self.plan.delete.push(GroupDelete {
                group: group.to_string(),
                replica: Some(replica.replica),
                reason,
                pods,
            });
        }
    }

    fn delete_whole(
        &mut self,
        group: &str,
        replica: Option<u32>,
        reason: DeleteReason,
        pods: &[&LeanPod],
    ) {
        let pods = live_refs(pods);
        if pods.is_empty() {
            return;
        }
        let type_ = match reason.kind() {
            DisruptionKind::Maintenance => EventType::Normal,
            _ => EventType::Warning,
        };
        let what = match replica {
            Some(r) => format!("group {group}: deleting replica {r} ({} pods)", pods.len()),
            None => format!("group {group}: deleting {} stray pod(s)", pods.len()),
        };
        self.emit(type_, "GroupDeleted", format!("{what}: {reason}"));
        self.plan.delete.push(GroupDelete {
            group: group.to_string(),
            replica,
            reason,
            pods,
        });
    }

    fn plan_head(&mut self, cluster: &str, head_pods: &[&LeanPod]) {
        let spec = &self.tc.spec;
        let wanted = spec.head.is_some() && !spec.suspend;
        let mut present = false;
        for pod in head_pods {
            let failed = crate::inventory::is_terminal(pod);
            let stray = pod.name() != render::head_pod_name(cluster);
            if !wanted || failed || stray {
                let reason = if !wanted {
                    DeleteReason::Suspended
                } else if failed {
                    DeleteReason::MemberFailed {
                        pod: pod.name().to_string(),
                    }
                } else {
                    DeleteReason::BadReplicaIndex
                };
                self.delete_whole("head", None, reason, &[pod]);
            }
            present = true;
        }
        if wanted && !present {
            self.plan.create_head = render::head_pod(self.tc);
        }
    }

    fn emit(&mut self, type_: EventType, reason: &'static str, note: String) {
        self.plan.events.push(PlannedEvent {
            type_,
            reason,
            note,
        });
    }

    fn wake_at(&mut self, at: Timestamp) {
        self.wake = Some(self.wake.map_or(at, |w| w.min(at)));
    }

    fn finish_status(mut self, summaries: Vec<GroupSummary>) -> Plan {
        let status = status::cluster_status(
            self.tc,
            self.previous,
            &summaries_view(&summaries),
            self.now,
        );
        if status.phase == Phase::Failed && self.previous.phase != Phase::Failed {
            let why = summaries
                .iter()
                .filter_map(|s| s.exhausted.clone())
                .collect::<Vec<_>>()
                .join("; ");
            self.emit(EventType::Warning, "RestartBudgetExhausted", why);
        }
        self.plan.status = status;
        self.plan.requeue_after = self.wake.map(|at| {
            let wait = at
                .duration_since(self.now)
                .max(SignedDuration::from_secs(1));
            Duration::try_from(wait).unwrap_or(Duration::from_secs(1))
        });
        self.plan
    }
}

/// Members already terminating need no second delete.
fn live_refs(pods: &[&LeanPod]) -> Vec<PodRef> {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| PodRef {
            name: p.name().to_string(),
            uid: p.metadata.uid.clone(),
        })
        .collect()
}

fn summaries_view(summaries: &[GroupSummary]) -> Vec<status::GroupView<'_>> {
    summaries
        .iter()
        .map(|s| status::GroupView {
            status: &s.status,
            waiting: s.waiting,
            restarting: s.restarting,
            exhausted: s.exhausted.as_deref(),
            min: s.min,
        })
        .collect()
}

fn shape_text(group: &ResolvedGroup<'_>) -> String {
    match &group.shape {
        Some(s) => format!("{} {}", s.generation.accelerator_label(), s.topology),
        None => format!("{}-host groups", group.hosts),
    }
}

pub(crate) fn parse_time(text: Option<&str>) -> Option<Timestamp> {
    text.and_then(|t| t.parse().ok())
}

fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests;
