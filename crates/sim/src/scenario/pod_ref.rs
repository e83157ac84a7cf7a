//! A pod as a step names it: by name, or by the operator's labels.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams};
use serde::{Deserialize, Serialize};

use crate::error::SimError;
use slice_core::constants::{LABEL_CLUSTER, LABEL_GROUP, LABEL_HOST_INDEX, LABEL_REPLICA_INDEX};

/// A pod, by name or by labels. `cluster`, `group`, `replica`, `host` are shorthands for the
/// operator's pod labels (`slices.dev/cluster`, `slices.dev/group`,
/// `slices.dev/replica-index`, `slices.dev/host-index`); `labels` adds any others. With a
/// selector the first matching non-terminating pod by name is used.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<u32>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

impl PodRef {
    /// Label selector string of the reference (empty when it has none).
    pub fn label_selector(&self) -> String {
        let mut m = self.labels.clone();
        if let Some(c) = &self.cluster {
            m.insert(LABEL_CLUSTER.into(), c.clone());
        }
        if let Some(g) = &self.group {
            m.insert(LABEL_GROUP.into(), g.clone());
        }
        if let Some(r) = self.replica {
            m.insert(LABEL_REPLICA_INDEX.into(), r.to_string());
        }
        if let Some(h) = self.host {
            m.insert(LABEL_HOST_INDEX.into(), h.to_string());
        }
        m.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub(super) fn describe(&self) -> String {
        if let Some(n) = &self.name {
            return n.clone();
        }
        // e.g. "demo/workers replica 1 host 2", with any other labels in brackets.
        let mut parts = Vec::new();
        match (&self.cluster, &self.group) {
            (Some(c), Some(g)) => parts.push(format!("{c}/{g}")),
            (Some(c), None) => parts.push(c.clone()),
            (None, Some(g)) => parts.push(format!("group {g}")),
            (None, None) => {}
        }
        if let Some(r) = self.replica {
            parts.push(format!("replica {r}"));
        }
        if let Some(h) = self.host {
            parts.push(format!("host {h}"));
        }
        if !self.labels.is_empty() || parts.is_empty() {
            parts.push(format!("[{}]", self.label_selector()));
        }
        parts.join(" ")
    }
}

/// Resolves a pod reference to a pod name (first non-terminating match by name).
pub async fn resolve_pod(
    client: &Client,
    pod: &PodRef,
    namespace: &str,
) -> Result<String, SimError> {
    if let Some(n) = &pod.name {
        return Ok(n.clone());
    }
    let sel = pod.label_selector();
    if sel.is_empty() {
        return Err(SimError::Invalid(
            "pod reference has neither name nor labels".into(),
        ));
    }
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut names: Vec<String> = api
        .list(&ListParams::default().labels(&sel))
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name)
        .collect();
    names.sort();
    names
        .into_iter()
        .next()
        .ok_or_else(|| SimError::NotFound(format!("pod [{sel}] in {namespace}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_ref_selector() {
        let r = PodRef {
            cluster: Some("demo".into()),
            replica: Some(1),
            host: Some(2),
            ..Default::default()
        };
        assert_eq!(
            r.label_selector(),
            "slices.dev/cluster=demo,slices.dev/host-index=2,slices.dev/replica-index=1"
        );
    }
}
