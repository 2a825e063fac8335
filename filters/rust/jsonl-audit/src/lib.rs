//! `jsonl-audit`: writes each audit event to the sink as one Kubernetes
//! `audit.k8s.io/v1` `Event` JSON object per line. The rendering lives in
//! [`logic`], unit-tested on the host target.

mod logic;

use wasmgate_filter::auditor::{self, Event, Guest, sink};
use wasmgate_filter::{error, warn};

struct Filter;

impl Guest for Filter {
    fn audit(event: Event) -> Result<(), String> {
        let config = wasmgate_filter::config::<logic::Config>()?;
        let rendered = logic::render(config, &event)?;
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
}

auditor::export!(Filter);
