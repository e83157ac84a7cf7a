//! Names one TrainCluster's pods would share with another's. Pod names are
//! `<cluster>-<group>-<replica>-<host>`, so cluster `a` with group `b-c` and cluster `a-b`
//! with group `c` would both create `a-b-c-0-0` (and the same `TPU_NAME`s). The cluster
//! that claimed the names first keeps them; the later one is told, before it creates any
//! pod, which of its fields to change. A cluster whose spec the operator has accepted holds
//! its names (its pods may exist); between clusters equal in that, the one created first
//! keeps them. Creation times are whole seconds: two clusters created in the same second are
//! told apart by what the operator has accepted, and only then by uid.

use jiff::Timestamp;

use super::validate::FieldError;
use super::{CONDITION_VALID, TrainCluster, TrainClusterStatus};

/// Where `tc`'s worker pod names would collide with those of a TrainCluster that claimed
/// them before it in the same namespace (`others` may include `tc` itself and other
/// namespaces). Who holds its names is read from each cluster's status ([`holds_names`]).
pub fn name_collisions(tc: &TrainCluster, others: &[&TrainCluster]) -> Vec<FieldError> {
    name_collisions_by(tc, others, holds_names)
}

/// True when the operator has accepted `tc`'s spec (its status says `SpecValid`): its pods
/// may exist, so it holds their names before any cluster not accepted.
pub fn holds_names(tc: &TrainCluster) -> bool {
    tc.status.as_ref().is_some_and(spec_accepted)
}

/// True when `status` says the spec is valid (`SpecValid` True).
pub fn spec_accepted(status: &TrainClusterStatus) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.type_ == CONDITION_VALID && c.status == "True")
}

/// [`name_collisions`], with `holds` saying which clusters hold their names (the operator
/// may know it before the status it wrote is cached).
pub fn name_collisions_by(
    tc: &TrainCluster,
    others: &[&TrainCluster],
    holds: impl Fn(&TrainCluster) -> bool,
) -> Vec<FieldError> {
    let namespace = tc.metadata.namespace.as_deref();
    let cluster = tc.metadata.name.as_deref().unwrap_or_default();
    let ours = claim(tc, &holds);
    let neighbours: Vec<&TrainCluster> = others
        .iter()
        .copied()
        .filter(|o| o.metadata.namespace.as_deref() == namespace)
        .filter(|o| o.metadata.name.as_deref() != Some(cluster))
        .collect();
    let mut errors = Vec::new();
    for (i, group) in tc.spec.worker_groups.iter().enumerate() {
        let prefix = format!("{cluster}-{}", group.name);
        for other in &neighbours {
            let other_name = other.metadata.name.as_deref().unwrap_or_default();
            let clash = other
                .spec
                .worker_groups
                .iter()
                .find(|g| format!("{other_name}-{}", g.name) == prefix);
            // Who claimed first is asked only of a cluster whose names clash.
            if let Some(theirs) = clash.filter(|_| claim(other, &holds) < ours) {
                errors.push(FieldError {
                    field: format!("spec.workerGroups[{i}].name"),
                    message: format!(
                        "pods of group {:?} would be named {prefix}-<replica>-<host>, as are those of \
                         group {:?} of TrainCluster {other_name}, which claimed them first; rename \
                         this group or this TrainCluster",
                        group.name, theirs.name
                    ),
                });
            }
        }
    }
    errors
}

/// The headless Service `tc` needs exists but another owns it (a user's Service, another
/// cluster's): it is reported, never patched.
pub fn foreign_service(
    tc: &TrainCluster,
    service: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<FieldError> {
    let uid = tc.metadata.uid.as_deref()?;
    if crate::owner::is_controlled_by(service, uid) {
        return None;
    }
    let name = service.name.as_deref().unwrap_or_default();
    Some(FieldError {
        field: "metadata.name".into(),
        message: format!(
            "Service {name} exists and is not controlled by this TrainCluster; its pods' \
             hostnames need that name: delete or rename that Service, or rename this TrainCluster"
        ),
    })
}

/// Who claimed names first: a cluster accepted before one that is not, then the earlier
/// creation, then the lower uid (deterministic for every operator that looks).
fn claim<'a>(
    tc: &'a TrainCluster,
    holds: &impl Fn(&TrainCluster) -> bool,
) -> (bool, Option<Timestamp>, &'a str) {
    (
        !holds(tc),
        tc.metadata.creation_timestamp.as_ref().map(|t| t.0),
        tc.metadata.uid.as_deref().unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Membership;
    use crate::testing::{at, train_cluster};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn cluster(name: &str, group: &str, created: i64) -> TrainCluster {
        let mut tc = train_cluster(Membership::Independent, 1, 1);
        tc.metadata.name = Some(name.into());
        tc.metadata.uid = Some(format!("uid-{name}"));
        tc.metadata.creation_timestamp = Some(Time(at(created)));
        tc.spec.worker_groups[0].name = group.into();
        tc
    }

    #[test]
    fn the_later_of_two_clusters_whose_pod_names_collide_is_told_which_field_to_change() {
        let first = cluster("a-b", "c", 1);
        let later = cluster("a", "b-c", 2);
        let all = [&first, &later];
        assert!(name_collisions(&first, &all).is_empty());
        let errors = name_collisions(&later, &all);
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].field, "spec.workerGroups[0].name");
        assert!(
            errors[0].message.contains("a-b-c-<replica>-<host>"),
            "{}",
            errors[0]
        );
        assert!(errors[0].message.contains("TrainCluster a-b"));
    }

    #[test]
    fn clusters_in_other_namespaces_or_with_other_names_do_not_collide() {
        let first = cluster("a-b", "c", 1);
        let mut elsewhere = cluster("a", "b-c", 2);
        elsewhere.metadata.namespace = Some("other".into());
        let unrelated = cluster("a", "c", 2);
        assert!(name_collisions(&elsewhere, &[&first, &elsewhere]).is_empty());
        assert!(name_collisions(&unrelated, &[&first, &unrelated]).is_empty());
    }

    #[test]
    fn a_service_we_do_not_control_is_foreign() {
        use crate::planner::render::headless_service;
        let tc = cluster("a", "w", 1);
        let ours = headless_service(&tc).metadata;
        assert_eq!(foreign_service(&tc, &ours), None);
        let mut users = ours.clone();
        users.owner_references = None;
        let error = foreign_service(&tc, &users).expect("foreign");
        assert_eq!(error.field, "metadata.name");
        assert!(error.message.contains("Service a-headless"), "{error}");
        let mut predecessors = ours;
        predecessors.owner_references.as_mut().unwrap()[0].uid = "uid-of-a-deleted-a".into();
        assert!(foreign_service(&tc, &predecessors).is_some());
    }

    #[test]
    fn created_in_the_same_second_the_lower_uid_keeps_the_names() {
        let x = cluster("a-b", "c", 1);
        let y = cluster("a", "b-c", 1);
        // uid-a < uid-a-b: `a` keeps its names, `a-b` is told.
        assert!(name_collisions(&y, &[&x, &y]).is_empty());
        assert_eq!(name_collisions(&x, &[&x, &y]).len(), 1);
    }

    fn accepted(mut tc: TrainCluster, valid: bool) -> TrainCluster {
        let mut status = crate::api::TrainClusterStatus::default();
        status.conditions.push(crate::api::Condition {
            type_: CONDITION_VALID.into(),
            status: if valid { "True" } else { "False" }.into(),
            reason: if valid { "Valid" } else { "NameConflict" }.into(),
            message: String::new(),
            last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
            observed_generation: None,
        });
        tc.status = Some(status);
        tc
    }

    #[test]
    fn created_in_the_same_second_the_cluster_already_accepted_keeps_the_names() {
        // `a-b` runs; `a` comes in the same second with the lower uid: `a` is told.
        let running = accepted(cluster("a-b", "c", 1), true);
        let later = cluster("a", "b-c", 1);
        assert!(name_collisions(&running, &[&running, &later]).is_empty());
        assert_eq!(name_collisions(&later, &[&running, &later]).len(), 1);
        // Once told (SpecValid False), it still holds nothing: the same answer every time.
        let told = accepted(later, false);
        assert!(name_collisions(&running, &[&running, &told]).is_empty());
        assert_eq!(name_collisions(&told, &[&running, &told]).len(), 1);
        // The operator's own word comes before the status cached.
        let fresh = cluster("a-b", "c", 1);
        let holds = |tc: &TrainCluster| tc.metadata.name.as_deref() == Some("a-b");
        assert_eq!(name_collisions_by(&told, &[&fresh, &told], holds).len(), 1);
        assert!(name_collisions_by(&fresh, &[&fresh, &told], holds).is_empty());
    }

    #[test]
    fn an_accepted_cluster_keeps_its_names_from_one_created_earlier_but_never_accepted() {
        // `a` was created first but told to fix its spec; `a-b` was accepted meanwhile.
        let earlier = accepted(cluster("a", "b-c", 1), false);
        let running = accepted(cluster("a-b", "c", 2), true);
        assert!(name_collisions(&running, &[&earlier, &running]).is_empty());
        assert_eq!(name_collisions(&earlier, &[&earlier, &running]).len(), 1);
    }
}
