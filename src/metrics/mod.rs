//! Prometheus metrics, served at `/metrics` (behind the chain, as kube
//! serves its own). Process-wide, so they count across reloads. Handles are
//! fetched once per filter at load time; recording a call touches no labels.
//!
//! kube's own metrics keep kube's names ([`request`], [`stages`], and flow
//! control's, `crate::flow_control::metrics`); what the gateway adds is
//! under `wasmgate_` (the filters' and reloads' below, [`gateway`]).
//! docs/observability.md lists every one with its labels.

pub(crate) mod gateway;
pub(crate) mod request;
pub(crate) mod stages;

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
    pub requests: request::RequestMetrics,
    pub stages: stages::StageMetrics,
    pub gateway: gateway::GatewayMetrics,
    pub filter_calls: Family<FilterOutcome, Counter>,
    pub filter_duration: Family<FilterName, Histogram>,
    pub components: Family<Source, Counter>,
    pub config_reloads: Family<ReloadResult, Counter>,
    pub config_last_reload_success: Gauge,
    /// The etcd revision of the manifest in force (0 for a manifest file).
    pub config_revision: Gauge,
    /// When the fleet's manifest watch went down (0 while it watches).
    pub config_watch_down_since: Gauge,
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
        let mut root = Registry::default();
        let requests = request::RequestMetrics::register(&mut root);
        let stages = stages::StageMetrics::register(&mut root);
        let registry = root.sub_registry_with_prefix("wasmgate");
        let gateway = gateway::GatewayMetrics::register(registry);
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
        let config_watch_down_since = Gauge::default();
        registry.register(
            "config_watch_down_since_timestamp_seconds",
            "When the fleet's manifest watch failed and was not established again (Unix time): the revision in force may be stale; 0 while it watches, or for a manifest file",
            config_watch_down_since.clone(),
        );
        Metrics {
            registry: root,
            requests,
            stages,
            gateway,
            filter_calls,
            filter_duration,
            components,
            config_reloads,
            config_last_reload_success,
            config_revision,
            config_watch_down_since,
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
