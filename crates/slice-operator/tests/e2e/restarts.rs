//! The operator itself restarting, failing over, or a scenario panicking: nothing of the
//! clusters is replaced or counted again, and only what a scenario created is cleaned up.

use super::*;

/// What a restart of the operator must leave exactly as it was.
#[derive(Debug, PartialEq)]
struct Settled {
    pod_uids: BTreeSet<String>,
    epochs: Vec<u64>,
    restarts: u32,
    preemptions: u32,
}

async fn settled(env: &Env, name: &str) -> Settled {
    let status = env.tcs().get(name).await.unwrap().status.unwrap();
    Settled {
        pod_uids: env.worker_pods(name).await.iter().map(uid).collect(),
        epochs: status.groups.iter().map(|g| g.epoch).collect(),
        restarts: status.restarts,
        preemptions: status.preemptions,
    }
}

/// Completed reconciles of operator `i` (the duration is observed when one ends), from its
/// /metrics endpoint.
pub(super) async fn completed_reconciles(env: &Env, i: usize) -> u64 {
    harness::scraped_metric(env, i, "slice_operator_reconcile_duration_seconds_count").await as u64
}

async fn wait_reconciled(env: &Env, i: usize) {
    env.wait_for(
        "the new leader's first reconcile",
        Duration::from_secs(30),
        || async { (completed_reconciles(env, i).await > 0).then_some(()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_restart_and_failover_replace_no_pod_and_count_nothing() {
    if harness::external() {
        // Processes the suite started itself can be stopped; an installed operator is not ours.
        if let Some(plane) = harness::own_control_plane() {
            restart_and_fail_over_processes(plane).await;
        }
        return;
    }
    let pools = v6e_pools(3);
    let pools: Vec<_> = pools.iter().map(|(n, a, t)| (n.as_str(), *a, *t)).collect();
    let options = harness::EnvOptions {
        operators: 2,
        leader_election: true,
        ..Default::default()
    };
    let mut env = Env::start_with("restart", &pools, options).await;
    env.create(&env.train_cluster("steady", Membership::Multislice, 3, 3))
        .await;
    env.wait_running("steady", 3, 4).await;
    let before = settled(&env, "steady").await;
    // SIGTERM, then SIGKILL of the leader: it comes back (or the standby takes over).
    for kill in [false, true] {
        let i = env_leader(&env).await.expect("one operator leads");
        env.restart_operator(i, kill).await;
        let leader = env
            .wait_for("a leader", Duration::from_secs(30), || env_leader(&env))
            .await;
        wait_reconciled(&env, leader).await;
        assert_eq!(settled(&env, "steady").await, before, "after kill={kill}");
    }
    env.stop().await;
}

/// The same against the real control plane: the leader process is sent SIGTERM, then the
/// next leader SIGKILL, and each time a new replica is started as the Deployment would.
async fn restart_and_fail_over_processes(plane: &harness::control_plane::ControlPlane) {
    let env = env_with("restart", 3).await;
    env.create(&env.train_cluster("steady", Membership::Multislice, 3, 3))
        .await;
    env.wait_running("steady", 3, 4).await;
    let before = settled(&env, "steady").await;
    let (namespace, name) = plane.operator_lease();
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(env.client.clone(), &namespace);
    let holder = || async {
        let lease = leases.get_opt(&name).await.ok()??;
        lease.spec?.holder_identity.filter(|h| !h.is_empty())
    };
    for kill in [false, true] {
        let old = env
            .wait_for("a leader", Duration::from_secs(30), holder)
            .await;
        // Waits for the process to end: off the runtime's workers, which the fake kubelet
        // needs meanwhile.
        let stopped = tokio::task::block_in_place(|| plane.stop_operator(&old, kill));
        assert!(stopped, "{old} is one of ours");
        plane.add_operator().expect("a new replica");
        let new = env
            .wait_for("another leader", Duration::from_secs(60), || async {
                holder().await.filter(|h| *h != old)
            })
            .await;
        let addr = plane.metrics_of(&new).expect("the new leader runs");
        env.wait_for(
            "the new leader's first reconcile",
            Duration::from_secs(30),
            || async {
                let text = harness::control_plane::scrape(addr).await?;
                let done = harness::control_plane::sum(
                    &text,
                    "slice_operator_reconcile_duration_seconds_count",
                );
                (done > 0.0).then_some(())
            },
        )
        .await;
        assert_eq!(settled(&env, "steady").await, before, "after kill={kill}");
    }
    env.stop().await;
}

/// The operator holding the leader Lease, as the API server has it.
async fn env_leader(env: &Env) -> Option<usize> {
    let (namespace, name) = harness::operator_lease();
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(env.client.clone(), &namespace);
    let lease = leases.get_opt(&name).await.ok()??;
    let holder = lease.spec?.holder_identity?;
    env.operators
        .iter()
        .position(|o| o.replica.config.identity() == holder)
}

/// Two scenarios share one cluster (the one in $KUBECONFIG, else an emulator with the
/// operator): one panics half-way. Its drop guard removes its namespace, TrainCluster and
/// nodes, and nothing of the other scenario nor any fake node it did not create.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scenario_that_panics_cleans_up_only_what_it_created() {
    use k8s_openapi::api::core::v1::{Namespace, Node};
    let shared = harness::SharedCluster::start().await;
    // Different slice shapes, so the two clusters never compete for a slice.
    let bystander = Env::start_shared(
        shared.config.clone(),
        "bystander",
        &[("pool-0", V6E, "2x4")],
    )
    .await;
    let mut tc = bystander.train_cluster("calm", Membership::Multislice, 1, 1);
    tc.spec.worker_groups[0] = slice_testkit::tpu_group("workers", V6E, "2x4", 8, 1, 1);
    bystander.create(&tc).await;
    let (_, calm_pods) = bystander.wait_running("calm", 1, 1).await;
    let bystander_nodes = bystander.own_nodes().await;
    assert_eq!(bystander_nodes.len(), 1, "{bystander_nodes:?}");
    // A fake node of nobody's run (emulator only: on a real cluster it would outlive a crash).
    let foreign = slice_sim::NodePoolSpec::new("foreign-pool", V6E, "2x2");
    if shared.emulator.is_some() {
        slice_sim::add_pool(&shared.client(), &foreign)
            .await
            .unwrap();
    }

    let (tx, rx) = tokio::sync::oneshot::channel();
    let config = shared.config.clone();
    let doomed = tokio::spawn(async move {
        let env = Env::start_shared(config, "doomed", &[("pool-0", V6E, "4x4")]).await;
        env.create(&env.train_cluster("doomed", Membership::Multislice, 1, 1))
            .await;
        env.wait_running("doomed", 1, 4).await;
        let nodes = env.own_nodes().await;
        tx.send((env.namespace.clone(), env.run.clone(), nodes))
            .unwrap();
        panic!("this scenario fails on purpose");
    });
    let err = doomed.await.expect_err("the scenario panicked");
    assert!(err.is_panic(), "{err}");
    let (doomed_ns, doomed_run, doomed_nodes) = rx.await.expect("the scenario got to Running");
    assert_eq!(doomed_nodes.len(), 4, "{doomed_nodes:?}");
    assert_ne!(doomed_run, bystander.run);

    let client = shared.client();
    let nodes: Api<Node> = Api::all(client.clone());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let doomed_tcs: Api<TrainCluster> = Api::namespaced(client.clone(), &doomed_ns);
    // A real API server finishes a namespace deletion asynchronously.
    bystander
        .wait_for(
            "the panicked scenario's objects gone",
            Duration::from_secs(60),
            || async {
                let run_nodes = nodes
                    .list(
                        &kube::api::ListParams::default()
                            .labels(&format!("{}={doomed_run}", harness::RUN_LABEL)),
                    )
                    .await
                    .ok()?
                    .items;
                let tcs = doomed_tcs.list(&Default::default()).await.ok()?.items;
                let ns_gone = namespaces
                    .get_opt(&doomed_ns)
                    .await
                    .ok()?
                    .is_none_or(|ns| ns.metadata.deletion_timestamp.is_some());
                (run_nodes.is_empty() && tcs.is_empty() && ns_gone).then_some(())
            },
        )
        .await;
    for node in &doomed_nodes {
        assert!(nodes.get_opt(node).await.unwrap().is_none(), "{node} left");
    }
    // Nothing of the other scenario was touched: its namespace, cluster, pods and nodes.
    assert!(
        namespaces
            .get_opt(&bystander.namespace)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(bystander.own_nodes().await, bystander_nodes);
    let (_, pods_after) = bystander.wait_running("calm", 1, 1).await;
    assert_eq!(
        pods_after.iter().map(uid).collect::<Vec<_>>(),
        calm_pods.iter().map(uid).collect::<Vec<_>>()
    );
    if shared.emulator.is_some() {
        assert!(nodes.get_opt("foreign-pool-0").await.unwrap().is_some());
    }

    // The normal path removes the bystander's objects, and again nothing else.
    let (bystander_ns, bystander_run) = (bystander.namespace.clone(), bystander.run.clone());
    bystander.stop().await;
    let left = nodes
        .list(
            &kube::api::ListParams::default()
                .labels(&format!("{}={bystander_run}", harness::RUN_LABEL)),
        )
        .await
        .unwrap()
        .items;
    assert!(left.is_empty(), "{} nodes left", left.len());
    let ns = namespaces.get_opt(&bystander_ns).await.unwrap();
    assert!(ns.is_none_or(|ns| ns.metadata.deletion_timestamp.is_some()));
    if shared.emulator.is_some() {
        assert!(
            nodes.get_opt("foreign-pool-0").await.unwrap().is_some(),
            "a node of no run survives"
        );
    }
    shared.stop().await;
}
