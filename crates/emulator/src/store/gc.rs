//! Garbage collection through owner references: collecting the dependents of a removed
//! owner (background policy), and orphaning them (`propagationPolicy=Orphan`).

use std::sync::Arc;

use serde_json::Value;

use super::delete::DeleteOpts;
use super::event::EventType;
use super::info::ResourceInfo;
use super::meta::{meta_mut, owner_uids};
use super::state::Store;

impl Store {
    /// Background garbage collection for the dependents of a removed owner.
    pub(super) fn collect_garbage(&mut self, owner_uid: &str) {
        let Some(deps) = self.dependents.remove(owner_uid) else {
            return;
        };
        for (key, ns, name) in deps {
            // Looked up one at a time: deleting one dependent may cascade to the next.
            let Some((info, obj)) = self.existing(&key, &ns, &name) else {
                continue;
            };
            let alive = owner_uids(&obj).iter().any(|u| self.uids.contains_key(u));
            if alive {
                // Like the real GC: drop the dangling reference, keep the object.
                self.drop_owner_refs(&info, obj, |store, uid| {
                    !uid.is_some_and(|u| store.uids.contains_key(u))
                });
            } else {
                let _ = self.delete(&info, Some(&ns), &name, &DeleteOpts::default());
            }
        }
    }

    /// A dependent (resource key, namespace, name), if it still exists.
    fn existing(&self, key: &str, ns: &str, name: &str) -> Option<(Arc<ResourceInfo>, Arc<Value>)> {
        let info = self.by_key.get(key)?.clone();
        let obj = self.get(&info, Some(ns), name).ok()?;
        Some((info, obj))
    }

    /// Store `obj` again without the owner references whose uid `drop` selects.
    fn drop_owner_refs(
        &mut self,
        info: &Arc<ResourceInfo>,
        obj: Arc<Value>,
        drop: impl Fn(&Self, Option<&str>) -> bool,
    ) {
        let mut o = (*obj).clone();
        if let Some(refs) = meta_mut(&mut o)
            .get_mut("ownerReferences")
            .and_then(Value::as_array_mut)
        {
            refs.retain(|r| !drop(self, r.get("uid").and_then(Value::as_str)));
        }
        self.put(info, o, EventType::Modified, Some(obj));
    }

    pub(super) fn orphan_dependents(&mut self, owner_uid: &str) {
        let Some(deps) = self.dependents.remove(owner_uid) else {
            return;
        };
        for (key, ns, name) in deps {
            if let Some((info, obj)) = self.existing(&key, &ns, &name) {
                self.drop_owner_refs(&info, obj, |_, uid| uid == Some(owner_uid));
            }
        }
    }
}
