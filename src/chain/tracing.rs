//! The request's span (kube's `WithTracing`,
//! `staging/src/k8s.io/apiserver/pkg/endpoints/filters/traces.go`): named
//! and attributed as kube names it, installed only when the manifest has
//! `[tracing]`. A client's `traceparent` is followed only for a privileged
//! user, found by authentication: kube's chain puts `WithTracing` after
//! authentication "so we can allow authenticated clients to influence
//! sampling" (`staging/src/k8s.io/apiserver/pkg/server/config.go`) and
//! treats everyone outside `system:masters` and `system:monitoring` as a
//! public endpoint (`notSystemPrivilegedGroup`), whose span is linked, not
//! made the parent. So [`Tracing`], before authentication, makes the span
//! of a request that names no trace (kube's sampler would make it a new
//! trace's root wherever it asked, and its authentication is then in its
//! trace), and a request that names one waits for [`ClientTrace`], just
//! inside authentication, where kube's `WithTracing` is.
//!
//! And the spans of the steps that matter, kube's
//! `filterlatency.TrackStarted` and `TrackCompleted` around a filter: a
//! step's span runs from when the step receives the request to when it
//! hands it on (or answers it); filter latency's `Track`, which times the
//! same steps, opens and closes them.

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use futures_util::future::BoxFuture;
use opentelemetry::KeyValue;
use opentelemetry::trace::{Span as _, SpanContext, SpanKind, Status};

use crate::body::{Request, Response};
use crate::context::{RequestContext, RequestReport, UserInfo};
use crate::handler::{Handler, SharedHandler};
use crate::traces::{self, Origin, Span, TraceContext, Tracer};

/// kube's `WithTracing` for a request that names no trace: its server
/// span, in which every later step, filter call and the upstream call
/// make theirs. A request that names one is left to [`ClientTrace`], and
/// its span, if it gets one, is ended here all the same.
pub(crate) struct Tracing {
    pub tracer: Tracer,
    pub next: SharedHandler,
}

impl Handler for Tracing {
    fn call(&self, mut request: Request) -> BoxFuture<'_, Response> {
        // kube starts the span at the request-received timestamp, the
        // time its latency metrics measure from.
        let start = RequestContext::of(request.extensions())
            .received
            .map_or_else(SystemTime::now, |received| received.wall);
        let span = match traces::client_span(request.headers()) {
            None => {
                let (context, span) = self.tracer.request_span(Origin::New, start);
                request.extensions_mut().insert(context);
                // Not sampled: no span, and nothing more to do here.
                let Some(span) = span else {
                    return self.next.call(request);
                };
                RequestSpan::holding(span, &request)
            }
            Some(client) => {
                let pending = PendingTrace {
                    tracer: self.tracer.clone(),
                    client,
                    start,
                    span: RequestSpan::default(),
                };
                let span = pending.span.clone();
                request.extensions_mut().insert(pending);
                span
            }
        };
        Box::pin(async move {
            let response = self.next.call(request).await;
            span.end(response.status());
            response
        })
    }
}

/// The request's server span, once made: ended by [`Tracing`] with the
/// answer the client gets.
#[derive(Clone, Default)]
struct RequestSpan(Arc<Mutex<Option<Span>>>);

impl RequestSpan {
    /// A made span, named and attributed from `request`.
    fn holding(span: Span, request: &Request) -> RequestSpan {
        let holder = RequestSpan::default();
        holder.hold(span, request);
        holder
    }

    fn hold(&self, mut span: Span, request: &Request) {
        span.update_name(span_name(request));
        span.set_attributes(request_attributes(request));
        if let Ok(mut held) = self.0.lock() {
            *held = Some(span);
        }
    }

    /// Ends the span, if one was made, with the answer's `code`.
    fn end(&self, code: http::StatusCode) {
        let Some(mut span) = self.0.lock().ok().and_then(|mut held| held.take()) else {
            return;
        };
        span.set_attribute(KeyValue::new(
            "http.response.status_code",
            i64::from(code.as_u16()),
        ));
        // otelhttp's server spans: a 5xx is the server's error.
        if code.is_server_error() {
            span.set_status(Status::error(""));
        }
        span.end();
    }
}

/// A request whose `traceparent` names a trace, until authentication has
/// found who sent it.
#[derive(Clone)]
pub(crate) struct PendingTrace {
    tracer: Tracer,
    client: SpanContext,
    start: SystemTime,
    span: RequestSpan,
}

/// kube's `WithTracing` where kube puts it, just inside authentication, for
/// a request that names a trace: a privileged client's is followed (the
/// request's span is its span's child, sampled as the client says); any
/// other's is a new trace's root, sampled at the configured rate, linked
/// to the client's span.
pub(crate) struct ClientTrace {
    pub next: SharedHandler,
}

impl Handler for ClientTrace {
    fn call(&self, mut request: Request) -> BoxFuture<'_, Response> {
        let Some(pending) = request.extensions_mut().remove::<PendingTrace>() else {
            return self.next.call(request);
        };
        let context = RequestContext::of(request.extensions());
        let origin = if context.user.as_deref().is_some_and(steers_traces) {
            Origin::ChildOf(pending.client)
        } else {
            Origin::LinkedTo(pending.client)
        };
        let (context, span) = pending.tracer.request_span(origin, pending.start);
        if let Some(report) = request.extensions().get::<RequestReport>() {
            report.traced(context.trace_id());
        }
        request.extensions_mut().insert(context);
        if let Some(span) = span {
            pending.span.hold(span, &request);
        }
        self.next.call(request)
    }
}

/// kube's `notSystemPrivilegedGroup`, negated: the groups whose
/// `traceparent` kube follows.
fn steers_traces(user: &UserInfo) -> bool {
    user.is_privileged() || user.in_group(MONITORING_GROUP)
}

/// kube's `user.MonitoringGroup`
/// (`staging/src/k8s.io/apiserver/pkg/authentication/user/user.go`).
const MONITORING_GROUP: &str = "system:monitoring";

/// kube's span names: `GET /api/v1/namespaces/{:namespace}/pods/{:name}`
/// for a resource request, the method alone otherwise (a path is not a
/// name: it has no bound).
fn span_name(request: &Request) -> String {
    let method = request.method().as_str();
    let Some(info) = RequestContext::of(request.extensions())
        .info
        .as_ref()
        .filter(|info| info.is_resource_request)
    else {
        return method.to_owned();
    };
    let mut name = format!("{method} /{}", info.api_prefix);
    if !info.api_group.is_empty() {
        name.push('/');
        name.push_str(&info.api_group);
    }
    name.push('/');
    name.push_str(&info.api_version);
    if !info.namespace.is_empty() {
        name.push_str("/namespaces/{:namespace}");
    }
    name.push('/');
    name.push_str(&info.resource);
    if !info.name.is_empty() {
        name.push_str("/{:name}");
    }
    if !info.subresource.is_empty() {
        name.push('/');
        name.push_str(&info.subresource);
    }
    name
}

/// otelhttp's server attributes, and kube's `http.target` and `audit-id`
/// (the ID's first 64 characters, kube's `GetAuditIDTruncated`).
fn request_attributes(request: &Request) -> Vec<KeyValue> {
    // kube's `r.URL.RequestURI()`: the path and query, also of an HTTP/2
    // request (or an absolute-form target), whose URI names scheme and host.
    let target = request
        .uri()
        .path_and_query()
        .map_or("/", http::uri::PathAndQuery::as_str);
    let mut attributes = vec![
        KeyValue::new("http.request.method", request.method().as_str().to_owned()),
        KeyValue::new("http.target", target.to_owned()),
        KeyValue::new(
            "network.protocol.version",
            match request.version() {
                http::Version::HTTP_2 => "2",
                http::Version::HTTP_10 => "1.0",
                _ => "1.1",
            },
        ),
    ];
    let text = |name| {
        request
            .headers()
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    };
    if let Some(agent) = text(http::header::USER_AGENT) {
        attributes.push(KeyValue::new("user_agent.original", agent));
    }
    if let Some(id) = &RequestContext::of(request.extensions()).audit_id {
        attributes.push(KeyValue::new("audit-id", id.truncated().to_owned()));
    }
    attributes
}

/// A timed step's span while the step runs (kube's `TrackStarted` to
/// `TrackCompleted`), opened by filter latency's `Track` for a sampled
/// request: ended where the next timed step begins (or the servers), or
/// when the step answers the request itself, whichever comes first; what
/// follows the step runs in the request's span again.
#[derive(Clone)]
pub(crate) struct StepSpan {
    span: Arc<Mutex<Option<Span>>>,
    outer: TraceContext,
}

impl StepSpan {
    /// Whether the request's steps get spans.
    pub(crate) fn sampling(request: &Request) -> Sampling {
        if request.extensions().get::<PendingTrace>().is_some() {
            return Sampling::AwaitingUser;
        }
        let sampled = request
            .extensions()
            .get::<TraceContext>()
            .is_some_and(TraceContext::sampled);
        if sampled {
            Sampling::Sampled
        } else {
            Sampling::NotSampled
        }
    }

    /// Opens `step`'s span when the request is sampled, under the span the
    /// request is in; the step runs with its span as the request's
    /// [`TraceContext`], so the filter calls it makes are its children.
    pub(crate) fn open(request: &mut Request, step: &'static str) -> Option<StepSpan> {
        let outer = request
            .extensions()
            .get::<TraceContext>()
            .filter(|context| context.sampled())?
            .clone();
        let span = outer.child(step, SpanKind::Internal, None, Vec::new());
        request.extensions_mut().insert(outer.within(&span));
        Some(StepSpan {
            span: Arc::new(Mutex::new(Some(span))),
            outer,
        })
    }

    /// Ends the span, if still open, and gives the request back its outer
    /// context.
    pub(crate) fn close(&self, request: &mut Request) {
        self.end();
        request.extensions_mut().insert(self.outer.clone());
    }

    /// Ends the span, if still open.
    pub(crate) fn end(&self) {
        if let Some(mut span) = self.span.lock().ok().and_then(|mut span| span.take()) {
            span.end();
        }
    }
}

/// Whether a request's steps get spans.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sampling {
    Sampled,
    NotSampled,
    /// Its trace waits for its user ([`ClientTrace`]): asked again at the
    /// next step.
    AwaitingUser,
}
