//! Operator-side validation: everything the CRD schema and CEL rules cannot check, resolved
//! into the shapes the planner works with. Each error names the field and the fix.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::PodTemplateSpec;

use super::{TrainCluster, WorkerGroupSpec};
use crate::constants::{MAX_CLUSTER_PLUS_GROUP_NAME, TPU_RESOURCE};
use crate::tpu::SliceShape;

pub use super::field_error::FieldError;

/// A worker group whose slice shape and host count are known.
#[derive(Clone, Debug)]
pub struct ResolvedGroup<'a> {
    pub spec: &'a WorkerGroupSpec,
    /// None for non-TPU groups (`hostsPerGroup`).
    pub shape: Option<SliceShape>,
    pub hosts: u32,
}

impl ResolvedGroup<'_> {
    pub fn name(&self) -> &str {
        &self.spec.name
    }
}

/// Resolve every worker group, or return every problem found (not just the first).
pub fn resolve(tc: &TrainCluster) -> Result<Vec<ResolvedGroup<'_>>, Vec<FieldError>> {
    let mut errors = Vec::new();
    let name = tc.metadata.name.as_deref().unwrap_or_default();
    let spec = &tc.spec;
    if !is_dns_label(name) || name.len() > 54 {
        errors.push(FieldError {
            field: "metadata.name".into(),
            message: format!(
                "{name:?} must be a DNS label of at most 54 characters (lowercase letters, digits and '-', starting with a letter); rename the TrainCluster"
            ),
        });
    }
    if spec.worker_groups.is_empty() {
        errors.push(FieldError {
            field: "spec.workerGroups".into(),
            message:
                "at least one worker group is required; add one with name, tpu, slices and template"
                    .into(),
        });
    }
    let mut seen = BTreeSet::new();
    let mut groups = Vec::new();
    for (i, group) in spec.worker_groups.iter().enumerate() {
        let at = format!("spec.workerGroups[{i}]");
        if !seen.insert(group.name.as_str()) {
            errors.push(FieldError {
                field: format!("{at}.name"),
                message: format!(
                    "{:?} is used by another group; give each group a unique name",
                    group.name
                ),
            });
        }
        if !is_dns_label(&group.name) {
            errors.push(FieldError {
                field: format!("{at}.name"),
                message: format!("{:?} must be a DNS label (lowercase letters, digits and '-', starting with a letter)", group.name),
            });
        }
        if name.len() + group.name.len() > MAX_CLUSTER_PLUS_GROUP_NAME {
            errors.push(FieldError {
                field: format!("{at}.name"),
                message: format!(
                    "cluster name + group name is {} characters; at most {MAX_CLUSTER_PLUS_GROUP_NAME} fit in a 63-character pod hostname '<cluster>-<group>-<replica>-<host>'; shorten either name",
                    name.len() + group.name.len()
                ),
            });
        }
        if group.slices.max < 1 {
            errors.push(FieldError {
                field: format!("{at}.slices.max"),
                message: "must be at least 1".into(),
            });
        }
        if group.slices.min > group.slices.max {
            errors.push(FieldError {
                field: format!("{at}.slices.min"),
                message: format!(
                    "min ({}) exceeds max ({}); lower min or raise max",
                    group.slices.min, group.slices.max
                ),
            });
        }
        if group.slices.spares > 0 && group.tpu.is_none() {
            errors.push(FieldError {
                field: format!("{at}.slices.spares"),
                message: "spares are whole TPU slices: set tpu, or remove spares".into(),
            });
        }
        let allowed = &spec.elastic.allowed_slice_counts;
        let lowest = group.slices.min.max(1);
        if !allowed.is_empty()
            && !allowed
                .iter()
                .any(|n| (lowest..=group.slices.max).contains(n))
        {
            errors.push(FieldError {
                field: "spec.elastic.allowedSliceCounts".into(),
                message: format!(
                    "none of {allowed:?} lies within group {:?}'s slices [{lowest}, {}]; add a count in that range",
                    group.name, group.slices.max
                ),
            });
        }
        if group
            .template
            .spec
            .as_ref()
            .is_none_or(|s| s.containers.is_empty())
        {
            errors.push(FieldError {
                field: format!("{at}.template.spec.containers"),
                message: "the pod template needs at least one container".into(),
            });
        }
        errors.extend(super::template::check(
            &group.template,
            &format!("{at}.template"),
        ));
        errors.extend(placement_fields(&group.template, &format!("{at}.template")));
        match (&group.tpu, group.hosts_per_group) {
            (Some(tpu), None) => {
                let requested = match tpu_request(&group.template) {
                    Ok(r) => r,
                    Err(message) => {
                        errors.push(FieldError {
                            field: format!("{at}.template.spec.containers"),
                            message,
                        });
                        None
                    }
                };
                let chips = match (tpu.chips_per_host, requested) {
                    (Some(explicit), Some(req)) if explicit != req => {
                        errors.push(FieldError {
                            field: format!("{at}.tpu.chipsPerHost"),
                            message: format!(
                                "{explicit} disagrees with the containers' {TPU_RESOURCE} request of {req}; make them equal or drop chipsPerHost"
                            ),
                        });
                        None
                    }
                    (explicit, req) => explicit.or(req),
                };
                match SliceShape::resolve(&tpu.accelerator, &tpu.topology, chips) {
                    Ok(shape)
                        if crate::tpu::not_offered(shape.generation, &shape.topology).is_some() =>
                    {
                        errors.push(FieldError {
                            field: format!("{at}.tpu.topology"),
                            message: crate::tpu::not_offered(shape.generation, &shape.topology)
                                .unwrap_or_default(),
                        })
                    }
                    Ok(shape) => groups.push(ResolvedGroup {
                        spec: group,
                        hosts: shape.hosts,
                        shape: Some(shape),
                    }),
                    Err(e) => errors.push(FieldError {
                        field: format!("{at}.tpu"),
                        message: e.to_string(),
                    }),
                }
            }
            (None, Some(hosts)) if hosts >= 1 => {
                // Unpinned pods asking for chips would take slices the inventory counts as
                // free for other clusters: TPU work goes through `tpu`, whole slices only.
                if !matches!(tpu_request(&group.template), Ok(None | Some(0))) {
                    errors.push(FieldError {
                        field: format!("{at}.template.spec.containers"),
                        message: format!(
                            "a hostsPerGroup group may not request {TPU_RESOURCE}; use tpu (accelerator and topology) to run on whole TPU slices"
                        ),
                    });
                    continue;
                }
                groups.push(ResolvedGroup {
                    spec: group,
                    shape: None,
                    hosts,
                })
            }
            (None, Some(_)) => errors.push(FieldError {
                field: format!("{at}.hostsPerGroup"),
                message: "must be at least 1".into(),
            }),
            _ => errors.push(FieldError {
                field: at.to_string(),
                message: "set exactly one of tpu (TPU slices) or hostsPerGroup (non-TPU groups)"
                    .into(),
            }),
        }
    }
    if let Some(head) = &spec.head {
        let at = "spec.head.template";
        if head
            .template
            .spec
            .as_ref()
            .is_none_or(|s| s.containers.is_empty())
        {
            errors.push(FieldError {
                field: format!("{at}.spec.containers"),
                message: "the pod template needs at least one container".into(),
            });
        }
        errors.extend(super::template::check(&head.template, at));
    }
    errors.extend(unknown_rule_containers(spec));
    if spec.success_policy == super::SuccessPolicy::Head && spec.head.is_none() {
        errors.push(FieldError {
            field: "spec.successPolicy".into(),
            message: "Head needs spec.head (the head pod whose exit 0 ends the run); add a head or use AllWorkers".into(),
        });
    }
    errors.extend(queued_without_class(spec));
    if errors.is_empty() {
        Ok(groups)
    } else {
        Err(errors)
    }
}

/// `mode: Queued` names a valid ProvisioningRequest class, in `spec.provisioning` and in each
/// group's own (CEL says so too; this catches a CRD installed without its rules).
fn queued_without_class(spec: &super::TrainClusterSpec) -> Vec<FieldError> {
    let groups = spec.worker_groups.iter().enumerate();
    let own = groups.filter_map(|(i, g)| {
        let at = format!("spec.workerGroups[{i}].provisioning");
        g.provisioning.as_ref().map(|p| (at, p))
    });
    let top = spec
        .provisioning
        .as_ref()
        .map(|p| ("spec.provisioning".to_string(), p));
    top.into_iter()
        .chain(own)
        .filter(|(_, p)| p.mode == super::ProvisioningMode::Queued)
        .filter_map(|(at, p)| {
            let message = match p.class_name.as_deref() {
                None | Some("") => "is required with mode Queued: name the ProvisioningRequest class, e.g. queued-provisioning.gke.io",
                Some(c) if !super::provisioning::valid_class_name(c) => "is no ProvisioningRequest class name: a lowercase DNS subdomain (letters, digits, '-' and '.'), e.g. queued-provisioning.gke.io",
                Some(_) => return None,
            };
            Some(FieldError {
                field: format!("{at}.className"),
                message: message.into(),
            })
        })
        .collect()
}

/// The fields by which a worker template would take from the operator where its pods run,
/// what they are called or how their ends are seen: `nodeName` bypasses the slice placement
/// (and the scheduler), `hostnameOverride` renames the host `TPU_WORKER_HOSTNAMES` lists,
/// `restartPolicy: Always` turns every exit, a clean one too, into a container restart (a
/// charged failure of the whole group, and a finished worker never counts as done).
fn placement_fields(template: &PodTemplateSpec, at: &str) -> Vec<FieldError> {
    let Some(spec) = &template.spec else {
        return Vec::new();
    };
    let fields = [
        (
            "nodeName",
            spec.node_name.is_some(),
            "the operator places each replica's pods on the nodes of one slice",
        ),
        (
            "hostnameOverride",
            spec.hostname_override.is_some(),
            "the operator names each worker's host, as TPU_WORKER_HOSTNAMES lists them",
        ),
        (
            "restartPolicy",
            spec.restart_policy.as_deref() == Some("Always"),
            "Always restarts a worker's container after every exit, a clean one too, and each restart fails the whole group; use Never (the default) and let the operator replace groups",
        ),
    ];
    let set = fields.into_iter().filter(|(_, set, _)| *set);
    set.map(|(field, _, why)| FieldError {
        field: format!("{at}.spec.{field}"),
        message: format!("Forbidden: {why}; remove {field} from the worker template"),
    })
    .collect()
}

/// A failure rule's `onExitCodes.containerName` must name a container (or init container)
/// of a worker or head template: a rule about no container never matches, silently.
fn unknown_rule_containers(spec: &super::TrainClusterSpec) -> Vec<FieldError> {
    let templates = spec
        .worker_groups
        .iter()
        .map(|g| &g.template)
        .chain(spec.head.iter().map(|h| &h.template));
    let names: Vec<&str> = templates
        .filter_map(|t| t.spec.as_ref())
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .map(|c| c.name.as_str())
        .collect();
    let rules = spec.failure_policy.rules.iter().enumerate();
    rules
        .filter_map(|(i, rule)| {
            let name = rule.on_exit_codes.as_ref()?.container_name.as_deref()?;
            (!names.contains(&name)).then(|| FieldError {
                field: format!("spec.failurePolicy.rules[{i}].onExitCodes.containerName"),
                message: format!(
                    "no worker or head template has a container {name:?}; name one of: {}",
                    names.join(", ")
                ),
            })
        })
        .collect()
}

/// Chips per host requested by the template: the `google.com/tpu` limit (or request) of its
/// containers. Containers requesting different amounts are an error.
fn tpu_request(template: &PodTemplateSpec) -> Result<Option<u32>, String> {
    let mut found: Option<u32> = None;
    for c in template.spec.iter().flat_map(|s| s.containers.iter()) {
        let Some(resources) = c.resources.as_ref() else {
            continue;
        };
        let q = resources
            .limits
            .as_ref()
            .and_then(|l| l.get(TPU_RESOURCE))
            .or_else(|| {
                resources
                    .requests
                    .as_ref()
                    .and_then(|r| r.get(TPU_RESOURCE))
            });
        let Some(q) = q else { continue };
        let n: u32 = q.0.parse().map_err(|_| {
            format!(
                "container {:?} requests {TPU_RESOURCE}: {:?}, which is not a whole number of chips",
                c.name, q.0
            )
        })?;
        match found {
            Some(prev) if prev != n => {
                return Err(format!(
                    "containers request different {TPU_RESOURCE} amounts ({prev} and {n}); one container should hold the host's chips"
                ));
            }
            _ => found = Some(n),
        }
    }
    Ok(found)
}

fn is_dns_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_lowercase()
        && bytes[bytes.len() - 1] != b'-'
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
}
