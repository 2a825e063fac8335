//! The reverse proxy over real sockets: headers forwarded and hop-by-hop ones
//! dropped both ways, `X-Forwarded-*` set, Host rewritten; bodies streaming
//! both ways; an upstream that is down (503), too slow (504), or https
//! (verified with the route's `ca`); request bodies over the limit (413).

use bytes::Bytes;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

use crate::support::*;

fn manifest(upstream: &Upstream, extra_routes: &str) -> String {
    let up = upstream.url();
    plaintext(&format!(
        r#"
[limits]
max_request_body = "1KiB"

[[servers]]
name = "proxy"

[[servers.routes]]
prefix = "/up/"
upstream = "{up}"

[[servers.routes]]
prefix = "/based/"
upstream = "{up}/base/"

[[servers.routes]]
prefix = "/impatient/"
upstream = {{ url = "{up}", timeout = "300ms" }}
{extra_routes}
"#
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_headers_are_forwarded_without_hop_by_hop_ones() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&manifest(&upstream, "")).await;
    let request = "GET /up/headers?a=1 HTTP/1.1\r\n\
         Host: gateway.example:8443\r\n\
         X-Custom: kept\r\n\
         Connection: x-drop-me, close\r\n\
         X-Drop-Me: secret\r\n\
         Keep-Alive: timeout=5\r\n\
         Proxy-Authorization: Basic c2VjcmV0\r\n\
         Proxy-Connection: keep-alive\r\n\
         TE: gzip, trailers\r\n\
         X-Forwarded-For: 10.1.2.3\r\n\
         X-Forwarded-For: 10.4.5.6, 10.7.8.9\r\n\
         \r\n";
    let mut stream = tokio::net::TcpStream::connect(gateway.addr)
        .await
        .expect("connect");
    stream.write_all(request.as_bytes()).await.expect("write");
    let (head, body) = read_one_response(&mut stream).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let echo: serde_json::Value = serde_json::from_str(&body).expect("the upstream's echo");
    assert_eq!(echo["path"], "/up/headers?a=1");
    let headers = &echo["headers"];
    assert_eq!(headers["x-custom"], serde_json::json!(["kept"]));
    for dropped in [
        "x-drop-me",
        "keep-alive",
        "proxy-authorization",
        "proxy-connection",
    ] {
        assert!(
            headers.get(dropped).is_none(),
            "{dropped} reached the upstream: {headers}"
        );
    }
    // Only the `trailers` of `TE` passes, as Go's `ReverseProxy` passes it.
    assert_eq!(headers["te"], serde_json::json!(["trailers"]));
    if let Some(connection) = headers.get("connection") {
        let text = connection.to_string();
        assert!(
            !text.contains("x-drop-me") && !text.contains("close"),
            "the client's Connection was forwarded: {text}"
        );
    }
    assert_eq!(
        headers["x-forwarded-for"],
        serde_json::json!(["127.0.0.1"]),
        "the peer is no trusted proxy: its X-Forwarded-For is not believed \
         (tests/it/hostile_headers.rs covers a trusted one's, appended to)"
    );
    assert_eq!(headers["x-forwarded-proto"], serde_json::json!(["http"]));
    assert_eq!(
        headers["x-forwarded-host"],
        serde_json::json!(["gateway.example:8443"])
    );
    assert_eq!(
        headers["host"],
        serde_json::json!([upstream.addr.to_string()]),
        "Host is the upstream's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_headers_over_http2_and_a_base_path() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&manifest(&upstream, "")).await;
    // h2c: no Host header, the authority is in the URI.
    let answer = get(&h2c_client(), &gateway.url("/based/x?y=z")).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.version, http::Version::HTTP_2);
    let echo = answer.json();
    assert_eq!(
        echo["path"], "/base/based/x?y=z",
        "the upstream's base path comes first"
    );
    assert_eq!(
        echo["headers"]["x-forwarded-for"],
        serde_json::json!(["127.0.0.1"])
    );
    assert_eq!(
        echo["headers"]["x-forwarded-host"],
        serde_json::json!([gateway.addr.to_string()])
    );
    assert_eq!(
        echo["headers"]["host"],
        serde_json::json!([upstream.addr.to_string()])
    );
}

/// Over HTTP/2 a client may split `Cookie` into several fields (RFC 9113
/// §8.2.3); they are joined with `"; "` into the one an HTTP/1.1 upstream
/// takes, as Go's HTTP/2 server joins them before kube's handlers see the
/// request (`NewServerRequest` in
/// `vendor/golang.org/x/net/internal/httpcommon/request.go`, called by
/// `newWriterAndRequestNoBody` in `vendor/golang.org/x/net/http2/server.go`).
/// Over HTTP/1.1 the fields pass as sent, as Go's HTTP/1 server leaves them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_cookie_fields_reach_the_upstream_as_one() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&manifest(&upstream, "")).await;
    let with_cookies = |client: &reqwest::Client| {
        client
            .get(gateway.url("/up/cookies"))
            .header("cookie", "a=1")
            .header("cookie", "b=2; c=3")
            .header("cookie", "d=4")
    };
    let answer = send(with_cookies(&h2c_client())).await;
    assert_eq!(answer.version, http::Version::HTTP_2);
    assert_eq!(
        echoed_values(&echo(&answer), "cookie"),
        ["a=1; b=2; c=3; d=4"]
    );
    let answer = send(with_cookies(&http_client())).await;
    assert_eq!(answer.version, http::Version::HTTP_11);
    assert_eq!(
        echoed_values(&echo(&answer), "cookie"),
        ["a=1", "b=2; c=3", "d=4"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hop_by_hop_response_headers_are_dropped() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&manifest(&upstream, "")).await;
    // Over HTTP/2 a connection-specific header would break the stream.
    for client in [http_client(), h2c_client()] {
        let answer = send(client.get(gateway.url("/up/hop")).header(MODE, "hop")).await;
        assert_eq!(answer.status, 200);
        assert_eq!(
            answer.header("x-upstream"),
            Some("yes"),
            "an end-to-end header is kept"
        );
        // Not hop-by-hop (RFC 9110 §6.6.2): Go's `ReverseProxy` announces
        // the upstream's trailers too.
        assert_eq!(answer.header("trailer"), Some("x-trailer"));
        for dropped in [
            "x-hop-response",
            "keep-alive",
            "proxy-authenticate",
            "connection",
        ] {
            assert!(
                answer.header(dropped).is_none(),
                "{dropped} reached the client: {:?}",
                answer.headers
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_response_arrives_chunk_by_chunk() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&manifest(&upstream, "")).await;
    for client in [http_client(), h2c_client()] {
        let mut response = bounded(
            "response headers",
            client
                .get(gateway.url("/up/stream"))
                .header(MODE, "stream")
                .send(),
        )
        .await
        .expect("a response");
        assert_eq!(response.status(), 200);
        // The upstream sends the rest only once released: the first chunk
        // must get through on its own.
        let first = bounded("the first chunk", response.chunk())
            .await
            .expect("a chunk")
            .expect("not the end");
        assert_eq!(first, Bytes::from_static(b"first\n"));
        upstream.release(1);
        let mut rest = Vec::new();
        while let Some(chunk) = bounded("the next chunk", response.chunk())
            .await
            .expect("a chunk")
        {
            rest.extend_from_slice(&chunk);
        }
        assert_eq!(String::from_utf8_lossy(&rest), "second\nthird\n");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_request_body_reaches_the_upstream_as_it_is_sent() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&manifest(&upstream, "")).await;
    let (sender, mut receiver) = tokio::sync::mpsc::channel::<Bytes>(4);
    let stream = futures_util::stream::poll_fn(move |cx| {
        receiver
            .poll_recv(cx)
            .map(|chunk| chunk.map(Ok::<_, std::io::Error>))
    });
    let request = http_client()
        .post(gateway.url("/up/upload"))
        .header(MODE, "chunks")
        .body(reqwest::Body::wrap_stream(stream))
        .send();
    let pending = tokio::spawn(request);
    sender
        .send(Bytes::from_static(b"alpha-"))
        .await
        .expect("send a chunk");
    // The second chunk is not sent until the first reached the upstream.
    assert_eq!(upstream.next_body_bytes(6).await, b"alpha-");
    sender
        .send(Bytes::from_static(b"omega"))
        .await
        .expect("send a chunk");
    drop(sender);
    let response = bounded("the upload's response", pending)
        .await
        .expect("the task")
        .expect("a response");
    let answer = Answer::of(response).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["body"], "alpha-omega");
    assert_eq!(answer.json()["method"], "POST");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_is_down_is_a_503() {
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let dead = closed.local_addr().expect("an address");
    drop(closed);
    let upstream = Upstream::start().await;
    let route =
        format!("\n[[servers.routes]]\nprefix = \"/dead/\"\nupstream = \"http://{dead}\"\n");
    let gateway = TestGateway::start(&manifest(&upstream, &route)).await;
    let answer = get(&http_client(), &gateway.url("/dead/x")).await;
    answer.assert_status(503, "ServiceUnavailable");
    // The gateway goes on serving.
    assert_eq!(get(&http_client(), &gateway.url("/up/x")).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_hangs_past_its_timeout_is_a_504() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&manifest(&upstream, "")).await;
    let answer = send(
        http_client()
            .get(gateway.url("/impatient/x"))
            .header(MODE, "hang"),
    )
    .await;
    answer.assert_status(504, "Timeout");
    // Without a hang the same route answers.
    let fine = get(&http_client(), &gateway.url("/impatient/x")).await;
    assert_eq!(fine.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_upstream_is_verified_with_the_routes_ca() {
    let dir = new_dir();
    let ca = Ca::new("upstream CA");
    std::fs::write(dir.path().join("upstream-ca.crt"), &ca.cert_pem).expect("write the CA");
    let secure = Upstream::start_tls(&ca.server_cert()).await;
    let stranger = Upstream::start_tls(&Ca::new("someone else's CA").server_cert()).await;
    let plain = Upstream::start().await;
    let routes = format!(
        r#"
[[servers.routes]]
prefix = "/secure/"
upstream = {{ url = "{}", ca = "upstream-ca.crt" }}

[[servers.routes]]
prefix = "/stranger/"
upstream = {{ url = "{}", ca = "upstream-ca.crt" }}
"#,
        secure.url(),
        stranger.url()
    );
    let gateway = TestGateway::start_in(dir, &manifest(&plain, &routes)).await;
    let client = http_client();
    let answer = send(client.post(gateway.url("/secure/x?q=1")).body("payload")).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let echo = answer.json();
    assert_eq!(echo["path"], "/secure/x?q=1");
    assert_eq!(echo["body"], "payload");
    assert_eq!(secure.hits(), 1);

    // A certificate the CA did not sign: the TLS handshake to the upstream
    // fails, and the client is told the upstream is unavailable.
    let refused = get(&client, &gateway.url("/stranger/x")).await;
    refused.assert_status(503, "ServiceUnavailable");
    assert_eq!(stranger.hits(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_over_the_limit_is_a_413() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&manifest(&upstream, "")).await;
    let chunks: Vec<Result<Bytes, std::io::Error>> =
        (0..4).map(|_| Ok(Bytes::from(vec![b'a'; 400]))).collect();
    let body = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
    let answer = send(http_client().post(gateway.url("/up/big")).body(body)).await;
    let status = answer.assert_status(413, "RequestEntityTooLarge");
    assert_eq!(status["message"], "Request entity too large: limit is 1024");

    // A chunked body under the limit goes through whole.
    let chunks: Vec<Result<Bytes, std::io::Error>> =
        (0..2).map(|_| Ok(Bytes::from(vec![b'b'; 400]))).collect();
    let body = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
    let answer = send(http_client().post(gateway.url("/up/small")).body(body)).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["body"].as_str().map(str::len), Some(800));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_length_over_the_limit_is_a_413_at_once() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&manifest(&upstream, "")).await;
    let answer = send(
        http_client()
            .put(gateway.url("/up/big"))
            .body(vec![b'a'; 2048]),
    )
    .await;
    answer.assert_status(413, "RequestEntityTooLarge");
    assert_eq!(upstream.hits(), 0, "refused before the upstream was asked");
    let exact = send(
        http_client()
            .put(gateway.url("/up/edge"))
            .body(vec![b'a'; 1024]),
    )
    .await;
    assert_eq!(
        exact.status, 200,
        "a body of exactly the limit is allowed: {}",
        exact.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_request_body_is_the_clients_fault() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&manifest(&upstream, "")).await;
    let request = b"POST /up/bad HTTP/1.1\r\nHost: gateway\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
                    3\r\nabc\r\nzz\r\nabc\r\n0\r\n\r\n";
    let answer = raw_exchange(gateway.addr, request).await;
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    let status: serde_json::Value =
        serde_json::from_str(body).unwrap_or_else(|_| panic!("a Status: {answer}"));
    assert_eq!(status["reason"], "BadRequest", "{answer}");
    assert_eq!(status["message"], "the request body could not be read");
}

/// A scripted HTTP/1.1 upstream on raw sockets, for what the pool does with
/// connections: it counts the connections it accepts and answers by path.
/// `/length` has a `Content-Length` body, `/chunked` a chunked one, `/empty`
/// is a 204; `/close-after` answers like `/length`, then closes the
/// connection as an upstream's idle timeout would, without warning;
/// `/drop-next` answers like `/length`, then closes the connection on the
/// next request without answering it (the close and the request crossed);
/// `/stall` sends the head and half of its body, then nothing; `/early`
/// answers at once without reading the request's body, then waits;
/// `/te-and-length` is framed by its chunks and by a false `Content-Length`;
/// `/unasked-101` switches protocols whatever was asked, then waits;
/// `/ignores-upgrade` answers an upgrade as an ordinary GET, a 200.
struct ScriptedUpstream {
    addr: std::net::SocketAddr,
    connections: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ScriptedUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ScriptedUpstream {
    async fn start() -> ScriptedUpstream {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("an address");
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = connections.clone();
        let task = tokio::spawn(async move {
            let mut serving = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                serving.spawn(Self::serve(stream));
            }
        });
        ScriptedUpstream {
            addr,
            connections,
            task,
        }
    }

    async fn serve(stream: tokio::net::TcpStream) {
        let mut reader = tokio::io::BufReader::new(stream);
        loop {
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).await.unwrap_or(0) == 0 {
                return;
            }
            // The gateway's GETs have no body: the head ends at a blank line.
            let mut line = String::new();
            while reader.read_line(&mut line).await.unwrap_or(0) > 2 {
                line.clear();
            }
            let path = request_line.split(' ').nth(1).unwrap_or("/");
            let answer: &[u8] = match path {
                "/length" | "/close-after" | "/drop-next" => b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
                "/chunked" => {
                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhe\r\n3\r\nllo\r\n0\r\n\r\n"
                }
                "/empty" => b"HTTP/1.1 204 No Content\r\n\r\n",
                "/stall" => b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello",
                "/early" => b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nearly",
                "/unasked-101" => {
                    b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: raw\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
                }
                "/ignores-upgrade" => {
                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
                }
                "/te-and-length" => {
                    b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
                }
                _ => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
            };
            // A HEAD's answer is the head alone.
            let answer = match request_line.starts_with("HEAD ") {
                true => {
                    &answer[..answer
                        .windows(4)
                        .position(|w| w == b"\r\n\r\n")
                        .map_or(answer.len(), |end| end + 4)]
                }
                false => answer,
            };
            if reader.get_mut().write_all(answer).await.is_err() {
                return;
            }
            match path {
                "/close-after" => return,
                "/drop-next" => {
                    let mut next = String::new();
                    let _ = reader.read_line(&mut next).await;
                    return;
                }
                "/stall" | "/early" | "/unasked-101" => std::future::pending::<()>().await,
                _ => {}
            }
        }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

fn scripted_manifest(upstream: &ScriptedUpstream) -> String {
    plaintext(&format!(
        "[[servers]]\nname = \"proxy\"\n\n[[servers.routes]]\nprefix = \"/\"\nupstream = \"http://{}\"\n",
        upstream.addr
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_keep_alive_connection_carries_every_kind_of_response() {
    let upstream = ScriptedUpstream::start().await;
    let gateway = TestGateway::start(&scripted_manifest(&upstream)).await;
    let client = http_client();
    for _ in 0..3 {
        for (path, status, body) in [
            ("/length", 200, "hello"),
            ("/chunked", 200, "hello"),
            ("/empty", 204, ""),
        ] {
            let answer = get(&client, &gateway.url(path)).await;
            assert_eq!(
                (answer.status, answer.body.as_str()),
                (status, body),
                "{path}"
            );
        }
        let head = send(client.head(gateway.url("/length"))).await;
        assert_eq!(head.status, 200);
    }
    assert_eq!(
        upstream.connections(),
        1,
        "every answer returned its connection"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_the_upstream_closed_while_idle_is_not_reused() {
    let upstream = ScriptedUpstream::start().await;
    let gateway = TestGateway::start(&scripted_manifest(&upstream)).await;
    let client = http_client();
    for round in 1..=4 {
        let answer = get(&client, &gateway.url("/close-after")).await;
        assert_eq!(
            (answer.status, answer.body.as_str()),
            (200, "hello"),
            "round {round}"
        );
    }
    assert_eq!(upstream.connections(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_lost_with_a_reused_connection_is_sent_again_only_if_it_may_be_repeated() {
    let upstream = ScriptedUpstream::start().await;
    let gateway = TestGateway::start(&scripted_manifest(&upstream)).await;
    let client = http_client();
    let url = gateway.url("/drop-next");
    let first = get(&client, &url).await;
    assert_eq!((first.status, first.body.as_str()), (200, "hello"));
    // The GET goes out on the idle connection, which drops it: it is sent
    // again on a new one.
    let again = get(&client, &url).await;
    assert_eq!((again.status, again.body.as_str()), (200, "hello"));
    assert_eq!(upstream.connections(), 2);
    // A POST may not be repeated: the client hears that the exchange failed.
    let post = send(client.post(&url)).await;
    assert_eq!(post.status, 502, "{}", post.body);
    assert_eq!(upstream.connections(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_abandoned_half_read_takes_its_connection_with_it() {
    let upstream = ScriptedUpstream::start().await;
    let gateway = TestGateway::start(&scripted_manifest(&upstream)).await;
    let mut client = raw_request(
        gateway.addr,
        b"GET /stall HTTP/1.1\r\nHost: gateway\r\n\r\n",
    )
    .await;
    let mut head = [0u8; 64];
    let read = bounded("the stalled response's head", client.read(&mut head))
        .await
        .expect("read");
    assert!(head[..read].starts_with(b"HTTP/1.1 200"));
    drop(client);
    // The half-read connection is never handed to another request.
    let answer = get(&http_client(), &gateway.url("/length")).await;
    assert_eq!((answer.status, answer.body.as_str()), (200, "hello"));
    assert_eq!(upstream.connections(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_request_waits_behind_an_upload_the_upstream_answered_early() {
    let upstream = ScriptedUpstream::start().await;
    let gateway = TestGateway::start(&scripted_manifest(&upstream)).await;
    // A client that starts a chunked upload and never finishes it; the
    // upstream answers it without reading the body.
    let mut uploader = raw_request(
        gateway.addr,
        b"POST /early HTTP/1.1\r\nHost: gateway\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
    )
    .await;
    let (head, body) = read_one_response(&mut uploader).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body, "early");
    // That connection to the upstream is still sending the upload: the next
    // request goes on another one rather than wait for it.
    let answer = get(&http_client(), &gateway.url("/length")).await;
    assert_eq!((answer.status, answer.body.as_str()), (200, "hello"));
    assert_eq!(upstream.connections(), 2);
    drop(uploader);
}

/// A 101 to a request that asked for no upgrade is the upstream switching
/// the connection under the gateway: Go's `ReverseProxy` (kube's proxy)
/// answers it 502, and so does the gateway, whose client never sees a 101
/// it did not ask for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_101_the_client_did_not_ask_for_is_a_502() {
    let upstream = ScriptedUpstream::start().await;
    let gateway = TestGateway::start(&scripted_manifest(&upstream)).await;
    let mut client = raw_request(
        gateway.addr,
        b"GET /unasked-101 HTTP/1.1\r\nHost: gateway\r\n\r\n",
    )
    .await;
    let (head, body) = read_one_response(&mut client).await;
    assert!(head.starts_with("HTTP/1.1 502"), "{head}\n\n{body}");
    let status: serde_json::Value = serde_json::from_str(&body).expect("a Status");
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["code"], 502);
    // The switched connection never carries another request.
    let answer = get(&http_client(), &gateway.url("/length")).await;
    assert_eq!((answer.status, answer.body.as_str()), (200, "hello"));
    assert_eq!(upstream.connections(), 2);
}

/// An upstream's response framed both by chunks and by a length is framed
/// by its chunks (RFC 9112 §6.3): the client gets the whole body, framed
/// once, and its connection stays usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_with_transfer_encoding_and_content_length_is_framed_once() {
    let upstream = ScriptedUpstream::start().await;
    let gateway = TestGateway::start(&scripted_manifest(&upstream)).await;
    let mut client = raw_request(
        gateway.addr,
        b"GET /te-and-length HTTP/1.1\r\nHost: gateway\r\n\r\nGET /length HTTP/1.1\r\nHost: gateway\r\n\r\n",
    )
    .await;
    let received = bounded("two responses", async {
        let mut received = Vec::new();
        let mut buffer = [0u8; 4096];
        while String::from_utf8_lossy(&received)
            .matches("HTTP/1.1 ")
            .count()
            < 2
            || !received.ends_with(b"hello")
        {
            let n = client.read(&mut buffer).await.expect("read");
            if n == 0 {
                break;
            }
            received.extend_from_slice(&buffer[..n]);
        }
        String::from_utf8_lossy(&received).into_owned()
    })
    .await;
    let first = received
        .split("HTTP/1.1 ")
        .nth(1)
        .unwrap_or_default()
        .to_ascii_lowercase();
    assert!(
        !(first.contains("content-length:") && first.contains("transfer-encoding:")),
        "{received}"
    );
    assert!(first.contains("hello"), "{received}");
    assert_eq!(received.matches("HTTP/1.1 200").count(), 2, "{received}");
}

/// An upstream that takes every connection and never answers; each
/// arrival is told on the channel.
async fn silent_upstream() -> (
    std::net::SocketAddr,
    tokio::sync::mpsc::Receiver<()>,
    tokio::task::JoinHandle<()>,
) {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = silent.local_addr().expect("an address");
    let (arrived, arrival) = tokio::sync::mpsc::channel(1);
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            held.push(stream);
            let _ = arrived.try_send(());
        }
    });
    (addr, arrival, holder)
}

/// A long-running request whose upstream takes it and never answers (an
/// upgrade not yet a tunnel, a watch whose head never comes) has no request
/// timeout to end it: at shutdown it ends once `shutdown_delay` has passed,
/// as an open tunnel or a streaming watch does, rather than hold the drain
/// until `shutdown_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shutdown_ends_a_long_running_request_still_waiting_for_its_answer() {
    let upgrade: &[u8] = b"GET /api/v1/namespaces/default/pods/p/exec?command=sh HTTP/1.1\r\nHost: gateway\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
    let watch: &[u8] =
        b"GET /api/v1/namespaces/default/pods?watch=true HTTP/1.1\r\nHost: gateway\r\n\r\n";
    for request in [upgrade, watch] {
        let (addr, mut arrival, holder) = silent_upstream().await;
        let manifest = plaintext(&format!(
            "[limits]\nshutdown_delay = \"1s\"\nshutdown_timeout = \"30s\"\n\n[[servers]]\nname = \"proxy\"\n\n[[servers.routes]]\nprefix = \"/\"\nupstream = \"http://{addr}\"\n"
        ));
        let mut gateway = TestGateway::start(&manifest).await;
        let mut client = raw_request(gateway.addr, request).await;
        bounded("the request at the upstream", arrival.recv()).await;
        let started = Instant::now();
        let shutdown = gateway.begin_shutdown();
        // The client's connection ends with the others at shutdown_delay; if
        // anything reaches it first, it is the 503, never a 101 or a 200.
        let answer = bounded("the connection's end", read_to_close(&mut client)).await;
        let what = String::from_utf8_lossy(request);
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 503"),
            "{what}: {answer}"
        );
        let drained = tokio::time::timeout(Duration::from_secs(8), shutdown)
            .await
            .expect("the drain ends well before shutdown_timeout")
            .expect("the shutdown");
        let lasted = started.elapsed();
        assert_eq!(drained, wasmgate::server::Drained::Complete, "{what}");
        assert!(
            lasted >= Duration::from_millis(900),
            "{what}: ended {lasted:?} after the shutdown began, before shutdown_delay"
        );
        holder.abort();
    }
}

/// The watch the shutdown ends before its answer came is refused as kube
/// refuses what its shutdown no longer serves
/// (`staging/src/k8s.io/apiserver/pkg/server/filters/waitgroup.go`): a 503
/// ServiceUnavailable Status with `Retry-After: 1`, which client-go retries
/// at once on a new connection, likely to another server; without the
/// header it hands the error to its caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_the_shutdown_ends_before_its_answer_is_told_to_retry_in_a_second() {
    let (addr, mut arrival, holder) = silent_upstream().await;
    let manifest = plaintext(&format!(
        "[[servers]]\nname = \"proxy\"\n\n[[servers.routes]]\nprefix = \"/\"\nupstream = \"http://{addr}\"\n"
    ));
    let mut gateway = TestGateway::start(&manifest).await;
    let url = gateway.url("/api/v1/namespaces/default/pods?watch=true");
    let watch = tokio::spawn(async move { get(&http_client(), &url).await });
    bounded("the watch at the upstream", arrival.recv()).await;
    let shutdown = gateway.begin_shutdown();
    let answer = bounded("the watch's answer", watch)
        .await
        .expect("the watch task");
    let status = answer.assert_status(503, "ServiceUnavailable");
    assert_eq!(
        status["message"], "the gateway shut down before the response began",
        "{status}"
    );
    assert_eq!(
        answer.header("retry-after"),
        Some("1"),
        "{:?}",
        answer.headers
    );
    let drained = bounded("the shutdown", shutdown)
        .await
        .expect("the shutdown task");
    assert_eq!(drained, wasmgate::server::Drained::Complete);
    holder.abort();
}

/// Over HTTP/2 a 2xx to an extended CONNECT means the tunnel is open (RFC
/// 8441 §5): an upstream that answers the WebSocket `GET` it stands for
/// with a 200, ignoring the upgrade, switched nothing, and the client must
/// not be told it did: a 502 Status, as for a wrong `Sec-WebSocket-Accept`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_ignores_an_http2_websockets_upgrade_is_a_502() {
    let upstream = ScriptedUpstream::start().await;
    let gateway = TestGateway::start(&scripted_manifest(&upstream)).await;
    let (mut sender, connection) = h2c_handshake(gateway.addr).await;
    tokio::spawn(connection);
    // One exchange first, so the gateway's SETTINGS (with
    // ENABLE_CONNECT_PROTOCOL) have arrived.
    let first = http::Request::get(format!("http://{}/length", gateway.addr))
        .body(http_body_util::Empty::new())
        .expect("a request");
    bounded("the first answer", sender.send_request(first))
        .await
        .expect("an answer");
    let mut connect = http::Request::builder()
        .method(http::Method::CONNECT)
        .uri(format!("http://{}/ignores-upgrade", gateway.addr))
        .header("sec-websocket-version", "13")
        .body(http_body_util::Empty::new())
        .expect("a CONNECT request");
    connect
        .extensions_mut()
        .insert(hyper::ext::Protocol::from_static("websocket"));
    let response = bounded("the CONNECT's answer", sender.send_request(connect))
        .await
        .expect("an answer");
    assert_eq!(response.status(), 502);
}

/// Trailers pass as Go's `ReverseProxy` (kube's proxy) passes them: the
/// client's `TE: trailers` reaches the upstream (a server may send trailers
/// only to a client that says it takes them, hyper's among them), and the
/// upstream's `Trailer` announcement reaches the client with the trailer
/// fields after the body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trailers_reach_a_client_that_takes_them() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("an address");
    let _upstream = spawn_server(listener, None, |request| async move {
        let te = request
            .headers()
            .get("te")
            .map(|value| value.to_str().unwrap_or_default().to_owned())
            .unwrap_or_default();
        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-checksum", http::HeaderValue::from_static("abc123"));
        let frames = [
            Ok(hyper::body::Frame::data(Bytes::from(format!("te={te}\n")))),
            Ok(hyper::body::Frame::trailers(trailers)),
        ];
        let body = http_body_util::StreamBody::new(futures_util::stream::iter(frames));
        let response = http::Response::builder()
            .header("trailer", "x-checksum")
            .body(http_body_util::BodyExt::boxed_unsync(body))
            .expect("a response");
        Ok::<_, std::convert::Infallible>(response)
    });
    let gateway = TestGateway::start(&plaintext(&format!(
        "[[servers]]\nname = \"proxy\"\n\n[[servers.routes]]\nprefix = \"/\"\nupstream = \"http://{addr}\"\n"
    )))
    .await;
    let answer = raw_exchange(
        gateway.addr,
        b"GET /t HTTP/1.1\r\nHost: gateway\r\nTE: trailers\r\nConnection: close\r\n\r\n",
    )
    .await
    .to_ascii_lowercase();
    assert!(answer.contains("te=trailers\n"), "{answer}");
    assert!(answer.contains("\r\ntrailer: x-checksum\r\n"), "{answer}");
    assert!(
        answer.ends_with("\r\n0\r\nx-checksum: abc123\r\n\r\n"),
        "{answer}"
    );
}
