//! `{{name}}`: an auditor (world `auditor-filter`), scaffolded by
//! `wasmgate new-filter`. As scaffolded it writes one JSON line per event to
//! its sink: choose what to record in `audit`. The gateway hands over the
//! events in batches (`audit_batch`), in the order they happened.

wit_bindgen::generate!({
    path: "{{wit}}",
    world: "auditor-filter",
});

use exports::wasmgate::filter::auditor::{Event, Guest, Stage};
use wasmgate::filter::types::LogLevel;
use wasmgate::filter::{host, sink};

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
    fn audit_batch(events: Vec<Event>) -> Result<(), String> {
        // `Err` is logged and counted; audit never fails a request.
        let config = config()?;
        events.iter().try_for_each(|event| audit(event, &config))
    }
}

/// Writes one event's line.
fn audit(event: &Event, config: &serde_json::Map<String, serde_json::Value>) -> Result<(), String> {
    let stage = match event.stage {
        Stage::RequestReceived => "RequestReceived",
        Stage::ResponseStarted => "ResponseStarted",
        Stage::ResponseComplete => "ResponseComplete",
        Stage::Panic => "Panic",
    };
    let record = serde_json::json!({
        "auditID": event.audit_id,
        "stage": stage,
        "verb": event.verb,
        "requestURI": event.request_uri,
        "user": event.user.name,
        "code": event.response_status.as_ref().map(|status| status.code),
    });
    // Formatted only when the gateway's log keeps debug lines.
    if host::log_enabled(LogLevel::Debug) {
        host::log(LogLevel::Debug, &format!("event {} (config: {} keys)", event.audit_id, config.len()));
    }
    sink::write(&record.to_string())
}

export!(Filter);
