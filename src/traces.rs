//! OpenTelemetry tracing, as kube's `--tracing-config-file` sets it up
//! (`staging/src/k8s.io/component-base/tracing/utils.go`, `NewProvider`):
//! spans exported over OTLP/gRPC by a batch processor with a bounded queue,
//! sampled `ParentBased(TraceIDRatioBased(rate))`, W3C Trace Context read
//! from the client and written to the upstream.
//!
//! A [`Tracer`] belongs to one configuration's chain snapshot, so a reload
//! applies a changed `[tracing]` table; the request carries the span it is
//! in as a [`TraceContext`] extension, which the steps, the filter calls and
//! the upstream proxy make their spans under. Export runs on the batch
//! processor's own thread: a slow or unreachable collector costs a request
//! nothing, and when the queue is full spans are dropped, never waited for.

use std::borrow::Cow;
use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{
    Link, Span as _, SpanBuilder, SpanContext, SpanId, SpanKind, Status, TraceContextExt,
    TraceFlags, TraceId, TraceState, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchSpanProcessor, IdGenerator, RandomIdGenerator, Sampler, SamplingDecision, SdkTracer,
    SdkTracerProvider, ShouldSample, Span as SdkSpan,
};

use crate::config::Tracing;

/// A span of the gateway's, ended when dropped or by `end`.
pub(crate) type Span = SdkSpan;

/// The service name spans are exported under (kube's is `apiserver`).
const SERVICE_NAME: &str = "wasmgate";

/// The instrumentation scope of the gateway's spans.
const SCOPE: &str = "wasmgate";

/// One configuration's tracer: its provider (exporter, batch processor)
/// and the tracer spans are made with. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Tracer(Arc<Provider>);

struct Provider {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    /// The provider's sampler, asked first by [`Tracer::request_span`] so
    /// that a request it drops makes no span at all.
    sampler: Sampler,
}

impl Tracer {
    /// The tracer of `config`: the exporter connects lazily, so a collector
    /// that is not there fails nothing here. Made on the tokio runtime,
    /// where tonic spawns its channel's worker.
    pub(crate) fn new(config: &Tracing) -> Result<Tracer, String> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err("the exporter needs the tokio runtime".to_owned());
        }
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(config.endpoint.clone())
            .build()
            .map_err(|error| error.to_string())?;
        let ratio = f64::from(config.sampling_rate_per_million) / 1_000_000.0;
        let sampler = Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(ratio)));
        let provider = SdkTracerProvider::builder()
            .with_sampler(sampler.clone())
            .with_id_generator(DrawnTraceIds)
            .with_span_processor(BatchSpanProcessor::builder(exporter).build())
            .with_resource(
                Resource::builder_empty()
                    .with_service_name(SERVICE_NAME)
                    .build(),
            )
            .build();
        let tracer = provider.tracer(SCOPE);
        Ok(Tracer(Arc::new(Provider {
            provider,
            tracer,
            sampler,
        })))
    }

    /// The request's context, and its server span when the trace is
    /// sampled: made where `origin` says (a new trace's root, or a child
    /// of the client's span). The sampler is asked before any span is
    /// made; a request it drops (99 in 100 at kube's 1%) gets no SDK span,
    /// only a context of its own (the trace ID, a span ID of the gateway's,
    /// not sampled) so the upstream is still told the trace. The span's
    /// name and attributes are the caller's to set (the sampler reads
    /// neither).
    pub(crate) fn request_span(
        &self,
        origin: Origin,
        start: SystemTime,
    ) -> (TraceContext, Option<Span>) {
        let (parent, link) = match origin {
            Origin::New => (Context::new(), None),
            Origin::ChildOf(client) => (Context::new().with_remote_span_context(client), None),
            Origin::LinkedTo(client) => (Context::new(), Some(Link::with_context(client))),
        };
        let remote = parent.span().span_context().trace_id();
        let drawn =
            (remote == TraceId::INVALID).then(|| RandomIdGenerator::default().new_trace_id());
        let trace_id = drawn.unwrap_or(remote);
        let sampling =
            self.0
                .sampler
                .should_sample(Some(&parent), trace_id, "", &SpanKind::Server, &[], &[]);
        if sampling.decision == SamplingDecision::Drop {
            let span = SpanContext::new(
                trace_id,
                RandomIdGenerator::default().new_span_id(),
                TraceFlags::default(),
                false,
                sampling.trace_state,
            );
            let context = TraceContext {
                tracer: self.clone(),
                span,
            };
            return (context, None);
        }
        // A new trace's ID is the one the sampler judged: the SDK draws it
        // from `DrawnTraceIds` (and asks the sampler again, to the same
        // answer: the ratio is a function of the ID).
        DRAWN.set(drawn);
        let span = SpanBuilder::from_name("")
            .with_kind(SpanKind::Server)
            .with_start_time(start)
            .with_links(link.into_iter().collect())
            .start_with_context(&self.0.tracer, &parent);
        DRAWN.set(None);
        let context = TraceContext {
            tracer: self.clone(),
            span: opentelemetry::trace::Span::span_context(&span).clone(),
        };
        (context, Some(span))
    }
}

/// Where a request's span goes in the traces.
pub(crate) enum Origin {
    /// The root of a new trace: the client named none.
    New,
    /// Under the client's span, in the client's trace: kube follows the
    /// `traceparent` of a privileged client.
    ChildOf(SpanContext),
    /// The root of a new trace, linked to the client's span: kube's
    /// *public endpoint*, for every other client.
    LinkedTo(SpanContext),
}

/// The span the client names in its `traceparent` (with its
/// `tracestate`), when it sent a valid one.
pub(crate) fn client_span(headers: &HeaderMap) -> Option<SpanContext> {
    // The propagator reads nothing else: no `traceparent`, no parent.
    headers.get(TRACEPARENT)?;
    let context =
        TraceContextPropagator::new().extract_with_context(&Context::new(), &HeaderReader(headers));
    let span = context.span().span_context().clone();
    span.is_valid().then_some(span)
}

impl Tracer {
    /// Sends the spans still queued, waiting at most `limit` (shutdown
    /// calls it, so the last requests' spans are not lost with the
    /// process). The export runs on the processor's thread; this waits
    /// on a blocking thread, not on the runtime's worker.
    pub(crate) async fn flush(&self, limit: Duration) {
        let provider = self.0.provider.clone();
        let flushed = tokio::task::spawn_blocking(move || provider.force_flush());
        match tokio::time::timeout(limit, flushed).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(error))) => tracing::warn!(%error, "the last spans could not be sent"),
            Ok(Err(error)) => tracing::warn!(%error, "the last spans could not be sent"),
            Err(_) => tracing::warn!(
                ?limit,
                "the collector took too long: the last spans are dropped"
            ),
        }
    }
}

impl Drop for Provider {
    /// Shutting the provider down flushes its queue to the collector and
    /// can wait for the export timeout: done on a thread of its own, never
    /// on the worker that drops a snapshot's last request.
    fn drop(&mut self) {
        let provider = self.provider.clone();
        let spawned = std::thread::Builder::new()
            .name("wasmgate-trace-shutdown".to_owned())
            .spawn(move || {
                if let Err(error) = provider.shutdown() {
                    tracing::debug!(%error, "tracing provider shutdown");
                }
            });
        if let Err(error) = spawned {
            tracing::warn!(%error, "cannot start a thread to flush the last spans");
        }
    }
}

/// The span a request is in now, as its extension: the request's own span
/// (set by the chain's tracing step), or the step it is in.
#[derive(Clone)]
pub(crate) struct TraceContext {
    tracer: Tracer,
    span: SpanContext,
}

impl TraceContext {
    /// True when this trace is being recorded: the spans below it are
    /// worth making (an unsampled request makes none).
    pub(crate) fn sampled(&self) -> bool {
        self.span.is_sampled()
    }

    /// The trace's ID, in hex (32 digits).
    pub(crate) fn trace_id(&self) -> String {
        self.span.trace_id().to_string()
    }

    /// A span under this one, started at `start` (now when `None`).
    pub(crate) fn child(
        &self,
        name: impl Into<Cow<'static, str>>,
        kind: SpanKind,
        start: Option<SystemTime>,
        attributes: Vec<KeyValue>,
    ) -> Span {
        let mut builder = SpanBuilder::from_name(name)
            .with_kind(kind)
            .with_attributes(attributes);
        if let Some(start) = start {
            builder = builder.with_start_time(start);
        }
        let parent = Context::new().with_remote_span_context(self.span.clone());
        builder.start_with_context(&self.tracer.0.tracer, &parent)
    }

    /// The context of `span`, made under this one, for what runs in it.
    pub(crate) fn within(&self, span: &Span) -> TraceContext {
        TraceContext {
            tracer: self.tracer.clone(),
            span: opentelemetry::trace::Span::span_context(span).clone(),
        }
    }

    /// Writes this span as the request's `traceparent` (and `tracestate`),
    /// replacing the client's. Written here rather than by the SDK's
    /// propagator, whose `format!` of the two IDs cost 4.5k instructions a
    /// request, more than a third of an unsampled request's tracing
    /// (bench/README.md § Tracing); this is W3C Trace Context's version 00,
    /// as the propagator writes it.
    pub(crate) fn inject(&self, headers: &mut HeaderMap) {
        // An insert replaces the client's value: only what is not written
        // is removed.
        if !self.span.is_valid() {
            headers.remove(TRACEPARENT);
            headers.remove(TRACESTATE);
            return;
        }
        let mut value = *b"00-00000000000000000000000000000000-0000000000000000-00";
        let flags = self.span.trace_flags() & TraceFlags::SAMPLED;
        let written = hex::encode_to_slice(self.span.trace_id().to_bytes(), &mut value[3..35])
            .and_then(|()| hex::encode_to_slice(self.span.span_id().to_bytes(), &mut value[36..52]))
            .and_then(|()| hex::encode_to_slice([flags.to_u8()], &mut value[53..55]));
        match (written, HeaderValue::from_bytes(&value)) {
            (Ok(()), Ok(traceparent)) => headers.insert(TRACEPARENT, traceparent),
            _ => headers.remove(TRACEPARENT),
        };
        // Most traces carry no state: nothing to render for them.
        let state = self.span.trace_state();
        let value = (*state != TraceState::NONE)
            .then(|| HeaderValue::try_from(state.header()).ok())
            .flatten()
            .filter(|value| !value.is_empty());
        match value {
            Some(state) => headers.insert(TRACESTATE, state),
            None => headers.remove(TRACESTATE),
        };
    }
}

/// The upstream call's client span (otelhttp's transport), under the span
/// the request is in, and written into the outgoing `request` as its
/// `traceparent`, so the upstream's spans are its children. A trace not
/// sampled gets no span: the upstream is told the request's context (the
/// trace, the gateway's span ID, not sampled) all the same.
pub(crate) fn upstream_span<B>(request: &mut http::Request<B>, url: &http::Uri) -> Option<Span> {
    // Taken, not cloned: the request is leaving the gateway.
    let context = request.extensions_mut().remove::<TraceContext>()?;
    if !context.sampled() {
        context.inject(request.headers_mut());
        return None;
    }
    // The pool sends origin-form: the URL is the upstream's with the
    // request's path and query.
    let target = request
        .uri()
        .path_and_query()
        .map_or("/", |path| path.as_str());
    let full = match (url.scheme_str(), url.authority()) {
        (Some(scheme), Some(authority)) => format!("{scheme}://{authority}{target}"),
        _ => url.to_string(),
    };
    let mut attributes = vec![
        KeyValue::new("http.request.method", request.method().as_str().to_owned()),
        KeyValue::new("url.full", full),
    ];
    if let Some(host) = url.host() {
        attributes.push(KeyValue::new("server.address", host.to_owned()));
    }
    if let Some(port) = url.port_u16() {
        attributes.push(KeyValue::new("server.port", i64::from(port)));
    }
    let name = request.method().as_str().to_owned();
    let span = context.child(name, SpanKind::Client, None, attributes);
    context.within(&span).inject(request.headers_mut());
    Some(span)
}

/// Ends the upstream call's span with its answer's code, or its failure.
pub(crate) fn upstream_answered<B, E: std::fmt::Display>(
    span: Option<Span>,
    result: &Result<http::Response<B>, E>,
) {
    let Some(mut span) = span else { return };
    if span.is_recording() {
        match result {
            Ok(response) => {
                let code = response.status();
                span.set_attribute(KeyValue::new(
                    "http.response.status_code",
                    i64::from(code.as_u16()),
                ));
                // otelhttp's client spans: a 4xx or 5xx is an error.
                if code.is_client_error() || code.is_server_error() {
                    span.set_status(Status::error(""));
                }
            }
            Err(error) => span.set_status(Status::error(error.to_string())),
        }
    }
    span.end();
}

/// The trace ID of the request whose extensions are `extensions`, in hex
/// (32 digits), when the gateway traces it: for a log line to name the
/// trace its request is in.
pub(crate) fn trace_id(extensions: &http::Extensions) -> Option<String> {
    extensions.get::<TraceContext>().map(TraceContext::trace_id)
}

thread_local! {
    /// The trace ID [`Tracer::request_span`] drew for a new trace it is
    /// about to record, for the SDK to take as it makes the span.
    static DRAWN: Cell<Option<TraceId>> = const { Cell::new(None) };
}

/// The provider's IDs: random (the SDK's generator), but for the span of
/// a new trace the gateway sampled, whose trace ID is the one it drew.
#[derive(Debug)]
struct DrawnTraceIds;

impl IdGenerator for DrawnTraceIds {
    fn new_trace_id(&self) -> TraceId {
        DRAWN
            .take()
            .unwrap_or_else(|| RandomIdGenerator::default().new_trace_id())
    }

    fn new_span_id(&self) -> SpanId {
        RandomIdGenerator::default().new_span_id()
    }
}

const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// The request's headers as the propagator reads them.
struct HeaderReader<'a>(&'a HeaderMap);

impl Extractor for HeaderReader<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new trace (no client `traceparent`) is recorded exactly when the
    /// ratio samples the trace ID it carries: the SDK's span is made with
    /// the ID the sampler judged, not one it draws itself (which it would
    /// judge again, recording a quarter of the requests at a half).
    #[tokio::test]
    async fn a_new_trace_is_recorded_exactly_when_the_ratio_samples_its_id() {
        let config = Tracing {
            endpoint: "http://127.0.0.1:9".to_owned(),
            sampling_rate_per_million: 500_000,
        };
        let tracer = Tracer::new(&config).unwrap();
        let judge = Sampler::TraceIdRatioBased(0.5);
        let mut recorded = 0;
        for _ in 0..200 {
            let (context, span) = tracer.request_span(Origin::New, SystemTime::now());
            let trace_id = context.span.trace_id();
            let judged = judge
                .should_sample(None, trace_id, "", &SpanKind::Server, &[], &[])
                .decision
                == SamplingDecision::RecordAndSample;
            assert_eq!(
                context.sampled(),
                judged,
                "the told decision is the ratio's"
            );
            let span_trace = span.as_ref().map(|span| {
                assert!(span.is_recording());
                opentelemetry::trace::Span::span_context(span).trace_id()
            });
            assert_eq!(
                span_trace,
                judged.then_some(trace_id),
                "the span is of that trace"
            );
            recorded += usize::from(judged);
        }
        assert!((50..150).contains(&recorded), "about half: {recorded}");
    }
}
