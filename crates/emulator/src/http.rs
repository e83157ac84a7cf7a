//! HTTP routing: discovery (the `discovery` module), OpenAPI v3 (`openapi`) and the
//! resource REST API. A get or list answers with a `Table` when Accept asks for one
//! (`table`); writes honour `fieldValidation` (`field_validation`).

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Value, json};

use super::apf::classify::RequestDigest;
use super::discovery::{api_versions, group, group_list, resource_list, version};
use super::errors::ApiError;
use super::faults::Verb;
use super::field_validation::{Directive, with_warnings};
use super::fields::supported;
use super::openapi;
use super::patch::{field_manager, patch_object};
use super::selectors::{FieldSelector, LabelSelector};
use super::ssa::Ownership;
use super::state::AppState;
use super::store::{DeleteOpts, Obj, ResourceInfo, WriteMode};
use super::table::TableRequest;
use super::watch;

pub(crate) fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .fallback(handle)
        .layer(DefaultBodyLimit::disable())
        .with_state(state)
}

fn json_response(code: u16, v: &impl Serialize) -> Response {
    let body = serde_json::to_vec(v).unwrap_or_default();
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::OK))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .unwrap_or_default()
}

fn error_response(e: &ApiError) -> Response {
    let mut r = json_response(e.code, &e.to_status());
    if e.code == 429 {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    r
}

async fn handle(State(st): State<Arc<AppState>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let path = parts.uri.path().to_string();
    let query = parts.uri.query().unwrap_or("").to_string();
    let q: HashMap<String, String> =
        axum::extract::Query::<HashMap<String, String>>::try_from_uri(&parts.uri)
            .map(|q| q.0)
            .unwrap_or_default();
    let ct = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let resp = match dispatch(&st, &parts.method, &path, &q, &parts.headers, &bytes).await {
        Ok(r) => r,
        Err(e) => error_response(&e),
    };
    st.log.record(
        parts.method.as_str(),
        &path,
        &query,
        ct,
        &bytes,
        resp.status().as_u16(),
    );
    resp
}

fn not_found() -> ApiError {
    ApiError::new(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
}

async fn dispatch(
    st: &Arc<AppState>,
    method: &Method,
    path: &str,
    q: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    st.users.identify(headers)?;
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let get = method == Method::GET;
    match segs.as_slice() {
        ["version"] if get => Ok(json_response(200, &version())),
        ["healthz" | "readyz" | "livez"] if get => Ok("ok".into_response()),
        ["api"] if get => Ok(json_response(200, &api_versions(st))),
        ["apis"] if get => Ok(json_response(200, &group_list(st))),
        ["api", "v1"] if get => Ok(json_response(
            200,
            &resource_list(st, "", "v1").ok_or_else(not_found)?,
        )),
        ["apis", g] if get => Ok(json_response(200, &group(st, g).ok_or_else(not_found)?)),
        ["openapi", "v3"] if get => Ok(json_response(200, &openapi::root(&st.store.lock()))),
        ["openapi", "v3", doc @ ..] if get => {
            let doc = openapi::document(&st.store.lock(), &doc.join("/")).ok_or_else(not_found)?;
            Ok(json_response(200, &doc))
        }
        ["apis", g, v] if get => Ok(json_response(
            200,
            &resource_list(st, g, v).ok_or_else(not_found)?,
        )),
        ["api", "v1", rest @ ..] => resource(st, method, "", "v1", rest, q, headers, body).await,
        ["apis", g, v, rest @ ..] => resource(st, method, g, v, rest, q, headers, body).await,
        _ => Err(not_found()),
    }
}

#[derive(Serialize)]
struct ListOut<'a> {
    kind: String,
    #[serde(rename = "apiVersion")]
    api_version: String,
    metadata: Value,
    items: Vec<&'a Value>,
}

fn list_meta(rv: u64, cont: Option<String>, remaining: Option<u64>) -> Value {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = cont {
        metadata["continue"] = json!(c);
    }
    if let Some(r) = remaining {
        metadata["remainingItemCount"] = json!(r);
    }
    metadata
}

/// The Table a client asked for (server-side printing, the `table` module).
fn table_response(
    t: &TableRequest,
    info: &ResourceInfo,
    items: &[Obj],
    metadata: Value,
) -> Response {
    let mut r = json_response(200, &t.table(info, items, metadata));
    if let Ok(v) = HeaderValue::from_str(&t.content_type()) {
        r.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    r
}

fn list_response(
    info: &ResourceInfo,
    items: &[Obj],
    rv: u64,
    cont: Option<String>,
    remaining: Option<u64>,
) -> Response {
    let metadata = list_meta(rv, cont, remaining);
    json_response(
        200,
        &ListOut {
            kind: format!("{}List", info.kind),
            api_version: info.api_version(),
            metadata,
            items: items.iter().map(|o| &**o).collect(),
        },
    )
}

fn parse_body(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .or_else(|_| serde_yaml::from_slice(body))
        .map_err(|e| ApiError::bad_request(format!("error decoding request body: {e}")))
}

fn selectors(
    info: &ResourceInfo,
    q: &HashMap<String, String>,
) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let l = LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))
        .map_err(ApiError::bad_request)?;
    let f = FieldSelector::parse(q.get("fieldSelector").map(String::as_str).unwrap_or(""))
        .map_err(ApiError::bad_request)?;
    Ok((l, supported(info, f)?))
}

fn delete_opts(q: &HashMap<String, String>, body: &[u8]) -> Result<DeleteOpts, ApiError> {
    let mut o = DeleteOpts::default();
    if !body.is_empty() {
        let b = parse_body(body)?;
        o.uid = b
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(str::to_string);
        o.rv = b
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string);
        o.grace = b.get("gracePeriodSeconds").and_then(Value::as_i64);
        o.propagation = b
            .get("propagationPolicy")
            .and_then(Value::as_str)
            .map(str::to_string);
        if b.get("orphanDependents") == Some(&json!(true)) {
            o.propagation = Some("Orphan".into());
        }
        o.dry_run = b
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
    }
    if let Some(g) = q.get("gracePeriodSeconds").and_then(|g| g.parse().ok()) {
        o.grace = Some(g);
    }
    if let Some(p) = q.get("propagationPolicy") {
        o.propagation = Some(p.clone());
    }
    if q.contains_key("dryRun") {
        o.dry_run = true;
    }
    Ok(o)
}

#[allow(clippy::too_many_arguments)]
async fn resource(
    st: &Arc<AppState>,
    method: &Method,
    group: &str,
    version: &str,
    rest: &[&str],
    q: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    // Resolve the path into (resource, namespace, name, subresource).
    let (info, ns, name, sub) = {
        let store = st.store.lock();
        let namespaced_form = rest.len() >= 3
            && rest[0] == "namespaces"
            && store
                .find(group, version, rest[2])
                .is_some_and(|i| i.namespaced);
        if namespaced_form {
            let info = store.find(group, version, rest[2]).ok_or_else(not_found)?;
            if rest.len() > 5 {
                return Err(not_found());
            }
            (
                info,
                Some(rest[1].to_string()),
                rest.get(3).copied(),
                rest.get(4).copied(),
            )
        } else {
            if rest.is_empty() || rest.len() > 3 {
                return Err(not_found());
            }
            let info = store.find(group, version, rest[0]).ok_or_else(not_found)?;
            if info.namespaced && rest.len() > 1 {
                return Err(not_found());
            }
            (info, None, rest.get(1).copied(), rest.get(2).copied())
        }
    };
    let is_pods = info.group.is_empty() && info.plural == "pods";
    match sub {
        None => {}
        Some("status") if info.status_subresource => {}
        Some("binding") if is_pods && method == Method::POST => {}
        Some(_) => return Err(not_found()),
    }
    let watch = q.get("watch").is_some_and(|w| w == "true" || w == "1");
    let verb = match (method.clone(), name) {
        (Method::GET, Some(_)) => Verb::Get,
        (Method::GET, None) if watch => Verb::Watch,
        (Method::GET, None) => Verb::List,
        (Method::POST, _) => Verb::Create,
        (Method::PUT, Some(_)) => Verb::Update,
        (Method::PATCH, Some(_)) => Verb::Patch,
        (Method::DELETE, Some(_)) => Verb::Delete,
        (Method::DELETE, None) => Verb::DeleteCollection,
        _ => return Err(ApiError::method_not_allowed()),
    };
    let user = st.users.identify(headers)?;
    let request = RequestDigest::new(&user, verb.as_str(), &info, ns.as_deref(), sub);
    let level = st.priority_levels.classify(&st.store.lock(), &request);
    let _seat = st
        .priority_levels
        .seat(level.as_deref(), verb == Verb::Watch)
        .await;
    let latency = st.faults.latency(verb, &info.plural, sub.is_some());
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    st.faults.wait_while_hung(verb, &info.plural).await;
    if let Some(code) = st.faults.check(verb, &info.plural, sub.is_some()) {
        return Err(match (code, name) {
            (409, Some(n)) => ApiError::stale(&info.plural, &info.group, n),
            _ => ApiError::for_code(code, format!("injected fault for {verb:?} {}", info.plural)),
        });
    }
    let ns = ns.as_deref();
    let dry_run = q.contains_key("dryRun");
    let manager = field_manager(q, headers);
    let mode = if sub == Some("status") {
        WriteMode::Status
    } else {
        WriteMode::Main
    };
    match verb {
        Verb::Get => {
            let o = st.store.lock().get(&info, ns, name.unwrap_or_default())?;
            if let Some(t) = TableRequest::from(headers, q)? {
                let rv = o.pointer("/metadata/resourceVersion").cloned();
                let metadata = json!({"resourceVersion": rv});
                return Ok(table_response(&t, &info, &[o], metadata));
            }
            Ok(json_response(200, &*o))
        }
        Verb::List => {
            let (l, f) = selectors(&info, q)?;
            let limit = q.get("limit").and_then(|l| l.parse::<usize>().ok());
            let exact = if q.get("resourceVersionMatch").is_some_and(|m| m == "Exact") {
                q.get("resourceVersion").and_then(|r| r.parse::<u64>().ok())
            } else {
                None
            };
            let r = st.store.lock().list(
                &info,
                ns,
                &l,
                &f,
                limit,
                q.get("continue").map(String::as_str),
                exact,
            )?;
            let response = match TableRequest::from(headers, q)? {
                Some(t) => {
                    table_response(&t, &info, &r.items, list_meta(r.rv, r.cont, r.remaining))
                }
                None => list_response(&info, &r.items, r.rv, r.cont, r.remaining),
            };
            if let Some(latency) = st.faults.watch_latency() {
                tokio::time::sleep(latency).await;
            }
            Ok(response)
        }
        Verb::Watch => watch::serve(st, &info, ns.map(str::to_string), q),
        Verb::Create => {
            let mut v = parse_body(body)?;
            if sub == Some("binding") {
                st.store.lock().bind_pod(
                    &info,
                    ns.unwrap_or("default"),
                    name.unwrap_or_default(),
                    &v,
                )?;
                return Ok(json_response(
                    201,
                    &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
                ));
            }
            if name.is_some() {
                return Err(ApiError::method_not_allowed());
            }
            let warnings = Directive::from_query(q)?.check(&info, &mut v)?;
            let owner = Ownership::Update(&manager);
            let o = st.store.lock().create(&info, ns, v, dry_run, owner)?;
            Ok(with_warnings(json_response(201, &*o), &warnings))
        }
        Verb::Update => {
            let mut v = parse_body(body)?;
            let warnings = Directive::from_query(q)?.check(&info, &mut v)?;
            let name = name.unwrap_or_default();
            let owner = Ownership::Update(&manager);
            let o = st
                .store
                .lock()
                .update(&info, ns, name, v, mode, dry_run, owner)?;
            Ok(with_warnings(json_response(200, &*o), &warnings))
        }
        Verb::Patch => {
            let name = name.unwrap_or_default();
            let (code, o, warnings) =
                patch_object(&st.store, &info, ns, name, mode, q, headers, body)?;
            Ok(with_warnings(json_response(code, &*o), &warnings))
        }
        Verb::Delete => {
            let opts = delete_opts(q, body)?;
            let o = st
                .store
                .lock()
                .delete(&info, ns, name.unwrap_or_default(), &opts)?;
            Ok(json_response(200, &*o))
        }
        Verb::DeleteCollection => {
            let (l, f) = selectors(&info, q)?;
            let opts = delete_opts(q, body)?;
            let mut store = st.store.lock();
            let r = store.list(&info, ns, &l, &f, None, None, None)?;
            let mut out = Vec::new();
            for o in &r.items {
                let n = o
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let ons = o.pointer("/metadata/namespace").and_then(Value::as_str);
                if let Ok(d) = store.delete(&info, ons, n, &opts) {
                    out.push(d);
                }
            }
            let rv = store.current_rv();
            drop(store);
            Ok(list_response(&info, &out, rv, None, None))
        }
    }
}
