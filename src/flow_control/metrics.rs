//! kube's flow-control metrics, by kube's names and labels
//! (`util/flowcontrol/metrics/metrics.go`), in a registry of their own
//! without the `wasmgate_` prefix; `/metrics` serves them after the
//! gateway's own. Process-wide like the rest: the series of a level or
//! schema live on across reloads. Each schema's handles are fetched once,
//! when a configuration is built, so a request touches no label map.

use std::sync::OnceLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::queueset::RejectReason;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LevelSchema {
    priority_level: String,
    flow_schema: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Level {
    priority_level: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Rejected {
    priority_level: String,
    flow_schema: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Waited {
    priority_level: String,
    flow_schema: String,
    /// `true` when the request went on to execute.
    execute: String,
}

struct Families {
    registry: Registry,
    executing: Family<LevelSchema, Gauge>,
    in_queue: Family<LevelSchema, Gauge>,
    dispatched: Family<LevelSchema, Counter>,
    rejected: Family<Rejected, Counter>,
    wait: Family<Waited, Histogram>,
    nominal_limit: Family<Level, Gauge>,
    current_limit: Family<Level, Gauge>,
}

/// kube's buckets for the queue wait.
fn wait_histogram() -> Histogram {
    Histogram::new([
        0.0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0,
    ])
}

fn families() -> &'static Families {
    static FAMILIES: OnceLock<Families> = OnceLock::new();
    FAMILIES.get_or_init(|| {
        let mut registry = Registry::default();
        let executing = Family::<LevelSchema, Gauge>::default();
        registry.register(
            "apiserver_flowcontrol_current_executing_requests",
            "Number of requests in initial (for a WATCH) or any (for a non-WATCH) execution stage",
            executing.clone(),
        );
        let in_queue = Family::<LevelSchema, Gauge>::default();
        registry.register(
            "apiserver_flowcontrol_current_inqueue_requests",
            "Number of requests currently pending in queues",
            in_queue.clone(),
        );
        let dispatched = Family::<LevelSchema, Counter>::default();
        registry.register(
            "apiserver_flowcontrol_dispatched_requests",
            "Number of requests executed by API Priority and Fairness subsystem",
            dispatched.clone(),
        );
        let rejected = Family::<Rejected, Counter>::default();
        registry.register(
            "apiserver_flowcontrol_rejected_requests",
            "Number of requests rejected by API Priority and Fairness subsystem",
            rejected.clone(),
        );
        let wait =
            Family::<Waited, Histogram>::new_with_constructor(wait_histogram as fn() -> Histogram);
        registry.register(
            "apiserver_flowcontrol_request_wait_duration_seconds",
            "Length of time a request spent waiting in its queue",
            wait.clone(),
        );
        let nominal_limit = Family::<Level, Gauge>::default();
        registry.register(
            "apiserver_flowcontrol_nominal_limit_seats",
            "Nominal number of execution seats configured for each priority level",
            nominal_limit.clone(),
        );
        let current_limit = Family::<Level, Gauge>::default();
        registry.register(
            "apiserver_flowcontrol_current_limit_seats",
            "current derived number of execution seats available to each priority level",
            current_limit.clone(),
        );
        Families {
            registry,
            executing,
            in_queue,
            dispatched,
            rejected,
            wait,
            nominal_limit,
            current_limit,
        }
    })
}

/// Appends the flow-control metrics to a text exposition (before its
/// `# EOF`).
pub(crate) fn encode(text: &mut String) -> std::fmt::Result {
    prometheus_client::encoding::text::encode_registry(text, &families().registry)
}

/// One schema's series (its level is fixed by the schema).
pub(crate) struct SchemaMetrics {
    pub executing: Gauge,
    pub in_queue: Gauge,
    pub dispatched: Counter,
    /// By kube's label: queue-full, concurrency-limit, time-out.
    rejected: [Counter; 3],
    pub waited_to_execute: Histogram,
    pub waited_in_vain: Histogram,
}

impl SchemaMetrics {
    pub(crate) fn new(level: &str, schema: &str) -> Self {
        let families = families();
        let labels = LevelSchema {
            priority_level: level.to_owned(),
            flow_schema: schema.to_owned(),
        };
        let rejected = |reason: RejectReason| {
            families
                .rejected
                .get_or_create(&Rejected {
                    priority_level: level.to_owned(),
                    flow_schema: schema.to_owned(),
                    reason: reason.label().to_owned(),
                })
                .clone()
        };
        let waited = |execute: bool| {
            families
                .wait
                .get_or_create(&Waited {
                    priority_level: level.to_owned(),
                    flow_schema: schema.to_owned(),
                    execute: execute.to_string(),
                })
                .clone()
        };
        SchemaMetrics {
            executing: families.executing.get_or_create(&labels).clone(),
            in_queue: families.in_queue.get_or_create(&labels).clone(),
            dispatched: families.dispatched.get_or_create(&labels).clone(),
            rejected: [
                rejected(RejectReason::QueueFull),
                rejected(RejectReason::ConcurrencyLimit),
                rejected(RejectReason::TimeOut),
            ],
            waited_to_execute: waited(true),
            waited_in_vain: waited(false),
        }
    }

    pub(crate) fn rejected(&self, reason: RejectReason) -> &Counter {
        let index = match reason {
            RejectReason::QueueFull => 0,
            RejectReason::ConcurrencyLimit => 1,
            RejectReason::TimeOut | RejectReason::Cancelled => 2,
        };
        &self.rejected[index]
    }
}

/// A level's seat gauges.
pub(crate) struct LevelMetrics {
    pub current_limit: Gauge,
}

impl LevelMetrics {
    pub(crate) fn new(level: &str, nominal: usize) -> Self {
        let families = families();
        let labels = Level {
            priority_level: level.to_owned(),
        };
        families
            .nominal_limit
            .get_or_create(&labels)
            .set(i64::try_from(nominal).unwrap_or(i64::MAX));
        let current_limit = families.current_limit.get_or_create(&labels).clone();
        current_limit.set(i64::try_from(nominal).unwrap_or(i64::MAX));
        LevelMetrics { current_limit }
    }
}
