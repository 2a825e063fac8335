//! Kubernetes-style request attributes ([`RequestInfo`]) derived from a request's
//! method, path and query.
//!
//! # Where this sits in the request flow
//!
//! The request-info filter of the handler chain resolves a [`RequestInfo`] exactly
//! once per request, natively, before any other filter (Wasm or native) runs. It is
//! kept in the request's context (`RequestContext`, in `context.rs`), and every
//! later stage (authentication, authorization, admission, max-in-flight,
//! timeouts, audit, the proxy itself) reads it from there instead of re-parsing
//! the URL. Filters therefore all agree on what
//! a request *is*, and none of them can change that view for the others.
//!
//! # Provenance
//!
//! This is a port of `RequestInfoFactory.NewRequestInfo` from Kubernetes'
//! `staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go` (the version
//! with `verbsWithSelectors` and the `AuthorizeWithSelectors` gate, treated here as
//! enabled, which is its default since Kubernetes 1.32): this module holds the
//! resolver and the [`RequestInfo`] it yields. The parts of Go and apimachinery
//! it leans on were ported as well, as far as they can change the result, each
//! in its own submodule:
//!
//! * `path`: Go's decoding of `URL.Path`, kube's split of it into segments, and
//!   `path.IsValidPathSegmentName` (how a path's segments are read);
//! * `query`: `url.ParseQuery` (Go's query parser: pairs containing `;` or a
//!   malformed `%` escape are dropped, not decoded leniently) and the
//!   `url.Values` to `ListOptions` parameter decoding
//!   (`runtime.Convert_Slice_string_To_bool`: only `0` and a case-insensitive
//!   `false` are false, *anything else* — including an empty value — is true;
//!   `timeoutSeconds` and `limit` must be base-10 int64s);
//! * `fields`: `fields.ParseSelector` and `Selector.RequiresExactMatch("metadata.name")`;
//! * `labels`: `labels.Parse` (lexer, parser and key/value validation), because a
//!   label selector that fails to parse makes kube drop the `metadata.name` shortcut.
//!
//! The resolver decodes the path before it splits it (see `path` for the two
//! inputs Go never lets reach it, and for the one departure from kube: an
//! escaped `/` or `\` is not decoded).

mod fields;
mod labels;
mod path;
mod query;

use std::fmt;

use compact_str::CompactString;
use http::Method;

pub(crate) use labels::{is_dns1123_label, is_dns1123_subdomain};
pub(crate) use path::percent_decode_strict;
use path::{decode_path, is_valid_path_segment_name, split_path};
use query::{ListOptionsError, decode_list_options};
pub(crate) use query::{first_value, go_parse_query, go_query_bool};

/// The API prefixes kube's generic server recognises by default.
pub(crate) const DEFAULT_API_PREFIXES: &[&str] = &["api", "apis"];

/// The default prefixes whose paths carry no API group segment (`/api/v1/...`).
/// Every other API prefix is grouped (`/apis/{group}/{version}/...`).
pub(crate) const DEFAULT_GROUPLESS_API_PREFIXES: &[&str] = &["api"];

/// Leading path segments that set the verb themselves (deprecated kube forms).
const SPECIAL_VERBS: &[&str] = &["proxy", "watch"];

/// Special verbs after which the third part is *not* a subresource.
const SPECIAL_VERBS_NO_SUBRESOURCES: &[&str] = &["proxy"];

/// Names that, right after `namespaces/{name}`, address the namespace itself.
const NAMESPACE_SUBRESOURCES: &[&str] = &["status", "finalize"];

/// Verbs for which kube honours (and records) field and label selectors.
const VERBS_WITH_SELECTORS: &[&str] = &["list", "watch", "deletecollection"];

/// Verbs that make a request long-running (kube-apiserver's configuration).
const LONG_RUNNING_VERBS: &[&str] = &["watch", "proxy"];

/// Subresources that make a resource request long-running.
const LONG_RUNNING_SUBRESOURCES: &[&str] = &["attach", "exec", "proxy", "log", "portforward"];

/// Verbs the max-in-flight filter counts as read-only (non-mutating).
const READ_ONLY_VERBS: &[&str] = &["get", "list", "watch"];

/// What a request is, in Kubernetes terms.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestInfo {
    /// Whether the request addresses an API resource (or subresource).
    pub is_resource_request: bool,
    /// The percent-decoded URL path.
    pub path: CompactString,
    /// The kube verb (`get`, `list`, `watch`, `create`, ...) for resource requests;
    /// the lower-cased HTTP method for non-resource requests.
    pub verb: CompactString,
    /// The API prefix (`api`, `apis`), empty for a non-resource request.
    pub api_prefix: CompactString,
    pub(crate) api_group: CompactString,
    /// The API version (`v1`).
    pub api_version: CompactString,
    /// The namespace, empty for a cluster-scoped request.
    pub namespace: CompactString,
    /// The resource (`pods`), not the kind.
    pub resource: CompactString,
    /// E.g. `status` in `/pods/foo/status`.
    pub subresource: CompactString,
    /// The object name, when the path (or, for list/watch, a `metadata.name=`
    /// field selector) names one.
    pub name: CompactString,
    /// The path segments from the resource on: `{resource}/{name}/{subresource}/...`.
    /// Empty for non-resource requests.
    pub parts: Vec<CompactString>,
    /// The raw `labelSelector` query value; only set for list, watch and
    /// deletecollection requests (not for the deprecated `/watch/` path form).
    pub label_selector: CompactString,
    /// The raw `fieldSelector` query value; same rules as `label_selector`.
    pub field_selector: CompactString,
}

impl RequestInfo {
    /// Resolves request info from method, path and raw query (without '?'), exactly
    /// as kube does with its default prefixes (`api`, `apis`; `api` groupless).
    ///
    /// Never fails: for the one input kube rejects (a special verb with nothing
    /// after it, e.g. `/api/v1/watch`) this returns what kube knew at that point.
    /// Use [`RequestInfoFactory::try_resolve`] to see that case as an error.
    pub fn resolve(method: &Method, path: &str, query: Option<&str>) -> RequestInfo {
        resolve_with(
            &|p| DEFAULT_API_PREFIXES.contains(&p),
            &|p| DEFAULT_GROUPLESS_API_PREFIXES.contains(&p),
            method,
            path,
            query,
        )
        .unwrap_or_else(|partial| *partial)
    }

    /// kube's long-running check (used by the timeout and max-in-flight filters):
    /// verbs watch and proxy, and subresources attach, exec, proxy, log, portforward.
    ///
    /// kube's `BasicLongRunningRequestCheck` also exempts non-resource paths under
    /// `/debug/pprof/`, which it serves itself. A gateway forwards such paths, so
    /// exempting them would let any client hold unbounded requests; they are not.
    pub(crate) fn is_long_running(&self) -> bool {
        LONG_RUNNING_VERBS.contains(&self.verb.as_str())
            || (self.is_resource_request
                && LONG_RUNNING_SUBRESOURCES.contains(&self.subresource.as_str()))
    }

    /// true for get, list, watch (kube's read-only verbs for max-in-flight).
    pub(crate) fn is_read_only(&self) -> bool {
        READ_ONLY_VERBS.contains(&self.verb.as_str())
    }
}

/// True for a request asking to switch protocols: HTTP/1.1's `Connection:
/// Upgrade` with an `Upgrade` header (WebSocket, kubectl's `SPDY/3.1`), or
/// HTTP/2's extended CONNECT for a WebSocket ([`is_websocket_over_h2`]).
pub fn is_upgrade<B>(request: &http::Request<B>) -> bool {
    is_websocket_over_h2(request) || is_http1_upgrade(request)
}

/// RFC 8441: an HTTP/2 `CONNECT` with `:protocol = websocket`, which stands
/// for the `GET` that opens a WebSocket over HTTP/1.1 (request info resolves
/// it as that `GET`).
pub fn is_websocket_over_h2<B>(request: &http::Request<B>) -> bool {
    request.method() == Method::CONNECT
        && request
            .extensions()
            .get::<hyper::ext::Protocol>()
            .is_some_and(|protocol| protocol.as_str().eq_ignore_ascii_case("websocket"))
}

fn is_http1_upgrade<B>(request: &http::Request<B>) -> bool {
    let headers = request.headers();
    request.version() == http::Version::HTTP_11
        && headers.contains_key(http::header::UPGRADE)
        && headers
            .get_all(http::header::CONNECTION)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .any(|token| token.trim().eq_ignore_ascii_case("upgrade"))
}

/// A resolver with configurable API prefixes (kube's `RequestInfoFactory`).
///
/// Prefixes are given without leading or trailing slashes. A prefix that is in
/// `api_prefixes` but not in `groupless_api_prefixes` expects a group segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestInfoFactory {
    api_prefixes: Vec<String>,
    groupless_api_prefixes: Vec<String>,
}

impl Default for RequestInfoFactory {
    fn default() -> Self {
        RequestInfoFactory::new(
            DEFAULT_API_PREFIXES.iter().copied(),
            DEFAULT_GROUPLESS_API_PREFIXES.iter().copied(),
        )
    }
}

impl RequestInfoFactory {
    pub(crate) fn new<I, J, S, T>(api_prefixes: I, groupless_api_prefixes: J) -> Self
    where
        I: IntoIterator<Item = S>,
        J: IntoIterator<Item = T>,
        S: Into<String>,
        T: Into<String>,
    {
        RequestInfoFactory {
            api_prefixes: api_prefixes.into_iter().map(Into::into).collect(),
            groupless_api_prefixes: groupless_api_prefixes.into_iter().map(Into::into).collect(),
        }
    }

    /// Like [`RequestInfo::resolve`], with this factory's prefixes, but
    /// reports kube's one error case (kube's request-info filter answers it
    /// with a 500).
    pub fn try_resolve(
        &self,
        method: &Method,
        path: &str,
        query: Option<&str>,
    ) -> Result<RequestInfo, UnresolvableRequest> {
        resolve_with(
            &|p| self.api_prefixes.iter().any(|x| x == p),
            &|p| self.groupless_api_prefixes.iter().any(|x| x == p),
            method,
            path,
            query,
        )
        .map_err(|partial| UnresolvableRequest { partial })
    }
}

/// Kube's only resolution error: a special verb (`watch`, `proxy`) with no
/// resource after it. Carries what was known before the failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnresolvableRequest {
    /// What kube had resolved before it gave up.
    pub partial: Box<RequestInfo>,
}

impl fmt::Display for UnresolvableRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unable to determine kind and namespace from url, {}",
            self.partial.path
        )
    }
}

impl std::error::Error for UnresolvableRequest {}

/// The port of `NewRequestInfo`. `Err` carries the partial info of kube's error case.
fn resolve_with(
    is_api_prefix: &dyn Fn(&str) -> bool,
    is_groupless: &dyn Fn(&str) -> bool,
    method: &Method,
    raw_path: &str,
    query: Option<&str>,
) -> Result<RequestInfo, Box<RequestInfo>> {
    let path = decode_path(raw_path);

    // Non-resource until shown otherwise. The verb is set once, where the
    // resolution ends: the method's for a non-resource request (and for
    // the one input kube rejects), the resource verb otherwise.
    let mut info = RequestInfo {
        path: CompactString::from(path.as_ref()),
        ..RequestInfo::default()
    };
    let method_verb = |mut info: RequestInfo| {
        info.verb = method.as_str().into();
        info.verb.make_ascii_lowercase();
        info
    };

    let segments = split_path(&path);
    // At least three segments, the first an API prefix.
    let [prefix, rest @ ..] = segments.as_slice() else {
        return Ok(method_verb(info));
    };
    if rest.len() < 2 || !is_api_prefix(prefix) {
        return Ok(method_verb(info));
    }
    info.api_prefix = (*prefix).into();

    let rest = if is_groupless(prefix) {
        rest
    } else {
        // Grouped prefix: needs group, version and at least one more part.
        match rest {
            [group, rest @ ..] if rest.len() >= 2 => {
                info.api_group = (*group).into();
                rest
            }
            _ => return Ok(method_verb(info)),
        }
    };

    info.is_resource_request = true;
    // Two or more parts remain here; the `else` arms cannot be taken.
    let [version, rest @ ..] = rest else {
        return Err(Box::new(method_verb(info)));
    };
    info.api_version = (*version).into();
    let [first, after_first @ ..] = rest else {
        return Err(Box::new(method_verb(info)));
    };

    let special_verb = SPECIAL_VERBS.iter().copied().find(|verb| verb == first);
    let mut rest = rest;
    let mut verb = if let Some(verb) = special_verb {
        if after_first.is_empty() {
            return Err(Box::new(method_verb(info)));
        }
        rest = after_first;
        verb
    } else {
        match method.as_str() {
            "POST" => "create",
            "GET" | "HEAD" => "get",
            "PUT" => "update",
            "PATCH" => "patch",
            "DELETE" => "delete",
            _ => "",
        }
    };
    let verb_via_path = special_verb.is_some();

    // `namespaces/{ns}/{resource}/...`: re-base the parts on the resource, unless
    // the part after the namespace name is a subresource of the namespace itself.
    if let ["namespaces", namespace, tail @ ..] = rest {
        info.namespace = (*namespace).into();
        if let [next, ..] = tail
            && !NAMESPACE_SUBRESOURCES.contains(next)
        {
            rest = tail;
        }
    }

    info.parts = rest.iter().map(|s| (*s).into()).collect();

    // resource / name / subresource / anything-else-uninterpreted
    if let [resource, tail @ ..] = rest {
        info.resource = (*resource).into();
        if let [name, tail @ ..] = tail {
            info.name = (*name).into();
            if let [subresource, ..] = tail
                && !SPECIAL_VERBS_NO_SUBRESOURCES.contains(&verb)
            {
                info.subresource = (*subresource).into();
            }
        }
    }

    let params = query.map(go_parse_query).unwrap_or_default();

    // A get without a name is a collection read: list, or watch when asked.
    if info.name.is_empty() && verb == "get" {
        match decode_list_options(&params) {
            Ok(opts) => {
                verb = if opts.watch { "watch" } else { "list" };
                if let Some(name) = opts.exact_name
                    && is_valid_path_segment_name(&name)
                {
                    info.name = name.into();
                }
            }
            Err(ListOptionsError) => {
                // kube resets the options, keeping only its own reading of `watch`.
                let watch = first_value(&params, "watch").is_some_and(|v| {
                    let v = v.to_ascii_lowercase();
                    v != "false" && v != "0"
                });
                verb = if watch { "watch" } else { "list" };
            }
        }
    }

    if info.name.is_empty() && verb == "delete" {
        verb = "deletecollection";
    }
    info.verb = verb.into();

    // Selectors are recorded raw, only for verbs that honour them, and not for the
    // deprecated verb-in-path form (whose single-object watch ignores them).
    if !verb_via_path && VERBS_WITH_SELECTORS.contains(&verb) {
        if let Some(v) = first_value(&params, "fieldSelector") {
            info.field_selector = v.into();
        }
        if let Some(v) = first_value(&params, "labelSelector") {
            info.label_selector = v.into();
        }
    }

    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::labels::label_selector_is_valid;
    use super::*;

    /// Builds a request the way kube's tests do with `http.NewRequest(method, url)`.
    fn resolve(method: &str, url: &str) -> RequestInfo {
        let method = Method::from_bytes(method.as_bytes()).expect("valid method");
        let (path, query) = split_url(url);
        RequestInfo::resolve(&method, path, query)
    }

    fn split_url(url: &str) -> (&str, Option<&str>) {
        match url.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (url, None),
        }
    }

    fn strings(parts: &[&str]) -> Vec<CompactString> {
        parts.iter().map(|s| (*s).into()).collect()
    }

    /// method, url, verb, api prefix, api group, api version, namespace, resource,
    /// subresource, name, parts.
    type ApiRow = (
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static [&'static str],
    );

    // Rows of kube's TestGetAPIRequestInfo (successCases), in kube's order.
    //
    // kube's table lists "api" as the expected prefix of the three /apis/... rows but
    // never asserts the prefix (nor the group); its code yields "apis", which is what
    // these rows assert. Every other value is kube's.
    #[rustfmt::skip]
    const GET_API_REQUEST_INFO: &[ApiRow] = &[
        // resource paths
        ("GET", "/api/v1/namespaces", "list", "api", "", "v1", "", "namespaces", "", "", &["namespaces"]),
        ("GET", "/api/v1/namespaces/other", "get", "api", "", "v1", "other", "namespaces", "", "other", &["namespaces", "other"]),
        ("GET", "/api/v1/namespaces/other/pods", "list", "api", "", "v1", "other", "pods", "", "", &["pods"]),
        ("GET", "/api/v1/namespaces/other/pods/foo", "get", "api", "", "v1", "other", "pods", "", "foo", &["pods", "foo"]),
        ("HEAD", "/api/v1/namespaces/other/pods/foo", "get", "api", "", "v1", "other", "pods", "", "foo", &["pods", "foo"]),
        ("GET", "/api/v1/pods", "list", "api", "", "v1", "", "pods", "", "", &["pods"]),
        ("HEAD", "/api/v1/pods", "list", "api", "", "v1", "", "pods", "", "", &["pods"]),
        ("GET", "/api/v1/namespaces/other/pods/foo", "get", "api", "", "v1", "other", "pods", "", "foo", &["pods", "foo"]),
        ("GET", "/api/v1/namespaces/other/pods", "list", "api", "", "v1", "other", "pods", "", "", &["pods"]),
        // special verbs
        ("GET", "/api/v1/proxy/namespaces/other/pods/foo", "proxy", "api", "", "v1", "other", "pods", "", "foo", &["pods", "foo"]),
        ("GET", "/api/v1/proxy/namespaces/other/pods/foo/subpath/not/a/subresource", "proxy", "api", "", "v1", "other", "pods", "", "foo", &["pods", "foo", "subpath", "not", "a", "subresource"]),
        ("GET", "/api/v1/watch/pods", "watch", "api", "", "v1", "", "pods", "", "", &["pods"]),
        ("GET", "/api/v1/pods?watch=true", "watch", "api", "", "v1", "", "pods", "", "", &["pods"]),
        ("GET", "/api/v1/pods?watch=false", "list", "api", "", "v1", "", "pods", "", "", &["pods"]),
        ("GET", "/api/v1/watch/namespaces/other/pods", "watch", "api", "", "v1", "other", "pods", "", "", &["pods"]),
        ("GET", "/api/v1/namespaces/other/pods?watch=1", "watch", "api", "", "v1", "other", "pods", "", "", &["pods"]),
        ("GET", "/api/v1/namespaces/other/pods?watch=0", "list", "api", "", "v1", "other", "pods", "", "", &["pods"]),
        // subresource identification
        ("GET", "/api/v1/namespaces/other/pods/foo/status", "get", "api", "", "v1", "other", "pods", "status", "foo", &["pods", "foo", "status"]),
        ("GET", "/api/v1/namespaces/other/pods/foo/proxy/subpath", "get", "api", "", "v1", "other", "pods", "proxy", "foo", &["pods", "foo", "proxy", "subpath"]),
        ("PUT", "/api/v1/namespaces/other/finalize", "update", "api", "", "v1", "other", "namespaces", "finalize", "other", &["namespaces", "other", "finalize"]),
        ("PUT", "/api/v1/namespaces/other/status", "update", "api", "", "v1", "other", "namespaces", "status", "other", &["namespaces", "other", "status"]),
        // verb identification
        ("PATCH", "/api/v1/namespaces/other/pods/foo", "patch", "api", "", "v1", "other", "pods", "", "foo", &["pods", "foo"]),
        ("DELETE", "/api/v1/namespaces/other/pods/foo", "delete", "api", "", "v1", "other", "pods", "", "foo", &["pods", "foo"]),
        ("POST", "/api/v1/namespaces/other/pods", "create", "api", "", "v1", "other", "pods", "", "", &["pods"]),
        // deletecollection verb identification
        ("DELETE", "/api/v1/nodes", "deletecollection", "api", "", "v1", "", "nodes", "", "", &["nodes"]),
        ("DELETE", "/api/v1/namespaces", "deletecollection", "api", "", "v1", "", "namespaces", "", "", &["namespaces"]),
        ("DELETE", "/api/v1/namespaces/other/pods", "deletecollection", "api", "", "v1", "other", "pods", "", "", &["pods"]),
        ("DELETE", "/apis/extensions/v1/namespaces/other/pods", "deletecollection", "apis", "extensions", "v1", "other", "pods", "", "", &["pods"]),
        // api group identification
        ("POST", "/apis/extensions/v1/namespaces/other/pods", "create", "apis", "extensions", "v1", "other", "pods", "", "", &["pods"]),
        // api version identification
        ("POST", "/apis/extensions/v1beta3/namespaces/other/pods", "create", "apis", "extensions", "v1beta3", "other", "pods", "", "", &["pods"]),
    ];

    #[test]
    fn kube_get_api_request_info_success_cases() {
        assert_eq!(GET_API_REQUEST_INFO.len(), 30);
        let factory = RequestInfoFactory::default();
        for row in GET_API_REQUEST_INFO {
            let &(
                method,
                url,
                verb,
                prefix,
                group,
                version,
                namespace,
                resource,
                subresource,
                name,
                parts,
            ) = row;
            let m = Method::from_bytes(method.as_bytes()).expect("valid method");
            let (path, query) = split_url(url);
            let got = factory
                .try_resolve(&m, path, query)
                .unwrap_or_else(|e| panic!("{method} {url}: unexpected error {e}"));
            let expected = RequestInfo {
                is_resource_request: true,
                path: path.into(),
                verb: verb.into(),
                api_prefix: prefix.into(),
                api_group: group.into(),
                api_version: version.into(),
                namespace: namespace.into(),
                resource: resource.into(),
                subresource: subresource.into(),
                name: name.into(),
                parts: strings(parts),
                label_selector: String::new().into(),
                field_selector: String::new().into(),
            };
            assert_eq!(got, expected, "{method} {url}");
        }
    }

    // Rows of kube's TestGetAPIRequestInfo (errorCases, despite the name): all are
    // non-resource requests, and none is an error.
    #[rustfmt::skip]
    const GET_API_REQUEST_INFO_NON_RESOURCE: &[(&str, &str)] = &[
        ("no resource path", "/"),
        ("just apiversion", "/api/version/"),
        ("just prefix, group, version", "/apis/group/version/"),
        ("apiversion with no resource", "/api/version/"),
        ("bad prefix", "/badprefix/version/resource"),
        ("missing api group", "/apis/version/resource"),
    ];

    #[test]
    fn kube_get_api_request_info_error_cases() {
        let factory = RequestInfoFactory::default();
        for &(case, url) in GET_API_REQUEST_INFO_NON_RESOURCE {
            let got = factory
                .try_resolve(&Method::GET, url, None)
                .unwrap_or_else(|e| panic!("{case}: unexpected error {e}"));
            assert!(
                !got.is_resource_request,
                "{case}: expected non-resource request"
            );
            assert_eq!(got.verb, "get", "{case}");
            assert_eq!(got.path, url, "{case}");
            assert!(got.parts.is_empty(), "{case}");
        }
    }

    // Rows of kube's TestGetNonAPIRequestInfo: name, url, expected IsResourceRequest.
    #[rustfmt::skip]
    const GET_NON_API_REQUEST_INFO: &[(&str, &str, bool)] = &[
        ("simple groupless", "/api/version/resource", true),
        ("simple group", "/apis/group/version/resource/name/subresource", true),
        ("more steps", "/api/version/resource/name/subresource", true),
        ("group list", "/apis/batch/v1/job", true),
        ("group get", "/apis/batch/v1/job/foo", true),
        ("group subresource", "/apis/batch/v1/job/foo/scale", true),
        ("bad root", "/not-api/version/resource", false),
        ("group without enough steps", "/apis/extensions/v1beta1", false),
        ("group without enough steps 2", "/apis/extensions/v1beta1/", false),
        ("not enough steps", "/api/version", false),
        ("one step", "/api", false),
        ("zero step", "/", false),
        ("empty", "", false),
    ];

    #[test]
    fn kube_get_non_api_request_info() {
        let factory = RequestInfoFactory::default();
        for &(case, url, expected) in GET_NON_API_REQUEST_INFO {
            let got = factory
                .try_resolve(&Method::GET, url, None)
                .unwrap_or_else(|e| panic!("{case}: unexpected error {e}"));
            assert_eq!(got.is_resource_request, expected, "{case}");
            if !expected {
                assert_eq!(got.verb, "get", "{case}");
                assert_eq!(got.path, url, "{case}");
                assert!(got.parts.is_empty(), "{case}");
            }
        }
    }

    #[test]
    fn non_resource_keeps_kubes_partial_fields() {
        // kube records the prefix before finding a grouped path too short; the
        // rest stays empty.
        let got = resolve("GET", "/apis/extensions/v1beta1");
        assert!(!got.is_resource_request);
        assert_eq!(got.api_prefix, "apis");
        assert_eq!((got.api_group.as_str(), got.api_version.as_str()), ("", ""));
        let got = resolve("HEAD", "/healthz/ready?verbose=1");
        assert_eq!(
            got,
            RequestInfo {
                path: "/healthz/ready".into(),
                verb: "head".into(),
                ..RequestInfo::default()
            }
        );
    }

    /// name, method, url, expected name, verb, field selector, label selector.
    type SelectorRow = (
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
    );

    // Rows of kube's TestSelectorParsing (AuthorizeWithSelectors enabled). The three
    // "invalid selector" rows expect an error in kube's table only as a tolerance;
    // NewRequestInfo returns none for them, and neither does this port.
    #[rustfmt::skip]
    const SELECTOR_PARSING: &[SelectorRow] = &[
        ("no selector", "GET", "/apis/group/version/resource", "", "list", "", ""),
        ("metadata.name selector", "GET", "/apis/group/version/resource?fieldSelector=metadata.name=name1", "name1", "list", "metadata.name=name1", ""),
        ("metadata.name selector with watch", "GET", "/apis/group/version/resource?watch=true&fieldSelector=metadata.name=name1", "name1", "watch", "metadata.name=name1", ""),
        ("random selector", "GET", "/apis/group/version/resource?fieldSelector=foo=bar&labelSelector=baz=qux", "", "list", "foo=bar", "baz=qux"),
        ("invalid selector with metadata.name", "GET", "/apis/group/version/resource?fieldSelector=metadata.name=name1,foo", "", "list", "metadata.name=name1,foo", ""),
        ("invalid selector with metadata.name with watch", "GET", "/apis/group/version/resource?fieldSelector=metadata.name=name1,foo&watch=true", "", "watch", "metadata.name=name1,foo", ""),
        ("invalid selector with metadata.name with watch false", "GET", "/apis/group/version/resource?fieldSelector=metadata.name=name1,foo&watch=false", "", "list", "metadata.name=name1,foo", ""),
        ("selector on deletecollection is honored", "DELETE", "/apis/group/version/resource?fieldSelector=foo=bar&labelSelector=baz=qux", "", "deletecollection", "foo=bar", "baz=qux"),
        ("selector on repeated param matches parsed param", "GET", "/apis/group/version/resource?fieldSelector=metadata.name=foo&fieldSelector=metadata.name=bar&labelSelector=foo=bar&labelSelector=foo=baz", "foo", "list", "metadata.name=foo", "foo=bar"),
        ("selector on other verb is ignored", "GET", "/apis/group/version/resource/name?fieldSelector=foo=bar&labelSelector=foo=bar", "name", "get", "", ""),
        ("selector on deprecated root type watch is not parsed", "GET", "/apis/group/version/watch/resource?fieldSelector=metadata.name=foo&labelSelector=foo=bar", "", "watch", "", ""),
        ("selector on deprecated root item watch is not parsed", "GET", "/apis/group/version/watch/resource/name?fieldSelector=metadata.name=foo&labelSelector=foo=bar", "name", "watch", "", ""),
    ];

    fn check_selector_rows(rows: &[SelectorRow]) {
        let factory = RequestInfoFactory::default();
        for &(case, method, url, name, verb, field_selector, label_selector) in rows {
            let m = Method::from_bytes(method.as_bytes()).expect("valid method");
            let (path, query) = split_url(url);
            let got = factory
                .try_resolve(&m, path, query)
                .unwrap_or_else(|e| panic!("{case}: unexpected error {e}"));
            assert_eq!(got.name, name, "{case}: name");
            assert_eq!(got.verb, verb, "{case}: verb");
            assert_eq!(got.field_selector, field_selector, "{case}: fieldSelector");
            assert_eq!(got.label_selector, label_selector, "{case}: labelSelector");
        }
    }

    #[test]
    fn kube_selector_parsing() {
        assert_eq!(SELECTOR_PARSING.len(), 12);
        check_selector_rows(SELECTOR_PARSING);
    }

    // Not from kube's tests: the apimachinery behaviour behind the selector rows,
    // checked at its edges (query decoding, bool conversion, field selector syntax,
    // and decode failures that drop the metadata.name shortcut).
    #[rustfmt::skip]
    const SELECTOR_EDGES: &[SelectorRow] = &[
        // watch: only "0" and a case-insensitive "false" are false.
        ("watch empty value", "GET", "/api/v1/pods?watch=", "", "watch", "", ""),
        ("watch without =", "GET", "/api/v1/pods?watch", "", "watch", "", ""),
        ("watch=no is true", "GET", "/api/v1/pods?watch=no", "", "watch", "", ""),
        ("watch=FALSE", "GET", "/api/v1/pods?watch=FALSE", "", "list", "", ""),
        ("watch long s folds", "GET", "/api/v1/pods?watch=fal%C5%BFe", "", "list", "", ""),
        ("first watch wins", "GET", "/api/v1/pods?watch=false&watch=true", "", "list", "", ""),
        // Go's ParseQuery drops pairs with ';' or a malformed escape.
        ("semicolon pair dropped", "GET", "/api/v1/pods?watch=true;x=1", "", "list", "", ""),
        ("bad escape pair dropped", "GET", "/api/v1/pods?watch=%zz", "", "list", "", ""),
        ("plus is space", "GET", "/api/v1/pods?labelSelector=a+in+(b)", "", "list", "", "a in (b)"),
        ("encoded selector", "GET", "/api/v1/pods?fieldSelector=metadata.name%3Dfoo", "foo", "list", "metadata.name=foo", ""),
        // field selector syntax
        ("double equals", "GET", "/api/v1/pods?fieldSelector=metadata.name==foo", "foo", "list", "metadata.name==foo", ""),
        ("not equals", "GET", "/api/v1/pods?fieldSelector=metadata.name!=foo", "", "list", "metadata.name!=foo", ""),
        ("sorted terms", "GET", "/api/v1/pods?fieldSelector=metadata.name=b,metadata.name=a", "a", "list", "metadata.name=b,metadata.name=a", ""),
        ("escaped comma", "GET", "/api/v1/pods?fieldSelector=metadata.name=x%5C,y", "x,y", "list", "metadata.name=x\\,y", ""),
        ("bad escape in value", "GET", "/api/v1/pods?fieldSelector=metadata.name=x%5Cy", "", "list", "metadata.name=x\\y", ""),
        ("other term", "GET", "/api/v1/pods?fieldSelector=spec.nodeName=n,metadata.name=p", "p", "list", "spec.nodeName=n,metadata.name=p", ""),
        // names kube refuses as path segments
        ("slash in name", "GET", "/api/v1/pods?fieldSelector=metadata.name=a/b", "", "list", "metadata.name=a/b", ""),
        ("percent in name", "GET", "/api/v1/pods?fieldSelector=metadata.name=a%25b", "", "list", "metadata.name=a%b", ""),
        ("dot-dot name", "GET", "/api/v1/pods?fieldSelector=metadata.name=..", "", "list", "metadata.name=..", ""),
        // other ListOptions fields that fail to decode drop the shortcut
        ("bad label selector", "GET", "/api/v1/pods?fieldSelector=metadata.name=a&labelSelector=!!", "", "list", "metadata.name=a", "!!"),
        ("bad label key", "GET", "/api/v1/pods?fieldSelector=metadata.name=a&labelSelector=-x=y", "", "list", "metadata.name=a", "-x=y"),
        ("good set selector", "GET", "/api/v1/pods?fieldSelector=metadata.name=a&labelSelector=env+in+(prod,,dev),!canary,example.com/tier", "a", "list", "metadata.name=a", "env in (prod,,dev),!canary,example.com/tier"),
        ("gt needs integer", "GET", "/api/v1/pods?fieldSelector=metadata.name=a&labelSelector=x>y", "", "list", "metadata.name=a", "x>y"),
        ("gt integer", "GET", "/api/v1/pods?fieldSelector=metadata.name=a&labelSelector=x>5", "a", "list", "metadata.name=a", "x>5"),
        ("bad limit", "GET", "/api/v1/pods?fieldSelector=metadata.name=a&limit=ten", "", "list", "metadata.name=a", ""),
        ("plus in limit is a space", "GET", "/api/v1/pods?fieldSelector=metadata.name=a&limit=+10", "", "list", "metadata.name=a", ""),
        ("signed limit", "GET", "/api/v1/pods?fieldSelector=metadata.name=a&limit=%2B10", "a", "list", "metadata.name=a", ""),
        ("bad timeout keeps watch", "GET", "/api/v1/pods?fieldSelector=metadata.name=a&timeoutSeconds=x&watch=1", "", "watch", "metadata.name=a", ""),
        // no shortcut for deletecollection; selectors still recorded
        ("deletecollection by name", "DELETE", "/api/v1/pods?fieldSelector=metadata.name=a", "", "deletecollection", "metadata.name=a", ""),
        // selectors are not recorded for other verbs
        ("create ignores selectors", "POST", "/api/v1/pods?fieldSelector=a=b&labelSelector=c", "", "create", "", ""),
    ];

    #[test]
    fn selector_edges() {
        check_selector_rows(SELECTOR_EDGES);
    }

    #[test]
    fn special_verb_without_resource_is_kubes_error_case() {
        let factory = RequestInfoFactory::default();
        for url in ["/api/v1/watch", "/api/v1/proxy/", "/apis/g/v1/watch"] {
            let err = factory
                .try_resolve(&Method::GET, url, Some("watch=true"))
                .expect_err(url);
            assert!(err.to_string().contains(url), "{err}");
            // What kube knew when it gave up.
            assert!(err.partial.is_resource_request, "{url}");
            assert_eq!(err.partial.verb, "get", "{url}");
            assert_eq!(err.partial.api_version, "v1", "{url}");
            assert!(err.partial.parts.is_empty(), "{url}");
            assert_eq!(RequestInfo::resolve(&Method::GET, url, None), *err.partial);
        }
    }

    /// url, is resource, api version, resource, name (on DELETE), parts.
    type OddPathRow = (
        &'static str,
        bool,
        &'static str,
        &'static str,
        &'static str,
        &'static [&'static str],
    );

    #[test]
    fn odd_paths_never_panic() {
        #[rustfmt::skip]
        let rows: &[OddPathRow] = &[
            ("", false, "", "", "", &[]),
            ("/", false, "", "", "", &[]),
            ("//", false, "", "", "", &[]),
            ("///", false, "", "", "", &[]),
            ("/api/", false, "", "", "", &[]),
            ("/apis//", false, "", "", "", &[]),
            ("/apis///", false, "", "", "", &[]),
            ("/api/v1//", false, "", "", "", &[]),
            ("/api//pods", true, "", "pods", "", &["pods"]),
            ("/api/v1/pods/", true, "v1", "pods", "", &["pods"]),
            ("//api//v1//pods//", true, "", "v1", "", &["v1", "", "pods"]),
            ("/api/v1/namespaces/", true, "v1", "namespaces", "", &["namespaces"]),
            ("/api/v1/namespaces//pods", true, "v1", "pods", "", &["pods"]),
            ("/api/v1/../pods", true, "v1", "..", "pods", &["..", "pods"]),
            // An escaped slash stays data in its segment, undecoded (kube would
            // split there; the chain lets one through only to routes that keep it).
            ("/api/v1/namespaces/a%2Fb/pods", true, "v1", "pods", "", &["pods"]),
            ("/api/v1/pods/a%5cb", true, "v1", "pods", "a%5cb", &["pods", "a%5cb"]),
            // Undecodable bytes become U+FFFD; malformed escapes stay literal.
            ("/api/v1/namespaces/%FF/pods", true, "v1", "pods", "", &["pods"]),
            ("/api/v1/pods/%zz", true, "v1", "pods", "%zz", &["pods", "%zz"]),
            ("/api/v1/pods/%", true, "v1", "pods", "%", &["pods", "%"]),
            ("/api/v1/pods/%4", true, "v1", "pods", "%4", &["pods", "%4"]),
            ("/%61pi/v1/pods", true, "v1", "pods", "", &["pods"]),
        ];
        for &(url, resource_request, version, resource, name, parts) in rows {
            for method in [Method::GET, Method::DELETE, Method::OPTIONS] {
                let query = Some("watch=1&fieldSelector=metadata.name=x");
                let got = RequestInfo::resolve(&method, url, query);
                assert_eq!(
                    got.is_resource_request, resource_request,
                    "{method} {url:?}"
                );
                assert_eq!(got.api_version, version, "{method} {url:?}");
                assert_eq!(got.resource, resource, "{method} {url:?}");
                assert_eq!(got.parts, strings(parts), "{method} {url:?}");
                if !resource_request {
                    assert_eq!(got.verb, method.as_str().to_ascii_lowercase(), "{url:?}");
                }
                if method == Method::DELETE {
                    assert_eq!(got.name, name, "{url:?}");
                }
            }
        }
        let got = RequestInfo::resolve(&Method::GET, "/api/v1/namespaces/%FF/pods", None);
        assert_eq!(got.namespace, "\u{FFFD}");
        assert_eq!(got.path, "/api/v1/namespaces/\u{FFFD}/pods");
        let got = RequestInfo::resolve(&Method::GET, "/api/v1/pods/%zz", None);
        assert_eq!(got.path, "/api/v1/pods/%zz");
        // An unknown method has no resource verb; it lower-cases for non-resource paths.
        let brew = Method::from_bytes(b"BREW").expect("valid method");
        assert_eq!(RequestInfo::resolve(&brew, "/api/v1/pods", None).verb, "");
        assert_eq!(RequestInfo::resolve(&brew, "/healthz", None).verb, "brew");
    }

    #[test]
    fn very_many_segments() {
        let mut url = String::from("/api/v1/namespaces/ns/pods/p/log");
        for _ in 0..20_000 {
            url.push_str("/x");
        }
        url.push('/');
        let got = RequestInfo::resolve(&Method::GET, &url, Some(&"a=b&".repeat(10_000)));
        assert!(got.is_resource_request);
        assert_eq!(
            (got.namespace.as_str(), got.resource.as_str()),
            ("ns", "pods")
        );
        assert_eq!((got.name.as_str(), got.subresource.as_str()), ("p", "log"));
        assert_eq!(got.parts.len(), 3 + 20_000);
        assert!(got.is_long_running());

        let slashes = "/".repeat(50_000);
        assert!(!RequestInfo::resolve(&Method::GET, &slashes, None).is_resource_request);
        let selector = format!("a in ({})", "b,".repeat(10_000));
        assert!(label_selector_is_valid(&selector));
        let field = format!("fieldSelector={}", "metadata.name=a,".repeat(10_000));
        let got = RequestInfo::resolve(&Method::GET, "/api/v1/pods", Some(&field));
        assert_eq!((got.verb.as_str(), got.name.as_str()), ("list", "a"));
    }

    #[test]
    fn custom_prefixes() {
        let factory = RequestInfoFactory::new(["api", "apis", "custom"], ["api", "custom"]);
        let got = factory
            .try_resolve(&Method::GET, "/custom/v1/widgets/w", None)
            .expect("a resource path resolves");
        assert!(got.is_resource_request);
        assert_eq!(
            (got.api_prefix.as_str(), got.api_group.as_str()),
            ("custom", "")
        );
        assert_eq!((got.resource.as_str(), got.name.as_str()), ("widgets", "w"));
        let none = RequestInfoFactory::new(Vec::<String>::new(), Vec::<String>::new());
        assert!(
            !none
                .try_resolve(&Method::GET, "/api/v1/pods", None)
                .expect("a path resolves")
                .is_resource_request
        );
        assert_eq!(
            RequestInfoFactory::default()
                .try_resolve(&Method::GET, "/apis/g/v/r", None)
                .expect("a resource path resolves"),
            resolve("GET", "/apis/g/v/r")
        );
    }

    #[test]
    fn long_running_and_read_only() {
        // method, url, long-running, read-only
        #[rustfmt::skip]
        let rows: &[(&str, &str, bool, bool)] = &[
            ("GET", "/api/v1/pods?watch=true", true, true),
            ("GET", "/api/v1/watch/pods", true, true),
            ("GET", "/api/v1/proxy/namespaces/ns/pods/p", true, false),
            ("POST", "/api/v1/namespaces/ns/pods/p/exec", true, false),
            ("GET", "/api/v1/namespaces/ns/pods/p/exec", true, true),
            ("POST", "/api/v1/namespaces/ns/pods/p/attach", true, false),
            ("GET", "/api/v1/namespaces/ns/pods/p/log", true, true),
            ("POST", "/api/v1/namespaces/ns/pods/p/portforward", true, false),
            ("GET", "/api/v1/namespaces/ns/services/s/proxy/x", true, true),
            ("GET", "/api/v1/namespaces/ns/pods/p", false, true),
            ("GET", "/api/v1/pods", false, true),
            ("HEAD", "/api/v1/pods", false, true),
            ("GET", "/api/v1/namespaces/ns/pods/p/status", false, true),
            ("PUT", "/api/v1/namespaces/ns/pods/p/status", false, false),
            ("PATCH", "/api/v1/namespaces/ns/pods/p", false, false),
            ("DELETE", "/api/v1/namespaces/ns/pods", false, false),
            ("POST", "/api/v1/namespaces/ns/pods", false, false),
            // Non-resource: the verb is the method; subresources do not apply.
            ("GET", "/healthz", false, true),
            ("HEAD", "/healthz", false, false),
            ("POST", "/logs/exec", false, false),
            ("GET", "/debug/pprof/profile", false, true),
            ("WATCH", "/", true, true),
        ];
        for &(method, url, long_running, read_only) in rows {
            let got = resolve(method, url);
            assert_eq!(
                got.is_long_running(),
                long_running,
                "{method} {url}: long-running"
            );
            assert_eq!(got.is_read_only(), read_only, "{method} {url}: read-only");
        }
    }

    #[test]
    fn serializes_camel_case() {
        let got = resolve(
            "GET",
            "/apis/apps/v1/namespaces/ns/deployments?labelSelector=a",
        );
        let json = serde_json::to_value(&got).expect("serializable");
        let expected = serde_json::json!({
            "isResourceRequest": true,
            "path": "/apis/apps/v1/namespaces/ns/deployments",
            "verb": "list",
            "apiPrefix": "apis",
            "apiGroup": "apps",
            "apiVersion": "v1",
            "namespace": "ns",
            "resource": "deployments",
            "subresource": "",
            "name": "",
            "parts": ["deployments"],
            "labelSelector": "a",
            "fieldSelector": "",
        });
        assert_eq!(json, expected);
    }
}
