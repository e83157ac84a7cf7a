use kube::Resource;
use serde_json::json;

use super::*;

/// A pod as the API server serves it: managed fields, annotations, env, volumes and
/// statuses the planner never reads.
fn served_pod() -> serde_json::Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "demo-workers-1-0",
            "namespace": "team-a",
            "uid": "u-1",
            "resourceVersion": "42",
            "generation": 1,
            "creationTimestamp": "2026-11-21T10:00:00Z",
            "deletionTimestamp": "2026-11-21T10:05:00Z",
            "deletionGracePeriodSeconds": 30,
            "labels": {"slices.dev/cluster": "demo", "slices.dev/host-index": "0",
                       "app.kubernetes.io/name": "traincluster", "team": "a"},
            "annotations": {"note": "x".repeat(4096)},
            "finalizers": ["example.com/hold"],
            "ownerReferences": [{
                "apiVersion": "slices.dev/v1alpha1", "kind": "TrainCluster", "name": "demo",
                "uid": "tc-1", "controller": true, "blockOwnerDeletion": true
            }],
            "managedFields": [{"manager": "slice-operator", "operation": "Update",
                               "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]
        },
        "spec": {
            "nodeName": "pool-1-0",
            "nodeSelector": {"cloud.google.com/gke-nodepool": "pool-1"},
            "volumes": [{"name": "data", "emptyDir": {}}],
            "containers": [
                {"name": "sidecar", "image": "busybox", "resources": {"requests": {"cpu": "1"}}},
                {"name": "worker", "image": "trainer:1",
                 "env": [{"name": "TPU_WORKER_ID", "value": "0"}],
                 "resources": {"limits": {"google.com/tpu": "4"}}}
            ]
        },
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.1",
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "True"}
            ],
            "containerStatuses": [
                {"name": "sidecar", "ready": true, "restartCount": 0, "image": "busybox",
                 "imageID": "", "state": {"running": {}}},
                {"name": "worker", "ready": true, "restartCount": 2, "image": "trainer:1",
                 "imageID": ""}
            ]
        }
    })
}

#[test]
fn pod_keeps_what_the_planner_reads_and_nothing_else() {
    let pod: LeanPod = serde_json::from_value(served_pod()).unwrap();
    let meta = &pod.metadata;
    assert_eq!(pod.name(), "demo-workers-1-0");
    assert_eq!(meta.namespace.as_deref(), Some("team-a"));
    assert_eq!(meta.uid.as_deref(), Some("u-1"));
    assert_eq!(meta.resource_version.as_deref(), Some("42"));
    assert_eq!(
        pod.labels.iter().collect::<Vec<_>>(),
        [("cluster", "demo"), ("host-index", "0")],
        "only the operator's own labels are kept"
    );
    assert!(meta.labels.is_none(), "kept once, packed, not as a map");
    assert_eq!(meta.owner_references.as_ref().unwrap()[0].uid, "tc-1");
    assert!(meta.creation_timestamp.is_some() && meta.deletion_timestamp.is_some());
    assert_eq!(meta.deletion_grace_period_seconds, Some(30));
    assert_eq!(pod.node_name.as_deref(), Some("pool-1-0"));
    assert!(
        pod.requests_tpu,
        "a TPU limit alone counts as a TPU request"
    );
    assert_eq!(pod.phase.as_deref(), Some("Running"));
    assert!(pod.ready);
    assert_eq!(pod.restarted_container.as_deref(), Some("worker"));
    // Dropped: never read, and the bulk of a served object.
    assert!(meta.annotations.is_none());
    assert!(meta.managed_fields.is_none());
    assert!(meta.finalizers.is_none());
    assert!(meta.generation.is_none());
}

#[test]
fn pod_without_tpu_readiness_or_restarts() {
    let mut served = served_pod();
    served["spec"]["containers"][1]["resources"] = json!({"requests": {"cpu": "2"}});
    served["status"]["conditions"][1]["status"] = json!("False");
    served["status"]["containerStatuses"][1]["restartCount"] = json!(0);
    let pod: LeanPod = serde_json::from_value(served).unwrap();
    assert!(!pod.requests_tpu);
    assert!(!pod.ready);
    assert_eq!(pod.restarted_container, None);
}

#[test]
fn null_and_missing_sections_are_empty_not_errors() {
    let pod: LeanPod = serde_json::from_value(json!({
        "metadata": {"name": "p", "labels": null, "ownerReferences": null},
        "spec": {"containers": null, "nodeName": null},
        "status": null
    }))
    .unwrap();
    assert_eq!(pod.name(), "p");
    assert!(!pod.requests_tpu && !pod.ready && pod.phase.is_none());
    let node: LeanNode = serde_json::from_value(json!({"metadata": {"name": "n"}})).unwrap();
    assert_eq!(
        (node.tpu_chips, node.ready.clone(), node.unschedulable),
        (0, None, false)
    );
}

#[test]
fn node_keeps_taints_cordon_readiness_and_chips() {
    let served = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "pool-1-0", "uid": "n-1", "resourceVersion": "7",
                     "labels": {"cloud.google.com/gke-nodepool": "pool-1",
                                "cloud.google.com/gke-tpu-topology": "4x4",
                                "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
                                "kubernetes.io/hostname": "pool-1-0",
                                "node.kubernetes.io/instance-type": "ct6e-standard-4t"},
                     "annotations": {"a": "b"}},
        "spec": {"unschedulable": true, "podCIDR": "10.1.0.0/24", "taints": [
            {"key": "cloud.google.com/impending-node-termination", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute",
             "timeAdded": "2026-11-21T10:00:05Z"},
            {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute",
             "timeAdded": "2026-11-21T10:00:03Z"}]},
        "status": {
            "capacity": {"google.com/tpu": "8", "cpu": "200"},
            "allocatable": {"google.com/tpu": "4", "cpu": "190"},
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "False",
                 "lastTransitionTime": "2026-11-21T10:00:00Z"}
            ],
            "images": [{"names": ["trainer:1"], "sizeBytes": 1}]
        }
    });
    let node: LeanNode = serde_json::from_value(served).unwrap();
    assert_eq!(node.name(), "pool-1-0");
    assert_eq!(node.label("cloud.google.com/gke-nodepool"), Some("pool-1"));
    assert_eq!(node.label("cloud.google.com/gke-tpu-topology"), Some("4x4"));
    assert_eq!(
        node.label("cloud.google.com/gke-tpu-accelerator"),
        Some("tpu-v6e-slice")
    );
    assert_eq!(
        node.label("node.kubernetes.io/instance-type"),
        Some("ct6e-standard-4t")
    );
    assert_eq!(
        node.metadata.labels.as_ref().unwrap().len(),
        4,
        "labels the operator never reads (kubernetes.io/hostname) are dropped"
    );
    assert_eq!(
        node.taint_keys,
        [
            "cloud.google.com/impending-node-termination",
            "node.kubernetes.io/unreachable",
            "node.kubernetes.io/not-ready"
        ]
    );
    assert_eq!(
        node.lifecycle_taint_since,
        Some("2026-11-21T10:00:03Z".parse().unwrap()),
        "the earliest lifecycle taint"
    );
    assert!(node.unschedulable);
    assert_eq!(
        (node.tpu_chips, node.tpu_allocatable),
        (8, 4),
        "the shape from capacity, what is usable from allocatable"
    );
    let ready = node.ready.unwrap();
    assert!(!ready.is_true);
    assert_eq!(ready.since, Some("2026-11-21T10:00:00Z".parse().unwrap()));
    assert!(node.metadata.annotations.is_none());
}

#[test]
fn capacity_counts_when_allocatable_is_absent() {
    let node: LeanNode = serde_json::from_value(json!({
        "metadata": {"name": "n"},
        "status": {"capacity": {"google.com/tpu": "4"}}
    }))
    .unwrap();
    assert_eq!((node.tpu_chips, node.tpu_allocatable), (4, 4));
}

#[test]
fn lean_types_address_the_same_api_paths_as_the_full_ones() {
    assert_eq!(
        LeanPod::url_path(&(), Some("team-a")),
        Pod::url_path(&(), Some("team-a"))
    );
    assert_eq!(LeanNode::url_path(&(), None), Node::url_path(&(), None));
    assert_eq!(LeanPod::kind(&()), "Pod");
    assert_eq!(LeanNode::api_version(&()), "v1");
}

#[test]
fn conversion_from_full_objects_matches_the_wire_path() {
    let full: Pod = serde_json::from_value(served_pod()).unwrap();
    let direct: LeanPod = serde_json::from_value(served_pod()).unwrap();
    assert_eq!(LeanPod::from(&full), direct);
}

#[test]
fn objects_missing_required_fields_still_parse() {
    // A full `k8s-openapi` Pod would reject these; one such object would fail a list page.
    let pod: LeanPod = serde_json::from_value(json!({
        "metadata": {"name": "odd"},
        "status": {"conditions": [{"type": "Ready"}], "containerStatuses": [{"restartCount": 1}]}
    }))
    .unwrap();
    assert!(!pod.ready);
    assert_eq!(pod.restarted_container.as_deref(), Some(""));
    let node: LeanNode = serde_json::from_value(json!({
        "metadata": {"name": "odd"},
        "spec": {"taints": [{"effect": "NoSchedule"}]},
        "status": {"conditions": [{"status": "True"}]}
    }))
    .unwrap();
    assert_eq!(node.taint_keys, [""]);
    assert_eq!(node.ready, None, "a condition without a type is not Ready");
}

#[test]
fn a_container_that_exited_non_zero_and_was_not_restarted_is_kept() {
    let mut served = served_pod();
    served["status"]["containerStatuses"][1]["restartCount"] = json!(0);
    served["status"]["containerStatuses"][1]["state"] =
        json!({"terminated": {"exitCode": 137, "reason": "Error"}});
    let pod: LeanPod = serde_json::from_value(served.clone()).unwrap();
    assert_eq!(pod.failed_container.as_deref(), Some("worker"));
    assert_eq!(pod.restarted_container, None);
    served["status"]["containerStatuses"][1]["state"] =
        json!({"terminated": {"exitCode": 0, "reason": "Completed"}});
    let done: LeanPod = serde_json::from_value(served).unwrap();
    assert_eq!(done.failed_container, None, "exit 0 is no failure");
}

#[test]
fn a_pod_its_kubelet_refused_is_told_from_one_that_failed() {
    let mut served = served_pod();
    served["status"] = json!({
        "phase": "Failed",
        "reason": "OutOfgoogle.com/tpu",
        "message": "Pod was rejected: Node didn't have enough resource: google.com/tpu"
    });
    let pod: LeanPod = serde_json::from_value(served.clone()).unwrap();
    let rejection = pod.rejection.expect("a kubelet rejection");
    assert_eq!(rejection.reason, "OutOfgoogle.com/tpu");
    assert!(rejection.message.contains("enough resource"));
    for reason in [
        "UnexpectedAdmissionError",
        "NodeAffinity",
        "TaintToleration",
    ] {
        served["status"]["reason"] = json!(reason);
        let pod: LeanPod = serde_json::from_value(served.clone()).unwrap();
        assert!(pod.rejection.is_some(), "{reason}");
    }
    // Not an admission reason, or a container ran: the job's failure.
    served["status"]["reason"] = json!("DeadlineExceeded");
    let deadline: LeanPod = serde_json::from_value(served.clone()).unwrap();
    assert_eq!(deadline.rejection, None);
    served["status"]["reason"] = json!("OutOfgoogle.com/tpu");
    served["status"]["containerStatuses"] = json!([{"name": "w", "state": {"terminated": {
        "exitCode": 1, "containerID": "containerd://1", "startedAt": "2026-01-01T00:00:00Z"}}}]);
    let ran: LeanPod = serde_json::from_value(served.clone()).unwrap();
    assert_eq!(ran.rejection, None);
    // A terminated state the kubelet wrote for a container it never started is no run.
    served["status"]["containerStatuses"] = json!([{"name": "w", "state": {"terminated": {
        "exitCode": 137, "reason": "ContainerStatusUnknown"}}}]);
    let never: LeanPod = serde_json::from_value(served.clone()).unwrap();
    assert!(never.rejection.is_some());
    served["status"]["phase"] = json!("Pending");
    served["status"]["containerStatuses"] = json!(null);
    let pending: LeanPod = serde_json::from_value(served).unwrap();
    assert_eq!(pending.rejection, None, "only a Failed pod was refused");
    assert!(!is_kubelet_rejection("OutOf"), "a bare prefix is no reason");
}

#[test]
fn of_the_annotations_only_the_template_keys_are_kept() {
    let mut served = served_pod();
    assert_eq!(
        serde_json::from_value::<LeanPod>(served.clone())
            .unwrap()
            .template_keys,
        None
    );
    served["metadata"]["annotations"]["slices.dev/template-keys"] = json!(r#"{"labels":["team"]}"#);
    let pod = serde_json::from_value::<LeanPod>(served.clone()).unwrap();
    assert_eq!(pod.template_keys.as_deref(), Some(r#"{"labels":["team"]}"#));
    let keys = KeysFromTemplate::parse(pod.template_keys.as_deref().unwrap());
    assert_eq!(keys.labels, ["team"]);
    assert!(
        pod.metadata.annotations.is_none(),
        "no map of annotations is kept"
    );
    served["metadata"]["annotations"] = json!(null);
    assert_eq!(
        serde_json::from_value::<LeanPod>(served.clone())
            .unwrap()
            .template_keys,
        None
    );
}

/// A pod the kubelet shut down with its node keeps the platform's word for it: the
/// DisruptionTarget condition's reason and message, the pod's own reason, the exit codes
/// and the conditions failure rules match on.
#[test]
fn a_disrupted_pod_keeps_who_ended_it_and_how() {
    let pod: LeanPod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "status": {
            "phase": "Failed",
            "reason": "Terminated",
            "message": "Pod was terminated in response to imminent node shutdown.",
            "conditions": [
                {"type": "Ready", "status": "False"},
                {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
                 "message": "Pod was terminated in response to imminent node shutdown."}
            ],
            "containerStatuses": [
                {"name": "main", "state": {"terminated": {"exitCode": 143, "containerID": "c://1"}}},
                {"name": "side", "state": {"terminated": {"exitCode": 0, "containerID": "c://2"}}}
            ]
        }
    }))
    .unwrap();
    let d = pod.disruption().expect("disrupted");
    assert_eq!(d.reason, "TerminationByKubelet");
    assert_eq!(d.pod_reason.as_deref(), Some("Terminated"));
    assert!(d.message.contains("imminent node shutdown"));
    let ending = pod.ending.as_deref().unwrap();
    assert_eq!(
        ending.exits,
        [ContainerExit {
            container: "main".into(),
            exit_code: 143
        }],
        "a clean exit is no exit code to match"
    );
    assert_eq!(
        ending.conditions,
        [
            ("Ready".to_string(), "False".to_string()),
            ("DisruptionTarget".to_string(), "True".to_string())
        ],
        "every condition, for onPodConditions rules"
    );
    assert!(pod.rejection.is_none(), "it ran: no admission refusal");
}

/// A reason only the platform writes is a disruption without the condition; any other
/// reason (a pod's own deadline) is not, nor an eviction for the pod's own storage limits
/// (the kubelet sets no condition for those). A restarted container's exit is its last
/// state's, also while it waits in a crash-loop backoff.
#[test]
fn platform_reasons_and_restarted_containers() {
    let evicted = |message: &str| -> LeanPod {
        serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "status": {"phase": "Failed", "reason": "Evicted", "message": message,
                "containerStatuses": [{"name": "main",
                    "state": {"terminated": {"exitCode": 137, "containerID": "c://1"}}}]}
        }))
        .unwrap()
    };
    let pressure = evicted("The node was low on resource: memory. Threshold quantity: 100Mi.");
    assert_eq!(pressure.disruption().unwrap().reason, "Evicted");
    let condition = evicted("The node had condition: [DiskPressure]. ");
    assert!(condition.disruption().is_some());
    let own_storage = evicted("Usage of EmptyDir volume \"scratch\" exceeds the limit \"1Gi\". ");
    assert!(own_storage.disruption().is_none(), "the job's own doing");
    let own_ephemeral =
        evicted("Pod ephemeral local storage usage exceeds the total limit of containers 1Gi. ");
    assert!(own_ephemeral.disruption().is_none());
    let with = |reason: &str| -> LeanPod {
        serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "status": {"phase": "Failed", "reason": reason,
                "containerStatuses": [{"name": "main", "restartCount": 1,
                    "state": {"terminated": {"exitCode": 137, "containerID": "c://1"}}}]}
        }))
        .unwrap()
    };
    assert_eq!(
        with("Terminated").disruption().unwrap().reason,
        "Terminated"
    );
    assert_eq!(
        with("NodeShutdown").disruption().unwrap().reason,
        "NodeShutdown"
    );
    assert_eq!(
        with("Preempting").disruption().unwrap().reason,
        "Preempting"
    );
    assert!(with("DeadlineExceeded").disruption().is_none());
    let backing_off: LeanPod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "status": {"phase": "Running", "containerStatuses": [{"name": "main", "restartCount": 3,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 7, "containerID": "c://1"}}}]}
    }))
    .unwrap();
    assert_eq!(backing_off.ending.as_deref().unwrap().exits[0].exit_code, 7);
    let restarted: LeanPod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "status": {"phase": "Running", "containerStatuses": [{"name": "main", "restartCount": 2,
            "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
            "lastState": {"terminated": {"exitCode": 42, "containerID": "c://1"}}}]}
    }))
    .unwrap();
    assert_eq!(restarted.ending.as_deref().unwrap().exits[0].exit_code, 42);
    let healthy: LeanPod = serde_json::from_value(json!({
        "metadata": {"name": "p"}, "status": {"phase": "Running"}
    }))
    .unwrap();
    assert!(
        healthy.ending.is_none(),
        "nothing kept for a pod that is fine"
    );
}
