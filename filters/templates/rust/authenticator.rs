//! `{{name}}`: an authenticator (world `authenticator-filter`), scaffolded by
//! `wasmgate new-filter`. As scaffolded it has no opinion on any request:
//! recognise your credentials in `authenticate` and answer
//! `AuthnResult::Authenticated(UserInfo { .. })`.

wit_bindgen::generate!({
    path: "{{wit}}",
    world: "authenticator-filter",
});

use exports::wasmgate::filter::authenticator::{AuthnResult, Guest};
use wasmgate::filter::host;
use wasmgate::filter::types::{LogLevel, RequestView};

struct Filter;

/// The manifest's `config` table, as a JSON object.
fn config() -> Result<serde_json::Map<String, serde_json::Value>, String> {
    match serde_json::from_str(&host::config()) {
        Ok(serde_json::Value::Object(config)) => Ok(config),
        Ok(_) => Err("{{name}}: bad config: not a table".to_owned()),
        Err(error) => Err(format!("{{name}}: bad config: {error}")),
    }
}

impl Guest for Filter {
    fn authenticate(request: RequestView) -> AuthnResult {
        // A bad config is this filter's error outcome (logged, never shown to the client).
        let config = match config() {
            Ok(config) => config,
            Err(message) => return AuthnResult::Error(message),
        };
        // Formatted only when the gateway's log keeps debug lines.
        if host::log_enabled(LogLevel::Debug) {
            host::log(
                LogLevel::Debug,
                &format!("{} {} with {} headers (config: {} keys)", request.method, request.path, request.headers.len(), config.len()),
            );
        }
        AuthnResult::NoOpinion
    }
}

export!(Filter);
