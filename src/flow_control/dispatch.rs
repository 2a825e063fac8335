//! Priority levels at work: the server's seats split among the limited
//! levels by their shares, borrowing between them every 10 s, and a
//! request's way through its level's queues to a [`Seat`] or a
//! [`Rejection`] (kube's `apf_controller.go`, `conc_alloc.go` and
//! `dropped_requests_tracker.go`; the queue wait limit of
//! `pkg/server/filters/priority-and-fairness.go`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use http::HeaderValue;
use tokio::sync::oneshot;

use super::Controller;
use super::classify::Flow;
use super::metrics;
use super::metrics::{Adjustment, LevelMetrics, Limits, VirtualTime};
use super::queueset::{Arrival, Executing, Observers, QueueSet, QueuedAt, RejectReason};
use super::width;
use crate::config::flow_control::{FlowControl, LevelKind, LimitResponse, Queuing};
use crate::context::UserInfo;
use crate::request_info::RequestInfo;

/// How often borrowing moves seats between levels (kube's
/// `borrowingAdjustmentPeriod`).
pub(crate) const BORROWING_PERIOD: Duration = Duration::from_secs(10);
/// kube's `seatDemandSmoothingCoefficient`.
const SMOOTHING: f64 = 0.977;
/// No request waits in its queue longer than this (kube's hard limit in
/// `getRequestWaitContext`), whatever its deadline or the default wait.
const MAX_QUEUE_WAIT: Duration = Duration::from_secs(60);
/// kube's `MinTarget`: a smaller target counts as this much.
const MIN_TARGET: f64 = 0.001;
/// kube's `maxRetryAfter`.
const MAX_RETRY_AFTER: u64 = 32;
/// kube's `priorityLevelMaxSeatsPercent`: a request of a queuing level
/// takes at most this part of the level's nominal seats.
const PRIORITY_LEVEL_MAX_SEATS_PERCENT: f64 = 0.15;

pub(super) struct Level {
    pub name: String,
    pub uid: HeaderValue,
    pub limit: Box<Limited>,
}

/// A level's seats and queues; the exempt level's have no limit (kube's
/// exempt queue set, which counts its seats and demand and queues none).
pub(super) struct Limited {
    pub exempt: bool,
    pub state: Mutex<LevelState>,
    /// kube's NominalCL, and the least and most borrowing may leave it.
    pub nominal: usize,
    pub min: usize,
    pub max: usize,
    /// The most seats one request of this level takes.
    pub max_seats: usize,
    metrics: LevelMetrics,
}

impl Limited {
    pub(super) fn lock(&self) -> MutexGuard<'_, LevelState> {
        // The state is consistent between calls: nothing in it panics.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

pub(super) struct LevelState {
    pub queues: QueueSet<Ticket>,
    drops: DroppedRequests,
    smoothed_demand: f64,
}

/// A waiting request: how to wake it, what the dumps show of it, and its
/// schema's count of dispatches it found no room for.
pub(super) struct Ticket {
    wake: oneshot::Sender<Executing>,
    pub detail: RequestDetail,
    no_accommodation: prometheus_client::metrics::counter::Counter,
}

/// What `dump_requests` shows of a waiting request.
pub(crate) struct RequestDetail {
    pub schema: usize,
    pub distinguisher: String,
    pub arrived: SystemTime,
    pub user: String,
    pub verb: String,
    pub path: String,
    pub namespace: String,
    pub name: String,
    /// `group/version`, or `version` for the core group.
    pub api_version: String,
    pub resource: String,
    pub subresource: String,
}

impl RequestDetail {
    pub(crate) fn new(flow: &Flow<'_>, info: &RequestInfo, user: &UserInfo) -> Self {
        let api_version = if info.api_group.is_empty() {
            info.api_version.to_string()
        } else {
            format!("{}/{}", info.api_group, info.api_version)
        };
        RequestDetail {
            schema: flow.schema,
            distinguisher: flow.distinguisher.to_owned(),
            arrived: SystemTime::now(),
            user: user.name.clone(),
            verb: info.verb.to_string(),
            path: info.path.to_string(),
            namespace: info.namespace.to_string(),
            name: info.name.to_string(),
            api_version,
            resource: info.resource.to_string(),
            subresource: info.subresource.to_string(),
        }
    }
}

/// What a request asks of its level: its seats (kube's work estimate), and
/// whether it is a watch, whose execution is its set-up.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Work {
    pub seats: usize,
    pub watch: bool,
}

/// Why a request gets a 429, and when to come back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rejection {
    pub reason: RejectReason,
    pub retry_after_seconds: u64,
}

/// The levels of a configuration, their seats split by shares.
pub(super) fn levels(config: &FlowControl) -> Vec<Level> {
    let now = Instant::now();
    let shares: u64 = config
        .levels
        .iter()
        .map(|level| match &level.kind {
            LevelKind::Limited(limited) => u64::from(limited.nominal_concurrency_shares),
            LevelKind::Exempt => 0,
        })
        .sum();
    let server = config.server_concurrency_limit as u64;
    config
        .levels
        .iter()
        .map(|level| {
            // kube: NominalCL = ceil(ServerCL * shares / sum of shares);
            // the exempt level's shares are 0, and it lends nothing
            // (`plSpecCommons` in apf_controller.go).
            let share = match &level.kind {
                LevelKind::Limited(limited) => u64::from(limited.nominal_concurrency_shares),
                LevelKind::Exempt => 0,
            };
            let nominal = (server * share).div_ceil(shares.max(1)) as usize;
            let percent = |p: u32| (nominal as f64 * f64::from(p) / 100.0).round() as usize;
            let (lendable, borrowing, queues, max_seats) = match &level.kind {
                LevelKind::Exempt => (
                    0,
                    config.server_concurrency_limit,
                    QueueSet::exempt(now),
                    width::MAX_SEATS,
                ),
                LevelKind::Limited(limited) => {
                    let queuing = match limited.limit_response {
                        LimitResponse::Queue(queuing) => Some(queuing),
                        LimitResponse::Reject => None,
                    };
                    (
                        percent(limited.lendable_percent).min(nominal),
                        // kube's borrowingCL: the server's seats when unbounded.
                        limited
                            .borrowing_limit_percent
                            .map_or(config.server_concurrency_limit, percent),
                        QueueSet::new(queuing, nominal, now),
                        max_seats(nominal, queuing),
                    )
                }
            };
            let queues = queues.observed(Observers {
                virtual_time: VirtualTime::new(level.name.as_str()),
                not_accommodated: |ticket: &Ticket| {
                    ticket.no_accommodation.inc();
                },
            });
            let limits = Limits {
                nominal,
                lower: nominal - lendable,
                upper: nominal.saturating_add(borrowing),
            };
            let limit = Box::new(Limited {
                exempt: matches!(level.kind, LevelKind::Exempt),
                state: Mutex::new(LevelState {
                    queues,
                    drops: DroppedRequests::default(),
                    smoothed_demand: 0.0,
                }),
                nominal,
                min: limits.lower,
                max: limits.upper,
                max_seats,
                metrics: LevelMetrics::new(level.name.as_str(), &limits, nominal),
            });
            Level {
                name: level.name.as_str().to_owned(),
                uid: super::uid("prioritylevel", level.name.as_str()),
                limit,
            }
        })
        .collect()
}

/// The most seats one request of a level of `nominal` seats takes: kube's
/// `MaxSeatsTracker` value, set for a queuing level in
/// `finishQueueSetReconfigsLocked`
/// (`staging/src/k8s.io/apiserver/pkg/util/flowcontrol/apf_controller.go`) to
/// MAX(1, MIN(ceil(0.15 × NominalCL), NominalCL / handSize)), so that a wide
/// LIST fits the level and its hand of queues; the work estimator
/// (`staging/src/k8s.io/apiserver/pkg/util/flowcontrol/request/list_work_estimator.go`)
/// takes kube's global maximum of 10 when it is larger, or unset (a
/// `reject` level).
fn max_seats(nominal: usize, queuing: Option<Queuing>) -> usize {
    let Some(queuing) = queuing else {
        return width::MAX_SEATS;
    };
    let share = (nominal as f64 * PRIORITY_LEVEL_MAX_SEATS_PERCENT).ceil() as usize;
    let per_hand = nominal / queuing.hand_size.max(1);
    share.min(per_hand).clamp(1, width::MAX_SEATS)
}

/// When a request arriving at `received` with `deadline` stops waiting in
/// its queue: a quarter of its time, `default_wait` when it has none, at
/// most a minute (kube's `getRequestWaitContext`).
fn queue_deadline(received: Instant, deadline: Option<Instant>, default_wait: Duration) -> Instant {
    let wait = deadline.map_or(default_wait, |deadline| {
        deadline.saturating_duration_since(received) / 4
    });
    received + wait.min(MAX_QUEUE_WAIT)
}

/// What a request holds while it executes; dropping it frees its seats.
pub(crate) struct Seat {
    controller: Arc<Controller>,
    schema: usize,
    seats: usize,
    /// When it started to execute, and whether it is a watch (which
    /// executes until it is set up).
    started: Instant,
    watch: bool,
    executing: Executing,
}

impl Drop for Seat {
    fn drop(&mut self) {
        let controller = &self.controller;
        let schema = &controller.schemas[self.schema];
        schema.metrics.executing.dec();
        schema
            .metrics
            .executing_seats
            .dec_by(metrics::seats(self.seats));
        schema.metrics.executed(self.watch, self.started.elapsed());
        let limited = &controller.levels[schema.level].limit;
        let now = Instant::now();
        let mut state = limited.lock();
        let mut unclaimed = Vec::new();
        state.queues.finish(now, self.executing, &mut |ticket, e| {
            wake(ticket, e, &mut unclaimed)
        });
        settle(&mut state, now, unclaimed);
    }
}

/// Tells a waiting request it runs; if it is gone, its seats are handed
/// back by [`settle`].
fn wake(ticket: Ticket, executing: Executing, unclaimed: &mut Vec<Executing>) {
    if ticket.wake.send(executing).is_err() {
        unclaimed.push(executing);
    }
}

/// Finishes requests that were dispatched to no one.
fn settle(state: &mut LevelState, now: Instant, mut unclaimed: Vec<Executing>) {
    while let Some(executing) = unclaimed.pop() {
        let mut more = Vec::new();
        state
            .queues
            .finish(now, executing, &mut |ticket, e| wake(ticket, e, &mut more));
        unclaimed.extend(more);
    }
}

impl Controller {
    /// When a request arriving at `received` with `deadline` (none for a
    /// watch) stops waiting in its queue.
    pub(crate) fn queue_deadline(&self, received: Instant, deadline: Option<Instant>) -> Instant {
        queue_deadline(received, deadline, self.default_request_wait)
    }

    /// Waits for a seat on the flow's level for `work` (its seats at most
    /// the level's `max_seats`), until `queue_deadline` at the latest.
    pub(crate) async fn admit(
        self: &Arc<Self>,
        flow: &Flow<'_>,
        work: Work,
        queue_deadline: Instant,
        detail: impl FnOnce() -> RequestDetail,
    ) -> Result<Seat, Rejection> {
        let schema = &self.schemas[flow.schema];
        let limited = &self.levels[schema.level].limit;
        // kube observes the estimate its level's maximum has capped.
        let work = Work {
            seats: work.seats.min(limited.max_seats).max(1),
            ..work
        };
        let seats = work.seats;
        schema.metrics.estimated_seats.observe(seats as f64);
        let arrived = Instant::now();
        let mut receiver = None;
        let at = {
            let mut state = limited.lock();
            let mut unclaimed = Vec::new();
            let make_ticket = || {
                let (wake, woken) = oneshot::channel();
                receiver = Some(woken);
                Ticket {
                    wake,
                    detail: detail(),
                    no_accommodation: schema.metrics.no_accommodation.clone(),
                }
            };
            let arrival =
                state
                    .queues
                    .arrive(arrived, flow.hash, seats, make_ticket, &mut |t, e| {
                        wake(t, e, &mut unclaimed)
                    });
            settle(&mut state, arrived, unclaimed);
            match arrival {
                Arrival::Executing(executing) => {
                    if executing.queued() {
                        schema.metrics.queue_length.observe(1.0);
                    }
                    // kube starts no wait for an exempt request.
                    let waited = (!limited.exempt).then_some(Duration::ZERO);
                    return Ok(self.seat(flow.schema, work, executing, waited));
                }
                Arrival::Rejected(reason) => {
                    return Err(self.rejected(&mut state, flow.schema, reason, arrived, arrived));
                }
                Arrival::Queued { at, length } => {
                    schema.metrics.queue_length.observe(length as f64);
                    at
                }
            }
        };
        let Some(receiver) = receiver else {
            // A queued request always has its ticket made.
            return Err(Rejection {
                reason: RejectReason::TimeOut,
                retry_after_seconds: 1,
            });
        };
        schema.metrics.in_queue.inc();
        schema.metrics.in_queue_seats.inc_by(metrics::seats(seats));
        let mut waiting = Waiting {
            controller: self,
            limited,
            schema: flow.schema,
            seats,
            at,
            arrived,
            receiver,
            settled: false,
        };
        let woken = tokio::time::timeout_at(queue_deadline.into(), &mut waiting.receiver).await;
        waiting.settled = true;
        schema.metrics.in_queue.dec();
        schema.metrics.in_queue_seats.dec_by(metrics::seats(seats));
        if let Ok(Ok(executing)) = woken {
            return Ok(self.seat(flow.schema, work, executing, Some(arrived.elapsed())));
        }
        let now = Instant::now();
        let mut state = limited.lock();
        match state.queues.remove(now, at, RejectReason::TimeOut) {
            Some(_) => {
                Err(self.rejected(&mut state, flow.schema, RejectReason::TimeOut, arrived, now))
            }
            // Dispatched as the wait ended: it runs.
            None => match waiting.receiver.try_recv() {
                Ok(executing) => {
                    Ok(self.seat(flow.schema, work, executing, Some(arrived.elapsed())))
                }
                Err(_) => {
                    Err(self.rejected(&mut state, flow.schema, RejectReason::TimeOut, arrived, now))
                }
            },
        }
    }

    /// A seat given after `waited` in the level's queues; `None` on the
    /// exempt level, which never waits, and whose requests kube's
    /// `startRequest` (`apf_controller.go`) starts no wait for, so its
    /// `Handle` observes no queue wait of theirs.
    fn seat(
        self: &Arc<Self>,
        schema: usize,
        work: Work,
        executing: Executing,
        waited: Option<Duration>,
    ) -> Seat {
        let metrics = &self.schemas[schema].metrics;
        metrics.executing.inc();
        metrics.executing_seats.inc_by(metrics::seats(work.seats));
        metrics.dispatched.inc();
        if let Some(waited) = waited {
            metrics.waited_to_execute.observe(waited.as_secs_f64());
        }
        Seat {
            controller: self.clone(),
            schema,
            seats: work.seats,
            started: Instant::now(),
            watch: work.watch,
            executing,
        }
    }

    fn rejected(
        &self,
        state: &mut LevelState,
        schema: usize,
        reason: RejectReason,
        arrived: Instant,
        now: Instant,
    ) -> Rejection {
        let metrics = &self.schemas[schema].metrics;
        metrics.rejected(reason).inc();
        metrics
            .waited_in_vain
            .observe(now.saturating_duration_since(arrived).as_secs_f64());
        let second = now.saturating_duration_since(self.started).as_secs();
        state.drops.record(second);
        Rejection {
            reason,
            retry_after_seconds: state.drops.retry_after,
        }
    }

    /// Moves seats between the limited levels by their recent demand
    /// (kube's `updateBorrowingLocked`).
    pub(super) fn adjust_limits(&self, now: Instant) {
        let limited: Vec<&Limited> = self.levels.iter().map(|level| &*level.limit).collect();
        let required: usize = limited.iter().map(|l| l.nominal).sum();
        let items: Vec<_> = limited
            .iter()
            .map(|level| {
                let mut state = level.lock();
                let demand = state.queues.take_demand(now);
                let envelope = demand.average + demand.deviation;
                state.smoothed_demand =
                    envelope.max(SMOOTHING * state.smoothed_demand + (1.0 - SMOOTHING) * envelope);
                let lower =
                    (level.min as f64).max((level.nominal as f64).min(demand.high_watermark));
                let bounds = Bounds {
                    target: lower.max(state.smoothed_demand),
                    lower,
                    upper: (level.max.min(required) as f64).max(lower),
                };
                (demand, state.smoothed_demand, bounds)
            })
            .collect();
        let bounds: Vec<Bounds> = items.iter().map(|(_, _, bounds)| *bounds).collect();
        let (allocations, fair_frac) = allocate(required as f64, &bounds);
        metrics::set_fair_frac(fair_frac);
        for ((level, allocation), (demand, smoothed, bounds)) in
            limited.iter().zip(allocations).zip(items)
        {
            let limit = allocation.round() as usize;
            let mut state = level.lock();
            let mut unclaimed = Vec::new();
            state
                .queues
                .set_concurrency_limit(now, limit, &mut |t, e| wake(t, e, &mut unclaimed));
            settle(&mut state, now, unclaimed);
            level.metrics.adjusted(&Adjustment {
                high_watermark: demand.high_watermark,
                average: demand.average,
                stdev: demand.deviation,
                smoothed,
                target: bounds.target,
                limit,
            });
        }
    }
}

/// A request waiting in its queue. If its client goes away (the future is
/// dropped), it leaves the queue, or gives back the seats it was just given.
struct Waiting<'a> {
    controller: &'a Controller,
    limited: &'a Limited,
    schema: usize,
    seats: usize,
    at: QueuedAt,
    arrived: Instant,
    receiver: oneshot::Receiver<Executing>,
    settled: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let now = Instant::now();
        let metrics = &self.controller.schemas[self.schema].metrics;
        metrics.in_queue.dec();
        metrics.in_queue_seats.dec_by(metrics::seats(self.seats));
        let mut state = self.limited.lock();
        if state
            .queues
            .remove(now, self.at, RejectReason::Cancelled)
            .is_some()
        {
            metrics.rejected(RejectReason::Cancelled).inc();
            metrics
                .waited_in_vain
                .observe(now.saturating_duration_since(self.arrived).as_secs_f64());
        } else if let Ok(executing) = self.receiver.try_recv() {
            settle(&mut state, now, vec![executing]);
        }
    }
}

/// One level's place in the allocation problem of `conc_alloc.go`.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    target: f64,
    lower: f64,
    upper: f64,
}

/// kube's `computeConcurrencyAllocation`: allocations summing to
/// `required`, each within its bounds and otherwise proportional to its
/// target by one common factor, and that factor (kube's fair fraction).
/// Found here by bisection on the factor (the sum is monotone in it); when
/// the bounds leave no room, the factor is kube's: the least lower bound
/// or the greatest upper bound relative to its target, and 0 when nothing
/// is to be divided.
fn allocate(required: f64, items: &[Bounds]) -> (Vec<f64>, f64) {
    let target = |i: &Bounds| i.target.max(MIN_TARGET);
    let lower: f64 = items.iter().map(|i| i.lower).sum();
    let upper: f64 = items.iter().map(|i| i.upper).sum();
    if required <= 0.0 {
        return (vec![0.0; items.len()], 0.0);
    }
    if required <= lower {
        let fair = items
            .iter()
            .map(|i| i.lower / target(i))
            .fold(f64::INFINITY, f64::min);
        return (items.iter().map(|i| i.lower).collect(), fair);
    }
    if required >= upper {
        let fair = items
            .iter()
            .map(|i| i.upper / target(i))
            .fold(0.0, f64::max);
        return (items.iter().map(|i| i.upper).collect(), fair);
    }
    let at = |factor: f64| -> Vec<f64> {
        items
            .iter()
            .map(|i| (factor * target(i)).clamp(i.lower, i.upper))
            .collect()
    };
    let (mut low, mut high) = (
        0.0,
        items
            .iter()
            .map(|i| i.upper / target(i))
            .fold(0.0, f64::max),
    );
    for _ in 0..100 {
        let middle = (low + high) / 2.0;
        if at(middle).iter().sum::<f64>() < required {
            low = middle;
        } else {
            high = middle;
        }
    }
    (at(high), high)
}

/// kube's Retry-After for a level's rejections: doubled (to 32 s at most)
/// when at least three times as many requests as its seconds were dropped in
/// the last `retry_after` seconds, at most once per `retry_after`; one less
/// when fewer than that many were.
#[derive(Debug)]
struct DroppedRequests {
    /// Drops per second, the last [`MAX_RETRY_AFTER`] seconds.
    history: VecDeque<(u64, u64)>,
    second: u64,
    count: u64,
    retry_after: u64,
    raised_at: Option<u64>,
}

impl Default for DroppedRequests {
    fn default() -> Self {
        DroppedRequests {
            history: VecDeque::new(),
            second: 0,
            count: 0,
            retry_after: 1,
            raised_at: None,
        }
    }
}

impl DroppedRequests {
    fn record(&mut self, second: u64) {
        // Each rejection's time is read before its level's lock is taken,
        // so two of them can reach here out of order: a late one counts in
        // the current second, and the seconds recorded never go back.
        let second = second.max(self.second);
        if second == self.second {
            self.count += 1;
            return;
        }
        self.history.push_back((self.second, self.count));
        while self
            .history
            .front()
            .is_some_and(|(s, _)| second.saturating_sub(*s) > MAX_RETRY_AFTER)
        {
            self.history.pop_front();
        }
        self.second = second;
        self.count = 1;
        self.update(second);
    }

    fn update(&mut self, second: u64) {
        let window = self.retry_after;
        let dropped: u64 = self
            .history
            .iter()
            .filter(|(s, _)| *s < second && second - s <= window)
            .map(|(_, count)| count)
            .sum();
        let may_raise = self.raised_at.is_none_or(|at| second - at >= window);
        if may_raise && dropped >= 3 * window {
            self.retry_after = (window * 2).min(MAX_RETRY_AFTER);
            self.raised_at = Some(second);
        } else if dropped < window && window > 1 {
            self.retry_after = window - 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn work(seats: usize) -> Work {
        Work {
            seats,
            watch: false,
        }
    }

    /// One limited level (`catch-all`, queues 64, hands of 8) sharing
    /// `server` seats, and the exempt one.
    fn one_level(server: usize) -> FlowControl {
        use crate::config::Name;
        use crate::config::flow_control::{
            FlowSchema, Limited as LimitedConfig, PriorityLevel, Queuing,
        };
        FlowControl {
            levels: vec![
                PriorityLevel {
                    name: Name::parse("exempt").unwrap(),
                    kind: LevelKind::Exempt,
                },
                PriorityLevel {
                    name: Name::parse("catch-all").unwrap(),
                    kind: LevelKind::Limited(LimitedConfig {
                        nominal_concurrency_shares: 5,
                        lendable_percent: 0,
                        borrowing_limit_percent: None,
                        limit_response: LimitResponse::Queue(Queuing {
                            queues: 64,
                            hand_size: 8,
                            queue_length_limit: 50,
                        }),
                    }),
                },
            ],
            schemas: vec![FlowSchema {
                name: Name::parse("catch-all").unwrap(),
                matching_precedence: 10000,
                priority_level: 1,
                distinguisher: None,
                rules: Vec::new(),
            }],
            server_concurrency_limit: server,
            default_request_wait: Duration::from_secs(15),
        }
    }

    /// The current limit of `level` on the metrics endpoint.
    fn current_limit(level: &str) -> String {
        let mut text = String::new();
        super::super::metrics::encode(&mut text).expect("the metrics encode");
        let prefix =
            format!("apiserver_flowcontrol_current_limit_seats{{priority_level=\"{level}\"}} ");
        text.lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
            .to_owned()
    }

    /// kube's borrowing (`apf_controller.go`, `updateBorrowingLocked`)
    /// divides the seats among every level, the exempt one included: its
    /// NominalCL is 0 (`plSpecCommons`: no shares), it may borrow up to the
    /// server's seats, and its demand counts like any other's. The first
    /// division is made as the configuration is digested
    /// (`finishQueueSetReconfigsLocked`), on no demand. Level `lender`
    /// (this test's alone: the registry is the process's) lends all its 4
    /// seats.
    #[tokio::test]
    async fn the_exempt_levels_demand_takes_seats_a_level_lends() {
        use crate::config::Name;
        use crate::config::flow_control::FlowSchema;
        let mut config = one_level(4);
        config.levels[1].name = Name::parse("lender").unwrap();
        if let LevelKind::Limited(limited) = &mut config.levels[1].kind {
            limited.lendable_percent = 100;
        }
        config.schemas[0].name = Name::parse("lender").unwrap();
        config.schemas.insert(
            0,
            FlowSchema {
                name: Name::parse("exempt").unwrap(),
                matching_precedence: 1,
                priority_level: 0,
                distinguisher: None,
                rules: Vec::new(),
            },
        );
        let controller = Controller::new(&config);
        // No demand anywhere: the 4 seats split evenly between the two
        // levels that may take them all.
        assert_eq!(current_limit("lender"), "2");
        let exempt = Flow {
            schema: 0,
            distinguisher: "",
            hash: 1,
        };
        let user = UserInfo::default();
        let get = RequestInfo::resolve(&http::Method::GET, "/api/v1/namespaces/a/pods/p", None);
        let mut held = Vec::new();
        for _ in 0..10 {
            let seat = controller
                .admit(
                    &exempt,
                    work(1),
                    Instant::now() + Duration::from_secs(1),
                    || RequestDetail::new(&exempt, &get, &user),
                )
                .await
                .expect("exempt requests run at once");
            held.push(seat);
        }
        controller.adjust_limits(Instant::now() + Duration::from_secs(1));
        // The exempt level asks for 10 seats, lender for none: lender keeps
        // none of its seats.
        assert_eq!(current_limit("lender"), "0");
        drop(held);
    }

    /// kube (`staging/src/k8s.io/apiserver/pkg/util/flowcontrol/apf_controller.go`
    /// `finishQueueSetReconfigsLocked`, the work estimator's `maxSeatsFn`):
    /// a request of a queuing level takes at most
    /// MAX(1, MIN(ceil(0.15 * nominalCL), nominalCL / handSize)) seats, so
    /// that a LIST never needs more seats than its level has. On a level of
    /// 4 seats and hands of 8 that is 1: a LIST with `limit=500` (5 seats by
    /// its limit) runs next to a GET instead of waiting for the level to
    /// empty.
    #[tokio::test]
    async fn a_list_on_a_small_level_takes_no_more_seats_than_kube_allows() {
        let controller = Controller::new(&one_level(4));
        let flow = Flow {
            schema: 0,
            distinguisher: "",
            hash: 7,
        };
        let user = UserInfo::default();
        let get = RequestInfo::resolve(&http::Method::GET, "/api/v1/namespaces/a/pods/p", None);
        let held = controller
            .admit(
                &flow,
                work(1),
                Instant::now() + Duration::from_secs(1),
                || RequestDetail::new(&flow, &get, &user),
            )
            .await
            .expect("a free seat");
        let query = Some("limit=500");
        let list = RequestInfo::resolve(&http::Method::GET, "/api/v1/pods", query);
        let seats = width::seats(&list, query);
        let listed = controller
            .admit(
                &flow,
                work(seats),
                Instant::now() + Duration::from_millis(300),
                || RequestDetail::new(&flow, &list, &user),
            )
            .await;
        assert!(
            listed.is_ok(),
            "a LIST of {seats} seats on a level of 4 seats (kube: at most 1) was refused: {:?}",
            listed.err()
        );
        drop(held);
    }

    /// kube's per-level cap (`apf_controller.go`,
    /// `finishQueueSetReconfigsLocked`), then its global maximum of 10
    /// (`request/list_work_estimator.go`), which alone applies to a level
    /// without queues.
    #[test]
    fn a_levels_max_seats_follow_kubes_formula() {
        let hands = |hand_size| {
            Some(Queuing {
                queues: 64,
                hand_size,
                queue_length_limit: 50,
            })
        };
        // MIN(ceil(0.15 × NominalCL), NominalCL / handSize), at least 1.
        assert_eq!(max_seats(4, hands(8)), 1);
        assert_eq!(max_seats(0, hands(8)), 1);
        assert_eq!(max_seats(20, hands(8)), 2);
        assert_eq!(max_seats(40, hands(6)), 6);
        assert_eq!(max_seats(45, hands(4)), 7);
        // At most 10.
        assert_eq!(max_seats(200, hands(6)), 10);
        assert_eq!(max_seats(4, None), 10);
        let levels = levels(&one_level(4));
        let limited = &levels[1].limit;
        assert_eq!((limited.nominal, limited.max_seats), (4, 1));
    }

    #[test]
    fn seats_go_where_the_demand_is_within_each_levels_bounds() {
        // Two levels of 10 nominal seats, one lending all, one idle.
        let busy = Bounds {
            target: 30.0,
            lower: 10.0,
            upper: 20.0,
        };
        let idle = Bounds {
            target: 0.0,
            lower: 0.0,
            upper: 20.0,
        };
        let (allocation, _) = allocate(20.0, &[busy, idle]);
        assert!((allocation[0] - 20.0).abs() < 0.01, "{allocation:?}");
        assert!(allocation[1] < 0.01, "{allocation:?}");
        assert!((allocation[0] + allocation[1] - 20.0).abs() < 1e-6);
        // Equal demand: equal seats.
        let even = Bounds {
            target: 8.0,
            lower: 2.0,
            upper: 20.0,
        };
        let (allocation, _) = allocate(20.0, &[even, even]);
        assert!((allocation[0] - 10.0).abs() < 1e-6, "{allocation:?}");
        // Nothing can go below its lower bound.
        let (allocation, _) = allocate(5.0, &[busy, idle]);
        assert_eq!(allocation, [10.0, 0.0]);
    }

    /// kube's fair fraction (`computeConcurrencyAllocation`,
    /// `staging/src/k8s.io/apiserver/pkg/util/flowcontrol/conc_alloc.go`),
    /// which `apiserver_flowcontrol_seat_fair_frac` shows: the common
    /// factor of the targets; with no room left by the bounds, the least
    /// lower bound (or greatest upper bound) relative to its target, a
    /// target under 0.001 counting as 0.001; 0 when nothing is divided.
    #[test]
    fn the_fair_fraction_is_kubes() {
        let item = |target, lower, upper| Bounds {
            target,
            lower,
            upper,
        };
        // No bound matters: the seats over the targets' sum.
        let (allocation, fair) = allocate(9.0, &[item(4.0, 2.0, 9.0), item(1.0, 1.0, 9.0)]);
        assert!((fair - 1.8).abs() < 1e-9, "{fair}");
        assert!((allocation[0] - 7.2).abs() < 1e-9, "{allocation:?}");
        // One level at its upper bound: the other takes the rest.
        let (allocation, fair) = allocate(9.0, &[item(4.0, 2.0, 5.0), item(2.0, 1.0, 9.0)]);
        assert!((fair - 2.0).abs() < 1e-9, "{fair} {allocation:?}");
        // Held at the lower bounds: the least of them over its target,
        // an idle level (target 0, lower 0) making it 0.
        let (_, fair) = allocate(5.0, &[item(4.0, 4.0, 9.0), item(2.0, 1.0, 9.0)]);
        assert_eq!(fair, 0.5);
        let (_, fair) = allocate(4.0, &[item(4.0, 4.0, 9.0), item(0.0, 0.0, 9.0)]);
        assert_eq!(fair, 0.0);
        // Held at the upper bounds: the greatest over its target.
        let (_, fair) = allocate(6.0, &[item(4.0, 1.0, 2.0), item(0.0, 0.0, 4.0)]);
        assert!((fair - 4000.0).abs() < 1e-6, "{fair}");
        let (allocation, fair) = allocate(0.0, &[item(4.0, 0.0, 2.0)]);
        assert_eq!((allocation, fair), (vec![0.0], 0.0));
    }

    #[test]
    fn retry_after_doubles_under_drops_and_decays_after() {
        let mut drops = DroppedRequests::default();
        for second in 1..=3 {
            for _ in 0..10 {
                drops.record(second);
            }
        }
        assert!(drops.retry_after >= 2, "{drops:?}");
        let raised = drops.retry_after;
        for second in 40..80 {
            drops.record(second * 2);
        }
        assert!(drops.retry_after < raised, "{drops:?}");
        assert!(drops.retry_after <= MAX_RETRY_AFTER);
    }

    #[test]
    fn a_drop_recorded_out_of_order_counts_in_the_current_second() {
        let mut drops = DroppedRequests::default();
        for _ in 0..10 {
            drops.record(1);
        }
        drops.record(2);
        assert_eq!((drops.retry_after, drops.raised_at), (2, Some(2)));
        // Read before a drop of second 2 took the lock, recorded after it.
        drops.record(1);
        assert_eq!((drops.second, drops.count), (2, 2), "{drops:?}");
        assert_eq!(drops.retry_after, 2);
    }

    #[test]
    fn a_request_waits_a_quarter_of_its_time_in_queue_at_most_a_minute() {
        let now = Instant::now();
        let default_wait = Duration::from_secs(2);
        let wait = |deadline: Option<Duration>, default_wait| {
            queue_deadline(now, deadline.map(|d| now + d), default_wait).duration_since(now)
        };
        let seconds = Duration::from_secs;
        assert_eq!(wait(Some(seconds(60)), default_wait), seconds(15));
        assert_eq!(
            wait(Some(seconds(2)), default_wait),
            Duration::from_millis(500)
        );
        assert_eq!(wait(Some(seconds(3600)), default_wait), MAX_QUEUE_WAIT);
        // Without a deadline: the default wait, at most a minute too.
        assert_eq!(wait(None, default_wait), default_wait);
        assert_eq!(wait(None, seconds(900)), MAX_QUEUE_WAIT);
    }
}
