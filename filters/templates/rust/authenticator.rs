//! `{{name}}`: an authenticator (world `authenticator-filter`), scaffolded by
//! `wasmgate new-filter`. As scaffolded it has no opinion on any request:
//! recognise your credentials in `authenticate` (`wasmgate_filter::headers`
//! reads headers, and bearer tokens, as Kubernetes does) and answer
//! `AuthnResult::Authenticated(UserInfo { .. })`.

use serde::Deserialize;
use wasmgate_filter::authenticator::{self, AuthnResult, Guest};
use wasmgate_filter::types::RequestView;
use wasmgate_filter::{FilterConfig, debug};

/// The manifest's `config` table, kept whole: make it a struct of the keys
/// you read (with `#[serde(deny_unknown_fields)]`, a typo is a bad config).
#[derive(Deserialize)]
#[serde(transparent)]
struct Config(serde_json::Map<String, serde_json::Value>);

impl FilterConfig for Config {
    const FILTER: &'static str = "{{name}}";
}

struct Filter;

impl Guest for Filter {
    fn authenticate(request: RequestView) -> AuthnResult {
        // A bad config is this filter's error outcome (logged, never shown to the client).
        let config = match wasmgate_filter::config::<Config>() {
            Ok(config) => config,
            Err(message) => return AuthnResult::Error(message),
        };
        // Formatted only when the gateway's log keeps debug lines.
        // `method`, `path`, `query` and `remote_addr` are given unless the
        // manifest's `reads` leaves them out (headers: its `headers`).
        debug!(
            "{} {} with {} headers (config: {} keys)",
            request.method.as_deref().unwrap_or("-"),
            request.path.as_deref().unwrap_or("-"),
            request.headers.len(),
            config.0.len()
        );
        AuthnResult::NoOpinion
    }
}

authenticator::export!(Filter);
