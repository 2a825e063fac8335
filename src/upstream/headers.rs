//! The headers the proxy rewrites. Hop-by-hop headers are dropped both ways
//! (RFC 9110 §7.6.1). On the way to the upstream, the request's identity and
//! origin are the gateway's to state, not the client's:
//!
//! - `X-Remote-*` (kube's request-header authentication) and `Impersonate-*`
//!   headers a client sent never reach the upstream, whatever the chain did
//!   (kube's request-header authenticator and impersonation filter remove
//!   theirs once they have acted on them). [`prepare_request_headers`] is the
//!   one place they are removed, and the place where headers the gateway
//!   sets from the authenticated user would go.
//! - `Proxy` is dropped: no HTTP standard defines it, and a server that
//!   reads headers as CGI variables takes it as `HTTP_PROXY`, the variable
//!   its HTTP client reads its outbound proxy from ("httpoxy": a client
//!   would send the upstream's own outbound calls through a proxy of its
//!   choosing). Go's `net/http/cgi` skips it for that reason.
//! - The forwarding headers follow the request's
//!   [`ClientOrigin`](crate::context::ClientOrigin): from a trusted proxy,
//!   `X-Forwarded-For` is appended to and `Forwarded`, `X-Real-IP` and the
//!   other `X-Forwarded-*` (`-Port`, `-Prefix`, ...) pass; from any other
//!   peer `X-Forwarded-For` is the peer alone and the others are dropped.
//! - `X-Forwarded-Host` is the one checked host, `X-Forwarded-Proto` the
//!   listener's scheme: whatever the client sent under these names is replaced.
//!
//! Names are compared with `_` read as `-` ([`dashed`]): a server that
//! reads headers as CGI variables (Rack, PHP, WSGI) makes `X_Remote_User`
//! and `X-Remote-User` one `HTTP_X_REMOTE_USER`, and the one it reads last
//! wins, so a client could otherwise stand in for a header the gateway owns.

use std::borrow::Cow;

use http::header::{self, HeaderName};
use http::{Extensions, HeaderMap, HeaderValue};

use crate::context::{AUDIT_ID_HEADER, RequestContext};

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// The request's headers as the upstream receives them (`Host` aside, which
/// the transport sets): hop-by-hop and client identity headers removed, the
/// forwarding headers set from the request's origin.
pub(super) fn prepare_request_headers(headers: &mut HeaderMap, extensions: &Extensions) {
    let context = RequestContext::of(extensions);
    let origin = context.origin.as_ref();
    // Without an origin nothing about addresses can be believed.
    let believed = origin.is_some_and(|origin| origin.peer_trusted);
    // Go's `ReverseProxy` (kube's proxy) keeps `TE: trailers`, the one
    // token of `TE` a proxy passes on: a server may send trailers only to a
    // client that takes them.
    let takes_trailers = headers
        .get_all(header::TE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|coding| coding.trim().eq_ignore_ascii_case("trailers"));
    remove_matching(headers, |name| {
        let dashed = dashed(name.as_str());
        // A name spelled with `_` is nobody's to send: a trusted proxy
        // sends the one it means, and `Audit-ID` is the gateway's.
        let underscored = matches!(dashed, Cow::Owned(_));
        is_hop_by_hop(&dashed)
            || dashed == "proxy"
            || is_client_identity(&dashed)
            || ((underscored || !believed) && is_forwarding(&dashed))
            || (underscored && dashed == AUDIT_ID_HEADER.as_str())
    });
    if takes_trailers {
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
    if let Some(origin) = origin {
        headers.insert(X_FORWARDED_FOR, origin.forwarded_for.clone());
    }
    match origin.and_then(|origin| origin.host.clone()) {
        Some(host) => headers.insert(X_FORWARDED_HOST, host),
        None => headers.remove(X_FORWARDED_HOST),
    };
    match &context.connection {
        Some(connection) => {
            let proto = if connection.tls { "https" } else { "http" };
            headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(proto))
        }
        None => headers.remove(X_FORWARDED_PROTO),
    };
}

/// A response's headers as the client receives them: without its hop-by-hop
/// ones, and without a `Content-Length` the upstream sent beside a
/// `Transfer-Encoding`. The transfer coding is what framed the body the
/// gateway read (RFC 9112 §6.3), so such a length is false; once the coding
/// is dropped it would be the only framing left, and the body the client
/// gets would be cut at it (or the client would wait for bytes that never
/// come), the rest lost. A proxy must remove it (§6.3, item 3).
pub(super) fn prepare_response_headers(headers: &mut HeaderMap) {
    if headers.contains_key(header::TRANSFER_ENCODING) {
        headers.remove(header::CONTENT_LENGTH);
    }
    remove_matching(headers, |name| is_hop_by_hop(name.as_str()));
}

/// `name` with every `_` read as `-`, as a server that reads headers as CGI
/// variables tells names apart.
pub(super) fn dashed(name: &str) -> Cow<'_, str> {
    if name.contains('_') {
        Cow::Owned(name.replace('_', "-"))
    } else {
        Cow::Borrowed(name)
    }
}

/// Removes every header whose name, `_` read as `-` ([`dashed`]), `doomed`
/// matches.
pub(super) fn remove_dashed(headers: &mut HeaderMap, doomed: impl Fn(&str) -> bool) {
    let names: Vec<HeaderName> = headers
        .keys()
        .filter(|name| doomed(&dashed(name.as_str())))
        .cloned()
        .collect();
    for name in names {
        headers.remove(name);
    }
}

/// Headers that describe one connection, never forwarded (RFC 9110 §7.6.1),
/// and `Upgrade`, which is not proxied. `Trailer` is not among them (RFC
/// 9110 §6.6.2): it announces the trailer fields that follow the body, and
/// a client is sent them only when announced (Go's `ReverseProxy`
/// announces the upstream's too). Names are lower-case in a `HeaderMap`,
/// and a match on the string is the cheapest test of every name of every
/// message.
fn is_hop_by_hop(name: &str) -> bool {
    matches!(
        name,
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "transfer-encoding"
            | "upgrade"
    )
}

/// The headers in which a proxy tells the next hop where a request came
/// from: `Forwarded`, `X-Real-IP` and every `X-Forwarded-*` (`-For`,
/// `-Host`, `-Proto`, and `-Port`, `-Prefix`, `-Uri`, ... which upstreams
/// build their links and redirects from). Only a trusted proxy's pass.
fn is_forwarding(name: &str) -> bool {
    name == "forwarded" || name == "x-real-ip" || name.starts_with("x-forwarded-")
}

/// kube's request-header names (`X-Remote-User`, `-Uid`, `-Group`,
/// `-Extra-*`) and impersonation names (`Impersonate-User`, `-Uid`,
/// `-Group`, `-Extra-*`), and any other name under the same prefixes: an
/// upstream that trusts one must only ever get it from the gateway.
fn is_client_identity(name: &str) -> bool {
    name.starts_with("x-remote-") || name.starts_with("impersonate-")
}

/// Removes every header `doomed` matches, and those the `Connection` header
/// names (hop-by-hop too), when `doomed` matches any: most messages have
/// nothing to remove and cost one pass over the names. `Audit-ID` stays
/// whatever `Connection` names: the request's is the gateway's own
/// (`chain/audit_id.rs`), the one the audit log records and the upstream
/// must get, and a response's is replaced by it.
fn remove_matching(headers: &mut HeaderMap, doomed: impl Fn(&HeaderName) -> bool) {
    if !headers.keys().any(&doomed) {
        return;
    }
    let named = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .filter(|name| *name != AUDIT_ID_HEADER);
    let names: Vec<HeaderName> = headers
        .keys()
        .filter(|name| doomed(name))
        .cloned()
        .chain(named)
        .collect();
    for name in names {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::*;
    use crate::context::{ClientOrigin, ConnectionInfo};

    fn prepared(peer_trusted: bool, sent: &[(&str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in sent {
            headers.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        let peer: SocketAddr = "10.0.0.9:40000".parse().unwrap();
        let connection = ConnectionInfo::new(peer, true, None);
        let origin = ClientOrigin::new(
            &connection,
            &headers,
            Some(HeaderValue::from_static("api.example:8443")),
            peer_trusted,
        );
        let mut extensions = Extensions::new();
        extensions.insert(RequestContext {
            connection: Some(connection.into()),
            origin: Some(origin),
            ..RequestContext::default()
        });
        prepare_request_headers(&mut headers, &extensions);
        headers
    }

    fn all(headers: &HeaderMap, name: &str) -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect()
    }

    const FORWARDING: [(&str, &str); 8] = [
        ("x-forwarded-for", "1.1.1.1"),
        ("x-forwarded-for", "2.2.2.2, 3.3.3.3"),
        ("forwarded", "for=1.1.1.1;proto=https"),
        ("x-real-ip", "1.1.1.1"),
        ("x-forwarded-host", "evil.example"),
        ("x-forwarded-proto", "gopher"),
        ("x-forwarded-port", "1"),
        ("x-forwarded-prefix", "/admin"),
    ];

    #[test]
    fn an_untrusted_peer_is_the_only_address_and_its_claims_are_dropped() {
        let headers = prepared(false, &FORWARDING);
        assert_eq!(all(&headers, "x-forwarded-for"), ["10.0.0.9"]);
        assert!(all(&headers, "forwarded").is_empty());
        assert!(all(&headers, "x-real-ip").is_empty());
        assert_eq!(all(&headers, "x-forwarded-host"), ["api.example:8443"]);
        assert_eq!(all(&headers, "x-forwarded-proto"), ["https"]);
        assert!(all(&headers, "x-forwarded-port").is_empty());
        assert!(all(&headers, "x-forwarded-prefix").is_empty());
    }

    #[test]
    fn a_trusted_proxy_is_appended_to_and_its_headers_pass() {
        let headers = prepared(true, &FORWARDING);
        assert_eq!(
            all(&headers, "x-forwarded-for"),
            ["1.1.1.1, 2.2.2.2, 3.3.3.3, 10.0.0.9"]
        );
        assert_eq!(all(&headers, "forwarded"), ["for=1.1.1.1;proto=https"]);
        assert_eq!(all(&headers, "x-real-ip"), ["1.1.1.1"]);
        // Host and scheme are what the gateway itself saw.
        assert_eq!(all(&headers, "x-forwarded-host"), ["api.example:8443"]);
        assert_eq!(all(&headers, "x-forwarded-proto"), ["https"]);
        assert_eq!(all(&headers, "x-forwarded-port"), ["1"]);
        assert_eq!(all(&headers, "x-forwarded-prefix"), ["/admin"]);
    }

    #[test]
    fn a_response_length_beside_a_transfer_coding_is_dropped_with_it() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("3"));
        headers.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        prepare_response_headers(&mut headers);
        let names: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["content-type"]);
        // A length alone is the body's framing, and stays.
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("3"));
        prepare_response_headers(&mut headers);
        assert_eq!(all(&headers, "content-length"), ["3"]);
    }

    #[test]
    fn client_identity_headers_never_pass() {
        for trusted in [false, true] {
            let headers = prepared(
                trusted,
                &[
                    ("x-remote-user", "admin"),
                    ("x-remote-uid", "0"),
                    ("x-remote-group", "system:masters"),
                    ("x-remote-extra-scopes", "all"),
                    ("impersonate-user", "admin"),
                    ("impersonate-uid", "0"),
                    ("impersonate-group", "system:masters"),
                    ("impersonate-extra-scopes", "all"),
                    ("x-remotely", "kept"),
                ],
            );
            let names: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
            assert!(
                !names
                    .iter()
                    .any(|n| n.starts_with("x-remote-") || n.starts_with("impersonate-")),
                "{names:?}"
            );
            assert_eq!(all(&headers, "x-remotely"), ["kept"]);
        }
    }
}
