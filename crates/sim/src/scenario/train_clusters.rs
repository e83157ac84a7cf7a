//! TrainClusters as dynamic objects: creating them from manifests, patching them, and
//! reading or writing a field at a dotted path (`spec.workerGroups.0.slices.max`).

use std::collections::BTreeMap;

use kube::Client;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};

use crate::error::SimError;
use slice_core::constants::API_GROUP;

/// The TrainCluster API resource (`slices.dev/v1alpha1`, plural `trainclusters`).
pub fn train_cluster_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(API_GROUP, "v1alpha1", "TrainCluster"),
        "trainclusters",
    )
}

pub(super) fn train_cluster_api(client: &Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &train_cluster_resource())
}

/// Creates a TrainCluster from a manifest, or merge-patches it when it exists.
pub async fn apply_train_cluster(
    client: &Client,
    manifest: &serde_json::Value,
    default_namespace: &str,
) -> Result<(), SimError> {
    let name = manifest
        .pointer("/metadata/name")
        .and_then(|v| v.as_str())
        .ok_or_else(|| SimError::Invalid("manifest without metadata.name".into()))?
        .to_string();
    let ns = manifest
        .pointer("/metadata/namespace")
        .and_then(|v| v.as_str())
        .unwrap_or(default_namespace)
        .to_string();
    let api = train_cluster_api(client, &ns);
    let obj: DynamicObject = serde_json::from_value(manifest.clone())?;
    match api.create(&PostParams::default(), &obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            api.patch(&name, &PatchParams::default(), &Patch::Merge(manifest))
                .await?;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Merge-patches a TrainCluster with `patch`, then assigns the `set` paths by
/// read-modify-replace (retried on conflict, up to 5 times, as the operator writes too).
pub(super) async fn patch_train_cluster(
    client: &Client,
    name: &str,
    namespace: &str,
    patch: Option<&serde_json::Value>,
    set: &BTreeMap<String, serde_json::Value>,
) -> Result<(), SimError> {
    let api = train_cluster_api(client, namespace);
    if let Some(p) = patch {
        api.patch(name, &PatchParams::default(), &Patch::Merge(p))
            .await?;
    }
    if set.is_empty() {
        return Ok(());
    }
    let mut attempt = 0;
    loop {
        let obj = api.get(name).await?;
        let mut v = serde_json::to_value(&obj)?;
        for (path, value) in set {
            set_path(&mut v, path, value.clone())?;
        }
        let obj: DynamicObject = serde_json::from_value(v)?;
        match api.replace(name, &PostParams::default(), &obj).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 && attempt < 5 => attempt += 1,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Sets `value` at dotted `path` (numeric segments index arrays) in `obj`.
pub fn set_path(
    obj: &mut serde_json::Value,
    path: &str,
    value: serde_json::Value,
) -> Result<(), SimError> {
    let mut cur = obj;
    let segs: Vec<&str> = path.split('.').collect();
    for (i, seg) in segs.iter().enumerate() {
        let last = i + 1 == segs.len();
        if let Ok(idx) = seg.parse::<usize>()
            && cur.is_array()
        {
            let arr = cur.as_array_mut().unwrap_or_else(|| unreachable!());
            let slot = arr
                .get_mut(idx)
                .ok_or_else(|| SimError::Invalid(format!("{path}: index {idx} out of range")))?;
            if last {
                *slot = value;
                return Ok(());
            }
            cur = slot;
            continue;
        }
        if cur.is_null() {
            *cur = serde_json::Value::Object(Default::default());
        }
        let map = cur
            .as_object_mut()
            .ok_or_else(|| SimError::Invalid(format!("{path}: {seg} is not in an object")))?;
        if last {
            map.insert(seg.to_string(), value);
            return Ok(());
        }
        cur = map
            .entry(seg.to_string())
            .or_insert(serde_json::Value::Null);
    }
    Err(SimError::Invalid(format!("empty path {path:?}")))
}

/// Reads the value at dotted `path` of `obj`.
pub fn get_path<'a>(obj: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
    path.split('.').try_fold(obj, |cur, seg| match cur {
        serde_json::Value::Array(a) => a.get(seg.parse::<usize>().ok()?),
        serde_json::Value::Object(m) => m.get(seg),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        let mut v = serde_json::json!({"spec": {"workerGroups": [{"slices": {"max": 3}}]}});
        set_path(
            &mut v,
            "spec.workerGroups.0.slices.max",
            serde_json::json!(2),
        )
        .unwrap();
        assert_eq!(
            get_path(&v, "spec.workerGroups.0.slices.max"),
            Some(&serde_json::json!(2))
        );
        set_path(&mut v, "spec.suspend", serde_json::json!(true)).unwrap();
        assert_eq!(v["spec"]["suspend"], true);
        set_path(&mut v, "status.phase", serde_json::json!("Running")).unwrap();
        assert_eq!(v["status"]["phase"], "Running");
        assert!(set_path(&mut v, "spec.workerGroups.5.x", serde_json::json!(1)).is_err());
    }
}
