//! One loaded filter: its pre-instantiated component, its budgets, and its
//! instances. A call gives one of five [`Outcome`]s: the filter's answer,
//! its own error, a trap, a timeout, or no room to run it (the gateway's
//! capacity, never the filter's failure), never confused with one another.
//!
//! Isolation: `per-request` instantiates a fresh store for every call (the
//! pooling allocator makes that cheap); `pooled` keeps idle instances and
//! re-arms their budgets per call. An instance that trapped or timed out is
//! never reused: a trap may leave it in any state. Every instance holds a
//! slot and a share of memory of the configuration's [`Capacity`], and a
//! call runs only on one of the filter's [`Turns`].
//!
//! Versions: a component built against `wasmgate:filter@0.4.0`, `0.3.0`,
//! `0.2.0` or `0.1.0` loads; [`Versioned`] holds which, and `super::legacy`
//! converts the older versions' records. A 0.4.0 auditor takes its events
//! as records or serialised ([`AuditorForm`]), by the export it has. Authenticators and authorizers with `cache` in the manifest
//! answer from their [`DecisionCache`] when it holds the answer.
//!
//! A call's future (its instance's and wasmtime's state, kilobytes) is
//! boxed where the call is made: inline, it would be part of every stage's
//! future around it, and copied each time one of those is moved (into its
//! box, into the cache's lookup), on a cache hit too.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::OwnedSemaphorePermit;
use wasmtime::component::InstancePre;
use wasmtime::{Store, UpdateDeadline};

use super::audit_batch::AuditBatch;
use super::bindings::{
    admission, auditor, authenticator, authorizer, json_auditor, types, v0_1, v0_2, v0_3,
};
use super::cache_key;
use super::capacity::{Capacity, Exhausted, IdleInstances, Slot, StoreData, Turns, WaitDeadline};
use super::convert;
use super::engine::{LoadError, WasmHost};
use super::epoch::EpochTicker;
use super::legacy::{v0_1 as v0_1_of, v0_2 as v0_2_of, v0_3 as v0_3_of};
use super::state::{FilterIdentity, FilterState, SinkWriter, bounded};
use crate::decision_cache::{DecisionCache, Fetched, Keep, Lookup, Pending};
pub use admission::exports::wasmgate::filter::admission::{
    AdmissionRequest, AdmissionResponse, Operation,
};
pub use auditor::exports::wasmgate::filter::auditor::{
    Annotation, Event, Level, ObjectReference, Stage,
};
pub use authenticator::exports::wasmgate::filter::authenticator::AuthnResult;
pub use authorizer::exports::wasmgate::filter::authorizer::{Attributes, Decision};
pub use json_auditor::exports::wasmgate::filter::json_auditor::{JsonBatch, Stage as JsonStage};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use crate::config::stages::{FilterSpec, Isolation};
use crate::context::UserInfo;
use crate::metrics::gateway::RetirementLabels;
use crate::metrics::{FilterName, FilterOutcome};

/// The outcomes of calling a filter: the filter's four (answer, error,
/// trap, timeout), and the gateway's running out of room to run it.
#[derive(Debug, Clone)]
pub enum Outcome<T> {
    /// The filter answered.
    Answer(T),
    /// The filter reported its own failure.
    FilterError(String),
    /// The filter trapped (or could not be instantiated).
    Trap(String),
    /// The filter ran past its deadline and was stopped.
    Timeout,
    /// No instance slot or no filter memory freed up in time: the call did
    /// not run, or was refused memory it needed. Not the filter's failure.
    Exhausted(Exhausted),
}

impl<T> Outcome<T> {
    fn index(&self) -> usize {
        match self {
            Outcome::Answer(_) => 0,
            Outcome::FilterError(_) => 1,
            Outcome::Trap(_) => 2,
            Outcome::Timeout => 3,
            Outcome::Exhausted(_) => 4,
        }
    }

    /// A short word for logs, metrics and `wasmgate try`.
    pub(crate) fn kind(&self) -> &'static str {
        OUTCOME_KINDS[self.index()]
    }
}

/// An authenticator's answer as the chain takes it, and as its cache keeps
/// it (the WIT's `error` case is the call's [`Outcome::FilterError`]).
#[derive(Debug, Clone)]
pub enum AuthnAnswer {
    /// The request is the filter's user's.
    Authenticated {
        /// The user the filter named, made the one the request goes on as
        /// when the answer is taken ([`convert::authenticated_user`]), so
        /// that a kept answer is shared, not copied, by every request it
        /// identifies.
        user: Arc<UserInfo>,
        /// `system:authenticated` was added to the filter's groups (the
        /// last of `user`'s), so the answer can be told as the filter gave it.
        group_added: bool,
    },
    /// The filter does not know the request's credentials.
    NoOpinion,
}

/// One call of a filter: its outcome, and whether it ran in an instance
/// made for it (always, with `per-request` isolation; with `pooled`, when
/// no idle instance was there to reuse).
#[derive(Debug, Clone)]
pub struct Call<T> {
    /// What the call came to.
    pub outcome: Outcome<T>,
    /// The instance was new, not a pooled one reused.
    pub fresh: bool,
}

impl<T> Call<T> {
    /// The call with its answer, when it has one, made by `take`.
    fn answered(self, take: impl FnOnce(T) -> T) -> Call<T> {
        let outcome = match self.outcome {
            Outcome::Answer(answer) => Outcome::Answer(take(answer)),
            unanswered => unanswered,
        };
        Call { outcome, ..self }
    }
}

/// [`Outcome::kind`]'s words, indexed like [`Outcome::index`].
const OUTCOME_KINDS: [&str; 5] = ["answer", "error", "trap", "timeout", "exhausted"];

/// A call that got no answer from the filter, whatever its answer's type.
enum Unanswered {
    Trap(String),
    Timeout,
    Exhausted(Exhausted),
}

impl<T> From<Unanswered> for Outcome<T> {
    fn from(unanswered: Unanswered) -> Self {
        match unanswered {
            Unanswered::Trap(message) => Outcome::Trap(message),
            Unanswered::Timeout => Outcome::Timeout,
            Unanswered::Exhausted(what) => Outcome::Exhausted(what),
        }
    }
}

/// Raised from the epoch callback when a call's deadline passed.
#[derive(Debug, thiserror::Error)]
#[error("the filter ran past its deadline")]
struct DeadlineExceeded;

/// Idle pooled instances kept per filter; more are dropped when returned.
const MAX_IDLE_INSTANCES: usize = 32;

/// What a component was built against: the current contract or one of the
/// previous ones, with what is bound for it.
pub enum Versioned<Current, V0_3, V0_2, V0_1> {
    /// `wasmgate:filter@0.4.0`.
    V0_4(Current),
    /// `wasmgate:filter@0.3.0`.
    V0_3(V0_3),
    /// `wasmgate:filter@0.2.0`.
    V0_2(V0_2),
    /// `wasmgate:filter@0.1.0`.
    V0_1(V0_1),
}

/// A filter world: how its exports are pre-instantiated and instantiated.
pub trait Kind: Send + Sync + 'static {
    /// The world's pre-instantiated component (bindgen's `...Pre`).
    type Pre: Send + Sync;
    /// The world's instantiated exports.
    type Exports: Send;
    /// What one call answers.
    type Answer: Clone + Send + Sync;
    /// The world's name in `wit/filter.wit`.
    const WORLD: &'static str;
    /// Pre-instantiates a component for this world.
    fn pre(pre: InstancePre<StoreData>) -> wasmtime::Result<Self::Pre>;
    /// Instantiates the world's exports in `store`.
    fn instantiate(
        pre: &Self::Pre,
        store: &mut Store<StoreData>,
    ) -> impl Future<Output = wasmtime::Result<Self::Exports>> + Send;
}

macro_rules! filter_kind {
    ($kind:ident, $module:ident, $world:ident, $pre:ident, $answer:ty, $name:literal) => {
        filter_kind!(
            $kind,
            $module,
            $world,
            $pre,
            $module::$pre<StoreData>,
            $module::$world,
            $answer,
            $name
        );
    };
    // `$current_pre` and `$current` are the current contract's: bindgen's
    // types, or a type with the same `new` and `instantiate_async`.
    ($kind:ident, $module:ident, $world:ident, $pre:ident, $current_pre:ty, $current:ty, $answer:ty, $name:literal) => {
        #[doc = concat!("The `", $name, "` world of `wit/filter-0.4.0.wit`.")]
        pub struct $kind;
        impl Kind for $kind {
            type Pre = Versioned<
                $current_pre,
                v0_3::$module::$pre<StoreData>,
                v0_2::$module::$pre<StoreData>,
                v0_1::$module::$pre<StoreData>,
            >;
            type Exports = Versioned<
                $current,
                v0_3::$module::$world,
                v0_2::$module::$world,
                v0_1::$module::$world,
            >;
            type Answer = $answer;
            const WORLD: &'static str = $name;
            fn pre(pre: InstancePre<StoreData>) -> wasmtime::Result<Self::Pre> {
                let error = match <$current_pre>::new(pre.clone()) {
                    Ok(current) => return Ok(Versioned::V0_4(current)),
                    Err(error) => error,
                };
                if let Ok(previous) = v0_3::$module::$pre::new(pre.clone()) {
                    return Ok(Versioned::V0_3(previous));
                }
                if let Ok(previous) = v0_2::$module::$pre::new(pre.clone()) {
                    return Ok(Versioned::V0_2(previous));
                }
                v0_1::$module::$pre::new(pre)
                    .map(Versioned::V0_1)
                    .map_err(|_| {
                        error.context(
                            "it implements none of wasmgate:filter@0.4.0, 0.3.0, 0.2.0 and 0.1.0",
                        )
                    })
            }
            async fn instantiate(
                pre: &Self::Pre,
                store: &mut Store<StoreData>,
            ) -> wasmtime::Result<Self::Exports> {
                match pre {
                    Versioned::V0_4(pre) => pre.instantiate_async(store).await.map(Versioned::V0_4),
                    Versioned::V0_3(pre) => pre.instantiate_async(store).await.map(Versioned::V0_3),
                    Versioned::V0_2(pre) => pre.instantiate_async(store).await.map(Versioned::V0_2),
                    Versioned::V0_1(pre) => pre.instantiate_async(store).await.map(Versioned::V0_1),
                }
            }
        }
    };
}

/// How a 0.4.0 auditor takes its events: as records (`auditor`), or
/// serialised by the gateway (`json-auditor`).
pub enum AuditorForm<Records, Serialised> {
    /// World `auditor-filter`.
    Records(Records),
    /// World `json-auditor-filter`.
    Serialised(Serialised),
}

/// A 0.4.0 auditor, pre-instantiated.
type AuditorPre = AuditorForm<
    auditor::AuditorFilterPre<StoreData>,
    json_auditor::JsonAuditorFilterPre<StoreData>,
>;

impl AuditorPre {
    /// The form whose export the component has; the record world's error
    /// when it has neither.
    fn new(pre: InstancePre<StoreData>) -> wasmtime::Result<Self> {
        match json_auditor::JsonAuditorFilterPre::new(pre.clone()) {
            Ok(serialised) => Ok(AuditorForm::Serialised(serialised)),
            Err(_) => auditor::AuditorFilterPre::new(pre).map(AuditorForm::Records),
        }
    }

    async fn instantiate_async(
        &self,
        store: &mut Store<StoreData>,
    ) -> wasmtime::Result<AuditorForm<auditor::AuditorFilter, json_auditor::JsonAuditorFilter>>
    {
        match self {
            AuditorForm::Records(pre) => {
                pre.instantiate_async(store).await.map(AuditorForm::Records)
            }
            AuditorForm::Serialised(pre) => pre
                .instantiate_async(store)
                .await
                .map(AuditorForm::Serialised),
        }
    }
}

filter_kind!(
    Authenticator,
    authenticator,
    AuthenticatorFilter,
    AuthenticatorFilterPre,
    AuthnAnswer,
    "authenticator-filter"
);
filter_kind!(
    Authorizer,
    authorizer,
    AuthorizerFilter,
    AuthorizerFilterPre,
    Decision,
    "authorizer-filter"
);
filter_kind!(
    Admission,
    admission,
    AdmissionFilter,
    AdmissionFilterPre,
    AdmissionResponse,
    "admission-filter"
);
filter_kind!(
    Auditor,
    auditor,
    AuditorFilter,
    AuditorFilterPre,
    AuditorPre,
    AuditorForm<auditor::AuditorFilter, json_auditor::JsonAuditorFilter>,
    (),
    "auditor-filter"
);

struct Instance<K: Kind> {
    store: Store<StoreData>,
    exports: K::Exports,
    /// Calls answered so far.
    calls: u64,
    /// The turn of the call it is running (none while idle).
    turn: Option<OwnedSemaphorePermit>,
    /// Declared after the store, so given back only once the store (and
    /// with it wasmtime's pool slot) is gone.
    _slot: Slot,
}

/// A pooled filter's idle instances, most recently used last.
struct IdlePool<K: Kind>(Mutex<Vec<Instance<K>>>);

impl<K: Kind> IdleInstances for IdlePool<K> {
    fn release_one(&self) -> bool {
        // The least recently used goes; it is dropped once the lock is let go.
        let released = self
            .0
            .lock()
            .ok()
            .and_then(|mut idle| (!idle.is_empty()).then(|| idle.remove(0)));
        released.is_some()
    }
}

/// A filter's metric handles, fetched once so a call records without labels.
struct FilterMetrics {
    /// Indexed like [`Outcome::index`].
    outcomes: [Counter; 5],
    duration: Histogram,
    /// `wasmgate_filter_pool_idle_instances`.
    idle: Gauge,
    /// Instances dropped after a call: grown too big, trapped.
    retired_memory: Counter,
    retired_trap: Counter,
}

impl FilterMetrics {
    fn new(name: &str) -> Self {
        let metrics = crate::metrics::metrics();
        let outcome = |outcome: &str| {
            let labels = FilterOutcome {
                filter: name.to_owned(),
                outcome: outcome.to_owned(),
            };
            metrics.filter_calls.get_or_create(&labels).clone()
        };
        let retired = |reason: &'static str| {
            let labels = RetirementLabels {
                filter: name.to_owned(),
                reason,
            };
            metrics
                .gateway
                .filter_retirements
                .get_or_create(&labels)
                .clone()
        };
        FilterMetrics {
            idle: metrics
                .gateway
                .filter_idle
                .get_or_create(&crate::metrics::gateway::FilterLabel {
                    filter: name.to_owned(),
                })
                .clone(),
            retired_memory: retired("memory"),
            retired_trap: retired("trap"),
            outcomes: OUTCOME_KINDS.map(outcome),
            duration: metrics
                .filter_duration
                .get_or_create(&FilterName {
                    filter: name.to_owned(),
                })
                .clone(),
        }
    }
}

/// A filter ready to be called.
pub struct LoadedFilter<K: Kind> {
    pub(crate) spec: FilterSpec,
    identity: Arc<FilterIdentity>,
    metrics: FilterMetrics,
    engine: wasmtime::Engine,
    ticker: Arc<EpochTicker>,
    pre: K::Pre,
    capacity: Arc<Capacity>,
    turns: Turns,
    idle: Arc<IdlePool<K>>,
    /// The most linear memory an instance of this filter has had, in bytes:
    /// what a new instance reserves of the filter memory up front.
    footprint: AtomicUsize,
    /// Set once the cap was found too tight to pool this filter at all.
    warned_memory_tight: AtomicBool,
    /// Its answers kept, when the manifest sets `cache` (as the calls that
    /// got them: a call served from here is the one that filled it).
    cache: Option<DecisionCache<Call<K::Answer>>>,
    kind: PhantomData<K>,
}

impl<K: Kind> LoadedFilter<K> {
    /// Loads (or takes from the cache) the component and pre-instantiates
    /// it; its instances count against `capacity`.
    pub fn load(
        host: &WasmHost,
        spec: &FilterSpec,
        capacity: Arc<Capacity>,
    ) -> Result<Self, LoadError> {
        let path = spec.component.clone();
        let component = host.component(&path, spec.sha256.as_ref())?;
        let world_error = |error: wasmtime::Error| LoadError::World {
            path: path.clone(),
            world: K::WORLD,
            message: format!("{error:#}"),
        };
        let pre = host
            .linker
            .instantiate_pre(&component)
            .map_err(world_error)?;
        let pre = K::pre(pre).map_err(world_error)?;
        let sink = match &spec.sink {
            Some(sink) => Some(SinkWriter::open(sink).map_err(|source| LoadError::Read {
                path: match sink {
                    crate::config::stages::Sink::File(file) => file.clone(),
                    crate::config::stages::Sink::Stdout => "stdout".into(),
                },
                source,
            })?),
            None => None,
        };
        let identity = Arc::new(FilterIdentity {
            name: spec.name.to_string(),
            config_json: spec.config_json.clone(),
            sink,
            wasi: spec.wasi.clone(),
        });
        let idle = Arc::new(IdlePool(Mutex::new(Vec::new())));
        if spec.isolation == Isolation::Pooled {
            let weak: Weak<IdlePool<K>> = Arc::downgrade(&idle);
            capacity.register_idle(weak);
        }
        Ok(LoadedFilter {
            spec: spec.clone(),
            metrics: FilterMetrics::new(spec.name.as_str()),
            identity,
            engine: host.engine.clone(),
            ticker: host.ticker.clone(),
            pre,
            capacity,
            turns: Turns::per_worker(),
            idle,
            footprint: AtomicUsize::new(0),
            warned_memory_tight: AtomicBool::new(false),
            cache: spec
                .cache
                .map(|cache| DecisionCache::new(spec.name.as_str(), cache)),
            kind: PhantomData,
        })
    }

    pub(crate) fn name(&self) -> &str {
        self.spec.name.as_str()
    }

    /// Counts the outcome and times the call.
    fn record<T>(&self, started: Instant, call: Call<T>) -> Call<T> {
        self.metrics.outcomes[call.outcome.index()].inc();
        self.metrics
            .duration
            .observe(started.elapsed().as_secs_f64());
        call
    }

    /// A call that failed to make its instance.
    fn uninstantiated<T>(&self, started: Instant, unanswered: Unanswered) -> Call<T> {
        let call = Call {
            outcome: unanswered.into(),
            fresh: true,
        };
        self.record(started, call)
    }

    /// An instance with the filter's budgets armed for one call that
    /// started at `started` (the time the call is measured from, read once),
    /// once the call has its turn ([`Turns`]): its timeout counts from then.
    async fn armed(&self, started: Instant) -> Result<Instance<K>, Unanswered> {
        // The call's waits, for its turn and for room, end together.
        let mut waits = WaitDeadline::default();
        let (turn, from) = match self.turns.try_take() {
            Some(turn) => (turn, started),
            None => {
                let turn = self.capacity.turn(&self.turns, &mut waits).await;
                (turn.map_err(Unanswered::Exhausted)?, Instant::now())
            }
        };
        let mut instance = match self.idle_instance() {
            Some(mut instance) => {
                instance.store.data_mut().state.deadline = from + self.spec.timeout;
                instance
            }
            // Its deadline was set when there was room to make it.
            None => self.instantiate(&mut waits).await?,
        };
        instance.turn = Some(turn);
        let state = &mut instance.store.data_mut().state;
        state.forget_stderr();
        state.ttl_limit = None;
        instance.store.set_epoch_deadline(1);
        Ok(instance)
    }

    /// One call of the filter, the same for every kind: its turn and an
    /// armed instance, `invoke` on the instance's exports, the outcome
    /// classified, counted and timed from `started`. Also gives the TTL
    /// limit the filter set during the call (`host.limit-ttl`).
    async fn call<T>(
        &self,
        started: Instant,
        invoke: impl AsyncFnOnce(
            &mut Store<StoreData>,
            &K::Exports,
        ) -> wasmtime::Result<Result<T, String>>,
    ) -> (Call<T>, Option<Duration>) {
        let _running = self.ticker.running();
        let mut instance = match self.armed(started).await {
            Ok(instance) => instance,
            Err(unanswered) => return (self.uninstantiated(started, unanswered), None),
        };
        let deadline = instance.store.data().state.deadline;
        let result = within(deadline, invoke(&mut instance.store, &instance.exports)).await;
        let limit = instance.store.data().state.ttl_limit;
        let outcome = self.finish(instance, result);
        (self.record(started, outcome), limit)
    }

    /// Classifies a call's result; an instance that answered may be reused,
    /// one that trapped is dropped here (a trap may leave it in any state).
    fn finish<T>(
        &self,
        instance: Instance<K>,
        result: wasmtime::Result<Result<T, String>>,
    ) -> Call<T> {
        let fresh = instance.calls == 0;
        Call {
            outcome: self.classify_result(instance, result),
            fresh,
        }
    }

    fn classify_result<T>(
        &self,
        mut instance: Instance<K>,
        result: wasmtime::Result<Result<T, String>>,
    ) -> Outcome<T> {
        let data = instance.store.data_mut();
        let memory_refused = data.take_memory_refused();
        self.footprint
            .fetch_max(data.memory_size(), Ordering::Relaxed);
        match result {
            Ok(Ok(answer)) => {
                self.checkin(instance);
                Outcome::Answer(answer)
            }
            Ok(Err(message)) => {
                self.checkin(instance);
                Outcome::FilterError(bounded(message))
            }
            Err(error) => match classify(error, memory_refused) {
                // A trap's report carries what the call wrote to stderr.
                Unanswered::Trap(message) => {
                    if self.spec.isolation == Isolation::Pooled {
                        self.metrics.retired_trap.inc();
                    }
                    Outcome::Trap(instance.store.data().state.explain_trap(message))
                }
                unanswered => unanswered.into(),
            },
        }
    }

    fn idle_instance(&self) -> Option<Instance<K>> {
        if self.spec.isolation != Isolation::Pooled {
            return None;
        }
        let mut idle = self.idle.0.lock().ok()?;
        let instance = idle.pop();
        self.metrics.idle.set(idle.len() as i64);
        instance
    }

    /// A fresh instance, once the capacity has room for it. Instantiation
    /// runs guest start-up code, so the filter's `timeout` counts from
    /// when there is room, not from when the call began to wait.
    async fn instantiate(&self, waits: &mut WaitDeadline) -> Result<Instance<K>, Unanswered> {
        let expected = self.footprint.load(Ordering::Relaxed);
        let (slot, memory) = self
            .capacity
            .reserve(expected, waits)
            .await
            .map_err(Unanswered::Exhausted)?;
        let state = FilterState::new(self.identity.clone(), self.spec.memory)
            .map_err(|error| classify(error, false))?;
        let mut store = Store::new(&self.engine, StoreData::new(state, memory));
        store.limiter(|data| data);
        // What the host copies out of the guest in one call (an answer, an
        // import's arguments) is held to the filter's own memory cap, as
        // wasmtime's hostcall fuel: within the cap an answer's bytes all fit
        // in the guest, but list entries may all point at the same bytes, so
        // without it a small guest could make the host copy up to
        // wasmtime's default of 128 MiB a call. Past it the call is a trap.
        let cap = store.data().state.memory.cap();
        store.set_hostcall_fuel(cap);
        store.epoch_deadline_callback(|context| {
            if Instant::now() >= context.data().state.deadline {
                Err(wasmtime::Error::new(DeadlineExceeded))
            } else {
                // Yield at every tick so a long call holds a worker thread
                // for one tick at most.
                Ok(UpdateDeadline::Yield(1))
            }
        });
        store.data_mut().state.deadline = Instant::now() + self.spec.timeout;
        store.set_epoch_deadline(1);
        let deadline = store.data().state.deadline;
        match within(deadline, K::instantiate(&self.pre, &mut store)).await {
            Ok(exports) => Ok(Instance {
                store,
                exports,
                calls: 0,
                turn: None,
                _slot: slot,
            }),
            Err(error) => {
                let memory_refused = store.data_mut().take_memory_refused();
                // The store goes before its slot.
                drop(store);
                Err(classify(error, memory_refused))
            }
        }
    }

    /// Says why a pooled instance is dropped rather than reused; see
    /// [`MemoryBudget::nearly_spent`](super::state::MemoryBudget::nearly_spent).
    fn retire(&self, calls: u64, bytes: usize) {
        self.metrics.retired_memory.inc();
        if calls > 1 {
            tracing::info!(
                filter = self.name(),
                calls,
                bytes,
                "a pooled instance grew past three quarters of its memory cap: retired rather than reused"
            );
        } else if !self.warned_memory_tight.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                filter = self.name(),
                bytes,
                cap = self.spec.memory,
                "the filter's first call filled three quarters of its memory cap, so no instance can be reused: raise `memory` to pool it"
            );
        }
    }

    fn checkin(&self, mut instance: Instance<K>) {
        instance.turn = None;
        if self.spec.isolation != Isolation::Pooled {
            return;
        }
        instance.calls += 1;
        let memory = &instance.store.data().state.memory;
        if memory.nearly_spent() {
            self.retire(instance.calls, memory.total());
            return;
        }
        // A call waiting for room gets this instance's slot and memory.
        if self.capacity.under_pressure() {
            return;
        }
        if let Ok(mut idle) = self.idle.0.lock()
            && idle.len() < MAX_IDLE_INSTANCES
        {
            idle.push(instance);
            self.metrics.idle.set(idle.len() as i64);
        }
    }
}

/// `work`'s result, or [`DeadlineExceeded`] once `deadline` passed. The
/// epoch stops guest code only: a guest waiting in the host (a WASI clock's
/// pollable, `std::thread::sleep`, a stream) runs none, so the wait is cut
/// here, its future dropped; the caller then drops the instance with it, as
/// after any timeout. A tick later than the deadline, so that a guest
/// running its own code is stopped by the epoch as ever.
async fn within<T>(
    deadline: Instant,
    work: impl Future<Output = wasmtime::Result<T>>,
) -> wasmtime::Result<T> {
    let cut = tokio::time::Instant::from_std(deadline) + super::epoch::EPOCH_TICK;
    tokio::time::timeout_at(cut, work)
        .await
        .unwrap_or_else(|_| Err(wasmtime::Error::new(DeadlineExceeded)))
}

/// Why a call failed: its deadline, the filter memory's cap (a growth was
/// refused for it, so the guest's failure is the gateway's capacity), the
/// engine pool's own limit (a component needing more of one kind of pool
/// entry than its share), or else the filter itself, a trap.
fn classify(error: wasmtime::Error, memory_refused: bool) -> Unanswered {
    if error.is::<DeadlineExceeded>() {
        Unanswered::Timeout
    } else if memory_refused {
        Unanswered::Exhausted(Exhausted::Memory)
    } else if error
        .chain()
        .any(|cause| cause.is::<wasmtime::PoolConcurrencyLimitError>())
    {
        Unanswered::Exhausted(Exhausted::Instances)
    } else {
        Unanswered::Trap(format!("{error:#}"))
    }
}

/// A call as the cache takes it: answers kept (`positive` ones
/// for the positive TTL), for at most the filter's own limit; the rest never.
fn fetched<T>(
    call: Call<T>,
    limit: Option<Duration>,
    positive: impl FnOnce(&T) -> bool,
) -> Fetched<Call<T>> {
    let keep = match &call.outcome {
        Outcome::Answer(answer) => Some(Keep {
            positive: positive(answer),
            limit,
        }),
        _ => None,
    };
    Fetched { value: call, keep }
}

/// How a filter's answer is to be got when its cache does not hold it: from
/// the cache's pending lookup, or (`None`, the filter has no cache) by a call.
pub(crate) type Ask<'a, T> = Option<Pending<'a, Call<T>>>;

impl<K: Kind> LoadedFilter<K> {
    /// The answer the filter's cache holds for `key` (made only when the
    /// filter has a cache) at `now`, or how to get it.
    fn probe(
        &self,
        key: impl FnOnce() -> Option<crate::decision_cache::Key>,
        now: Instant,
    ) -> Result<Call<K::Answer>, Ask<'_, K::Answer>> {
        match &self.cache {
            Some(cache) => cache.lookup(key(), now).map_err(Some),
            None => Err(None),
        }
    }

    /// The answer `ask` leads to: a concurrent call's, or `call`'s.
    async fn answer(
        &self,
        ask: Ask<'_, K::Answer>,
        call: impl Future<Output = Fetched<Call<K::Answer>>>,
    ) -> (Call<K::Answer>, Lookup) {
        match (&self.cache, ask) {
            (Some(cache), Some(pending)) => cache.fetch(pending, call).await,
            _ => (call.await.value, Lookup::Uncached),
        }
    }
}

impl LoadedFilter<Authenticator> {
    /// The answer the filter's cache holds for `request` at `now`, keyed by
    /// it as the filter sees it (needing no call and no wait), or how to get
    /// one.
    pub(crate) fn probe_authentication(
        &self,
        request: &http::request::Parts,
        now: Instant,
    ) -> Result<Call<AuthnAnswer>, Ask<'_, AuthnAnswer>> {
        self.probe(
            || cache_key::authentication(request, &self.spec.headers, self.spec.reads),
            now,
        )
    }

    /// Who made `request`, by the filter or its cache.
    /// The key is made from `request` as the filter sees it; the `view`
    /// it is given is made only when the filter is called.
    pub async fn authenticate<'a>(
        &self,
        request: &http::request::Parts,
        view: impl FnOnce() -> &'a types::RequestView,
    ) -> (Call<AuthnAnswer>, Lookup) {
        match self.probe_authentication(request, Instant::now()) {
            Ok(kept) => (kept, Lookup::Hit),
            Err(ask) => self.fetch_authentication(ask, view).await,
        }
    }

    /// Who made the request, by the answer `ask` leads to: a concurrent
    /// call's, or the filter's own on the `view` (made only when it is
    /// called).
    pub(crate) async fn fetch_authentication<'a>(
        &self,
        ask: Ask<'_, AuthnAnswer>,
        view: impl FnOnce() -> &'a types::RequestView,
    ) -> (Call<AuthnAnswer>, Lookup) {
        self.answer(ask, async move {
            Box::pin(self.call_authenticate(view())).await
        })
        .await
    }

    async fn call_authenticate(&self, request: &types::RequestView) -> Fetched<Call<AuthnAnswer>> {
        let (call, limit) = self
            .call(Instant::now(), async |store, exports| {
                let result = match exports {
                    Versioned::V0_4(exports) => {
                        exports
                            .wasmgate_filter_authenticator()
                            .call_authenticate(store, request)
                            .await
                    }
                    Versioned::V0_3(exports) => exports
                        .wasmgate_filter_authenticator()
                        .call_authenticate(store, request)
                        .await
                        .map(v0_3_of::authn_result),
                    Versioned::V0_2(exports) => exports
                        .wasmgate_filter_authenticator()
                        .call_authenticate(store, &v0_2_of::request_view(request))
                        .await
                        .map(|result| v0_3_of::authn_result(v0_2_of::authn_result(result))),
                    Versioned::V0_1(exports) => exports
                        .wasmgate_filter_authenticator()
                        .call_authenticate(store, &v0_2_of::request_view(request))
                        .await
                        .map(|result| {
                            v0_3_of::authn_result(v0_2_of::authn_result(v0_1_of::authn_result(
                                result,
                            )))
                        }),
                };
                // The WIT's own `error` case is the filter's error outcome.
                result.map(|answer| match answer {
                    AuthnResult::Authenticated(user) => taken_user(user),
                    AuthnResult::NoOpinion => Ok(AuthnAnswer::NoOpinion),
                    AuthnResult::Error(message) => Err(message),
                })
            })
            .await;
        fetched(call, limit, |answer| {
            matches!(answer, AuthnAnswer::Authenticated { .. })
        })
    }
}

/// The most groups an authenticator's user may have.
const MAX_USER_GROUPS: usize = 1000;
/// The most extra keys an authenticator's user may have.
const MAX_USER_EXTRA_KEYS: usize = 100;
/// The most extra values an authenticator's user may have, of all its
/// keys together.
const MAX_USER_EXTRA_VALUES: usize = 1000;
/// The most bytes any one of an authenticator's user's name, uid, groups,
/// extra keys and values may have.
const MAX_USER_STRING: usize = 4096;
/// The most bytes an authenticator's user's strings may have together.
const MAX_USER_BYTES: usize = 64 << 10;

/// The user an authenticator answered with, as the chain takes it: an
/// error (the filter's) when it passes a bound, as it would be carried
/// whole to the upstream's `X-Remote-*` headers, every authorizer and every
/// audit event, and a filter's memory (a gigabyte, may be) bounds none of
/// them. A real identity fits well within: a service account's name is
/// under 330 bytes (`system:serviceaccount:` and two DNS names), an OIDC
/// provider's groups claim a few hundred names.
fn taken_user(user: types::UserInfo) -> Result<AuthnAnswer, String> {
    let too_many = |what: &str, count: usize, most: usize| {
        Err(format!(
            "the user it answered has {count} {what}, more than the {most} a user may have"
        ))
    };
    if user.groups.len() > MAX_USER_GROUPS {
        return too_many("groups", user.groups.len(), MAX_USER_GROUPS);
    }
    if user.extra.len() > MAX_USER_EXTRA_KEYS {
        return too_many("extra keys", user.extra.len(), MAX_USER_EXTRA_KEYS);
    }
    let values = user.extra.iter().map(|extra| extra.values.len()).sum();
    if values > MAX_USER_EXTRA_VALUES {
        return too_many("extra values", values, MAX_USER_EXTRA_VALUES);
    }
    let strings = [&user.name, &user.uid]
        .into_iter()
        .chain(&user.groups)
        .chain(
            user.extra
                .iter()
                .flat_map(|extra| std::iter::once(&extra.key).chain(&extra.values)),
        );
    let mut total = 0usize;
    for string in strings {
        if string.len() > MAX_USER_STRING {
            return Err(format!(
                "the user it answered has a name, uid, group or extra of {} bytes, more than the {MAX_USER_STRING} any of them may have",
                string.len()
            ));
        }
        total += string.len();
    }
    if total > MAX_USER_BYTES {
        return Err(format!(
            "the user it answered has {total} bytes, more than the {MAX_USER_BYTES} a user may have"
        ));
    }
    // A user without a name is no one: no opinion, as kube's
    // authenticators that read a name answer when it is empty
    // (`CommonNameUserConversion` and `SubjectToUserConversion`
    // in `staging/src/k8s.io/apiserver/pkg/authentication/request/x509/x509.go`,
    // `requestheader.go` in `request/headerrequest/`).
    if user.name.is_empty() {
        return Ok(AuthnAnswer::NoOpinion);
    }
    let (user, group_added) = convert::authenticated_user(user);
    Ok(AuthnAnswer::Authenticated { user, group_added })
}

impl LoadedFilter<Authorizer> {
    /// The decision the filter's cache holds for `user` and `request` at
    /// `now`, keyed by them as the filter reads them (needing no call and no
    /// wait), or how to get one.
    pub(crate) fn probe_authorization(
        &self,
        user: &crate::context::UserInfo,
        request: &crate::request_info::RequestInfo,
        now: Instant,
    ) -> Result<Call<Decision>, Ask<'_, Decision>> {
        self.probe(
            || cache_key::authorization(user, request, self.spec.reads),
            now,
        )
    }

    /// The filter's decision on `user` and `request`, by the filter or its
    /// cache. The key is made from them as the filter reads them; the
    /// records of `attributes` are made only when the filter is called.
    pub async fn authorize<'a>(
        &self,
        user: &crate::context::UserInfo,
        request: &crate::request_info::RequestInfo,
        attributes: impl FnOnce() -> &'a Attributes,
    ) -> (Call<Decision>, Lookup) {
        match self.probe_authorization(user, request, Instant::now()) {
            Ok(kept) => (kept, Lookup::Hit),
            Err(ask) => self.fetch_authorization(ask, attributes).await,
        }
    }

    /// The filter's decision `ask` leads to: a concurrent call's, or the
    /// filter's own on the records of `attributes` (made only when it is
    /// called).
    pub(crate) async fn fetch_authorization<'a>(
        &self,
        ask: Ask<'_, Decision>,
        attributes: impl FnOnce() -> &'a Attributes,
    ) -> (Call<Decision>, Lookup) {
        self.answer(ask, async move {
            Box::pin(self.call_authorize(attributes())).await
        })
        .await
    }

    async fn call_authorize(&self, attributes: &Attributes) -> Fetched<Call<Decision>> {
        let (call, limit) = self
            .call(Instant::now(), async |store, exports| match exports {
                Versioned::V0_4(exports) => {
                    exports
                        .wasmgate_filter_authorizer()
                        .call_authorize(store, attributes)
                        .await
                }
                Versioned::V0_3(exports) => exports
                    .wasmgate_filter_authorizer()
                    .call_authorize(store, &v0_3_of::attributes(attributes))
                    .await
                    .map(|result| result.map(v0_3_of::decision)),
                Versioned::V0_2(exports) => {
                    let attributes = v0_2_of::attributes(&v0_3_of::attributes(attributes));
                    exports
                        .wasmgate_filter_authorizer()
                        .call_authorize(store, &attributes)
                        .await
                        .map(|result| result.map(|d| v0_3_of::decision(v0_2_of::decision(d))))
                }
                Versioned::V0_1(exports) => {
                    let attributes =
                        v0_1_of::attributes(v0_2_of::attributes(&v0_3_of::attributes(attributes)));
                    exports
                        .wasmgate_filter_authorizer()
                        .call_authorize(store, &attributes)
                        .await
                        .map(|result| {
                            result
                                .map(|d| v0_3_of::decision(v0_2_of::decision(v0_1_of::decision(d))))
                        })
                }
            })
            .await;
        let call = call.answered(|decision| match decision {
            Decision::Allow => Decision::Allow,
            Decision::Deny(reason) => Decision::Deny(bounded(reason)),
            Decision::NoOpinion(reason) => Decision::NoOpinion(bounded(reason)),
        });
        fetched(call, limit, |decision| matches!(decision, Decision::Allow))
    }
}

impl LoadedFilter<Admission> {
    /// Calls the admission filter's `admit` on a write.
    pub async fn admit(&self, request: &AdmissionRequest) -> Call<AdmissionResponse> {
        Box::pin(self.call_admit(request)).await
    }

    async fn call_admit(&self, request: &AdmissionRequest) -> Call<AdmissionResponse> {
        let (call, _) = self
            .call(Instant::now(), async |store, exports| match exports {
                Versioned::V0_4(exports) => {
                    exports
                        .wasmgate_filter_admission()
                        .call_admit(store, request)
                        .await
                }
                Versioned::V0_3(exports) => exports
                    .wasmgate_filter_admission()
                    .call_admit(store, &v0_3_of::admission_request(request))
                    .await
                    .map(|result| result.map(v0_3_of::admission_response)),
                Versioned::V0_2(exports) => {
                    let request = v0_2_of::admission_request(&v0_3_of::admission_request(request));
                    exports
                        .wasmgate_filter_admission()
                        .call_admit(store, &request)
                        .await
                        .map(|result| {
                            result.map(|r| {
                                v0_3_of::admission_response(v0_2_of::admission_response(r))
                            })
                        })
                }
                Versioned::V0_1(exports) => {
                    let request = v0_1_of::admission_request(v0_2_of::admission_request(
                        &v0_3_of::admission_request(request),
                    ));
                    exports
                        .wasmgate_filter_admission()
                        .call_admit(store, &request)
                        .await
                        .map(|result| {
                            result.map(|r| {
                                v0_3_of::admission_response(v0_2_of::admission_response(
                                    v0_1_of::admission_response(r),
                                ))
                            })
                        })
                }
            })
            .await;
        call.answered(|response| match response {
            AdmissionResponse::Denied(status) => AdmissionResponse::Denied(types::Status {
                reason: bounded(status.reason),
                message: bounded(status.message),
                ..status
            }),
            answer => answer,
        })
    }
}

impl LoadedFilter<Auditor> {
    /// Writes out what the filter's sink has buffered.
    pub(crate) fn flush_sink(&self) {
        if let Some(sink) = &self.identity.sink
            && let Err(error) = sink.flush()
        {
            tracing::error!(filter = self.name(), %error, "cannot write the audit sink");
        }
    }

    /// Records `batch`, in order: in one call (`audit-json-lines`, given
    /// the batch serialised, for a 0.4.0 filter that takes it so; else
    /// `audit-batch`, since 0.2.0), or one call each for a 0.1.0 auditor,
    /// which goes on past an event it failed on (the first failure is the
    /// outcome) and stops at a trap.
    pub async fn audit(&self, batch: &AuditBatch<'_>) -> Call<()> {
        Box::pin(self.call_audit(batch)).await
    }

    /// True for a 0.4.0 auditor that takes its batches serialised
    /// (`json-auditor`): it never needs the event records.
    pub(crate) fn takes_serialised(&self) -> bool {
        matches!(self.pre, Versioned::V0_4(AuditorForm::Serialised(_)))
    }

    async fn call_audit(&self, batch: &AuditBatch<'_>) -> Call<()> {
        let started = Instant::now();
        let events = match batch.records() {
            Some(events) => events,
            None if self.takes_serialised() => &[],
            // Not reached: the backend serialises events as it queues them
            // only when every auditor takes them so. Should it ever, the
            // filter is not called, and the error says whose it is.
            None => {
                let outcome = Outcome::FilterError(
                    "the gateway gave this auditor serialised events, not records".to_owned(),
                );
                return self.record(
                    started,
                    Call {
                        outcome,
                        fresh: false,
                    },
                );
            }
        };
        let (call, _) = self
            .call(started, async |store, exports| match exports {
                Versioned::V0_4(AuditorForm::Serialised(exports)) => {
                    exports
                        .wasmgate_filter_json_auditor()
                        .call_audit_json_lines(store, batch.serialised())
                        .await
                }
                Versioned::V0_4(AuditorForm::Records(exports)) => {
                    exports
                        .wasmgate_filter_auditor()
                        .call_audit_batch(store, events)
                        .await
                }
                Versioned::V0_3(exports) => {
                    let events: Vec<_> = events.iter().map(v0_3_of::event).collect();
                    exports
                        .wasmgate_filter_auditor()
                        .call_audit_batch(store, &events)
                        .await
                }
                Versioned::V0_2(exports) => {
                    let events: Vec<_> = events
                        .iter()
                        .map(|event| v0_2_of::event(&v0_3_of::event(event)))
                        .collect();
                    exports
                        .wasmgate_filter_auditor()
                        .call_audit_batch(store, &events)
                        .await
                }
                Versioned::V0_1(exports) => {
                    let auditor = exports.wasmgate_filter_auditor();
                    let mut result = Ok(Ok(()));
                    for event in events {
                        let event = v0_1_of::event(v0_2_of::event(&v0_3_of::event(event)));
                        match auditor.call_audit(&mut *store, &event).await {
                            Ok(Ok(())) => {}
                            Ok(Err(message)) => {
                                if let Ok(Ok(())) = result {
                                    result = Ok(Err(message));
                                }
                            }
                            Err(trap) => {
                                result = Err(trap);
                                break;
                            }
                        }
                    }
                    result
                }
            })
            .await;
        call
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wasm::state::MAX_FILTER_MESSAGE;

    /// A message within the bound is kept whole; a longer one is cut at a
    /// character's start, never inside one (`é` is two bytes, here across
    /// the bound), and says how much was left out.
    #[test]
    fn a_filters_message_is_cut_at_a_characters_start() {
        let fits = "a".repeat(MAX_FILTER_MESSAGE);
        assert_eq!(bounded(fits.clone()), fits);
        let long = format!("{}é{}", "a".repeat(MAX_FILTER_MESSAGE - 1), "b".repeat(10));
        let kept = "a".repeat(MAX_FILTER_MESSAGE - 1);
        assert_eq!(bounded(long), format!("{kept}... (12 more bytes)"));
    }

    /// Each of an authenticator's user's bounds holds, at its edge: a user
    /// just within is taken, one past it is the filter's error, naming it.
    #[test]
    fn an_authenticators_user_is_held_to_its_bounds() {
        let user = |name: &str, groups: usize, extra: Vec<types::ExtraValue>| types::UserInfo {
            name: name.to_owned(),
            uid: String::new(),
            groups: (0..groups).map(|n| format!("g{n}")).collect(),
            extra,
        };
        let values = |key: &str, count: usize, bytes: usize| types::ExtraValue {
            key: key.to_owned(),
            values: vec!["v".repeat(bytes); count],
        };
        let refused = |user: types::UserInfo, bound: &str| match taken_user(user) {
            Err(message) => assert!(message.contains(bound), "{message}"),
            Ok(answer) => panic!("taken: {answer:?}"),
        };
        let taken = |user: types::UserInfo| {
            assert!(matches!(
                taken_user(user),
                Ok(AuthnAnswer::Authenticated { .. })
            ))
        };
        taken(user("a", MAX_USER_GROUPS, vec![]));
        refused(
            user("a", MAX_USER_GROUPS + 1, vec![]),
            "1001 groups, more than the 1000",
        );
        let keys = |count: usize| (0..count).map(|n| values(&format!("k{n}"), 0, 0)).collect();
        taken(user("a", 0, keys(MAX_USER_EXTRA_KEYS)));
        refused(
            user("a", 0, keys(MAX_USER_EXTRA_KEYS + 1)),
            "101 extra keys, more than the 100",
        );
        taken(user("a", 0, vec![values("k", MAX_USER_EXTRA_VALUES, 1)]));
        refused(
            user("a", 0, vec![values("k", MAX_USER_EXTRA_VALUES + 1, 1)]),
            "1001 extra values, more than the 1000",
        );
        taken(user(&"n".repeat(MAX_USER_STRING), 0, vec![]));
        refused(
            user(&"n".repeat(MAX_USER_STRING + 1), 0, vec![]),
            "4097 bytes, more than the 4096",
        );
        // The name, then 15 values of 4 KiB, and 4,094 bytes and their key:
        // 64 KiB; a byte more passes it.
        let most = |last: usize| vec![values("", 15, MAX_USER_STRING), values("k", 1, last)];
        taken(user("a", 0, most(4094)));
        refused(user("a", 0, most(4095)), "65537 bytes, more than the 65536");
        // A nameless user is no opinion, but one past a bound the error.
        assert!(matches!(
            taken_user(user("", 0, vec![])),
            Ok(AuthnAnswer::NoOpinion)
        ));
        refused(user("", MAX_USER_GROUPS + 1, vec![]), "1001 groups");
    }
}
