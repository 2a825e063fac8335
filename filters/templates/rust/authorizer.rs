//! `{{name}}`: an authorizer (world `authorizer-filter`), scaffolded by
//! `wasmgate new-filter`. As scaffolded it allows every request: put your
//! policy in `authorize` and answer `Decision::Deny(reason)` or
//! `Decision::NoOpinion(reason)` where it applies.

wit_bindgen::generate!({
    path: "{{wit}}",
    world: "authorizer-filter",
});

use exports::wasmgate::filter::authorizer::{Attributes, Decision, Guest};
use wasmgate::filter::host;
use wasmgate::filter::types::LogLevel;

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
    fn authorize(attributes: Attributes) -> Result<Decision, String> {
        // `Err` is this filter's own failure: the manifest's failure_policy decides.
        let config = config()?;
        let request = &attributes.request;
        // Formatted only when the gateway's log keeps debug lines.
        if host::log_enabled(LogLevel::Debug) {
            host::log(
                LogLevel::Debug,
                &format!("{} {} {} (config: {} keys)", attributes.user.name, request.verb, request.path, config.len()),
            );
        }
        Ok(Decision::Allow)
    }
}

export!(Filter);
