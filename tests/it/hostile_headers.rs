//! The header half of the hostile-input suite: requests written byte for
//! byte on raw sockets (HTTP/1.1) or built frame by frame with hyper's own
//! HTTP/2 connection (h2c), each answer checked, and what reached the echoing
//! upstream checked too: refused requests never reach it, and forwarded ones
//! carry only the headers the gateway vouches for.
//!
//! Host (missing, repeated, invalid, disagreeing with `:authority`);
//! forwarding headers from untrusted and trusted peers, and the audit
//! event's `sourceIPs` that follows the same trust; client identity headers;
//! `Proxy`; `Audit-ID`; method and path override headers; transfer codings and
//! request smuggling (`Content-Length` with `Transfer-Encoding`, duplicated
//! `Content-Length`); obs-fold; bare LF; oversized headers; `nosniff` on
//! every answer.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use serde_json::{Value, json};

use crate::support::*;

/// A plaintext gateway sending everything to `upstream`, with `listen`
/// lines added to `[listen]` and `rest` after it.
fn manifest(upstream: &Upstream, listen: &str, rest: &str) -> String {
    plaintext(&format!(
        "{listen}\n{rest}\n[[servers]]\nname = \"hostile\"\n\n\
         [[servers.routes]]\npath = \"/static\"\nstatic = {{ body = \"static\" }}\n\n\
         [[servers.routes]]\nprefix = \"/up/\"\nupstream = \"{}\"\n",
        upstream.url()
    ))
}

async fn gateway(upstream: &Upstream) -> TestGateway {
    TestGateway::start(&manifest(upstream, "", "")).await
}

// ---------------------------------------------------------------------------
// HTTP/1.1 on a raw socket
// ---------------------------------------------------------------------------

/// One response as read off the wire.
#[derive(Debug)]
struct Wire {
    status: u16,
    headers: BTreeMap<String, Vec<String>>,
    body: String,
    /// Everything the server sent, for messages.
    raw: String,
}

impl Wire {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(name)
            .and_then(|values| values.first())
            .map(String::as_str)
    }

    /// The upstream's echo of the request it received.
    fn echo(&self) -> Value {
        assert_eq!(self.status, 200, "{}", self.raw);
        serde_json::from_str(&self.body)
            .unwrap_or_else(|error| panic!("not the upstream's echo ({error}): {}", self.raw))
    }

    /// Asserts a kube Status with `code` and returns its message.
    fn status_message(&self, code: u16) -> String {
        assert_eq!(self.status, code, "{}", self.raw);
        let status: Value = serde_json::from_str(&self.body)
            .unwrap_or_else(|error| panic!("not a Status ({error}): {}", self.raw));
        assert_eq!(status["kind"], "Status", "{}", self.raw);
        assert_eq!(status["code"], code, "{}", self.raw);
        assert_eq!(self.header("x-content-type-options"), Some("nosniff"));
        status["message"].as_str().unwrap_or_default().to_owned()
    }
}

/// Sends `request` (bytes exactly as given) on a new connection and reads
/// the first response; the server closes the connection after it (the
/// requests say `Connection: close`, or are refused).
async fn raw(addr: SocketAddr, request: &[u8]) -> Wire {
    let text = raw_exchange(addr, request).await;
    parse(&text)
}

fn parse(text: &str) -> Wire {
    let Some((head, rest)) = text.split_once("\r\n\r\n") else {
        panic!("no complete response: {text:?}");
    };
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text:?}"));
    let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in lines {
        let (name, value) = line.split_once(':').expect("a header line");
        headers
            .entry(name.to_ascii_lowercase())
            .or_default()
            .push(value.trim().to_owned());
    }
    let body = match headers.get("content-length").and_then(|v| v.first()) {
        Some(length) => {
            let length: usize = length.parse().expect("a length");
            rest.get(..length).unwrap_or(rest).to_owned()
        }
        None => rest.to_owned(),
    };
    Wire {
        status,
        headers,
        body,
        raw: text.to_owned(),
    }
}

/// A GET with `headers` (each a whole line without its CRLF), closing after.
fn get_with(path: &str, headers: &[&str]) -> Vec<u8> {
    let mut request = format!("GET {path} HTTP/1.1\r\n");
    for line in headers {
        request.push_str(line);
        request.push_str("\r\n");
    }
    request.push_str("Connection: close\r\n\r\n");
    request.into_bytes()
}

// ---------------------------------------------------------------------------
// HTTP/2 (h2c, prior knowledge), through hyper's client connection
// ---------------------------------------------------------------------------

/// Sends `request` on a new h2c connection; returns the status, headers and
/// body.
async fn h2(
    addr: SocketAddr,
    request: http::Request<Empty<Bytes>>,
) -> (u16, http::HeaderMap, String) {
    let (mut sender, connection) = h2c_handshake(addr).await;
    tokio::spawn(connection);
    let response = bounded("an h2 response", sender.send_request(request))
        .await
        .expect("an h2 response");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = bounded("an h2 body", response.into_body().collect())
        .await
        .expect("an h2 body")
        .to_bytes();
    (status, headers, String::from_utf8_lossy(&body).into_owned())
}

fn h2_request(uri: &str) -> http::request::Builder {
    http::Request::builder()
        .version(http::Version::HTTP_2)
        .uri(uri)
}

fn h2_echo(answer: &(u16, http::HeaderMap, String)) -> Value {
    assert_eq!(answer.0, 200, "{}", answer.2);
    serde_json::from_str(&answer.2).expect("the upstream's echo")
}

fn h2_status_message(answer: &(u16, http::HeaderMap, String), code: u16) -> String {
    assert_eq!(answer.0, code, "{}", answer.2);
    assert_eq!(
        answer.1.get("x-content-type-options").map(|v| v.as_bytes()),
        Some(&b"nosniff"[..])
    );
    let status: Value = serde_json::from_str(&answer.2).expect("a Status");
    assert_eq!(status["kind"], "Status");
    status["message"].as_str().unwrap_or_default().to_owned()
}

// ---------------------------------------------------------------------------
// Host
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_repeated_or_invalid_host_is_a_400_over_http1() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&upstream).await;
    let cases: [(&[&str], &str); 10] = [
        (&[], "missing required Host header"),
        (
            &["Host: gw.example", "Host: evil.example"],
            "too many Host headers",
        ),
        (
            &["Host: gw.example", "Host: gw.example"],
            "too many Host headers",
        ),
        (&["Host: a b"], "malformed Host header"),
        (&["Host: gw.example:99999"], "malformed Host header"),
        (&["Host: gw.example:https"], "malformed Host header"),
        (&["Host: user@gw.example"], "malformed Host header"),
        (&["Host: gw.example/other"], "malformed Host header"),
        (&["Host:"], "malformed Host header"),
        (&["Host: [::1"], "malformed Host header"),
    ];
    for (headers, message) in cases {
        let answer = raw(gateway.addr, &get_with("/up/host", headers)).await;
        assert_eq!(answer.status_message(400), message, "{headers:?}");
    }
    // An absolute-form target names the host too: a Host header that names
    // another one is refused, not overruled.
    let answer = raw(
        gateway.addr,
        &get_with("http://gw.example/up/host", &["Host: evil.example"]),
    )
    .await;
    assert_eq!(
        answer.status_message(400),
        "the Host header disagrees with the request target's authority"
    );
    assert_eq!(
        upstream.hits(),
        0,
        "no refused request reached the upstream"
    );

    // One valid host is served and is the X-Forwarded-Host, exactly once.
    for host in ["gw.example:8443", "127.0.0.1", "[::1]:8443"] {
        let answer = raw(
            gateway.addr,
            &get_with("/up/host", &[&format!("Host: {host}")]),
        )
        .await;
        let echo = answer.echo();
        assert_eq!(echoed_values(&echo, "x-forwarded-host"), [host]);
        assert_eq!(echoed_values(&echo, "host"), [upstream.addr.to_string()]);
    }
    // HTTP/1.0 needs no Host, and then no X-Forwarded-Host is made up (nor
    // one the client sent believed).
    let answer = raw(
        gateway.addr,
        b"GET /up/old HTTP/1.0\r\nX-Forwarded-Host: evil.example\r\n\r\n",
    )
    .await;
    let echo = answer.echo();
    assert!(
        echoed_values(&echo, "x-forwarded-host").is_empty(),
        "{echo}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_is_the_authority_over_http2_and_a_disagreeing_host_is_a_400() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&upstream).await;
    let base = format!("http://gw.example:{}", gateway.addr.port());

    let refused = [
        (
            h2_request(&format!("{base}/up/h2"))
                .header("host", "evil.example")
                .body(Empty::new()),
            "the Host header disagrees with the request target's authority",
        ),
        (
            h2_request(&format!("{base}/up/h2"))
                .header("host", format!("gw.example:{}", gateway.addr.port()))
                .header("host", "evil.example")
                .body(Empty::new()),
            "too many Host headers",
        ),
    ];
    // (A request with no :authority cannot be sent here: hyper's client
    // refuses to. The missing and malformed cases are the HTTP/1.1 test's.)
    for (request, message) in refused {
        let request = request.expect("a request");
        let answer = h2(gateway.addr, request).await;
        assert_eq!(h2_status_message(&answer, 400), message);
    }
    assert_eq!(
        upstream.hits(),
        0,
        "no refused request reached the upstream"
    );

    // :authority alone, or with a Host that agrees: that host is forwarded.
    let authority = format!("gw.example:{}", gateway.addr.port());
    for request in [
        h2_request(&format!("{base}/up/h2")).body(Empty::new()),
        h2_request(&format!("{base}/up/h2"))
            .header("host", authority.to_uppercase())
            .body(Empty::new()),
    ] {
        let echo = h2_echo(&h2(gateway.addr, request.expect("a request")).await);
        assert_eq!(
            echoed_values(&echo, "x-forwarded-host"),
            [authority.as_str()]
        );
    }
}

// ---------------------------------------------------------------------------
// Forwarding headers and trusted proxies
// ---------------------------------------------------------------------------

const CLAIMS: [&str; 9] = [
    "Host: gw.example",
    "X-Forwarded-For: 1.1.1.1",
    "X-Forwarded-For: 2.2.2.2, 3.3.3.3",
    "Forwarded: for=1.1.1.1;proto=https",
    "X-Real-IP: 4.4.4.4",
    "X-Forwarded-Host: evil.example",
    "X-Forwarded-Proto: https",
    "X-Forwarded-Port: 8443",
    "X-Forwarded-Prefix: /admin",
];

/// The forwarding headers the gateway does not set itself: a trusted
/// proxy's pass, anyone else's are dropped.
const OTHER_FORWARDING: [(&str, &str); 2] = [
    ("x-forwarded-port", "8443"),
    ("x-forwarded-prefix", "/admin"),
];

fn assert_not_believed(echo: &Value) {
    assert_eq!(
        echoed_values(echo, "x-forwarded-for"),
        ["127.0.0.1"],
        "{echo}"
    );
    assert!(echoed_values(echo, "forwarded").is_empty(), "{echo}");
    assert!(echoed_values(echo, "x-real-ip").is_empty(), "{echo}");
    assert_eq!(
        echoed_values(echo, "x-forwarded-host"),
        ["gw.example"],
        "{echo}"
    );
    assert_eq!(echoed_values(echo, "x-forwarded-proto"), ["http"], "{echo}");
    for (name, _) in OTHER_FORWARDING {
        assert!(echoed_values(echo, name).is_empty(), "{name}: {echo}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_headers_from_an_untrusted_peer_are_not_believed() {
    let upstream = Upstream::start().await;
    // No trusted proxies at all, then a list the peer is not in.
    for listen in ["", "trusted_proxies = [\"10.0.0.0/8\", \"::1\"]"] {
        let gateway = TestGateway::start(&manifest(&upstream, listen, "")).await;
        let answer = raw(gateway.addr, &get_with("/up/xff", &CLAIMS)).await;
        assert_not_believed(&answer.echo());

        let mut request = h2_request(&format!("http://gw.example:{}/up/xff", gateway.addr.port()));
        for line in &CLAIMS[1..] {
            let (name, value) = line.split_once(": ").expect("a header line");
            request = request.header(name, value);
        }
        let request = request.body(Empty::new()).expect("a request");
        let echo = h2_echo(&h2(gateway.addr, request).await);
        assert_eq!(
            echoed_values(&echo, "x-forwarded-for"),
            ["127.0.0.1"],
            "{echo}"
        );
        assert!(echoed_values(&echo, "forwarded").is_empty(), "{echo}");
        assert!(echoed_values(&echo, "x-real-ip").is_empty(), "{echo}");
        assert_eq!(
            echoed_values(&echo, "x-forwarded-host"),
            [format!("gw.example:{}", gateway.addr.port())]
        );
        for (name, _) in OTHER_FORWARDING {
            assert!(echoed_values(&echo, name).is_empty(), "{name}: {echo}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_headers_from_a_trusted_proxy_are_appended_to_and_passed() {
    let upstream = Upstream::start().await;
    for listen in [
        "trusted_proxies = [\"127.0.0.0/8\"]",
        "trusted_proxies = [\"10.0.0.0/8\", \"127.0.0.1\"]",
    ] {
        let gateway = TestGateway::start(&manifest(&upstream, listen, "")).await;
        let echo = raw(gateway.addr, &get_with("/up/xff", &CLAIMS))
            .await
            .echo();
        assert_eq!(
            echoed_values(&echo, "x-forwarded-for"),
            ["1.1.1.1, 2.2.2.2, 3.3.3.3, 127.0.0.1"],
            "{echo}"
        );
        assert_eq!(
            echoed_values(&echo, "forwarded"),
            ["for=1.1.1.1;proto=https"]
        );
        assert_eq!(echoed_values(&echo, "x-real-ip"), ["4.4.4.4"]);
        // Host and scheme are what the gateway itself saw.
        assert_eq!(echoed_values(&echo, "x-forwarded-host"), ["gw.example"]);
        assert_eq!(echoed_values(&echo, "x-forwarded-proto"), ["http"]);
        for (name, value) in OTHER_FORWARDING {
            assert_eq!(echoed_values(&echo, name), [value], "{echo}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_proxy_list_is_checked() {
    let upstream = Upstream::start().await;
    let dir = new_dir();
    let path = dir.path().join("gateway.toml");
    let text = manifest(
        &upstream,
        "trusted_proxies = [\"10.0.0.0/8\", \"10.0.0.0/33\", \"proxy.example\"]",
        "",
    );
    let error = wasmgate::config::parse(&path, &text)
        .expect_err("invalid entries are refused")
        .to_string();
    let problems: Vec<&str> = error
        .lines()
        .filter(|line| line.contains("listen.trusted_proxies: "))
        .collect();
    assert_eq!(problems.len(), 2, "{error}");
    for (problem, entry) in problems.iter().zip(["10.0.0.0/33", "proxy.example"]) {
        assert!(
            problem.contains(&format!(
                "listen.trusted_proxies: \"{entry}\" is neither a CIDR"
            )),
            "{error}"
        );
    }
}

/// The audit event's sourceIPs believe exactly what the upstream's
/// X-Forwarded-For believes, and its auditID is the Audit-ID the upstream got.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_source_ips_follow_the_same_trust() {
    crate::support::build_filters();
    let upstream = Upstream::start().await;
    let audit = format!(
        "\n[audit]\nmode = \"blocking\"\n\n[[audit.policy]]\nlevel = \"Metadata\"\n{}",
        crate::support::audit_log_sink()
    );
    let cases = [
        ("", json!(["127.0.0.1"]), "127.0.0.1"),
        (
            "trusted_proxies = [\"127.0.0.1/32\"]",
            json!(["1.1.1.1", "2.2.2.2", "3.3.3.3", "4.4.4.4", "127.0.0.1"]),
            "1.1.1.1, 2.2.2.2, 3.3.3.3, 127.0.0.1",
        ),
    ];
    for (listen, source_ips, forwarded_for) in cases {
        let gateway = TestGateway::start(&manifest(&upstream, listen, &audit)).await;
        let answer = raw(gateway.addr, &get_with("/up/audited", &CLAIMS)).await;
        let echo = answer.echo();
        assert_eq!(echoed_values(&echo, "x-forwarded-for"), [forwarded_for]);
        let audit_id = answer.header("audit-id").expect("an Audit-ID").to_owned();
        assert_eq!(echoed_values(&echo, "audit-id"), [audit_id.as_str()]);
        let events = crate::support::events_of(&gateway.dir.path().join("audit.jsonl"), &audit_id);
        assert_eq!(events.len(), 2, "{events:#?}");
        for event in events {
            assert_eq!(event["sourceIPs"], source_ips, "{event}");
        }
    }
}

// ---------------------------------------------------------------------------
// Identity headers
// ---------------------------------------------------------------------------

const IDENTITY: [&str; 10] = [
    "X-Remote-User: admin",
    "X-Remote-Uid: 0",
    "X-Remote-Group: system:masters",
    "X-Remote-Extra-Scopes: everything",
    "X-Remote-Extra-Acme.io%2fteam: red",
    "Impersonate-Uid: 0",
    "Impersonate-Group: system:masters",
    "Impersonate-Extra-Scopes: everything",
    "Impersonate-Whatever: x",
    "X-Kept: yes",
];

fn assert_no_identity_headers(echo: &Value) {
    let headers = echo["headers"].as_object().expect("echoed headers");
    for name in headers.keys() {
        assert!(
            !name.starts_with("x-remote-") && !name.starts_with("impersonate-"),
            "{name} reached the upstream: {echo}"
        );
    }
    assert_eq!(echoed_values(echo, "x-kept"), ["yes"], "other headers pass");
}

/// With no authenticator at all (everyone is anonymous) and impersonation
/// allowed (no authorizer), what a client sends in the identity headers
/// still never reaches the upstream: only the gateway may speak for a user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_headers_never_reach_the_upstream_without_authenticators() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&upstream).await;
    let mut lines = vec!["Host: gw.example", "Impersonate-User: admin"];
    lines.extend(IDENTITY);
    assert_no_identity_headers(&raw(gateway.addr, &get_with("/up/id", &lines)).await.echo());
    // Without Impersonate-User, the others alone are refused by impersonation
    // (kube's rule); the unknown Impersonate-* name alone passes it but not
    // the proxy.
    let lines = [
        "Host: gw.example",
        "X-Remote-User: admin",
        "Impersonate-Whatever: x",
        "X-Kept: yes",
    ];
    assert_no_identity_headers(&raw(gateway.addr, &get_with("/up/id", &lines)).await.echo());

    let mut request = h2_request(&format!("http://gw.example:{}/up/id", gateway.addr.port()))
        .header("impersonate-user", "admin");
    for line in IDENTITY {
        let (name, value) = line.split_once(": ").expect("a header line");
        request = request.header(name, value);
    }
    let echo = h2_echo(&h2(gateway.addr, request.body(Empty::new()).expect("a request")).await);
    assert_no_identity_headers(&echo);
}

/// With token authentication and RBAC, alice impersonating bob (which RBAC
/// allows): the request goes on as bob, and neither her Impersonate-*
/// headers nor made-up X-Remote-* ones reach the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_headers_never_reach_the_upstream_after_impersonation() {
    crate::support::build_filters();
    let upstream = Upstream::start().await;
    let manifest = plaintext(
        &[
            crate::support::tokens(),
            crate::support::rbac(),
            crate::support::routes(&upstream.url()),
        ]
        .concat(),
    );
    let gateway = TestGateway::start(&manifest).await;
    let mut lines = vec![
        "Host: gw.example",
        "Authorization: Bearer alice-token",
        "Impersonate-User: bob",
    ];
    lines.extend(
        IDENTITY
            .iter()
            .filter(|line| !line.starts_with("Impersonate-")),
    );
    let echo = raw(gateway.addr, &get_with("/open/as-bob", &lines))
        .await
        .echo();
    assert_no_identity_headers(&echo);
    assert!(echoed_values(&echo, "authorization").is_empty(), "{echo}");
}

/// A server that reads headers as CGI variables (Rack, PHP, WSGI) sees `_`
/// as `-`: `X_Remote_User` is its `HTTP_X_REMOTE_USER` as `X-Remote-User`
/// is, and the one it reads last wins. So a name the gateway owns, spelled
/// with `_`, never reaches the upstream either; other names with `_` pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_and_forwarding_headers_spelled_with_underscores_never_pass() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&upstream).await;
    let lines = [
        "Host: gw.example",
        "X_Remote_User: admin",
        "X-Remote_Group: system:masters",
        "x_remote_extra_scopes: everything",
        "Impersonate_User: admin",
        "X_Forwarded_For: 6.6.6.6",
        "X_Forwarded_Host: evil.example",
        "X_Forwarded_Proto: https",
        "X_Real_IP: 6.6.6.6",
        "Audit_ID: forged",
        "Proxy_Authorization: Basic Zm9vOmJhcg==",
        "X_Kept: yes",
        "X-Kept: yes",
    ];
    let answer = raw(gateway.addr, &get_with("/up/id", &lines)).await;
    let echo = answer.echo();
    let names: Vec<&String> = echo["headers"]
        .as_object()
        .expect("echoed headers")
        .keys()
        .filter(|name| name.contains('_'))
        .collect();
    assert_eq!(names, ["x_kept"], "{echo}");
    assert_eq!(echoed_values(&echo, "x-forwarded-for"), ["127.0.0.1"]);
}

/// `Proxy` ("httpoxy"): an upstream reading headers as CGI variables takes
/// it as `HTTP_PROXY`, its own HTTP client's outbound proxy, so a client
/// could route the upstream's outbound calls through a proxy of its own.
/// It never passes, over either protocol; `Proxy-Foo` and the like do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_header_never_reaches_the_upstream() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&upstream).await;
    let lines = [
        "Host: gw.example",
        "Proxy: http://6.6.6.6:3128",
        "Proxy-Kept: yes",
    ];
    let echo = raw(gateway.addr, &get_with("/up/id", &lines)).await.echo();
    assert!(echoed_values(&echo, "proxy").is_empty(), "{echo}");
    assert_eq!(echoed_values(&echo, "proxy-kept"), ["yes"], "{echo}");

    let request = h2_request(&format!("http://gw.example:{}/up/id", gateway.addr.port()))
        .header("proxy", "http://6.6.6.6:3128")
        .header("proxy-kept", "yes");
    let echo = h2_echo(&h2(gateway.addr, request.body(Empty::new()).expect("a request")).await);
    assert!(echoed_values(&echo, "proxy").is_empty(), "{echo}");
    assert_eq!(echoed_values(&echo, "proxy-kept"), ["yes"], "{echo}");
}

// ---------------------------------------------------------------------------
// Audit-ID
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_ids_are_checked_and_exactly_one_reaches_the_upstream() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&upstream).await;

    // None given: the gateway's own reaches the upstream and the client.
    let answer = raw(gateway.addr, &get_with("/up/id", &["Host: gw.example"])).await;
    let generated = answer.header("audit-id").expect("an Audit-ID").to_owned();
    assert_eq!(generated.len(), 36, "a UUID: {generated}");
    assert_eq!(
        echoed_values(&answer.echo(), "audit-id"),
        [generated.as_str()]
    );

    // A valid one is kept, end to end.
    let longest = format!("Audit-ID: {}", "a".repeat(256));
    for (line, id) in [
        ("Audit-ID: my-own-id-1", "my-own-id-1"),
        (longest.as_str(), &longest["Audit-ID: ".len()..]),
    ] {
        let answer = raw(
            gateway.addr,
            &get_with("/up/id", &["Host: gw.example", line]),
        )
        .await;
        assert_eq!(answer.header("audit-id"), Some(id));
        assert_eq!(echoed_values(&answer.echo(), "audit-id"), [id]);
    }

    // Named in `Connection`, it still reaches the upstream: the Audit-ID
    // is the one the gateway sends on, the one the client gets back.
    for lines in [
        ["Host: gw.example", "Connection: Audit-ID"].as_slice(),
        &[
            "Host: gw.example",
            "Audit-ID: my-own-id-2",
            "Connection: audit-id",
        ],
    ] {
        let answer = raw(gateway.addr, &get_with("/up/id", lines)).await;
        let id = answer.header("audit-id").expect("an Audit-ID").to_owned();
        assert_eq!(
            echoed_values(&answer.echo(), "audit-id"),
            [id.as_str()],
            "{lines:?}"
        );
    }

    // Invalid or repeated: a 400, and nothing reaches the upstream.
    let hits = upstream.hits();
    let too_long = format!("Audit-ID: {}", "a".repeat(257));
    for lines in [
        vec!["Audit-ID: has space"],
        vec!["Audit-ID: under_score"],
        vec!["Audit-ID: -leading"],
        vec!["Audit-ID: x"],
        vec![too_long.as_str()],
        vec!["Audit-ID: one-id", "Audit-ID: two-id"],
        vec!["Audit-ID: same-id", "Audit-ID: same-id"],
    ] {
        let mut headers = vec!["Host: gw.example"];
        headers.extend(lines.iter().copied());
        let answer = raw(gateway.addr, &get_with("/up/id", &headers)).await;
        let message = answer.status_message(400);
        assert!(message.contains("Audit-ID"), "{lines:?}: {message}");
    }
    let non_ascii = raw(
        gateway.addr,
        b"GET /up/id HTTP/1.1\r\nHost: gw.example\r\nAudit-ID: \xc3\xa9t\xc3\xa9\r\nConnection: close\r\n\r\n",
    )
    .await;
    non_ascii.status_message(400);
    assert_eq!(
        upstream.hits(),
        hits,
        "no refused request reached the upstream"
    );

    // Over HTTP/2 the same.
    let request = h2_request(&format!("http://gw.example:{}/up/id", gateway.addr.port()))
        .header("audit-id", "h2-own-id")
        .body(Empty::new())
        .expect("a request");
    let answer = h2(gateway.addr, request).await;
    assert_eq!(echoed_values(&h2_echo(&answer), "audit-id"), ["h2-own-id"]);
    let request = h2_request(&format!("http://gw.example:{}/up/id", gateway.addr.port()))
        .header("audit-id", "h2-one")
        .header("audit-id", "h2-two")
        .body(Empty::new())
        .expect("a request");
    h2_status_message(&h2(gateway.addr, request).await, 400);
}

// ---------------------------------------------------------------------------
// Transfer codings and request smuggling
// ---------------------------------------------------------------------------

fn post(path: &str, headers: &[&str], body: &str) -> Vec<u8> {
    let mut request = format!("POST {path} HTTP/1.1\r\nHost: gw.example\r\n");
    for line in headers {
        request.push_str(line);
        request.push_str("\r\n");
    }
    request.push_str("Connection: close\r\n\r\n");
    request.push_str(body);
    request.into_bytes()
}

/// A header that asks the upstream for another method or path than the
/// request's own is refused before anything judges the request, over both
/// protocols, whatever its case: an upstream honouring it would serve
/// another request than the one authorized.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn method_and_path_override_headers_are_a_400() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&upstream).await;
    for header in [
        "X-HTTP-Method-Override: DELETE",
        "x-http-method: DELETE",
        "X-Method-Override: PUT",
        "X-Original-URL: /admin",
        "X-Rewrite-URL: /admin",
    ] {
        let answer = raw(gateway.addr, &post("/up/create", &[header], "{}")).await;
        let message = answer.status_message(400);
        let name = header
            .split(':')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        assert!(
            message.starts_with(&format!("the {name} header is refused")),
            "{message}"
        );
    }
    let refused = h2(
        gateway.addr,
        h2_request(&format!("http://{}/up/create", gateway.addr))
            .method("POST")
            .header("x-http-method-override", "DELETE")
            .body(Empty::new())
            .expect("a request"),
    )
    .await;
    let message = h2_status_message(&refused, 400);
    assert!(
        message.starts_with("the x-http-method-override header is refused"),
        "{message}"
    );
    assert_eq!(
        upstream.hits(),
        0,
        "no refused request reached the upstream"
    );
    // Without one the request is served as sent.
    let echo = raw(gateway.addr, &post("/up/create", &[], "{}"))
        .await
        .echo();
    assert_eq!(echo["method"], "POST");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfer_codings_other_than_chunked_are_not_implemented() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&upstream).await;
    let chunked = "5\r\nhello\r\n0\r\n\r\n";
    for codings in [
        &["Transfer-Encoding: gzip, chunked"][..],
        &["Transfer-Encoding: gzip", "Transfer-Encoding: chunked"],
        &["Transfer-Encoding: identity, chunked"],
    ] {
        let answer = raw(gateway.addr, &post("/up/te", codings, chunked)).await;
        let message = answer.status_message(501);
        assert!(message.contains("is not implemented"), "{message}");
    }
    // chunked twice is malformed.
    let answer = raw(
        gateway.addr,
        &post("/up/te", &["Transfer-Encoding: chunked, chunked"], chunked),
    )
    .await;
    answer.status_message(400);
    // hyper refuses a coding list that does not end in chunked: no body
    // length can be known.
    let answer = raw(
        gateway.addr,
        &post("/up/te", &["Transfer-Encoding: gzip"], "hello"),
    )
    .await;
    assert_eq!(answer.status, 400, "{}", answer.raw);
    assert_eq!(
        upstream.hits(),
        0,
        "no refused request reached the upstream"
    );

    // chunked alone: the body is decoded and forwarded, framed anew.
    let echo = raw(
        gateway.addr,
        &post("/up/te", &["Transfer-Encoding: chunked"], chunked),
    )
    .await
    .echo();
    assert_eq!(echo["body"], "hello");
}

/// RFC 9112 §6.3: `Transfer-Encoding` overrides `Content-Length`. In either
/// order the body is the chunked one, the length is dropped, the two never
/// reach the upstream together, and what the client put after the chunked
/// body is not read as a request of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_length_with_transfer_encoding_is_framed_by_the_chunks_alone() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&upstream).await;
    let smuggled = "0\r\n\r\nGET /up/smuggled HTTP/1.1\r\nHost: gw.example\r\n\r\n";
    let length = format!("Content-Length: {}", smuggled.len());
    for headers in [
        [length.as_str(), "Transfer-Encoding: chunked"],
        ["Transfer-Encoding: chunked", length.as_str()],
        ["Transfer-Encoding: chunked", "Content-Length: 3"],
    ] {
        let text = raw_exchange(gateway.addr, &post("/up/clte", &headers, smuggled)).await;
        let echo = parse(&text).echo();
        assert_eq!(echo["path"], "/up/clte");
        assert_eq!(echo["body"], "", "the chunks framed the body: {echo}");
        let lengths = echoed_values(&echo, "content-length");
        assert!(
            lengths.is_empty() || lengths == ["0"],
            "the overridden length reached the upstream: {echo}"
        );
        assert!(
            lengths.is_empty() || echoed_values(&echo, "transfer-encoding").is_empty(),
            "both framings reached the upstream: {echo}"
        );
        assert!(
            !text.contains("/up/smuggled"),
            "{headers:?}: a smuggled request was answered: {text}"
        );
    }
    assert_eq!(upstream.hits(), 3);
    for _ in 0..3 {
        assert_eq!(upstream.next_arrival().await, "POST /up/clte");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicated_content_lengths_are_one_length_or_a_400() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&upstream).await;
    for headers in [
        &["Content-Length: 5", "Content-Length: 6"][..],
        &["Content-Length: 5, 6"],
        &["Content-Length: -5"],
        &["Content-Length: 5x"],
    ] {
        let answer = raw(gateway.addr, &post("/up/cl", headers, "hello!")).await;
        assert_eq!(answer.status, 400, "{headers:?}: {}", answer.raw);
    }
    assert_eq!(
        upstream.hits(),
        0,
        "no refused request reached the upstream"
    );
    // The same length twice is that length, forwarded once.
    let echo = raw(
        gateway.addr,
        &post(
            "/up/cl",
            &["Content-Length: 5", "Content-Length: 5"],
            "hello",
        ),
    )
    .await
    .echo();
    assert_eq!(echo["body"], "hello");
    assert_eq!(echoed_values(&echo, "content-length"), ["5"]);
}

// ---------------------------------------------------------------------------
// Line syntax: obs-fold, bare LF, bare CR
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn obs_fold_and_bare_cr_are_refused() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&upstream).await;
    for request in [
        // A header continued on the next line (obs-fold, RFC 9112 §5.2).
        &b"GET /up/fold HTTP/1.1\r\nHost: gw.example\r\nX-Folded: one\r\n two\r\nConnection: close\r\n\r\n"[..],
        b"GET /up/fold HTTP/1.1\r\nHost: gw.example\r\nX-Folded: one\r\n\ttwo\r\nConnection: close\r\n\r\n",
        // A folded Host line.
        b"GET /up/fold HTTP/1.1\r\nHost:\r\n gw.example\r\nConnection: close\r\n\r\n",
        // A bare CR inside the head.
        b"GET /up/cr HTTP/1.1\r\nHost: gw.example\rX-Injected: yes\r\nConnection: close\r\n\r\n",
    ] {
        let answer = raw(gateway.addr, request).await;
        assert_eq!(
            answer.status,
            400,
            "{:?}: {}",
            String::from_utf8_lossy(request),
            answer.raw
        );
    }
    assert_eq!(
        upstream.hits(),
        0,
        "no refused request reached the upstream"
    );
}

/// RFC 9112 §2.2 lets a recipient read a bare LF as a line end. hyper does;
/// the gateway forwards a request framed anew, so the upstream sees the same
/// fields and nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bare_lf_line_ends_are_read_as_line_ends_and_forwarded_framed_anew() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&upstream).await;
    let answer = raw(
        gateway.addr,
        b"GET /up/lf HTTP/1.1\nHost: gw.example\nX-One: 1\nConnection: close\n\n",
    )
    .await;
    let echo = answer.echo();
    assert_eq!(echo["path"], "/up/lf");
    assert_eq!(echoed_values(&echo, "x-one"), ["1"]);
    assert_eq!(echoed_values(&echo, "x-forwarded-host"), ["gw.example"]);
    assert_eq!(upstream.hits(), 1);
}

// ---------------------------------------------------------------------------
// Oversized headers
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_headers_are_a_431_over_both_protocols() {
    let upstream = Upstream::start().await;
    // 4 KiB is counted by the listener (under hyper's smallest buffer);
    // 16 KiB by hyper itself.
    for (limit, size) in [("4KiB", 5 * 1024), ("16KiB", 20 * 1024)] {
        let gateway = TestGateway::start(&manifest(
            &upstream,
            "",
            &format!("[limits]\nmax_header_bytes = \"{limit}\"\n"),
        ))
        .await;
        let big = format!("X-Big: {}", "b".repeat(size));
        let answer = raw(
            gateway.addr,
            &get_with("/up/big", &["Host: gw.example", &big]),
        )
        .await;
        assert_eq!(answer.status, 431, "{limit}: {}", answer.raw);

        let request = h2_request(&format!("http://gw.example:{}/up/big", gateway.addr.port()))
            .header("x-big", "b".repeat(size))
            .body(Empty::<Bytes>::new())
            .expect("a request");
        let (mut sender, connection) = h2c_handshake(gateway.addr).await;
        tokio::spawn(connection);
        // HTTP/2 answers 431, or resets the stream: either way nothing is served.
        if let Ok(response) = bounded("an h2 answer", sender.send_request(request)).await {
            assert_eq!(response.status(), 431, "{limit}");
        }
        // A request within the limit is still served.
        let echo = raw(gateway.addr, &get_with("/up/small", &["Host: gw.example"]))
            .await
            .echo();
        assert_eq!(echo["path"], "/up/small");
    }
    assert_eq!(
        upstream.hits(),
        2,
        "only the requests within the limit arrived"
    );
}

// ---------------------------------------------------------------------------
// nosniff
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_carries_nosniff() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&manifest(
        &upstream,
        "",
        "[limits]\nmax_header_bytes = \"4KiB\"\n",
    ))
    .await;
    let big = format!("X-Big: {}", "b".repeat(5 * 1024));
    let requests = [
        // proxied, static, health, the gateway's own 404 and 400s, the
        // listener's 431
        (get_with("/up/x", &["Host: gw.example"]), 200),
        (get_with("/static", &["Host: gw.example"]), 200),
        (get_with("/healthz", &["Host: gw.example"]), 200),
        (get_with("/nowhere", &["Host: gw.example"]), 404),
        (get_with("/up/x", &[]), 400),
        (
            get_with("/up/x", &["Host: gw.example", "Audit-ID: a b"]),
            400,
        ),
        (get_with("/up/x", &["Host: gw.example", &big]), 431),
    ];
    for (request, code) in requests {
        let answer = raw(gateway.addr, &request).await;
        assert_eq!(answer.status, code, "{}", answer.raw);
        assert_eq!(
            answer.header("x-content-type-options"),
            Some("nosniff"),
            "{}",
            answer.raw
        );
    }
    for path in ["/up/x", "/static", "/nowhere"] {
        let request = h2_request(&format!("http://gw.example:{}{path}", gateway.addr.port()))
            .body(Empty::new())
            .expect("a request");
        let (_, headers, _) = h2(gateway.addr, request).await;
        assert_eq!(
            headers.get("x-content-type-options").map(|v| v.as_bytes()),
            Some(&b"nosniff"[..]),
            "{path}"
        );
    }
}
