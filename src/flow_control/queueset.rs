//! One priority level's queues: kube's `fairqueuing/queueset/queueset.go`,
//! re-built as a state machine that is told the time (`now`) instead of
//! reading a clock, so its fairness is tested deterministically.
//!
//! - **Shuffle sharding** deals each flow `hand_size` of the queues (from the
//!   flow's hash, as `util/shufflesharding/shufflesharding.go` deals) and the
//!   request joins the one with the least work waiting.
//! - **Fair queuing by virtual time**: `R` counts the seat-seconds each busy
//!   queue has been given; it advances at `min(seats asked, limit) / busy
//!   queues` per second. A queue's `next_dispatch_r` is where its next
//!   request starts in that virtual world; the request dispatched next is
//!   the head whose virtual finish (`next_dispatch_r` + its work) is least.
//!   A dispatch adds the estimated work (seats × 3 ms); the finish corrects it
//!   by the service time actually taken.
//! - **Seats**: a request occupies `seats` of the level's concurrency limit
//!   while it executes; a head that does not fit waits (unless nothing is
//!   executing, so that a request wider than the limit can still run).
//! - A level with no queues (`reject`) only counts seats: a request that
//!   does not fit is rejected at once.
//! - The exempt level's set has no queues and no limit: every request runs
//!   at once, and its seats count in its demand (kube's exempt queue set).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::metrics::{DispatchBounds, VirtualTime};
use crate::config::flow_control::Queuing;

/// kube's estimated service time `G` of a request, before it finishes.
const ESTIMATED_SERVICE: Duration = Duration::from_millis(3);

/// Why a request was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RejectReason {
    /// Its queue was at `queue_length_limit` and every seat was taken.
    QueueFull,
    /// A level without queues had no seat for it.
    ConcurrencyLimit,
    /// It waited in its queue for as long as it may.
    TimeOut,
    /// The client went away while it waited.
    Cancelled,
}

impl RejectReason {
    /// The `reason` label kube's metrics give it. kube's queue wait is a
    /// context derived from the request's, so a client gone ends it as a
    /// wait run out does, and `wait` (`fairqueuing/queueset/queueset.go`)
    /// records both as `time-out`: kube has no `cancelled` reason.
    pub(crate) fn label(self) -> &'static str {
        match self {
            RejectReason::QueueFull => "queue-full",
            RejectReason::ConcurrencyLimit => "concurrency-limit",
            RejectReason::TimeOut | RejectReason::Cancelled => "time-out",
        }
    }
}

/// A request that holds seats; handed back to [`QueueSet::finish`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Executing {
    queue: Option<usize>,
    seats: usize,
    started: Instant,
}

impl Executing {
    /// Whether it went through a queue: false on a level without queues.
    /// A request that found nothing waiting anywhere runs at once, as it
    /// would have been dispatched from its queue, alone in it.
    pub(crate) fn queued(&self) -> bool {
        self.queue.is_some()
    }
}

/// Where a waiting request is, to take it out again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QueuedAt {
    pub queue: usize,
    id: u64,
}

/// What became of an arriving request.
#[derive(Debug)]
pub(crate) enum Arrival {
    /// It executes now.
    Executing(Executing),
    /// It waits in this queue (and may have been dispatched already: the
    /// dispatch callback says so), which held `length` requests once it
    /// joined.
    Queued {
        at: QueuedAt,
        length: usize,
    },
    Rejected(RejectReason),
}

/// A request waiting in a queue, with what its owner needs to be told.
pub(crate) struct Waiting<T> {
    id: u64,
    seats: usize,
    arrival_r: f64,
    pub payload: T,
}

struct Queue<T> {
    waiting: VecDeque<Waiting<T>>,
    next_dispatch_r: f64,
    executing: usize,
    seats_in_use: usize,
    /// Seats of the waiting requests.
    seats_waiting: usize,
}

impl<T> Queue<T> {
    fn new() -> Self {
        Queue {
            waiting: VecDeque::new(),
            next_dispatch_r: 0.0,
            executing: 0,
            seats_in_use: 0,
            seats_waiting: 0,
        }
    }

    fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.executing == 0
    }
}

/// A queue as the debug dump shows it.
pub(crate) struct QueueDump {
    pub waiting: usize,
    pub executing: usize,
    pub seats_in_use: usize,
    pub next_dispatch_r: f64,
    pub seats_waiting: usize,
}

/// Running totals of a level, for the debug dump.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Totals {
    pub waiting: usize,
    pub executing: usize,
    pub seats_in_use: usize,
    pub seats_waiting: usize,
    pub dispatched: u64,
    pub rejected: u64,
    pub timed_out: u64,
    pub cancelled: u64,
}

/// The seat demand (seats executing plus seats waiting) integrated over
/// time, as kube's `fairqueuing/integrator.go` does for borrowing.
#[derive(Debug, Clone, Copy)]
struct Integrator {
    since: Instant,
    last: Instant,
    value: f64,
    integral: f64,
    integral_of_squares: f64,
    high_watermark: f64,
}

/// The demand of one adjustment period.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Demand {
    pub average: f64,
    pub deviation: f64,
    pub high_watermark: f64,
}

impl Integrator {
    fn new(now: Instant) -> Self {
        Integrator {
            since: now,
            last: now,
            value: 0.0,
            integral: 0.0,
            integral_of_squares: 0.0,
            high_watermark: 0.0,
        }
    }

    fn set(&mut self, now: Instant, value: f64) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.integral += self.value * elapsed;
        self.integral_of_squares += self.value * self.value * elapsed;
        self.last = now;
        self.value = value;
        self.high_watermark = self.high_watermark.max(value);
    }

    fn reset(&mut self, now: Instant) -> Demand {
        self.set(now, self.value);
        let span = now.saturating_duration_since(self.since).as_secs_f64();
        let demand = if span > 0.0 {
            let average = self.integral / span;
            let variance = (self.integral_of_squares / span - average * average).max(0.0);
            Demand {
                average,
                deviation: variance.sqrt(),
                high_watermark: self.high_watermark,
            }
        } else {
            Demand {
                average: self.value,
                deviation: 0.0,
                high_watermark: self.value,
            }
        };
        // The demand of the moment carries over into the new period.
        *self = Integrator {
            value: self.value,
            high_watermark: self.value,
            ..Integrator::new(now)
        };
        demand
    }
}

/// What a queue set reports as it goes: its virtual clock, and a fairest
/// waiting request that found too few seats free (given its payload).
pub(crate) struct Observers<T> {
    pub virtual_time: VirtualTime,
    pub not_accommodated: fn(&T),
}

pub(crate) struct QueueSet<T> {
    queuing: Option<Queuing>,
    exempt: bool,
    concurrency_limit: usize,
    queues: Vec<Queue<T>>,
    /// kube's `currentR`, in seat-seconds.
    current_r: f64,
    last_sync: Instant,
    robin_index: usize,
    enqueues: usize,
    next_id: u64,
    totals: Totals,
    demand: Integrator,
    observers: Option<Observers<T>>,
}

impl<T> QueueSet<T> {
    /// `queuing` is `None` for a level that rejects instead of queuing.
    pub(crate) fn new(queuing: Option<Queuing>, concurrency_limit: usize, now: Instant) -> Self {
        let count = queuing.map_or(0, |q| q.queues);
        QueueSet {
            queuing,
            exempt: false,
            concurrency_limit,
            queues: (0..count).map(|_| Queue::new()).collect(),
            current_r: 0.0,
            last_sync: now,
            robin_index: 0,
            enqueues: 0,
            next_id: 0,
            totals: Totals::default(),
            demand: Integrator::new(now),
            observers: None,
        }
    }

    /// The set, reporting to `observers`.
    pub(crate) fn observed(self, observers: Observers<T>) -> Self {
        QueueSet {
            observers: Some(observers),
            ..self
        }
    }

    /// The exempt level's: every request runs at once.
    pub(crate) fn exempt(now: Instant) -> Self {
        QueueSet {
            exempt: true,
            ..QueueSet::new(None, 0, now)
        }
    }

    pub(crate) fn totals(&self) -> Totals {
        self.totals
    }

    /// Advances `R` to `now`: the state since the last change has held until
    /// now (kube's `syncTimeLocked`).
    fn sync(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last_sync).as_secs_f64();
        self.last_sync = self.last_sync.max(now);
        let (mut busy, mut seats_asked) = (0usize, 0usize);
        for queue in &self.queues {
            seats_asked += queue.seats_in_use + queue.seats_waiting;
            if !queue.is_idle() {
                busy += 1;
            }
        }
        if busy > 0 {
            let rate = seats_asked.min(self.concurrency_limit) as f64 / busy as f64;
            self.current_r += rate * elapsed;
        }
        if let Some(observers) = &self.observers {
            observers.virtual_time.synced(self.current_r);
        }
    }

    fn note_demand(&mut self, now: Instant) {
        let demand = self.totals.seats_in_use + self.totals.seats_waiting;
        self.demand.set(now, demand as f64);
    }

    /// The demand since the last call, and a new period begins.
    pub(crate) fn take_demand(&mut self, now: Instant) -> Demand {
        self.demand.reset(now)
    }

    /// A request of flow `hash` asking for `seats` arrives; `payload` is
    /// made only if it has to wait. Requests the arrival lets run are given
    /// to `dispatched`.
    pub(crate) fn arrive(
        &mut self,
        now: Instant,
        hash: u64,
        seats: usize,
        payload: impl FnOnce() -> T,
        dispatched: &mut dyn FnMut(T, Executing),
    ) -> Arrival {
        self.sync(now);
        let Some(queuing) = self.queuing else {
            if !self.exempt && !self.fits(seats) {
                self.totals.rejected += 1;
                return Arrival::Rejected(RejectReason::ConcurrencyLimit);
            }
            return Arrival::Executing(self.start(now, None, seats));
        };
        let index = self.shortest_of_hand(hash, queuing);
        let queue = &self.queues[index];
        if self.totals.seats_in_use >= self.concurrency_limit
            && queue.waiting.len() >= queuing.queue_length_limit
        {
            self.totals.rejected += 1;
            return Arrival::Rejected(RejectReason::QueueFull);
        }
        if self.totals.waiting == 0 && self.fits(seats) {
            // Nothing waits anywhere: enqueuing and dispatching at once
            // would pick this request; skip the queue's round trip, but
            // not what its enqueuing does to the queue's virtual time.
            self.start_virtual_time(index);
            // The fairest, as the only queue with a request waiting.
            let queue = &self.queues[index];
            let start = queue.next_dispatch_r;
            let discounted = start - work(queue.seats_in_use);
            self.report_dispatch(
                start,
                &DispatchBounds {
                    next_s: [start; 2],
                    next_discounted_s: [discounted; 2],
                },
            );
            self.queues[index].next_dispatch_r += work(seats);
            return Arrival::Executing(self.start(now, Some(index), seats));
        }
        let at = self.enqueue(now, index, seats, payload());
        let length = self.queues[index].waiting.len();
        self.dispatch_as_much_as_possible(now, dispatched);
        Arrival::Queued { at, length }
    }

    fn fits(&self, seats: usize) -> bool {
        if seats > self.concurrency_limit {
            // Wider than the level: it runs alone (kube's
            // `canAccommodateSeatsLocked`).
            return self.totals.executing == 0;
        }
        self.totals.seats_in_use + seats <= self.concurrency_limit
    }

    /// Deals the flow's hand and picks the queue with the fewest seats
    /// waiting, starting at a rotating offset so ties are not always broken
    /// the same way.
    fn shortest_of_hand(&mut self, hash: u64, queuing: Queuing) -> usize {
        let hand = deal(hash, queuing.queues, queuing.hand_size);
        let hand = hand.cards();
        let offset = self.enqueues % hand.len().max(1);
        self.enqueues = self.enqueues.wrapping_add(1);
        (0..hand.len())
            .map(|i| hand[(offset + i) % hand.len()])
            .min_by_key(|&index| self.queues[index].seats_waiting)
            .unwrap_or(0)
    }

    /// A request arrives at queue `index` now: an idle queue starts at the
    /// current `R`, and a busy one's next dispatch is no earlier than this
    /// arrival once the request heads it (kube's `enqueueToBoundLocked`,
    /// then `boundNextDispatchLocked`, deferred in
    /// `timeoutOldRequestsAndRejectOrEnqueueLocked`). A queue whose
    /// requests all run still has its next dispatch from before they ran.
    fn start_virtual_time(&mut self, index: usize) {
        let current_r = self.current_r;
        let queue = &mut self.queues[index];
        if queue.is_idle() {
            queue.next_dispatch_r = current_r;
        } else if queue.waiting.is_empty() {
            queue.next_dispatch_r = queue.next_dispatch_r.max(current_r);
        }
    }

    fn enqueue(&mut self, now: Instant, index: usize, seats: usize, payload: T) -> QueuedAt {
        let id = self.next_id;
        self.next_id += 1;
        let current_r = self.current_r;
        self.start_virtual_time(index);
        let queue = &mut self.queues[index];
        queue.waiting.push_back(Waiting {
            id,
            seats,
            arrival_r: current_r,
            payload,
        });
        queue.seats_waiting += seats;
        self.totals.waiting += 1;
        self.totals.seats_waiting += seats;
        self.note_demand(now);
        QueuedAt { queue: index, id }
    }

    fn start(&mut self, now: Instant, queue: Option<usize>, seats: usize) -> Executing {
        if let Some(index) = queue {
            let queue = &mut self.queues[index];
            queue.executing += 1;
            queue.seats_in_use += seats;
        }
        self.totals.executing += 1;
        self.totals.seats_in_use += seats;
        self.totals.dispatched += 1;
        self.note_demand(now);
        Executing {
            queue,
            seats,
            started: now,
        }
    }

    fn dispatch_as_much_as_possible(
        &mut self,
        now: Instant,
        dispatched: &mut dyn FnMut(T, Executing),
    ) {
        while self.totals.waiting > 0 && self.totals.seats_in_use < self.concurrency_limit {
            let Some((index, bounds)) = self.fairest_queue() else {
                return;
            };
            let Some(head) = self.queues[index].waiting.front() else {
                return;
            };
            if !self.fits(head.seats) {
                if let Some(observers) = &self.observers {
                    (observers.not_accommodated)(&head.payload);
                }
                return;
            }
            self.report_dispatch(self.queues[index].next_dispatch_r, &bounds);
            let queue = &mut self.queues[index];
            let Some(request) = queue.waiting.pop_front() else {
                return;
            };
            queue.seats_waiting -= request.seats;
            queue.next_dispatch_r += work(request.seats);
            self.robin_index = index;
            self.totals.waiting -= 1;
            self.totals.seats_waiting -= request.seats;
            self.bound_next_dispatch(index);
            let executing = self.start(now, Some(index), request.seats);
            dispatched(request.payload, executing);
        }
    }

    /// The queue whose head finishes first in virtual time, visiting the
    /// queues round robin from the one after the last dispatch so that ties
    /// go to the others, and the bounds of the queues' next dispatches
    /// (kube's `findDispatchQueueToBoundLocked`).
    fn fairest_queue(&self) -> Option<(usize, DispatchBounds)> {
        let count = self.queues.len();
        let mut best: Option<(f64, usize)> = None;
        let mut bounds = DispatchBounds {
            next_s: [f64::INFINITY, f64::NEG_INFINITY],
            next_discounted_s: [f64::INFINITY, f64::NEG_INFINITY],
        };
        for step in 1..=count {
            let index = (self.robin_index + step) % count;
            let queue = &self.queues[index];
            let Some(head) = queue.waiting.front() else {
                continue;
            };
            let start = queue.next_dispatch_r;
            let discounted = start - work(queue.seats_in_use);
            bounds.next_s = [bounds.next_s[0].min(start), bounds.next_s[1].max(start)];
            bounds.next_discounted_s = [
                bounds.next_discounted_s[0].min(discounted),
                bounds.next_discounted_s[1].max(discounted),
            ];
            let finish = start + work(head.seats);
            if best.is_none_or(|(least, _)| finish < least) {
                best = Some((finish, index));
            }
        }
        best.map(|(_, index)| (index, bounds))
    }

    /// A request is dispatched from a queue whose next dispatch was
    /// `start` (kube's `SetDispatchMetrics`).
    fn report_dispatch(&self, start: f64, bounds: &DispatchBounds) {
        if let Some(observers) = &self.observers {
            observers
                .virtual_time
                .dispatched(self.current_r, start, bounds);
        }
    }

    /// kube's anti-windup: a queue's next dispatch is never before its head
    /// request arrived, in virtual time.
    fn bound_next_dispatch(&mut self, index: usize) {
        let queue = &mut self.queues[index];
        if let Some(head) = queue.waiting.front() {
            queue.next_dispatch_r = queue.next_dispatch_r.max(head.arrival_r);
        }
    }

    /// An executing request is done; the seats go to whoever is fairest.
    pub(crate) fn finish(
        &mut self,
        now: Instant,
        executing: Executing,
        dispatched: &mut dyn FnMut(T, Executing),
    ) {
        self.sync(now);
        self.totals.executing -= 1;
        self.totals.seats_in_use -= executing.seats;
        if let Some(index) = executing.queue {
            let queue = &mut self.queues[index];
            queue.executing -= 1;
            queue.seats_in_use -= executing.seats;
            // The estimate was G per seat; correct it by the time served.
            let served = now.saturating_duration_since(executing.started);
            let correction =
                executing.seats as f64 * (ESTIMATED_SERVICE.as_secs_f64() - served.as_secs_f64());
            queue.next_dispatch_r -= correction;
            self.bound_next_dispatch(index);
        }
        self.note_demand(now);
        self.dispatch_as_much_as_possible(now, dispatched);
    }

    /// Takes a waiting request out of its queue (it timed out, or its client
    /// left); `None` when it is no longer waiting (it was dispatched).
    pub(crate) fn remove(&mut self, now: Instant, at: QueuedAt, reason: RejectReason) -> Option<T> {
        self.sync(now);
        let queue = self.queues.get_mut(at.queue)?;
        let position = queue.waiting.iter().position(|w| w.id == at.id)?;
        let request = queue.waiting.remove(position)?;
        queue.seats_waiting -= request.seats;
        self.totals.waiting -= 1;
        self.totals.seats_waiting -= request.seats;
        self.totals.rejected += 1;
        match reason {
            RejectReason::TimeOut => self.totals.timed_out += 1,
            RejectReason::Cancelled => self.totals.cancelled += 1,
            RejectReason::QueueFull | RejectReason::ConcurrencyLimit => {}
        }
        self.bound_next_dispatch(at.queue);
        self.note_demand(now);
        Some(request.payload)
    }

    /// A new concurrency limit (borrowing moved seats); waiting requests
    /// that now fit are dispatched.
    pub(crate) fn set_concurrency_limit(
        &mut self,
        now: Instant,
        limit: usize,
        dispatched: &mut dyn FnMut(T, Executing),
    ) {
        self.sync(now);
        self.concurrency_limit = limit;
        self.dispatch_as_much_as_possible(now, dispatched);
    }

    pub(crate) fn queue_dumps(&self) -> impl Iterator<Item = QueueDump> + '_ {
        self.queues.iter().map(|queue| QueueDump {
            waiting: queue.waiting.len(),
            executing: queue.executing,
            seats_in_use: queue.seats_in_use,
            next_dispatch_r: queue.next_dispatch_r,
            seats_waiting: queue.seats_waiting,
        })
    }

    /// Every waiting request, by queue index and place in its queue.
    pub(crate) fn waiting(&self) -> impl Iterator<Item = (usize, usize, &Waiting<T>)> {
        self.queues.iter().enumerate().flat_map(|(index, queue)| {
            queue
                .waiting
                .iter()
                .enumerate()
                .map(move |(place, request)| (index, place, request))
        })
    }

    pub(crate) fn active_queues(&self) -> usize {
        self.queues.iter().filter(|q| !q.waiting.is_empty()).count()
    }
}

impl<T> Waiting<T> {
    pub(crate) fn seats(&self) -> usize {
        self.seats
    }
}

/// The estimated work of a request of `seats`, in seat-seconds.
pub(crate) fn work(seats: usize) -> f64 {
    seats as f64 * ESTIMATED_SERVICE.as_secs_f64()
}

/// The largest hand the manifest allows (`config::bounds::MAX_HAND`).
pub(crate) use crate::config::bounds::MAX_HAND;

/// A flow's queues, dealt from its hash.
pub(crate) struct Hand {
    cards: [usize; MAX_HAND],
    len: usize,
}

impl Hand {
    pub(crate) fn cards(&self) -> &[usize] {
        &self.cards[..self.len]
    }
}

/// Deals `hand_size` distinct cards from a deck of `deck` out of `hash`, as
/// kube's shuffle-sharding dealer does: successive remainders of the hash
/// pick each card among those not dealt yet.
pub(crate) fn deal(hash: u64, deck: usize, hand_size: usize) -> Hand {
    let mut hand = Hand {
        cards: [0; MAX_HAND],
        len: 0,
    };
    // The cards dealt so far, in ascending order.
    let mut dealt = [0usize; MAX_HAND];
    let mut remaining = hash;
    for i in 0..hand_size.min(deck).min(MAX_HAND) {
        let size = (deck - i) as u64;
        let mut card = (remaining % size) as usize;
        remaining /= size;
        // The card-th of the cards not dealt yet.
        let mut place = 0;
        while place < i && dealt[place] <= card {
            card += 1;
            place += 1;
        }
        dealt.copy_within(place..i, place + 1);
        dealt[place] = card;
        hand.cards[i] = card;
        hand.len = i + 1;
    }
    hand
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUEUING: Queuing = Queuing {
        queues: 8,
        hand_size: 2,
        queue_length_limit: 100,
    };

    /// A fake clock: a start and an offset the test moves.
    struct Clock(Instant);

    impl Clock {
        fn at(&self, millis: u64) -> Instant {
            self.0 + Duration::from_millis(millis)
        }
    }

    /// Two flows whose hands do not overlap, in an 8-queue deck of hands of 2.
    fn disjoint_flows() -> (u64, u64) {
        let first = 0u64;
        let hand = deal(first, 8, 2);
        let second = (1..1000u64)
            .find(|h| {
                deal(*h, 8, 2)
                    .cards()
                    .iter()
                    .all(|card| !hand.cards().contains(card))
            })
            .expect("a disjoint hand");
        (first, second)
    }

    #[test]
    fn hands_hold_distinct_cards_of_the_deck() {
        for hash in [0u64, 1, 7, 12345, u64::MAX, 0xdead_beef_cafe] {
            let hand = deal(hash, 64, 6).cards().to_vec();
            assert_eq!(hand.len(), 6);
            let mut sorted = hand.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), 6, "{hand:?}");
            assert!(hand.iter().all(|&card| card < 64));
        }
        // The deal is a function of the hash.
        assert_eq!(deal(42, 64, 6).cards(), deal(42, 64, 6).cards());
        assert_ne!(deal(42, 64, 6).cards(), deal(43, 64, 6).cards());
        // A whole deck dealt is every card once.
        let mut all = deal(987_654_321, 5, 5).cards().to_vec();
        all.sort_unstable();
        assert_eq!(all, [0, 1, 2, 3, 4]);
    }

    /// A discrete-event run: each flow (hash, seats) keeps 10 requests
    /// waiting, every request executes for 10 ms; returns how many requests
    /// of each flow ran in `rounds` completions.
    fn run_backlogged(flows: &[(u64, usize)], limit: usize, rounds: usize) -> Vec<usize> {
        let clock = Clock(Instant::now());
        let mut set: QueueSet<usize> = QueueSet::new(Some(QUEUING), limit, clock.at(0));
        // (finishes at, flow, its seats)
        let mut running: Vec<(u64, usize, Executing)> = Vec::new();
        let mut served = vec![0; flows.len()];
        let mut now = 0;
        let mut started = Vec::new();
        for _ in 0..10 {
            for (flow, &(hash, seats)) in flows.iter().enumerate() {
                let arrival = set.arrive(clock.at(now), hash, seats, || flow, &mut |f, e| {
                    started.push((f, e))
                });
                if let Arrival::Executing(e) = arrival {
                    started.push((flow, e));
                }
            }
        }
        for _ in 0..rounds {
            running.extend(started.drain(..).map(|(f, e)| (now + 10, f, e)));
            running.sort_by_key(|(at, _, _)| std::cmp::Reverse(*at));
            let Some((at, flow, executing)) = running.pop() else {
                break;
            };
            now = at;
            served[flow] += 1;
            set.finish(clock.at(now), executing, &mut |f, e| started.push((f, e)));
            // The flow keeps its backlog.
            let (hash, seats) = flows[flow];
            let arrival = set.arrive(clock.at(now), hash, seats, || flow, &mut |f, e| {
                started.push((f, e))
            });
            if let Arrival::Executing(e) = arrival {
                started.push((flow, e));
            }
        }
        served
    }

    #[test]
    fn backlogged_flows_of_equal_width_share_equally() {
        let (a, b) = disjoint_flows();
        let served = run_backlogged(&[(a, 1), (b, 1)], 1, 200);
        assert_eq!(served.iter().sum::<usize>(), 200);
        assert!(served[0].abs_diff(served[1]) <= 2, "{served:?}");
        let served = run_backlogged(&[(a, 1), (b, 1)], 3, 300);
        assert!(served[0].abs_diff(served[1]) <= 3, "{served:?}");
    }

    #[test]
    fn a_wider_flow_gets_as_many_seat_seconds_not_as_many_requests() {
        let (a, b) = disjoint_flows();
        let served = run_backlogged(&[(a, 1), (b, 2)], 2, 300);
        // Flow b's requests take two seats for as long: it gets about half
        // the requests of a.
        let ratio = served[0] as f64 / served[1] as f64;
        assert!((1.5..=2.5).contains(&ratio), "{served:?}");
    }

    #[test]
    fn a_new_flow_is_served_before_a_backlogged_one() {
        let clock = Clock(Instant::now());
        // Hands of one queue: each flow has exactly one.
        let one = Queuing {
            hand_size: 1,
            ..QUEUING
        };
        let noisy = 0;
        let quiet = (1..1000u64)
            .find(|h| deal(*h, 8, 1).cards() != deal(noisy, 8, 1).cards())
            .expect("another queue");
        let mut set: QueueSet<&str> = QueueSet::new(Some(one), 1, clock.at(0));
        let mut started = Vec::new();
        let first = set.arrive(clock.at(0), noisy, 1, || "noisy", &mut |_, _| {});
        let Arrival::Executing(first) = first else {
            panic!("the first request runs at once");
        };
        for _ in 0..20 {
            set.arrive(clock.at(1), noisy, 1, || "noisy", &mut |p, _| {
                started.push(p)
            });
        }
        set.arrive(clock.at(2), quiet, 1, || "quiet", &mut |p, _| {
            started.push(p)
        });
        assert!(started.is_empty());
        set.finish(clock.at(20), first, &mut |p, _| started.push(p));
        assert_eq!(started, ["quiet"]);
    }

    /// kube never lets a queue's next dispatch precede the arrival of the
    /// request at its head (`boundNextDispatchLocked`, which
    /// `timeoutOldRequestsAndRejectOrEnqueueLocked` defers after each
    /// enqueue, in `fairqueuing/queueset/queueset.go`). A queue whose one
    /// request has run for a second while `R` went on has its next
    /// dispatch a second behind: the next request of its flow, run at once
    /// or queued, starts at the current `R`, not where the queue left off.
    #[test]
    fn a_request_joining_a_queue_that_only_runs_starts_at_the_current_r() {
        let clock = Clock(Instant::now());
        let one = Queuing {
            hand_size: 1,
            ..QUEUING
        };
        let mut set: QueueSet<()> = QueueSet::new(Some(one), 2, clock.at(0));
        let mut ignore = |_: (), _: Executing| {};
        let queue = deal(1, 8, 1).cards()[0];
        let next_dispatch = |set: &QueueSet<()>| {
            set.queue_dumps()
                .nth(queue)
                .expect("the flow's queue")
                .next_dispatch_r
        };
        assert!(matches!(
            set.arrive(clock.at(0), 1, 1, || (), &mut ignore),
            Arrival::Executing(_)
        ));
        // One queue busy, one seat asked of 2: R went on at 1 a second.
        assert!(matches!(
            set.arrive(clock.at(1000), 1, 1, || (), &mut ignore),
            Arrival::Executing(_)
        ));
        assert!(
            (next_dispatch(&set) - (1.0 + work(1))).abs() < 1e-9,
            "run at once: {}",
            next_dispatch(&set)
        );
        // Both seats taken: the next one waits, at the head of its queue.
        let mut set: QueueSet<()> = QueueSet::new(Some(one), 1, clock.at(0));
        assert!(matches!(
            set.arrive(clock.at(0), 1, 1, || (), &mut ignore),
            Arrival::Executing(_)
        ));
        assert!(matches!(
            set.arrive(clock.at(1000), 1, 1, || (), &mut ignore),
            Arrival::Queued { .. }
        ));
        assert!(
            (next_dispatch(&set) - 1.0).abs() < 1e-9,
            "queued: {}",
            next_dispatch(&set)
        );
    }

    #[test]
    fn a_full_queue_rejects_only_while_every_seat_is_taken() {
        let clock = Clock(Instant::now());
        let queuing = Queuing {
            queues: 1,
            hand_size: 1,
            queue_length_limit: 2,
        };
        let mut set: QueueSet<()> = QueueSet::new(Some(queuing), 1, clock.at(0));
        let mut ignore = |_: (), _: Executing| {};
        assert!(matches!(
            set.arrive(clock.at(0), 1, 1, || (), &mut ignore),
            Arrival::Executing(_)
        ));
        for _ in 0..2 {
            assert!(matches!(
                set.arrive(clock.at(0), 1, 1, || (), &mut ignore),
                Arrival::Queued { .. }
            ));
        }
        assert!(matches!(
            set.arrive(clock.at(0), 1, 1, || (), &mut ignore),
            Arrival::Rejected(RejectReason::QueueFull)
        ));
        assert_eq!(set.totals().rejected, 1);
    }

    #[test]
    fn a_level_without_queues_rejects_what_does_not_fit() {
        let clock = Clock(Instant::now());
        let mut set: QueueSet<()> = QueueSet::new(None, 2, clock.at(0));
        let mut ignore = |_: (), _: Executing| {};
        let Arrival::Executing(first) = set.arrive(clock.at(0), 1, 2, || (), &mut ignore) else {
            panic!("two seats are free");
        };
        assert!(matches!(
            set.arrive(clock.at(0), 1, 1, || (), &mut ignore),
            Arrival::Rejected(RejectReason::ConcurrencyLimit)
        ));
        set.finish(clock.at(5), first, &mut ignore);
        assert!(matches!(
            set.arrive(clock.at(5), 1, 1, || (), &mut ignore),
            Arrival::Executing(_)
        ));
    }

    #[test]
    fn a_request_wider_than_the_level_runs_alone() {
        let clock = Clock(Instant::now());
        let mut set: QueueSet<&str> = QueueSet::new(Some(QUEUING), 2, clock.at(0));
        let mut started = Vec::new();
        let Arrival::Executing(narrow) = set.arrive(clock.at(0), 1, 1, || "narrow", &mut |_, _| {})
        else {
            panic!("a seat is free");
        };
        set.arrive(clock.at(0), 2, 5, || "wide", &mut |p, _| started.push(p));
        assert!(started.is_empty(), "it waits for the level to empty");
        set.finish(clock.at(4), narrow, &mut |p, _| started.push(p));
        assert_eq!(started, ["wide"]);
    }

    #[test]
    fn a_removed_request_leaves_its_queue_and_a_dispatched_one_cannot_be_removed() {
        let clock = Clock(Instant::now());
        let mut set: QueueSet<u32> = QueueSet::new(Some(QUEUING), 1, clock.at(0));
        let Arrival::Executing(first) = set.arrive(clock.at(0), 1, 1, || 0, &mut |_, _| {}) else {
            panic!("a seat is free");
        };
        let Arrival::Queued { at: second, .. } =
            set.arrive(clock.at(0), 1, 1, || 2, &mut |_, _| {})
        else {
            panic!("it waits");
        };
        let Arrival::Queued { at: third, .. } = set.arrive(clock.at(0), 1, 1, || 3, &mut |_, _| {})
        else {
            panic!("it waits");
        };
        assert_eq!(
            set.remove(clock.at(1), second, RejectReason::TimeOut),
            Some(2)
        );
        assert_eq!(set.totals().timed_out, 1);
        let mut started = Vec::new();
        set.finish(clock.at(2), first, &mut |p, _| started.push(p));
        assert_eq!(started, [3]);
        assert_eq!(
            set.remove(clock.at(3), third, RejectReason::Cancelled),
            None
        );
        assert_eq!(set.totals().cancelled, 0);
    }

    #[test]
    fn the_exempt_set_runs_everything_and_counts_its_demand() {
        let clock = Clock(Instant::now());
        let mut set: QueueSet<()> = QueueSet::exempt(clock.at(0));
        let mut ignore = |_: (), _: Executing| {};
        for _ in 0..3 {
            assert!(matches!(
                set.arrive(clock.at(0), 1, 10, || (), &mut ignore),
                Arrival::Executing(_)
            ));
        }
        assert_eq!(set.totals().seats_in_use, 30);
        assert_eq!(set.take_demand(clock.at(1000)).high_watermark, 30.0);
    }

    #[test]
    fn demand_is_integrated_over_time() {
        let clock = Clock(Instant::now());
        let mut set: QueueSet<()> = QueueSet::new(None, 10, clock.at(0));
        let mut ignore = |_: (), _: Executing| {};
        let Arrival::Executing(e) = set.arrive(clock.at(0), 1, 4, || (), &mut ignore) else {
            panic!("room");
        };
        set.finish(clock.at(500), e, &mut ignore);
        let demand = set.take_demand(clock.at(1000));
        assert!((demand.average - 2.0).abs() < 1e-9, "{demand:?}");
        assert!((demand.deviation - 2.0).abs() < 1e-9, "{demand:?}");
        assert_eq!(demand.high_watermark, 4.0);
    }
}
