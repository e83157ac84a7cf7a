//! Timestamps as the Kubernetes API writes them.

/// Now, as an RFC 3339 timestamp with whole seconds (the Kubernetes `Time` format).
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Now as a `MicroTime` (a Lease's `renewTime`).
pub fn now_rfc3339_micros() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}
