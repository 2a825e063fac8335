//! The handler chain: kube's `DefaultBuildHandlerChain`, built in [`build`],
//! the one function where the order of the filters *is* the architecture.
//!
//! ```text
//! request ─> audit ID ─> panic recovery ─> request info ─> HTTP log ─> HSTS
//!   ─> cache-control ─> body limit ─> deadline/timeout ─> CORS
//!   ─> [authentication] ─> [audit] ─> max-in-flight ─> [authorization]
//!   ─> [admission] ─> the first server's director ─> ... ─> 404 Status
//! ```
//! `[x]` marks the stages that Wasm filters will run; until then
//! authentication makes every request `system:anonymous` and authorization,
//! audit and admission are not installed.

mod audit_id;
pub mod authentication;
pub mod body_limit;
mod cors;
mod flow_control;
mod headers;
mod http_log;
mod panic_recovery;
mod request_info;
mod timeout;

use std::sync::Arc;

pub use audit_id::AUDIT_ID_HEADER;

use crate::config::Config;
use crate::handler::SharedHandler;

/// Wraps `servers` (the delegation chain) in the native filters, innermost
/// first: each line below puts one filter *outside* everything above it, so
/// the request meets them bottom to top.
pub fn build(config: &Config, servers: SharedHandler) -> SharedHandler {
    let limits = &config.limits;
    let mut handler = servers;

    // [admission] and [authorization] (Wasm stages) will wrap here.
    handler = Arc::new(flow_control::MaxInFlight::new(
        limits.max_requests_in_flight,
        limits.max_mutating_requests_in_flight,
        handler,
    ));
    // [audit] (Wasm stage) will wrap here, inside authentication so that
    // events carry the user.
    handler = Arc::new(authentication::Anonymous { next: handler });
    // CORS answers pre-flights before authentication: browsers send them
    // without credentials.
    if !config.cors_allowed_origins.is_empty() {
        handler = Arc::new(cors::Cors { allowed_origins: config.cors_allowed_origins.clone(), next: handler });
    }
    handler = Arc::new(timeout::Timeout { request_timeout: limits.request_timeout, next: handler });
    handler = Arc::new(body_limit::BodyLimit { max_request_body: limits.max_request_body, next: handler });
    handler = Arc::new(headers::CacheControl { next: handler });
    if let Some(directives) = &config.hsts {
        handler = Arc::new(headers::Hsts { directives: directives.clone(), next: handler });
    }
    handler = Arc::new(http_log::HttpLog { next: handler });
    // Request info is resolved once, before anything that reads it.
    handler = Arc::new(request_info::RequestInfoFilter { next: handler });
    // Panic recovery sits inside the audit ID so a 500 still carries it.
    handler = Arc::new(panic_recovery::PanicRecovery { next: handler });
    Arc::new(audit_id::AuditIdFilter { next: handler })
}
