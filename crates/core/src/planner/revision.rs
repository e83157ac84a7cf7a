//! Template hashes: what a pod was rendered from, so a changed spec is noticed on running
//! pods (which are immutable) and rolled out.

use serde_json::json;

use super::env::head_env;
use crate::api::TrainCluster;
use crate::api::validate::ResolvedGroup;

/// FNV-1a over `parts` (each followed by a 0 byte): stable across releases and platforms,
/// unlike std's hasher, so a restarted operator computes the same hashes.
pub fn fnv1a<'p>(parts: impl IntoIterator<Item = &'p [u8]>) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.iter().copied().chain(std::iter::once(0)) {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

fn hash_of(value: &serde_json::Value) -> String {
    // serde_json writes struct fields in declaration order and maps sorted: deterministic.
    let text = value.to_string();
    format!("{:016x}", fnv1a([text.as_bytes()]))
}

/// The hash of everything a worker pod of `group` is rendered from, apart from where it is
/// placed: the group's template and TPU shape, the membership mode (it decides
/// `MEGASCALE_*`) and the head address workers are given.
pub fn group_hash(tc: &TrainCluster, group: &ResolvedGroup<'_>) -> String {
    hash_of(&json!({
        "template": group.spec.template,
        "tpu": group.spec.tpu,
        "hostsPerGroup": group.spec.hosts_per_group,
        "membership": tc.spec.membership,
        "headEnv": head_env(tc),
    }))
}

/// The hash of the head pod's template, if the cluster has a head.
pub fn head_hash(tc: &TrainCluster) -> Option<String> {
    let head = tc.spec.head.as_ref()?;
    Some(hash_of(&json!({ "template": head.template })))
}

/// A pod is outdated when it carries a hash other than `current`. A pod without one was made
/// before hashes existed: it is taken as current, so upgrading the operator restarts nothing.
pub fn is_outdated(pod_hash: Option<&str>, current: &str) -> bool {
    pod_hash.is_some_and(|h| h != current)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{HeadSpec, Membership, validate};
    use crate::planner::render;
    use crate::testing::*;
    use k8s_openapi::api::core::v1::ContainerPort;

    fn hash(tc: &TrainCluster) -> String {
        let groups = validate::resolve(tc).unwrap();
        group_hash(tc, &groups[0])
    }

    #[test]
    fn fnv1a_separates_parts_and_is_stable() {
        assert_ne!(fnv1a([&b"ab"[..], b"c"]), fnv1a([&b"a"[..], b"bc"]));
        // Group keys name running pods: they must not change across releases.
        assert_eq!(
            render::group_key("ns", "c", "g", 0, 0),
            "13392d1c1bf654ee",
            "FNV-1a-64 of \"ns\\0c\\0g\\00\\00\\0\""
        );
    }

    #[test]
    fn the_group_hash_follows_template_shape_membership_and_head_address() {
        let tc = train_cluster(Membership::Multislice, 1, 2);
        let base = hash(&tc);
        assert_eq!(hash(&tc.clone()), base, "deterministic");
        let mut scaled = tc.clone();
        scaled.spec.worker_groups[0].slices.max = 7;
        assert_eq!(hash(&scaled), base, "the slice range is not in any pod");

        let mut image = tc.clone();
        image.spec.worker_groups[0]
            .template
            .spec
            .as_mut()
            .unwrap()
            .containers[0]
            .image = Some("trainer:v2".into());
        let mut topology = tc.clone();
        topology.spec.worker_groups[0]
            .tpu
            .as_mut()
            .unwrap()
            .topology = "4x8".into();
        let mut membership = tc.clone();
        membership.spec.membership = Membership::Independent;
        let mut head = tc.clone();
        head.spec.head = Some(HeadSpec {
            template: worker_template(0),
        });
        let mut head_port = head.clone();
        head_port
            .spec
            .head
            .as_mut()
            .unwrap()
            .template
            .spec
            .as_mut()
            .unwrap()
            .containers[0]
            .ports = Some(vec![ContainerPort {
            name: Some("gcs".into()),
            container_port: 6379,
            ..Default::default()
        }]);
        let hashes = [
            base.clone(),
            hash(&image),
            hash(&topology),
            hash(&membership),
            hash(&head),
            hash(&head_port),
        ];
        let distinct: std::collections::BTreeSet<_> = hashes.iter().collect();
        assert_eq!(distinct.len(), hashes.len(), "{hashes:?}");
    }

    #[test]
    fn only_a_different_hash_is_outdated() {
        assert!(is_outdated(Some("a"), "b"));
        assert!(!is_outdated(Some("b"), "b"));
        assert!(!is_outdated(None, "b"), "pods from before hashes are kept");
    }
}
