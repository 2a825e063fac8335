//! The delegation chain (kube's `aggregator -> core -> extensions ->
//! not-found`): the manifest's servers in order, each one's director handing
//! what it does not serve to the next, and a 404 Status at the end.
//!
//! The first server also carries the gateway's own endpoints: health
//! (`/healthz`, `/livez`, `/readyz`), `/metrics`, `/debug/reload`, the
//! flow-control dumps (`/debug/api_priority_and_fairness/`) and discovery
//! (`/api`, `/apis`, `/apis/<group>`), which describe every server behind it. Only the first
//! server is wrapped by the handler chain, so no filter runs twice.

use std::sync::Arc;

use futures_util::future::BoxFuture;

use crate::body::{Request, Response};
use crate::config::stages::RequestHeaders;
use crate::config::{Config, RouteHandler, RouteMatch, Server};
use crate::director::{Director, Routes};
use crate::discovery::Discovery;
use crate::flow_control::Controller;
use crate::handler::{Handler, SharedHandler};
use crate::health::Health;
use crate::metrics::MetricsEndpoint;
use crate::reload_trigger::{ReloadEndpoint, ReloadTrigger};
use crate::static_response::Static;
use crate::status::GatewayError;
use crate::upstream::{UpstreamError, UpstreamProxy};

/// The end of the chain: kube's not-found handler.
pub(crate) struct NotFound;

impl Handler for NotFound {
    fn call(&self, _request: Request) -> BoxFuture<'_, Response> {
        Box::pin(async { GatewayError::NotFound.into_response() })
    }
}

/// What the routes lead to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Targets {
    /// The real handlers: upstreams are proxied, static routes answered.
    Live,
    /// Every route answers with a description of itself instead (`wasmgate
    /// try`: the director's choice, with no network).
    Report,
}

/// Builds the servers back to front, so each director knows its delegate.
pub(crate) fn build(
    config: &Config,
    health: &Arc<Health>,
    reload: Option<&ReloadTrigger>,
    flow_control: Option<&Arc<Controller>>,
    targets: Targets,
) -> Result<SharedHandler, UpstreamError> {
    let mut next: SharedHandler = Arc::new(NotFound);
    let credential_headers = credential_headers(config);
    for (index, server) in config.servers.iter().enumerate().rev() {
        let mut routes = server_routes(server, targets, &credential_headers)?;
        if index == 0 {
            add_builtin_routes(&mut routes, config, health, reload);
            if let Some(controller) = flow_control {
                routes
                    .exact
                    .extend(crate::flow_control::debug::endpoints(controller));
            }
        }
        next = Arc::new(Director::new(routes, next));
    }
    Ok(next)
}

/// Every header an authenticator names in its `headers` list: the client's
/// credentials, which no upstream gets unless its route forwards them.
fn credential_headers(config: &Config) -> Vec<http::HeaderName> {
    let mut names: Vec<http::HeaderName> = Vec::new();
    for filter in &config.stages.authentication.filters {
        if let RequestHeaders::Only(listed) = &filter.headers {
            names.extend(
                listed
                    .iter()
                    .filter(|name| !names.contains(name))
                    .cloned()
                    .collect::<Vec<_>>(),
            );
        }
    }
    names
}

fn server_routes(
    server: &Server,
    targets: Targets,
    credential_headers: &[http::HeaderName],
) -> Result<Routes, UpstreamError> {
    let mut routes = Routes::default();
    for route in &server.routes {
        let handler: SharedHandler = match (&route.handler, targets) {
            (_, Targets::Report) => Arc::new(RouteReport::new(server, route)),
            (RouteHandler::Upstream(upstream), Targets::Live) => {
                Arc::new(UpstreamProxy::new(upstream, credential_headers)?)
            }
            (RouteHandler::Static(fixed), Targets::Live) => Arc::new(Static(fixed.clone())),
        };
        match &route.matcher {
            RouteMatch::Api(root) => routes.api.push((root.clone(), handler)),
            RouteMatch::Exact(path) => routes.exact.push((path.clone(), handler)),
            RouteMatch::Prefix(prefix) => routes.prefixes.push((prefix.clone(), handler)),
        }
    }
    Ok(routes)
}

/// A route that describes itself (200, JSON) instead of serving.
struct RouteReport(bytes::Bytes);

impl RouteReport {
    fn new(server: &Server, route: &crate::config::Route) -> Self {
        let (kind, pattern) = match &route.matcher {
            RouteMatch::Api(root) => ("api", root),
            RouteMatch::Exact(path) => ("path", path),
            RouteMatch::Prefix(prefix) => ("prefix", prefix),
        };
        let target = match &route.handler {
            RouteHandler::Upstream(upstream) => {
                serde_json::json!({"upstream": upstream.url.to_string()})
            }
            RouteHandler::Static(fixed) => serde_json::json!({"static": fixed.status.as_u16()}),
        };
        let report = serde_json::json!({"server": server.name.as_str(), "route": {kind: pattern}, "target": target});
        RouteReport(report.to_string().into())
    }
}

impl Handler for RouteReport {
    fn call(&self, _request: Request) -> BoxFuture<'_, Response> {
        let mut response = http::Response::new(crate::body::Body::full(self.0.clone()));
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        response.extensions_mut().insert(RoutedTo);
        Box::pin(async move { response })
    }
}

/// Marks a response as a [`RouteReport`]'s, so `wasmgate try` can tell the
/// director's choice from an answer the chain wrote itself.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RoutedTo;

/// Health, metrics and discovery, on the non-API side of the first server. A user's
/// API route for `/api` or `/apis` is checked first and so takes precedence
/// over discovery (to front a real API server, say).
fn add_builtin_routes(
    routes: &mut Routes,
    config: &Config,
    health: &Arc<Health>,
    reload: Option<&ReloadTrigger>,
) {
    for endpoint in ["/healthz", "/livez", "/readyz"] {
        let handler: SharedHandler = health.clone();
        routes.exact.push((endpoint.to_owned(), handler.clone()));
        routes.prefixes.push((format!("{endpoint}/"), handler));
    }
    routes
        .exact
        .push(("/metrics".to_owned(), Arc::new(MetricsEndpoint)));
    if let Some(trigger) = reload {
        routes.exact.push((
            "/debug/reload".to_owned(),
            Arc::new(ReloadEndpoint(trigger.clone())),
        ));
    }
    let discovery = Arc::new(Discovery::new(config));
    for path in discovery.paths() {
        let handler: SharedHandler = discovery.clone();
        routes.exact.push((path, handler));
    }
}
