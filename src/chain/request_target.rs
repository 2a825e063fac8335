//! The canonical request target, installed before request info: the
//! request's URI is rewritten to its canonical form (`crate::request_target`),
//! so request info, the filters, audit, the director and the upstream proxy
//! all read the same path; what has no canonical form is a 400 Status.

use std::borrow::Cow;

use futures_util::future::BoxFuture;
use http::Uri;
use http::uri::PathAndQuery;

use crate::body::{Request, Response};
use crate::config::{EscapedSlashes, Server};
use crate::director::{ChainTable, Routes};
use crate::handler::{Handler, SharedHandler};
use crate::request_target::{TargetError, canonicalize, check_query};
use crate::status::GatewayError;

pub(crate) struct CanonicalTarget {
    /// Whether the route each path reaches keeps escaped slashes; `None`
    /// when no route does (every escaped slash is refused).
    keeps_escaped_slashes: Option<ChainTable<EscapedSlashes>>,
    pub next: SharedHandler,
}

impl CanonicalTarget {
    pub(crate) fn new(servers: &[Server], next: SharedHandler) -> Self {
        let any_keeps = servers
            .iter()
            .flat_map(|server| &server.routes)
            .any(|route| route.escaped_slashes == EscapedSlashes::Keep);
        let keeps_escaped_slashes = any_keeps.then(|| {
            ChainTable::new(servers.iter().map(|server| {
                let mut routes = Routes::default();
                for route in &server.routes {
                    routes.add(&route.matcher, route.escaped_slashes);
                }
                routes
            }))
        });
        CanonicalTarget {
            keeps_escaped_slashes,
            next,
        }
    }

    /// Whether the route `path` reaches keeps escaped slashes: the first
    /// server with a route for it decides, as the delegation chain does.
    fn keeps_escaped_slashes(&self, path: &str) -> bool {
        self.keeps_escaped_slashes
            .as_ref()
            .and_then(|chain| chain.route(path))
            .is_some_and(|keep| *keep == EscapedSlashes::Keep)
    }

    /// The request's URI in canonical form (`None`: it already is), or why
    /// it has none.
    fn canonical_uri(&self, uri: &Uri) -> Result<Option<Uri>, GatewayError> {
        if let Some(query) = uri.query() {
            check_query(query)?;
        }
        let canonical = canonicalize(uri.path())?;
        if canonical.escaped_slashes && !self.keeps_escaped_slashes(&canonical.path) {
            return Err(TargetError::EscapedSlash.into());
        }
        let path = match canonical.path {
            Cow::Owned(path) => path,
            // An absolute-form target may leave its path out
            // (`http://host?query`): its path is `/`, written out, so that
            // no reader of the URI as a whole (the audit event's
            // `requestURI`, the upstream's join behind its base path) takes
            // it for another, as Go's `URL.RequestURI` writes it.
            Cow::Borrowed(path) if leaves_out_its_path(uri) => path.to_owned(),
            Cow::Borrowed(_) => return Ok(None),
        };
        let path_and_query = match uri.query() {
            Some(query) => format!("{path}?{query}"),
            None => path,
        };
        let mut parts = uri.clone().into_parts();
        parts.path_and_query = Some(PathAndQuery::try_from(path_and_query).map_err(not_a_uri)?);
        Uri::from_parts(parts).map(Some).map_err(not_a_uri)
    }
}

/// Whether `uri` has a query but no path as sent: an absolute-form target
/// such as `http://host?query`, whose `path()` alone reads `/`.
fn leaves_out_its_path(uri: &Uri) -> bool {
    uri.path_and_query()
        .is_some_and(|path_and_query| path_and_query.as_str().starts_with('?'))
}

/// A canonical path is ASCII `pchar`s and escapes, which a URI always holds:
/// failing to build one would be a bug, answered rather than forwarded.
fn not_a_uri<E>(_: E) -> GatewayError {
    GatewayError::internal("the canonical request target is not a URI")
}

impl Handler for CanonicalTarget {
    fn call(&self, mut request: Request) -> BoxFuture<'_, Response> {
        match self.canonical_uri(request.uri()) {
            Ok(None) => self.next.call(request),
            Ok(Some(canonical)) => {
                *request.uri_mut() = canonical;
                self.next.call(request)
            }
            Err(error) => {
                tracing::debug!(uri = %request.uri(), %error, "request target refused");
                Box::pin(async move { error.into_response() })
            }
        }
    }
}
