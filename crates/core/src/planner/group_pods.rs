//! The pods of one group to create, rendered one at a time when the executor sends them.
//!
//! The hosts of a group differ only in their host index: the pod's name (and, for a worker,
//! its hostname), the `slices.dev/host-index` label and `TPU_WORKER_ID`. So a plan keeps one
//! rendered pod per group, host 0, and the executor derives each host's pod from it as its
//! create goes out. A full multislice restart at 1,000 x 64 then renders 1,000 pods under the
//! planning lock, not 64,000 (each carrying its group's `TPU_WORKER_HOSTNAMES`, about 3 KB).
//! `render::worker_pod` and `spares::spare_pod` stay the reference: the tests check that
//! every host's pod derived here equals the one they render.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Affinity, Pod};

use crate::constants::{
    ANNOTATIONS_CONSUME_REQUEST, ANNOTATIONS_REQUEST_CLASS, ENV_TPU_WORKER_ID, LABEL_HOST_INDEX,
    LABEL_PROVISIONING_REQUEST,
};

/// Every pod of one group to create, as host 0's pod and what differs per host.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupPods {
    /// Host 0's pod, exactly as rendered.
    first: Arc<Pod>,
    hosts: u32,
    /// The first host to create: 0, or 1 for the rest of a group whose host 0 exists.
    from: u32,
    /// Hosts whose pods exist already (a set completed after a restart): not created.
    present: Vec<u32>,
    /// The name without the host index: a host's pod is named `<stem><host>`.
    stem: Arc<str>,
    per_host: PerHost,
    /// The affinity of every host but host 0, when it differs from host 0's: only host 0
    /// carries the term that keeps other groups off its node pool (see
    /// `render::worker_pod`).
    followers_affinity: Option<Box<Option<Affinity>>>,
}

/// What a host's index changes besides its name and `slices.dev/host-index` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PerHost {
    /// A worker: its hostname is its name; a TPU worker also has its `TPU_WORKER_ID`.
    Worker { tpu: bool },
    /// A hot spare's placeholder: nothing else.
    Placeholder,
}

impl GroupPods {
    /// A worker group of `hosts` pods whose host 0 renders as `first`; `tpu` when the group
    /// runs on TPU slices (its containers carry the operator's `TPU_WORKER_ID`).
    pub(super) fn workers(first: Pod, hosts: u32, tpu: bool) -> GroupPods {
        GroupPods::new(first, hosts, PerHost::Worker { tpu })
    }

    /// A hot spare's `hosts` placeholders whose host 0 renders as `first`.
    pub(super) fn placeholders(first: Pod, hosts: u32) -> GroupPods {
        GroupPods::new(first, hosts, PerHost::Placeholder)
    }

    /// One pod, as it is: for tests of the executor.
    pub fn one(pod: Pod) -> GroupPods {
        GroupPods::new(pod, 1, PerHost::Placeholder)
    }

    fn new(first: Pod, hosts: u32, per_host: PerHost) -> GroupPods {
        let name = first.metadata.name.as_deref().unwrap_or_default();
        // Host 0 is named `<stem>0` (`worker_pod_name`, `spare_pod_name`).
        debug_assert!(hosts <= 1 || name.ends_with("-0"), "host 0 named {name}");
        let stem = name.strip_suffix('0').unwrap_or(name).into();
        GroupPods {
            first: Arc::new(first),
            hosts,
            from: 0,
            present: Vec::new(),
            stem,
            per_host,
            followers_affinity: None,
        }
    }

    /// Hosts other than host 0 have `affinity` instead of host 0's.
    pub(super) fn with_followers_affinity(mut self, affinity: Option<Affinity>) -> GroupPods {
        self.followers_affinity = Some(Box::new(affinity));
        self
    }

    /// Every pod consumes ProvisioningRequest `request` of `class`: the autoscaler's
    /// annotations, and our label naming it (the planner reads labels of pods).
    pub(super) fn consuming(mut self, request: &str, class: &str) -> GroupPods {
        let meta = &mut Arc::make_mut(&mut self.first).metadata;
        let annotations = meta.annotations.get_or_insert_with(Default::default);
        for key in ANNOTATIONS_CONSUME_REQUEST {
            annotations.insert(key.to_string(), request.to_string());
        }
        for key in ANNOTATIONS_REQUEST_CLASS {
            annotations.insert(key.to_string(), class.to_string());
        }
        let labels = meta.labels.get_or_insert_with(Default::default);
        labels.insert(LABEL_PROVISIONING_REQUEST.into(), request.to_string());
        self
    }

    /// Only hosts 1 and up, for a group whose host 0 exists already (placed first).
    pub(super) fn followers(mut self) -> GroupPods {
        self.from = 1.min(self.hosts);
        self
    }

    /// All but the hosts in `present`, whose pods exist already.
    pub(super) fn without(mut self, present: impl IntoIterator<Item = u32>) -> GroupPods {
        self.present = present.into_iter().collect();
        self
    }

    /// The hosts to create, in order.
    pub fn hosts(&self) -> impl Iterator<Item = u32> + '_ {
        (self.from..self.hosts).filter(|h| !self.present.contains(h))
    }

    /// How many pods to create.
    pub fn len(&self) -> usize {
        self.hosts().count()
    }

    pub fn is_empty(&self) -> bool {
        self.hosts().next().is_none()
    }

    /// The name of host `host`'s pod.
    pub fn name(&self, host: u32) -> String {
        match host {
            0 => self.first.metadata.name.clone().unwrap_or_default(),
            _ => format!("{}{host}", self.stem),
        }
    }

    /// Every pod's name, in host order.
    pub fn names(&self) -> impl Iterator<Item = String> + '_ {
        self.hosts().map(|h| self.name(h))
    }

    /// Host `host`'s pod, rendered now.
    pub fn pod(&self, host: u32) -> Pod {
        let mut pod = Pod::clone(&self.first);
        if host == 0 {
            return pod;
        }
        let name = self.name(host);
        let index = host.to_string();
        if let Some(labels) = pod.metadata.labels.as_mut() {
            labels.insert(LABEL_HOST_INDEX.into(), index.clone());
        }
        if let (Some(affinity), Some(spec)) = (&self.followers_affinity, pod.spec.as_mut()) {
            spec.affinity = Option::clone(affinity);
        }
        if let (PerHost::Worker { tpu }, Some(spec)) = (self.per_host, pod.spec.as_mut()) {
            spec.hostname = Some(name.clone());
            let env = spec.containers.iter_mut().flat_map(|c| c.env.iter_mut());
            for var in env.flatten().filter(|v| tpu && v.name == ENV_TPU_WORKER_ID) {
                var.value = Some(index.clone());
            }
        }
        pod.metadata.name = Some(name);
        pod
    }

    /// Every pod, rendered one by one, in host order.
    pub fn iter(&self) -> impl Iterator<Item = Pod> + '_ {
        self.hosts().map(|h| self.pod(h))
    }
}

#[cfg(test)]
mod tests;
