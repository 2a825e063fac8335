//! The live status page: `/debug/ui` serves a page (HTML, script and style
//! embedded in the binary: no build step) that polls `/debug/status`, a
//! JSON description of the gateway a script can read too: the chain's
//! steps in request order (`crate::chain::Chain::steps`), the timed ones
//! with their p50/p99, each Wasm filter's calls by outcome and p50/p99
//! latency, the servers and routes with each upstream's responses, errors
//! and latency, the reload history with each refused edit's error, flow
//! control's levels and queues, and the fleet's configuration revision when
//! the manifest comes from etcd (and since when its watch is down, if it is). Both are routes of the first server,
//! behind the whole chain: authorized as non-resource URLs like `/metrics`.
//!
//! The numbers are the ones `/metrics` serves, read from its exposition
//! ([`exposition`]), so the page and a Prometheus never disagree; the
//! layout (which steps, filters, servers and routes) is the chain in force,
//! made when a snapshot is built and published when it goes live
//! ([`publish`]).

mod exposition;
mod layout;
mod reloads;

use futures_util::future::BoxFuture;
use http::header::{CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderValue, Method};
use serde_json::{Value, json};

pub(crate) use layout::{Layout, StepTiming, publish};
pub(crate) use reloads::record_reload;

use crate::body::{Body, Request, Response};
use crate::handler::Handler;
use crate::status::GatewayError;

/// The paths the first server serves for the page.
pub(crate) const PATHS: [&str; 4] = [
    "/debug/status",
    "/debug/ui",
    "/debug/ui/app.js",
    "/debug/ui/style.css",
];

/// `/debug/status` and the page's files.
pub(crate) struct StatusPage;

impl Handler for StatusPage {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        let response = if request.method() != Method::GET && request.method() != Method::HEAD {
            GatewayError::MethodNotAllowed.into_response()
        } else {
            match request.uri().path() {
                "/debug/status" => file("application/json", Body::full(status().to_string())),
                "/debug/ui/app.js" => file(
                    "text/javascript; charset=utf-8",
                    Body::full(include_str!("assets/app.js")),
                ),
                "/debug/ui/style.css" => file(
                    "text/css; charset=utf-8",
                    Body::full(include_str!("assets/style.css")),
                ),
                _ => file(
                    "text/html; charset=utf-8",
                    Body::full(include_str!("assets/index.html")),
                ),
            }
        };
        Box::pin(async move { response })
    }
}

fn file(content_type: &'static str, body: Body) -> Response {
    let mut response = http::Response::new(body);
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// What `/debug/status` answers.
pub(crate) fn status() -> Value {
    let samples = exposition::Samples::parse(&crate::metrics::metrics().encode());
    let layout = layout::current();
    json!({
        "generation": layout.as_ref().map(|layout| layout.generation),
        "now_ms": std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX)),
        "requests": samples.sum_by("apiserver_request_total", "code"),
        "chain": layout.as_ref().map(|layout| layout.chain(&samples)).unwrap_or_default(),
        "servers": layout.as_ref().map(|layout| layout.servers(&samples)).unwrap_or_default(),
        "reloads": reloads::history(),
        // Set by the fleet's watch; 0 for a manifest file.
        "config_revision": Some(samples.sum("wasmgate_config_revision", &[]))
            .filter(|revision| *revision > 0.0),
        // Unix seconds since the fleet's watch is down; absent while it watches.
        "config_watch_down_since": Some(samples.sum("wasmgate_config_watch_down_since_timestamp_seconds", &[]))
            .filter(|since| *since > 0.0),
        "flow_control": layout.as_ref().map(|layout| layout.flow_control()).unwrap_or_default(),
    })
}
