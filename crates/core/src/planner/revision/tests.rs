//! Golden hashes: any change to a template hash restarts every running job, so each one is
//! pinned here and changes only by a reviewed edit of this file (with a new [`SCHEME`] and
//! the previous scheme kept as the recogniser: see the module's doc).

use super::*;
use crate::api::{HeadSpec, Membership, validate};
use crate::planner::render;
use crate::testing::*;
use k8s_openapi::api::core::v1::ContainerPort;

/// The examples (TrainCluster files and scenario files) as of this release, and the example
/// `ray-multislice.yaml` as release c64b703 shipped it.
const EXAMPLES: &[(&str, &str)] = &[
    (
        "default",
        include_str!("../../../../../examples/default.yaml"),
    ),
    (
        "gke-v6e-multislice",
        include_str!("../../../../../examples/gke-v6e-multislice.yaml"),
    ),
    (
        "independent",
        include_str!("../../../../../examples/independent.yaml"),
    ),
    (
        "ray-multislice",
        include_str!("../../../../../examples/ray-multislice.yaml"),
    ),
    (
        "ray-multislice@c64b703",
        include_str!("../../../tests/fixtures/ray-multislice-c64b703.yaml"),
    ),
    (
        "spares",
        include_str!("../../../../../examples/spares.yaml"),
    ),
];

/// Every TrainCluster of an example file, by example name.
pub(crate) fn example_clusters() -> Vec<(&'static str, TrainCluster)> {
    let mut out = Vec::new();
    for (name, text) in EXAMPLES {
        let doc: serde_yaml::Value = serde_yaml::from_str(text).unwrap();
        let clusters: Vec<TrainCluster> = match doc.get("trainClusters") {
            Some(list) => serde_yaml::from_value(list.clone()).unwrap(),
            None => vec![serde_yaml::from_value(doc).unwrap()],
        };
        out.extend(clusters.into_iter().map(|tc| (*name, tc)));
    }
    out
}

/// (example, group or `head`, scheme-1 hash, scheme-2 hash). The scheme-1 values of the
/// examples c64b703 shipped (all but the edited `ray-multislice`, whose shipped form is
/// `ray-multislice@c64b703`) were printed by that release's own `revision::group_hash` and
/// `head_hash`: [`legacy`] computes what it did. They must never change.
const GOLDEN: &[(&str, &str, Option<&str>, &str)] = &[
    (
        "default",
        "workers",
        Some("d77072f7a7fde52d"),
        "v2-c1044504cad4f72b",
    ),
    (
        "gke-v6e-multislice",
        "v6e",
        Some("9c65fafd0224103c"),
        "v2-4da51cb48dda7afa",
    ),
    (
        "independent",
        "workers",
        Some("fc6a2654ed7b40b0"),
        "v2-27a6eb6bbe432416",
    ),
    (
        "ray-multislice",
        "tpu",
        Some("4f98a5dafa86f5ff"),
        "v2-3ac826900aa9b471",
    ),
    (
        "ray-multislice",
        "head",
        Some("4d8adab016d82486"),
        "v2-ea65513fa6f0eab0",
    ),
    (
        "ray-multislice@c64b703",
        "tpu",
        Some("be2acbe2d0f275fc"),
        "v2-9dc782541f39926c",
    ),
    (
        "ray-multislice@c64b703",
        "head",
        Some("5a4cf696d425c2b7"),
        "v2-d642b685cfc9ab97",
    ),
    (
        "spares",
        "workers",
        Some("d77072f7a7fde52d"),
        "v2-c1044504cad4f72b",
    ),
];

fn hashes() -> Vec<(String, String, Option<String>, String)> {
    let mut out = Vec::new();
    for (example, tc) in example_clusters() {
        for group in validate::resolve(&tc).unwrap() {
            let legacy = legacy::group_hash(&tc, &group);
            let current = group_hash(&tc, &group);
            out.push((example.into(), group.name().into(), Some(legacy), current));
        }
        if let Some(current) = head_hash(&tc) {
            out.push((
                example.into(),
                "head".into(),
                legacy::head_hash(&tc),
                current,
            ));
        }
    }
    out
}

#[test]
fn the_hashes_of_every_example_are_pinned() {
    let got = hashes();
    let printed: Vec<String> = got
        .iter()
        .map(|(e, g, l, c)| format!("(\"{e}\", \"{g}\", {l:?}, \"{c}\"),"))
        .collect();
    let want: Vec<(String, String, Option<String>, String)> = GOLDEN
        .iter()
        .map(|(e, g, l, c)| {
            (
                e.to_string(),
                g.to_string(),
                l.map(str::to_string),
                c.to_string(),
            )
        })
        .collect();
    assert_eq!(got, want, "now:\n{}", printed.join("\n"));
}

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

fn template_spec(tc: &mut TrainCluster) -> &mut k8s_openapi::api::core::v1::PodSpec {
    tc.spec.worker_groups[0].template.spec.as_mut().unwrap()
}

#[test]
fn the_group_hash_follows_template_shape_membership_and_head_ports() {
    let tc = train_cluster(Membership::Multislice, 1, 2);
    let base = hash(&tc);
    assert!(base.starts_with(SCHEME), "{base}");
    assert_eq!(hash(&tc.clone()), base, "deterministic");
    let mut scaled = tc.clone();
    scaled.spec.worker_groups[0].slices.max = 7;
    assert_eq!(hash(&scaled), base, "the slice range is not in any pod");

    let mut image = tc.clone();
    template_spec(&mut image).containers[0].image = Some("trainer:v2".into());
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
    let head_spec = head_port.spec.head.as_mut().unwrap().template.spec.as_mut();
    head_spec.unwrap().containers[0].ports = Some(vec![ContainerPort {
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
fn labels_annotations_and_unset_fields_leave_the_template_hash_alone() {
    let tc = train_cluster(Membership::Multislice, 1, 2);
    let base = hash(&tc);
    let mut labelled = tc.clone();
    let meta = labelled.spec.worker_groups[0]
        .template
        .metadata
        .get_or_insert_with(Default::default);
    meta.labels = Some([("cost-centre".to_string(), "ml".to_string())].into());
    meta.annotations = Some([("note".to_string(), "x".to_string())].into());
    assert_eq!(hash(&labelled), base);
    let before = metadata_hash(&tc.spec.worker_groups[0].template);
    let after = metadata_hash(&labelled.spec.worker_groups[0].template);
    assert_ne!(
        before, after,
        "the metadata hash follows labels and annotations"
    );

    let mut empty_lists = tc.clone();
    let spec = template_spec(&mut empty_lists);
    spec.tolerations = Some(Vec::new());
    spec.containers[0].args = Some(Vec::new());
    assert_eq!(hash(&empty_lists), base, "an empty list is an unset field");
    let mut outside = tc.clone();
    template_spec(&mut outside).hostname = Some("h1".into());
    assert_eq!(
        hash(&outside),
        base,
        "hostname is not among POD_FIELDS (the operator sets it)"
    );
}

#[test]
fn the_previous_schemes_hash_of_the_current_spec_is_recognised() {
    let tc = train_cluster(Membership::Multislice, 1, 2);
    let group = &validate::resolve(&tc).unwrap()[0];
    let recognised = Recognised::group(&tc, group);
    let previous = legacy::group_hash(&tc, group);
    assert!(!recognised.is_outdated(Some(&recognised.current)));
    assert!(
        !recognised.is_outdated(Some(&previous)),
        "a pod of the previous release"
    );
    assert!(
        !recognised.is_outdated(None),
        "pods from before hashes are kept"
    );
    assert!(
        recognised.is_outdated(Some("0123456789abcdef")),
        "another template"
    );
    let mut image = tc.clone();
    template_spec(&mut image).containers[0].image = Some("trainer:v2".into());
    let group = &validate::resolve(&image).unwrap()[0];
    let edited = Recognised::group(&image, group);
    assert!(
        edited.is_outdated(Some(&previous)),
        "the old template, by the old scheme"
    );
    assert!(edited.is_outdated(Some(&recognised.current)));
}
