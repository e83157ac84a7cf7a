//! The state the HTTP handlers and the watch streams share.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::apf::PriorityLevels;
use crate::apf::users::Users;
use crate::faults::Faults;
use crate::requests::RequestLog;
use crate::store::SharedStore;

/// Shared server state.
pub(crate) struct AppState {
    pub store: SharedStore,
    pub faults: Faults,
    pub users: Users,
    pub priority_levels: PriorityLevels,
    pub log: RequestLog,
    pub drop_watches: Arc<tokio::sync::watch::Sender<u64>>,
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    pub bookmark_interval: Duration,
    pub addr: SocketAddr,
}
