//! `{{name}}`: an admission filter (world `admission-filter`), scaffolded by
//! `wasmgate new-filter`. As scaffolded it allows every object: check (or
//! change) `request.object` in `admit` and answer `Denied(Status { .. })`,
//! or, listed under `[[admission.mutating]]`, `Mutated(json)` or
//! `Patched(json_patch)`.

wit_bindgen::generate!({
    path: "{{wit}}",
    world: "admission-filter",
});

use exports::wasmgate::filter::admission::{AdmissionRequest, AdmissionResponse, Guest, Operation};
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
    fn admit(request: AdmissionRequest) -> Result<AdmissionResponse, String> {
        // `Err` is this filter's own failure: the manifest's failure_policy decides.
        let config = config()?;
        let operation = match request.operation {
            Operation::Create => "create",
            Operation::Update => "update",
            Operation::Delete => "delete",
            Operation::Connect => "connect",
        };
        let size = request.object.as_ref().map_or(0, String::len);
        // Formatted only when the gateway's log keeps debug lines.
        if host::log_enabled(LogLevel::Debug) {
            host::log(
                LogLevel::Debug,
                &format!("{operation} {} by {}: {size} bytes (config: {} keys)", request.request.resource, request.user.name, config.len()),
            );
        }
        Ok(AdmissionResponse::Allowed)
    }
}

export!(Filter);
