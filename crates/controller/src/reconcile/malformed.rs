//! A TrainCluster that does not even deserialize is reported (status and event, through the
//! same writer and event budget as every other cluster) and otherwise left alone, so one bad
//! object never stops the operator.

use kube::Resource;
use kube::core::error_boundary::InvalidObject;
use kube::runtime::controller::Action;
use slice_core::api::{TrainCluster, TrainClusterStatus};
use slice_core::planner::malformed;
use tracing::warn;

use crate::api_call::bounded;
use crate::context::Context;
use crate::error::Result;
use crate::events;
use crate::executor::status::{dynamic_api, write_phase_and_conditions, write_status};

/// Report once per generation (status writes do not move the generation, so our own write
/// never triggers another report), and not at all when its status already says so (an
/// operator restart does not report it again).
pub async fn report(invalid: &InvalidObject, ctx: &Context) -> Result<Action> {
    let meta = &invalid.metadata;
    let (Some(namespace), Some(name)) = (meta.namespace.clone(), meta.name.clone()) else {
        return Ok(Action::await_change());
    };
    let uid = meta.uid.clone().unwrap_or_default();
    ctx.ledger.reconciling(&uid, &namespace, &name);
    let generation = meta.generation;
    if ctx.ledger.malformed_reported(&uid, generation) {
        return Ok(Action::await_change());
    }
    let api = dynamic_api(ctx.client.clone(), &namespace);
    let Some(current) = bounded(api.get_opt(&name)).await? else {
        return Ok(Action::await_change());
    };
    // The status may still parse where the spec does not: the planner's memory is kept.
    let stored = &current.data["status"];
    let previous = serde_json::from_value::<TrainClusterStatus>(stored.clone()).ok();
    let error = invalid.error.to_string();
    let now = jiff::Timestamp::now();
    let readable = previous.is_some() || stored.is_null();
    if let Some((status, event)) = malformed::report(previous, &error, generation, now) {
        warn!(%namespace, %name, %error, "malformed TrainCluster");
        match readable {
            true => {
                write_status(&api, &name, &status, None).await?;
            }
            // A status we cannot read is not ours to apply away: only the phase and the
            // conditions are set, the rest of it stays for whoever can read it.
            false => write_phase_and_conditions(&api, &name, &status).await?,
        }
        ctx.metrics.status_writes.inc();
        let reference = reference(invalid);
        events::publish(&ctx.events, &ctx.ledger, &reference, &[event]);
    }
    ctx.ledger.malformed_reported_now(&uid, generation);
    Ok(Action::await_change())
}

fn reference(invalid: &InvalidObject) -> k8s_openapi::api::core::v1::ObjectReference {
    let meta = &invalid.metadata;
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(TrainCluster::api_version(&()).into_owned()),
        kind: Some(TrainCluster::kind(&()).into_owned()),
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        ..Default::default()
    }
}
