//! A real OTLP/gRPC trace receiver, on the service types the OpenTelemetry
//! protocol crate generates for tonic: what it receives is what a
//! collector would, kept for a test to read as [`ReceivedSpan`]s.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use super::eventually;

/// One span as the receiver got it, IDs in hex, attributes as text.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub service: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a trace's root.
    pub parent_span_id: String,
    pub name: String,
    /// The protocol's `SpanKind`: 1 internal, 2 server, 3 client.
    pub kind: i32,
    /// The protocol's status code: 0 unset, 1 ok, 2 error.
    pub status: i32,
    pub attributes: BTreeMap<String, String>,
    /// Nanoseconds since the epoch.
    pub start: u64,
    pub end: u64,
    /// The spans it links to, as (trace ID, span ID).
    pub links: Vec<(String, String)>,
}

impl ReceivedSpan {
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

/// What the receiver got, shared with the [`Collector`] that reads it.
#[derive(Clone, Default)]
struct Received(Arc<Mutex<Vec<ReceivedSpan>>>);

#[async_trait::async_trait]
impl TraceService for Received {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut received = self.0.lock().unwrap();
        for resource_spans in request.into_inner().resource_spans {
            let service = resource_spans
                .resource
                .iter()
                .flat_map(|resource| &resource.attributes)
                .find(|attribute| attribute.key == "service.name")
                .map(|attribute| text(attribute.value.as_ref().and_then(|v| v.value.as_ref())))
                .unwrap_or_default();
            for span in resource_spans
                .scope_spans
                .into_iter()
                .flat_map(|scope| scope.spans)
            {
                received.push(ReceivedSpan {
                    service: service.clone(),
                    trace_id: hex::encode(&span.trace_id),
                    span_id: hex::encode(&span.span_id),
                    parent_span_id: hex::encode(&span.parent_span_id),
                    name: span.name,
                    kind: span.kind,
                    status: span.status.map_or(0, |status| status.code),
                    start: span.start_time_unix_nano,
                    end: span.end_time_unix_nano,
                    links: span
                        .links
                        .iter()
                        .map(|link| (hex::encode(&link.trace_id), hex::encode(&link.span_id)))
                        .collect(),
                    attributes: span
                        .attributes
                        .into_iter()
                        .map(|attribute| {
                            let value = attribute.value.as_ref().and_then(|v| v.value.as_ref());
                            (attribute.key, text(value))
                        })
                        .collect(),
                });
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

fn text(value: Option<&Value>) -> String {
    match value {
        Some(Value::StringValue(text)) => text.clone(),
        Some(Value::BoolValue(flag)) => flag.to_string(),
        Some(Value::IntValue(number)) => number.to_string(),
        Some(Value::DoubleValue(number)) => number.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

/// The receiver, listening on 127.0.0.1 until dropped.
pub struct Collector {
    pub addr: SocketAddr,
    received: Received,
    task: JoinHandle<()>,
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Collector {
    pub async fn start() -> Collector {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the OTLP receiver");
        let addr = listener.local_addr().expect("the receiver's address");
        let received = Received::default();
        let service = TraceServiceServer::new(received.clone());
        let task = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
                .await
                .expect("serve OTLP");
        });
        Collector {
            addr,
            received,
            task,
        }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.received.0.lock().unwrap().clone()
    }

    /// The spans of trace `trace_id`, once at least `count` have arrived
    /// (the gateway's batch processor exports every few seconds).
    pub async fn trace(&self, trace_id: &str, count: usize) -> Vec<ReceivedSpan> {
        eventually(&format!("{count} spans of trace {trace_id}"), || {
            let spans: Vec<ReceivedSpan> = self
                .spans()
                .into_iter()
                .filter(|span| span.trace_id == trace_id)
                .collect();
            std::future::ready((spans.len() >= count).then_some(spans))
        })
        .await
    }
}

impl Collector {
    /// The spans of the trace one of whose spans links to trace
    /// `linked_trace` (a new trace made for a client's `traceparent`), once
    /// at least `count` have arrived.
    pub async fn linking_to(&self, linked_trace: &str, count: usize) -> Vec<ReceivedSpan> {
        let trace_id = eventually(&format!("a trace linked to {linked_trace}"), || {
            let found = self
                .spans()
                .into_iter()
                .find(|span| span.links.iter().any(|(trace, _)| trace == linked_trace))
                .map(|span| span.trace_id);
            std::future::ready(found)
        })
        .await;
        self.trace(&trace_id, count).await
    }
}

/// A `[tracing]` table sending to `addr` at `rate` per million.
pub fn tracing_table(addr: SocketAddr, rate: u32) -> String {
    format!("\n[tracing]\nendpoint = \"{addr}\"\nsampling_rate_per_million = {rate}\n")
}

/// The spans as an indented tree under the span `root_parent` (the
/// client's), siblings in the order they started, each with its kind,
/// duration and attributes: what docs/observability.md shows.
pub fn render_tree(spans: &[ReceivedSpan], root_parent: &str) -> String {
    fn walk(spans: &[ReceivedSpan], parent: &str, depth: usize, out: &mut String) {
        let mut children: Vec<&ReceivedSpan> = spans
            .iter()
            .filter(|span| span.parent_span_id == parent)
            .collect();
        children.sort_by_key(|span| span.start);
        for span in children {
            let kind = match span.kind {
                2 => "server",
                3 => "client",
                _ => "internal",
            };
            let attributes: Vec<String> = span
                .attributes
                .iter()
                .map(|(key, value)| format!("{key}={value}"))
                .collect();
            let micros = span.end.saturating_sub(span.start) / 1000;
            let line = format!(
                "{}{} [{kind}, {micros} µs] {}",
                "  ".repeat(depth),
                span.name,
                attributes.join(" ")
            );
            out.push_str(line.trim_end());
            out.push('\n');
            walk(spans, &span.span_id, depth + 1, out);
        }
    }
    let mut out = String::new();
    walk(spans, root_parent, 0, &mut out);
    out
}
