//! Prometheus metrics, served at `/metrics` (behind the chain, as kube
//! serves its own). Process-wide, so they count across reloads. Handles are
//! fetched once per filter at load time; recording a call touches no labels.

use std::sync::OnceLock;

use futures_util::future::BoxFuture;
use http::HeaderValue;
use http::header::CONTENT_TYPE;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::body::{Body, Request, Response};
use crate::handler::Handler;
use crate::status::GatewayError;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct FilterOutcome {
    pub filter: String,
    /// `answer`, `error`, `trap`, `timeout` or `exhausted`.
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct FilterName {
    pub filter: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct Source {
    /// `compiled`, `memory` or `disk`.
    pub source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReloadResult {
    /// `success` or `failure`.
    pub result: String,
}

pub(crate) struct Metrics {
    registry: Registry,
    pub filter_calls: Family<FilterOutcome, Counter>,
    pub filter_duration: Family<FilterName, Histogram>,
    pub components: Family<Source, Counter>,
    pub audit_events_dropped: Counter,
    pub audit_batches: Counter,
    pub cache_hits: Family<FilterName, Counter>,
    pub cache_misses: Family<FilterName, Counter>,
    pub cache_evictions: Family<FilterName, Counter>,
    pub cache_entries: Family<FilterName, Gauge>,
    pub config_reloads: Family<ReloadResult, Counter>,
    pub config_last_reload_success: Gauge,
    /// The etcd revision of the manifest in force (0 for a manifest file).
    pub config_revision: Gauge,
}

fn filter_duration_histogram() -> Histogram {
    // 1 µs to ~4 s.
    Histogram::new(exponential_buckets(1e-6, 4.0, 12))
}

/// This process's metrics as `/metrics` serves them, for tests and benches
/// that run gateways in-process and read the counters without a request
/// (which would itself pass through the filters it counts).
pub fn exposition() -> String {
    metrics().encode()
}

/// The process's metrics.
pub(crate) fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(|| {
        let mut registry = Registry::with_prefix("wasmgate");
        let filter_calls = Family::<FilterOutcome, Counter>::default();
        registry.register(
            "filter_calls",
            "Filter calls by outcome: answer, error, trap, timeout, exhausted (no instance or filter memory to run it)",
            filter_calls.clone(),
        );
        let filter_duration = Family::<FilterName, Histogram>::new_with_constructor(
            filter_duration_histogram as fn() -> Histogram,
        );
        registry.register(
            "filter_call_duration_seconds",
            "Time of one filter call, instantiation included",
            filter_duration.clone(),
        );
        let components = Family::<Source, Counter>::default();
        registry.register(
            "components_loaded",
            "Components made ready, by where the compiled code came from",
            components.clone(),
        );
        let audit_events_dropped = Counter::default();
        registry.register(
            "audit_events_dropped",
            "Audit events dropped because the batch queue was full",
            audit_events_dropped.clone(),
        );
        let audit_batches = Counter::default();
        registry.register(
            "audit_batches",
            "Batches of audit events handed to the audit filters (one per event in blocking mode)",
            audit_batches.clone(),
        );
        let cache_hits = Family::<FilterName, Counter>::default();
        registry.register(
            "decision_cache_hits",
            "Requests a filter's decision cache answered without calling the filter (a hit, or a miss merged into another request's call)",
            cache_hits.clone(),
        );
        let cache_misses = Family::<FilterName, Counter>::default();
        registry.register(
            "decision_cache_misses",
            "Requests for which a filter with a decision cache was called",
            cache_misses.clone(),
        );
        let cache_evictions = Family::<FilterName, Counter>::default();
        registry.register(
            "decision_cache_evictions",
            "Live entries a full decision cache dropped to make room",
            cache_evictions.clone(),
        );
        let cache_entries = Family::<FilterName, Gauge>::default();
        registry.register(
            "decision_cache_entries",
            "Entries a filter's decision cache holds",
            cache_entries.clone(),
        );
        let config_reloads = Family::<ReloadResult, Counter>::default();
        registry.register(
            "config_reload",
            "Configuration reloads by result",
            config_reloads.clone(),
        );
        let config_last_reload_success = Gauge::default();
        registry.register(
            "config_last_reload_success_timestamp_seconds",
            "When the configuration was last loaded successfully (Unix time)",
            config_last_reload_success.clone(),
        );
        let config_revision = Gauge::default();
        registry.register(
            "config_revision",
            "The etcd revision of the manifest in force, for a gateway run from the fleet's etcd (0 for a manifest file)",
            config_revision.clone(),
        );
        Metrics {
            registry,
            filter_calls,
            filter_duration,
            components,
            audit_events_dropped,
            audit_batches,
            cache_hits,
            cache_misses,
            cache_evictions,
            cache_entries,
            config_reloads,
            config_last_reload_success,
            config_revision,
        }
    })
}

impl Metrics {
    /// The text exposition of every metric: the gateway's, then kube's
    /// flow-control series (`crate::flow_control::metrics`).
    pub(crate) fn encode(&self) -> String {
        use prometheus_client::encoding::text::{encode_eof, encode_registry};
        let mut text = String::new();
        let encoded = encode_registry(&mut text, &self.registry)
            .and_then(|()| crate::flow_control::metrics::encode(&mut text))
            .and_then(|()| encode_eof(&mut text));
        if encoded.is_err() {
            tracing::error!("cannot encode the metrics");
        }
        text
    }
}

/// The `/metrics` endpoint.
pub(crate) struct MetricsEndpoint;

impl Handler for MetricsEndpoint {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        let response =
            if request.method() == http::Method::GET || request.method() == http::Method::HEAD {
                let mut response = http::Response::new(Body::full(metrics().encode()));
                response.headers_mut().insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static(
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    ),
                );
                response
            } else {
                GatewayError::MethodNotAllowed.into_response()
            };
        Box::pin(async move { response })
    }
}
