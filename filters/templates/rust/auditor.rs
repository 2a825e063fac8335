//! `{{name}}`: an auditor (world `auditor-filter`), scaffolded by
//! `wasmgate new-filter`. As scaffolded it writes one JSON line per event to
//! its sink: choose what to record in `audit`. The gateway hands over the
//! events in batches (`audit_batch`), in the order they happened.

use serde::Deserialize;
use wasmgate_filter::auditor::{self, Event, Guest, Stage, sink};
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
    fn audit_batch(events: Vec<Event>) -> Result<(), String> {
        // `Err` is logged and counted; audit never fails a request.
        let config = wasmgate_filter::config::<Config>()?;
        events.iter().try_for_each(|event| audit(event, config))
    }
}

/// Writes one event's line.
fn audit(event: &Event, config: &Config) -> Result<(), String> {
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
    debug!("event {} (config: {} keys)", event.audit_id, config.0.len());
    sink::write(&record.to_string())
}

auditor::export!(Filter);
