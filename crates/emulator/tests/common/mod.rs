//! Helpers shared by the integration tests, which drive the emulator through a real
//! `kube::Client`: a custom resource with a CEL rule, object builders and error accessors.
// Each test binary uses a different subset of these.
#![allow(dead_code)]

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::Api;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use slice_emulator::{Emulator, EmulatorOptions};

#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug)]
#[kube(
    group = "test.example.com",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus",
    shortname = "wd"
)]
#[x_kube(validation = Rule::new("self.replicas <= 10").message("replicas must be at most 10"))]
pub struct WidgetSpec {
    pub replicas: i32,
    #[serde(default = "default_mode")]
    pub mode: String,
}

fn default_mode() -> String {
    "fast".into()
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
pub struct WidgetStatus {
    pub ready: bool,
}

pub async fn emu() -> Emulator {
    Emulator::start(EmulatorOptions::default()).await.unwrap()
}

pub fn pod(name: &str, labels: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    }))
    .unwrap()
}

pub fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap()
}

pub fn api_code(e: &kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

pub fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => panic!("expected an API error, got {other:?}"),
    }
}

pub async fn phase_of(pods: &Api<Pod>, name: &str) -> Option<String> {
    pods.get(name).await.unwrap().status?.phase
}
