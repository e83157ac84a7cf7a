//! The JSON shapes read from the API server. Fields not named here are skipped by the
//! parser without being allocated. Every field is optional: one odd object must not fail a
//! whole list page (and with it the cache).

use super::*;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<super::template_keys::TemplateKeys>,
    owner_references: Option<Vec<OwnerReference>>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
}

impl Meta {
    fn keeping_labels(self, keep: impl Fn(&str) -> bool) -> ObjectMeta {
        ObjectMeta {
            name: self.name,
            namespace: self.namespace,
            uid: self.uid,
            resource_version: self.resource_version,
            labels: self
                .labels
                .map(|l| l.into_iter().filter(|(k, _)| keep(k)).collect()),
            owner_references: self.owner_references,
            creation_timestamp: self.creation_timestamp,
            deletion_timestamp: self.deletion_timestamp,
            deletion_grace_period_seconds: self.deletion_grace_period_seconds,
            ..Default::default()
        }
    }
}

#[derive(Deserialize)]
pub struct Pod {
    metadata: Option<Meta>,
    spec: Option<PodSpec>,
    status: Option<PodStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodSpec {
    node_name: Option<String>,
    containers: Option<Vec<Container>>,
}

#[derive(Deserialize)]
struct Container {
    resources: Option<Resources>,
}

#[derive(Deserialize)]
struct Resources {
    requests: Option<BTreeMap<String, IgnoredAny>>,
    limits: Option<BTreeMap<String, IgnoredAny>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodStatus {
    phase: Option<String>,
    reason: Option<String>,
    message: Option<String>,
    conditions: Option<Vec<Condition>>,
    container_statuses: Option<Vec<ContainerStatus>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Condition {
    #[serde(rename = "type", default)]
    type_: String,
    #[serde(default)]
    status: String,
    last_transition_time: Option<Time>,
    reason: Option<String>,
    message: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContainerStatus {
    #[serde(default)]
    name: String,
    restart_count: Option<i32>,
    state: Option<ContainerState>,
    last_state: Option<ContainerState>,
}

impl ContainerStatus {
    /// The container runs or has run (now or before a restart). A terminated state
    /// counts only with a start time or a container id: the kubelet also writes one for
    /// a container it never started (e.g. `ContainerStatusUnknown`).
    fn ever_ran(&self) -> bool {
        let ran = |s: &Option<ContainerState>| {
            s.as_ref().is_some_and(|s| {
                s.running.is_some()
                    || s.terminated
                        .as_ref()
                        .is_some_and(|t| t.started_at.is_some() || t.container_id.is_some())
            })
        };
        ran(&self.state) || ran(&self.last_state) || self.restart_count.unwrap_or(0) > 0
    }
}

/// A pod its kubelet refused: failed with an admission reason before any container ran.
fn rejection(status: &mut PodStatus) -> Option<Box<Rejection>> {
    let reason = status.reason.as_deref()?;
    let never_ran = !status
        .container_statuses
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(ContainerStatus::ever_ran);
    (status.phase.as_deref() == Some("Failed") && never_ran && is_kubelet_rejection(reason)).then(
        || {
            Box::new(Rejection {
                reason: status.reason.take().unwrap_or_default(),
                message: status.message.take().unwrap_or_default(),
            })
        },
    )
}

#[derive(Deserialize)]
struct ContainerState {
    running: Option<IgnoredAny>,
    terminated: Option<Terminated>,
}

/// How the pod ended (see [`Ending`]), if there is anything to say: failure rules and
/// disruption reasons look only at pods that failed, were disrupted or have a container
/// that exited non-zero.
fn ending(status: &PodStatus, rejected: bool) -> Option<Box<Ending>> {
    let conditions = status.conditions.as_deref().unwrap_or_default();
    let exits: Vec<ContainerExit> = status
        .container_statuses
        .as_deref()
        .unwrap_or_default()
        .iter()
        .filter_map(ContainerStatus::nonzero_exit)
        .collect();
    let disruption = if rejected {
        None
    } else {
        disruption(status, conditions)
    };
    let failed = status.phase.as_deref() == Some("Failed");
    if disruption.is_none() && exits.is_empty() && !failed {
        return None;
    }
    let conditions = conditions
        .iter()
        .map(|c| (c.type_.clone(), c.status.clone()))
        .collect();
    Some(Box::new(Ending {
        disruption,
        exits,
        conditions,
    }))
}

/// The platform's word that it disrupted the pod: the `DisruptionTarget` condition, or
/// a `status.reason` only the platform writes.
fn disruption(status: &PodStatus, conditions: &[Condition]) -> Option<Disruption> {
    let pod_reason = status.reason.clone();
    if let Some(c) = conditions
        .iter()
        .find(|c| c.type_ == CONDITION_DISRUPTION_TARGET && c.status == "True")
    {
        let reason = c.reason.clone().unwrap_or_else(|| c.type_.clone());
        return Some(Disruption {
            pod_reason: pod_reason.filter(|r| *r != reason),
            reason,
            message: c
                .message
                .clone()
                .or(status.message.clone())
                .unwrap_or_default(),
        });
    }
    let message = status.message.as_deref().unwrap_or_default();
    let reason = pod_reason.filter(|r| is_platform_reason(r, message))?;
    Some(Disruption {
        reason,
        pod_reason: None,
        message: status.message.clone().unwrap_or_default(),
    })
}

impl ContainerStatus {
    /// The container's non-zero exit: its terminated state, else the last one before a
    /// restart.
    fn nonzero_exit(&self) -> Option<ContainerExit> {
        let exit = |s: &Option<ContainerState>| {
            s.as_ref()?
                .terminated
                .as_ref()?
                .exit_code
                .filter(|c| *c != 0)
        };
        // Not terminated now (running again, or waiting in a crash-loop backoff): the exit
        // before the restart.
        let exit_code = exit(&self.state).or_else(|| {
            let terminated = self.state.as_ref().is_some_and(|s| s.terminated.is_some());
            (!terminated).then(|| exit(&self.last_state)).flatten()
        })?;
        Some(ContainerExit {
            container: self.name.clone(),
            exit_code,
        })
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Terminated {
    exit_code: Option<i32>,
    started_at: Option<IgnoredAny>,
    #[serde(rename = "containerID")]
    container_id: Option<IgnoredAny>,
}

impl From<Pod> for LeanPod {
    fn from(pod: Pod) -> LeanPod {
        let spec = pod.spec;
        let mut status = pod.status;
        let rejection = status.as_mut().and_then(rejection);
        let ending = status.as_ref().and_then(|s| ending(s, rejection.is_some()));
        let requests_tpu = spec
            .as_ref()
            .and_then(|s| s.containers.as_deref())
            .unwrap_or_default()
            .iter()
            .filter_map(|c| c.resources.as_ref())
            .any(|r| {
                [&r.requests, &r.limits]
                    .into_iter()
                    .any(|m| m.as_ref().is_some_and(|m| m.contains_key(TPU_RESOURCE)))
            });
        let ready = status
            .as_ref()
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let containers = status
            .as_ref()
            .and_then(|s| s.container_statuses.as_deref())
            .unwrap_or_default();
        let restarted_container = containers
            .iter()
            .find(|c| c.restart_count.unwrap_or(0) > 0)
            .map(|c| c.name.clone());
        let failed_container = containers
            .iter()
            .find(|c| {
                let ended = c.state.as_ref().and_then(|s| s.terminated.as_ref());
                ended.is_some_and(|t| t.exit_code.unwrap_or(1) != 0)
            })
            .map(|c| c.name.clone());
        // Only our labels are kept, packed: none is copied into a map first.
        let (metadata, labels, template_keys) = match pod.metadata {
            Some(mut meta) => {
                let labels = OwnLabels::new(meta.labels.take().unwrap_or_default());
                let keys = meta.annotations.take().and_then(|a| a.0);
                (meta.keeping_labels(|_| false), labels, keys)
            }
            None => Default::default(),
        };
        LeanPod {
            metadata,
            labels,
            node_name: spec.and_then(|s| s.node_name),
            requests_tpu,
            phase: status.and_then(|s| s.phase),
            ready,
            restarted_container,
            failed_container,
            rejection,
            ending,
            template_keys,
        }
    }
}

#[derive(Deserialize)]
pub struct Node {
    metadata: Option<Meta>,
    spec: Option<NodeSpec>,
    status: Option<NodeStatus>,
}

#[derive(Deserialize)]
struct NodeSpec {
    taints: Option<Vec<Taint>>,
    unschedulable: Option<bool>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Taint {
    #[serde(default)]
    key: String,
    #[serde(default)]
    value: String,
    #[serde(default)]
    effect: String,
    time_added: Option<Time>,
}

#[derive(Deserialize)]
struct NodeStatus {
    allocatable: Option<BTreeMap<String, Quantity>>,
    capacity: Option<BTreeMap<String, Quantity>>,
    conditions: Option<Vec<Condition>>,
}

impl From<Node> for LeanNode {
    fn from(node: Node) -> LeanNode {
        let spec = node.spec;
        let status = node.status;
        let chips = |of: fn(&NodeStatus) -> Option<&BTreeMap<String, Quantity>>| {
            status
                .as_ref()
                .and_then(of)
                .and_then(|r| r.get(TPU_RESOURCE))
                .and_then(|q| q.0.parse::<u32>().ok())
        };
        let capacity = chips(|s| s.capacity.as_ref());
        let allocatable = chips(|s| s.allocatable.as_ref());
        let tpu_chips = capacity.or(allocatable).unwrap_or(0);
        let tpu_allocatable = allocatable.or(capacity).unwrap_or(0);
        let taints = spec
            .as_ref()
            .and_then(|s| s.taints.as_deref())
            .unwrap_or_default();
        let lifecycle_taint_since = taints
            .iter()
            .filter(|t| t.key == TAINT_NOT_READY || t.key == TAINT_UNREACHABLE)
            .filter_map(|t| t.time_added.as_ref().map(|t| t.0))
            .min();
        let ready = status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| ReadyCondition {
                is_true: c.status == "True",
                since: c.last_transition_time.map(|t| t.0),
            });
        let labels = node.metadata.as_ref().and_then(|m| m.labels.as_ref());
        let traits = NodeTraits::new(
            labels.into_iter().flatten(),
            taints.iter().map(|t| NodeTaint {
                key: t.key.clone(),
                value: t.value.clone(),
                effect: t.effect.clone(),
            }),
        );
        LeanNode {
            metadata: node
                .metadata
                .map(|m| m.keeping_labels(|k| NODE_LABELS_READ.contains(&k)))
                .unwrap_or_default(),
            taint_keys: taints.iter().map(|t| t.key.clone()).collect(),
            traits,
            lifecycle_taint_since,
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
            ready,
            tpu_chips,
            tpu_allocatable,
        }
    }
}
