//! `[[servers]]` and `[[servers.routes]]`: the delegation chain, each
//! server's routes, where they apply and what answers them (an upstream or a
//! static response).

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use http::header::{CONTENT_TYPE, HeaderName};
use http::{HeaderMap, HeaderValue, StatusCode};
use rustls::RootCertStore;
use toml::Spanned;

use super::Name;
use super::bounds;
use super::complete::Completer;
use super::identity::{GatewayCredentials, Identity};
use super::manifest as m;

/// One server of the delegation chain.
#[derive(Debug)]
pub(crate) struct Server {
    pub name: Name,
    pub routes: Vec<Route>,
}

#[derive(Debug)]
pub(crate) struct Route {
    pub matcher: RouteMatch,
    pub handler: RouteHandler,
    pub escaped_slashes: EscapedSlashes,
}

/// What a route does with a path holding an escaped `/` or `\` (`%2F`,
/// `%5C`): Envoy's `path_with_escaped_slashes_action`, per route.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum EscapedSlashes {
    /// 400: the path has no single reading (kube decodes `%2F` into a
    /// separator, other servers keep it as data).
    #[default]
    Reject,
    /// Kept as data inside its segment, judged and forwarded as `%2F`
    /// (Envoy's `KEEP_UNCHANGED`), for upstreams that never decode it into
    /// a separator.
    Keep,
}

/// Where a route applies (kube's director: API roots, exact paths, prefixes).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum RouteMatch {
    /// An API root (`/api`, `/apis`, `/apis/<group>`, `/apis/<group>/<version>`):
    /// the root itself and everything below `<root>/`.
    Api(String),
    /// Exactly this path.
    Exact(String),
    /// Every path that starts with this.
    Prefix(String),
}

#[derive(Debug)]
pub(crate) enum RouteHandler {
    Upstream(Upstream),
    Static(StaticResponse),
}

/// A reverse-proxy target.
#[derive(Debug)]
pub(crate) struct Upstream {
    /// `http://` or `https://`, authority and optional base path.
    pub url: http::Uri,
    /// Roots to verify an `https://` upstream with; the system's web PKI
    /// roots are not used, so an https upstream needs a CA.
    pub ca: Option<Arc<RootCertStore>>,
    /// How long to wait for the upstream's response headers.
    pub timeout: Option<Duration>,
    /// What of the user the upstream is told.
    pub identity: Identity,
    /// The gateway's own credentials towards the upstream.
    pub credentials: GatewayCredentials,
    /// The route's `forward_credentials`: the client's `Authorization` and
    /// the headers its authenticators read reach the upstream.
    pub forward_credentials: bool,
    /// The route's `aggregate`: the upstream is a kube API server whose
    /// discovery and OpenAPI the gateway merges into its own, as kube's
    /// aggregator merges an APIService's.
    pub aggregate: bool,
}

/// A fixed response.
#[derive(Debug, Clone)]
pub(crate) struct StaticResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: bytes::Bytes,
}

impl Completer<'_> {
    pub(super) fn servers(&mut self, servers: Vec<Spanned<m::Server>>) -> Vec<Server> {
        if servers.is_empty() {
            self.problem(None, "servers", "at least one [[servers]] table is needed");
        }
        let mut names = HashSet::new();
        let mut completed = Vec::new();
        for (index, server) in servers.into_iter().enumerate() {
            let key = format!("servers[{index}]");
            let server = server.into_inner();
            let name = self.name(&server.name, &format!("{key}.name"));
            if let Some(name) = &name
                && !names.insert(name.clone())
            {
                self.at(
                    &server.name,
                    &format!("{key}.name"),
                    format!("{:?} names another server too", name.as_str()),
                );
            }
            let routes = self.routes(server.routes, &key);
            if let Some(name) = name {
                completed.push(Server { name, routes });
            }
        }
        completed
    }

    fn routes(&mut self, routes: Vec<Spanned<m::Route>>, server_key: &str) -> Vec<Route> {
        let mut matchers = HashSet::new();
        let mut completed = Vec::new();
        // Where each completed route stands in the manifest.
        let mut places = Vec::new();
        for (index, route) in routes.into_iter().enumerate() {
            let key = format!("{server_key}.routes[{index}]");
            let span = route.span();
            let route = route.into_inner();
            let matcher = self.route_match(&route, &key, span.clone());
            if let Some(matcher) = &matcher
                && !matchers.insert(matcher.clone())
            {
                self.problem(
                    Some(span.clone()),
                    &key,
                    format!(
                        "{} is matched by an earlier route of this server",
                        describe(matcher)
                    ),
                );
            }
            let escaped_slashes = self.escaped_slashes(&route, &key);
            let handler = self.route_handler(route, &key, span.clone());
            if let (Some(matcher), Some(handler)) = (matcher, handler) {
                completed.push(Route {
                    matcher,
                    handler,
                    escaped_slashes,
                });
                places.push((key, span));
            }
        }
        self.hidden_routes(&completed, &places);
        completed
    }

    /// A route whose every path belongs to an `api` route of the same server
    /// is never reached, wherever it stands: the director tries API roots
    /// first.
    fn hidden_routes(&mut self, routes: &[Route], places: &[(String, Range<usize>)]) {
        let roots: Vec<&str> = routes
            .iter()
            .filter_map(|route| match &route.matcher {
                RouteMatch::Api(root) => Some(root.as_str()),
                _ => None,
            })
            .collect();
        for (route, (key, span)) in routes.iter().zip(places) {
            let Some(root) = roots
                .iter()
                .find(|root| route.matcher.hidden_by_api_root(root))
            else {
                continue;
            };
            self.problem(
                Some(span.clone()),
                key,
                format!(
                    "{} is never reached: every path it matches belongs to the route for api {root:?}, which this server tries first",
                    describe(&route.matcher)
                ),
            );
        }
    }

    fn route_match(
        &mut self,
        route: &m::Route,
        key: &str,
        span: Range<usize>,
    ) -> Option<RouteMatch> {
        let given = [&route.api, &route.path, &route.prefix];
        if given.iter().filter(|v| v.is_some()).count() != 1 {
            self.problem(Some(span), key, "needs exactly one of api, path or prefix");
            return None;
        }
        if let Some(api) = &route.api {
            let root = api.get_ref();
            return match validate_api_root(root) {
                Ok(()) => Some(RouteMatch::Api(root.clone())),
                Err(message) => {
                    self.at(api, &format!("{key}.api"), message);
                    None
                }
            };
        }
        let (value, field) = match (&route.path, &route.prefix) {
            (Some(path), _) => (path, "path"),
            (None, Some(prefix)) => (prefix, "prefix"),
            (None, None) => return None,
        };
        let text = value.get_ref();
        if !text.starts_with('/') || text.contains(['?', '#']) {
            self.at(
                value,
                &format!("{key}.{field}"),
                format!("{text:?} must start with / and have no query"),
            );
            return None;
        }
        if let Some(message) = non_canonical(text) {
            self.at(value, &format!("{key}.{field}"), message);
            return None;
        }
        if reserved_path(text) {
            let message = format!(
                "{text:?} is served by the gateway itself (health, metrics, reload and discovery)"
            );
            self.at(value, &format!("{key}.{field}"), message);
            return None;
        }
        Some(match field {
            "path" => RouteMatch::Exact(text.clone()),
            _ => RouteMatch::Prefix(text.clone()),
        })
    }

    fn escaped_slashes(&mut self, route: &m::Route, key: &str) -> EscapedSlashes {
        let Some(value) = &route.escaped_slashes else {
            return EscapedSlashes::default();
        };
        match value.get_ref().as_str() {
            "reject" => EscapedSlashes::Reject,
            "keep" => EscapedSlashes::Keep,
            other => {
                let message = format!("{other:?} must be \"reject\" or \"keep\"");
                self.at(value, &format!("{key}.escaped_slashes"), message);
                EscapedSlashes::default()
            }
        }
    }

    fn route_handler(
        &mut self,
        route: m::Route,
        key: &str,
        span: Range<usize>,
    ) -> Option<RouteHandler> {
        let forward_credentials = route.forward_credentials.as_ref().map(Spanned::get_ref);
        if let (Some(given), Some(_)) = (&route.forward_credentials, &route.static_response) {
            self.at(
                given,
                &format!("{key}.forward_credentials"),
                "only a route with an upstream forwards credentials",
            );
        }
        let aggregate = route.aggregate.as_ref().map(Spanned::get_ref);
        if let (Some(given), Some(_)) = (&route.aggregate, &route.static_response) {
            self.at(
                given,
                &format!("{key}.aggregate"),
                "only a route with an upstream is aggregated",
            );
        }
        match (route.upstream, route.static_response) {
            (Some(upstream), None) => self
                .upstream(upstream, &format!("{key}.upstream"))
                .map(|upstream| Upstream {
                    forward_credentials: forward_credentials.copied().unwrap_or(false),
                    aggregate: aggregate.copied().unwrap_or(false),
                    ..upstream
                })
                .map(RouteHandler::Upstream),
            (None, Some(fixed)) => self
                .static_response(fixed, &format!("{key}.static"))
                .map(RouteHandler::Static),
            _ => {
                self.problem(Some(span), key, "needs exactly one of upstream or static");
                None
            }
        }
    }

    fn upstream(&mut self, upstream: Spanned<toml::Value>, key: &str) -> Option<Upstream> {
        let span = upstream.span();
        let table = match upstream.into_inner() {
            toml::Value::String(url) => m::UpstreamTable::of_url(url),
            toml::Value::Table(table) => match table.try_into::<m::UpstreamTable>() {
                Ok(table) => table,
                Err(error) => {
                    self.problem(Some(span), key, error.message().trim().to_owned());
                    return None;
                }
            },
            _ => {
                self.problem(
                    Some(span),
                    key,
                    "must be a URL string or a table { url, ca, timeout, identity, ... }",
                );
                return None;
            }
        };
        let spanned = |text: String| Spanned::new(span.clone(), text);
        let url = table.url.clone();
        let uri = match url.parse::<http::Uri>() {
            Ok(uri)
                if matches!(uri.scheme_str(), Some("http" | "https"))
                    && uri
                        .authority()
                        .is_some_and(|authority| authority.as_str().contains('@')) =>
            {
                // Not sent (hyper's client drops it too), but shown wherever
                // the URL is: /metrics, /debug/status, `check`. So the
                // problem does not quote it either.
                self.problem(
                    Some(span.clone()),
                    key,
                    "the URL must not carry user info (\"user:password@\" before the host): \
                     the gateway never sends it, and would show it wherever it names the \
                     upstream; its credentials are `client_cert`, `client_key` and \
                     `bearer_token_file`",
                );
                None
            }
            Ok(uri)
                if matches!(uri.scheme_str(), Some("http" | "https"))
                    && uri.authority().is_some() =>
            {
                if uri.query().is_some() {
                    self.problem(
                        Some(span.clone()),
                        key,
                        format!("{url:?} must not have a query"),
                    );
                }
                if let Some(message) = non_canonical(uri.path()) {
                    self.problem(Some(span.clone()), key, format!("{url:?}: {message}"));
                }
                Some(uri)
            }
            _ => {
                self.problem(
                    Some(span.clone()),
                    key,
                    format!("{url:?} is not an http:// or https:// URL"),
                );
                None
            }
        };
        let https = uri
            .as_ref()
            .is_some_and(|uri| uri.scheme_str() == Some("https"));
        let (identity, credentials) = self.identity(&table, https, &span, key);
        let ca = match table.ca {
            Some(file) => Some(Arc::new(self.roots(&spanned(file), &format!("{key}.ca"))?)),
            None => None,
        };
        if let Some(uri) = &uri
            && uri.scheme_str() == Some("https")
            && ca.is_none()
        {
            self.problem(
                Some(span.clone()),
                key,
                "an https upstream needs `ca`, the CA bundle to verify it with",
            );
        }
        let timeout = table.timeout.map(|text| {
            self.duration(
                &Some(spanned(text)),
                &format!("{key}.timeout"),
                Duration::ZERO,
                bounds::UPSTREAM_TIMEOUT,
            )
        });
        Some(Upstream {
            url: uri?,
            ca,
            timeout,
            identity,
            credentials,
            forward_credentials: false,
            aggregate: false,
        })
    }

    fn static_response(&mut self, fixed: Spanned<m::Static>, key: &str) -> Option<StaticResponse> {
        let span = fixed.span();
        let fixed = fixed.into_inner();
        let status = match StatusCode::from_u16(fixed.status.unwrap_or(200)) {
            Ok(status) => status,
            Err(_) => {
                self.problem(
                    Some(span.clone()),
                    &format!("{key}.status"),
                    "must be an HTTP status from 100 to 999",
                );
                StatusCode::OK
            }
        };
        let mut headers = HeaderMap::new();
        let content_type = fixed
            .content_type
            .unwrap_or_else(|| "text/plain; charset=utf-8".to_owned());
        match HeaderValue::from_str(&content_type) {
            Ok(value) => {
                headers.insert(CONTENT_TYPE, value);
            }
            Err(_) => self.problem(
                Some(span.clone()),
                &format!("{key}.content_type"),
                "is not a valid header value",
            ),
        }
        for (name, value) in &fixed.headers {
            match (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                (Ok(name), Ok(value)) => {
                    headers.insert(name, value);
                }
                _ => self.problem(
                    Some(span.clone()),
                    &format!("{key}.headers"),
                    format!("{name:?} = {value:?} is not a valid header"),
                ),
            }
        }
        Some(StaticResponse {
            status,
            headers,
            body: fixed.body.unwrap_or_default().into(),
        })
    }
}

impl RouteMatch {
    /// The root, path or prefix the route matches.
    pub(crate) fn path(&self) -> &str {
        match self {
            RouteMatch::Api(path) | RouteMatch::Exact(path) | RouteMatch::Prefix(path) => path,
        }
    }

    /// True when every path this route matches belongs to the API root
    /// `root`, which the director tries first: the route is never reached.
    fn hidden_by_api_root(&self, root: &str) -> bool {
        match self {
            RouteMatch::Api(_) => false,
            RouteMatch::Exact(path) => api_root_matches(root, path),
            // A prefix's paths all continue it; they all belong to the root
            // when the prefix itself continues `<root>/`. `/apis` takes no
            // path below `/apis/`, so it hides no prefix.
            RouteMatch::Prefix(prefix) => {
                root != "/apis"
                    && prefix
                        .strip_prefix(root)
                        .is_some_and(|rest| rest.starts_with('/'))
            }
        }
    }
}

/// Whether `path` belongs to the API root `root`, kube's rule: the path is
/// the root, or the root followed by `/`; `/apis` takes only itself and
/// `/apis/`, so that a route for all of `/apis` does not hide the groups
/// below (`staging/src/k8s.io/apiserver/pkg/server/handler.go`, the
/// director's `strings.HasPrefix(path, "/apis/")` cases).
pub(crate) fn api_root_matches(root: &str, path: &str) -> bool {
    if root == "/apis" {
        return path == "/apis" || path == "/apis/";
    }
    match path.strip_prefix(root) {
        Some(rest) => rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

/// A route's matcher as the manifest writes it: `path "/version"`.
/// `api "/apis/g/v1"`, `path "/x"`, `prefix "/y/"`: a route as problems
/// and `check`'s notes name it.
pub(crate) fn describe(matcher: &RouteMatch) -> String {
    match matcher {
        RouteMatch::Api(root) => format!("api {root:?}"),
        RouteMatch::Exact(path) => format!("path {path:?}"),
        RouteMatch::Prefix(prefix) => format!("prefix {prefix:?}"),
    }
}

/// The API roots kube's director recognises: `/api`, `/api/<version>`,
/// `/apis`, `/apis/<group>`, `/apis/<group>/<version>`.
fn validate_api_root(root: &str) -> Result<(), String> {
    let segments: Vec<&str> = root.strip_prefix('/').unwrap_or("").split('/').collect();
    let well_formed = segments.iter().all(|s| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
    });
    let shape_ok = matches!(
        segments.as_slice(),
        ["api"] | ["apis"] | ["api", _] | ["apis", _] | ["apis", _, _]
    );
    if root.starts_with('/') && well_formed && shape_ok {
        Ok(())
    } else {
        Err(format!(
            "{root:?} is not an API root: use /api, /api/<version>, /apis, /apis/<group> or /apis/<group>/<version>"
        ))
    }
}

/// Why `path` (a route's, or an upstream's base path) is not in the
/// canonical form requests are matched and forwarded in, if it is not.
fn non_canonical(path: &str) -> Option<String> {
    match crate::request_target::canonicalize(path) {
        Err(error) => Some(format!("{path:?}: {error}")),
        Ok(canonical) if canonical.escaped_slashes => {
            Some(format!("{path:?} holds an escaped \"/\" or \"\\\""))
        }
        Ok(canonical) if canonical.path != path => Some(format!(
            "{path:?} is not a canonical path (requests are matched and forwarded as {:?})",
            canonical.path
        )),
        Ok(_) => None,
    }
}

/// Paths the gateway serves itself; a route may not take them.
fn reserved_path(path: &str) -> bool {
    path == "/metrics"
        || path == "/debug/reload"
        || path.starts_with(super::flow_control::DEBUG_PREFIX)
        || ["/healthz", "/livez", "/readyz"]
            .iter()
            .any(|endpoint| path == *endpoint || path.starts_with(&format!("{endpoint}/")))
}

#[cfg(test)]
mod tests {
    use super::{RouteMatch, api_root_matches};

    #[test]
    fn api_roots_match_as_kube_does() {
        let cases = [
            ("/apis/demo.example.io/v1", "/apis/demo.example.io/v1", true),
            (
                "/apis/demo.example.io/v1",
                "/apis/demo.example.io/v1/widgets",
                true,
            ),
            (
                "/apis/demo.example.io/v1",
                "/apis/demo.example.io/v1beta1",
                false,
            ),
            ("/apis/demo.example.io", "/apis/demo.example.io/v1/x", true),
            ("/apis", "/apis", true),
            ("/apis", "/apis/", true),
            ("/apis", "/apis/apps/v1", false),
            ("/api", "/api/v1/pods", true),
            ("/api", "/apis", false),
            ("/api", "/api", true),
        ];
        for (root, path, expected) in cases {
            assert_eq!(api_root_matches(root, path), expected, "{root} vs {path}");
        }
    }

    #[test]
    fn routes_under_an_api_root_are_hidden_by_it() {
        let exact = |path: &str| RouteMatch::Exact(path.to_owned());
        let prefix = |path: &str| RouteMatch::Prefix(path.to_owned());
        let cases = [
            (exact("/api"), "/api", true),
            (exact("/api/v1/pods"), "/api", true),
            (exact("/apis/"), "/apis", true),
            (exact("/apis/apps"), "/apis", false),
            (exact("/apix"), "/api", false),
            (prefix("/api/"), "/api", true),
            (prefix("/api/v1/"), "/api", true),
            (
                prefix("/apis/demo.example.io/v1/w"),
                "/apis/demo.example.io",
                true,
            ),
            // `/apix` and `/api-docs` are still this prefix's.
            (prefix("/api"), "/api", false),
            (prefix("/apis/"), "/apis", false),
            (prefix("/apis/apps/"), "/apis", false),
            (RouteMatch::Api("/api/v1".to_owned()), "/api", false),
        ];
        for (matcher, root, expected) in cases {
            assert_eq!(
                matcher.hidden_by_api_root(root),
                expected,
                "{matcher:?} under {root}"
            );
        }
    }
}
