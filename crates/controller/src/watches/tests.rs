//! The watches' filtering, storing and indexing, fed by hand.
use super::*;
use slice_core::lean::ReadyCondition;

fn node(rv: &str, ready: bool) -> LeanNode {
    let mut n = LeanNode::default();
    n.metadata.name = Some("n".into());
    n.metadata.resource_version = Some(rv.into());
    n.ready = Some(ReadyCondition {
        is_true: ready,
        since: None,
    });
    n.tpu_chips = 4;
    n
}

#[test]
fn a_heartbeat_is_the_same_node_for_the_planner() {
    assert!(same_node(&node("1", true), &node("2", true)));
}

#[test]
fn readiness_chips_and_taints_are_news() {
    assert!(!same_node(&node("1", true), &node("2", false)));
    let mut fewer = node("2", true);
    fewer.tpu_chips = 0;
    assert!(!same_node(&node("1", true), &fewer));
    let mut tainted = node("2", true);
    tainted
        .taint_keys
        .push("node.kubernetes.io/unreachable".into());
    assert!(!same_node(&node("1", true), &tainted));
}

fn pod(name: &str, tpu: bool, ours: bool) -> LeanPod {
    let mut p = LeanPod::default();
    p.metadata.name = Some(name.into());
    p.metadata.namespace = Some("ns".into());
    p.requests_tpu = tpu;
    if ours {
        p.labels.insert(slice_core::constants::LABEL_CLUSTER, "c");
    }
    p
}

fn node_json(rv: &str, heartbeat: &str, image: &str) -> LeanNode {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": "tpu-0", "resourceVersion": rv,
            "labels": {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice"},
            "annotations": {"node.alpha.kubernetes.io/ttl": heartbeat},
        },
        "status": {
            "capacity": {"google.com/tpu": "4"},
            "allocatable": {"google.com/tpu": "4"},
            "conditions": [{
                "type": "Ready", "status": "True",
                "lastHeartbeatTime": heartbeat,
                "lastTransitionTime": "2026-11-25T00:00:00Z",
            }],
            "images": [{"names": [image], "sizeBytes": 1}],
        },
    }))
    .expect("a node")
}

#[test]
fn a_node_status_update_outside_the_lean_view_queues_nothing_and_moves_no_version() {
    let (cache, mut state, (mut changes, _, _)) = parts(Policy::nodes());
    let journal = cache.journal().expect("the node watch keeps a journal");
    let _ = journal.take(); // a new consumer reads the store first
    state.apply(watcher::Event::Apply(node_json(
        "1",
        "2026-11-25T00:00:10Z",
        "a",
    )));
    assert!(changes.try_recv().is_ok(), "a new node is news");
    let Entries::Changes(journaled) = journal.take() else {
        panic!("the new node is journaled")
    };
    assert!(matches!(&journaled[..], [Change::Applied(stored)]
        if Arc::ptr_eq(stored, &state.reader.get(&ObjectRef::new("tpu-0")).unwrap())));
    let version = state.version.load(Ordering::Acquire);
    // Heartbeats, pulled images, annotations: what a kubelet writes every few seconds.
    for (rv, at, image) in [("2", "00:00:20", "b"), ("3", "00:00:30", "c")] {
        let heartbeat = format!("2026-11-25T{at}Z");
        state.apply(watcher::Event::Apply(node_json(rv, &heartbeat, image)));
    }
    assert!(changes.try_recv().is_err(), "no reconcile queued");
    assert!(
        matches!(journal.take(), Entries::Changes(c) if c.is_empty()),
        "nothing for the inventory to rebuild"
    );
    assert_eq!(
        state.version.load(Ordering::Acquire),
        version,
        "nothing to re-plan"
    );
    assert_eq!(
        state
            .reader
            .get(&ObjectRef::new("tpu-0"))
            .unwrap()
            .metadata
            .resource_version
            .as_deref(),
        Some("3"),
        "the store still follows"
    );
}

fn pod_watch_state() -> (WatchState<LeanPod>, mpsc::UnboundedReceiver<Arc<LeanPod>>) {
    let (_cache, state, (changes, _, _)) = parts(Policy::pods());
    (state, changes)
}

#[test]
fn pods_without_tpus_or_our_labels_are_never_stored_nor_trigger_anything() {
    let (mut state, mut changes) = pod_watch_state();
    state.apply(watcher::Event::Init);
    for p in [
        pod("web", false, false),
        pod("job", true, false),
        pod("ours", false, true),
    ] {
        state.apply(watcher::Event::InitApply(p));
    }
    state.apply(watcher::Event::InitDone);
    let mut stored: Vec<String> = state
        .reader
        .state()
        .iter()
        .map(|p| p.name().into())
        .collect();
    stored.sort();
    assert_eq!(stored, ["job", "ours"]);
    let version = state.version.load(Ordering::Acquire);
    state.apply(watcher::Event::Apply(pod("web2", false, false)));
    state.apply(watcher::Event::Delete(pod("web", false, false)));
    assert_eq!(state.version.load(Ordering::Acquire), version);
    assert!(changes.try_recv().is_err(), "nothing queued");
}

#[test]
fn a_pod_that_stops_being_kept_leaves_the_store() {
    let (mut state, _changes) = pod_watch_state();
    state.apply(watcher::Event::Apply(pod("x", false, true)));
    assert_eq!(state.reader.len(), 1);
    // Its labels were removed by someone: no longer ours, no TPU.
    state.apply(watcher::Event::Apply(pod("x", false, false)));
    assert_eq!(state.reader.len(), 0);
}

fn named(mut p: LeanPod, cluster: &str) -> LeanPod {
    p.labels
        .insert(slice_core::constants::LABEL_CLUSTER, cluster);
    p
}

/// The names the index files under `cluster`, in the order it hands them out.
fn indexed(state: &WatchState<LeanPod>, cluster: &str) -> Vec<String> {
    let index = state.index.as_ref().expect("an index");
    index
        .get("ns", cluster)
        .iter()
        .map(|p| p.name().into())
        .collect()
}

#[test]
fn the_pod_index_follows_applies_relabels_deletes_and_relists() {
    let (mut state, _changes) = pod_watch_state();
    state.apply(watcher::Event::Init);
    state.apply(watcher::Event::InitApply(named(
        pod("a-0", true, false),
        "a",
    )));
    state.apply(watcher::Event::InitApply(pod("job", true, false)));
    assert!(
        indexed(&state, "a").is_empty(),
        "not before the list is done"
    );
    state.apply(watcher::Event::InitDone);
    assert_eq!(indexed(&state, "a"), ["a-0"]);
    state.apply(watcher::Event::Apply(named(pod("a-1", true, false), "a")));
    state.apply(watcher::Event::Apply(named(pod("b-0", true, false), "b")));
    assert_eq!(indexed(&state, "a"), ["a-0", "a-1"]);
    // Relabelled to another cluster: moves with its label.
    state.apply(watcher::Event::Apply(named(pod("a-1", true, false), "b")));
    assert_eq!(indexed(&state, "a"), ["a-0"]);
    assert_eq!(indexed(&state, "b"), ["a-1", "b-0"]);
    // The label removed, the pod still a TPU pod: stored, but no longer anyone's.
    state.apply(watcher::Event::Apply(pod("a-0", true, false)));
    assert!(indexed(&state, "a").is_empty());
    state.apply(watcher::Event::Delete(named(pod("b-0", true, false), "b")));
    assert_eq!(indexed(&state, "b"), ["a-1"]);
    // A relist is authoritative: what it lacks leaves the index; what it lists comes out in
    // name order, whatever order it was listed in, and later events keep that order.
    state.apply(watcher::Event::Init);
    for name in ["c-2", "c-0", "c-10", "c-1"] {
        state.apply(watcher::Event::InitApply(named(
            pod(name, true, false),
            "c",
        )));
    }
    state.apply(watcher::Event::InitDone);
    assert!(indexed(&state, "b").is_empty());
    assert_eq!(indexed(&state, "c"), ["c-0", "c-1", "c-10", "c-2"]);
    state.apply(watcher::Event::Apply(named(pod("c-11", true, false), "c")));
    state.apply(watcher::Event::Apply(named(pod("c-1", true, false), "c")));
    state.apply(watcher::Event::Delete(named(pod("c-0", true, false), "c")));
    assert_eq!(indexed(&state, "c"), ["c-1", "c-10", "c-11", "c-2"]);
    let index = state.index.as_ref().unwrap();
    assert_eq!(index.keys(), 1);
}

#[test]
fn the_pod_index_keeps_name_order_and_a_list_read_before_a_change_stays_as_it_was() {
    let (mut state, _changes) = pod_watch_state();
    state.apply(watcher::Event::Init);
    state.apply(watcher::Event::InitDone);
    for name in ["a-3", "a-0", "a-2"] {
        let mut ready = named(pod(name, true, false), "a");
        ready.ready = true;
        state.apply(watcher::Event::Apply(ready));
    }
    let index = state.index.clone().expect("an index");
    let names = |pods: &[Arc<LeanPod>]| -> Vec<String> {
        pods.iter().map(|p| p.name().to_string()).collect()
    };
    let before = index.get("ns", "a");
    assert_eq!(
        names(&before),
        ["a-0", "a-2", "a-3"],
        "name order, unsorted"
    );
    state.apply(watcher::Event::Apply(named(pod("a-1", true, false), "a")));
    state.apply(watcher::Event::Apply(named(pod("a-2", true, false), "a")));
    state.apply(watcher::Event::Delete(named(pod("a-3", true, false), "a")));
    assert_eq!(
        names(&before),
        ["a-0", "a-2", "a-3"],
        "a read is a snapshot"
    );
    assert!(before[1].ready, "the snapshot keeps the version it read");
    let after = index.get("ns", "a");
    assert_eq!(names(&after), ["a-0", "a-1", "a-2"]);
    assert!(!after[2].ready, "a-2 replaced in place");
    drop(before);
    // Nobody holds it now: the next change edits it in place, and reads share it.
    state.apply(watcher::Event::Apply(named(pod("a-4", true, false), "a")));
    let (one, two) = (index.get("ns", "a"), index.get("ns", "a"));
    assert!(Arc::ptr_eq(&one, &two), "reads share one list");
    assert_eq!(names(&one), ["a-0", "a-1", "a-2", "a-4"]);
}

#[test]
fn a_pod_turning_ready_is_news() {
    let mut a = LeanPod::default();
    a.metadata.resource_version = Some("1".into());
    let mut b = a.clone();
    b.metadata.resource_version = Some("2".into());
    assert!(same_pod(&a, &b));
    b.ready = true;
    assert!(!same_pod(&a, &b));
}
