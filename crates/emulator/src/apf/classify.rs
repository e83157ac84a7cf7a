//! Which priority level a request belongs to: the FlowSchemas in matching-precedence order
//! (ties by name), the first whose rules match the request and whose priority level exists,
//! as kube-apiserver's APF filter decides. The server's mandatory and suggested schemas
//! that matter to a workload are built in (a stored schema of the same name replaces one).

use serde_json::{Value, json};

use super::users::User;
use crate::store::ResourceInfo;

/// What APF looks at in a request.
#[derive(Debug, Clone)]
pub struct RequestDigest<'a> {
    pub user: &'a User,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
    pub verb: &'static str,
    pub group: &'a str,
    /// `pods`, or `pods/status` for a subresource.
    pub resource: String,
    /// `None` for a cluster-scoped resource or a request across all namespaces.
    pub namespace: Option<&'a str>,
}

impl<'a> RequestDigest<'a> {
    pub fn new(
        user: &'a User,
        verb: &'static str,
        info: &'a ResourceInfo,
        namespace: Option<&'a str>,
        subresource: Option<&str>,
    ) -> Self {
        let resource = match subresource {
            Some(sub) => format!("{}/{sub}", info.plural),
            None => info.plural.clone(),
        };
        RequestDigest {
            user,
            verb,
            group: &info.group,
            resource,
            namespace,
        }
    }
}

/// The priority levels of the server's mandatory and suggested configuration.
pub const BUILTIN_LEVELS: [&str; 8] = [
    "exempt",
    "system",
    "node-high",
    "leader-election",
    "workload-high",
    "workload-low",
    "global-default",
    "catch-all",
];

/// The built-in FlowSchemas (a subset of kube-apiserver's: those a workload's requests meet).
pub fn builtin_schemas() -> Vec<Value> {
    let all = json!({
        "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                           "clusterScope": true, "namespaces": ["*"]}],
        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]
    });
    let groups = |names: &[&str]| -> Value {
        names
            .iter()
            .map(|n| json!({"kind": "Group", "group": {"name": n}}))
            .collect()
    };
    let schema = |name: &str, precedence: u32, level: &str, subjects: Value, rules: &Value| {
        let mut rule = rules.clone();
        rule["subjects"] = subjects;
        json!({"metadata": {"name": name}, "spec": {
            "matchingPrecedence": precedence,
            "priorityLevelConfiguration": {"name": level},
            "rules": [rule]}})
    };
    let leases = json!({"resourceRules": [{"verbs": ["get", "create", "update"],
        "apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
        "namespaces": ["*"], "clusterScope": false}]});
    let kube_system = json!([{"kind": "ServiceAccount",
                              "serviceAccount": {"namespace": "kube-system", "name": "*"}}]);
    let everyone = groups(&["system:unauthenticated", "system:authenticated"]);
    vec![
        schema("exempt", 1, "exempt", groups(&["system:masters"]), &all),
        schema(
            "system-leader-election",
            100,
            "leader-election",
            kube_system.clone(),
            &leases,
        ),
        schema(
            "kube-system-service-accounts",
            900,
            "workload-high",
            kube_system,
            &all,
        ),
        schema(
            "service-accounts",
            9000,
            "workload-low",
            groups(&["system:serviceaccounts"]),
            &all,
        ),
        schema(
            "global-default",
            9900,
            "global-default",
            everyone.clone(),
            &all,
        ),
        schema("catch-all", 10000, "catch-all", everyone, &all),
    ]
}

/// The priority level of `request`: `schemas` are the stored FlowSchemas (the built-in ones
/// are added), `level_exists` says whether a priority level is configured.
pub fn priority_level(
    stored: &[Value],
    level_exists: impl Fn(&str) -> bool,
    request: &RequestDigest<'_>,
) -> String {
    let name = |s: &Value| {
        s["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let mut schemas: Vec<Value> = builtin_schemas()
        .into_iter()
        .filter(|b| !stored.iter().any(|s| name(s) == name(b)))
        .chain(stored.iter().cloned())
        .collect();
    schemas.sort_by_key(|s| (precedence(s), name(s)));
    schemas
        .iter()
        .filter(|s| level_exists(level_of(s)))
        .find(|s| matches(s, request))
        .map_or_else(|| "catch-all".into(), |s| level_of(s).to_string())
}

fn precedence(schema: &Value) -> u64 {
    // The server defaults matchingPrecedence to 1000.
    schema["spec"]["matchingPrecedence"]
        .as_u64()
        .unwrap_or(1000)
}

fn level_of(schema: &Value) -> &str {
    schema["spec"]["priorityLevelConfiguration"]["name"]
        .as_str()
        .unwrap_or_default()
}

fn items(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or_default()
}

fn has(list: &Value, wanted: &str) -> bool {
    items(list)
        .iter()
        .filter_map(Value::as_str)
        .any(|v| v == "*" || v == wanted)
}

fn matches(schema: &Value, request: &RequestDigest<'_>) -> bool {
    items(&schema["spec"]["rules"]).iter().any(|rule| {
        items(&rule["subjects"])
            .iter()
            .any(|s| subject_matches(s, request.user))
            && items(&rule["resourceRules"])
                .iter()
                .any(|r| resource_rule_matches(r, request))
    })
}

fn subject_matches(subject: &Value, user: &User) -> bool {
    let named = |wanted: &Value, actual: &str| wanted == "*" || wanted == actual;
    match subject["kind"].as_str() {
        Some("User") => named(&subject["user"]["name"], &user.name),
        Some("Group") => user
            .groups
            .iter()
            .any(|g| named(&subject["group"]["name"], g)),
        Some("ServiceAccount") => user.as_service_account().is_some_and(|(ns, name)| {
            subject["serviceAccount"]["namespace"] == ns
                && named(&subject["serviceAccount"]["name"], name)
        }),
        _ => false,
    }
}

fn resource_rule_matches(rule: &Value, request: &RequestDigest<'_>) -> bool {
    let scoped = match request.namespace {
        Some(ns) => has(&rule["namespaces"], ns),
        None => rule["clusterScope"].as_bool().unwrap_or(false),
    };
    scoped
        && has(&rule["verbs"], request.verb)
        && has(&rule["apiGroups"], request.group)
        && has(&rule["resources"], &request.resource)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest<'a>(
        user: &'a User,
        verb: &'static str,
        resource: &str,
        ns: Option<&'a str>,
    ) -> RequestDigest<'a> {
        let group = if resource == "leases" {
            "coordination.k8s.io"
        } else {
            ""
        };
        RequestDigest {
            user,
            verb,
            group,
            resource: resource.into(),
            namespace: ns,
        }
    }

    fn exists(level: &str) -> bool {
        BUILTIN_LEVELS.contains(&level)
    }

    /// The chart's two schemas, as `deploy/slice-operator.yaml` has them.
    fn chart_schemas(level: &str) -> Vec<Value> {
        let sa = json!([{"kind": "ServiceAccount",
                         "serviceAccount": {"name": "slice-operator", "namespace": "slice-operator"}}]);
        vec![
            json!({"metadata": {"name": "op-lease"}, "spec": {
                "priorityLevelConfiguration": {"name": "leader-election"}, "matchingPrecedence": 500,
                "rules": [{"subjects": sa, "resourceRules": [{"verbs": ["get", "create", "update"],
                    "apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                    "namespaces": ["slice-operator"]}]}]}}),
            json!({"metadata": {"name": "op-requests"}, "spec": {
                "priorityLevelConfiguration": {"name": level}, "matchingPrecedence": 501,
                "rules": [{"subjects": sa, "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"],
                    "resources": ["*"], "clusterScope": true, "namespaces": ["*"]}]}]}}),
        ]
    }

    #[test]
    fn without_schemas_of_its_own_a_service_account_shares_workload_low_with_every_tenant() {
        let operator = User::service_account("slice-operator", "slice-operator");
        let tenant = User::service_account("team-a", "batch");
        for user in [&operator, &tenant] {
            let lease = digest(user, "update", "leases", Some("slice-operator"));
            assert_eq!(priority_level(&[], exists, &lease), "workload-low");
        }
        let admin = User::admin();
        assert_eq!(
            priority_level(&[], exists, &digest(&admin, "list", "pods", None)),
            "exempt"
        );
        let kube_system = User::service_account("kube-system", "node-controller");
        assert_eq!(
            priority_level(
                &[],
                exists,
                &digest(&kube_system, "update", "leases", Some("kube-system"))
            ),
            "leader-election"
        );
    }

    #[test]
    fn the_charts_schemas_put_the_lease_in_leader_election_and_the_rest_in_workload_high() {
        let schemas = chart_schemas("workload-high");
        let operator = User::service_account("slice-operator", "slice-operator");
        let at = |verb, resource, ns| {
            priority_level(&schemas, exists, &digest(&operator, verb, resource, ns))
        };
        assert_eq!(
            at("update", "leases", Some("slice-operator")),
            "leader-election"
        );
        assert_eq!(
            at("get", "leases", Some("slice-operator")),
            "leader-election"
        );
        // A lease elsewhere, a LIST across namespaces, a status patch: the other schema.
        assert_eq!(at("update", "leases", Some("other")), "workload-high");
        assert_eq!(at("list", "pods", None), "workload-high");
        assert_eq!(
            at("patch", "trainclusters/status", Some("team-a")),
            "workload-high"
        );
        let tenant = User::service_account("team-a", "batch");
        assert_eq!(
            priority_level(&schemas, exists, &digest(&tenant, "list", "pods", None)),
            "workload-low"
        );
    }

    #[test]
    fn a_schema_naming_a_missing_priority_level_is_dangling_and_ignored() {
        let schemas = chart_schemas("slice-operator-level");
        let operator = User::service_account("slice-operator", "slice-operator");
        let list = digest(&operator, "list", "pods", None);
        assert_eq!(priority_level(&schemas, exists, &list), "workload-low");
        let with_level = |l: &str| exists(l) || l == "slice-operator-level";
        assert_eq!(
            priority_level(&schemas, with_level, &list),
            "slice-operator-level"
        );
    }

    #[test]
    fn ties_in_precedence_go_to_the_smaller_name_and_a_stored_schema_replaces_a_builtin() {
        let tenant = User::service_account("team-a", "batch");
        let list = digest(&tenant, "list", "pods", None);
        let mut stored = builtin_schemas();
        let service_accounts = stored
            .iter_mut()
            .find(|s| s["metadata"]["name"] == "service-accounts")
            .unwrap();
        service_accounts["spec"]["priorityLevelConfiguration"]["name"] = json!("global-default");
        let stored: Vec<Value> = stored
            .into_iter()
            .filter(|s| s["metadata"]["name"] == "service-accounts")
            .collect();
        assert_eq!(priority_level(&stored, exists, &list), "global-default");
        let mut a = chart_schemas("workload-high").remove(1);
        a["metadata"]["name"] = json!("b-schema");
        let mut b = a.clone();
        b["metadata"]["name"] = json!("a-schema");
        b["spec"]["priorityLevelConfiguration"]["name"] = json!("system");
        let operator = User::service_account("slice-operator", "slice-operator");
        assert_eq!(
            priority_level(&[a, b], exists, &digest(&operator, "list", "pods", None)),
            "system"
        );
    }
}
