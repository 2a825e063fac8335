//! The handler chain: kube's `DefaultBuildHandlerChain`, built in [`build`],
//! the one function where the order of the filters *is* the architecture.
//! Its steps are written there once, innermost first, each with the name
//! [`Chain::steps`] records; `wasmgate check` prints that record, and
//! docs/architecture.md draws it (a test holds the drawing to it).
//!
//! The authentication, audit, authorization and admission stages run Wasm
//! filters (`crate::wasm`). A stage with no filter configured is not
//! installed, except authentication, which then makes every request
//! `system:anonymous`.

pub(crate) mod admission;
pub(crate) mod audit;
mod audit_id;
pub(crate) mod authentication;
pub(crate) mod authorization;
pub(crate) mod body_limit;
mod cors;
mod filter_latency;
mod headers;
mod http_log;
mod impersonation;
mod max_in_flight;
mod panic_recovery;
pub(crate) mod priority_and_fairness;
mod request_headers;
mod request_info;
mod request_metrics;
mod request_target;
pub(crate) mod stage;
mod timeout;
mod tracing;

use std::sync::Arc;

use crate::config::Config;
use crate::flow_control::Controller;
use crate::handler::SharedHandler;
use crate::traces::Tracer;
use crate::wasm::LoadedStages;

/// The built chain, what it is made of, and the audit backend to flush at
/// shutdown.
pub(crate) struct Chain {
    pub handler: SharedHandler,
    /// The names of the steps installed, outermost first: the order a request
    /// meets them, as `wasmgate check` and `wasmgate try` show it.
    pub steps: Vec<&'static str>,
    /// The steps timed in `apiserver_request_filter_duration_seconds`, each
    /// with the `filter` label kube gives it (kube's `filterlatency`).
    pub timed: Vec<TimedStep>,
    pub audit: Option<Arc<audit::AuditBackend>>,
}

/// A step whose latency is measured, and its name in the metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimedStep {
    pub step: &'static str,
    pub filter: &'static str,
}

/// A chain being built, innermost first.
struct Layers {
    handler: SharedHandler,
    /// Innermost first, as installed.
    steps: Vec<&'static str>,
    timed: Vec<TimedStep>,
    /// The configuration traces requests: the steps that matter get spans.
    traced: bool,
}

impl Layers {
    /// Puts the filter `wrap` makes (given everything so far as its `next`)
    /// outside everything so far, and records it as `step`.
    fn wrap(&mut self, step: &'static str, wrap: impl FnOnce(SharedHandler) -> SharedHandler) {
        self.handler = wrap(self.handler.clone());
        self.steps.push(step);
    }

    /// [`wrap`](Self::wrap), and times the step (kube's `TrackStarted`,
    /// the timing closed where the next timed step, or the servers, begin)
    /// as `apiserver_request_filter_duration_seconds{filter}`; when tracing
    /// is on, the step also gets a span of its own, from when it receives
    /// the request to when it hands it on (kube's `filterlatency`).
    fn wrap_timed(
        &mut self,
        step: &'static str,
        filter: &'static str,
        wrap: impl FnOnce(SharedHandler) -> SharedHandler,
    ) {
        let traced = self.traced;
        self.wrap(step, |next| {
            Arc::new(filter_latency::Track::new(step, filter, traced, wrap(next)))
        });
        self.timed.push(TimedStep { step, filter });
    }
}

/// Wraps `servers` (the delegation chain) in the native filters and the Wasm
/// stages, innermost first: each step below puts one filter *outside*
/// everything above it, so the request meets them bottom to top. The name
/// given with each step is the one [`Chain::steps`] records.
/// `flow_control` is the configuration's API Priority and Fairness, when
/// on; `tracer`, its `[tracing]`, when on.
pub(crate) fn build(
    config: &Config,
    stages: LoadedStages,
    flow_control: Option<Arc<Controller>>,
    tracer: Option<Tracer>,
    servers: SharedHandler,
) -> Chain {
    let limits = &config.limits;
    // The timing of the innermost timed step closes as the servers begin.
    let mut chain = Layers {
        handler: Arc::new(filter_latency::Close { next: servers }),
        steps: Vec::new(),
        timed: Vec::new(),
        traced: tracer.is_some(),
    };

    if !stages.mutating.is_empty() || !stages.validating.is_empty() {
        chain.wrap_timed("admission", "admission", |next| {
            Arc::new(admission::Admission::new(
                stages.mutating,
                stages.validating,
                next,
            ))
        });
    }
    let authorizers = (!stages.authorizers.is_empty())
        .then(|| Arc::new(authorization::Authorizers::new(stages.authorizers)));
    if let Some(authorizers) = &authorizers {
        chain.wrap_timed("authorization", "authorization", |next| {
            Arc::new(authorization::Authorization {
                authorizers: authorizers.clone(),
                next,
            })
        });
    }
    // kube's either/or: priority and fairness when configured, else the
    // two in-flight limits.
    if let Some(controller) = flow_control {
        chain.wrap_timed("priority-and-fairness", "priorityandfairness", |next| {
            Arc::new(priority_and_fairness::PriorityAndFairness { controller, next })
        });
    } else {
        chain.wrap_timed("max-in-flight", "maxinflight", |next| {
            Arc::new(max_in_flight::MaxInFlight::new(
                limits.max_requests_in_flight,
                limits.max_mutating_requests_in_flight,
                next,
            ))
        });
    }
    // Impersonation asks the authorization union, so it needs authentication
    // (the requester) outside it and runs before max-in-flight counts it.
    chain.wrap_timed("impersonation", "impersonation", |next| {
        Arc::new(impersonation::Impersonation { authorizers, next })
    });
    // Audit sits inside authentication so that events carry the user.
    let audit_policy = &config.stages.audit;
    let audit = (!stages.auditors.is_empty() && !audit_policy.policy.is_empty())
        .then(|| audit::AuditBackend::new(stages.auditors, audit_policy));
    if let Some(backend) = &audit {
        chain.wrap_timed("audit", "audit", |next| {
            Arc::new(audit::Audit {
                policy: audit_policy.policy.clone(),
                backend: backend.clone(),
                next,
            })
        });
    }
    // Requests that authentication refuses are audited by its failed
    // handler (kube's `WithFailedAuthenticationAudit`).
    let failure_audit = audit
        .as_ref()
        .map(|backend| audit::FailedAuthenticationAudit {
            policy: audit_policy.policy.clone(),
            backend: backend.clone(),
        });
    // kube's WithTracing sits just inside authentication, so that a
    // privileged client's traceparent is followed and anyone else's only
    // linked: the step that decides the trace of a request that names one.
    if tracer.is_some() {
        chain.wrap("client-trace", |next| {
            Arc::new(tracing::ClientTrace { next })
        });
    }
    chain.wrap_timed("authentication", "authentication", |next| {
        Arc::new(authentication::Authentication {
            filters: stages.authenticators,
            anonymous: config.stages.authentication.anonymous,
            failure_audit,
            next,
        })
    });
    // CORS answers pre-flights before authentication: browsers send them
    // without credentials.
    if !config.cors_allowed_origins.is_empty() {
        chain.wrap("cors", |next| {
            Arc::new(cors::Cors {
                allowed_origins: config.cors_allowed_origins.clone(),
                next,
            })
        });
    }
    chain.wrap("timeout", |next| {
        Arc::new(timeout::Timeout {
            request_timeout: limits.request_timeout,
            min_request_timeout: limits.min_request_timeout,
            next,
        })
    });
    chain.wrap("body-limit", |next| {
        Arc::new(body_limit::BodyLimit {
            max_request_body: limits.max_request_body,
            next,
        })
    });
    chain.wrap("cache-control", |next| {
        Arc::new(headers::CacheControl { next })
    });
    if let Some(directives) = &config.hsts {
        chain.wrap("hsts", |next| {
            Arc::new(headers::Hsts {
                directives: directives.clone(),
                next,
            })
        });
    }
    chain.wrap("http-log", |next| {
        Arc::new(http_log::HttpLog {
            access_log: config.access_log,
            next,
        })
    });
    // The span of a request that names no trace starts outside the HTTP
    // log, inside request info (the span is named from it), when [tracing]
    // is set: its authentication is in its trace.
    if let Some(tracer) = tracer {
        chain.wrap("tracing", |next| {
            Arc::new(tracing::Tracing { tracer, next })
        });
    }
    // Every request request info resolved is counted, whatever answers it.
    chain.wrap("request-metrics", |next| {
        Arc::new(request_metrics::RequestMetrics { next })
    });
    // Request info is resolved once, before anything that reads it.
    chain.wrap("request-info", |next| {
        Arc::new(request_info::RequestInfoFilter { next })
    });
    // The target is made canonical first, so the path request info resolves
    // is the one every later step judges and the upstream receives.
    chain.wrap("canonical-target", |next| {
        Arc::new(request_target::CanonicalTarget::new(&config.servers, next))
    });
    // Host, transfer codings and the client's origin are checked before
    // anything reads them (Go's net/http does so before kube's chain).
    chain.wrap("request-headers", |next| {
        Arc::new(request_headers::RequestHeaders {
            trusted_proxies: config.listen.trusted_proxies.clone(),
            next,
        })
    });
    // Panic recovery sits inside the audit ID so a 500 still carries it.
    chain.wrap("panic-recovery", |next| {
        Arc::new(panic_recovery::PanicRecovery { next })
    });
    chain.wrap("audit-id", |next| {
        Arc::new(audit_id::AuditIdFilter { next })
    });
    // Outermost: every answer of the chain carries nosniff.
    chain.wrap("nosniff", |next| Arc::new(headers::NoSniff { next }));
    let Layers {
        handler,
        mut steps,
        mut timed,
        ..
    } = chain;
    steps.reverse();
    timed.reverse();
    Chain {
        handler,
        steps,
        timed,
        audit,
    }
}
