//! `wasmgate try`: one request through a manifest's whole chain, in
//! process, with no network. Routes report which server and route the
//! director chose instead of calling upstreams. The report shows what a
//! filter author needs: the request info, each filter's outcome and time,
//! the user, the final answer, and the steps of the chain it went through.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use http::{HeaderName, HeaderValue, Method};
use http_body_util::BodyExt;
use serde::Serialize;
use serde_json::Value;

use crate::body::Body;
use crate::chain::stage::{FilterTrace, TraceEntry};
use crate::context::{ConnectionInfo, RequestContext, RequestReport, UserInfo};
use crate::delegation::RoutedTo;
use crate::request_info::RequestInfo;
use crate::server::Gateway;

/// The request to try.
#[derive(Clone)]
pub struct Trial {
    pub(crate) method: Method,
    /// Path and query (`/apis/g/v1/namespaces/ns/things?watch=1`).
    pub path: String,
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    pub(crate) body: Vec<u8>,
}

/// What one request did in the chain: the request info, each filter's call, the user, the route and the response.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub(crate) request_info: RequestInfo,
    pub(crate) filters: Vec<TraceEntry>,
    pub(crate) user: Option<UserInfo>,
    /// `routed` when the request reached a route, else `answered` (the chain
    /// or the gateway answered itself: a denial, health, 404).
    pub decision: &'static str,
    /// The route the director chose, when it was reached.
    pub route: Option<Value>,
    pub(crate) status: u16,
    pub(crate) body: Value,
    /// The steps of the chain, outermost first, as `chain::build` installed them.
    pub chain: Vec<&'static str>,
}

/// Why a trial could not be run.
#[derive(Debug, thiserror::Error)]
pub enum TrialError {
    /// The path is not a request target.
    #[error("{0:?} is not a valid request path")]
    Path(String),
    /// The response's body could not be read whole.
    #[error("the response body could not be read: {0}")]
    Body(String),
}

/// Runs `trial` through `gateway`'s chain `times` times (at least once) and
/// reports the last: a filter with a decision cache then says whether its
/// answer came from the cache (`"cache": "hit"`) or the filter (`"miss"`).
pub async fn run_repeated(
    gateway: &Gateway,
    trial: Trial,
    times: u8,
) -> Result<Report, TrialError> {
    for _ in 1..times {
        run(gateway, trial.clone()).await?;
    }
    run(gateway, trial).await
}

/// Runs `trial` through `gateway`'s chain and reports.
async fn run(gateway: &Gateway, trial: Trial) -> Result<Report, TrialError> {
    let uri: http::Uri = trial
        .path
        .parse()
        .map_err(|_| TrialError::Path(trial.path.clone()))?;
    // Reported as the chain resolves it: from the canonical path.
    let path = crate::request_target::canonicalize(uri.path()).map_or_else(
        |_| uri.path().to_owned(),
        |canonical| canonical.path.into_owned(),
    );
    let request_info = RequestInfo::resolve(&trial.method, &path, uri.query());
    let mut request = http::Request::new(Body::full(trial.body));
    *request.method_mut() = trial.method;
    *request.uri_mut() = uri;
    for (name, value) in trial.headers {
        request.headers_mut().append(name, value);
    }
    // As a client sends it: an HTTP/1.1 request names its host.
    request
        .headers_mut()
        .entry(http::header::HOST)
        .or_insert(HeaderValue::from_static("localhost"));
    let trace = FilterTrace::default();
    request.extensions_mut().insert(trace.clone());
    let report = RequestReport::default();
    request.extensions_mut().insert(report.clone());
    request.extensions_mut().insert(RequestContext {
        connection: Some(Arc::new(ConnectionInfo::new(
            SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            false,
            None,
        ))),
        ..RequestContext::default()
    });
    let response = gateway.handler().call(request).await;
    let status = response.status().as_u16();
    let routed = response.extensions().get::<RoutedTo>().is_some();
    let user = report.user().cloned();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| TrialError::Body(e.to_string()))?
        .to_bytes();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    let (decision, route, body) = if routed {
        ("routed", Some(body), Value::Null)
    } else {
        ("answered", None, body)
    };
    Ok(Report {
        request_info,
        filters: trace.entries(),
        user,
        decision,
        route,
        status,
        body,
        chain: gateway.steps().to_vec(),
    })
}
