//! Names one TrainCluster's pods would share with another's. Pod names are
//! `<cluster>-<group>-<replica>-<host>`, so cluster `a` with group `b-c` and cluster `a-b`
//! with group `c` would both create `a-b-c-0-0` (and the same `TPU_NAME`s). The cluster
//! that was created first keeps the names; the later one is told, before it creates any pod,
//! which of its fields to change.

use jiff::Timestamp;

use super::TrainCluster;
use super::validate::FieldError;

/// Where `tc`'s worker pod names would collide with those of a TrainCluster created before
/// it in the same namespace (`others` may include `tc` itself and other namespaces).
pub fn name_collisions(tc: &TrainCluster, others: &[&TrainCluster]) -> Vec<FieldError> {
    let namespace = tc.metadata.namespace.as_deref();
    let cluster = tc.metadata.name.as_deref().unwrap_or_default();
    let earlier: Vec<&TrainCluster> = others
        .iter()
        .copied()
        .filter(|o| o.metadata.namespace.as_deref() == namespace)
        .filter(|o| o.metadata.name.as_deref() != Some(cluster))
        .filter(|o| claim(o) < claim(tc))
        .collect();
    let mut errors = Vec::new();
    for (i, group) in tc.spec.worker_groups.iter().enumerate() {
        let prefix = format!("{cluster}-{}", group.name);
        for other in &earlier {
            let other_name = other.metadata.name.as_deref().unwrap_or_default();
            let clash = other
                .spec
                .worker_groups
                .iter()
                .find(|g| format!("{other_name}-{}", g.name) == prefix);
            if let Some(theirs) = clash {
                errors.push(FieldError {
                    field: format!("spec.workerGroups[{i}].name"),
                    message: format!(
                        "pods of group {:?} would be named {prefix}-<replica>-<host>, as are those of \
                         group {:?} of TrainCluster {other_name}, created before this one; rename \
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
    let ours = service
        .owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == uid);
    if ours {
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

/// Who claimed names first: the earlier creation, then the lower uid (deterministic for
/// every operator that looks).
fn claim(tc: &TrainCluster) -> (Option<Timestamp>, &str) {
    (
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
}
