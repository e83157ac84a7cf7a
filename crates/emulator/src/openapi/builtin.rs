//! The schemas of the built-in kinds the emulator serves, from k8s-openapi's own
//! (generated from the Kubernetes OpenAPI document), under the names kube-apiserver
//! gives them (`io.k8s.api.core.v1.Pod`), with `$ref`s into `#/components/schemas/`.
//! Built once: the definitions do not change while the process runs.

use std::sync::OnceLock;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Event, Namespace, Node, Pod, PodTemplate, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::events::v1::Event as EventsV1Event;
use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Status};
use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::{JsonSchema, Schema};
use serde_json::{Map, Value};

/// The schema name of ObjectMeta, which custom resources refer to as well.
pub(crate) const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// Every built-in kind served: (group, version, kind) and its schema's name.
pub(crate) struct Builtins {
    pub(crate) kinds: Vec<((&'static str, &'static str, &'static str), String)>,
    pub(crate) definitions: Map<String, Value>,
}

fn add<T: JsonSchema>(
    g: &mut SchemaGenerator,
    gvk: (&'static str, &'static str, &'static str),
    out: &mut Vec<((&'static str, &'static str, &'static str), String)>,
) {
    let _: Schema = g.subschema_for::<T>();
    out.push((gvk, T::schema_name().into_owned()));
}

/// The built-in kinds and every definition their schemas refer to.
pub(crate) fn builtins() -> &'static Builtins {
    static BUILTINS: OnceLock<Builtins> = OnceLock::new();
    BUILTINS.get_or_init(|| {
        let mut g = SchemaSettings::openapi3().into_generator();
        let mut kinds = Vec::new();
        let k = &mut kinds;
        add::<Pod>(&mut g, ("", "v1", "Pod"), k);
        add::<Node>(&mut g, ("", "v1", "Node"), k);
        add::<Service>(&mut g, ("", "v1", "Service"), k);
        add::<Event>(&mut g, ("", "v1", "Event"), k);
        add::<Namespace>(&mut g, ("", "v1", "Namespace"), k);
        add::<ConfigMap>(&mut g, ("", "v1", "ConfigMap"), k);
        add::<PodTemplate>(&mut g, ("", "v1", "PodTemplate"), k);
        add::<Secret>(&mut g, ("", "v1", "Secret"), k);
        add::<ServiceAccount>(&mut g, ("", "v1", "ServiceAccount"), k);
        add::<EventsV1Event>(&mut g, ("events.k8s.io", "v1", "Event"), k);
        add::<Lease>(&mut g, ("coordination.k8s.io", "v1", "Lease"), k);
        add::<PriorityClass>(&mut g, ("scheduling.k8s.io", "v1", "PriorityClass"), k);
        add::<FlowSchema>(
            &mut g,
            ("flowcontrol.apiserver.k8s.io", "v1", "FlowSchema"),
            k,
        );
        let plc = (
            "flowcontrol.apiserver.k8s.io",
            "v1",
            "PriorityLevelConfiguration",
        );
        add::<PriorityLevelConfiguration>(&mut g, plc, k);
        let crd = ("apiextensions.k8s.io", "v1", "CustomResourceDefinition");
        add::<CustomResourceDefinition>(&mut g, crd, k);
        let _: Schema = g.subschema_for::<ObjectMeta>();
        let _: Schema = g.subschema_for::<Status>();
        Builtins {
            kinds,
            definitions: g.take_definitions(true),
        }
    })
}

impl Builtins {
    /// The schema name of a served built-in kind.
    pub(crate) fn schema_name(&self, group: &str, version: &str, kind: &str) -> Option<&str> {
        self.kinds
            .iter()
            .find(|((g, v, k), _)| *g == group && *v == version && *k == kind)
            .map(|(_, name)| name.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_served_kind_has_its_schema_and_refs_resolve() {
        let b = builtins();
        let pod = b.schema_name("", "v1", "Pod").unwrap();
        assert_eq!(pod, "io.k8s.api.core.v1.Pod");
        let spec = &b.definitions[pod]["properties"]["spec"];
        let r = spec
            .pointer("/allOf/0/$ref")
            .or(spec.get("$ref"))
            .and_then(Value::as_str)
            .unwrap();
        let target = r.strip_prefix("#/components/schemas/").unwrap();
        assert!(
            b.definitions[target]["properties"]
                .get("containers")
                .is_some()
        );
        assert!(b.definitions.contains_key(OBJECT_META));
    }
}
