//! The HTTP log (kube's `WithHTTPLogging`), the gateway's access log: one
//! line per request at info level, target `wasmgate::access`, once its
//! response body has been sent (or the client went away), in the log's
//! format (text, or JSON with `--log-format json`). It has the audit ID,
//! user (and the user it impersonated), verb, method, URI, code, bytes in and out, latency, the server and
//! route the request reached (reported by the delegation chain through the
//! request's [`RequestReport`]) and the trace ID. `[access_log]` says which
//! requests get a line (`crate::config::AccessLog`); with none, this step
//! costs a branch.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use http::HeaderMap;

use crate::body::{Request, Response};
use crate::config::AccessLog;
use crate::context::{AuditId, RequestContext, RequestReport};
use crate::handler::{Handler, SharedHandler};

pub(crate) struct HttpLog {
    pub access_log: AccessLog,
    pub next: SharedHandler,
}

impl HttpLog {
    fn selects(&self) -> bool {
        match self.access_log {
            AccessLog::Off => false,
            AccessLog::Every => true,
            AccessLog::Sampled { per_million } => sampled(per_million),
        }
    }
}

/// What the line says of the request, taken before it goes on.
struct Seen {
    started: Instant,
    method: http::Method,
    uri: http::Uri,
    verb: String,
    audit_id: Option<AuditId>,
    trace_id: String,
    /// Counted as the request body is read.
    bytes_in: Arc<AtomicU64>,
}

impl Handler for HttpLog {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        if !self.selects() {
            return self.next.call(request);
        }
        let context = RequestContext::of(request.extensions());
        let bytes_in = Arc::new(AtomicU64::new(0));
        let seen = Seen {
            started: context
                .received
                .map_or_else(Instant::now, |received| received.instant),
            method: request.method().clone(),
            uri: request.uri().clone(),
            verb: context
                .info
                .as_ref()
                .map(|info| info.verb.to_string())
                .unwrap_or_default(),
            audit_id: context.audit_id.clone(),
            trace_id: trace_id(&request).unwrap_or_default(),
            bytes_in: bytes_in.clone(),
        };
        let report = RequestReport::default();
        let mut request = request
            .map(|body| body.on_end(move |bytes, _| bytes_in.store(bytes, Ordering::Relaxed)));
        request.extensions_mut().insert(report.clone());
        self.next
            .call(request)
            .map(move |response| {
                let code = response.status().as_u16();
                response.map(|body| {
                    body.on_end(move |bytes_out, error| {
                        write_line(&seen, &report, code, bytes_out, error.is_some());
                    })
                })
            })
            .boxed()
    }
}

/// The line: what was seen of the request, and what the steps inside
/// reported (the user authentication found, the one it impersonated, the
/// route it reached; empty when none).
fn write_line(seen: &Seen, report: &RequestReport, code: u16, bytes_out: u64, cut: bool) {
    let user = report.user().map_or("", |user| user.name.as_str());
    let impersonated_user = report.impersonated().unwrap_or_default();
    let (server, route) = report.answered().map_or(("", ""), |answered| {
        (answered.server.as_ref(), answered.route.as_ref())
    });
    tracing::info!(
        target: "wasmgate::access",
        audit_id = seen.audit_id.as_ref().map_or("", AuditId::as_str),
        user,
        impersonated_user,
        verb = seen.verb,
        method = %seen.method,
        uri = %seen.uri,
        code,
        bytes_in = seen.bytes_in.load(Ordering::Relaxed),
        bytes_out,
        latency_us = u64::try_from(seen.started.elapsed().as_micros()).unwrap_or(u64::MAX),
        server,
        route,
        trace_id = report.trace_id().unwrap_or(&seen.trace_id),
        cut,
        "request"
    );
}

/// The trace ID the line carries, as far as known when the request comes:
/// the trace of the request's span when the gateway traces requests
/// (`[tracing]`), else the one of the W3C `traceparent` header the request
/// came with (`00-<32 hex trace ID>-<16 hex parent ID>-<2 hex flags>`), when
/// valid. When the gateway traces requests and the request named a trace,
/// its trace is decided after authentication, which reports it (the
/// client's for a privileged client, a new one for any other).
fn trace_id(request: &Request) -> Option<String> {
    crate::traces::trace_id(request.extensions())
        .or_else(|| traceparent_trace_id(request.headers()).map(str::to_owned))
}

/// The trace ID of a valid W3C `traceparent` header.
fn traceparent_trace_id(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get("traceparent")?.to_str().ok()?;
    let mut parts = value.split('-');
    let (version, trace, parent, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |text: &str, len: usize| {
        text.len() == len && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    let valid = hex(version, 2)
        && version != "ff"
        && hex(trace, 32)
        && trace.bytes().any(|b| b != b'0')
        && hex(parent, 16)
        && hex(flags, 2);
    valid.then_some(trace)
}

/// True for about `per_million` requests in a million: the requests are
/// numbered, and a number's golden-ratio hash spreads any run of them
/// evenly over the range, so a sampled log keeps its share at any rate
/// without a random number generator.
fn sampled(per_million: u32) -> bool {
    static REQUESTS: AtomicU64 = AtomicU64::new(0);
    const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;
    let number = REQUESTS.fetch_add(1, Ordering::Relaxed);
    let spread = number.wrapping_mul(GOLDEN) >> 32;
    spread % 1_000_000 < u64::from(per_million)
}

#[cfg(test)]
mod tests {
    use super::{sampled, traceparent_trace_id};

    #[test]
    fn a_sampled_log_keeps_its_share() {
        let kept = (0..100_000).filter(|_| sampled(100_000)).count();
        assert!((9_000..=11_000).contains(&kept), "{kept} of 100000 at 10%");
        assert!((0..1000).all(|_| sampled(1_000_000)));
    }

    /// W3C Trace Context's `traceparent`: version 00, a non-zero trace ID.
    #[test]
    fn the_trace_id_is_read_from_a_valid_traceparent_only() {
        let header = |value: &str| {
            let mut headers = http::HeaderMap::new();
            headers.insert("traceparent", http::HeaderValue::from_str(value).unwrap());
            headers
        };
        let valid = header("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        assert_eq!(
            traceparent_trace_id(&valid),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        for invalid in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        ] {
            assert_eq!(traceparent_trace_id(&header(invalid)), None, "{invalid}");
        }
    }
}
