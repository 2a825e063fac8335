//! `{{name}}`: a json auditor (world `json-auditor-filter`), scaffolded by
//! `wasmgate new-filter`. The gateway hands over a batch of events already
//! serialised, as Kubernetes' log backend writes them
//! (`--audit-log-format=json`): `batch.lines` holds one `audit.k8s.io/v1`
//! `Event` JSON object a line, each ending in `\n`, and `batch.stages` each
//! line's stage, in order. As scaffolded it appends the lines to its sink as
//! they are, in one `write_lines` call: drop some by their stages, or
//! forward them elsewhere, in `audit_json_lines`.

use serde::Deserialize;
use wasmgate_filter::json_auditor::{self, Guest, JsonBatch, sink};
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
    fn audit_json_lines(batch: JsonBatch) -> Result<(), String> {
        // `Err` is logged and counted; audit never fails a request.
        let config = wasmgate_filter::config::<Config>()?;
        // Formatted only when the gateway's log keeps debug lines.
        debug!(
            "{} lines (config: {} keys)",
            batch.stages.len(),
            config.0.len()
        );
        // Whole lines, appended as they are; an empty batch writes nothing.
        sink::write_lines(&batch.lines)
    }
}

json_auditor::export!(Filter);
