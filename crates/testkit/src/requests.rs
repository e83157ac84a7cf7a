//! ProvisioningRequests in the test `World`: created and deleted as a plan says, their
//! conditions set as a cluster autoscaler would.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use slice_core::autoscaling::{LeanRequest, ProvisioningRequest, ProvisioningRequestStatus};
use slice_core::planner::Plan;

/// The requests as the operator would observe them.
pub fn lean(requests: &[ProvisioningRequest]) -> Vec<LeanRequest> {
    requests.iter().map(LeanRequest::of).collect()
}

/// A plan's deletes, then its creates (named ones already there are left alone, as an API
/// server answers 409).
pub fn apply(requests: &mut Vec<ProvisioningRequest>, plan: &Plan, now: Timestamp) {
    let deleted = |r: &ProvisioningRequest| {
        plan.requests
            .delete
            .iter()
            .any(|d| Some(d.name.as_str()) == r.metadata.name.as_deref() && d.uid == r.metadata.uid)
    };
    requests.retain(|r| !deleted(r));
    for create in &plan.requests.create {
        let mut request = create.request.clone();
        let name = request.metadata.name.clone().unwrap_or_default();
        if requests
            .iter()
            .any(|r| r.metadata.name.as_deref() == Some(&name))
        {
            continue;
        }
        request.metadata.uid = Some(format!("uid-{name}"));
        request.metadata.creation_timestamp = Some(Time(now));
        requests.push(request);
    }
}

/// Set condition `kind` of request `name` to True, with `reason`.
pub fn set_condition(
    requests: &mut [ProvisioningRequest],
    name: &str,
    kind: &str,
    reason: &str,
    now: Timestamp,
) {
    let request = requests
        .iter_mut()
        .find(|r| r.metadata.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no request {name}"));
    let status = request
        .status
        .get_or_insert_with(ProvisioningRequestStatus::default);
    status.conditions.retain(|c| c.type_ != kind);
    status.conditions.push(Condition {
        type_: kind.into(),
        status: "True".into(),
        reason: reason.into(),
        message: format!("{kind} in the test"),
        last_transition_time: Time(now),
        observed_generation: None,
    });
}
