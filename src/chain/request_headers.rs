//! The request's own headers, checked once before anything reads them, as
//! Go's `net/http` server checks them before kube's handler chain runs
//! (`net/http/server.go`, `readRequest`): exactly one valid host, or a 400
//! Status (RFC 9112 §3.2); no transfer coding but one final `chunked`, or a
//! 501 (RFC 9112 §6.1), and then no `Content-Length` beside it (§6.3); no
//! header that asks the upstream for another method or path than the
//! request's own, or a 400; and the request's [`ClientOrigin`] (its host, and
//! its addresses as far as `listen.trusted_proxies` lets the gateway believe
//! them), decided here once for the upstream proxy and the audit log alike.
//! An HTTP/2 request's `Cookie` fields, which a client may split (RFC 9113
//! §8.2.3), are joined with `"; "` into one, as Go's HTTP/2 server joins
//! them before kube's handlers see the request (`NewServerRequest` in
//! `vendor/golang.org/x/net/internal/httpcommon/request.go`, called by
//! `newWriterAndRequestNoBody` in `vendor/golang.org/x/net/http2/server.go`):
//! the filters read one, and an HTTP/1.1 upstream gets one.

use futures_util::future::BoxFuture;
use http::header::{CONTENT_LENGTH, COOKIE, HOST, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderValue, Version};

use crate::body::{Request, Response};
use crate::config::TrustedProxies;
use crate::context::{ClientOrigin, RequestContext};
use crate::handler::{Handler, SharedHandler};
use crate::status::GatewayError;

pub(crate) struct RequestHeaders {
    pub trusted_proxies: TrustedProxies,
    pub next: SharedHandler,
}

impl Handler for RequestHeaders {
    fn call(&self, mut request: Request) -> BoxFuture<'_, Response> {
        match self.origin(&request) {
            Ok(origin) => {
                drop_overridden_length(request.headers_mut());
                if request.version() == Version::HTTP_2 {
                    join_cookies(request.headers_mut());
                }
                RequestContext::learn(request.extensions_mut()).origin = Some(origin);
                self.next.call(request)
            }
            Err(error) => Box::pin(std::future::ready(error.into_response())),
        }
    }
}

impl RequestHeaders {
    fn origin(&self, request: &Request) -> Result<ClientOrigin, GatewayError> {
        check_transfer_codings(request.headers())?;
        check_overrides(request.headers())?;
        let host = requested_host(request)?;
        let connection = RequestContext::of(request.extensions())
            .connection
            .as_ref()
            .ok_or_else(|| GatewayError::internal("the request came without its connection"))?;
        let trusted = self.trusted_proxies.contains(connection.remote_addr.ip());
        Ok(ClientOrigin::new(
            connection,
            request.headers(),
            host,
            trusted,
        ))
    }
}

/// The one host the request names. HTTP/1.1 needs exactly one `Host`
/// header; HTTP/2 names its host in `:authority` (or, without one, in a
/// `Host` header). When the request target carries an authority (HTTP/2,
/// or an HTTP/1.1 absolute-form target), a `Host` header that names another
/// host is refused rather than one of the two silently chosen. HTTP/1.0 may
/// name none.
fn requested_host(request: &Request) -> Result<Option<HeaderValue>, GatewayError> {
    let mut hosts = request.headers().get_all(HOST).iter();
    let header = hosts.next();
    if hosts.next().is_some() {
        return Err(bad_host("too many Host headers"));
    }
    let authority = request.uri().authority().map(|a| a.as_str());
    let host = match (authority, header) {
        (Some(authority), Some(header))
            if !header.as_bytes().eq_ignore_ascii_case(authority.as_bytes()) =>
        {
            return Err(bad_host(
                "the Host header disagrees with the request target's authority",
            ));
        }
        (_, None) if request.version() == Version::HTTP_11 => {
            return Err(bad_host("missing required Host header"));
        }
        // The target's authority names the host (RFC 9112 §3.2.2).
        (Some(authority), _) => {
            HeaderValue::from_str(authority).map_err(|_| bad_host("malformed Host header"))?
        }
        (None, Some(header)) => header.clone(),
        (None, None) if request.version() < Version::HTTP_11 => return Ok(None),
        (None, None) => return Err(bad_host("missing required Host header")),
    };
    if !is_valid_host(host.as_bytes()) {
        return Err(bad_host("malformed Host header"));
    }
    Ok(Some(host))
}

/// Several `Cookie` fields made one, joined with `"; "` (RFC 9113
/// §8.2.3).
fn join_cookies(headers: &mut HeaderMap) {
    let mut fields = headers.get_all(COOKIE).iter();
    let Some(first) = fields.next() else {
        return;
    };
    let mut joined = first.as_bytes().to_vec();
    let mut several = false;
    for field in fields {
        several = true;
        joined.extend_from_slice(b"; ");
        joined.extend_from_slice(field.as_bytes());
    }
    // Valid fields joined by "; " are a valid field.
    if several && let Ok(joined) = HeaderValue::from_bytes(&joined) {
        headers.insert(COOKIE, joined);
    }
}

fn bad_host(message: &str) -> GatewayError {
    GatewayError::BadRequest {
        message: message.to_owned(),
    }
}

/// RFC 9110 §7.2's `Host = uri-host [ ":" port ]`, with `uri-host` from RFC
/// 3986 §3.2.2: an IPv6 literal in brackets, or a reg-name (which covers
/// IPv4) of unreserved characters, sub-delims and percent-escapes; the port
/// a number from 0 to 65535. No user info (`@`), no spaces, nothing empty.
fn is_valid_host(host: &[u8]) -> bool {
    let (name, port) = match host.strip_prefix(b"[") {
        Some(bracketed) => match bracketed.iter().position(|&b| b == b']') {
            Some(end) => {
                let literal = &bracketed[..end];
                let is_ipv6 = std::str::from_utf8(literal)
                    .is_ok_and(|text| text.parse::<std::net::Ipv6Addr>().is_ok());
                if !is_ipv6 {
                    return false;
                }
                match &bracketed[end + 1..] {
                    [] => return true,
                    [b':', port @ ..] => (None, Some(port)),
                    _ => return false,
                }
            }
            None => return false,
        },
        None => match host.iter().position(|&b| b == b':') {
            Some(colon) => (Some(&host[..colon]), Some(&host[colon + 1..])),
            None => (Some(host), None),
        },
    };
    name.is_none_or(is_reg_name) && port.is_none_or(is_port)
}

fn is_reg_name(name: &[u8]) -> bool {
    if name.is_empty() {
        return false;
    }
    let mut rest = name;
    while let Some((&byte, tail)) = rest.split_first() {
        rest = match byte {
            b'%' => match tail {
                [high, low, tail @ ..] if high.is_ascii_hexdigit() && low.is_ascii_hexdigit() => {
                    tail
                }
                _ => return false,
            },
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => tail,
            b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'=' => tail,
            _ => return false,
        };
    }
    true
}

fn is_port(port: &[u8]) -> bool {
    (1..=5).contains(&port.len())
        && port.iter().all(u8::is_ascii_digit)
        && std::str::from_utf8(port).is_ok_and(|digits| digits.parse::<u16>().is_ok())
}

/// RFC 9112 §6.1: the gateway implements one transfer coding, `chunked`,
/// applied once and last (hyper has already refused, with a 400, a list
/// whose last coding is not `chunked`). Any other coding (`gzip, chunked`)
/// is a 501: dropping it would hand the upstream a body that is not the one
/// the client sent.
fn check_transfer_codings(headers: &HeaderMap) -> Result<(), GatewayError> {
    let mut chunked = 0;
    let codings = headers
        .get_all(TRANSFER_ENCODING)
        .iter()
        .flat_map(|value| value.as_bytes().split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|coding| !coding.is_empty());
    for coding in codings {
        if !coding.eq_ignore_ascii_case(b"chunked") {
            return Err(GatewayError::NotImplemented {
                message: format!(
                    "the transfer coding {:?} is not implemented: only chunked is",
                    String::from_utf8_lossy(coding)
                ),
            });
        }
        chunked += 1;
    }
    if chunked > 1 {
        return Err(GatewayError::BadRequest {
            message: "the chunked transfer coding is applied more than once".to_owned(),
        });
    }
    Ok(())
}

/// Headers that web frameworks take over the request's own method or path:
/// method overrides (Rack's `Rack::MethodOverride`, Express's
/// `method-override`, Laravel, ASP.NET) and the original-URL headers of
/// IIS's URL rewrite and Symfony. An upstream that honours one would serve
/// another request than the one the chain judged (a `POST` authorized as
/// `create`, deleted as `DELETE`), so a request carrying one is refused:
/// the gateway serves the path and method it judged, or none.
const OVERRIDES: [&str; 5] = [
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
    "x-original-url",
    "x-rewrite-url",
];

fn check_overrides(headers: &HeaderMap) -> Result<(), GatewayError> {
    match OVERRIDES.iter().find(|name| headers.contains_key(**name)) {
        Some(name) => Err(GatewayError::BadRequest {
            message: format!(
                "the {name} header is refused: an upstream that honoured it would serve another method or path than the one judged"
            ),
        }),
        None => Ok(()),
    }
}

/// RFC 9112 §6.3: `Transfer-Encoding` overrides `Content-Length`, and an
/// intermediary removes the `Content-Length` before forwarding (a message
/// with both may be a smuggling attempt). hyper framed the body by its
/// chunks and drops the length itself when it came first; this drops it in
/// the other order too, as Go's `net/http` does in both, so no stage and no
/// upstream ever sees a length that is not the body's.
fn drop_overridden_length(headers: &mut HeaderMap) {
    if headers.contains_key(TRANSFER_ENCODING) {
        headers.remove(CONTENT_LENGTH);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_a_name_or_an_address_and_an_optional_port() {
        for valid in [
            "example.com",
            "example.com:8443",
            "EXAMPLE.com",
            "127.0.0.1",
            "127.0.0.1:0",
            "[::1]",
            "[::1]:443",
            "[fe80::1]:65535",
            "under_score.example",
            "xn--bcher-kva.example",
            "a%2Db",
        ] {
            assert!(is_valid_host(valid.as_bytes()), "{valid:?} is valid");
        }
        for invalid in [
            "",
            "a b",
            "user@example.com",
            "user:pass@example.com",
            "example.com:",
            "example.com:http",
            "example.com:65536",
            "example.com:123456",
            "example.com:80:80",
            ":80",
            "[::1",
            "[::1]x",
            "[not-ipv6]:80",
            "::1",
            "exa\tmple.com",
            "example.com/path",
            "a%2",
            "a%zz",
            "ex\"ample",
        ] {
            assert!(!is_valid_host(invalid.as_bytes()), "{invalid:?} is invalid");
        }
    }

    fn codings(values: &[&str]) -> Result<(), GatewayError> {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(TRANSFER_ENCODING, HeaderValue::from_str(value).unwrap());
        }
        check_transfer_codings(&headers)
    }

    #[test]
    fn only_one_chunked_coding_is_implemented() {
        assert!(codings(&[]).is_ok());
        assert!(codings(&["chunked"]).is_ok());
        assert!(codings(&["Chunked"]).is_ok());
        for unknown in [&["gzip, chunked"][..], &["gzip", "chunked"], &["identity"]] {
            assert!(
                matches!(codings(unknown), Err(GatewayError::NotImplemented { .. })),
                "{unknown:?}"
            );
        }
        assert!(matches!(
            codings(&["chunked, chunked"]),
            Err(GatewayError::BadRequest { .. })
        ));
    }
}
