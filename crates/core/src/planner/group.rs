//! One worker group's plan: the phases in order, each in its own module. What a phase
//! decides flows to the next as a value; the plan itself is only added to.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashSet};

use jiff::{SignedDuration, Timestamp};

use super::assemble::{self, GroupSummary};
use super::observe::{self, ObservedReplica, PodFacts};
use super::place::{self, Mine};
use super::relabel::Wanted;
use super::state::Planner;
use super::{DeleteReason, budget, queued, retire, revision, spares};
use crate::api::validate::ResolvedGroup;
use crate::api::{GroupStatus, Membership, SuccessPolicy};
use crate::constants::ROLE_SPARE;
use crate::inventory::Slice;

/// How long old pods usually take to go; look again then.
const LEAVING_RECHECK: SignedDuration = SignedDuration::from_secs(2);

impl<'a> Planner<'a> {
    /// Plan one worker group from its pods and its memory (the group's last status).
    /// `sticky_failed`: the run failed (under this spec, or this round before the groups
    /// were planned) and stays failed.
    pub(super) fn plan_group(
        &mut self,
        group: &ResolvedGroup<'a>,
        pods: &[PodFacts<'a>],
        mut memory: GroupStatus,
        sticky_failed: Option<&budget::RunFailure>,
    ) -> GroupSummary {
        let name = group.name();
        let multislice = self.tc.spec.membership == Membership::Multislice;
        let grace = self.node_grace();
        let recognised = revision::Recognised::group(self.tc, group);
        memory.template_hash = recognised.current.clone();
        // Spares are few or none: the workers are copied apart only when there are some.
        let is_spare = |f: &&PodFacts<'a>| f.role == Some(ROLE_SPARE);
        let spare_pods: Vec<PodFacts<'a>> = pods.iter().filter(is_spare).copied().collect();
        let pods: Cow<'_, [PodFacts<'a>]> = match spare_pods.is_empty() {
            true => Cow::Borrowed(pods),
            false => Cow::Owned(pods.iter().filter(|f| !is_spare(f)).copied().collect()),
        };

        // Observe and judge: what runs, what must go, what broke and what that costs.
        let observed = self.observe_group(group, &pods, grace, &recognised, &mut memory);
        self.note_held(name, &observed, &self.brake(grace));
        memory.lingering_taints = self.lingering_taints(&observed, grace);
        let spare_sets = self.observe_spares(group, &spare_pods, grace);
        let spare_slices = spares::own_spare_slices(&spare_sets);
        let (mut kept, tally) = self.judge_group(name, &observed, &mut memory, multislice);
        self.release_stuck(name, &observed, group.shape.is_some(), grace);
        let exhausted = self.charge_budget(name, &tally, &mut memory);
        let failure = exhausted.as_ref().or(sticky_failed).map(|f| f.cause);
        let failed = failure.is_some();

        // Size: from the slices this group holds or can take.
        let own: HashSet<&str> = observed.values().filter_map(|r| r.slice).collect();
        let reserved = std::mem::take(&mut memory.reserved_slices);
        let mine = Mine {
            pods: &own,
            reserved: &reserved.iter().map(String::as_str).collect(),
        };
        let usable = self.usable_slices(group, &mine, &spare_slices, grace);
        memory.available_slices = available_slices(group, usable.len());
        // Named only while they matter, so that others' churn rewrites no settled status.
        let short = memory.available_slices < group.spec.slices.max;
        memory.busy_slices = if short {
            self.busy_slices(group)
        } else {
            Vec::new()
        };
        memory.unfit_slices = if short {
            self.unfit_slices(group)
        } else {
            Vec::new()
        };
        // Once workers have finished, the group's size is what they finished at.
        let finishing = kept
            .iter()
            .any(|r| r.verdict == observe::Verdict::Completed);
        let sizing = self.size_group(group, &mut memory, failure, finishing);

        // Retire what the size has no room for, as whole groups.
        let forming = memory.formed_epoch != memory.epoch;
        let retirement = retire::decide(
            multislice,
            &sizing,
            &tally,
            &kept,
            observed.is_empty(),
            forming,
        );
        let outdated = kept.iter().filter(|r| r.outdated).count();
        let deletes_before = self.plan.delete.len();
        let new_epoch = multislice && retirement == retire::Retirement::NewEpoch;
        self.retire(name, &mut kept, retirement, &mut memory.epoch);
        if new_epoch {
            self.announce_template_restart(name, outdated, deletes_before);
        }
        if !multislice && sizing.stop.is_none() {
            let max_unavailable = self.tc.spec.rollout.max_unavailable;
            self.roll_out(name, &mut kept, sizing.target, max_unavailable);
        }
        self.relabel(&Wanted::of(&group.spec.template, &recognised), &kept);
        memory.retiring_incarnations = retiring(&observed, &kept, &memory.retiring_incarnations);
        if runs_whole(&kept, sizing.target, memory.epoch) {
            memory.formed_epoch = memory.epoch;
        }

        // Place: create the missing groups, unless backing off or failed.
        // Replicas observed but not kept are leaving: deleted now, or already draining.
        let leaving = observed.len() - kept.len();
        let occupied: BTreeSet<u32> = observed.keys().copied().collect();
        let backoff_until = budget::backoff_pending(&memory, self.now);
        // After a rejected create, nothing is created until the wait is over either; that
        // is no restart (the phase stays as it was, the ReplicaFailure condition says why).
        let held = backoff_until.or(self.create_hold);
        let placing = place::Placing {
            multislice,
            pinned: group.shape.is_some() && self.tc.spec.elastic.wait_for_ready_slices,
        };
        // Queued provisioning: requests for what is missing; a Multislice job waits for
        // its request before it starts (gang start).
        let asking = queued::Asking {
            usable: usable.len(),
            stopped: failed || finishing || (sizing.stop.is_some() && !sizing.waiting()),
            running: !kept.is_empty(),
            occupied: observed.keys().copied().collect(),
            pods: &pods,
        };
        let gate = self.queue_requests(group, &mut memory, &asking);
        let wanted = if sizing.target > 0 && held.is_none() && !failed && !gate.closed {
            place::wanted_replicas(placing, sizing.target, &occupied, kept.len(), leaving)
        } else {
            Vec::new()
        };
        let mut free = place::free_slices(&usable, &own, &spare_slices);
        let first_create = self.plan.create.len();
        let to_come = place::Members::to_come(sizing.target, &observed, &kept, &usable);
        let created = self.create_replicas(group, &mut memory, to_come, wanted, &mut free);
        self.consume_requests(name, first_create, &gate);
        // Spares: the ones just taken make way; the rest are kept at what is wanted once
        // every group has been placed (`refill_all_spares`).
        let swapped = self.swap_spares(name, &spare_sets, first_create, &mut memory);
        let stopped = failed || finishing || sizing.stop.is_some();
        let halted = failed || finishing || (sizing.stop.is_some() && !sizing.waiting());
        // Slices held by requests not taken in this plan: what asking still has to cover.
        let requested: HashSet<&str> = spare_sets
            .iter()
            .filter(|s| s.capacity && s.standing() && !swapped.contains(&s.index))
            .filter_map(|s| s.slice)
            .collect();
        let usable_otherwise = usable
            .iter()
            .filter(|s| !requested.contains(s.id.as_str()))
            .count();
        self.spare_refills.push(spares::Refill {
            group: name.to_string(),
            counted: usable
                .iter()
                .take(sizing.target as usize)
                .map(|s| s.id.clone())
                .collect(),
            wanted: spares::wanted(group, sizing.target, stopped),
            // Waiting for slices is what asking for them is for.
            capacity: spares::capacity_wanted(self.tc, group, usable_otherwise, halted),
            sets: spare_sets,
            swapped,
        });
        // Not while creates are refused (quota, a webhook): they may be refused for long.
        let refused = self.create_hold.is_some() || self.retrying_refused;
        let idle = failed || finishing || refused;
        memory.reserved_slices = reserve(&usable, sizing.target, kept.len(), idle);
        self.short |= !failed && kept.len() < sizing.target as usize;
        let still_wanted = (sizing.target as usize).saturating_sub(kept.len() + created.len());
        self.promise(&free, still_wanted);

        self.wake_for_pending(backoff_until, leaving, &usable, grace);
        // While creates are refused, a rolled-back partial group draining is no restart.
        let replacing = match refused {
            true => !memory.retiring_incarnations.is_empty(),
            false => leaving > 0,
        };
        let restarting = !failed && (backoff_until.is_some() || replacing) && sizing.target > 0;
        // A try after a refusal counts once it goes through (the next plan sees its pods);
        // and while creates are refused, a rolled-back partial group has no pods either.
        let counted: &[u32] = if self.retrying_refused { &[] } else { &created };
        let occupied = match refused {
            true => kept.iter().map(|r| r.replica).collect(),
            false => occupied,
        };
        memory.updated_slices =
            (kept.iter().filter(|r| !r.outdated).count() + counted.len()) as u32;
        assemble::group_summary(
            memory,
            group,
            &kept,
            assemble::replicas_with_pods(occupied, counted),
            assemble::GroupState {
                waiting: sizing.waiting(),
                restarting,
                completed: runs_to_completion(&kept, sizing.target),
            },
            budget::exhaustion(exhausted, sticky_failed),
        )
    }

    /// How long a NotReady node is tolerated before its group counts as lost.
    fn node_grace(&self) -> SignedDuration {
        super::cluster::grace_of(self.tc)
    }

    /// Gather the group's pods into replicas (pods with no usable replica index are deleted:
    /// they can never join a complete group) and advance the incarnation counter past every
    /// incarnation seen.
    fn observe_group(
        &mut self,
        group: &ResolvedGroup<'a>,
        pods: &[PodFacts<'a>],
        grace: SignedDuration,
        recognised: &revision::Recognised,
        memory: &mut GroupStatus,
    ) -> BTreeMap<u32, ObservedReplica<'a>> {
        let judging = observe::Judging {
            hosts: group.hosts,
            tpu: group.shape.is_some(),
            success_counts: self.tc.spec.success_policy == SuccessPolicy::AllWorkers,
            template: recognised,
            membership: super::render::membership_label(self.tc.spec.membership),
            now: self.now,
            grace,
            owner_uid: self.tc.metadata.uid.as_deref().unwrap_or_default(),
            group: group.name(),
            placement_timeout: self.placement_timeout(group),
            rules: &self.tc.spec.failure_policy.rules,
            brake: self.brake(grace),
        };
        let (observed, strays) = observe::replicas(pods, &judging, self.inventory);
        self.avoid_unschedulable(&observed, &memory.retiring_incarnations);
        self.wake_for_unscheduled(&observed, judging.placement_timeout);
        if !strays.is_empty() {
            self.delete_whole(group.name(), None, DeleteReason::BadReplicaIndex, &strays);
        }
        memory.next_incarnation = observe::next_incarnation(memory.next_incarnation, &observed);
        observed
    }

    /// Look again when something pending resolves: the backoff ends, old pods are gone (soon),
    /// a NotReady node's grace ends on a slice the group holds or might take.
    fn wake_for_pending(
        &mut self,
        backoff_until: Option<Timestamp>,
        leaving: usize,
        usable: &[&Slice],
        grace: SignedDuration,
    ) {
        if let Some(t) = backoff_until {
            self.wake_at(t);
        }
        if leaving > 0 {
            self.wake_at(self.now + LEAVING_RECHECK);
        }
        // A deadline already passed is a loss the brake holds: its end is a node event.
        for slice in usable {
            if let Some(t) = self.inventory.grace_deadline(slice, grace)
                && t > self.now
            {
                self.wake_at(t);
            }
        }
    }
}

/// Every member of the epoch is there, complete, running and ready.
fn runs_whole(kept: &[&ObservedReplica<'_>], target: u32, epoch: u64) -> bool {
    target > 0
        && kept.len() == target as usize
        && kept
            .iter()
            .all(|r| r.ready && r.epoch == Some(epoch) && r.verdict == observe::Verdict::Healthy)
}

/// Every replica the group runs has finished: all its workers exited 0.
fn runs_to_completion(kept: &[&ObservedReplica<'_>], target: u32) -> bool {
    target > 0
        && kept.len() == target as usize
        && kept
            .iter()
            .all(|r| r.verdict == observe::Verdict::Completed)
}

/// Incarnations observed but not kept: being deleted (this round or before), or draining.
/// Recorded with the status, before any delete is sent.
/// Incarnations decided for deletion whose pods remain: the ones deleted now and those
/// retiring before. A replica already draining when first seen (deleted by someone else, a
/// rolled-back partial group) was never judged and needs no memory.
fn retiring(
    observed: &BTreeMap<u32, ObservedReplica<'_>>,
    kept: &[&ObservedReplica<'_>],
    before: &[u64],
) -> Vec<u64> {
    let mut retiring: Vec<u64> = observed
        .values()
        .filter(|r| kept.iter().all(|k| k.replica != r.replica))
        .filter(|r| r.verdict != observe::Verdict::Draining || before.contains(&r.incarnation))
        .map(|r| r.incarnation)
        .collect();
    retiring.sort_unstable();
    retiring.dedup();
    retiring
}

/// Slices available to the group, counted up to `slices.max`: beyond it, slices other
/// clusters take or free are no news about this one (and no status write). A group that needs
/// no slices (no TPU shape) always has its max.
fn available_slices(group: &ResolvedGroup<'_>, usable: usize) -> u32 {
    let max = group.spec.slices.max;
    match group.shape {
        Some(_) => (usable as u32).min(max),
        None => max,
    }
}

#[cfg(test)]
mod tests;

/// While the group has replicas to (re)create, the slices its size counted on are kept for
/// it, so that no other TrainCluster takes one in the moment between the old pods going and
/// the new ones being created (a multislice restart frees its slices one by one).
fn reserve(usable: &[&Slice], target: u32, kept: usize, stopped: bool) -> Vec<String> {
    if stopped || kept >= target as usize {
        return Vec::new();
    }
    let mut slices: Vec<String> = usable
        .iter()
        .take(target as usize)
        .map(|s| s.id.clone())
        .collect();
    slices.sort();
    slices
}
