//! One loaded filter: its pre-instantiated component, its budgets, and its
//! instances. A call gives one of four [`Outcome`]s: the filter's answer,
//! its own error, a trap, or a timeout, never confused with one another.
//!
//! Isolation: `per-request` instantiates a fresh store for every call (the
//! pooling allocator makes that cheap); `pooled` keeps idle instances and
//! re-arms their budgets per call. An instance that trapped or timed out is
//! never reused: a trap may leave it in any state.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use wasmtime::component::InstancePre;
use wasmtime::{Store, UpdateDeadline};

use super::bindings::{admission, auditor, authenticator, authorizer, types};
use super::engine::{LoadError, WasmHost};
use super::state::{FilterIdentity, FilterState, SinkWriter};
pub use admission::exports::wasmgate::filter::admission::{
    AdmissionRequest, AdmissionResponse, Operation,
};
pub use auditor::exports::wasmgate::filter::auditor::{
    Annotation, Event, Level, ObjectReference, Stage,
};
pub use authenticator::exports::wasmgate::filter::authenticator::AuthnResult;
pub use authorizer::exports::wasmgate::filter::authorizer::{Attributes, Decision};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;

use crate::config::stages::{FilterSpec, Isolation};
use crate::metrics::{FilterName, FilterOutcome};

/// The four outcomes of calling a filter.
#[derive(Debug)]
pub enum Outcome<T> {
    /// The filter answered.
    Answer(T),
    /// The filter reported its own failure.
    FilterError(String),
    /// The filter trapped (or could not be instantiated).
    Trap(String),
    /// The filter ran past its deadline and was stopped.
    Timeout,
}

impl<T> Outcome<T> {
    fn index(&self) -> usize {
        match self {
            Outcome::Answer(_) => 0,
            Outcome::FilterError(_) => 1,
            Outcome::Trap(_) => 2,
            Outcome::Timeout => 3,
        }
    }

    /// A short word for logs, metrics and `wasmgate try`.
    pub fn kind(&self) -> &'static str {
        match self {
            Outcome::Answer(_) => "answer",
            Outcome::FilterError(_) => "error",
            Outcome::Trap(_) => "trap",
            Outcome::Timeout => "timeout",
        }
    }
}

/// Raised from the epoch callback when a call's deadline passed.
#[derive(Debug, thiserror::Error)]
#[error("the filter ran past its deadline")]
struct DeadlineExceeded;

/// Idle pooled instances kept per filter; more are dropped when returned.
const MAX_IDLE_INSTANCES: usize = 32;

/// A filter world: how its exports are pre-instantiated and instantiated.
pub trait Kind: Send + Sync + 'static {
    type Pre: Send + Sync;
    type Exports: Send;
    const WORLD: &'static str;
    fn pre(pre: InstancePre<FilterState>) -> wasmtime::Result<Self::Pre>;
    fn instantiate(
        pre: &Self::Pre,
        store: &mut Store<FilterState>,
    ) -> impl Future<Output = wasmtime::Result<Self::Exports>> + Send;
}

macro_rules! filter_kind {
    ($kind:ident, $module:ident, $world:ident, $pre:ident, $name:literal) => {
        pub struct $kind;
        impl Kind for $kind {
            type Pre = $module::$pre<FilterState>;
            type Exports = $module::$world;
            const WORLD: &'static str = $name;
            fn pre(pre: InstancePre<FilterState>) -> wasmtime::Result<Self::Pre> {
                $module::$pre::new(pre)
            }
            async fn instantiate(
                pre: &Self::Pre,
                store: &mut Store<FilterState>,
            ) -> wasmtime::Result<Self::Exports> {
                pre.instantiate_async(store).await
            }
        }
    };
}

filter_kind!(
    Authenticator,
    authenticator,
    AuthenticatorFilter,
    AuthenticatorFilterPre,
    "authenticator-filter"
);
filter_kind!(
    Authorizer,
    authorizer,
    AuthorizerFilter,
    AuthorizerFilterPre,
    "authorizer-filter"
);
filter_kind!(
    Admission,
    admission,
    AdmissionFilter,
    AdmissionFilterPre,
    "admission-filter"
);
filter_kind!(
    Auditor,
    auditor,
    AuditorFilter,
    AuditorFilterPre,
    "auditor-filter"
);

struct Instance<K: Kind> {
    store: Store<FilterState>,
    exports: K::Exports,
    /// Calls answered so far.
    calls: u64,
}

/// A filter's metric handles, fetched once so a call records without labels.
struct FilterMetrics {
    /// Indexed like [`Outcome::index`].
    outcomes: [Counter; 4],
    duration: Histogram,
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
        FilterMetrics {
            outcomes: [
                outcome("answer"),
                outcome("error"),
                outcome("trap"),
                outcome("timeout"),
            ],
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
    pub spec: FilterSpec,
    identity: Arc<FilterIdentity>,
    metrics: FilterMetrics,
    engine: wasmtime::Engine,
    pre: K::Pre,
    idle: Mutex<Vec<Instance<K>>>,
    /// Set once the cap was found too tight to pool this filter at all.
    warned_memory_tight: AtomicBool,
    kind: PhantomData<K>,
}

impl<K: Kind> LoadedFilter<K> {
    /// Loads (or takes from the cache) the component and pre-instantiates it.
    pub fn load(host: &WasmHost, spec: &FilterSpec) -> Result<Self, LoadError> {
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
        Ok(LoadedFilter {
            spec: spec.clone(),
            metrics: FilterMetrics::new(spec.name.as_str()),
            identity,
            engine: host.engine.clone(),
            pre,
            idle: Mutex::new(Vec::new()),
            warned_memory_tight: AtomicBool::new(false),
            kind: PhantomData,
        })
    }

    pub fn name(&self) -> &str {
        self.spec.name.as_str()
    }

    /// Counts the outcome and times the call.
    fn record<T>(&self, started: Instant, outcome: Outcome<T>) -> Outcome<T> {
        self.metrics.outcomes[outcome.index()].inc();
        self.metrics
            .duration
            .observe(started.elapsed().as_secs_f64());
        outcome
    }

    /// An instance with the filter's budgets armed for one call that
    /// started at `started` (the time the call is measured from, read once).
    async fn armed(&self, started: Instant) -> wasmtime::Result<Instance<K>> {
        let deadline = started + self.spec.timeout;
        let mut instance = self.checkout(deadline).await?;
        instance.store.data_mut().deadline = deadline;
        instance.store.data().forget_stderr();
        instance.store.set_epoch_deadline(1);
        Ok(instance)
    }

    /// Classifies a call's result; an instance that answered may be reused,
    /// one that trapped is dropped here (a trap may leave it in any state).
    fn finish<T>(
        &self,
        instance: Instance<K>,
        result: wasmtime::Result<Result<T, String>>,
    ) -> Outcome<T> {
        match result {
            Ok(Ok(answer)) => {
                self.checkin(instance);
                Outcome::Answer(answer)
            }
            Ok(Err(message)) => {
                self.checkin(instance);
                Outcome::FilterError(message)
            }
            // A trap's report carries what the call wrote to stderr.
            Err(error) => match classify(error) {
                Outcome::Trap(message) => {
                    Outcome::Trap(instance.store.data().explain_trap(message))
                }
                outcome => outcome,
            },
        }
    }

    /// An idle pooled instance, or a fresh one instantiated within `deadline`.
    async fn checkout(&self, deadline: Instant) -> wasmtime::Result<Instance<K>> {
        if self.spec.isolation == Isolation::Pooled
            && let Some(instance) = self.idle.lock().ok().and_then(|mut idle| idle.pop())
        {
            return Ok(instance);
        }
        let mut store = Store::new(
            &self.engine,
            FilterState::new(self.identity.clone(), self.spec.memory)?,
        );
        store.limiter(|state| &mut state.memory);
        store.epoch_deadline_callback(|context| {
            if Instant::now() >= context.data().deadline {
                Err(wasmtime::Error::new(DeadlineExceeded))
            } else {
                // Yield at every tick so a long call never holds a worker thread.
                Ok(UpdateDeadline::Yield(1))
            }
        });
        // Instantiation runs guest start-up code: it counts against the call's budget.
        store.data_mut().deadline = deadline;
        store.set_epoch_deadline(1);
        let exports = K::instantiate(&self.pre, &mut store).await?;
        Ok(Instance {
            store,
            exports,
            calls: 0,
        })
    }

    /// Says why a pooled instance is dropped rather than reused; see
    /// [`MemoryBudget::nearly_spent`](super::state::MemoryBudget::nearly_spent).
    fn retire(&self, calls: u64, bytes: usize) {
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
        if self.spec.isolation != Isolation::Pooled {
            return;
        }
        instance.calls += 1;
        let memory = &instance.store.data().memory;
        if memory.nearly_spent() {
            self.retire(instance.calls, memory.largest());
            return;
        }
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < MAX_IDLE_INSTANCES
        {
            idle.push(instance);
        }
    }
}

fn classify<T>(error: wasmtime::Error) -> Outcome<T> {
    if error.is::<DeadlineExceeded>() {
        Outcome::Timeout
    } else {
        Outcome::Trap(format!("{error:#}"))
    }
}

impl LoadedFilter<Authenticator> {
    pub async fn authenticate(&self, request: &types::RequestView) -> Outcome<AuthnResult> {
        let started = Instant::now();
        let mut instance = match self.armed(started).await {
            Ok(instance) => instance,
            Err(error) => return self.record(started, classify(error)),
        };
        let exports = instance.exports.wasmgate_filter_authenticator();
        let result = exports
            .call_authenticate(&mut instance.store, request)
            .await;
        // The WIT's own `error` case is the filter's error outcome.
        let result = result.map(|answer| match answer {
            AuthnResult::Error(message) => Err(message),
            answer => Ok(answer),
        });
        let outcome = self.finish(instance, result);
        self.record(started, outcome)
    }
}

impl LoadedFilter<Authorizer> {
    pub async fn authorize(&self, attributes: &Attributes) -> Outcome<Decision> {
        let started = Instant::now();
        let mut instance = match self.armed(started).await {
            Ok(instance) => instance,
            Err(error) => return self.record(started, classify(error)),
        };
        let exports = instance.exports.wasmgate_filter_authorizer();
        let result = exports
            .call_authorize(&mut instance.store, attributes)
            .await;
        let outcome = self.finish(instance, result);
        self.record(started, outcome)
    }
}

impl LoadedFilter<Admission> {
    pub async fn admit(&self, request: &AdmissionRequest) -> Outcome<AdmissionResponse> {
        let started = Instant::now();
        let mut instance = match self.armed(started).await {
            Ok(instance) => instance,
            Err(error) => return self.record(started, classify(error)),
        };
        let exports = instance.exports.wasmgate_filter_admission();
        let result = exports.call_admit(&mut instance.store, request).await;
        let outcome = self.finish(instance, result);
        self.record(started, outcome)
    }
}

impl LoadedFilter<Auditor> {
    /// Writes out what the filter's sink has buffered.
    pub fn flush_sink(&self) {
        if let Some(sink) = &self.identity.sink
            && let Err(error) = sink.flush()
        {
            tracing::error!(filter = self.name(), %error, "cannot write the audit sink");
        }
    }

    pub async fn audit(&self, event: &Event) -> Outcome<()> {
        let started = Instant::now();
        let mut instance = match self.armed(started).await {
            Ok(instance) => instance,
            Err(error) => return self.record(started, classify(error)),
        };
        let exports = instance.exports.wasmgate_filter_auditor();
        let result = exports.call_audit(&mut instance.store, event).await;
        let outcome = self.finish(instance, result);
        self.record(started, outcome)
    }
}
