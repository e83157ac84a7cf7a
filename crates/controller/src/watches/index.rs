//! A secondary index of a watched collection by a key of its objects (for pods: namespace
//! and TrainCluster), kept by the watch task beside the store, so that a reconcile reads its
//! own cluster's objects without scanning everyone's.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

/// The key of an indexed object; objects without one are not indexed.
pub type IndexKey = (String, String);

/// The objects under one key, in name order: a cluster's pods come out roughly in the order
/// they were created, and so allocated, which the planner's scans are faster for. Shared
/// with the reconciles that read it, so a read copies nothing.
pub type Indexed<K> = Arc<Vec<Arc<K>>>;

/// Objects by key, then by name. Updated by the watch task only, always before the cache's
/// version moves, so a reconcile never sees a version its index does not cover. A change
/// edits the list in place unless a reconcile still holds it (then it edits a copy, once per
/// read). An update is a replacement found by binary search; an object added or removed
/// shifts the names after it (a memmove of at most 512 KB at 64,000 pods), paid by the watch
/// task at the pace pods are created and deleted, so that a reconcile's read costs nothing.
pub struct Index<K: Resource<DynamicType = ()> + 'static> {
    key: fn(&K) -> Option<IndexKey>,
    map: RwLock<HashMap<IndexKey, Indexed<K>>>,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Index<K> {
    pub fn new(key: fn(&K) -> Option<IndexKey>) -> Index<K> {
        Index {
            key,
            map: RwLock::default(),
        }
    }

    /// The objects under `key`, in name order.
    pub fn get(&self, namespace: &str, name: &str) -> Indexed<K> {
        let map = self.map.read().expect("index lock poisoned");
        map.get(&(namespace.to_string(), name.to_string()))
            .cloned()
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
                let (key, stored) = ((self.key)(obj), store.get(&ObjectRef::from_obj(obj)));
                let kept = key.clone().filter(|_| stored.is_some());
                // An update under the same key replaces in place (`insert`): no shift of the
                // list for the status changes that are most of a pod's events.
                if let Some(old) = previous.filter(|old| (self.key)(old) != kept) {
                    remove(&mut map, (self.key)(old), old.meta().name.as_deref());
                }
                if let (Some(key), Some(stored)) = (key, stored) {
                    insert(map.entry(key).or_default(), stored);
                }
            }
            watcher::Event::Delete(obj) => {
                let mut map = self.map.write().expect("index lock poisoned");
                let old = previous.map(|p| (self.key)(p)).unwrap_or((self.key)(obj));
                remove(&mut map, old, obj.meta().name.as_deref());
            }
            watcher::Event::InitDone => {
                let mut fresh: HashMap<IndexKey, Vec<Arc<K>>> = HashMap::new();
                for obj in store.state() {
                    if let Some(key) = (self.key)(&obj) {
                        fresh.entry(key).or_default().push(obj);
                    }
                }
                let fresh = fresh
                    .into_iter()
                    .map(|(key, mut objects)| {
                        objects.sort_unstable_by(|a, b| name_of(&**a).cmp(name_of(&**b)));
                        (key, Arc::new(objects))
                    })
                    .collect();
                *self.map.write().expect("index lock poisoned") = fresh;
            }
            watcher::Event::Init | watcher::Event::InitApply(_) => {}
        }
    }
}

fn name_of<K: Resource>(obj: &K) -> &str {
    obj.meta().name.as_deref().unwrap_or_default()
}

/// Put `obj` in its place by name, replacing an object of the same name.
fn insert<K: Resource + Clone>(objects: &mut Indexed<K>, obj: Arc<K>) {
    let objects = Arc::make_mut(objects);
    match objects.binary_search_by(|o| name_of(&**o).cmp(name_of(&*obj))) {
        Ok(at) => objects[at] = obj,
        Err(at) => objects.insert(at, obj),
    }
}

fn remove<K: Resource + Clone>(
    map: &mut HashMap<IndexKey, Indexed<K>>,
    key: Option<IndexKey>,
    name: Option<&str>,
) {
    let (Some(key), Some(name)) = (key, name) else {
        return;
    };
    let Some(objects) = map.get_mut(&key) else {
        return;
    };
    if let Ok(at) = objects.binary_search_by(|o| name_of(&**o).cmp(name)) {
        Arc::make_mut(objects).remove(at);
    }
    if objects.is_empty() {
        map.remove(&key);
    }
}
