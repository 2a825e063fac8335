//! What the four Wasm stages share: whether a filter's `match` selects a
//! request, how an outcome is logged (four distinct lines for answer, error,
//! trap and timeout) and traced for `wasmgate try`, and how a failure policy
//! turns a failed filter into a skip or a Status.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use crate::config::stages::{FailurePolicy, FilterMatch, FilterSpec, Mode};
use crate::request_info::RequestInfo;
use crate::status::GatewayError;
use crate::wasm::Outcome;

/// A record of every filter call of one request; present only when someone
/// asked for it (`wasmgate try`), so serving requests pays nothing for it.
#[derive(Clone, Default)]
pub struct FilterTrace(pub Arc<Mutex<Vec<TraceEntry>>>);

#[derive(Debug, Clone, Serialize)]
pub struct TraceEntry {
    pub stage: &'static str,
    pub filter: String,
    /// `answer`, `error`, `trap`, `timeout`, or `skipped` (not matched).
    pub outcome: &'static str,
    /// The answer or the message, in a few words.
    pub detail: String,
    pub micros: u64,
}

impl FilterTrace {
    pub fn entries(&self) -> Vec<TraceEntry> {
        self.0
            .lock()
            .map(|entries| entries.clone())
            .unwrap_or_default()
    }
}

/// True when every non-empty list of the filter's `match` admits the request.
pub fn selects(matcher: &FilterMatch, info: &RequestInfo) -> bool {
    let listed = |list: &[String], value: &str| {
        list.is_empty() || list.iter().any(|item| item == "*" || item == value)
    };
    (matcher.path_prefixes.is_empty()
        || matcher
            .path_prefixes
            .iter()
            .any(|prefix| info.path.starts_with(prefix)))
        && listed(&matcher.api_groups, &info.api_group)
        && listed(&matcher.resources, &info.resource)
        && listed(&matcher.verbs, &info.verb)
        && listed(&matcher.namespaces, &info.namespace)
}

/// Logs one call's outcome, with the filter's name, and traces it when asked.
pub fn observe<T>(
    stage: &'static str,
    spec: &FilterSpec,
    outcome: &Outcome<T>,
    answer: impl FnOnce(&T) -> String,
    elapsed: Duration,
    trace: Option<&FilterTrace>,
) {
    let filter = spec.name.as_str();
    let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
    let detail = match outcome {
        Outcome::Answer(value) => {
            // An answer is described only for someone to read it: the debug
            // log or a trace (`wasmgate try`). Formatting it costs more than
            // the rest of this function.
            if trace.is_none() && !tracing::enabled!(tracing::Level::DEBUG) {
                return;
            }
            let detail = answer(value);
            tracing::debug!(stage, filter, micros, answer = %detail, "filter answered");
            detail
        }
        Outcome::FilterError(message) => {
            tracing::warn!(stage, filter, micros, error = %message, "filter returned an error");
            message.clone()
        }
        Outcome::Trap(message) => {
            tracing::error!(stage, filter, micros, trap = %message, "filter trapped");
            message.clone()
        }
        Outcome::Timeout => {
            tracing::error!(stage, filter, timeout = ?spec.timeout, "filter timed out");
            format!("stopped after {:?}", spec.timeout)
        }
    };
    record(trace, stage, spec, outcome.kind(), detail, micros);
}

/// Notes in the trace that a filter's `match` left it out.
pub fn skipped(stage: &'static str, spec: &FilterSpec, trace: Option<&FilterTrace>) {
    record(
        trace,
        stage,
        spec,
        "skipped",
        "not selected by match".to_owned(),
        0,
    );
}

fn record(
    trace: Option<&FilterTrace>,
    stage: &'static str,
    spec: &FilterSpec,
    outcome: &'static str,
    detail: String,
    micros: u64,
) {
    if let Some(mut entries) = trace.and_then(|trace| trace.0.lock().ok()) {
        entries.push(TraceEntry {
            stage,
            filter: spec.name.to_string(),
            outcome,
            detail,
            micros,
        });
    }
}

/// What a failed filter (its own error where the stage treats that as a
/// failure, a trap, a timeout) does to the request.
pub enum Failure {
    /// fail-open: go on as if the filter were not there.
    Skip,
    /// fail-closed: the request ends with this Status.
    Fail(GatewayError),
}

pub fn on_failure<T>(stage: &'static str, spec: &FilterSpec, outcome: &Outcome<T>) -> Failure {
    if spec.mode == Mode::Monitor {
        tracing::warn!(
            stage,
            filter = spec.name.as_str(),
            outcome = outcome.kind(),
            "monitor mode: failed filter skipped"
        );
        return Failure::Skip;
    }
    match spec.failure_policy {
        FailurePolicy::FailOpen => {
            tracing::warn!(
                stage,
                filter = spec.name.as_str(),
                outcome = outcome.kind(),
                "failure policy fail-open: filter skipped"
            );
            Failure::Skip
        }
        // No internal detail for the client: the log has it.
        FailurePolicy::FailClosed => Failure::Fail(match outcome {
            Outcome::Timeout => GatewayError::ServiceUnavailable {
                message: format!("the {stage} stage did not answer in time"),
            },
            _ => GatewayError::internal(format!("the {stage} stage failed")),
        }),
    }
}
