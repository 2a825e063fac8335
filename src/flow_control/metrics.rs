//! kube's flow-control metrics, by kube's names and labels
//! (`util/flowcontrol/metrics/metrics.go`), in a registry of their own
//! without the `wasmgate_` prefix; `/metrics` serves them after the
//! gateway's own. Process-wide like the rest: the series of a level or
//! schema live on across reloads. Each schema's handles are fetched once,
//! when a configuration is built, so a request touches no label map.

use std::sync::OnceLock;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Metric;
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

/// A level's bound (`min` or `max`) over its queues.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Bound {
    priority_level: String,
    bound: String,
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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Executed {
    priority_level: String,
    flow_schema: String,
    /// `watch` for a watch's set-up, `regular` for any other request.
    r#type: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;

struct Families {
    registry: Registry,
    executing: Family<LevelSchema, Gauge>,
    executing_seats: Family<LevelSchema, Gauge>,
    in_queue: Family<LevelSchema, Gauge>,
    in_queue_seats: Family<LevelSchema, Gauge>,
    dispatched: Family<LevelSchema, Counter>,
    rejected: Family<Rejected, Counter>,
    wait: Family<Waited, Histogram>,
    execution: Family<Executed, Histogram>,
    estimated_seats: Family<LevelSchema, Histogram>,
    queue_length: Family<LevelSchema, Histogram>,
    nominal_limit: Family<Level, Gauge>,
    lower_limit: Family<Level, Gauge>,
    upper_limit: Family<Level, Gauge>,
    current_limit: Family<Level, Gauge>,
    demand_high_watermark: Family<Level, FloatGauge>,
    demand_average: Family<Level, FloatGauge>,
    demand_stdev: Family<Level, FloatGauge>,
    demand_smoothed: Family<Level, FloatGauge>,
    target: Family<Level, FloatGauge>,
    no_accommodation: Family<LevelSchema, Counter>,
    current_r: Family<Level, FloatGauge>,
    dispatch_r: Family<Level, FloatGauge>,
    latest_s: Family<Level, FloatGauge>,
    next_s_bounds: Family<Bound, FloatGauge>,
    next_discounted_s_bounds: Family<Bound, FloatGauge>,
    fair_frac: FloatGauge,
}

/// kube's `requestDurationSecondsBuckets`, for the queue wait and the
/// execution.
fn duration_histogram() -> Histogram {
    Histogram::new([
        0.0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0,
    ])
}

/// kube's buckets for `work_estimated_seats`: up to the most seats a
/// request takes, 10.
fn seats_histogram() -> Histogram {
    Histogram::new([1.0, 2.0, 4.0, 10.0])
}

/// kube's `queueLengthBuckets`.
fn queue_length_histogram() -> Histogram {
    Histogram::new([0.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0])
}

fn histograms<S: Clone + std::hash::Hash + Eq>(make: fn() -> Histogram) -> Family<S, Histogram> {
    Family::new_with_constructor(make)
}

/// Registers `metric` under kube's `name` and help text, and hands it back.
fn register<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

fn families() -> &'static Families {
    static FAMILIES: OnceLock<Families> = OnceLock::new();
    FAMILIES.get_or_init(|| {
        let mut registry = Registry::default();
        let r = &mut registry;
        Families {
            executing: register(
                r,
                "apiserver_flowcontrol_current_executing_requests",
                "Number of requests in initial (for a WATCH) or any (for a non-WATCH) execution stage in the API Priority and Fairness subsystem",
                Family::default(),
            ),
            executing_seats: register(
                r,
                "apiserver_flowcontrol_current_executing_seats",
                "Concurrency (number of seats) occupied by the currently executing (initial stage for a WATCH, any stage otherwise) requests in the API Priority and Fairness subsystem",
                Family::default(),
            ),
            in_queue: register(
                r,
                "apiserver_flowcontrol_current_inqueue_requests",
                "Number of requests currently pending in queues of the API Priority and Fairness subsystem",
                Family::default(),
            ),
            in_queue_seats: register(
                r,
                "apiserver_flowcontrol_current_inqueue_seats",
                "Number of seats currently pending in queues of the API Priority and Fairness subsystem",
                Family::default(),
            ),
            dispatched: register(
                r,
                "apiserver_flowcontrol_dispatched_requests",
                "Number of requests executed by API Priority and Fairness subsystem",
                Family::default(),
            ),
            rejected: register(
                r,
                "apiserver_flowcontrol_rejected_requests",
                "Number of requests rejected by API Priority and Fairness subsystem",
                Family::default(),
            ),
            wait: register(
                r,
                "apiserver_flowcontrol_request_wait_duration_seconds",
                "Length of time a request spent waiting in its queue",
                histograms(duration_histogram),
            ),
            execution: register(
                r,
                "apiserver_flowcontrol_request_execution_seconds",
                "Duration of initial stage (for a WATCH) or any (for a non-WATCH) stage of request execution in the API Priority and Fairness subsystem",
                histograms(duration_histogram),
            ),
            estimated_seats: register(
                r,
                "apiserver_flowcontrol_work_estimated_seats",
                "Number of estimated seats (maximum of initial and final seats) associated with requests in API Priority and Fairness",
                histograms(seats_histogram),
            ),
            queue_length: register(
                r,
                "apiserver_flowcontrol_request_queue_length_after_enqueue",
                "Length of queue in the API Priority and Fairness subsystem, as seen by each request after it is enqueued",
                histograms(queue_length_histogram),
            ),
            nominal_limit: register(
                r,
                "apiserver_flowcontrol_nominal_limit_seats",
                "Nominal number of execution seats configured for each priority level",
                Family::default(),
            ),
            lower_limit: register(
                r,
                "apiserver_flowcontrol_lower_limit_seats",
                "Configured lower bound on number of execution seats available to each priority level",
                Family::default(),
            ),
            upper_limit: register(
                r,
                "apiserver_flowcontrol_upper_limit_seats",
                "Configured upper bound on number of execution seats available to each priority level",
                Family::default(),
            ),
            current_limit: register(
                r,
                "apiserver_flowcontrol_current_limit_seats",
                "current derived number of execution seats available to each priority level",
                Family::default(),
            ),
            demand_high_watermark: register(
                r,
                "apiserver_flowcontrol_demand_seats_high_watermark",
                "High watermark, over last adjustment period, of demand_seats",
                Family::default(),
            ),
            demand_average: register(
                r,
                "apiserver_flowcontrol_demand_seats_average",
                "Time-weighted average, over last adjustment period, of demand_seats",
                Family::default(),
            ),
            demand_stdev: register(
                r,
                "apiserver_flowcontrol_demand_seats_stdev",
                "Time-weighted standard deviation, over last adjustment period, of demand_seats",
                Family::default(),
            ),
            demand_smoothed: register(
                r,
                "apiserver_flowcontrol_demand_seats_smoothed",
                "Smoothed seat demands",
                Family::default(),
            ),
            target: register(
                r,
                "apiserver_flowcontrol_target_seats",
                "Seat allocation targets",
                Family::default(),
            ),
            no_accommodation: register(
                r,
                "apiserver_flowcontrol_request_dispatch_no_accommodation",
                "Number of times a dispatch attempt resulted in a non accommodation due to lack of available seats",
                Family::default(),
            ),
            current_r: register(
                r,
                "apiserver_flowcontrol_current_r",
                "R(time of last change)",
                Family::default(),
            ),
            dispatch_r: register(
                r,
                "apiserver_flowcontrol_dispatch_r",
                "R(time of last dispatch)",
                Family::default(),
            ),
            latest_s: register(
                r,
                "apiserver_flowcontrol_latest_s",
                "S(most recently dispatched request)",
                Family::default(),
            ),
            next_s_bounds: register(
                r,
                "apiserver_flowcontrol_next_s_bounds",
                "min and max, over queues, of S(oldest waiting request in queue)",
                Family::default(),
            ),
            next_discounted_s_bounds: register(
                r,
                "apiserver_flowcontrol_next_discounted_s_bounds",
                "min and max, over queues, of S(oldest waiting request in queue) - estimated work in progress",
                Family::default(),
            ),
            fair_frac: register(
                r,
                "apiserver_flowcontrol_seat_fair_frac",
                "Fair fraction of server's concurrency to allocate to each priority level that can use it",
                FloatGauge::default(),
            ),
            registry,
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
    pub executing_seats: Gauge,
    pub in_queue: Gauge,
    pub in_queue_seats: Gauge,
    pub dispatched: Counter,
    /// By kube's label: queue-full, concurrency-limit, time-out.
    rejected: [Counter; 3],
    pub waited_to_execute: Histogram,
    pub waited_in_vain: Histogram,
    /// By kube's `type`: regular, watch.
    executed: [Histogram; 2],
    pub estimated_seats: Histogram,
    pub queue_length: Histogram,
    /// The fairest waiting request of the schema found too few seats free
    /// (kube's `AddDispatchWithNoAccommodation`).
    pub no_accommodation: Counter,
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
        let executed = |kind: &str| {
            families
                .execution
                .get_or_create(&Executed {
                    priority_level: level.to_owned(),
                    flow_schema: schema.to_owned(),
                    r#type: kind.to_owned(),
                })
                .clone()
        };
        SchemaMetrics {
            executing: families.executing.get_or_create(&labels).clone(),
            executing_seats: families.executing_seats.get_or_create(&labels).clone(),
            in_queue: families.in_queue.get_or_create(&labels).clone(),
            in_queue_seats: families.in_queue_seats.get_or_create(&labels).clone(),
            dispatched: families.dispatched.get_or_create(&labels).clone(),
            rejected: [
                rejected(RejectReason::QueueFull),
                rejected(RejectReason::ConcurrencyLimit),
                rejected(RejectReason::TimeOut),
            ],
            waited_to_execute: waited(true),
            waited_in_vain: waited(false),
            executed: [executed("regular"), executed("watch")],
            estimated_seats: families.estimated_seats.get_or_create(&labels).clone(),
            queue_length: families.queue_length.get_or_create(&labels).clone(),
            no_accommodation: families.no_accommodation.get_or_create(&labels).clone(),
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

    /// A request's execution (a watch's: its set-up) took `took` (kube's
    /// `ObserveExecutionDuration`, typed by the verb).
    pub(crate) fn executed(&self, watch: bool, took: Duration) {
        self.executed[usize::from(watch)].observe(took.as_secs_f64());
    }
}

/// A count of seats as a gauge's value.
pub(crate) fn seats(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// A level's seat gauges.
pub(crate) struct LevelMetrics {
    current_limit: Gauge,
    demand_high_watermark: FloatGauge,
    demand_average: FloatGauge,
    demand_stdev: FloatGauge,
    demand_smoothed: FloatGauge,
    target: FloatGauge,
}

/// What one borrowing adjustment found of a level (kube's
/// `NotePriorityLevelConcurrencyAdjustment`).
pub(crate) struct Adjustment {
    pub high_watermark: f64,
    pub average: f64,
    pub stdev: f64,
    pub smoothed: f64,
    pub target: f64,
    pub limit: usize,
}

/// A level's configured seats (kube's `SetPriorityLevelConfiguration`).
pub(crate) struct Limits {
    pub nominal: usize,
    /// The least and most borrowing may leave the level.
    pub lower: usize,
    pub upper: usize,
}

impl LevelMetrics {
    /// The level's configured seats, and its current limit to start with.
    pub(crate) fn new(level: &str, limits: &Limits, current: usize) -> Self {
        let families = families();
        let labels = Level {
            priority_level: level.to_owned(),
        };
        for (family, value) in [
            (&families.nominal_limit, limits.nominal),
            (&families.lower_limit, limits.lower),
            (&families.upper_limit, limits.upper),
        ] {
            family.get_or_create(&labels).set(seats(value));
        }
        let current_limit = families.current_limit.get_or_create(&labels).clone();
        current_limit.set(seats(current));
        let float = |family: &Family<Level, FloatGauge>| family.get_or_create(&labels).clone();
        LevelMetrics {
            current_limit,
            demand_high_watermark: float(&families.demand_high_watermark),
            demand_average: float(&families.demand_average),
            demand_stdev: float(&families.demand_stdev),
            demand_smoothed: float(&families.demand_smoothed),
            target: float(&families.target),
        }
    }

    pub(crate) fn adjusted(&self, adjustment: &Adjustment) {
        self.demand_high_watermark.set(adjustment.high_watermark);
        self.demand_average.set(adjustment.average);
        self.demand_stdev.set(adjustment.stdev);
        self.demand_smoothed.set(adjustment.smoothed);
        self.target.set(adjustment.target);
        self.current_limit.set(seats(adjustment.limit));
    }
}

/// A level's virtual clock as its queue set moves it (kube's `SetCurrentR`
/// and `SetDispatchMetrics`, in seat-seconds).
pub(crate) struct VirtualTime {
    current_r: FloatGauge,
    dispatch_r: FloatGauge,
    latest_s: FloatGauge,
    /// `min`, `max`.
    next_s: [FloatGauge; 2],
    next_discounted_s: [FloatGauge; 2],
}

/// Where the fairest dispatch found the level's queues: the least and
/// most next dispatch of a queue with a request waiting, the same less
/// each queue's estimated work in progress.
pub(crate) struct DispatchBounds {
    pub next_s: [f64; 2],
    pub next_discounted_s: [f64; 2],
}

impl VirtualTime {
    pub(crate) fn new(level: &str) -> Self {
        let families = families();
        let labels = Level {
            priority_level: level.to_owned(),
        };
        let bounds = |family: &Family<Bound, FloatGauge>| {
            ["min", "max"].map(|bound| {
                family
                    .get_or_create(&Bound {
                        priority_level: level.to_owned(),
                        bound: bound.to_owned(),
                    })
                    .clone()
            })
        };
        VirtualTime {
            current_r: families.current_r.get_or_create(&labels).clone(),
            dispatch_r: families.dispatch_r.get_or_create(&labels).clone(),
            latest_s: families.latest_s.get_or_create(&labels).clone(),
            next_s: bounds(&families.next_s_bounds),
            next_discounted_s: bounds(&families.next_discounted_s_bounds),
        }
    }

    pub(crate) fn synced(&self, current_r: f64) {
        self.current_r.set(current_r);
    }

    /// A request was dispatched at `current_r` from a queue whose next
    /// dispatch was `start`.
    pub(crate) fn dispatched(&self, current_r: f64, start: f64, bounds: &DispatchBounds) {
        self.dispatch_r.set(current_r);
        self.latest_s.set(start);
        for (gauge, value) in self.next_s.iter().zip(bounds.next_s) {
            gauge.set(value);
        }
        for (gauge, value) in self.next_discounted_s.iter().zip(bounds.next_discounted_s) {
            gauge.set(value);
        }
    }
}

/// The fair fraction of the last borrowing adjustment (kube's
/// `SetFairFrac`): one for the process, as kube has one controller.
pub(crate) fn set_fair_frac(value: f64) {
    families().fair_frac.set(value);
}
