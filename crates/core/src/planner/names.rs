//! The names of the objects the operator owns: Service, head pod, worker pods and their
//! hostnames. Stable: running pods are found by them.

use crate::constants::*;

pub fn headless_service_name(cluster: &str) -> String {
    format!("{cluster}{HEADLESS_SERVICE_SUFFIX}")
}

pub fn head_pod_name(cluster: &str) -> String {
    format!("{cluster}{HEAD_SUFFIX}")
}

pub fn worker_pod_name(cluster: &str, group: &str, replica: u32, host: u32) -> String {
    format!("{cluster}-{group}-{replica}-{host}")
}

/// Fully qualified (within the namespace) hostname of a worker pod.
pub fn worker_hostname(cluster: &str, group: &str, replica: u32, host: u32) -> String {
    format!(
        "{}.{}",
        worker_pod_name(cluster, group, replica, host),
        headless_service_name(cluster)
    )
}
