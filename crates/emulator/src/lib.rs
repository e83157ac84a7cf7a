#![forbid(unsafe_code)]
//! An in-process Kubernetes API server emulator for tests and demos.
//!
//! Served over plain HTTP on `127.0.0.1:<random port>`; usable by a real [`kube::Client`]
//! (see [`Emulator::client`]), by kube-runtime controllers/watchers, and by `kubectl`
//! (see [`Emulator::kubeconfig_yaml`]).
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use slice_emulator::{Emulator, EmulatorOptions};
//! let emu = Emulator::start(EmulatorOptions::default()).await?;
//! let client = emu.client();
//! let mark = emu.requests().mark();
//! // ... drive the operator ...
//! assert_eq!(emu.requests().writes_since(mark), 0);
//! emu.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # Served resources
//! core/v1 pods (+`status`, +`binding`), nodes (+`status`), services (+`status`), events,
//! namespaces (+`status`; `default`, `kube-system`, `kube-public`, `kube-node-lease` exist),
//! configmaps, podtemplates, secrets, serviceaccounts; events.k8s.io/v1 events; coordination.k8s.io/v1
//! leases; apiextensions.k8s.io/v1 customresourcedefinitions (+`status`). Creating a CRD
//! (over HTTP or with [`Emulator::install_crd`]) serves its resources immediately and sets
//! its `Established`/`NamesAccepted` conditions.
//!
//! # Differences from the real API server (deliberate approximations)
//! * Authentication by bearer tokens the test hands out ([`Emulator::service_account_config`]);
//!   a request without one is the admin (`system:masters`). No authorization, admission
//!   webhooks, ValidatingAdmissionPolicies or quota. API Priority and Fairness classifies
//!   requests by FlowSchemas as the server does, and queues them only in the priority levels
//!   a test limits ([`PriorityLevels`]; the `apf` module lists its approximations). No
//!   protobuf, no aggregated discovery (plain JSON is returned; clients fall back to it), no
//!   `/openapi/v2`. Server-side printing (`Table`, the `table` module: the server's
//!   columns for pods, nodes, events and custom resources, NAME and CREATED AT for every
//!   other kind), OpenAPI v3 (the `openapi` module), `fieldValidation` (the
//!   `field_validation` module) and field selectors per resource (the `fields` module)
//!   follow the server, so kubectl works without flags.
//! * Strategic merge patch is applied as a JSON merge patch (lists replaced wholesale,
//!   `$patch`-style directives stripped).
//! * Server-side apply and `metadata.managedFields` follow kube-apiserver
//!   (structured-merge-diff; the `ssa` module): `Update` entries for creates, updates and
//!   other patches under `fieldManager` or the User-Agent prefix; apply with ownership,
//!   409 `FieldManagerConflict`s in the server's words, `force`, removal of fields a
//!   manager stops applying unless another owns them, no-op applies without a write;
//!   `/status` entries carry `subresource: status`. Still approximated:
//!   - Built-in kinds have no OpenAPI schema here: only the associative lists an operator
//!     touches are merged by key (`ownerReferences` by uid, `finalizers` as a set, Service
//!     `ports` by port+protocol, pod `containers`/`initContainers`/`volumes` by name, their
//!     `env` by name, `ports` by containerPort+protocol, `volumeMounts` by mountPath, pod
//!     and node `status.conditions` by type); every other built-in list is atomic and only
//!     Service `spec.selector` is an atomic map. Custom resources honour the CRD's
//!     `x-kubernetes-list-type`/`-list-map-keys`/`-map-type`.
//!   - Ownership of a map or list itself (`.` in `fieldsV1`) after a create follows the
//!     types loosely: built-in `metadata`/`spec`/`status` and pod `containers` exist in an
//!     empty object, everything else a create adds is owned as a whole too.
//!   - Merged list items keep the live order; new items are appended (the server may
//!     interleave them by the configuration's order).
//!   - An applied field the schema does not declare is not rejected (the real server
//!     answers 500 "field not declared in schema"); a missing or wrong `kind` is a 400
//!     worded like the server's 500 "failed to create typed patch object".
//!   - Clients cannot rewrite or clear `managedFields` (a PUT keeps the stored entries);
//!     writes of the emulator's own (`Emulator::create_object`, `install_crd`, garbage
//!     collection, bindings, graceful deletion) record no entry.
//! * Built-in resources are not validated (beyond the object name and pod spec
//!   immutability); defaulting covers the common pod/service fields only (see the
//!   `defaults` module). Objects in unknown namespaces are accepted. Pods get
//!   `status: {phase: Pending, qosClass}` on create, services and namespaces an
//!   empty/Active status; custom resources with a status subresource have `.status` dropped
//!   on create (as the real server does).
//! * Custom resources: pruning, defaulting, a subset of structural validation and CEL rules
//!   (see the `validation` module). No conversion between CRD versions: every served
//!   version shares one storage and objects keep the apiVersion they were written with.
//! * events.k8s.io/v1 and core/v1 events share one storage (`event_versions`); writes
//!   through one version of an event stored in the other convert it whole.
//! * Pagination: continue tokens do not pin a snapshot; later pages reflect the current
//!   state (objects are returned in `(namespace, name)` order, so no item is repeated).
//!   Lists are always served from the latest state (any `resourceVersion` is "not older
//!   than"); `resourceVersionMatch=Exact` with an expired version gets 410.
//! * Watch history is a bounded global ring (`EmulatorOptions::history_limit`); a watch
//!   from a resourceVersion older than the ring (or expired via
//!   [`Faults::expire_resource_versions`]) gets a 410 `Expired` ERROR event. A watcher too
//!   slow for the broadcast buffer has its stream closed. Bookmarks are sent every
//!   `bookmark_interval` (real: ~1 minute).
//! * Garbage collection runs synchronously inside the delete that removes the owner
//!   (background policy semantics; `Foreground` is treated as `Background`; `Orphan`
//!   removes the owner reference from dependents). Dependents whose owners never existed
//!   are not collected. Namespace deletion removes the contents immediately.
//! * Graceful deletion exists only for pods (bound to a node and not terminal, as in the
//!   real server; [`EmulatorOptions::graceful_pod_deletion`], on by default); nothing ever
//!   completes it automatically, not even when the grace period has passed (a kubelet-like
//!   client must delete again with `gracePeriodSeconds=0`).
//! * No-op writes return the current object without a new resourceVersion (like the real
//!   server), but `generation` is bumped on any change outside metadata/status.

mod apf;
mod defaults;
mod discovery;
mod errors;
mod event_versions;
mod faults;
mod field_validation;
mod fields;
mod http;
mod openapi;
mod patch;
mod requests;
mod selectors;
mod ssa;
mod state;
mod store;
mod table;
mod validation;
mod watch;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

pub use apf::PriorityLevels;
pub use apf::users::User;
pub use errors::ApiError;
pub use faults::{Faults, Verb};
pub use patch::PatchKind;
pub use requests::{RecordedRequest, RequestLog};
pub use selectors::{FieldSelector, LabelSelector};

use ssa::Ownership;
use store::{SharedStore, Store, WriteMode};

/// Options for [`Emulator::start`].
#[derive(Debug, Clone)]
pub struct EmulatorOptions {
    /// Seed for the deterministic RNG used by fault injection (and uid/generateName).
    pub seed: u64,
    /// Graceful pod deletion, as the real server does it (default on). Deleting a pod that
    /// is bound to a node (`spec.nodeName` set) and not terminal (`Succeeded`/`Failed`) only
    /// sets `deletionTimestamp` (now + grace) and `deletionGracePeriodSeconds`, the grace
    /// period being the request's `gracePeriodSeconds`, else the pod's
    /// `terminationGracePeriodSeconds` (30 by default); the pod stays until a client (the
    /// kubelet) deletes it again with `gracePeriodSeconds=0`. A later delete may shorten the
    /// grace period, never extend it. Unbound and terminal pods, and a grace period of 0,
    /// are removed at once. Off: every pod deletion is immediate (finalizers permitting).
    pub graceful_pod_deletion: bool,
    /// Number of events kept for watch resumption (global, all resource types).
    pub history_limit: usize,
    /// Broadcast buffer per watcher before it is considered too slow and disconnected.
    pub watch_buffer: usize,
    /// Interval between BOOKMARK events on watches that allow them.
    pub bookmark_interval: Duration,
    /// Delay every watch event and list response by this much (default none); see
    /// [`Faults::set_watch_latency`], which changes it at runtime.
    pub watch_latency: Option<Duration>,
    /// Number of requests retained in the request log.
    pub request_log_limit: usize,
    /// Bytes of each request body retained in the request log.
    pub request_body_limit: usize,
}

impl Default for EmulatorOptions {
    fn default() -> Self {
        Self {
            seed: 42,
            graceful_pod_deletion: true,
            history_limit: 50_000,
            watch_buffer: 65_536,
            bookmark_interval: Duration::from_secs(5),
            watch_latency: None,
            request_log_limit: 20_000,
            request_body_limit: 16 * 1024,
        }
    }
}

/// A running emulator. Dropping it stops the server (like [`Emulator::shutdown`], without
/// waiting).
pub struct Emulator {
    addr: SocketAddr,
    state: Arc<state::AppState>,
    shutdown_tx: tokio::sync::watch::Sender<bool>,
    join: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for Emulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emulator")
            .field("addr", &self.addr)
            .finish()
    }
}

impl Emulator {
    /// Start serving on 127.0.0.1 (random port). Must be called inside a tokio runtime.
    pub async fn start(opts: EmulatorOptions) -> anyhow::Result<Emulator> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let store = SharedStore::new(Store::new(
            opts.seed,
            opts.history_limit,
            opts.watch_buffer,
            opts.graceful_pod_deletion,
        ));
        let (drop_tx, _) = tokio::sync::watch::channel(0u64);
        let drop_tx = Arc::new(drop_tx);
        let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
        let state = Arc::new(state::AppState {
            faults: Faults::new(
                opts.seed,
                store.clone(),
                drop_tx.clone(),
                opts.watch_latency,
            ),
            store,
            users: Default::default(),
            priority_levels: Default::default(),
            log: RequestLog::new(opts.request_log_limit, opts.request_body_limit),
            drop_watches: drop_tx,
            shutdown: shutdown_rx.clone(),
            bookmark_interval: opts.bookmark_interval,
            addr,
        });
        let app = http::router(state.clone());
        let mut srx = shutdown_rx;
        let join = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = srx.wait_for(|v| *v).await;
                })
                .await;
        });
        Ok(Emulator {
            addr,
            state,
            shutdown_tx,
            join: Some(join),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kube client for this emulator (default namespace `default`). Must be called inside
    /// a tokio runtime.
    ///
    /// Note: kube's default client config retries 429/503/504 responses; use
    /// [`Emulator::config`] with `default_retry = false` to see injected 429s directly.
    pub fn client(&self) -> kube::Client {
        kube::Client::try_from(self.config()).expect("kube client for emulator")
    }

    /// A kube `Config` pointing at this emulator (cluster_url `http://127.0.0.1:PORT`,
    /// default namespace `default`, no auth), to customise before building a client.
    pub fn config(&self) -> kube::Config {
        kube::Config::new(self.url().parse().expect("valid url"))
    }

    /// A kubeconfig (cluster `emulator`, user without auth, context `emulator`).
    pub fn kubeconfig_yaml(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: emulator\n  cluster:\n    server: {}\nusers:\n- name: emulator\n  user: {{}}\ncontexts:\n- name: emulator\n  context:\n    cluster: emulator\n    user: emulator\n    namespace: default\ncurrent-context: emulator\npreferences: {{}}\n",
            self.url()
        )
    }

    /// A kube `Config` that authenticates as `user` (a bearer token of its own).
    pub fn config_as(&self, user: User) -> kube::Config {
        let mut config = self.config();
        let token = self.state.users.token_for(user);
        config.auth_info.token = Some(token.into());
        config
    }

    /// A kube `Config` that authenticates as the ServiceAccount `namespace/name`, as a pod
    /// running under it does (its groups: `system:serviceaccounts`, ...).
    pub fn service_account_config(&self, namespace: &str, name: &str) -> kube::Config {
        self.config_as(User::service_account(namespace, name))
    }

    /// The API Priority and Fairness levels, to limit (and count) them.
    pub fn priority_levels(&self) -> PriorityLevels {
        self.state.priority_levels.clone()
    }

    /// Write [`Emulator::kubeconfig_yaml`] to a file (for `KUBECONFIG=... kubectl`).
    pub fn write_kubeconfig(&self, path: impl AsRef<std::path::Path>) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig_yaml())
    }

    /// Install (create, or replace the spec of) a CRD; its resources are served right away.
    /// Not recorded in the request log.
    pub fn install_crd(&self, crd: &CustomResourceDefinition) -> Result<(), ApiError> {
        let mut v = serde_json::to_value(crd).map_err(|e| ApiError::bad_request(e.to_string()))?;
        let mut store = self.state.store.lock();
        let info = store
            .find("apiextensions.k8s.io", "v1", "customresourcedefinitions")
            .expect("crd resource registered");
        let name = crd.metadata.name.clone().unwrap_or_default();
        if store.get(&info, None, &name).is_ok() {
            if let Some(m) = v
                .get_mut("metadata")
                .and_then(serde_json::Value::as_object_mut)
            {
                m.remove("resourceVersion");
            }
            store.update(
                &info,
                None,
                &name,
                v,
                WriteMode::Main,
                false,
                Ownership::Untracked,
            )?;
        } else {
            store.create(&info, None, v, false, Ownership::Untracked)?;
        }
        Ok(())
    }

    fn resolve(
        &self,
        api_version: &str,
        plural: &str,
    ) -> Result<Arc<store::ResourceInfo>, ApiError> {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        self.state
            .store
            .lock()
            .find(group, version, plural)
            .ok_or_else(|| {
                ApiError::new(
                    404,
                    "NotFound",
                    format!("resource {plural} in {api_version} is not served"),
                )
            })
    }

    /// Read one object directly from the store (no HTTP, not in the request log).
    /// `api_version` is `v1` or `group/version`; `plural` e.g. `pods`.
    pub fn object(
        &self,
        api_version: &str,
        plural: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<serde_json::Value> {
        let info = self.resolve(api_version, plural).ok()?;
        let o = self.state.store.lock().get(&info, namespace, name).ok()?;
        Some((*o).clone())
    }

    /// List objects directly from the store (no HTTP, not in the request log);
    /// `namespace: None` lists all namespaces.
    pub fn objects(
        &self,
        api_version: &str,
        plural: &str,
        namespace: Option<&str>,
    ) -> Vec<serde_json::Value> {
        let Ok(info) = self.resolve(api_version, plural) else {
            return Vec::new();
        };
        let store = self.state.store.lock();
        store
            .list(
                &info,
                namespace,
                &LabelSelector::default(),
                &FieldSelector::default(),
                None,
                None,
                None,
            )
            .map(|r| r.items.iter().map(|o| (**o).clone()).collect())
            .unwrap_or_default()
    }

    /// Create an object directly in the store (no HTTP, not in the request log), with the
    /// same semantics as a POST (defaulting, validation, watch events). Handy for seeding
    /// thousands of nodes/pods quickly.
    pub fn create_object(
        &self,
        api_version: &str,
        plural: &str,
        namespace: Option<&str>,
        object: serde_json::Value,
    ) -> Result<serde_json::Value, ApiError> {
        let info = self.resolve(api_version, plural)?;
        let o = self.state.store.lock().create(
            &info,
            namespace,
            object,
            false,
            Ownership::Untracked,
        )?;
        Ok((*o).clone())
    }

    /// Fault-injection handle.
    pub fn faults(&self) -> Faults {
        self.state.faults.clone()
    }

    /// Request-log handle.
    pub fn requests(&self) -> RequestLog {
        self.state.log.clone()
    }

    /// Stall (`true`) or resume (`false`) the open watch streams of a resource (plural, e.g.
    /// `"pods"`): the connections stay open but deliver nothing until resumed, as a wedged
    /// TCP connection would. Same as [`Faults::stall_watches`].
    pub fn stall_watches(&self, resource: &str, stalled: bool) {
        self.state.faults.stall_watches(resource, stalled);
    }

    /// Turn graceful pod deletion on or off at runtime.
    pub fn set_graceful_pod_deletion(&self, on: bool) {
        self.state.store.lock().graceful_pod_deletion = on;
    }

    /// The latest resourceVersion issued.
    pub fn resource_version(&self) -> u64 {
        self.state.store.lock().current_rv()
    }

    /// Stop serving: closes all watches and waits (up to 5 s) for the server to finish.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown_tx.send(true);
        if let Some(j) = self.join.take() {
            let abort = j.abort_handle();
            if tokio::time::timeout(Duration::from_secs(5), j)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.shutdown_tx.send(true);
    }
}
