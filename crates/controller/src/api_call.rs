//! How every API call is made: bounded in time, retried only when retrying can help.

use std::time::Duration;

use backon::ExponentialBuilder;

/// Longest a single API call may take. Without a bound, one stalled request wedges its
/// TrainCluster for good and keeps a deposed leader acting after a standby took over.
pub const API_CALL_TIMEOUT: Duration = Duration::from_secs(20);

/// 429, 5xx and transport errors are worth retrying; other API errors are answers.
pub fn retryable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(status) => status.code == 429 || status.code >= 500,
        kube::Error::SerdeError(_) | kube::Error::BuildRequest(_) => false,
        _ => true,
    }
}

/// Run one API call with [`API_CALL_TIMEOUT`]; a timeout is a transport error (retryable).
pub async fn bounded<T>(
    call: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    match tokio::time::timeout(API_CALL_TIMEOUT, call).await {
        Ok(result) => result,
        Err(_) => Err(kube::Error::Service(Box::new(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer within {API_CALL_TIMEOUT:?}"),
        )))),
    }
}

/// The retries of one call: a few, quickly, with jitter.
pub fn backoff() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(50))
        .with_max_delay(Duration::from_secs(2))
        .with_max_times(4)
        .with_jitter()
}

/// True when the API server answered with this HTTP status.
pub fn is_code(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// The API server found the object invalid as it is (422 Invalid, or 400 when it could not
/// decode it, as for an unparseable quantity): only a change of the object helps. Other 400s
/// are not: an admission webhook that denies without a code of its own is answered 400 too,
/// and its policy may change.
pub fn is_invalid(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) if s.code == 422 => true,
        kube::Error::Api(s) if s.code == 400 => s.message.contains("cannot be handled as a"),
        _ => false,
    }
}

/// The API server's message when it refused an object as it is: a 4xx other than a conflict
/// (409, news about names) or throttling (429). Sending it again cannot help.
pub fn rejection(e: &kube::Error) -> Option<String> {
    match e {
        kube::Error::Api(s) if (400..500).contains(&s.code) && s.code != 409 && s.code != 429 => {
            Some(s.message.clone())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16, reason: &str, message: &str) -> kube::Error {
        kube::Error::Api(
            serde_json::from_value(serde_json::json!({
                "status": "Failure", "code": code, "reason": reason, "message": message
            }))
            .unwrap(),
        )
    }

    #[test]
    fn only_a_pod_invalid_as_it_is_is_invalid_not_a_webhooks_denial() {
        let invalid = api_error(
            422,
            "Invalid",
            "Pod \"p\" is invalid: spec.containers[0].image: Required value",
        );
        let undecodable = api_error(
            400,
            "BadRequest",
            "Pod in version \"v1\" cannot be handled as a Pod: quantities must match the regular expression",
        );
        let webhook = api_error(
            400,
            "BadRequest",
            "admission webhook \"policy.example.com\" denied the request: images must come from our registry",
        );
        let quota = api_error(403, "Forbidden", "pods \"p\" is forbidden: exceeded quota");
        assert!(is_invalid(&invalid));
        assert!(is_invalid(&undecodable));
        assert!(
            !is_invalid(&webhook),
            "a webhook's policy may change: retried"
        );
        assert!(!is_invalid(&quota));
        assert!(rejection(&webhook).is_some(), "still reported as a refusal");
    }
}
