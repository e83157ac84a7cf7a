//! A secondary index of a watched collection by a key of its objects (for pods: namespace
//! and TrainCluster), kept by the watch task beside the store, so that a reconcile reads its
//! own cluster's objects without scanning everyone's.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

/// The key of an indexed object; objects without one are not indexed.
pub type IndexKey = (String, String);

/// Objects by key, then by name (in name order: a cluster's pods come out roughly in the
/// order they were created, and so allocated, which the planner's scans are faster for). Updated by the watch task only, always before the cache's
/// version moves, so a reconcile never sees a version its index does not cover.
pub struct Index<K: Resource<DynamicType = ()> + 'static> {
    key: fn(&K) -> Option<IndexKey>,
    map: RwLock<HashMap<IndexKey, BTreeMap<String, Arc<K>>>>,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Index<K> {
    pub fn new(key: fn(&K) -> Option<IndexKey>) -> Index<K> {
        Index {
            key,
            map: RwLock::default(),
        }
    }

    /// The objects under `key`, in name order.
    pub fn get(&self, namespace: &str, name: &str) -> Vec<Arc<K>> {
        let map = self.map.read().expect("index lock poisoned");
        map.get(&(namespace.to_string(), name.to_string()))
            .map(|objects| objects.values().cloned().collect())
            .unwrap_or_default()
    }

    /// How many keys are indexed.
    pub fn keys(&self) -> usize {
        self.map.read().expect("index lock poisoned").len()
    }

    /// Follow one event the store has just applied: `previous` is what the store held for
    /// the object before it. A completed list rebuilds the index from the store.
    pub fn follow(&self, event: &watcher::Event<K>, previous: Option<&Arc<K>>, store: &Store<K>) {
        match event {
            watcher::Event::Apply(obj) => {
                let mut map = self.map.write().expect("index lock poisoned");
                if let Some(old) = previous {
                    remove(&mut map, (self.key)(old), &old.meta().name);
                }
                if let (Some(key), Some(stored)) =
                    ((self.key)(obj), store.get(&ObjectRef::from_obj(obj)))
                {
                    let name = obj.meta().name.clone().unwrap_or_default();
                    map.entry(key).or_default().insert(name, stored);
                }
            }
            watcher::Event::Delete(obj) => {
                let mut map = self.map.write().expect("index lock poisoned");
                let old = previous.map(|p| (self.key)(p)).unwrap_or((self.key)(obj));
                remove(&mut map, old, &obj.meta().name);
            }
            watcher::Event::InitDone => {
                let mut fresh: HashMap<IndexKey, BTreeMap<String, Arc<K>>> = HashMap::new();
                for obj in store.state() {
                    if let Some(key) = (self.key)(&obj) {
                        let name = obj.meta().name.clone().unwrap_or_default();
                        fresh.entry(key).or_default().insert(name, obj);
                    }
                }
                *self.map.write().expect("index lock poisoned") = fresh;
            }
            watcher::Event::Init | watcher::Event::InitApply(_) => {}
        }
    }
}

fn remove<K>(
    map: &mut HashMap<IndexKey, BTreeMap<String, Arc<K>>>,
    key: Option<IndexKey>,
    name: &Option<String>,
) {
    let (Some(key), Some(name)) = (key, name) else {
        return;
    };
    if let Some(objects) = map.get_mut(&key) {
        objects.remove(name);
        if objects.is_empty() {
            map.remove(&key);
        }
    }
}
