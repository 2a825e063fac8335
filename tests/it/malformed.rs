//! Malformed and odd input never panics or hangs the gateway: a bounded set
//! of strange request lines, paths, queries and headers, each on its own raw
//! connection, each answered with a well-formed HTTP response that is not a
//! server error, and the gateway still serving after every one.

use crate::support::*;

fn manifest(upstream: &Upstream) -> String {
    let up = upstream.url();
    plaintext(&format!(
        r#"
[limits]
max_header_bytes = "32KiB"

[cors]
allowed_origins = ['^https://good\.example$']

[[servers]]
name = "fuzz"

[[servers.routes]]
api = "/api/v1"
upstream = "{up}"

[[servers.routes]]
api = "/apis/g.example.io/v1"
upstream = "{up}"

[[servers.routes]]
path = "/static"
static = {{ body = "static" }}

[[servers.routes]]
prefix = "/"
upstream = "{up}"
"#
    ))
}

/// The parts of a response read off the wire.
struct Wire {
    status: u16,
    body: Vec<u8>,
}

/// Checks `raw` is one or more well-formed HTTP/1.x responses and returns
/// the first.
fn parse_response(raw: &[u8], request: &str) -> Wire {
    let text = String::from_utf8_lossy(raw);
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("{request:?}: no header end in {text:?}"));
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    assert!(
        version == "HTTP/1.1" || version == "HTTP/1.0",
        "{request:?}: bad status line {status_line:?}"
    );
    let status: u16 = parts
        .next()
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("{request:?}: {status_line:?}"));
    let mut length = None;
    let mut chunked = false;
    for line in lines {
        let (name, value) = line
            .split_once(':')
            .unwrap_or_else(|| panic!("{request:?}: bad header line {line:?}"));
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .trim()
                    .parse::<usize>()
                    .unwrap_or_else(|_| panic!("{request:?}: {line:?}")),
            );
        }
        if name.eq_ignore_ascii_case("transfer-encoding")
            && value.trim().eq_ignore_ascii_case("chunked")
        {
            chunked = true;
        }
    }
    let rest = &raw[end + 4..];
    let body = match (length, chunked) {
        (Some(length), _) => {
            assert!(
                rest.len() >= length,
                "{request:?}: body shorter than its Content-Length: {text:?}"
            );
            rest[..length].to_vec()
        }
        (None, true) => {
            assert!(
                rest.ends_with(b"0\r\n\r\n"),
                "{request:?}: an unterminated chunked body: {text:?}"
            );
            rest.to_vec()
        }
        (None, false) => rest.to_vec(),
    };
    Wire { status, body }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_requests_get_well_formed_answers_and_the_gateway_goes_on() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&manifest(&upstream)).await;
    let long_path = format!("/apis/g.example.io/v1/{}", "segment/".repeat(2000));
    let long_query = format!("/api/v1/pods?labelSelector={}", "a%3Db,".repeat(2000));
    let requests: Vec<String> = vec![
        "GET //// HTTP/1.1".into(),
        "GET /api/v1/namespaces/%ff HTTP/1.1".into(),
        "GET /api/v1/namespaces/%ff%fe/pods/%c3 HTTP/1.1".into(),
        "GET /api/v1/namespaces/%zz/pods HTTP/1.1".into(),
        "GET /api/v1/namespaces/% HTTP/1.1".into(),
        "GET /api/v1/namespaces/a%2Fb/pods HTTP/1.1".into(),
        format!("GET {long_path} HTTP/1.1"),
        format!("GET {long_query} HTTP/1.1"),
        "GET /apis/../../etc HTTP/1.1".into(),
        "GET /apis/g.example.io/v1/../../../etc/passwd HTTP/1.1".into(),
        "GET /%2e%2e/%2e%2e/etc HTTP/1.1".into(),
        "GET http://example.com/healthz HTTP/1.1".into(),
        "GET http://example.com:99999/x HTTP/1.1".into(),
        "GET https://user:pass@example.com/api/v1/pods HTTP/1.1".into(),
        "OPTIONS * HTTP/1.1".into(),
        "GET * HTTP/1.1".into(),
        "GET /api HTTP/1.1".into(),
        "GET /api/ HTTP/1.1".into(),
        "GET /apis// HTTP/1.1".into(),
        "GET /api/v1/namespaces//pods HTTP/1.1".into(),
        "GET /api/v1/watch HTTP/1.1".into(),
        "GET /api/v1/proxy HTTP/1.1".into(),
        "GET /api/v1/watch/namespaces/a/pods/b/c/d/e/f HTTP/1.1".into(),
        "GET /apis/g.example.io/v1/namespaces/a/widgets/b/status/extra/more HTTP/1.1".into(),
        "DELETE /api/v1/namespaces/default/pods?labelSelector=%zz HTTP/1.1".into(),
        "GET /api/v1/pods?watch=%ff&timeout=%ff HTTP/1.1".into(),
        "GET /api/v1/pods?watch=1&timeout=-5s HTTP/1.1".into(),
        "GET /api/v1/pods?timeout=99999999999999999999h HTTP/1.1".into(),
        "GET /api/v1/pods?fieldSelector=metadata.name%3D&labelSelector=a+in+(b HTTP/1.1".into(),
        "GET /api/v1/pods?;;;&&&=== HTTP/1.1".into(),
        "GET /healthz?exclude=%ff&verbose HTTP/1.1".into(),
        "GET /readyz/../healthz HTTP/1.1".into(),
        "GET /readyz/%2e%2e HTTP/1.1".into(),
        "GET /livez//ping HTTP/1.1".into(),
        "FOO /static HTTP/1.1".into(),
        "PATCH /apis HTTP/1.1".into(),
        "CONNECT example.com:443 HTTP/1.1".into(),
    ];
    let extra_headers = [
        "",
        "Content-Length: abc\r\n",
        "Content-Length: 99999999999999999999999\r\n",
        "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
        "Audit-ID: \u{00e9}t\u{00e9}\r\n",
        "Origin: https://good.example\r\n",
        "Origin: null\r\n",
        "Host: \r\n",
        "X-Forwarded-For: not-an-address, , ,\r\n",
        "Connection: Host, Content-Length, X-Unknown\r\n",
        "Expect: 100-continue\r\n",
    ];
    let mut answered = 0;
    for (index, request_line) in requests.iter().enumerate() {
        // Each request line once plainly, and once with one of the odd headers.
        for extra in ["", extra_headers[index % extra_headers.len()]] {
            let request =
                format!("{request_line}\r\nHost: gateway\r\n{extra}Connection: close\r\n\r\n");
            let raw = answer_of(gateway.addr, request.as_bytes()).await;
            let wire = parse_response(&raw, &request);
            assert!(
                wire.status < 500,
                "{request:?} got a server error {}: {}",
                wire.status,
                String::from_utf8_lossy(&wire.body)
            );
            answered += 1;
            let health = get(&http_client(), &gateway.url("/healthz")).await;
            assert_eq!(
                (health.status, health.body.as_str()),
                (200, "ok"),
                "after {request:?}"
            );
        }
    }
    assert_eq!(answered, requests.len() * 2);

    // Odd bytes in header values and chunked bodies.
    let odd: Vec<Vec<u8>> = vec![
        b"GET /static HTTP/1.1\r\nHost: gateway\r\nAudit-ID: \xff\xfe\r\nConnection: close\r\n\r\n".to_vec(),
        b"GET /static HTTP/1.1\r\nHost: gateway\r\nOrigin: \xff\r\nConnection: close\r\n\r\n".to_vec(),
        b"GET /up HTTP/1.1\r\nHost: gateway\r\nX-Bytes: \x80\x81\r\nConnection: close\r\n\r\n".to_vec(),
        b"POST /up HTTP/1.1\r\nHost: gateway\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\nzz\r\nabc\r\n0\r\n\r\n".to_vec(),
        b"POST /up HTTP/1.1\r\nHost: gateway\r\nTransfer-Encoding: gzip\r\nConnection: close\r\n\r\n".to_vec(),
        b"GET /static HTTP/1.0\r\n\r\n".to_vec(),
        b"GET /static\r\n\r\n".to_vec(),
        b"GET /sta\x00tic HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n".to_vec(),
        b"GET /st\xc3\xa4tic HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n".to_vec(),
    ];
    for request in &odd {
        let shown = String::from_utf8_lossy(request).into_owned();
        let raw = answer_of(gateway.addr, request).await;
        let wire = parse_response(&raw, &shown);
        assert!(
            wire.status < 500,
            "{shown:?} got {}: {}",
            wire.status,
            String::from_utf8_lossy(&wire.body)
        );
        let health = get(&http_client(), &gateway.url("/healthz")).await;
        assert_eq!(health.body, "ok", "after {shown:?}");
    }
    assert_eq!(
        get(&http_client(), &gateway.url("/static")).await.body,
        "static"
    );
}

/// The bytes the gateway answered `request` with, of which there must be
/// some.
async fn answer_of(addr: std::net::SocketAddr, request: &[u8]) -> Vec<u8> {
    let received = raw_exchange_bytes(addr, request).await;
    assert!(
        !received.is_empty(),
        "{:?}: no answer at all",
        String::from_utf8_lossy(request)
    );
    received
}
