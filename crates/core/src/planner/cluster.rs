//! The plan for one valid TrainCluster: its pods sorted by worker group, each group planned
//! in turn (`group`), leftovers of groups no longer in the spec deleted, then the head pod
//! and the cluster status (`assemble`). The phases are called in order here; each decides
//! in its own module and records its decision on the shared [`Planner`] state.

use std::collections::{BTreeMap, HashSet};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Service;
use rayon::prelude::*;

use super::observe::PodFacts;
use super::state::Planner;
use super::status::set_condition;
use super::text::truncate;
use super::types::{EventAfter, EventType, GroupCreate, Plan, PlanInput, PlannedEvent};
use super::{
    DeleteReason, avoid, brake, budget, completion, creates, deadline, head, refused, rejections,
    render,
};
use crate::api::validate::{self, FieldError, ResolvedGroup};
use crate::api::{GroupStatus, Phase, TrainCluster, TrainClusterStatus};
use crate::constants::ROLE_HEAD;
use crate::inventory::Inventory;
use crate::lean::LeanPod;

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
    if !input.conflicts.is_empty() {
        let (reason, message) = ("NameConflict", joined(input.conflicts));
        return invalid_plan(tc, &previous, &message, reason, service, input.now);
    }
    if input.requests.is_none() && super::queued::asks_for_requests(tc) {
        let (reason, message) = super::queued::API_MISSING;
        return invalid_plan(tc, &previous, message, reason, service, input.now);
    }
    // A pod of this generation the API server refused as invalid: reported, not retried.
    if let Some(message) = refused::this_generation(&previous, tc.metadata.generation) {
        let message = message.to_string();
        return invalid_plan(tc, &previous, &message, refused::REASON, service, input.now);
    }
    match validate::resolve(tc) {
        Err(errors) => {
            let message = joined(&errors);
            invalid_plan(tc, &previous, &message, "InvalidSpec", service, input.now)
        }
        Ok(groups) => start(
            tc,
            &previous,
            input.inventory,
            input.reserved.clone(),
            Plan::empty(service),
            input.now,
        )
        .with_requests(input.requests.unwrap_or_default())
        .run(&groups, &owned),
    }
}

/// Pods are the operator's only if this TrainCluster (by uid) controls them.
fn is_controlled_by(pod: &LeanPod, uid: Option<&str>) -> bool {
    uid.is_some_and(|uid| crate::owner::is_controlled_by(&pod.metadata, uid))
}

fn joined(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// An invalid spec only reports itself (once per change of message).
fn invalid_plan(
    tc: &TrainCluster,
    previous: &TrainClusterStatus,
    message: &str,
    reason: &'static str,
    service: Service,
    now: Timestamp,
) -> Plan {
    let mut plan = Plan::empty(service);
    plan.status = previous.clone();
    // Nothing is created until the spec is fixed: no slice is kept from others meanwhile.
    plan.status.release_reservations();
    plan.status.phase = Phase::Invalid;
    plan.status.observed_generation = tc.metadata.generation;
    let changed = set_condition(
        &mut plan.status,
        crate::api::CONDITION_VALID,
        false,
        reason,
        message,
        tc.metadata.generation,
        now,
    );
    if changed {
        plan.events.push(PlannedEvent {
            type_: EventType::Warning,
            reason,
            note: truncate(message, 1000),
            after: None,
        });
    }
    // Nothing is deleted for an invalid spec: running groups keep running until it is fixed.
    plan
}

/// The planner's state at the start: nothing decided yet; the slices to avoid and the
/// kubelet refusals still remembered from the last status.
pub(super) fn start<'a>(
    tc: &'a TrainCluster,
    previous: &'a TrainClusterStatus,
    inventory: &'a Inventory,
    reserved: HashSet<String>,
    plan: Plan,
    now: Timestamp,
) -> Planner<'a> {
    Planner {
        tc,
        previous,
        inventory,
        requests: &[],
        now,
        claimed: reserved,
        plan,
        wake: None,
        fresh_spec: false,
        create_hold: None,
        retrying_refused: false,
        short: false,
        avoided: avoid::still_avoided(&previous.avoided_slices, now),
        rejections: rejections::recent(tc, &previous.kubelet_rejections, now),
        spare_refills: Vec::new(),
        start_time: deadline::start_time(tc, previous, now),
        held: Vec::new(),
    }
}

impl<'a> Planner<'a> {
    /// Plan every worker group in spec order (so earlier groups get the first pick of free
    /// slices), then the pods no group owns any more, the head pod and the status. A run
    /// that has succeeded only winds down (`completion`).
    pub(super) fn run(mut self, groups: &[ResolvedGroup<'a>], pods: &[PodFacts<'a>]) -> Plan {
        let tc = self.tc;
        if self.previous.phase == Phase::Succeeded {
            return self.wind_down(pods);
        }
        self.warn_about_the_spec();
        // Slices our pods are pinned to are taken, whatever a moment-old inventory says.
        // 64 pods to a slice: one allocation per slice, not per pod.
        for slice in pods.iter().filter_map(|f| f.slice) {
            if !self.claimed.contains(slice) {
                self.claimed.insert(slice.to_string());
            }
        }
        let past = budget::PastFailure::of(self.previous, tc.metadata.generation);
        self.fresh_spec = past.reset;
        self.create_hold = creates::hold(self.previous, past.reset, self.now);
        self.retrying_refused = creates::retrying(self.previous, past.reset, self.now);
        if let Some(t) = self.create_hold {
            self.wake_at(t);
        }
        let (head_pods, mut by_group) = split_by_group(pods);
        if completion::head_succeeded(tc, &head_pods) {
            let status = self.previous.clone();
            return self.succeed(pods, status, "HeadSucceeded");
        }
        let mut head = head::memory(self.previous, past.reset);
        let head_exhausted = self.judge_head(&head_pods, &mut head);
        // The run as a whole fails: its deadline passed, or its head's budget is spent.
        // A run that failed already keeps the reason it failed with.
        let deadline = match past.sticky {
            Some(_) => None,
            None => self.check_deadline(),
        };
        let run_failure = deadline.or(head_exhausted);
        let sticky = past.sticky.clone().or(run_failure.clone());
        let mut summaries = Vec::new();
        for group in groups {
            let pods = by_group.remove(group.name()).unwrap_or_default();
            let memory = group_memory(self.previous, group.name(), past.reset);
            summaries.push(self.plan_group(group, &pods, memory, sticky.as_ref()));
        }
        self.refill_all_spares(groups, &mut summaries);
        self.withdraw_unqueued_requests(groups);
        self.delete_unknown_groups(by_group);
        if completion::all_workers_succeeded(tc, &summaries) {
            let status = self.cluster_status(&summaries, None, None);
            return self.succeed(pods, status, "AllWorkersSucceeded");
        }
        let failure = sticky.as_ref().map(|f| f.cause).or_else(|| {
            summaries
                .iter()
                .find_map(|s| s.exhausted.as_ref().map(|f| f.cause))
        });
        self.place_head(&head_pods, &mut head, failure);
        let head_missing = tc.spec.head.is_some() && failure.is_none() && head_pods.is_empty();
        let refusal_may_end = self.create_hold.is_none()
            && creates::workers_refused(self.previous)
            && !self.short
            && !head_missing;
        let held = std::mem::take(&mut self.held);
        let (inventory, previous, now) = (self.inventory, self.previous, self.now);
        let mut plan = self.finish(summaries, head, run_failure);
        let report = brake::Report {
            held: &held,
            previous,
            inventory,
            percent: tc.spec.failure_policy.mass_node_loss_percent,
            grace: grace_of(tc),
            generation: tc.metadata.generation,
            now,
        };
        brake::report(&mut plan, &report);
        spares_last(&mut plan);
        end_refusal_untried(&mut plan, refusal_may_end);
        plan
    }

    /// Pods of groups no longer in the spec go, whole.
    fn delete_unknown_groups(&mut self, leftovers: ByGroup<'_>) {
        for (name, facts) in leftovers {
            let pods: Vec<&LeanPod> = facts.iter().map(|f| f.pod).collect();
            let reason = DeleteReason::UnknownGroup {
                group: name.to_string(),
            };
            self.delete_whole(name, None, reason, &pods);
        }
    }
}

/// A refusal stands while anything is wanted that is not there (held back, tried, or blocked
/// by old pods draining, a missing slice, a backoff); a plan that finds everything there ends
/// it. The executor clears it too, once a create goes through; this also covers that write
/// failing, or a crash before it.
fn end_refusal_untried(plan: &mut Plan, may_end: bool) {
    let tries = plan.create.iter().any(|c| !c.spare) || plan.create_head.is_some();
    if may_end
        && !tries
        && let Some(cleared) = creates::clear(&plan.status, creates::Created::Workers)
    {
        plan.status = cleared;
    }
}

/// Hot spares are created after every worker group: a rejected placeholder create (a
/// missing PriorityClass) then never keeps a worker group of this plan from being created.
fn spares_last(plan: &mut Plan) {
    let mut order: Vec<usize> = (0..plan.create.len()).collect();
    order.sort_by_key(|i| plan.create[*i].spare);
    if order.iter().enumerate().all(|(to, from)| to == *from) {
        return;
    }
    let mut moved: Vec<Option<GroupCreate>> = std::mem::take(&mut plan.create)
        .into_iter()
        .map(Some)
        .collect();
    plan.create = order
        .iter()
        .map(|i| moved[*i].take().expect("once"))
        .collect();
    for event in &mut plan.events {
        if let Some(EventAfter::Create(i)) = &mut event.after {
            *i = order.iter().position(|from| from == i).expect("an index");
        }
    }
}

/// Worker pods by their group label.
type ByGroup<'a> = BTreeMap<&'a str, Vec<PodFacts<'a>>>;

/// The head's pods apart; worker pods by their group label (pods without one under "").
/// One pass, no copies of pods: the facts are small and `Copy`.
fn split_by_group<'a>(pods: &[PodFacts<'a>]) -> (Vec<&'a LeanPod>, ByGroup<'a>) {
    let mut by_group: ByGroup<'a> = BTreeMap::new();
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
    (head_pods, by_group)
}

/// What the planner remembers of a group from its last status (nothing, for a new group);
/// with `reset_budget`, its restarts, preemptions and backoff are forgotten.
fn group_memory(previous: &TrainClusterStatus, name: &str, reset_budget: bool) -> GroupStatus {
    let mut memory = previous
        .groups
        .iter()
        .find(|g| g.name == name)
        .cloned()
        .unwrap_or_else(|| GroupStatus {
            name: name.to_string(),
            ..Default::default()
        });
    if reset_budget {
        budget::reset(&mut memory);
    }
    memory
}

/// How long a NotReady node is tolerated before its group counts as lost.
pub(super) fn grace_of(tc: &TrainCluster) -> jiff::SignedDuration {
    let seconds = tc.spec.failure_policy.node_not_ready_grace_seconds;
    jiff::SignedDuration::from_secs(seconds.into())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use std::sync::Arc;

    use super::*;
    use crate::api::{HeadSpec, Membership};
    use crate::planner::tests::Scene;
    use crate::testing::*;

    /// A settled one-slice cluster with a head pod (which `World` does not create itself).
    fn world_with_head() -> World {
        let mut tc = train_cluster(Membership::Multislice, 1, 1);
        tc.spec.head = Some(HeadSpec {
            template: worker_template(0),
        });
        let mut world = World::new(tc, v6e_pools(1));
        let head = world.plan().create_head.expect("head planned");
        world.settle(3);
        world.pods.push(Arc::new(run_on(head, "cpu-node")));
        assert!(world.plan().is_noop());
        world
    }

    #[test]
    fn split_by_group_sets_the_head_apart_and_keys_workers_by_group_label() {
        let mut world = world_with_head();
        let mut unlabelled = (*world.pods[0]).clone();
        unlabelled.metadata.name = Some("no-group".into());
        unlabelled
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .remove(crate::constants::LABEL_GROUP);
        world.pods.push(Arc::new(unlabelled));
        let scene = Scene::new(world);
        let facts = scene.facts();
        let (head, by_group) = split_by_group(&facts);
        assert_eq!(
            head.iter().map(|p| p.name()).collect::<Vec<_>>(),
            ["demo-head"]
        );
        assert_eq!(
            by_group.keys().copied().collect::<Vec<_>>(),
            ["", "workers"]
        );
        assert_eq!(by_group["workers"].len(), 4);
        assert_eq!(by_group[""][0].pod.name(), "no-group");
    }

    #[test]
    fn group_memory_remembers_known_groups_and_starts_new_ones_empty() {
        let previous = TrainClusterStatus {
            groups: vec![GroupStatus {
                name: "workers".into(),
                epoch: 4,
                restarts: 2,
                preemptions: 1,
                backoff_until: Some(Time("2030-01-01T00:00:00Z".parse().unwrap())),
                ..Default::default()
            }],
            ..Default::default()
        };
        let known = group_memory(&previous, "workers", false);
        assert_eq!((known.epoch, known.restarts, known.preemptions), (4, 2, 1));
        assert!(known.backoff_until.is_some());
        let fresh = group_memory(&previous, "other", false);
        assert_eq!(
            fresh,
            GroupStatus {
                name: "other".into(),
                ..Default::default()
            }
        );
    }

    #[test]
    fn group_memory_with_a_reset_budget_keeps_the_epoch_but_forgets_failures() {
        let previous = TrainClusterStatus {
            groups: vec![GroupStatus {
                name: "workers".into(),
                epoch: 4,
                restarts: 2,
                preemptions: 1,
                backoff_until: Some(Time("2030-01-01T00:00:00Z".parse().unwrap())),
                ..Default::default()
            }],
            ..Default::default()
        };
        let reset = group_memory(&previous, "workers", true);
        assert_eq!((reset.epoch, reset.restarts, reset.preemptions), (4, 0, 0));
        assert_eq!(reset.backoff_until, None);
    }

    #[test]
    fn a_head_pod_with_the_wrong_name_is_removed_and_the_right_one_planned() {
        let mut world = world_with_head();
        world.pod_mut("demo-head").metadata.name = Some("demo-head-old".into());
        let plan = world.plan();
        assert_eq!(plan.delete.len(), 1);
        assert_eq!(
            (plan.delete[0].group.as_str(), plan.delete[0].reason.code()),
            ("head", "BadReplicaIndex")
        );
        assert!(
            plan.create_head.is_none(),
            "a head pod is present (if misnamed): the stray goes first"
        );
    }

    #[test]
    fn suspending_removes_the_head_pod() {
        let mut world = world_with_head();
        world.cluster.spec.suspend = true;
        let plan = world.plan();
        let head: Vec<_> = plan.delete.iter().filter(|d| d.group == "head").collect();
        assert_eq!(head.len(), 1);
        assert_eq!(head[0].reason.code(), "Suspended");
        assert!(plan.create_head.is_none());
    }
}
