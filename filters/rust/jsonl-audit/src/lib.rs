//! `jsonl-audit`: writes each audit event to the sink as one Kubernetes
//! `audit.k8s.io/v1` `Event` JSON object per line, a batch at a time. The
//! rendering lives in [`logic`], unit-tested on the host target.

mod logic;

use wasmgate_filter::auditor::{self, Event, Guest, sink};
use wasmgate_filter::{error, warn};

struct Filter;

impl Guest for Filter {
    /// Every event is written, even after one that failed; the first
    /// failure is the batch's answer.
    fn audit_batch(events: Vec<Event>) -> Result<(), String> {
        let config = wasmgate_filter::config::<logic::Config>()?;
        let mut first_failure = Ok(());
        for event in &events {
            if let Err(message) = audit(config, event) {
                first_failure = first_failure.and(Err(message));
            }
        }
        first_failure
    }
}

/// Writes one event's line.
fn audit(config: &logic::Config, event: &Event) -> Result<(), String> {
    let rendered = logic::render(config, event)?;
    for warning in &rendered.warnings {
        warn!("{warning}");
    }
    let Some(line) = rendered.line else {
        return Ok(());
    };
    sink::write(&line).map_err(|e| {
        let message = format!("jsonl-audit: cannot write event {}: {e}", event.audit_id);
        error!("{message}");
        message
    })
}

auditor::export!(Filter);
