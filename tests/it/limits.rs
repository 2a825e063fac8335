//! Server limits over real sockets: max-in-flight (mutating and read-only,
//! long-running exempt), request timeouts (the server's, the client's
//! `?timeout=`, watches exempt), header size (431), malformed HTTP (400) and
//! the idle timeout of keep-alive connections.

use std::time::Duration;

use tokio::io::AsyncWriteExt;

use crate::support::*;

const TOO_MANY: &str = "Too many requests, please try again later.\n";

fn assert_too_many(answer: &Answer) {
    assert_eq!(answer.status, 429, "{}", answer.body);
    assert_eq!(answer.header("retry-after"), Some("1"));
    assert_eq!(answer.body, TOO_MANY);
    assert_eq!(
        answer.header("content-type"),
        Some("text/plain; charset=utf-8")
    );
}

/// Starts a request whose response body the upstream holds until released;
/// returns once its headers arrived.
async fn hold(request: reqwest::RequestBuilder) -> reqwest::Response {
    let response = bounded(
        "the held request's headers",
        request.header(MODE, "stream").send(),
    )
    .await
    .expect("a response");
    assert_eq!(response.status(), 200);
    response
}

async fn finish(response: reqwest::Response) -> String {
    bounded("the held request's body", response.text())
        .await
        .expect("a body")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutating_requests_over_the_limit_get_429() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&limits_manifest(
        &upstream,
        "max_mutating_requests_in_flight = 1",
    ))
    .await;
    let client = http_client();
    let held = hold(client.post(gateway.url("/up/first")).body("x")).await;

    let second = send(client.post(gateway.url("/up/second")).body("y")).await;
    assert_too_many(&second);
    let delete =
        send(client.delete(gateway.url("/apis/g.example.io/v1/namespaces/a/widgets/w"))).await;
    assert_too_many(&delete);
    // Read-only requests have their own limit.
    assert_eq!(get(&client, &gateway.url("/up/read")).await.status, 200);
    assert_eq!(get(&client, &gateway.url("/static")).await.status, 200);

    // The slot is held until the response body has been sent.
    upstream.release(1);
    assert_eq!(finish(held).await, "first\nsecond\nthird\n");
    eventually("the slot to be free again", || {
        let request = client.post(gateway.url("/up/third")).body("z");
        async move { (send(request).await.status == 200).then_some(()) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_requests_over_the_limit_get_429_but_watches_are_not_counted() {
    let upstream = Upstream::start().await;
    let gateway =
        TestGateway::start(&limits_manifest(&upstream, "max_requests_in_flight = 1")).await;
    let client = http_client();

    // A long-running watch does not take the one slot.
    let watch =
        hold(client.get(gateway.url("/apis/g.example.io/v1/namespaces/a/widgets?watch=true")))
            .await;
    let list = get(
        &client,
        &gateway.url("/apis/g.example.io/v1/namespaces/a/widgets"),
    )
    .await;
    assert_eq!(list.status, 200, "{}", list.body);

    let held = hold(client.get(gateway.url("/up/held"))).await;
    assert_too_many(&get(&client, &gateway.url("/up/second")).await);
    assert_too_many(&get(&client, &gateway.url("/static")).await);
    // Mutating requests are limited separately.
    assert_eq!(
        send(client.post(gateway.url("/up/write")).body("w"))
            .await
            .status,
        200
    );

    upstream.release(2);
    assert_eq!(finish(held).await, "first\nsecond\nthird\n");
    assert_eq!(finish(watch).await, "first\nsecond\nthird\n");
    eventually("the slot to be free again", || {
        let request = client.get(gateway.url("/static"));
        async move { (send(request).await.status == 200).then_some(()) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_the_request_timeout_is_a_504() {
    let upstream = Upstream::start().await;
    let gateway =
        TestGateway::start(&limits_manifest(&upstream, "request_timeout = \"300ms\"")).await;
    let client = http_client();
    let answer = send(client.get(gateway.url("/up/slow")).header(MODE, "hang")).await;
    answer.assert_status(504, "Timeout");
    let answer = send(
        client
            .post(gateway.url("/apis/g.example.io/v1/namespaces/a/widgets"))
            .header(MODE, "hang"),
    )
    .await;
    answer.assert_status(504, "Timeout");
    // Quick requests are unaffected.
    assert_eq!(get(&client, &gateway.url("/up/quick")).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clients_shorter_timeout_wins() {
    let upstream = Upstream::start().await;
    let gateway =
        TestGateway::start(&limits_manifest(&upstream, "request_timeout = \"60s\"")).await;
    let client = http_client();
    let answer = send(
        client
            .get(gateway.url("/up/slow?timeout=100ms"))
            .header(MODE, "hang"),
    )
    .await;
    answer.assert_status(504, "Timeout");
    let answer = send(
        client
            .get(gateway.url("/apis/g.example.io/v1/widgets?timeout=1s"))
            .header(MODE, "hang"),
    )
    .await;
    answer.assert_status(504, "Timeout");
    // A timeout that is not a duration is the client's mistake.
    let bad = get(&client, &gateway.url("/up/x?timeout=soon")).await;
    bad.assert_status(400, "BadRequest");
    // As in kube, a timeout of 0 or less means the client set none: the
    // server's applies (client-go sends Go durations such as `1.5s`).
    for timeout in ["0s", "0", "-1s", "1.5s"] {
        let url = gateway.url(&format!("/up/x?timeout={timeout}"));
        let answer = send(client.get(url).header(MODE, "slow:300")).await;
        assert_eq!(answer.status, 200, "timeout={timeout}: {}", answer.body);
    }
    // A longer timeout than the server's does not extend it, and a quick
    // answer within the client's timeout is served.
    let ok = get(&client, &gateway.url("/up/x?timeout=5s")).await;
    assert_eq!(ok.status, 200);
    assert_eq!(
        ok.json()["path"],
        "/up/x?timeout=5s",
        "the query reaches the upstream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_are_not_timed_out() {
    let upstream = Upstream::start().await;
    let gateway =
        TestGateway::start(&limits_manifest(&upstream, "request_timeout = \"300ms\"")).await;
    let client = http_client();
    let watch = send(
        client
            .get(gateway.url("/apis/g.example.io/v1/namespaces/a/widgets?watch=true"))
            .header(MODE, "slow:1000"),
    )
    .await;
    assert_eq!(
        watch.status, 200,
        "a watch outlives the request timeout: {}",
        watch.body
    );
    assert_eq!(
        watch.json()["path"],
        "/apis/g.example.io/v1/namespaces/a/widgets?watch=true"
    );
    let watch_path = send(
        client
            .get(gateway.url("/apis/g.example.io/v1/watch/widgets"))
            .header(MODE, "slow:1000"),
    )
    .await;
    assert_eq!(watch_path.status, 200, "{}", watch_path.body);
    // The same wait on a list is cut off.
    let list = send(
        client
            .get(gateway.url("/apis/g.example.io/v1/namespaces/a/widgets"))
            .header(MODE, "slow:1000"),
    )
    .await;
    list.assert_status(504, "Timeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_over_max_header_bytes_get_431() {
    let upstream = Upstream::start().await;
    let gateway =
        TestGateway::start(&limits_manifest(&upstream, "max_header_bytes = \"16KiB\"")).await;
    let big = "x".repeat(20 * 1024);
    let request = format!(
        "GET /static HTTP/1.1\r\nHost: gateway\r\nX-Big: {big}\r\nConnection: close\r\n\r\n"
    );
    let answer = raw_exchange(gateway.addr, request.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");

    // Under the limit the same request is served.
    let fits = "x".repeat(8 * 1024);
    let request = format!(
        "GET /static HTTP/1.1\r\nHost: gateway\r\nX-Big: {fits}\r\nConnection: close\r\n\r\n"
    );
    let answer = raw_exchange(gateway.addr, request.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    assert!(answer.ends_with("static"), "{answer}");

    // Over HTTP/2 too.
    let h2 = send(
        h2c_client()
            .get(gateway.url("/static"))
            .header("x-big", big.as_str()),
    )
    .await;
    assert_eq!(h2.status, 431);
    let h2 = send(
        h2c_client()
            .get(gateway.url("/static"))
            .header("x-big", fits.as_str()),
    )
    .await;
    assert_eq!((h2.status, h2.body.as_str()), (200, "static"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_max_header_bytes_is_enforced_exactly() {
    let upstream = Upstream::start().await;
    let gateway =
        TestGateway::start(&limits_manifest(&upstream, "max_header_bytes = \"4KiB\"")).await;
    for (size, expected) in [(6 * 1024, "HTTP/1.1 431 "), (3 * 1024, "HTTP/1.1 200 ")] {
        let value = "x".repeat(size);
        let request = format!(
            "GET /static HTTP/1.1\r\nHost: gateway\r\nX-Big: {value}\r\nConnection: close\r\n\r\n"
        );
        let answer = raw_exchange(gateway.addr, request.as_bytes()).await;
        assert!(
            answer.starts_with(expected),
            "{size} bytes of header: {answer}"
        );
        let h2 = send(
            h2c_client()
                .get(gateway.url("/static"))
                .header("x-big", value.as_str()),
        )
        .await;
        assert_eq!(
            &format!("HTTP/1.1 {} ", h2.status),
            expected,
            "{size} bytes over h2c"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_http_gets_400_and_the_server_goes_on() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&limits_manifest(&upstream, "")).await;
    for garbage in [
        &b"GARBAGE\r\n\r\n"[..],
        b"GET /static HTTP/1.1\r\nHost: a\r\nBad Header Line\r\n\r\n",
        b"GET /static HTTP/9.9\r\nHost: a\r\n\r\n",
        b"GET /static HTTP/1.1\r\nHost: a\r\nContent-Length: -5\r\n\r\n",
        b"GET /static HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx",
        b"\x16\x03\x01\x00\x05hello\r\n\r\n",
    ] {
        let answer = raw_exchange(gateway.addr, garbage).await;
        assert!(
            answer.starts_with("HTTP/1.1 400 "),
            "{:?} got {answer:?}",
            String::from_utf8_lossy(garbage)
        );
        assert_eq!(
            get(&http_client(), &gateway.url("/static")).await.body,
            "static"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_is_closed() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&limits_manifest(&upstream, "idle_timeout = \"300ms\"")).await;
    let mut stream = connect(gateway.addr).await;
    for _ in 0..2 {
        get_static_on(&mut stream).await;
    }
    // Then nothing: the server closes the connection (EOF, within the bound).
    let rest = read_to_close(&mut stream).await;
    assert_eq!(rest, "", "nothing more is sent before the close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idle_timeout_counts_from_the_last_request() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&limits_manifest(&upstream, "idle_timeout = \"300ms\"")).await;
    let mut stream = connect(gateway.addr).await;
    // Six requests 150 ms apart: 900 ms on one connection, three idle
    // timeouts long, but never idle for one.
    for _ in 0..6 {
        get_static_on(&mut stream).await;
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let rest = read_to_close(&mut stream).await;
    assert_eq!(rest, "", "closed once idle, nothing more sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_connection_is_not_idle() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&limits_manifest(&upstream, "idle_timeout = \"300ms\"")).await;
    // A response that takes longer than the idle timeout is not cut off.
    let answer = send(
        http_client()
            .get(gateway.url("/up/slow-body"))
            .header(MODE, "slow-body:900"),
    )
    .await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body.len(), 16 * 4096);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_that_never_ends_is_cut_off() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&limits_manifest(
        &upstream,
        "read_header_timeout = \"300ms\"",
    ))
    .await;
    let mut stream = connect(gateway.addr).await;
    // Half a request head, then silence (a slowloris client).
    stream
        .write_all(b"GET /static HTTP/1.1\r\nHost: gate")
        .await
        .expect("write");
    let answer = read_to_close(&mut stream).await;
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "{answer}"
    );
    // Whole requests are still served.
    assert_eq!(
        get(&http_client(), &gateway.url("/static")).await.body,
        "static"
    );
}
