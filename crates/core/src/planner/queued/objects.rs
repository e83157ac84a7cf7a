//! The objects of one request: a PodTemplate of the group's worker pod (what the
//! autoscaler provisions for) and the ProvisioningRequest naming it, both owned by the
//! TrainCluster, named `<cluster>-<group>-pr<n>` and labelled with what they are for.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, PodTemplate, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::TrainCluster;
use crate::api::validate::ResolvedGroup;
use crate::autoscaling::{PodSet, ProvisioningRequest, ProvisioningRequestSpec, Reference};
use crate::constants::{
    LABEL_CLUSTER, LABEL_EPOCH, LABEL_GROUP, LABEL_REPLICA_INDEX, LABEL_REQUEST_SLICES,
    LABEL_TEMPLATE_HASH,
};
use crate::planner::render::{self, GroupPlacement};

/// What one request is for.
pub(crate) struct Asked<'a> {
    pub name: String,
    pub class: &'a str,
    pub slices: u32,
    /// Multislice: the group's epoch; independent replicas: the replica it is for.
    pub epoch: Option<u64>,
    pub replica: Option<u32>,
    pub template_hash: &'a str,
}

/// `<cluster>-<group>-pr<n>`: the `n`th request the group made (`groups[].queued.made`).
pub(crate) fn request_name(tc: &TrainCluster, group: &str, n: u64) -> String {
    let cluster = tc.metadata.name.as_deref().unwrap_or_default();
    format!("{cluster}-{group}-pr{n}")
}

pub(crate) fn request_objects(
    tc: &TrainCluster,
    group: &ResolvedGroup<'_>,
    asked: &Asked<'_>,
) -> (PodTemplate, ProvisioningRequest) {
    let metadata = metadata(tc, group.name(), asked);
    let placement = GroupPlacement {
        replica: asked.replica.unwrap_or(0),
        epoch: asked.epoch.unwrap_or(0),
        incarnation: 0,
        slices_in_job: asked.slices,
        slice: None,
        template_hash: asked.template_hash.to_string(),
    };
    // Host 0's worker pod, unpinned: the node selector, tolerations and TPU requests the
    // autoscaler provisions for are the workers' own. Its affinity is the user's alone: the
    // operator's terms on the group key would put all `count` pods (every slice's hosts)
    // in one node pool, so an autoscaler simulating them would never provision 2 slices.
    let mut pod = render::worker_pod(tc, group, &placement, 0);
    if let Some(spec) = pod.spec.as_mut() {
        spec.affinity = users_affinity(group);
    }
    let template = PodTemplate {
        metadata: metadata.clone(),
        template: Some(PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: pod.metadata.labels,
                annotations: pod.metadata.annotations,
                ..Default::default()
            }),
            spec: pod.spec,
        }),
    };
    let count = group.hosts.saturating_mul(asked.slices);
    let request = ProvisioningRequest {
        metadata,
        spec: ProvisioningRequestSpec {
            pod_sets: vec![PodSet {
                pod_template_ref: Reference {
                    name: asked.name.clone(),
                },
                count: i32::try_from(count).unwrap_or(i32::MAX),
            }],
            provisioning_class_name: asked.class.to_string(),
            parameters: BTreeMap::new(),
        },
        status: None,
    };
    (template, request)
}

fn users_affinity(group: &ResolvedGroup<'_>) -> Option<Affinity> {
    let template = group.spec.template.spec.as_ref();
    template.and_then(|s| s.affinity.clone())
}

fn metadata(tc: &TrainCluster, group: &str, asked: &Asked<'_>) -> ObjectMeta {
    let cluster = tc.metadata.name.clone().unwrap_or_default();
    let mut labels = BTreeMap::from([
        (LABEL_CLUSTER.to_string(), cluster),
        (LABEL_GROUP.to_string(), group.to_string()),
        (
            LABEL_TEMPLATE_HASH.to_string(),
            asked.template_hash.to_string(),
        ),
        (LABEL_REQUEST_SLICES.to_string(), asked.slices.to_string()),
    ]);
    if let Some(epoch) = asked.epoch {
        labels.insert(LABEL_EPOCH.into(), epoch.to_string());
    }
    if let Some(replica) = asked.replica {
        labels.insert(LABEL_REPLICA_INDEX.into(), replica.to_string());
    }
    ObjectMeta {
        name: Some(asked.name.clone()),
        namespace: tc.metadata.namespace.clone(),
        labels: Some(labels),
        owner_references: Some(vec![render::owner_reference(tc)]),
        ..Default::default()
    }
}
