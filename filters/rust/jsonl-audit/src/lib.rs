//! `jsonl-audit`: writes each audit event to the sink as one Kubernetes
//! `audit.k8s.io/v1` `Event` JSON object per line, a batch at a time. The rendering lives in
//! [`logic`], unit-tested on the host target.

mod logic;

wit_bindgen::generate!({
    path: "../../../wit/filter-0.2.0.wit",
    world: "auditor-filter",
});

use exports::wasmgate::filter::auditor::{Event, Guest};
use wasmgate::filter::types::LogLevel;
use wasmgate::filter::{host, sink};

struct Filter;

impl Guest for Filter {
    /// Every event is written, even after one that failed; the first
    /// failure is the batch's answer.
    fn audit_batch(events: Vec<Event>) -> Result<(), String> {
        let mut first_failure = Ok(());
        for event in &events {
            if let Err(message) = audit(event) {
                first_failure = first_failure.and(Err(message));
            }
        }
        first_failure
    }
}

/// Writes one event's line.
fn audit(event: &Event) -> Result<(), String> {
    let config = match config() {
        Ok(config) => config,
        Err(message) => {
            host::log(LogLevel::Error, &message);
            return Err(message);
        }
    };
    let rendered = logic::render(config, event)?;
    for warning in &rendered.warnings {
        host::log(LogLevel::Warn, warning);
    }
    let Some(line) = rendered.line else {
        return Ok(());
    };
    sink::write(&line).map_err(|e| {
        let message = format!("jsonl-audit: cannot write event {}: {e}", event.audit_id);
        host::log(LogLevel::Error, &message);
        message
    })
}

/// The filter's config, parsed on the instance's first call: a pooled
/// instance serves many calls, all with the same config (a reload makes
/// new instances).
fn config() -> Result<&'static logic::Config, String> {
    static CONFIG: std::sync::OnceLock<Result<logic::Config, String>> = std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| logic::Config::parse(&host::config()))
        .as_ref()
        .map_err(Clone::clone)
}

export!(Filter);
