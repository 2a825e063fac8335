//! kube's metrics of the stages the Wasm filters run, under kube's names,
//! labels and buckets:
//! - authentication (`staging/src/k8s.io/apiserver/pkg/endpoints/filters/metrics.go`):
//!   `authentication_attempts{result}` and `authentication_duration_seconds{result}`;
//! - authorization (`staging/src/k8s.io/apiserver/pkg/authorization/metrics/metrics.go`):
//!   `apiserver_authorization_decisions_total{type,name,decision}`, `type`
//!   being `Wasm` and `name` the filter's;
//! - admission (`staging/src/k8s.io/apiserver/pkg/admission/metrics/metrics.go`):
//!   `apiserver_admission_step_admission_duration_seconds{type,operation,rejected}`
//!   and, per filter, `apiserver_admission_controller_admission_duration_seconds{name,type,operation,rejected}`;
//! - audit (`staging/src/k8s.io/apiserver/pkg/audit/metrics.go`):
//!   `apiserver_audit_event_total` and `apiserver_audit_error_total{plugin}`.
//!
//! Every label value is one of a few fixed words or a filter's name from
//! the manifest, so the series are bounded by the configuration.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// kube's admission buckets (step and controller).
const ADMISSION_BUCKETS: [f64; 6] = [0.005, 0.025, 0.1, 0.5, 1.0, 2.5];

/// kube's admission operations, as its metrics label them.
const OPERATIONS: [&str; 4] = ["CREATE", "UPDATE", "DELETE", "CONNECT"];

/// How authentication ended (kube's `result` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AuthnOutcome {
    /// A user was identified (or the request went on as anonymous).
    Success,
    /// The request was refused: it presented no credentials.
    Failure,
    /// Credentials nobody accepted (an authenticator's error, a bearer
    /// token or certificate no authenticator took), or an authenticator
    /// failed (trap, timeout, no room) with fail-closed.
    Error,
}

impl AuthnOutcome {
    const ALL: [AuthnOutcome; 3] = [
        AuthnOutcome::Success,
        AuthnOutcome::Failure,
        AuthnOutcome::Error,
    ];

    fn label(self) -> &'static str {
        match self {
            AuthnOutcome::Success => "success",
            AuthnOutcome::Failure => "failure",
            AuthnOutcome::Error => "error",
        }
    }
}

/// Admission's two phases (kube's `type` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AdmissionType {
    Admit,
    Validate,
}

impl AdmissionType {
    fn label(self) -> &'static str {
        match self {
            AdmissionType::Admit => "admit",
            AdmissionType::Validate => "validate",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ResultLabel {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DecisionLabels {
    pub r#type: &'static str,
    pub name: Arc<str>,
    /// `allowed` or `denied`.
    pub decision: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct StepLabels {
    pub r#type: &'static str,
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub operation: &'static str,
    pub rejected: bool,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ControllerLabels {
    pub name: Arc<str>,
    #[prometheus(flatten)]
    pub step: StepLabels,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PluginLabel {
    pub plugin: Arc<str>,
}

type HistogramFamily<S> = Family<S, Histogram, fn() -> Histogram>;

/// One authorizer's `apiserver_authorization_decisions_total` series.
pub(crate) struct Decisions {
    allowed: Counter,
    denied: Counter,
}

impl Decisions {
    /// Counts a terminal decision (allow or deny).
    pub(crate) fn record(&self, allowed: bool) {
        if allowed {
            self.allowed.inc();
        } else {
            self.denied.inc();
        }
    }
}

pub(crate) struct StageMetrics {
    /// Indexed like [`AuthnOutcome::ALL`].
    authn_attempts: [Counter; 3],
    authn_duration: [Histogram; 3],
    decisions: Family<DecisionLabels, Counter>,
    admission_step: HistogramFamily<StepLabels>,
    admission_controller: HistogramFamily<ControllerLabels>,
    audit_events: Counter,
    audit_errors: Family<PluginLabel, Counter>,
    /// Filter names interned, so a label costs no allocation per request.
    names: RwLock<HashMap<String, Arc<str>>>,
}

fn authn_histogram() -> Histogram {
    // kube's: 1 ms doubling 15 times.
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

fn admission_histogram() -> Histogram {
    Histogram::new(ADMISSION_BUCKETS)
}

impl StageMetrics {
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let attempts = Family::<ResultLabel, Counter>::default();
        let durations = HistogramFamily::<ResultLabel>::new_with_constructor(authn_histogram);
        let metrics = StageMetrics {
            authn_attempts: AuthnOutcome::ALL.map(|result| {
                attempts
                    .get_or_create(&ResultLabel {
                        result: result.label(),
                    })
                    .clone()
            }),
            authn_duration: AuthnOutcome::ALL.map(|result| {
                durations
                    .get_or_create(&ResultLabel {
                        result: result.label(),
                    })
                    .clone()
            }),
            decisions: Family::default(),
            admission_step: Family::new_with_constructor(admission_histogram),
            admission_controller: Family::new_with_constructor(admission_histogram),
            audit_events: Counter::default(),
            audit_errors: Family::default(),
            names: RwLock::default(),
        };
        registry.register(
            "authentication_attempts",
            "Counter of authenticated attempts",
            attempts,
        );
        registry.register(
            "authentication_duration_seconds",
            "Authentication duration in seconds broken out by result",
            durations,
        );
        registry.register(
            "apiserver_authorization_decisions",
            "Total number of terminal decisions made by an authorizer split by authorizer type, name, and decision",
            metrics.decisions.clone(),
        );
        registry.register(
            "apiserver_admission_step_admission_duration_seconds",
            "Admission sub-step latency histogram in seconds, broken out for each operation and API resource and step type (validate or admit)",
            metrics.admission_step.clone(),
        );
        registry.register(
            "apiserver_admission_controller_admission_duration_seconds",
            "Admission controller latency histogram in seconds, identified by name and broken out for each operation and API resource and type (validate or admit)",
            metrics.admission_controller.clone(),
        );
        registry.register(
            "apiserver_audit_event",
            "Counter of audit events generated and sent to the audit backend",
            metrics.audit_events.clone(),
        );
        registry.register(
            "apiserver_audit_error",
            "Counter of audit events that failed to be audited properly. Plugin identifies the plugin affected by the error",
            metrics.audit_errors.clone(),
        );
        metrics
    }

    pub(crate) fn authentication(&self, result: AuthnOutcome, elapsed: Duration) {
        let index = AuthnOutcome::ALL
            .iter()
            .position(|known| *known == result)
            .unwrap_or(0);
        self.authn_attempts[index].inc();
        self.authn_duration[index].observe(elapsed.as_secs_f64());
    }

    /// An authorizer filter's counters of terminal decisions, fetched once
    /// when the chain is built so that a decision touches no labels.
    pub(crate) fn authorization_decisions(&self, filter: &str) -> Decisions {
        let name = self.name(filter);
        let counter = |decision: &'static str| {
            let labels = DecisionLabels {
                r#type: "Wasm",
                name: name.clone(),
                decision,
            };
            self.decisions.get_or_create(&labels).clone()
        };
        Decisions {
            allowed: counter("allowed"),
            denied: counter("denied"),
        }
    }

    /// The timer of one admission phase (every mutating, or every
    /// validating, filter), for the chain to hold.
    pub(crate) fn admission_step(&self, phase: AdmissionType) -> AdmissionTimer {
        AdmissionTimer::new(phase, AdmissionFamily::Step(self.admission_step.clone()))
    }

    /// The timer of one admission filter's calls, for the chain to hold.
    pub(crate) fn admission_controller(
        &self,
        filter: &str,
        phase: AdmissionType,
    ) -> AdmissionTimer {
        let family = AdmissionFamily::Controller {
            name: self.name(filter),
            family: self.admission_controller.clone(),
        };
        AdmissionTimer::new(phase, family)
    }

    /// An audit event handed to the backend.
    pub(crate) fn audit_event(&self) {
        self.audit_events.inc();
    }

    /// `events` audit events `plugin` (a filter, or `buffered`: the queue)
    /// lost; kube's `HandlePluginError` counts every event impacted.
    pub(crate) fn audit_errors(&self, plugin: &str, events: usize) {
        let labels = PluginLabel {
            plugin: self.name(plugin),
        };
        self.audit_errors
            .get_or_create(&labels)
            .inc_by(u64::try_from(events).unwrap_or(u64::MAX));
    }

    fn name(&self, name: &str) -> Arc<str> {
        if let Some(interned) = self
            .names
            .read()
            .ok()
            .and_then(|names| names.get(name).cloned())
        {
            return interned;
        }
        let interned: Arc<str> = Arc::from(name);
        if let Ok(mut names) = self.names.write() {
            names.insert(name.to_owned(), interned.clone());
        }
        interned
    }
}

/// The admission histograms of one phase, or of one filter in it, by
/// operation and by whether it rejected: each fetched from its family the
/// first time it is observed (so `/metrics` shows what happened, no more)
/// and held after, so that an observation touches no labels.
pub(crate) struct AdmissionTimer {
    phase: AdmissionType,
    family: AdmissionFamily,
    /// Indexed by the operation's place in [`OPERATIONS`], twice, then
    /// whether it rejected.
    series: [OnceLock<Histogram>; OPERATIONS.len() * 2],
}

/// Where an [`AdmissionTimer`]'s series come from.
enum AdmissionFamily {
    /// `apiserver_admission_step_admission_duration_seconds`.
    Step(HistogramFamily<StepLabels>),
    /// `apiserver_admission_controller_admission_duration_seconds` of
    /// the filter `name`.
    Controller {
        name: Arc<str>,
        family: HistogramFamily<ControllerLabels>,
    },
}

impl AdmissionTimer {
    fn new(phase: AdmissionType, family: AdmissionFamily) -> Self {
        AdmissionTimer {
            phase,
            family,
            series: Default::default(),
        }
    }

    /// Observes one phase's, or one call's, time: `operation` is kube's
    /// (`CREATE`, `UPDATE`, `DELETE`, `CONNECT`).
    pub(crate) fn observe(&self, operation: &'static str, rejected: bool, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        match OPERATIONS.iter().position(|known| *known == operation) {
            Some(index) => self.series[index * 2 + usize::from(rejected)]
                .get_or_init(|| self.fetch(operation, rejected))
                .observe(seconds),
            None => self.fetch(operation, rejected).observe(seconds),
        }
    }

    fn fetch(&self, operation: &'static str, rejected: bool) -> Histogram {
        let step = StepLabels {
            r#type: self.phase.label(),
            operation,
            rejected,
        };
        match &self.family {
            AdmissionFamily::Step(family) => family.get_or_create(&step).clone(),
            AdmissionFamily::Controller { name, family } => {
                let labels = ControllerLabels {
                    name: name.clone(),
                    step,
                };
                family.get_or_create(&labels).clone()
            }
        }
    }
}
