//! The four Wasm stages end to end with the real components from
//! `filters/dist` (built by `filters/build.sh` once per test binary):
//! authentication (a union, kube's 401, credential headers removed, mTLS,
//! JWT), authorization (a union, kube's 403, monitor mode, `match`),
//! impersonation, the four outcomes of a filter call under each failure
//! policy, and admission (mutation reaching the upstream, order, denials).
//!
//! Each test runs an in-process gateway on 127.0.0.1:0 (plaintext unless
//! it tests mTLS) in front of the echoing upstream of [`crate::support::upstream`].
//! The stages' tests are one module each; the manifest pieces they share
//! are here.

mod admission;
mod authentication;
mod authorization;
mod failure_policies;
mod impersonation;

use std::path::Path;
use std::time::{Duration, Instant};

use base64ct::Encoding as _;
use serde_json::{Value, json};

use crate::support::*;

/// A plaintext gateway made of these manifest pieces.
async fn gateway(pieces: &[&str]) -> TestGateway {
    TestGateway::start(&plaintext(&pieces.concat())).await
}

fn with_headers(
    mut request: reqwest::RequestBuilder,
    headers: &[(&str, &str)],
) -> reqwest::RequestBuilder {
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request
}

/// kube's 401, byte for byte.
const UNAUTHORIZED_BODY: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}"#;

fn assert_unauthorized(answer: &Answer) {
    answer.assert_status(401, "Unauthorized");
    assert_eq!(answer.body, UNAUTHORIZED_BODY);
}

fn fault_authn(settings: &str) -> String {
    filter(
        "authentication.filters",
        "faulty",
        "fault-authn",
        Some(json!({"user": "fault-user", "groups": ["faulty"]})),
        settings,
    )
}

fn fault_authz(name: &str, settings: &str) -> String {
    filter("authorization.filters", name, "fault-authz", None, settings)
}
