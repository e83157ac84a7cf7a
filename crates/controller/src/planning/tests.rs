use kube::runtime::watcher::Event;
use slice_testkit::{World, train_cluster, v6e_pools};

use super::*;
use crate::watches::{Feed, Policy};

#[test]
fn a_plan_that_panicked_leaves_an_inventory_rebuilt_from_the_caches_not_a_stuck_lock() {
    let mut world = World::new(
        train_cluster(slice_core::api::Membership::Independent, 1, 1),
        v6e_pools(1),
    );
    world.settle(5);
    let (lean_nodes, lean_pods) = world.observed();
    assert!(!lean_pods.is_empty());
    let (pods, mut pod_feed) = Feed::new(Policy::pods());
    let (nodes, mut node_feed) = Feed::new(Policy::nodes());
    let (services, mut service_feed) = Feed::new(Policy::services());
    node_feed.list(lean_nodes.iter().map(|n| LeanNode::clone(n)));
    pod_feed.list(lean_pods.iter().map(|p| LeanPod::clone(p)));
    service_feed.list([]);
    let caches = Caches {
        pods,
        nodes,
        services,
    };
    let planning = PlanningLock::default();
    let held = || {
        let inventory = planning.lock().inventory(&caches);
        !inventory.slice("pool-0").expect("pool-0").is_free()
    };
    assert!(held());
    // A plan panics while holding the planning state, after it took the journals.
    for pod in &lean_pods {
        pod_feed.apply(Event::Delete(LeanPod::clone(pod)));
    }
    let panicked = std::thread::scope(|s| {
        s.spawn(|| {
            let mut locked = planning.lock();
            let _taken = journal(&caches.pods);
            drop(locked.live.inventory());
            panic!("a bad plan");
        })
        .join()
    });
    assert!(panicked.is_err());
    // The next plan is made, from the caches as they are: the pod is gone.
    assert!(!held(), "rebuilt from the stores");
}
