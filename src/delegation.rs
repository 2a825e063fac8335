//! The delegation chain (kube's `aggregator -> core -> extensions ->
//! not-found`): the manifest's servers in order, each one's director handing
//! what it does not serve to the next, and a 404 Status at the end.
//!
//! The first server also carries the gateway's own endpoints: health
//! (`/healthz`, `/livez`, `/readyz`), `/metrics`, `/debug/reload`, the
//! status page (`/debug/ui`, `/debug/status`), the flow-control dumps
//! (`/debug/api_priority_and_fairness/`), `/version`, the self-subject
//! reviews and discovery (`/api`, `/apis`, `/apis/<group>`), which describe
//! every server behind it. `/version` and the reviews stand aside when a
//! route of any server claims their paths. Only the first
//! server is wrapped by the handler chain, so no filter runs twice.

use std::sync::Arc;

use futures_util::future::BoxFuture;

use crate::aggregator::{Refresh, Sources};
use crate::body::{Request, Response};
use crate::config::stages::RequestHeaders;
use crate::config::{AccessLog, Config, RouteHandler, RouteMatch, Server};
use crate::context::{RequestReport, RouteAnswered};
use crate::director::{ChainTable, Director, Routes};
use crate::discovery::Discovery;
use crate::flow_control::Controller;
use crate::handler::{Handler, SharedHandler};
use crate::health::Health;
use crate::metrics::MetricsEndpoint;
use crate::metrics::gateway::RouteLabels;
use crate::openapi::OpenApi;
use crate::reload_trigger::{ReloadEndpoint, ReloadTrigger};
use crate::self_review::SelfReviews;
use crate::static_response::Static;
use crate::status::GatewayError;
use crate::upstream::{UpstreamError, UpstreamProxy};
use crate::version::Version;

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
    refresh: Refresh,
) -> Result<SharedHandler, UpstreamError> {
    let mut next: SharedHandler = Arc::new(NotFound);
    let credential_headers = credential_headers(config);
    // Built back to front: each server's sources go before the later ones'.
    let mut later: Option<Sources> = None;
    for (index, server) in config.servers.iter().enumerate().rev() {
        let report = config.access_log != AccessLog::Off;
        let (mut routes, mut sources) =
            server_routes(index, server, targets, &credential_headers, report)?;
        if let Some(later) = later.take() {
            sources.append(later);
        }
        if index == 0 {
            let builtin = Builtin {
                health,
                reload,
                refresh: if targets == Targets::Live {
                    refresh
                } else {
                    Refresh::Never
                },
            };
            add_builtin_routes(&mut routes, config, &builtin, sources);
            if let Some(controller) = flow_control {
                routes
                    .exact
                    .extend(crate::flow_control::debug::endpoints(controller));
            }
        } else {
            later = Some(sources);
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

/// The routes of server `index`, and what the aggregator learns of them
/// (where each path goes, and the upstreams and API routes it asks what
/// they serve); `report` (the access log is on) has each route report
/// itself to the requests the log writes.
fn server_routes(
    index: usize,
    server: &Server,
    targets: Targets,
    credential_headers: &[http::HeaderName],
    report: bool,
) -> Result<(Routes, Sources), UpstreamError> {
    let mut routes = Routes::default();
    let mut sources = Sources::new(index);
    for route in &server.routes {
        let id = sources.add_route(&route.matcher);
        let mut handler: SharedHandler = match (&route.handler, targets) {
            (_, Targets::Report) => Arc::new(RouteReport::new(server, route)),
            (RouteHandler::Upstream(upstream), Targets::Live) => {
                let labels = RouteLabels::new(server.name.as_str(), &route.matcher, &upstream.url);
                Arc::new(UpstreamProxy::new(upstream, credential_headers, labels)?)
            }
            (RouteHandler::Static(fixed), Targets::Live) => Arc::new(Static(fixed.clone())),
        };
        // The gateway asks its own handlers and the upstreams a route
        // declares kube API servers; any other service is not asked.
        let asked = match &route.handler {
            RouteHandler::Upstream(upstream) if upstream.aggregate => {
                sources.add_upstream(id, &upstream.url.to_string(), &handler, &route.matcher);
                true
            }
            RouteHandler::Upstream(_) => false,
            RouteHandler::Static(_) => true,
        };
        if let RouteMatch::Api(root) = &route.matcher {
            sources.add_root(id, root, asked.then(|| Arc::clone(&handler)));
        }
        if report {
            handler = Arc::new(ReportRoute {
                answered: RouteAnswered {
                    server: Arc::from(server.name.as_str()),
                    route: Arc::from(route.matcher.path()),
                },
                next: handler,
            });
        }
        routes.add(&route.matcher, handler);
    }
    Ok((routes, sources))
}

/// Reports one route as the [`RouteAnswered`] the access log writes, to a
/// request that carries a [`RequestReport`] (one the log has chosen to
/// write), and hands it on: no future of its own, so a request the log
/// does not write pays a look-up.
struct ReportRoute {
    answered: RouteAnswered,
    next: SharedHandler,
}

impl Handler for ReportRoute {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        if let Some(report) = request.extensions().get::<RequestReport>() {
            report.answered_by(&self.answered);
        }
        self.next.call(request)
    }
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

/// What the first server's own endpoints are built from.
struct Builtin<'a> {
    health: &'a Arc<Health>,
    reload: Option<&'a ReloadTrigger>,
    /// Whether the aggregated upstreams are asked what they serve.
    refresh: Refresh,
}

/// Health, metrics, discovery and OpenAPI, on the non-API side of the first
/// server. A user's API route for `/api` or `/apis` is checked first and so
/// takes precedence over discovery (to front a real API server, say); a
/// route that claims `/openapi/v2` or `/openapi/v3` takes OpenAPI.
fn add_builtin_routes(
    routes: &mut Routes,
    config: &Config,
    builtin: &Builtin<'_>,
    mut sources: Sources,
) {
    let Builtin {
        health,
        reload,
        refresh,
    } = *builtin;
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
    for path in crate::status_page::PATHS {
        routes
            .exact
            .push((path.to_owned(), Arc::new(crate::status_page::StatusPage)));
    }
    let claimed = ClaimedPaths::new(config);
    if !crate::version::PATHS
        .iter()
        .any(|path| claimed.contains(path))
    {
        let version: SharedHandler = Arc::new(Version::new());
        for path in crate::version::PATHS {
            routes.exact.push((path.to_owned(), version.clone()));
        }
    }
    for (group, version, resources) in crate::self_review::GROUP_VERSIONS {
        let root = format!("/apis/{group}/{version}");
        let reviews = resources
            .iter()
            .map(|(plural, _)| format!("{root}/{plural}"));
        if claimed.contains(&root) || reviews.clone().any(|path| claimed.contains(&path)) {
            continue;
        }
        let reviews: SharedHandler = Arc::new(SelfReviews);
        let id = sources.add_route(&RouteMatch::Api(root.clone()));
        sources.add_root(id, &root, Some(Arc::clone(&reviews)));
        routes.api.push((root, reviews));
    }
    let aggregated = crate::aggregator::start(sources, refresh);
    let discovery = Arc::new(Discovery::new(
        aggregated.discovery,
        config.listen.address.to_string(),
        Arc::clone(&aggregated.refresh),
    ));
    for path in discovery.paths() {
        let handler: SharedHandler = discovery.clone();
        routes.exact.push((path, handler));
    }
    if !["/openapi/v2", "/openapi/v3"]
        .iter()
        .any(|path| claimed.contains(path))
    {
        let openapi = OpenApi::new(aggregated.openapi, aggregated.refresh);
        routes
            .prefixes
            .push((crate::openapi::PREFIX.to_owned(), Arc::new(openapi)));
    }
}

/// Every path some route of the delegation chain takes: a built-in endpoint
/// that kube's servers behind the gateway would serve themselves stands
/// aside for it.
struct ClaimedPaths(ChainTable<()>);

impl ClaimedPaths {
    fn new(config: &Config) -> Self {
        ClaimedPaths(ChainTable::new(config.servers.iter().map(|server| {
            let mut routes = Routes::default();
            for route in &server.routes {
                routes.add(&route.matcher, ());
            }
            routes
        })))
    }

    fn contains(&self, path: &str) -> bool {
        self.0.route(path).is_some()
    }
}
