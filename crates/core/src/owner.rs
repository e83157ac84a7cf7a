//! Owner references, read one way everywhere: who controls an object, and whether a given
//! TrainCluster (by uid) does. Only what a TrainCluster controls is the operator's to change.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::constants::{API_GROUP, TRAIN_CLUSTER_KIND};

/// The object's controller: its owner reference with `controller: true`, if any.
pub fn controller(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .as_deref()?
        .iter()
        .find(|o| o.controller == Some(true))
}

/// True when the object is controlled by the owner with this uid.
pub fn is_controlled_by(meta: &ObjectMeta, uid: &str) -> bool {
    controller(meta).is_some_and(|o| o.uid == uid)
}

/// The TrainCluster controlling the object, if its controller is one.
pub fn train_cluster_controller(meta: &ObjectMeta) -> Option<&OwnerReference> {
    controller(meta).filter(|o| {
        o.kind == TRAIN_CLUSTER_KIND && o.api_version.split('/').next() == Some(API_GROUP)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(refs: &[(&str, &str, Option<bool>)]) -> ObjectMeta {
        ObjectMeta {
            owner_references: Some(
                refs.iter()
                    .map(|(kind, uid, controller)| OwnerReference {
                        api_version: format!("{API_GROUP}/v1alpha1"),
                        kind: kind.to_string(),
                        name: "x".into(),
                        uid: uid.to_string(),
                        controller: *controller,
                        block_owner_deletion: None,
                    })
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn only_the_controller_reference_counts() {
        let meta = owned(&[
            ("TrainCluster", "a", None),
            ("TrainCluster", "b", Some(false)),
            ("TrainCluster", "c", Some(true)),
        ]);
        assert!(is_controlled_by(&meta, "c"));
        assert!(
            !is_controlled_by(&meta, "a"),
            "an owner, not the controller"
        );
        assert!(!is_controlled_by(&meta, "b"));
        assert_eq!(
            train_cluster_controller(&meta).map(|o| o.uid.as_str()),
            Some("c")
        );
    }

    #[test]
    fn a_controller_of_another_kind_or_group_is_not_a_train_cluster() {
        let meta = owned(&[("ReplicaSet", "r", Some(true))]);
        assert!(train_cluster_controller(&meta).is_none());
        assert!(is_controlled_by(&meta, "r"));
        let mut other_group = owned(&[("TrainCluster", "t", Some(true))]);
        other_group.owner_references.as_mut().unwrap()[0].api_version = "other.io/v1".into();
        assert!(train_cluster_controller(&other_group).is_none());
        assert!(controller(&ObjectMeta::default()).is_none());
    }
}
