use super::*;
use crate::kubelet::{OUT_OF_TPU_REASON, UNEXPECTED_ADMISSION_REASON};
use crate::nodes::{NodePoolSpec, build_node};
use crate::test_support::{bound, pool_nodes, running, set_not_ready, tpu_pod};
use k8s_openapi::api::core::v1::Node;

/// The four nodes of `pool-0`, as the node store hands them out.
fn nodes() -> Vec<Arc<Node>> {
    pool_nodes("pool-0").into_iter().map(Arc::new).collect()
}

fn core(start_delay: Duration) -> KubeletCore {
    KubeletCore::new(&KubeletOptions {
        start_delay,
        ..Default::default()
    })
}

#[test]
fn binds_then_starts_after_delay() {
    let mut k = core(Duration::from_secs(1));
    let nodes = nodes();
    let pod = tpu_pod("a", 4);
    let t0 = Instant::now();
    let actions = k.plan(&[Arc::new(pod.clone())], &nodes, t0);
    assert_eq!(
        actions,
        vec![KubeletAction::Bind {
            namespace: "ns".into(),
            name: "a".into(),
            uid: "uid-a".into(),
            node: "pool-0-0".into()
        }]
    );
    k.issued(&actions[0], t0);
    // the binding is not visible yet: nothing is planned again
    assert!(k.plan(&[Arc::new(pod.clone())], &nodes, t0).is_empty());
    let b = Arc::new(bound(pod.clone(), "pool-0-0"));
    assert!(k.plan(std::slice::from_ref(&b), &nodes, t0).is_empty());
    let later = t0 + Duration::from_secs(1);
    let actions = k.plan(std::slice::from_ref(&b), &nodes, later);
    assert!(
        matches!(&actions[..], [KubeletAction::Start { name, patch, .. }]
        if name == "a" && patch["status"]["phase"] == "Running"
        && patch["status"]["containerStatuses"][0]["ready"] == true
        && patch["status"]["containerStatuses"][0]["restartCount"] == 0)
    );
}

/// A real scheduler and kubelet count every pod bound to a node, whoever manages it: a
/// kubelet limited to some namespace or labels must not bind or admit over chips that
/// pods outside its selection hold.
#[test]
fn chips_held_by_pods_outside_the_selection_are_not_free() {
    let mut k = core(Duration::ZERO);
    let spec = NodePoolSpec::new("solo", "tpu-v6e-slice", "2x2");
    let nodes = vec![Arc::new(build_node(&spec, 0).unwrap())];
    let node = nodes[0].metadata.name.clone().unwrap();
    let mut job = bound(tpu_pod("job", 4), &node);
    job.metadata.namespace = Some("team-b".into());
    let others = [Arc::new(job)];
    let pending = Arc::new(tpu_pod("ours", 4));
    let t0 = Instant::now();
    assert!(
        k.plan_beside(std::slice::from_ref(&pending), &others, &nodes, t0)
            .is_empty(),
        "nothing free to bind to"
    );
    // Bound anyway (by someone else): the kubelet rejects it at admission.
    let ours = Arc::new(bound(tpu_pod("ours", 4), &node));
    let acts = k.plan_beside(&[ours], &others, &nodes, t0);
    assert!(
        matches!(&acts[..], [KubeletAction::Reject { name, .. }] if name == "ours"),
        "{acts:?}"
    );
    // Without the other pod the same pod binds.
    let mut fresh = core(Duration::ZERO);
    assert_eq!(fresh.plan(&[pending], &nodes, t0).len(), 1);
}

#[test]
fn assumed_binding_counts_against_free_chips() {
    let mut k = core(Duration::ZERO);
    let spec = NodePoolSpec::new("solo", "tpu-v6e-slice", "2x2");
    let nodes = vec![Arc::new(build_node(&spec, 0).unwrap())];
    let t0 = Instant::now();
    let a = Arc::new(tpu_pod("a", 4));
    let b = Arc::new(tpu_pod("b", 4));
    let actions = k.plan(&[a.clone(), b.clone()], &nodes, t0);
    assert_eq!(actions.len(), 1);
    k.issued(&actions[0], t0);
    assert!(k.plan(&[a, b], &nodes, t0).is_empty());
}

#[test]
fn terminating_orphaned_and_not_ready() {
    let mut k = core(Duration::ZERO);
    let mut nodes = nodes();
    let t0 = Instant::now();
    let mut term = bound(tpu_pod("t", 4), "pool-0-0");
    term.metadata.deletion_timestamp =
        serde_json::from_value(serde_json::json!("2026-01-01T00:00:00Z")).ok();
    let orphan = bound(tpu_pod("o", 4), "pool-0-3");
    let running = running(bound(tpu_pod("r", 4), "pool-0-1"));
    let pods = vec![Arc::new(term), Arc::new(orphan), Arc::new(running)];
    let first = k.plan(&pods, &nodes, t0);
    assert!(
        first
            .iter()
            .all(|a| !matches!(a, KubeletAction::Start { name, .. } if name == "r"))
    );
    // node pool-0-3 disappears; pool-0-1 goes NotReady
    nodes.pop();
    let mut nr = (*nodes[1]).clone();
    set_not_ready(&mut nr);
    nodes[1] = Arc::new(nr);
    let mut k2 = core(Duration::ZERO);
    k2.plan(&pods, &self::nodes(), t0); // learns the four nodes
    let acts = k2.plan(&pods, &nodes, t0 + Duration::from_secs(1));
    let acts2 = k2.plan(&pods, &nodes, t0 + Duration::from_secs(2));
    let all: Vec<_> = acts.iter().chain(acts2.iter()).collect();
    assert!(all.iter().any(|a| matches!(a, KubeletAction::Delete { name, reason: DeleteReason::Terminating, .. } if name == "t")));
    assert!(all.iter().any(|a| matches!(a, KubeletAction::Delete { name, reason: DeleteReason::NodeGone, .. } if name == "o")));
    assert!(
        all.iter().any(
            |a| matches!(a, KubeletAction::SetReady { name, ready: false, .. } if name == "r")
        )
    );
}

#[test]
fn unknown_nodes_left_alone_with_node_selector() {
    let mut k = KubeletCore::new(&KubeletOptions {
        node_selector: Some("sim.slices.dev/fake=true".into()),
        ..Default::default()
    });
    let elsewhere = Arc::new(bound(tpu_pod("e", 0), "kind-control-plane"));
    assert!(k.plan(&[elsewhere], &nodes(), Instant::now()).is_empty());
}

fn terminating(mut p: Pod) -> Pod {
    p.metadata.deletion_timestamp =
        serde_json::from_value(serde_json::json!("2026-01-01T00:00:00Z")).ok();
    p
}

fn with_node(nodes: &[Arc<Node>], i: usize, f: impl FnOnce(&mut Node)) -> Vec<Arc<Node>> {
    let mut nodes = nodes.to_vec();
    let mut n = (*nodes[i]).clone();
    f(&mut n);
    nodes[i] = Arc::new(n);
    nodes
}

/// A pod marked for deletion on a Ready node: its kubelet stops the containers and
/// confirms (phase Failed, then a grace-0 delete), `termination_delay` after it saw it.
/// On a NotReady node nobody confirms (the pod is only marked not ready) until the node
/// is Ready again.
#[test]
fn deletion_is_confirmed_only_on_a_ready_node() {
    let mut k = KubeletCore::new(&KubeletOptions {
        termination_delay: Duration::from_millis(300),
        ..Default::default()
    });
    let ready_nodes = nodes();
    let down = with_node(&ready_nodes, 0, set_not_ready);
    let pod = Arc::new(terminating(running(bound(tpu_pod("t", 4), "pool-0-0"))));
    let t0 = Instant::now();
    let mut on_down = Vec::new();
    for s in 0..5 {
        on_down.extend(k.plan(
            std::slice::from_ref(&pod),
            &down,
            t0 + Duration::from_secs(s),
        ));
    }
    assert!(
        !on_down.is_empty()
            && on_down
                .iter()
                .all(|a| matches!(a, KubeletAction::SetReady { ready: false, .. })),
        "only marked not ready while the node is down: {on_down:?}"
    );
    let t1 = t0 + Duration::from_secs(10);
    assert!(
        k.plan(std::slice::from_ref(&pod), &ready_nodes, t1)
            .is_empty()
    );
    let acts = k.plan(
        std::slice::from_ref(&pod),
        &ready_nodes,
        t1 + Duration::from_millis(300),
    );
    match &acts[..] {
        [
            KubeletAction::Delete {
                name,
                uid,
                reason: DeleteReason::Terminating,
                stop: Some(stop),
                ..
            },
        ] => {
            assert_eq!((name.as_str(), uid.as_str()), ("t", "uid-t"));
            assert_eq!(stop["status"]["phase"], "Failed");
            let c = &stop["status"]["containerStatuses"][0];
            assert_eq!(c["state"]["terminated"]["exitCode"], 143);
            assert_eq!(c["ready"], false);
        }
        other => panic!("expected a confirmed deletion, got {other:?}"),
    }
}

/// Nothing confirms the deletion of an unbound pod (the API server removes it at once,
/// unless finalizers hold it), and it is not scheduled either.
#[test]
fn unbound_terminating_pod_is_left_alone() {
    let mut k = core(Duration::ZERO);
    let pod = Arc::new(terminating(tpu_pod("u", 4)));
    let t0 = Instant::now();
    assert!(k.plan(std::slice::from_ref(&pod), &nodes(), t0).is_empty());
    assert!(
        k.plan(&[pod], &nodes(), t0 + Duration::from_secs(5))
            .is_empty()
    );
}

/// A terminating pod whose node is gone is PodGC's, after `orphan_grace`.
#[test]
fn terminating_pod_on_a_gone_node_is_collected() {
    let mut k = core(Duration::ZERO);
    let t0 = Instant::now();
    let pod = Arc::new(terminating(running(bound(tpu_pod("g", 4), "pool-0-3"))));
    k.plan(std::slice::from_ref(&pod), &nodes(), t0);
    let three = &nodes()[..3];
    assert!(k.plan(std::slice::from_ref(&pod), three, t0).is_empty());
    let acts = k.plan(&[pod], three, t0 + k.orphan_grace);
    assert!(matches!(
        &acts[..],
        [KubeletAction::Delete {
            reason: DeleteReason::NodeGone,
            stop: None,
            ..
        }]
    ));
}

/// Where a real scheduler binds, a real controller-manager's PodGC collects the pods of a
/// deleted node (after its 40 s quarantine): the fake kubelet is no quicker than that.
#[test]
fn with_a_real_control_plane_the_pods_of_a_gone_node_are_left_to_its_pod_gc() {
    let mut k = KubeletCore::new(&KubeletOptions {
        scheduler: SchedulerMode::External,
        ..Default::default()
    });
    let t0 = Instant::now();
    let pod = Arc::new(running(bound(tpu_pod("g", 4), "pool-0-3")));
    k.plan(std::slice::from_ref(&pod), &nodes(), t0);
    let three = &nodes()[..3];
    let later = t0 + k.orphan_grace * 10;
    assert!(k.plan(std::slice::from_ref(&pod), three, t0).is_empty());
    assert!(k.plan(&[pod], three, later).is_empty());
}

/// With a real scheduler (`External`) pending pods are never bound, and the kubelet
/// still starts the pods bound to its nodes.
#[test]
fn external_scheduler_mode_never_binds() {
    let mut k = KubeletCore::new(&KubeletOptions {
        scheduler: SchedulerMode::External,
        ..Default::default()
    });
    let t0 = Instant::now();
    let pending = Arc::new(tpu_pod("p", 4));
    let bound_by_other = Arc::new(bound(tpu_pod("b", 4), "pool-0-2"));
    let acts = k.plan(&[pending, bound_by_other], &nodes(), t0);
    assert!(
        matches!(&acts[..], [KubeletAction::Start { name, .. }] if name == "b"),
        "{acts:?}"
    );
}

/// Kubelet admission: pods bound beyond the node's chips (by another scheduler) are
/// failed with `OutOf<resource>`, in creation order: the older pod runs.
#[test]
fn admission_rejects_pods_beyond_the_chips() {
    let mut k = KubeletCore::new(&KubeletOptions {
        scheduler: SchedulerMode::External,
        ..Default::default()
    });
    let created = |p: &mut Pod, at: &str| {
        p.metadata.creation_timestamp = serde_json::from_value(serde_json::json!(at)).ok();
    };
    let mut older = bound(tpu_pod("z-older", 4), "pool-0-0");
    created(&mut older, "2026-01-01T00:00:00Z");
    let mut newer = bound(tpu_pod("a-newer", 4), "pool-0-0");
    created(&mut newer, "2026-01-01T00:00:01Z");
    let pods = [Arc::new(newer), Arc::new(older)];
    let t0 = Instant::now();
    let acts = k.plan(&pods, &nodes(), t0);
    assert_eq!(acts.len(), 2, "{acts:?}");
    assert!(
        acts.iter()
            .any(|a| matches!(a, KubeletAction::Start { name, .. } if name == "z-older"))
    );
    let rejected = acts.iter().find_map(|a| match a {
        KubeletAction::Reject {
            name,
            reason,
            patch,
            ..
        } => Some((name.clone(), reason.clone(), patch.clone())),
        _ => None,
    });
    let (name, reason, patch) = rejected.expect("one pod rejected");
    assert_eq!(
        (name.as_str(), reason.as_str()),
        ("a-newer", OUT_OF_TPU_REASON)
    );
    assert_eq!(reason, "OutOfgoogle.com/tpu");
    assert_eq!(patch["status"]["phase"], "Failed");
    assert_eq!(patch["status"]["reason"], OUT_OF_TPU_REASON);
    // The admitted pod keeps its chips until it has started: still one rejection only.
    for a in &acts {
        k.issued(a, t0);
    }
    assert!(k.plan(&pods, &nodes(), t0).is_empty());
}

/// With start costs, a bound TPU worker is Running after its cold pull and container start,
/// not Ready; Ready only once its TPU has initialised. A second worker on the same node
/// pulls warm.
#[test]
fn start_costs_delay_running_then_ready() {
    use super::super::StartCosts;
    let mut k = KubeletCore::new(&KubeletOptions {
        start_delay: Duration::from_secs(1),
        start_costs: Some(StartCosts {
            image_pull_cold: Duration::from_secs(8),
            image_pull_warm: Duration::ZERO,
            container_start: Duration::from_secs(1),
            tpu_init: Duration::from_secs(2),
        }),
        ..Default::default()
    });
    let nodes = nodes();
    let with_image = |mut p: Pod| {
        p.spec.as_mut().unwrap().containers[0].image = Some("python:3.12-slim".into());
        p
    };
    let a = bound(with_image(tpu_pod("a", 4)), "pool-0-0");
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    assert!(k.plan(&[Arc::new(a.clone())], &nodes, t0).is_empty());
    assert!(
        k.plan(&[Arc::new(a.clone())], &nodes, at(9)).is_empty(),
        "pulling"
    );
    let acts = k.plan(&[Arc::new(a.clone())], &nodes, at(10));
    let [KubeletAction::Start { patch, .. }] = &acts[..] else {
        panic!("{acts:?}")
    };
    assert_eq!(patch["status"]["phase"], "Running");
    assert_eq!(patch["status"]["containerStatuses"][0]["ready"], false);
    let mut started = a.clone();
    started.status = serde_json::from_value(patch["status"].clone()).unwrap();
    assert!(!pod_ready(&started));
    let started = Arc::new(started);
    assert!(
        k.plan(std::slice::from_ref(&started), &nodes, at(11))
            .is_empty(),
        "initialising the TPU"
    );
    let acts = k.plan(std::slice::from_ref(&started), &nodes, at(12));
    assert!(
        matches!(&acts[..], [KubeletAction::SetReady { name, ready: true, .. }] if name == "a"),
        "{acts:?}"
    );
    // a is gone; its node keeps the image: b, bound at 20 s, pulls warm and runs at 22 s.
    drop(started);
    let b = Arc::new(bound(with_image(tpu_pod("b", 4)), "pool-0-0"));
    let pods = [b];
    assert!(k.plan(&pods, &nodes, at(20)).is_empty());
    let acts = k.plan(&pods, &nodes, at(22));
    assert!(
        matches!(&acts[..], [KubeletAction::Start { name, .. }] if name == "b"),
        "{acts:?}"
    );
}

/// Without start costs a started pod is Running and Ready in the same patch, as before.
#[test]
fn without_start_costs_running_and_ready_at_once() {
    let mut k = core(Duration::from_secs(1));
    let a = Arc::new(bound(tpu_pod("a", 4), "pool-0-0"));
    let t0 = Instant::now();
    assert!(k.plan(std::slice::from_ref(&a), &nodes(), t0).is_empty());
    let acts = k.plan(&[a], &nodes(), t0 + Duration::from_secs(1));
    let [KubeletAction::Start { patch, .. }] = &acts[..] else {
        panic!("{acts:?}")
    };
    assert_eq!(patch["status"]["containerStatuses"][0]["ready"], true);
    assert!(
        patch["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    );
}

/// With a real scheduler the kubelet's two pod watches (its own selection, every pod) lag
/// each other: a pod of ours deleted a moment ago, still shown by the broad watch, must not
/// hold the chips of its node against the pod bound there next (found against a real
/// kube-scheduler: `OutOfgoogle.com/tpu`, "requested: 4, capacity: 4" on an empty node).
#[test]
fn chips_are_counted_once_per_pod_and_freed_when_its_containers_stop() {
    let mut k = KubeletCore::new(&KubeletOptions {
        scheduler: SchedulerMode::External,
        termination_delay: Duration::ZERO,
        ..Default::default()
    });
    let nodes = nodes();
    let t0 = Instant::now();
    let old = Arc::new(running(bound(tpu_pod("old", 4), "pool-0-0")));
    assert!(k.plan(std::slice::from_ref(&old), &nodes, t0).is_empty());
    // Deleted: the kubelet stops its containers and confirms the deletion.
    let dying = Arc::new(terminating((*old).clone()));
    let acts = k.plan(std::slice::from_ref(&dying), &nodes, t0);
    assert!(
        matches!(&acts[..], [KubeletAction::Delete { name, .. }] if name == "old"),
        "{acts:?}"
    );
    k.issued(&acts[0], t0);
    // Our watch shows the pod gone and the next one bound; the broad watch still shows the
    // old pod, not yet even terminal.
    let next = Arc::new(bound(tpu_pod("next", 4), "pool-0-0"));
    let acts = k.plan_beside(
        std::slice::from_ref(&next),
        std::slice::from_ref(&dying),
        &nodes,
        t0,
    );
    assert!(
        matches!(&acts[..], [KubeletAction::Start { name, .. }] if name == "next"),
        "the old pod's chips are free: {acts:?}"
    );
    // The broad watch shows an old pod of ours whose containers were never stopped here
    // (deleted by someone else): still not counted twice beside our own view of it.
    let mut k = core(Duration::ZERO);
    let twin = Arc::new(running(bound(tpu_pod("twin", 2), "pool-0-1")));
    let fresh = Arc::new(bound(tpu_pod("fresh", 2), "pool-0-1"));
    let acts = k.plan_beside(
        &[twin.clone(), fresh.clone()],
        std::slice::from_ref(&twin),
        &nodes,
        t0,
    );
    assert!(
        matches!(&acts[..], [KubeletAction::Start { name, .. }] if name == "fresh"),
        "{acts:?}"
    );
}

/// A scripted admission fault refuses the next pod on its node once, with its reason, and
/// that pod stays refused however often it is planned; the pod after it is admitted.
#[test]
fn a_scripted_refusal_refuses_one_pod_then_admits_the_next() {
    let mut k = core(Duration::ZERO);
    let nodes = nodes();
    let t0 = Instant::now();
    k.refuse(
        "pool-0-1",
        UNEXPECTED_ADMISSION_REASON,
        "Allocate failed",
        1,
    );
    let first = Arc::new(bound(tpu_pod("first", 4), "pool-0-1"));
    for _ in 0..2 {
        let acts = k.plan(std::slice::from_ref(&first), &nodes, t0);
        assert!(
            matches!(&acts[..], [KubeletAction::Reject { name, reason, patch, .. }]
                if name == "first" && reason == UNEXPECTED_ADMISSION_REASON
                && patch["status"]["message"] == "Pod was rejected: Allocate failed"),
            "{acts:?}"
        );
    }
    let next = Arc::new(bound(tpu_pod("next", 4), "pool-0-1"));
    let acts = k.plan(std::slice::from_ref(&next), &nodes, t0);
    assert!(
        matches!(&acts[..], [KubeletAction::Start { name, .. }] if name == "next"),
        "{acts:?}"
    );
}
