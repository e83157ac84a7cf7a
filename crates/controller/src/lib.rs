#![forbid(unsafe_code)]
//! slice-controller: the imperative shell around the pure planner. It watches TrainClusters,
//! their pods and Service, and TPU Nodes; each reconcile observes, plans and applies.
//!
//! From the process down: [`operator`] (lease, watches, the controller loop) maps changes to
//! reconciles through [`triggers`]; [`reconcile`] observes and plans on the
//! [`planner_thread`] and hands the plan to the [`executor`]; the [`ledger`] remembers what
//! each cluster wrote until the caches ([`watches`], [`freshness`]) show it.

pub mod api_call;
pub mod coalesce;
pub mod config;
pub mod context;
pub mod error;
pub mod event_budget;
pub mod events;
pub mod executor;
pub mod freshness;
pub mod http;
pub mod interest;
pub mod leader;
pub mod ledger;
pub mod metrics;
pub mod operator;
pub mod planner_thread;
pub mod planning;
pub mod reconcile;
pub mod replica;
pub mod setup;
pub mod triggers;
pub mod watches;

pub use config::{LogFormat, OperatorConfig};
pub use context::Context;
pub use operator::{OperatorHandle, SHUTDOWN_GRACE, run, start};
pub use replica::Replica;
pub use setup::{client_for, client_from, init_tracing, runtime, shutdown_signal};
