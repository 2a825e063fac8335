//! What a gateway adds to kube's metrics, under `wasmgate_`: upstream
//! requests, errors and latency per server, route and upstream; upstream
//! connections opened and idle in the pool; TLS handshakes by result; the
//! chain's generation; each pooled filter's idle instances and retirements;
//! each filter's decision cache (hits, misses, evictions, entries); the
//! audit batches written; the OpenAPI v3 group versions an aggregated
//! upstream lists past the most the gateway takes. Every label value comes from the manifest or is
//! one of a few fixed words, so the series are bounded by the
//! configuration.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::config::RouteMatch;

/// The upstream latency buckets: kube's request buckets with finer steps
/// below 5 ms, where a loopback upstream answers.
const UPSTREAM_BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RouteLabels {
    pub server: Arc<str>,
    /// The route's match, as the manifest writes it (`/apis/demo.example.io`).
    pub route: Arc<str>,
    pub upstream: Arc<str>,
}

impl RouteLabels {
    pub(crate) fn new(server: &str, route: &RouteMatch, upstream: &http::Uri) -> Self {
        RouteLabels {
            server: Arc::from(server),
            route: Arc::from(route.path()),
            upstream: Arc::from(upstream.to_string()),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CodeLabels {
    #[prometheus(flatten)]
    pub route: RouteLabels,
    /// The upstream's status code class: `2xx` ... `5xx`.
    pub code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ErrorLabels {
    #[prometheus(flatten)]
    pub route: RouteLabels,
    /// `connect` (503), `exchange` (502) or `timeout` (504).
    pub error: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct UpstreamLabel {
    pub upstream: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ResultLabel {
    /// `success`, `failure` or `timeout`.
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct FilterLabel {
    pub filter: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RetirementLabels {
    pub filter: String,
    /// `memory` (grew past three quarters of its cap) or `trap`.
    pub reason: &'static str,
}

pub(crate) struct GatewayMetrics {
    upstream_requests: Family<CodeLabels, Counter>,
    upstream_errors: Family<ErrorLabels, Counter>,
    upstream_duration: Family<RouteLabels, Histogram, fn() -> Histogram>,
    upstream_connections: Family<UpstreamLabel, Counter>,
    upstream_idle: Family<UpstreamLabel, Gauge>,
    tls_handshakes: Family<ResultLabel, Counter>,
    pub chain_generation: Gauge,
    pub filter_idle: Family<FilterLabel, Gauge>,
    pub filter_retirements: Family<RetirementLabels, Counter>,
    pub cache_hits: Family<FilterLabel, Counter>,
    pub cache_misses: Family<FilterLabel, Counter>,
    pub cache_evictions: Family<FilterLabel, Counter>,
    pub cache_entries: Family<FilterLabel, Gauge>,
    pub audit_batches: Counter,
    openapi_v3_dropped: Family<UpstreamLabel, Gauge>,
    /// How many running refreshes ask each upstream (one per snapshot that
    /// aggregates it): its `openapi_v3_dropped` series goes with the last.
    openapi_v3_askers: Mutex<HashMap<Arc<str>, usize>>,
}

fn upstream_histogram() -> Histogram {
    Histogram::new(UPSTREAM_BUCKETS)
}

impl GatewayMetrics {
    /// Registers under `registry`, which carries the `wasmgate` prefix.
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let metrics = GatewayMetrics {
            upstream_requests: Family::default(),
            upstream_errors: Family::default(),
            upstream_duration: Family::new_with_constructor(upstream_histogram),
            upstream_connections: Family::default(),
            upstream_idle: Family::default(),
            tls_handshakes: Family::default(),
            chain_generation: Gauge::default(),
            filter_idle: Family::default(),
            filter_retirements: Family::default(),
            cache_hits: Family::default(),
            cache_misses: Family::default(),
            cache_evictions: Family::default(),
            cache_entries: Family::default(),
            audit_batches: Counter::default(),
            openapi_v3_dropped: Family::default(),
            openapi_v3_askers: Mutex::default(),
        };
        registry.register(
            "upstream_requests",
            "Requests answered by an upstream, by server, route, upstream and status class",
            metrics.upstream_requests.clone(),
        );
        registry.register(
            "upstream_errors",
            "Requests no upstream answered: connect (503), exchange (502), timeout (504)",
            metrics.upstream_errors.clone(),
        );
        registry.register(
            "upstream_request_duration_seconds",
            "Time from sending a request upstream to its response head",
            metrics.upstream_duration.clone(),
        );
        registry.register(
            "upstream_connections_opened",
            "Connections opened to a plain-HTTP upstream (pooled and kept alive after)",
            metrics.upstream_connections.clone(),
        );
        registry.register(
            "upstream_pool_idle_connections",
            "Kept-alive connections to a plain-HTTP upstream waiting idle in its pool",
            metrics.upstream_idle.clone(),
        );
        registry.register(
            "tls_handshakes",
            "TLS handshakes of the listener by result: success, failure, timeout",
            metrics.tls_handshakes.clone(),
        );
        registry.register(
            "chain_generation",
            "The generation of the chain in force: 1 at start, one more per reload applied",
            metrics.chain_generation.clone(),
        );
        registry.register(
            "filter_pool_idle_instances",
            "Idle instances a pooled filter keeps for its next calls",
            metrics.filter_idle.clone(),
        );
        registry.register(
            "filter_instance_retirements",
            "Pooled instances dropped rather than reused: memory (grew past 3/4 of the cap), trap",
            metrics.filter_retirements.clone(),
        );
        registry.register(
            "decision_cache_hits",
            "Requests a filter's decision cache answered without calling the filter (a hit, or a miss merged into another request's call)",
            metrics.cache_hits.clone(),
        );
        registry.register(
            "decision_cache_misses",
            "Requests for which a filter with a decision cache was called",
            metrics.cache_misses.clone(),
        );
        registry.register(
            "decision_cache_evictions",
            "Live entries a full decision cache dropped to make room",
            metrics.cache_evictions.clone(),
        );
        registry.register(
            "decision_cache_entries",
            "Entries a filter's decision cache holds",
            metrics.cache_entries.clone(),
        );
        registry.register(
            "audit_batches",
            "Batches of audit events handed to the audit filters (one per event in blocking mode)",
            metrics.audit_batches.clone(),
        );
        registry.register(
            "openapi_v3_group_versions_dropped",
            "Group versions of an aggregated upstream's /openapi/v3 index past the most the gateway takes, at its last refresh",
            metrics.openapi_v3_dropped.clone(),
        );
        metrics
    }

    /// The series of `upstream` in `wasmgate_openapi_v3_group_versions_dropped`,
    /// for a refresh that asks it: the series is removed when the last such
    /// refresh ends (a reload took the upstream out of the chain and the
    /// old chain is gone), so no series names an upstream the gateway no
    /// longer has.
    pub(crate) fn openapi_v3_series(&'static self, upstream: &str) -> V3DroppedSeries {
        let label = UpstreamLabel {
            upstream: Arc::from(upstream),
        };
        *self
            .openapi_v3_askers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(Arc::clone(&label.upstream))
            .or_default() += 1;
        V3DroppedSeries {
            metrics: self,
            label,
        }
    }

    /// One route's handles, fetched when the route is built.
    pub(crate) fn upstream(&self, labels: RouteLabels) -> UpstreamMetrics {
        let upstream = UpstreamLabel {
            upstream: labels.upstream.clone(),
        };
        let class = |code: &'static str| {
            self.upstream_requests
                .get_or_create(&CodeLabels {
                    route: labels.clone(),
                    code,
                })
                .clone()
        };
        let error = |error: &'static str| {
            self.upstream_errors
                .get_or_create(&ErrorLabels {
                    route: labels.clone(),
                    error,
                })
                .clone()
        };
        UpstreamMetrics {
            classes: ["1xx", "2xx", "3xx", "4xx", "5xx"].map(class),
            errors: ["connect", "exchange", "timeout"].map(error),
            duration: self.upstream_duration.get_or_create(&labels).clone(),
            pool: PoolMetrics {
                opened: self.upstream_connections.get_or_create(&upstream).clone(),
                idle: self.upstream_idle.get_or_create(&upstream).clone(),
            },
        }
    }

    pub(crate) fn tls_handshake(&self, result: &'static str) {
        self.tls_handshakes
            .get_or_create(&ResultLabel { result })
            .inc();
    }
}

/// Why no upstream answered.
#[derive(Clone, Copy, Debug)]
pub(crate) enum UpstreamFailure {
    Connect,
    Exchange,
    Timeout,
}

/// One route's upstream metrics.
pub(crate) struct UpstreamMetrics {
    classes: [Counter; 5],
    errors: [Counter; 3],
    duration: Histogram,
    pub pool: PoolMetrics,
}

/// The pool of one route's plain-HTTP upstream; routes to the same
/// upstream add up in its series.
#[derive(Clone)]
pub(crate) struct PoolMetrics {
    /// Connections opened.
    pub opened: Counter,
    /// Connections idle in the pool now.
    pub idle: Gauge,
}

impl UpstreamMetrics {
    pub(crate) fn answered(&self, status: http::StatusCode, elapsed: std::time::Duration) {
        let class = usize::from(status.as_u16() / 100).clamp(1, 5) - 1;
        self.classes[class].inc();
        self.duration.observe(elapsed.as_secs_f64());
    }

    pub(crate) fn failed(&self, failure: UpstreamFailure) {
        self.errors[failure as usize].inc();
    }
}

/// One refresh's hold on an upstream's series of
/// `wasmgate_openapi_v3_group_versions_dropped`
/// ([`GatewayMetrics::openapi_v3_series`]).
pub(crate) struct V3DroppedSeries {
    metrics: &'static GatewayMetrics,
    label: UpstreamLabel,
}

impl V3DroppedSeries {
    /// The group versions the upstream's index listed past the bound at
    /// the last refresh.
    pub(crate) fn set(&self, dropped: usize) {
        self.metrics
            .openapi_v3_dropped
            .get_or_create(&self.label)
            .set(i64::try_from(dropped).unwrap_or(i64::MAX));
    }
}

impl Drop for V3DroppedSeries {
    fn drop(&mut self) {
        let mut askers = self
            .metrics
            .openapi_v3_askers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(count) = askers.get_mut(&self.label.upstream) else {
            return;
        };
        *count -= 1;
        if *count == 0 {
            askers.remove(&self.label.upstream);
            self.metrics.openapi_v3_dropped.remove(&self.label);
        }
    }
}
