//! An operator upgrade restarts nothing: every example, run to a steady state, then its
//! pods and status rewritten as release c64b703 wrote them (scheme-1 hashes, no metadata
//! hash), is read by this release without a delete, a create or a new epoch; its pods are
//! relabelled to the current scheme in place.

use std::sync::Arc;

use super::tests::example_clusters;
use super::{head_hash, legacy};
use crate::api::{TrainCluster, validate};
use crate::constants::{LABEL_GROUP, LABEL_METADATA_HASH, LABEL_ROLE, LABEL_TEMPLATE_HASH};
use crate::testing::*;

/// What a pod or status of `tc` would carry under scheme 1, by group name (`None`: the head).
fn legacy_hash(tc: &TrainCluster, group: Option<&str>) -> String {
    match group {
        None => legacy::head_hash(tc).unwrap(),
        Some(name) => {
            let groups = validate::resolve(tc).unwrap();
            let g = groups.iter().find(|g| g.name() == name).unwrap();
            legacy::group_hash(tc, g)
        }
    }
}

/// Rewrite the world's pods and status as release c64b703 wrote them.
fn as_written_by_the_previous_release(world: &mut World) {
    let tc = world.cluster.clone();
    for pod in &mut world.pods {
        let labels = Arc::make_mut(pod).metadata.labels.as_mut().unwrap();
        labels.remove(LABEL_METADATA_HASH);
        let group = (labels.get(LABEL_ROLE).map(String::as_str) != Some("head"))
            .then(|| labels[LABEL_GROUP].clone());
        labels.insert(
            LABEL_TEMPLATE_HASH.into(),
            legacy_hash(&tc, group.as_deref()),
        );
    }
    let status = world.cluster.status.as_mut().unwrap();
    for group in &mut status.groups {
        group.template_hash = legacy_hash(&tc, Some(&group.name));
    }
    if let Some(head) = status.head.as_mut() {
        head.template_hash = legacy::head_hash(&tc);
    }
}

fn uids(world: &World) -> Vec<(String, Option<String>)> {
    let mut uids: Vec<_> = world
        .pods
        .iter()
        .map(|p| (p.metadata.name.clone().unwrap(), p.metadata.uid.clone()))
        .collect();
    uids.sort();
    uids
}

#[test]
fn an_upgrade_from_the_previous_release_restarts_no_example() {
    for (example, mut tc) in example_clusters() {
        tc.metadata.namespace = Some("default".into());
        tc.metadata.uid = Some("uid-example".into());
        tc.metadata.generation = Some(1);
        let mut world = World::new(tc, v6e_pools(4));
        world.settle(20);
        // The world leaves the head to the test, as the kubelet of a CPU node would run it.
        if let Some(head) = world.plan().create_head {
            world.pods.push(Arc::new(run_on(head, "cpu-node")));
        }
        assert!(world.plan().is_noop(), "{example}: settled");
        let epochs: Vec<u64> = world.status().groups.iter().map(|g| g.epoch).collect();
        let pods = uids(&world);
        assert!(!pods.is_empty(), "{example}: runs");
        as_written_by_the_previous_release(&mut world);

        let plan = world.step();
        assert!(plan.delete.is_empty(), "{example}: {:?}", plan.delete);
        assert!(
            plan.create.is_empty() && plan.create_head.is_none(),
            "{example}"
        );
        assert_eq!(
            plan.patch.len(),
            pods.len(),
            "{example}: every pod relabelled"
        );
        world.settle(5);
        assert_eq!(uids(&world), pods, "{example}: the same pods run");
        let after: Vec<u64> = world.status().groups.iter().map(|g| g.epoch).collect();
        assert_eq!(after, epochs, "{example}: no new epoch");
        let current = head_hash(&world.cluster);
        for pod in &world.pods {
            let hash = &pod.metadata.labels.as_ref().unwrap()[LABEL_TEMPLATE_HASH];
            assert!(hash.starts_with(super::SCHEME), "{example}: {hash}");
            if pod.metadata.labels.as_ref().unwrap()[LABEL_ROLE] == "head" {
                assert_eq!(Some(hash), current.as_ref());
            }
        }
        assert!(world.plan().patch.is_empty(), "{example}: settled");
    }
}
