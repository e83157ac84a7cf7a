//! The pod table, as kube-apiserver's printer (`printPod`) builds it: READY counts ready
//! containers, STATUS is the phase refined by the containers' states (the last container
//! with a waiting or terminated reason wins; `Init:` for init containers; `Terminating`
//! once deleted), RESTARTS adds when the last one was.

use serde_json::{Value, json};

use super::cells::{AGE, age, column, name_column, or_none, since};

pub(crate) fn columns() -> Vec<Value> {
    vec![
        name_column(),
        column(
            "Ready",
            "string",
            "",
            "The aggregate readiness state of this pod for accepting traffic.",
            0,
        ),
        column(
            "Status",
            "string",
            "",
            "The aggregate status of the containers in this pod.",
            0,
        ),
        column(
            "Restarts",
            "string",
            "",
            "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
            0,
        ),
        column("Age", "string", "", AGE, 0),
        column(
            "IP",
            "string",
            "",
            "IP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.",
            1,
        ),
        column(
            "Node",
            "string",
            "",
            "NodeName is a request to schedule this pod onto a specific node.",
            1,
        ),
        column(
            "Nominated Node",
            "string",
            "",
            "nominatedNodeName is set only when this pod preempts other pods on the node.",
            1,
        ),
        column(
            "Readiness Gates",
            "string",
            "",
            "If specified, all readiness gates will be evaluated for pod readiness.",
            1,
        ),
    ]
}

/// Restarts so far and the latest time a container last terminated.
#[derive(Default)]
struct Restarts {
    count: i64,
    last: Option<String>,
}

impl Restarts {
    fn add(&mut self, status: &Value) {
        self.count += status["restartCount"].as_i64().unwrap_or(0);
        if let Some(at) = status
            .pointer("/lastState/terminated/finishedAt")
            .and_then(Value::as_str)
            && self.last.as_deref().is_none_or(|l| l < at)
        {
            self.last = Some(at.to_string());
        }
    }
}

fn list<'a>(v: &'a Value, ptr: &str) -> &'a [Value] {
    v.pointer(ptr)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn terminated_reason(t: &Value, prefix: &str) -> String {
    match t["reason"].as_str().filter(|r| !r.is_empty()) {
        Some(r) => format!("{prefix}{r}"),
        None => match t["signal"].as_i64().filter(|s| *s != 0) {
            Some(s) => format!("{prefix}Signal:{s}"),
            None => format!("{prefix}ExitCode:{}", t["exitCode"].as_i64().unwrap_or(0)),
        },
    }
}

fn is_sidecar(pod: &Value, name: &str) -> bool {
    list(pod, "/spec/initContainers")
        .iter()
        .any(|c| c["name"] == name && c["restartPolicy"] == "Always")
}

fn condition_true(pod: &Value, kind: &str) -> bool {
    list(pod, "/status/conditions")
        .iter()
        .any(|c| c["type"] == kind && c["status"] == "True")
}

/// The init containers' part: the STATUS while initializing (`None` once done), restarts,
/// and the ready sidecars.
fn init_status(
    pod: &Value,
    restarts: &mut Restarts,
    sidecar_restarts: &mut Restarts,
    ready: &mut i64,
) -> Option<String> {
    let total = list(pod, "/spec/initContainers").len();
    for (i, c) in list(pod, "/status/initContainerStatuses")
        .iter()
        .enumerate()
    {
        restarts.add(c);
        let name = c["name"].as_str().unwrap_or_default();
        let sidecar = is_sidecar(pod, name);
        if sidecar {
            sidecar_restarts.add(c);
        }
        let terminated = c.pointer("/state/terminated");
        let waiting = c.pointer("/state/waiting/reason").and_then(Value::as_str);
        if terminated.is_some_and(|t| t["exitCode"].as_i64() == Some(0)) {
            continue;
        }
        if sidecar && c["started"] == true {
            *ready += i64::from(c["ready"] == true);
            continue;
        }
        return Some(match (terminated, waiting) {
            (Some(t), _) => terminated_reason(t, "Init:"),
            (None, Some(w)) if !w.is_empty() && w != "PodInitializing" => format!("Init:{w}"),
            _ => format!("Init:{i}/{total}"),
        });
    }
    None
}

/// The cells of a pod's row, and the row's conditions (a finished pod is `Completed`).
pub(crate) fn row(pod: &Value, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    let phase = pod
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut reason = match pod.pointer("/status/reason").and_then(Value::as_str) {
        Some(r) if !r.is_empty() => r.to_string(),
        _ => phase.to_string(),
    };
    if list(pod, "/status/conditions")
        .iter()
        .any(|c| c["type"] == "PodScheduled" && c["reason"] == "SchedulingGated")
    {
        reason = "SchedulingGated".into();
    }
    let sidecars = list(pod, "/spec/initContainers")
        .iter()
        .filter(|c| c["restartPolicy"] == "Always")
        .count();
    let total = list(pod, "/spec/containers").len() + sidecars;
    let (mut restarts, mut sidecar_restarts, mut ready) =
        (Restarts::default(), Restarts::default(), 0);
    let initializing = init_status(pod, &mut restarts, &mut sidecar_restarts, &mut ready);
    if let Some(init) = &initializing {
        reason = init.clone();
    }
    if initializing.is_none() || condition_true(pod, "Initialized") {
        restarts = sidecar_restarts;
        let mut running = false;
        for c in list(pod, "/status/containerStatuses").iter().rev() {
            restarts.add(c);
            let waiting = c
                .pointer("/state/waiting/reason")
                .and_then(Value::as_str)
                .filter(|r| !r.is_empty());
            match (waiting, c.pointer("/state/terminated")) {
                (Some(w), _) => reason = w.to_string(),
                (None, Some(t)) => reason = terminated_reason(t, ""),
                (None, None) if c["ready"] == true && c.pointer("/state/running").is_some() => {
                    running = true;
                    ready += 1;
                }
                _ => {}
            }
        }
        if reason == "Completed" && running {
            reason = if condition_true(pod, "Ready") {
                "Running"
            } else {
                "NotReady"
            }
            .into();
        }
    }
    let deleting = pod.pointer("/metadata/deletionTimestamp").is_some();
    if deleting && pod.pointer("/status/reason").and_then(Value::as_str) == Some("NodeLost") {
        reason = "Unknown".into();
    } else if deleting && !matches!(phase, "Succeeded" | "Failed") {
        reason = "Terminating".into();
    }
    let restarts_cell = match (&restarts.last, restarts.count) {
        (Some(at), n) if n != 0 => format!("{n} ({} ago)", since(Some(at), now)),
        (_, n) => n.to_string(),
    };
    let cells = vec![
        json!(
            pod.pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
        ),
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts_cell),
        json!(age(pod, now)),
        json!(or_none(pod.pointer("/status/podIPs/0/ip"))),
        json!(or_none(pod.pointer("/spec/nodeName"))),
        json!(or_none(pod.pointer("/status/nominatedNodeName"))),
        json!(readiness_gates(pod)),
    ];
    (cells, finished(phase))
}

fn readiness_gates(pod: &Value) -> String {
    let gates = list(pod, "/spec/readinessGates");
    if gates.is_empty() {
        return "<none>".into();
    }
    let conditions = list(pod, "/status/conditions");
    let met = gates
        .iter()
        .filter(|g| {
            conditions
                .iter()
                .find(|c| c["type"] == g["conditionType"])
                .is_some_and(|c| c["status"] == "True")
        })
        .count();
    format!("{met}/{}", gates.len())
}

fn finished(phase: &str) -> Option<Value> {
    let (reason, message) = match phase {
        "Succeeded" => ("Succeeded", "The pod has completed successfully."),
        "Failed" => ("Failed", "The pod failed."),
        _ => return None,
    };
    Some(json!([{"type": "Completed", "status": "True", "reason": reason, "message": message}]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> jiff::Timestamp {
        "2026-01-01T01:00:00Z".parse().unwrap()
    }

    fn pod(status: Value) -> Value {
        json!({"metadata": {"name": "p", "creationTimestamp": "2026-01-01T00:00:00Z"},
               "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n1"},
               "status": status})
    }

    #[test]
    fn status_follows_the_containers() {
        let running = pod(
            json!({"phase": "Running", "podIPs": [{"ip": "10.0.0.1"}], "containerStatuses": [
            {"name": "a", "ready": true, "state": {"running": {}}, "restartCount": 0},
            {"name": "b", "ready": true, "state": {"running": {}}, "restartCount": 2,
             "lastState": {"terminated": {"finishedAt": "2026-01-01T00:30:00Z"}}}]}),
        );
        let (cells, conditions) = row(&running, now());
        assert_eq!(
            cells,
            vec![
                json!("p"),
                json!("2/2"),
                json!("Running"),
                json!("2 (30m ago)"),
                json!("60m"),
                json!("10.0.0.1"),
                json!("n1"),
                json!("<none>"),
                json!("<none>")
            ]
        );
        assert!(conditions.is_none());
        let crashed = pod(json!({"phase": "Running", "containerStatuses": [
            {"name": "a", "ready": false, "state": {"waiting": {"reason": "CrashLoopBackOff"}}},
            {"name": "b", "ready": false, "state": {"terminated": {"exitCode": 137}}}]}));
        assert_eq!(row(&crashed, now()).0[2], json!("CrashLoopBackOff"));
        let failed = pod(json!({"phase": "Failed", "containerStatuses": [
            {"name": "a", "state": {"terminated": {"exitCode": 137}}}]}));
        let (cells, conditions) = row(&failed, now());
        assert_eq!(cells[2], json!("ExitCode:137"));
        assert_eq!(conditions.unwrap()[0]["reason"], "Failed");
    }

    #[test]
    fn pending_initializing_and_terminating() {
        assert_eq!(
            row(&pod(json!({"phase": "Pending"})), now()).0[2],
            json!("Pending")
        );
        let mut init = pod(json!({"phase": "Pending", "initContainerStatuses": [
            {"name": "i", "state": {"waiting": {"reason": "PodInitializing"}}}]}));
        init["spec"]["initContainers"] = json!([{"name": "i"}]);
        assert_eq!(row(&init, now()).0[2], json!("Init:0/1"));
        let mut gone = pod(json!({"phase": "Running"}));
        gone["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:59:00Z");
        assert_eq!(row(&gone, now()).0[2], json!("Terminating"));
    }
}
