//! What the filters of one configuration may hold at once: instance slots
//! (`[limits] filter_instances`, within the engine pool's own limit) and
//! linear memory (`[limits] filter_memory`); and how many calls of one
//! filter run at once ([`Turns`]). Running out is its own call
//! outcome, [`Exhausted`], the gateway's capacity and never the filter's
//! failure: the call waits a bounded time for room, then is refused.
//!
//! A fresh instance takes a [`Slot`] before it is instantiated, so
//! wasmtime's pool is never asked for more than it holds. Its store's data
//! ([`StoreData`]) carries a [`MemoryShare`]: every growth of a linear
//! memory, the initial allocation included, is charged to the
//! configuration's total first, so the total never passes the cap. Idle
//! pooled instances keep their slot and their memory, and are the first
//! released when a call waits.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, TryAcquireError};
use tokio::time::Instant;
use wasmtime_wasi::{WasiCtxView, WasiView};

use super::state::FilterState;

/// What a call found exhausted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Exhausted {
    /// Every instance slot is taken.
    #[error("every filter instance slot was in use (limits.filter_instances)")]
    Instances,
    /// The memory budget has no room for another instance.
    #[error("the filters' linear memory was at its cap (limits.filter_memory)")]
    Memory,
    /// The filter's calls were running on every worker thread.
    #[error("the filter's calls were running on every worker thread (one at a time on each)")]
    Turns,
}

/// How many calls of one filter run at once: one per worker thread of the
/// runtime. A guest call is computation and nothing else, so more at once
/// buy no throughput: on a shared thread each would get a share of it, and
/// a burst of dear calls (first calls that parse a large config) would all
/// pass their timeout together, lose their instances (a timed-out instance
/// is never reused) and start over, never filling the pool: the collapse
/// bench/README.md's many-users row found. A call beyond them waits for its
/// turn, in order and outside its timeout, within the capacity's wait.
pub(crate) struct Turns(Arc<Semaphore>);

impl Turns {
    /// One turn per worker thread of the runtime the filter is loaded in
    /// (one outside any).
    pub(crate) fn per_worker() -> Self {
        let workers = tokio::runtime::Handle::try_current()
            .map_or(1, |runtime| runtime.metrics().num_workers());
        Turns(Arc::new(Semaphore::new(workers.max(1))))
    }

    /// A turn at once, if one is free.
    pub(crate) fn try_take(&self) -> Option<OwnedSemaphorePermit> {
        self.0.clone().try_acquire_owned().ok()
    }
}

/// When a call's waits end: the configured wait after the first of them
/// began (for its turn, a slot or memory), so that together they stay
/// within it. The clock is read only when there is something to wait for.
#[derive(Debug, Default)]
pub struct WaitDeadline(Option<Instant>);

impl WaitDeadline {
    fn at(&mut self, wait: Duration) -> Instant {
        *self.0.get_or_insert_with(|| Instant::now() + wait)
    }
}

/// Idle instances a waiting call may have dropped to make room.
pub(crate) trait IdleInstances: Send + Sync {
    /// Drops one idle instance; false when there was none.
    fn release_one(&self) -> bool;
}

/// The instance slots and filter memory of one configuration.
pub struct Capacity {
    /// This configuration's `filter_instances`.
    instances: Arc<Semaphore>,
    /// The engine pool's slots, shared by every configuration alive (a
    /// reload's old one drains beside the new).
    engine: Arc<Semaphore>,
    memory: Arc<MemoryPool>,
    /// How long a call may wait for room (kube's priority and fairness
    /// queues a request for at most a quarter of its timeout).
    wait: Duration,
    /// Calls waiting now: while any does, instances are not kept idle.
    waiting: AtomicUsize,
    idle: Mutex<Vec<Weak<dyn IdleInstances>>>,
}

/// The configuration's filter memory: a cap and what is charged to it.
struct MemoryPool {
    cap: usize,
    used: AtomicUsize,
    /// Woken whenever memory is given back.
    freed: Notify,
}

impl MemoryPool {
    fn try_charge(&self, bytes: usize) -> bool {
        bytes == 0
            || self
                .used
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                    used.checked_add(bytes).filter(|total| *total <= self.cap)
                })
                .is_ok()
    }

    fn give_back(&self, bytes: usize) {
        if bytes > 0 {
            self.used.fetch_sub(bytes, Ordering::AcqRel);
            self.freed.notify_waiters();
        }
    }
}

/// An instance's place in the pools; freed when dropped, which must be
/// after the instance's store (wasmtime frees its pool slot then).
pub struct Slot {
    _configuration: OwnedSemaphorePermit,
    _engine: OwnedSemaphorePermit,
}

impl Capacity {
    /// `instances` and `memory_bytes` from the configuration's `[limits]`,
    /// `engine` the engine pool's slots, `wait` the longest a call waits.
    pub fn new(
        instances: usize,
        memory_bytes: u64,
        engine: Arc<Semaphore>,
        wait: Duration,
    ) -> Self {
        Capacity {
            instances: Arc::new(Semaphore::new(instances)),
            engine,
            memory: Arc::new(MemoryPool {
                cap: usize::try_from(memory_bytes).unwrap_or(usize::MAX),
                used: AtomicUsize::new(0),
                freed: Notify::new(),
            }),
            wait,
            waiting: AtomicUsize::new(0),
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Lets waiting calls drop `pool`'s idle instances.
    pub(crate) fn register_idle(&self, pool: Weak<dyn IdleInstances>) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.retain(|pool| pool.strong_count() > 0);
            idle.push(pool);
        }
    }

    /// True while some call waits for room: an instance that finished its
    /// call is then dropped rather than kept idle.
    pub(crate) fn under_pressure(&self) -> bool {
        self.waiting.load(Ordering::Relaxed) > 0
    }

    /// A slot and a memory share for a new instance expected to need
    /// `expected` bytes of linear memory (charged up front, so concurrent
    /// instantiations cannot all count on the same room). Waits until
    /// `deadline`, dropping idle instances first.
    pub async fn reserve(
        &self,
        expected: usize,
        deadline: &mut WaitDeadline,
    ) -> Result<(Slot, MemoryShare), Exhausted> {
        let slot = match self.try_slot() {
            Some(slot) => slot,
            None => {
                let _waiting = Waiting::new(&self.waiting);
                let deadline = deadline.at(self.wait);
                Slot {
                    _configuration: self.permit(&self.instances, deadline).await?,
                    _engine: self.permit(&self.engine, deadline).await?,
                }
            }
        };
        if !self.memory.try_charge(expected) {
            let _waiting = Waiting::new(&self.waiting);
            self.charge(expected, deadline.at(self.wait)).await?;
        }
        Ok((
            slot,
            MemoryShare {
                pool: self.memory.clone(),
                charged: expected,
                grown: 0,
                refused: false,
            },
        ))
    }

    /// A turn of `turns` once one is free, waiting in order until
    /// `deadline`. The wait is not room the call needs, so it does not count
    /// as pressure: instances that finish meanwhile stay idle.
    pub(crate) async fn turn(
        &self,
        turns: &Turns,
        deadline: &mut WaitDeadline,
    ) -> Result<OwnedSemaphorePermit, Exhausted> {
        let deadline = deadline.at(self.wait);
        match tokio::time::timeout_at(deadline, turns.0.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(Exhausted::Turns),
        }
    }

    fn try_slot(&self) -> Option<Slot> {
        let configuration = self.instances.clone().try_acquire_owned().ok()?;
        let engine = self.engine.clone().try_acquire_owned().ok()?;
        Some(Slot {
            _configuration: configuration,
            _engine: engine,
        })
    }

    async fn permit(
        &self,
        semaphore: &Arc<Semaphore>,
        deadline: Instant,
    ) -> Result<OwnedSemaphorePermit, Exhausted> {
        loop {
            match semaphore.clone().try_acquire_owned() {
                Ok(permit) => return Ok(permit),
                Err(TryAcquireError::Closed) => return Err(Exhausted::Instances),
                Err(TryAcquireError::NoPermits) if self.release_idle() => {}
                Err(TryAcquireError::NoPermits) => break,
            }
        }
        match tokio::time::timeout_at(deadline, semaphore.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(Exhausted::Instances),
        }
    }

    async fn charge(&self, bytes: usize, deadline: Instant) -> Result<(), Exhausted> {
        loop {
            let freed = self.memory.freed.notified();
            tokio::pin!(freed);
            // Registered before the check, so a release between the check
            // and the wait still wakes this call.
            freed.as_mut().enable();
            if self.memory.try_charge(bytes) {
                return Ok(());
            }
            if self.release_idle() {
                continue;
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return Err(Exhausted::Memory);
            }
        }
    }

    /// Drops one idle instance of any filter; false when none was idle.
    fn release_idle(&self) -> bool {
        let pools: Vec<_> = match self.idle.lock() {
            Ok(idle) => idle.iter().filter_map(Weak::upgrade).collect(),
            Err(_) => return false,
        };
        pools.iter().any(|pool| pool.release_one())
    }
}

/// Counts a waiting call for as long as it waits.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Waiting(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One store's part of the configuration's filter memory: what its linear
/// memories have grown to, and what is charged for them (at least that,
/// more when reserved up front). Given back when the store is dropped.
pub struct MemoryShare {
    pool: Arc<MemoryPool>,
    charged: usize,
    grown: usize,
    /// A growth was refused because the total was at its cap.
    refused: bool,
}

impl MemoryShare {
    /// Charges `bytes` more of linear memory; false (and remembered) when
    /// the total would pass the cap.
    fn grow(&mut self, bytes: usize) -> bool {
        let grown = self.grown.saturating_add(bytes);
        if grown > self.charged {
            if !self.pool.try_charge(grown - self.charged) {
                self.refused = true;
                return false;
            }
            self.charged = grown;
        }
        self.grown = grown;
        true
    }
}

impl Drop for MemoryShare {
    fn drop(&mut self) {
        self.pool.give_back(self.charged);
    }
}

/// What a filter's store holds: the filter's state, and its share of the
/// configuration's filter memory, which the store's resource limiter
/// charges before the filter's own `memory` cap is consulted.
pub struct StoreData {
    pub(crate) state: FilterState,
    memory: MemoryShare,
}

impl StoreData {
    /// A store's data: the filter's state and its share of the memory budget.
    pub fn new(state: FilterState, memory: MemoryShare) -> Self {
        StoreData { state, memory }
    }

    /// The total size of the store's linear memories, in bytes.
    pub(crate) fn memory_size(&self) -> usize {
        self.memory.grown
    }

    /// Whether a growth was refused for the total's cap since the last
    /// call to this; a call that then failed ran out of capacity.
    pub(crate) fn take_memory_refused(&mut self) -> bool {
        std::mem::take(&mut self.memory.refused)
    }
}

impl wasmtime::ResourceLimiter for StoreData {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // A growth past the filter's own cap is the filter's failure (a
        // trap), left to its budget and never charged.
        if self.state.memory.admits(current, desired)
            && !self.memory.grow(desired.saturating_sub(current))
        {
            return Ok(false);
        }
        self.state.memory.memory_growing(current, desired, maximum)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.state.memory.table_growing(current, desired, maximum)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.state.memory.memory_grow_failed(error)
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.state.memory.table_grow_failed(error)
    }

    fn instances(&self) -> usize {
        self.state.memory.instances()
    }

    fn tables(&self) -> usize {
        self.state.memory.tables()
    }

    fn memories(&self) -> usize {
        self.state.memory.memories()
    }
}

impl WasiView for StoreData {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        self.state.ctx()
    }
}
