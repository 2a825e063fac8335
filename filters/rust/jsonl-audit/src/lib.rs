//! `jsonl-audit`: appends the gateway's audit events to the sink as
//! Kubernetes' log backend writes them (`--audit-log-format=json`: one
//! `audit.k8s.io/v1` `Event` JSON object per line). The gateway renders
//! the lines (world `json-auditor-filter`); the filter appends a batch in
//! one sink call, less the lines of the stages its config omits ([`logic`],
//! unit-tested on the host target).

mod logic;

use wasmgate_filter::error;
use wasmgate_filter::json_auditor::{self, Guest, JsonBatch, sink};

struct Filter;

impl Guest for Filter {
    fn audit_json_lines(batch: JsonBatch) -> Result<(), String> {
        let config = wasmgate_filter::config::<logic::Config>()?;
        let lines = logic::kept_lines(config, &batch)?;
        if lines.is_empty() {
            return Ok(());
        }
        sink::write_lines(&lines).map_err(|e| {
            let message = format!(
                "jsonl-audit: cannot write a batch of {} events: {e}",
                batch.stages.len()
            );
            error!("{message}");
            message
        })
    }
}

json_auditor::export!(Filter);
