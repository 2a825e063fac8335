//! The handler chain: kube's `DefaultBuildHandlerChain`, built in [`build`],
//! the one function where the order of the filters *is* the architecture.
//!
//! ```text
//! request ─> nosniff ─> audit ID ─> panic recovery ─> request headers
//!   ─> canonical target ─> request info ─> HTTP log ─> HSTS ─> cache-control
//!   ─> body limit ─> deadline/timeout ─> CORS
//!   ─> [authentication] ─> [audit] ─> impersonation ─> max-in-flight
//!   ─> [authorization] ─> [admission] ─> the first server's director
//!   ─> ... ─> 404 Status
//! ```
//! `[x]` marks the stages run by Wasm filters (`crate::wasm`). A stage with
//! no filter configured is not installed, except authentication, which then
//! makes every request `system:anonymous`.

pub mod admission;
pub mod audit;
mod audit_id;
pub mod authentication;
pub mod authorization;
pub mod body_limit;
mod cors;
mod headers;
mod http_log;
mod impersonation;
mod max_in_flight;
mod panic_recovery;
mod request_headers;
mod request_info;
mod request_target;
pub mod stage;
mod timeout;

use std::sync::Arc;

pub use audit_id::AUDIT_ID_HEADER;

use crate::config::Config;
use crate::handler::SharedHandler;
use crate::wasm::LoadedStages;

/// The built chain, and the audit backend to flush at shutdown.
pub struct Chain {
    pub handler: SharedHandler,
    pub audit: Option<Arc<audit::AuditBackend>>,
}

/// Wraps `servers` (the delegation chain) in the native filters and the Wasm
/// stages, innermost first: each step below puts one filter *outside*
/// everything above it, so the request meets them bottom to top.
pub fn build(config: &Config, stages: LoadedStages, servers: SharedHandler) -> Chain {
    let limits = &config.limits;
    let mut handler = servers;

    if !stages.mutating.is_empty() || !stages.validating.is_empty() {
        handler = Arc::new(admission::Admission {
            mutating: stages.mutating,
            validating: stages.validating,
            next: handler,
        });
    }
    let authorizers = (!stages.authorizers.is_empty()).then(|| {
        Arc::new(authorization::Authorizers {
            filters: stages.authorizers,
        })
    });
    if let Some(authorizers) = &authorizers {
        handler = Arc::new(authorization::Authorization {
            authorizers: authorizers.clone(),
            next: handler,
        });
    }
    handler = Arc::new(max_in_flight::MaxInFlight::new(
        limits.max_requests_in_flight,
        limits.max_mutating_requests_in_flight,
        handler,
    ));
    // Impersonation asks the authorization union, so it needs authentication
    // (the requester) outside it and runs before max-in-flight counts it.
    handler = Arc::new(impersonation::Impersonation {
        authorizers,
        next: handler,
    });
    // Audit sits inside authentication so that events carry the user.
    let audit_policy = &config.stages.audit;
    let audit = (!stages.auditors.is_empty() && !audit_policy.policy.is_empty())
        .then(|| audit::AuditBackend::new(stages.auditors, audit_policy));
    if let Some(backend) = &audit {
        handler = Arc::new(audit::Audit {
            policy: audit_policy.policy.clone(),
            backend: backend.clone(),
            next: handler,
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
    handler = Arc::new(authentication::Authentication {
        filters: stages.authenticators,
        anonymous: config.stages.authentication.anonymous,
        failure_audit,
        next: handler,
    });
    // CORS answers pre-flights before authentication: browsers send them
    // without credentials.
    if !config.cors_allowed_origins.is_empty() {
        handler = Arc::new(cors::Cors {
            allowed_origins: config.cors_allowed_origins.clone(),
            next: handler,
        });
    }
    handler = Arc::new(timeout::Timeout {
        request_timeout: limits.request_timeout,
        next: handler,
    });
    handler = Arc::new(body_limit::BodyLimit {
        max_request_body: limits.max_request_body,
        next: handler,
    });
    handler = Arc::new(headers::CacheControl { next: handler });
    if let Some(directives) = &config.hsts {
        handler = Arc::new(headers::Hsts {
            directives: directives.clone(),
            next: handler,
        });
    }
    handler = Arc::new(http_log::HttpLog { next: handler });
    // Request info is resolved once, before anything that reads it.
    handler = Arc::new(request_info::RequestInfoFilter { next: handler });
    // The target is made canonical first, so the path request info resolves
    // is the one every later step judges and the upstream receives.
    handler = Arc::new(request_target::CanonicalTarget::new(
        &config.servers,
        handler,
    ));
    // Host, transfer codings and the client's origin are checked before
    // anything reads them (Go's net/http does so before kube's chain).
    handler = Arc::new(request_headers::RequestHeaders {
        trusted_proxies: config.listen.trusted_proxies.clone(),
        next: handler,
    });
    // Panic recovery sits inside the audit ID so a 500 still carries it.
    handler = Arc::new(panic_recovery::PanicRecovery { next: handler });
    handler = Arc::new(audit_id::AuditIdFilter { next: handler });
    // Outermost: every answer of the chain carries nosniff.
    handler = Arc::new(headers::NoSniff { next: handler });
    Chain { handler, audit }
}
