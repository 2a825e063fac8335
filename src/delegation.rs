//! The delegation chain (kube's `aggregator -> core -> extensions ->
//! not-found`): the manifest's servers in order, each one's director handing
//! what it does not serve to the next, and a 404 Status at the end.
//!
//! The first server also carries the gateway's own endpoints: health
//! (`/healthz`, `/livez`, `/readyz`) and discovery (`/api`, `/apis`,
//! `/apis/<group>`), which describe every server behind it. Only the first
//! server is wrapped by the handler chain, so no filter runs twice.

use std::sync::Arc;

use futures_util::future::BoxFuture;

use crate::body::{Request, Response};
use crate::config::{Config, RouteHandler, RouteMatch, Server};
use crate::director::{Director, Routes};
use crate::discovery::Discovery;
use crate::handler::{Handler, SharedHandler};
use crate::health::Health;
use crate::static_response::Static;
use crate::status::GatewayError;
use crate::upstream::{UpstreamError, UpstreamProxy};

/// The end of the chain: kube's not-found handler.
pub struct NotFound;

impl Handler for NotFound {
    fn call(&self, _request: Request) -> BoxFuture<'_, Response> {
        Box::pin(async { GatewayError::NotFound.into_response() })
    }
}

/// Builds the servers back to front, so each director knows its delegate.
pub fn build(config: &Config, health: &Arc<Health>) -> Result<SharedHandler, UpstreamError> {
    let mut next: SharedHandler = Arc::new(NotFound);
    for (index, server) in config.servers.iter().enumerate().rev() {
        let mut routes = server_routes(server)?;
        if index == 0 {
            add_builtin_routes(&mut routes, config, health);
        }
        next = Arc::new(Director::new(routes, next));
    }
    Ok(next)
}

fn server_routes(server: &Server) -> Result<Routes, UpstreamError> {
    let mut routes = Routes::default();
    for route in &server.routes {
        let handler: SharedHandler = match &route.handler {
            RouteHandler::Upstream(upstream) => Arc::new(UpstreamProxy::new(upstream)?),
            RouteHandler::Static(fixed) => Arc::new(Static(fixed.clone())),
        };
        match &route.matcher {
            RouteMatch::Api(root) => routes.api.push((root.clone(), handler)),
            RouteMatch::Exact(path) => routes.exact.push((path.clone(), handler)),
            RouteMatch::Prefix(prefix) => routes.prefixes.push((prefix.clone(), handler)),
        }
    }
    Ok(routes)
}

/// Health and discovery, on the non-API side of the first server. A user's
/// API route for `/api` or `/apis` is checked first and so takes precedence
/// over discovery (to front a real API server, say).
fn add_builtin_routes(routes: &mut Routes, config: &Config, health: &Arc<Health>) {
    for endpoint in ["/healthz", "/livez", "/readyz"] {
        let handler: SharedHandler = health.clone();
        routes.exact.push((endpoint.to_owned(), handler.clone()));
        routes.prefixes.push((format!("{endpoint}/"), handler));
    }
    let discovery = Arc::new(Discovery::new(config));
    for path in discovery.paths() {
        let handler: SharedHandler = discovery.clone();
        routes.exact.push((path, handler));
    }
}
