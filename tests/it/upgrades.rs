//! Upgrades and long-running requests over real TLS, both to the gateway and
//! from it to the upstream: a WebSocket client (tokio-tungstenite) through
//! the whole chain to an echo upstream, kubectl's `SPDY/3.1` handshake
//! passed through with bytes copied both ways (and, traced, the upstream
//! told the trace with the gateway's upstream span as its parent, as a
//! proxied request is), an upgrade authorization
//! refuses answered 403 and one admission refuses (operation `CONNECT`)
//! answered its 422 before anything is upgraded, the audit events of a
//! tunnel, the user's identity headers (and not the client's credentials)
//! at the upstream, no priority-and-fairness seat, an open tunnel closed by
//! the shutdown after `shutdown_delay`; watches flushed as the upstream
//! writes them, exempt from `request_timeout`, ended after
//! `min_request_timeout` (kube's
//! `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/get.go`) and by the
//! shutdown after `shutdown_delay`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::support::*;

const EXEC: &str = "/api/v1/namespaces/default/pods/p/exec?command=sh&stdin=true";
const WIDGETS: &str = "/apis/demo.example.io/v1/namespaces/default/widgets";
const LOG_FOLLOW: &str = "/api/v1/namespaces/default/pods/p/log?follow=true";
const WATCH: &str = "/apis/demo.example.io/v1/namespaces/default/widgets?watch=true";

/// alice may exec in `default` (GET for WebSocket, POST, kube's `create`,
/// for SPDY), read logs, and list and watch widgets; bob may do nothing.
fn rbac_exec() -> String {
    rbac_with(json!({
        "roles": [
            {"name": "exec", "rules": [
                {"verbs": ["get", "create"], "apiGroups": [""], "resources": ["pods/exec", "pods/log"]},
                {"verbs": ["list", "watch"], "apiGroups": ["demo.example.io"], "resources": ["widgets"]},
            ]},
        ],
        "bindings": [{"role": "exec", "namespace": "default", "users": ["alice"]}],
    }))
}

/// A gateway over TLS with tokens, the RBAC above, a Metadata audit log in
/// `audit.jsonl`, and `/api/` and the widgets API routed to an https
/// [`TunnelUpstream`] writing watch events every `interval`; one CA signs
/// both servers' certificates, and the client certificate `proxy.crt` a
/// route may present to the upstream. `more` is more of the manifest
/// (before the servers); `upstream_keys` more keys of both routes'
/// upstream.
struct Setup {
    upstream: TunnelUpstream,
    gateway: TestGateway,
    ca: Ca,
    log: PathBuf,
}

async fn setup(interval: Duration, limits: &str) -> Setup {
    setup_with(interval, limits, "", "").await
}

async fn setup_with(interval: Duration, limits: &str, more: &str, upstream_keys: &str) -> Setup {
    let ca = Ca::new("wasmgate test CA");
    let upstream = TunnelUpstream::start(&ca.server_cert(), &ca, interval).await;
    let dir = new_dir();
    let server = ca.server_cert();
    let proxy = ca.client_cert("front-proxy");
    std::fs::write(dir.path().join("proxy.crt"), &proxy.cert_pem).expect("write proxy.crt");
    std::fs::write(dir.path().join("proxy.key"), &proxy.key_pem).expect("write proxy.key");
    std::fs::write(dir.path().join("ca.crt"), &ca.cert_pem).expect("write ca.crt");
    std::fs::write(dir.path().join("server.crt"), &server.cert_pem).expect("write server.crt");
    std::fs::write(dir.path().join("server.key"), &server.key_pem).expect("write server.key");
    let up = upstream.url();
    let sink = audit_log_sink();
    let manifest = [
        "[listen]\naddress = \"127.0.0.1:0\"\n\n[listen.tls]\ncert = \"server.crt\"\nkey = \"server.key\"\n\n".to_owned(),
        format!("[limits]\n{limits}\n\n"),
        tokens(),
        rbac_exec(),
        "\n[[audit.policy]]\nlevel = \"Metadata\"\n".to_owned(),
        sink,
        more.to_owned(),
        format!(
            "\n[[servers]]\nname = \"gw\"\n\n[[servers.routes]]\nprefix = \"/api/\"\nupstream = {{ url = \"{up}\", ca = \"ca.crt\"{upstream_keys} }}\n\n[[servers.routes]]\napi = \"/apis/demo.example.io/v1\"\nupstream = {{ url = \"{up}\", ca = \"ca.crt\"{upstream_keys} }}\n"
        ),
    ]
    .concat();
    let gateway = TestGateway::start_in(dir, &manifest).await;
    let log = gateway.dir.path().join("audit.jsonl");
    Setup {
        upstream,
        gateway,
        ca,
        log,
    }
}

/// A TLS connection to the gateway, offering no ALPN (HTTP/1.1).
async fn tls_connect(
    gateway: &TestGateway,
    ca: &Ca,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    tls_connect_with_alpn(gateway, ca, &[]).await
}

/// A TLS connection to the gateway, offering `alpn`.
async fn tls_connect_with_alpn(
    gateway: &TestGateway,
    ca: &Ca,
    alpn: &[&[u8]],
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(ca.cert_pem.as_bytes()) {
        roots.add(cert.expect("a CA certificate")).expect("a root");
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let mut config = config;
    config.alpn_protocols = alpn.iter().map(|protocol| protocol.to_vec()).collect();
    let tcp = connect(gateway.addr).await;
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").expect("a name");
    bounded(
        "the TLS handshake",
        tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp),
    )
    .await
    .expect("a TLS connection to the gateway")
}

fn audit_id_of(head: &str) -> String {
    head.lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("audit-id")
                .then(|| value.trim().to_owned())
        })
        .expect("an Audit-ID header")
}

/// A WebSocket to `target` through the gateway over TLS, sending
/// `headers`, and its Audit-ID; asserts the 101.
async fn websocket(
    setup: &Setup,
    target: &str,
    headers: &[(&str, &str)],
) -> (
    WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>,
    String,
) {
    let stream = tls_connect(&setup.gateway, &setup.ca).await;
    let mut request = format!("wss://{}{target}", setup.gateway.addr)
        .into_client_request()
        .expect("a WebSocket request");
    for (name, value) in headers {
        let name: http::HeaderName = name.parse().expect("a header name");
        request
            .headers_mut()
            .append(name, value.parse().expect("a header value"));
    }
    let (socket, response) = bounded(
        "the WebSocket handshake",
        tokio_tungstenite::client_async(request, stream),
    )
    .await
    .expect("the gateway switches to WebSocket");
    assert_eq!(response.status(), 101);
    assert_eq!(
        response.headers().get("x-kubernetes-pf-prioritylevel-uid"),
        None,
        "an upgrade is not judged by priority and fairness"
    );
    let audit_id = response.headers()["audit-id"]
        .to_str()
        .expect("an Audit-ID")
        .to_owned();
    (socket, audit_id)
}

/// Sends `message` on `socket` and reads it back.
async fn assert_echoes<S>(socket: &mut WebSocketStream<S>, message: Message)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    socket.send(message.clone()).await.expect("send");
    let echoed = bounded("the echo", socket.next())
        .await
        .expect("a message")
        .expect("a good message");
    assert_eq!(echoed, message);
}

/// An exec upgrade's methods and protocols: a WebSocket's `GET`, kubectl's
/// SPDY `POST`.
const UPGRADES: [(&str, &str); 2] = [("GET", "websocket"), ("POST", "SPDY/3.1")];

/// Asks for an exec upgrade over `upgrade` with `token`, expecting a
/// refusal: the response head and the start of its body (the Status).
async fn refused_upgrade(
    setup: &Setup,
    method: &str,
    upgrade: &str,
    token: &str,
) -> (String, String) {
    let mut stream = tls_connect(&setup.gateway, &setup.ca).await;
    let head = format!(
        "{method} {EXEC} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\
         Connection: Upgrade\r\nUpgrade: {upgrade}\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Sec-WebSocket-Version: 13\r\nContent-Length: 0\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    let answer = read_head(&mut stream).await;
    let mut body = vec![0u8; 4096];
    let read = bounded("the Status", stream.read(&mut body))
        .await
        .expect("read");
    (answer, String::from_utf8_lossy(&body[..read]).into_owned())
}

/// Reads a response head (to the blank line) from `stream`.
async fn read_head<S: tokio::io::AsyncRead + Unpin>(stream: &mut S) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let read = bounded("a response head", stream.read(&mut byte))
            .await
            .expect("read");
        assert!(read > 0, "closed before a whole head: {head:?}");
        head.push(byte[0]);
    }
    String::from_utf8(head).expect("a UTF-8 head")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_passes_the_chain_and_echoes_over_tls() {
    let setup = setup(Duration::from_secs(1), "").await;
    let stream = tls_connect(&setup.gateway, &setup.ca).await;
    let mut request = format!("wss://{}{EXEC}", setup.gateway.addr)
        .into_client_request()
        .expect("a WebSocket request");
    request.headers_mut().insert(
        "authorization",
        "Bearer alice-token".parse().expect("a header value"),
    );
    let (mut socket, response) = bounded(
        "the WebSocket handshake",
        tokio_tungstenite::client_async(request, stream),
    )
    .await
    .expect("the gateway switches to WebSocket");
    assert_eq!(response.status(), 101);
    let audit_id = response.headers()["audit-id"]
        .to_str()
        .expect("an Audit-ID")
        .to_owned();

    for message in [
        Message::text("hello through the gateway"),
        Message::binary(vec![0u8, 1, 2, 255]),
    ] {
        assert_echoes(&mut socket, message).await;
    }
    let seen = setup.upstream.next_seen().await;
    assert_eq!(
        (seen.method.as_str(), seen.target.as_str(), seen.version),
        ("GET", EXEC, http::Version::HTTP_11),
        "the upstream gets the upgrade over HTTP/1.1 although it offers h2"
    );
    assert_eq!(seen.upgrade.as_deref(), Some("websocket"));
    assert!(
        !seen.client_cert,
        "a route without client_cert presents none"
    );

    // While the tunnel is open its event has started, not completed.
    let events = wait_for_events(&setup.log, &audit_id, 2).await;
    assert_eq!(stages_of(&events), ["RequestReceived", "ResponseStarted"]);
    assert_eq!(events[1]["verb"], "get");
    assert_eq!(events[1]["user"]["username"], "alice");
    assert_eq!(events[1]["objectRef"]["subresource"], "exec");
    assert_eq!(events[1]["responseStatus"]["code"], 101);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(events_of(&setup.log, &audit_id).len(), 2);
    socket.close(None).await.expect("close the WebSocket");
    drop(socket);
    let events = wait_for_events(&setup.log, &audit_id, 3).await;
    assert_eq!(
        stages_of(&events),
        ["RequestReceived", "ResponseStarted", "ResponseComplete"]
    );
}

/// kubectl's exec over SPDY: `POST` (kube's verb `create`) with `Upgrade:
/// SPDY/3.1` and the stream protocols it speaks; the upstream's choice
/// comes back in the 101, then bytes flow both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectls_spdy_upgrade_is_passed_through() {
    let setup = setup(Duration::from_secs(1), "").await;
    let mut stream = tls_connect(&setup.gateway, &setup.ca).await;
    let head = format!(
        "POST {EXEC} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer alice-token\r\n\
         Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
         X-Stream-Protocol-Version: v4.channel.k8s.io\r\nX-Stream-Protocol-Version: v3.channel.k8s.io\r\n\
         Content-Length: 0\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    let answer = read_head(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 101"), "{answer}");
    let lower = answer.to_ascii_lowercase();
    assert!(lower.contains("\r\nupgrade: spdy/3.1\r\n"), "{answer}");
    assert!(lower.contains("\r\nconnection: upgrade\r\n"), "{answer}");
    assert!(
        lower.contains("\r\nx-stream-protocol-version: v4.channel.k8s.io\r\n"),
        "{answer}"
    );
    let seen = setup.upstream.next_seen().await;
    assert_eq!((seen.method.as_str(), seen.target.as_str()), ("POST", EXEC));
    assert_eq!(seen.upgrade.as_deref(), Some("SPDY/3.1"));

    // A SPDY SYN_STREAM frame's first bytes, then more: echoed as sent.
    for bytes in [&b"\x80\x03\x00\x01\x00\x00\x00\x0a"[..], b"stdin data"] {
        stream.write_all(bytes).await.expect("write");
        let mut echoed = vec![0u8; bytes.len()];
        bounded("the echo", stream.read_exact(&mut echoed))
            .await
            .expect("read");
        assert_eq!(echoed, bytes);
    }
}

/// With `[tracing]`, an upgrade's upstream request carries the trace as a
/// proxied request's does: its parent is the gateway's upstream span, which
/// ended at the upstream's 101.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_traced_upgrade_tells_the_upstream_its_trace() {
    let collector = Collector::start().await;
    let tracing = tracing_table(collector.addr, 1_000_000);
    let setup = setup_with(Duration::from_secs(1), "", &tracing, "").await;
    let mut stream = tls_connect(&setup.gateway, &setup.ca).await;
    let head = format!(
        "POST {EXEC} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer alice-token\r\n\
         Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
         X-Stream-Protocol-Version: v4.channel.k8s.io\r\nContent-Length: 0\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    let answer = read_head(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 101"), "{answer}");
    let seen = setup.upstream.next_seen().await;
    let sent = seen
        .headers
        .get("traceparent")
        .and_then(|value| value.to_str().ok())
        .expect("the upstream got a traceparent");
    let parts: Vec<&str> = sent.split('-').collect();
    assert_eq!(parts.len(), 4, "a traceparent: {sent}");
    let trace_id = parts[1];
    assert_eq!(parts[3], "01", "sampled: {sent}");

    let upstream = eventually("the upgrade's upstream span", || {
        let found = collector
            .spans()
            .into_iter()
            .find(|span| span.trace_id == trace_id && span.kind == 3);
        std::future::ready(found)
    })
    .await;
    assert_eq!(upstream.span_id, parts[2], "the upstream's parent");
    assert_eq!(upstream.attribute("http.response.status_code"), Some("101"));
    drop(stream);
    setup.gateway.shutdown().await;
}

/// kube's connect admission (`ConnectResource` in
/// `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/rest.go`): an exec
/// upgrade, over WebSocket or SPDY, is admitted with operation `CONNECT`
/// and its `PodExecOptions`, decoded from the query, after authorization and
/// before anything is upgraded. schema-admission with a schema for
/// `pods/exec` on `connect` that allows `ls` and no shell refuses
/// `command=sh` with its 422, naming the field; `command=ls` is upgraded
/// and reaches the upstream with its query as sent. The same schema on
/// `pods/log` leaves a followed log alone (a read, no admission in kube).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_is_admitted_as_connect_with_its_options_before_it_is_upgraded() {
    let connect_schema = json!({"schemas": [{
        "resources": ["pods/exec", "pods/log"],
        "api_groups": [""],
        "operations": ["connect"],
        "schema": {
            "type": "object",
            "required": ["kind", "command"],
            "properties": {
                "kind": {"const": "PodExecOptions"},
                "stdout": {"const": true},
                "command": {"type": "array", "items": {"enum": ["ls", "-l"]}},
            },
        },
    }]});
    let admission = filter(
        "admission.validating",
        "connect-schema",
        "schema-admission",
        Some(connect_schema),
        "isolation = \"pooled\"",
    );
    let setup = setup_with(Duration::from_secs(1), "", &admission, "").await;
    for (method, upgrade) in UPGRADES {
        let (answer, body) = refused_upgrade(&setup, method, upgrade, "alice-token").await;
        assert!(answer.starts_with("HTTP/1.1 422"), "{method}: {answer}");
        assert!(body.contains("\"reason\":\"Invalid\""), "{method}: {body}");
        assert!(body.contains("command[0]"), "{method}: {body}");
    }
    let allowed = "/api/v1/namespaces/default/pods/p/exec?command=ls&command=-l&stdout=true";
    let (mut socket, _) =
        websocket(&setup, allowed, &[("authorization", "Bearer alice-token")]).await;
    assert_echoes(&mut socket, Message::text("listed")).await;
    let seen = setup.upstream.next_seen().await;
    assert_eq!(
        seen.target, allowed,
        "the options judged are the query served"
    );
    assert!(seen.upgrade.is_some());
    drop(socket);

    let log = bounded(
        "a followed log's head",
        tls_client(&setup.ca.cert_pem)
            .get(setup.gateway.url(LOG_FOLLOW))
            .bearer_auth("alice-token")
            .send(),
    )
    .await
    .expect("a log");
    assert_eq!(log.status(), 200);
    let seen = setup.upstream.next_seen().await;
    let target: http::Uri = seen.target.parse().expect("a request target");
    assert_eq!(
        target.path_and_query().map(|target| target.as_str()),
        Some(LOG_FOLLOW),
        "the log reached the upstream"
    );
    assert!(seen.upgrade.is_none());
}

/// kube's authorization runs before anything is upgraded: bob may not exec,
/// so he gets kube's 403 Status on the HTTP/1.1 connection, and the upstream
/// never hears of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_authorization_refuses_is_403_before_any_upgrade() {
    let setup = setup(Duration::from_secs(1), "").await;
    for (method, upgrade) in UPGRADES {
        let (answer, body) = refused_upgrade(&setup, method, upgrade, "bob-token").await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{method}: {answer}");
        let verb = if method == "GET" { "get" } else { "create" };
        assert!(
            body.contains(&format!("cannot {verb} resource \\\"pods/exec\\\""))
                || body.contains(&format!("cannot {verb} resource \"pods/exec\"")),
            "{body}"
        );
        assert!(
            !answer.to_ascii_lowercase().contains("upgrade: "),
            "{answer}"
        );
        let _ = audit_id_of(&answer);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(setup.upstream.try_seen().await.is_none());
}

/// A watch whose upstream writes one event a second: each event reaches the
/// client within 100 ms of being written, for longer than
/// `request_timeout`, which does not apply to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_events_are_flushed_as_written_past_the_request_timeout() {
    let setup = setup(Duration::from_secs(1), "request_timeout = \"500ms\"").await;
    let client = tls_client(&setup.ca.cert_pem);
    let response = bounded(
        "the watch's head",
        client
            .get(setup.gateway.url(WATCH))
            .bearer_auth("alice-token")
            .send(),
    )
    .await
    .expect("a watch");
    assert_eq!(response.status(), 200);
    let mut body = response.bytes_stream();
    let mut text = String::new();
    for event in 0..4 {
        let written = setup.upstream.next_written().await;
        while text.lines().count() <= event || !text.ends_with('\n') {
            let chunk = bounded("a watch event", body.next())
                .await
                .expect("the watch goes on")
                .expect("a chunk");
            text.push_str(std::str::from_utf8(&chunk).expect("UTF-8"));
        }
        let late = written.elapsed();
        assert!(
            late <= Duration::from_millis(100),
            "event {event} reached the client {late:?} after it was written: {text}"
        );
    }
    assert_eq!(text.lines().count(), 4, "{text}");
    assert!(
        text.lines().all(|line| line.contains("\"ADDED\"")),
        "{text}"
    );
}

/// A watch without `timeoutSeconds` ends, cleanly, a random time in
/// [min_request_timeout, 2 × min_request_timeout) after it began; with
/// `timeoutSeconds` it ends then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_ends_after_min_request_timeout_or_its_timeout_seconds() {
    let setup = setup(Duration::from_millis(100), "min_request_timeout = \"1s\"").await;
    let client = tls_client(&setup.ca.cert_pem);
    for (target, earliest, latest) in [
        (WATCH.to_owned(), 1000, 2300),
        (format!("{WATCH}&timeoutSeconds=3"), 3000, 3300),
    ] {
        let started = Instant::now();
        let response = client
            .get(setup.gateway.url(&target))
            .bearer_auth("alice-token")
            .send()
            .await
            .expect("a watch");
        let body = bounded("the watch's end", response.bytes())
            .await
            .expect("the watch ends cleanly");
        let lasted = started.elapsed();
        assert!(
            lasted >= Duration::from_millis(earliest) && lasted <= Duration::from_millis(latest),
            "{target}: lasted {lasted:?}"
        );
        assert!(body.ends_with(b"\n"), "ended between two events");
    }
}

/// A watch may ask for any int64 `timeoutSeconds`; the largest, past the
/// clock's range, is served as a watch without an end of its own (it was an
/// overflow: a panic and a 500, before authentication ran).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_asking_for_the_largest_timeout_seconds_streams() {
    let setup = setup(Duration::from_millis(100), "min_request_timeout = \"1s\"").await;
    let client = tls_client(&setup.ca.cert_pem);
    let target = format!("{WATCH}&timeoutSeconds={}", i64::MAX);
    let mut response = bounded(
        "the watch's head",
        client
            .get(setup.gateway.url(&target))
            .bearer_auth("alice-token")
            .send(),
    )
    .await
    .expect("a watch");
    assert_eq!(response.status(), 200);
    let first = bounded("the watch's first event", response.chunk())
        .await
        .expect("a chunk")
        .expect("not the end");
    assert!(!first.is_empty());
}

/// At shutdown a watch is closed once `shutdown_delay` has passed, not
/// waited on until `shutdown_timeout`; the drain then completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shutdown_closes_a_watch_after_shutdown_delay() {
    let mut setup = setup(
        Duration::from_millis(100),
        "shutdown_delay = \"1s\"\nshutdown_timeout = \"30s\"",
    )
    .await;
    let client = tls_client(&setup.ca.cert_pem);
    let response = client
        .get(setup.gateway.url(WATCH))
        .bearer_auth("alice-token")
        .send()
        .await
        .expect("a watch");
    let started = Instant::now();
    let shutdown = setup.gateway.begin_shutdown();
    let ended = bounded("the watch's end", response.bytes()).await;
    let lasted = started.elapsed();
    assert!(ended.is_ok(), "the watch ends cleanly: {ended:?}");
    assert!(
        lasted >= Duration::from_millis(900) && lasted < Duration::from_secs(5),
        "closed {lasted:?} after the shutdown began"
    );
    let drained = bounded("the drain", shutdown).await.expect("the shutdown");
    assert_eq!(drained, wasmgate::server::Drained::Complete);
}

/// At shutdown an open tunnel (a WebSocket exec) is closed once
/// `shutdown_delay` has passed, as a watch is: the client sees its
/// connection end, the audit event is completed, and the drain completes
/// instead of waiting for the tunnel until `shutdown_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shutdown_closes_an_open_tunnel_after_shutdown_delay() {
    let mut setup = setup(
        Duration::from_secs(1),
        "shutdown_delay = \"1s\"\nshutdown_timeout = \"30s\"",
    )
    .await;
    let alice = [("authorization", "Bearer alice-token")];
    let (mut socket, audit_id) = websocket(&setup, EXEC, &alice).await;
    assert_echoes(&mut socket, Message::text("before the shutdown")).await;

    let started = Instant::now();
    let shutdown = setup.gateway.begin_shutdown();
    // Still a tunnel during shutdown_delay.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_echoes(&mut socket, Message::text("during shutdown_delay")).await;
    // Then the gateway closes it: the next read ends.
    bounded("the tunnel's end", async {
        loop {
            match socket.next().await {
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => break,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    let lasted = started.elapsed();
    assert!(
        lasted >= Duration::from_millis(900) && lasted < Duration::from_secs(5),
        "closed {lasted:?} after the shutdown began"
    );
    let drained = bounded("the drain", shutdown).await.expect("the shutdown");
    assert_eq!(drained, wasmgate::server::Drained::Complete);
    let events = wait_for_events(&setup.log, &audit_id, 3).await;
    assert_eq!(
        stages_of(&events),
        ["RequestReceived", "ResponseStarted", "ResponseComplete"]
    );
}

/// RFC 8441: a WebSocket over HTTP/2 (extended CONNECT, `:protocol =
/// websocket`) is judged as the `GET` it stands for, goes to the upstream
/// as an HTTP/1.1 WebSocket upgrade, and is answered 200; messages echo.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_over_http2_extended_connect_echoes() {
    use http_body_util::Empty;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use tokio_tungstenite::tungstenite::protocol::Role;

    let setup = setup(Duration::from_secs(1), "").await;
    let stream = tls_connect_with_alpn(&setup.gateway, &setup.ca, &[b"h2"]).await;
    let (mut sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .handshake::<_, Empty<bytes::Bytes>>(TokioIo::new(stream))
        .await
        .expect("an HTTP/2 connection");
    tokio::spawn(connection);
    // One exchange first, so the gateway's SETTINGS (with
    // ENABLE_CONNECT_PROTOCOL) have arrived.
    let first = http::Request::get(format!("https://{}/healthz", setup.gateway.addr))
        .body(Empty::new())
        .expect("a request");
    sender.send_request(first).await.expect("an answer");

    // RFC 8441's request: CONNECT with `:protocol = websocket`.
    let websocket_connect = |token: &str| {
        let mut request = http::Request::builder()
            .method(http::Method::CONNECT)
            .uri(format!("https://{}{EXEC}", setup.gateway.addr))
            .header("authorization", format!("Bearer {token}"))
            .header("sec-websocket-version", "13")
            .body(Empty::new())
            .expect("a CONNECT request");
        request
            .extensions_mut()
            .insert(hyper::ext::Protocol::from_static("websocket"));
        request
    };
    let request = websocket_connect("alice-token");
    let response = bounded("the CONNECT's answer", sender.send_request(request))
        .await
        .expect("an answer");
    assert_eq!(response.status(), 200);
    let upgraded = bounded("the stream", hyper::upgrade::on(response))
        .await
        .expect("the stream is a tunnel");
    let mut socket =
        WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Client, None).await;
    let message = Message::text("hello over HTTP/2");
    assert_echoes(&mut socket, message).await;
    let seen = setup.upstream.next_seen().await;
    assert_eq!(
        (seen.method.as_str(), seen.target.as_str(), seen.version),
        ("GET", EXEC, http::Version::HTTP_11)
    );
    assert_eq!(seen.upgrade.as_deref(), Some("websocket"));

    // Bob may not: 403 on the stream, no tunnel, nothing upstream.
    let refused = websocket_connect("bob-token");
    let response = sender.send_request(refused).await.expect("an answer");
    assert_eq!(response.status(), 403);
    assert!(setup.upstream.try_seen().await.is_none());
}

/// An upgrade is rewritten for the upstream as any proxied request is: in
/// `request-header` mode the upstream that switches to WebSocket sees the
/// user (`X-Remote-*`, kube's aggregator's headers), never the client's
/// `Authorization` nor the `X-Remote-*` the client wrote itself, and
/// the canonical target with the upstream's `Host`, over a connection that
/// presents the route's proxy client certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_in_request_header_mode_carries_the_user_not_the_clients_credentials() {
    let setup = setup_with(
        Duration::from_secs(1),
        "",
        "",
        ", identity = \"request-header\", client_cert = \"proxy.crt\", client_key = \"proxy.key\"",
    )
    .await;
    let hostile = [
        ("authorization", "Bearer alice-token"),
        ("x-remote-user", "admin"),
        ("x-remote-group", "system:masters"),
    ];
    let (mut socket, _) = websocket(&setup, EXEC, &hostile).await;
    assert_echoes(&mut socket, Message::text("who am I")).await;

    let seen = setup.upstream.next_seen().await;
    assert_eq!(seen.upgrade.as_deref(), Some("websocket"));
    assert_eq!(seen.target, EXEC);
    assert!(
        seen.client_cert,
        "the tunnel presents the route's client certificate"
    );
    let values = |name: &str| -> Vec<&str> {
        seen.headers
            .get_all(name)
            .iter()
            .map(|value| value.to_str().expect("a text header"))
            .collect()
    };
    assert_eq!(values("x-remote-user"), ["alice"]);
    assert_eq!(values("x-remote-uid"), ["1001"]);
    assert_eq!(values("x-remote-group"), ["dev", "system:authenticated"]);
    assert_eq!(values("host"), [setup.upstream.addr.to_string().as_str()]);
    assert!(
        values("authorization").is_empty(),
        "the client's token reached the upstream"
    );
}

/// kube's `WithPriorityAndFairness` serves long-running requests other than
/// watches without a seat (`staging/src/k8s.io/apiserver/pkg/server/filters/priority-and-fairness.go`),
/// as max-in-flight does: with the level's one seat held by a list, an exec
/// upgrade still opens, and while its tunnel is open the seat is free for
/// the next request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_takes_no_seat_of_priority_and_fairness() {
    // Two server seats: ceil(2 × 1 / (1 + 5)) = 1 for `tenants` (catch-all's
    // 5 shares lend nothing).
    let one_seat = r#"
[flow_control]

[[flow_control.priority_levels]]
name = "tenants"
nominal_concurrency_shares = 1
queuing = { queues = 1, hand_size = 1, queue_length_limit = 8 }

[[flow_control.flow_schemas]]
name = "tenants"
priority_level = "tenants"
matching_precedence = 500

[[flow_control.flow_schemas.rules]]
groups = ["system:authenticated"]
resource_rules = [{ verbs = ["*"], api_groups = ["*"], resources = ["*"], namespaces = ["*"], cluster_scope = true }]
"#;
    let setup = setup_with(
        Duration::from_millis(100),
        "max_requests_in_flight = 1\nmax_mutating_requests_in_flight = 1",
        one_seat,
        "",
    )
    .await;
    let client = tls_client(&setup.ca.cert_pem);
    let list = || {
        client
            .get(setup.gateway.url(WIDGETS))
            .bearer_auth("alice-token")
            .send()
    };
    // The upstream streams the list's body until the client drops it: the
    // seat is held until then.
    let holder = bounded("the first list's head", list())
        .await
        .expect("a list");
    assert_eq!(holder.status(), 200);
    let waiting = tokio::spawn(list());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "the level has more than one seat");
    waiting.abort();

    // Long-running by kube's check (exec's subresource), and only by being
    // an upgrade (a list's WebSocket): neither waits for the seat.
    let alice = [("authorization", "Bearer alice-token")];
    let mut tunnels = Vec::new();
    for target in [EXEC, WIDGETS] {
        let (mut socket, _) = websocket(&setup, target, &alice).await;
        assert_echoes(&mut socket, Message::text("no seat needed")).await;
        tunnels.push(socket);
    }
    // Long-running without an upgrade: a log that follows.
    let follow = bounded(
        "a followed log's head with the one seat taken",
        client
            .get(setup.gateway.url(LOG_FOLLOW))
            .bearer_auth("alice-token")
            .send(),
    )
    .await
    .expect("a log");
    assert_eq!(follow.status(), 200);

    drop(holder);
    let next = bounded("a list while the tunnels are open", list())
        .await
        .expect("a list");
    assert_eq!(next.status(), 200);
    assert!(
        next.headers()
            .contains_key("x-kubernetes-pf-prioritylevel-uid")
    );
    for socket in &mut tunnels {
        assert_echoes(socket, Message::text("still open")).await;
    }
}
