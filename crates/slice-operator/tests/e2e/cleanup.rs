//! Cleanup of what one scenario made on a cluster it does not own: its TrainClusters
//! (through the dynamic API, so a malformed one goes too), pods, namespaces and the nodes of
//! its run, never anything else.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams};
use slice_core::api::TrainCluster;

use super::run_selector;

/// Upper bound of one cleanup (API calls against a possibly slow or broken cluster).
pub const CLEANUP_TIMEOUT: Duration = Duration::from_secs(60);

/// Everything one Env created on a cluster it does not own.
#[derive(Clone)]
pub struct Cleanup {
    pub config: kube::Config,
    pub namespace: String,
    /// False for a namespace the Env did not create (e.g. `default`).
    pub delete_namespace: bool,
    /// Other namespaces the scenario created (their pods and themselves are deleted).
    pub extra_namespaces: Vec<String>,
    pub run: String,
}

impl Cleanup {
    /// Deletes this run's TrainClusters, pods and namespace, then its nodes (selected by
    /// [`RUN_LABEL`], so no node of another run or of the cluster itself is touched). Every
    /// step is tried; the first error is returned.
    pub async fn run(&self, client: &Client) -> Result<(), String> {
        let mut errors = Vec::new();
        let gone = |r: Result<(), kube::Error>, what: &str, errors: &mut Vec<String>| match r {
            Ok(()) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => errors.push(format!("{what}: {e}")),
        };
        // Dynamic: a malformed object the typed API cannot read is deleted all the same.
        let tcs: Api<kube::core::DynamicObject> = Api::namespaced_with(
            client.clone(),
            &self.namespace,
            &kube::core::ApiResource::erase::<TrainCluster>(&()),
        );
        let r = tcs
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await
            .map(|_| ());
        gone(r, "delete TrainClusters", &mut errors);
        let r = delete_pods(client, &self.namespace).await;
        gone(r, "delete pods", &mut errors);
        let namespaces: Api<Namespace> = Api::all(client.clone());
        for extra in &self.extra_namespaces {
            let r = delete_pods(client, extra).await;
            gone(r, "delete pods of another namespace", &mut errors);
            let r = namespaces
                .delete(extra, &DeleteParams::default())
                .await
                .map(|_| ());
            gone(r, "delete another namespace", &mut errors);
        }
        if self.delete_namespace {
            let r = namespaces
                .delete(&self.namespace, &DeleteParams::default())
                .await
                .map(|_| ());
            gone(r, "delete namespace", &mut errors);
        }
        let nodes: Api<Node> = Api::all(client.clone());
        let selector = run_selector(&self.run);
        let r = nodes
            .delete_collection(
                &DeleteParams::default(),
                &ListParams::default().labels(&selector),
            )
            .await
            .map(|_| ());
        gone(r, "delete nodes", &mut errors);
        match errors.into_iter().next() {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }

    /// The same, from synchronous code that may sit inside a tokio runtime (a `Drop` during
    /// a panic): on a thread with its own runtime and client, bounded by [`CLEANUP_TIMEOUT`].
    /// On a multi-threaded runtime the calling worker is handed over first
    /// (`block_in_place`), so an in-process API server on this runtime keeps serving.
    pub fn run_blocking(self) -> Result<(), String> {
        let work = move || {
            std::thread::Builder::new()
                .name(format!("cleanup-{}", self.run))
                .spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| e.to_string())?;
                    runtime.block_on(async {
                        let client = Client::try_from(self.config.clone())
                            .map_err(|e| format!("client: {e}"))?;
                        tokio::time::timeout(CLEANUP_TIMEOUT, self.run(&client))
                            .await
                            .map_err(|_| format!("timed out after {CLEANUP_TIMEOUT:?}"))?
                    })
                })
                .map_err(|e| format!("spawn: {e}"))?
                .join()
                .map_err(|_| "the cleanup thread panicked".to_string())?
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(work)
            }
            _ => work(),
        }
    }
}

/// Every pod of `namespace`, at once (grace period 0): a scenario's pods need no kubelet.
async fn delete_pods(client: &Client, namespace: &str) -> Result<(), kube::Error> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    pods.delete_collection(
        &DeleteParams::default().grace_period(0),
        &ListParams::default(),
    )
    .await
    .map(|_| ())
}
