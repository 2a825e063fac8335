//! What the four Wasm stages share: whether a filter's `match` selects a
//! request, how an outcome is logged (distinct lines for answer, error,
//! trap, timeout and exhaustion; the long ones, a trap's backtrace above
//! all, at most once per filter per [`LOG_INTERVAL`]) and traced for
//! `wasmgate try` (with where an answer came from: the filter or its
//! decision cache), and how a failure policy turns a failed filter into a
//! skip or a Status.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use opentelemetry::KeyValue;
use opentelemetry::trace::{Span as _, SpanKind, Status};
use serde::Serialize;

use crate::config::stages::{FailurePolicy, FilterMatch, FilterSpec, Isolation, Mode};
use crate::decision_cache::Lookup;
use crate::request_info::RequestInfo;
use crate::status::GatewayError;
use crate::traces::TraceContext;
use crate::wasm::{Call, Outcome};

/// A record of every filter call of one request; present only when someone
/// asked for it (`wasmgate try`), so serving requests pays nothing for it.
#[derive(Clone, Default)]
pub(crate) struct FilterTrace(pub Arc<Mutex<Vec<TraceEntry>>>);

#[derive(Debug, Clone, Serialize)]
pub(crate) struct TraceEntry {
    pub stage: &'static str,
    pub filter: String,
    /// `answer`, `error`, `trap`, `timeout`, `exhausted`, or `skipped`
    /// (not matched).
    pub outcome: &'static str,
    /// The answer or the message, in a few words.
    pub detail: String,
    pub micros: u64,
    /// For a filter with a decision cache: `hit` (the filter was not
    /// called), `merged` (another request's call answered), `miss`, or
    /// `too-large` (the key material was over 10 KB: not cached).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<&'static str>,
}

impl FilterTrace {
    pub(crate) fn entries(&self) -> Vec<TraceEntry> {
        self.0
            .lock()
            .map(|entries| entries.clone())
            .unwrap_or_default()
    }
}

/// Who watches a request's filter calls, each only when present: `wasmgate
/// try`'s record and the request's trace (when sampled).
#[derive(Clone, Default)]
pub(crate) struct Watchers {
    pub record: Option<FilterTrace>,
    pub span: Option<TraceContext>,
}

impl Watchers {
    /// The watchers a request's extensions name.
    pub(crate) fn of(extensions: &http::Extensions) -> Watchers {
        Watchers {
            record: extensions.get::<FilterTrace>().cloned(),
            span: extensions
                .get::<TraceContext>()
                .filter(|context| context.sampled())
                .cloned(),
        }
    }
}

/// The word a trace gives a filter's answer: kube's decision (`allow`,
/// `deny`, `no-opinion`) where the stage has one.
pub(crate) trait Answer {
    fn word(&self) -> &'static str;
}

/// True when every non-empty list of the filter's `match` admits the request.
pub(crate) fn selects(matcher: &FilterMatch, info: &RequestInfo) -> bool {
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

/// Logs one call's outcome, with the filter's name, traces it when asked
/// and makes its span when the request is traced.
pub(crate) fn observe<T: Answer>(
    stage: &'static str,
    spec: &FilterSpec,
    (call, lookup): (&Call<T>, Lookup),
    answer: impl FnOnce(&T) -> String,
    elapsed: Duration,
    watchers: &Watchers,
) {
    if let Some(context) = &watchers.span {
        filter_span(context, stage, spec, (call, lookup), elapsed);
    }
    let trace = watchers.record.as_ref();
    let cache = lookup.word();
    let filter = spec.name.as_str();
    let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
    let outcome = &call.outcome;
    let detail = match outcome {
        Outcome::Answer(value) => {
            // An answer is described only for someone to read it: the debug
            // log or a trace (`wasmgate try`). Formatting it costs more than
            // the rest of this function.
            if trace.is_none() && !tracing::enabled!(tracing::Level::DEBUG) {
                return;
            }
            let detail = answer(value);
            tracing::debug!(stage, filter, micros, cache, answer = %detail, "filter answered");
            detail
        }
        Outcome::FilterError(message) => {
            tracing::warn!(stage, filter, micros, error = %message, "filter returned an error");
            message.clone()
        }
        Outcome::Trap(message) => {
            if let Some(suppressed) = THROTTLE.admit(filter, "trap") {
                tracing::error!(stage, filter, micros, suppressed, trap = %message, "filter trapped");
            }
            message.clone()
        }
        Outcome::Timeout => {
            tracing::error!(stage, filter, timeout = ?spec.timeout, "filter timed out");
            format!("stopped after {:?}", spec.timeout)
        }
        Outcome::Exhausted(what) => {
            if let Some(suppressed) = THROTTLE.admit(filter, "exhausted") {
                tracing::warn!(stage, filter, micros, suppressed, exhausted = %what, "no room to run the filter");
            }
            what.to_string()
        }
    };
    record(trace, stage, spec, outcome.kind(), detail, micros, cache);
}

/// The span of one filter call, which ended just now after `elapsed`:
/// the filter, its stage, what it came to (its answer's word, or `error`,
/// `trap`, `timeout`, `exhausted`), its isolation, what its decision cache
/// did (when it has one) and, when this request ran the filter, whether
/// the instance was new. An answer from the cache (`hit`, or `merged` from
/// a concurrent request's call) gets a span too, with no instance: the
/// trace then shows the stage answered without a call.
fn filter_span<T: Answer>(
    context: &TraceContext,
    stage: &'static str,
    spec: &FilterSpec,
    (call, lookup): (&Call<T>, Lookup),
    elapsed: Duration,
) {
    let ended = SystemTime::now();
    let outcome = match &call.outcome {
        Outcome::Answer(answer) => answer.word(),
        unanswered => unanswered.kind(),
    };
    let isolation = match spec.isolation {
        Isolation::PerRequest => "per-request",
        Isolation::Pooled => "pooled",
    };
    let mut attributes = vec![
        KeyValue::new("wasmgate.filter.name", spec.name.to_string()),
        KeyValue::new("wasmgate.filter.stage", stage),
        KeyValue::new("wasmgate.filter.outcome", outcome),
        KeyValue::new("wasmgate.filter.isolation", isolation),
    ];
    if let Some(cache) = lookup.word() {
        attributes.push(KeyValue::new("wasmgate.filter.cache", cache));
    }
    // A kept call's instance was the one of the request that filled the cache.
    if !matches!(lookup, Lookup::Hit | Lookup::Merged) {
        attributes.push(KeyValue::new("wasmgate.filter.fresh_instance", call.fresh));
    }
    let mut span = context.child(
        format!("{stage}/{}", spec.name),
        SpanKind::Internal,
        Some(ended - elapsed),
        attributes,
    );
    let failure = match &call.outcome {
        Outcome::Answer(_) => None,
        Outcome::FilterError(message) | Outcome::Trap(message) => Some(message.clone()),
        Outcome::Timeout => Some(format!("stopped after {:?}", spec.timeout)),
        Outcome::Exhausted(what) => Some(what.to_string()),
    };
    if let Some(message) = failure {
        span.set_status(Status::error(message));
    }
    span.end_with_timestamp(ended);
}

/// How often each filter may log a trap (a multi-line backtrace) or its
/// running out of room: the first of an interval is logged, with how many
/// were left out since the last one logged; the rest are only counted, in
/// `wasmgate_filter_calls_total`. A faulting filter under load thus writes
/// a few lines a minute, not one per request.
pub(crate) const LOG_INTERVAL: Duration = Duration::from_secs(10);

static THROTTLE: LogThrottle = LogThrottle(OnceLock::new());

/// When each filter last logged each kind of line, and what it left out since.
struct LogThrottle(OnceLock<Mutex<HashMap<(String, &'static str), Window>>>);

struct Window {
    logged_at: Instant,
    suppressed: u64,
}

impl LogThrottle {
    /// Some(lines left out since the last one) when `filter` may log a
    /// `kind` line now; None when this one is left out (and counted).
    fn admit(&self, filter: &str, kind: &'static str) -> Option<u64> {
        let now = Instant::now();
        let mut windows = self.0.get_or_init(Mutex::default).lock().ok()?;
        let Some(window) = windows.get_mut(&(filter.to_owned(), kind)) else {
            let fresh = Window {
                logged_at: now,
                suppressed: 0,
            };
            windows.insert((filter.to_owned(), kind), fresh);
            return Some(0);
        };
        if now.duration_since(window.logged_at) < LOG_INTERVAL {
            window.suppressed += 1;
            return None;
        }
        window.logged_at = now;
        Some(std::mem::take(&mut window.suppressed))
    }
}

/// Notes in the trace that a filter's `match` left it out.
pub(crate) fn skipped(stage: &'static str, spec: &FilterSpec, watchers: &Watchers) {
    record(
        watchers.record.as_ref(),
        stage,
        spec,
        "skipped",
        "not selected by match".to_owned(),
        0,
        None,
    );
}

fn record(
    trace: Option<&FilterTrace>,
    stage: &'static str,
    spec: &FilterSpec,
    outcome: &'static str,
    detail: String,
    micros: u64,
    cache: Option<&'static str>,
) {
    if let Some(mut entries) = trace.and_then(|trace| trace.0.lock().ok()) {
        entries.push(TraceEntry {
            stage,
            filter: spec.name.to_string(),
            outcome,
            detail,
            micros,
            cache,
        });
    }
}

/// What a failed filter (its own error where the stage treats that as a
/// failure, a trap, a timeout) or one there was no room to run does to the
/// request.
pub(crate) enum Failure {
    /// fail-open: go on as if the filter were not there.
    Skip,
    /// fail-closed: the request ends with this Status.
    Fail(GatewayError),
}

pub(crate) fn on_failure<T>(
    stage: &'static str,
    spec: &FilterSpec,
    outcome: &Outcome<T>,
) -> Failure {
    // The gateway's capacity, not the filter's failure: its failure policy
    // does not apply. A monitor filter, never obeyed, is skipped below.
    if let (Outcome::Exhausted(_), Mode::Enforce) = (outcome, spec.mode) {
        return Failure::Fail(at_capacity(stage));
    }
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

/// The 429 of a stage that had no room to run a filter; kube's
/// max-in-flight and priority and fairness ask for a retry after a second
/// (`staging/src/k8s.io/apiserver/pkg/server/filters/maxinflight.go`).
fn at_capacity(stage: &'static str) -> GatewayError {
    GatewayError::TooManyRequests {
        message: format!("the {stage} stage is at capacity, please try again later"),
        retry_after_seconds: 1,
    }
}
