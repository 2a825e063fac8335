//! `{{name}}`: an admission filter (world `admission-filter`), scaffolded by
//! `wasmgate new-filter`. As scaffolded it allows every object: check (or
//! change) `request.object` in `admit` and answer `Denied(Status { .. })`,
//! or, listed under `[[admission.mutating]]`, `Mutated(json)` or
//! `Patched(json_patch)`.

use serde::Deserialize;
use wasmgate_filter::admission::{self, AdmissionRequest, AdmissionResponse, Guest, Operation};
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
    fn admit(request: AdmissionRequest) -> Result<AdmissionResponse, String> {
        // `Err` is this filter's own failure: the manifest's failure_policy decides.
        let config = wasmgate_filter::config::<Config>()?;
        let operation = match request.operation {
            Operation::Create => "create",
            Operation::Update => "update",
            Operation::Delete => "delete",
            Operation::Connect => "connect",
        };
        let size = request.object.as_ref().map_or(0, String::len);
        // Formatted only when the gateway's log keeps debug lines.
        // `request` and `user` are given unless the manifest's `reads` leaves
        // them out (a filter that reads only the object is cheaper to call).
        let resource = request.request.as_ref().map_or("", |info| info.resource.as_str());
        let user = request.user.as_ref().map_or("", |user| user.name.as_str());
        debug!(
            "{operation} {resource} by {user}: {size} bytes (config: {} keys)",
            config.0.len()
        );
        Ok(AdmissionResponse::Allowed)
    }
}

admission::export!(Filter);
