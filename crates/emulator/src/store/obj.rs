//! A stored object and its key.

use std::sync::Arc;

use serde_json::Value;

/// A stored object (shared between the store, the history and watchers).
pub type Obj = Arc<Value>;

/// Where an object is kept within its type: `(namespace, name)`.
pub(super) type ObjKey = (String, String);
