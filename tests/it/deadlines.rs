//! Deadlines that hold, over real sockets against a real upstream: a
//! non-long-running response is over at the request timeout, body included
//! (a slow reader loses the stream at the deadline and its max-in-flight
//! slot goes to the next request), over HTTP/1.1 and HTTP/2; a slowloris
//! client is cut at `read_header_timeout`, on a new connection and between
//! the requests of a keep-alive one; an idle keep-alive connection lives
//! until `idle_timeout` (not `read_header_timeout`) and then closes, over
//! HTTP/1.1 and HTTP/2.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::*;

/// What the upstream's `large` answer sends: far more than the socket
/// buffers on both sides hold.
const LARGE_MIB: usize = 64;
const LARGE: &str = "large:64";

/// One slot, one second.
const ONE_SLOT: &str = "max_requests_in_flight = 1\nrequest_timeout = \"1s\"";

/// A read-only request that fits the slot the slow reader held: served,
/// not refused with 429.
async fn assert_slot_is_free(gateway: &TestGateway) {
    let answer = get(&http_client(), &gateway.url("/static")).await;
    assert_eq!(
        answer.status, 200,
        "the slow reader's slot was released at its deadline: {}",
        answer.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_http1_reader_loses_the_stream_at_the_deadline_and_its_slot() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&limits_manifest(&upstream, ONE_SLOT)).await;
    // A client with a small receive buffer reading 16 KiB every 250 ms
    // (64 KiB/s), for longer than the request timeout.
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    socket
        .set_recv_buffer_size(16 * 1024)
        .expect("a small receive buffer");
    let mut stream = bounded("a connection", socket.connect(gateway.addr))
        .await
        .expect("connect");
    let request = format!("GET /up/large HTTP/1.1\r\nHost: gateway\r\n{MODE}: {LARGE}\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("write the request");
    let mut received = Vec::new();
    let mut buffer = vec![0u8; 16 * 1024];
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(1500) {
        let n = bounded("a slow read", stream.read(&mut buffer))
            .await
            .unwrap_or(0);
        if n == 0 {
            let ended = started.elapsed();
            assert!(ended >= Duration::from_millis(900), "ended after {ended:?}");
            break;
        }
        received.extend_from_slice(&buffer[..n]);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let head = String::from_utf8_lossy(&received[..received.len().min(512)]).into_owned();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");

    assert_slot_is_free(&gateway).await;

    // What was already in the socket buffers still arrives; then the
    // connection ends, far short of the whole response.
    let rest = read_to_close(&mut stream).await;
    let total = received.len() + rest.len();
    assert!(
        total < LARGE_MIB * 1024 * 1024 / 2,
        "the stream was cut at the deadline: {total} bytes arrived"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_http2_reader_loses_the_stream_at_the_deadline_and_its_slot() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&limits_manifest(&upstream, ONE_SLOT)).await;
    let response = bounded(
        "the response head",
        h2c_client()
            .get(gateway.url("/up/large"))
            .header(MODE, LARGE)
            .send(),
    )
    .await
    .expect("a response");
    assert_eq!(response.status(), 200);
    assert_eq!(response.version(), http::Version::HTTP_2);
    // Nothing read past the head: the stream's flow-control window fills
    // up and the gateway cannot send; the deadline passes meanwhile.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    assert_slot_is_free(&gateway).await;

    // Reading on, the client meets the stream's reset.
    let mut response = response;
    let mut total = 0usize;
    let ended = loop {
        match bounded("the rest of the stream", response.chunk()).await {
            Ok(Some(chunk)) => total += chunk.len(),
            Ok(None) => break Ok(()),
            Err(error) => break Err(error),
        }
    };
    assert!(
        ended.is_err(),
        "the stream was reset, not ended cleanly, after {total} bytes"
    );
    assert!(total < LARGE_MIB * 1024 * 1024 / 2, "{total} bytes arrived");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quick_reader_gets_the_whole_response_within_the_deadline() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&limits_manifest(
        &upstream,
        "max_requests_in_flight = 1\nrequest_timeout = \"10s\"",
    ))
    .await;
    let answer = send(
        http_client()
            .get(gateway.url("/up/large"))
            .header(MODE, "large:8"),
    )
    .await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body.len(), 8 * 1024 * 1024);
    // Its slot was given back when the body ended.
    assert_slot_is_free(&gateway).await;
}

/// Sends `bytes` one at a time, `pause` apart, watching for the server to
/// close the connection; returns how long after the first byte it did, or
/// None if every byte went out.
async fn dribble(stream: &mut TcpStream, bytes: &[u8], pause: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut buffer = [0u8; 1024];
    for byte in bytes {
        if stream.write_all(&[*byte]).await.is_err() {
            return Some(started.elapsed());
        }
        tokio::select! {
            read = stream.read(&mut buffer) => match read {
                Ok(0) | Err(_) => return Some(started.elapsed()),
                Ok(n) => panic!(
                    "the server answered a partial head: {}",
                    String::from_utf8_lossy(&buffer[..n])
                ),
            },
            () = tokio::time::sleep(pause) => {}
        }
    }
    None
}

/// A head that takes 20 s to send a byte at a time.
fn endless_head() -> Vec<u8> {
    let mut head = b"GET /static HTTP/1.1\r\nHost: gateway\r\nX-Pad: ".to_vec();
    head.resize(400, b'a');
    head
}

const PAUSE: Duration = Duration::from_millis(50);

/// The cut comes from the header deadline: not before it, and long before
/// the head could be complete.
fn assert_cut_at_the_header_deadline(cut: Option<Duration>) {
    let cut = cut.expect("the slowloris client was cut off");
    assert!(
        cut >= Duration::from_millis(400) && cut < Duration::from_secs(5),
        "cut after {cut:?}, read_header_timeout is 500ms"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slowloris_client_is_cut_at_the_read_header_timeout() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&limits_manifest(
        &upstream,
        "read_header_timeout = \"500ms\"\nidle_timeout = \"30s\"",
    ))
    .await;
    let mut stream = connect(gateway.addr).await;
    assert_cut_at_the_header_deadline(dribble(&mut stream, &endless_head(), PAUSE).await);
    assert_eq!(
        get(&http_client(), &gateway.url("/static")).await.body,
        "static",
        "whole requests are still served"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slowloris_head_after_a_keep_alive_pause_is_cut_at_the_read_header_timeout() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&limits_manifest(
        &upstream,
        "read_header_timeout = \"500ms\"\nidle_timeout = \"30s\"",
    ))
    .await;
    let mut stream = connect(gateway.addr).await;
    get_static_on(&mut stream).await;
    // Idle for twice the header timeout: the idle timeout governs that.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    // The next head's deadline runs from its first byte.
    assert_cut_at_the_header_deadline(dribble(&mut stream, &endless_head(), PAUSE).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_http1_keep_alive_connection_lives_until_the_idle_timeout() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&limits_manifest(
        &upstream,
        "read_header_timeout = \"300ms\"\nidle_timeout = \"1500ms\"",
    ))
    .await;
    let mut stream = connect(gateway.addr).await;
    get_static_on(&mut stream).await;
    // Three header timeouts of silence: the connection is still there.
    tokio::time::sleep(Duration::from_millis(900)).await;
    get_static_on(&mut stream).await;
    let last_response = Instant::now();
    let rest = read_to_close(&mut stream).await;
    let idle = last_response.elapsed();
    assert_eq!(rest, "", "nothing more is sent before the close");
    assert!(
        idle >= Duration::from_millis(1200),
        "closed after {idle:?} idle, idle_timeout is 1500ms"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_http2_connection_lives_until_the_idle_timeout() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&limits_manifest(
        &upstream,
        "read_header_timeout = \"300ms\"\nidle_timeout = \"1500ms\"",
    ))
    .await;
    let (mut sender, connection) = h2c_handshake(gateway.addr).await;
    let (closed_tx, closed_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let result = connection.await;
        let _ = closed_tx.send((Instant::now(), result.is_ok()));
    });
    get_static_over_h2(&mut sender, gateway.addr).await;
    tokio::time::sleep(Duration::from_millis(900)).await;
    get_static_over_h2(&mut sender, gateway.addr).await;
    let last_response = Instant::now();
    let (closed_at, clean) = bounded("the server to close the connection", closed_rx)
        .await
        .expect("the connection task reports");
    assert!(clean, "closed with a GOAWAY, not an error");
    let idle = closed_at.duration_since(last_response);
    assert!(
        idle >= Duration::from_millis(1200),
        "closed after {idle:?} idle, idle_timeout is 1500ms"
    );
}
