//! The real binary's lifecycle, as a child process: graceful drain on
//! SIGTERM (the request in flight completes, new connections are refused,
//! exit 0), pre-shutdown hooks running while the listener is still open and
//! while `shutdown_delay` passes, and `shutdown_delay` serving on while
//! readyz fails; in process: the drain of
//! HTTP/1.1 and HTTP/2 streams, the shutdown timeout, a connection that
//! sent nothing closed at once, and the responses of the shutdown delay
//! sending their clients away (`Connection: close`, GOAWAY).

use std::time::Duration;

use crate::support::*;

const EXIT_BOUND: Duration = Duration::from_secs(20);

/// Waits for the gateway to exit, and checks it exited 0.
fn exited_cleanly(gateway: &mut GatewayProcess) {
    let exit = gateway.child.wait_exit(EXIT_BOUND);
    assert!(
        exit.success(),
        "exit status {exit:?}; log:\n{}",
        gateway.log_text()
    );
}

fn write_manifest(dir: &tempfile::TempDir, manifest: &str) -> std::path::PathBuf {
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, manifest).expect("write the manifest");
    path
}

/// Waits until the gateway answered one request and catches SIGTERM and
/// SIGINT, so a signal from the test asks it to stop rather than kills it.
async fn wait_until_serving(gateway: &GatewayProcess) {
    let answer = get(&http_client(), &gateway.url("/healthz")).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    gateway.wait_for_signal_handlers(&[libc::SIGTERM, libc::SIGINT]);
}

async fn wait_until_refused(gateway: &GatewayProcess) {
    let addr = gateway.addr;
    eventually("new connections to be refused", || async move {
        tokio::net::TcpStream::connect(addr)
            .await
            .is_err()
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_the_request_in_flight_then_exits_0() {
    sigterm_drains(&[]).await;
}

/// `--workers 1` serves on a single-threaded runtime: the same drain, the
/// idle timer and the signal handling all on one thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_with_one_worker_thread_too() {
    sigterm_drains(&["--workers", "1"]).await;
}

async fn sigterm_drains(args: &[&str]) {
    let upstream = Upstream::start().await;
    let dir = new_dir();
    let manifest = plaintext(&format!(
        "[[servers]]\nname = \"drain\"\n\n[[servers.routes]]\nprefix = \"/up/\"\nupstream = \"{}\"\n",
        upstream.url()
    ));
    let mut gateway = GatewayProcess::spawn_with_args(&write_manifest(&dir, &manifest), args);
    wait_until_serving(&gateway).await;

    // A request whose body takes ~1.5 s to stream.
    let request = http_client()
        .get(gateway.url("/up/slow"))
        .header(MODE, "slow-body:1500")
        .send();
    let in_flight = tokio::spawn(async move {
        let response = request
            .await
            .expect("the response to the request in flight");
        let status = response.status().as_u16();
        let body = response
            .bytes()
            .await
            .expect("the whole body of the request in flight");
        (status, body)
    });
    assert_eq!(upstream.next_arrival().await, "GET /up/slow");

    gateway.child.signal(libc::SIGTERM);
    wait_until_refused(&gateway).await;

    let (status, body) = bounded("the request in flight", in_flight)
        .await
        .expect("the request task");
    assert_eq!(status, 200);
    assert_eq!(body.len(), 16 * 4096, "the whole body arrived");
    assert!(body.iter().all(|b| *b == b'x'));

    exited_cleanly(&mut gateway);
    let log = gateway.log_text();
    assert!(log.contains("stop requested"), "{log}");
    assert!(log.contains("all connections drained"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_shutdown_hooks_run_before_the_listener_closes() {
    let curl = require_program("/usr/bin/curl");
    let dir = new_dir();
    let out = dir.path().join("readyz.txt");
    let code = dir.path().join("code.txt");
    // The hook asks the gateway itself for readyz: it can only get an answer
    // while the listener is open.
    let script = format!(
        "{} -s --noproxy '*' -o '{}' -w '%{{http_code}}' \"http://$WASMGATE_ADDRESS/readyz?verbose\" > '{}'",
        curl.display(),
        out.display(),
        code.display()
    );
    let manifest = plaintext(&format!(
        "[[hooks]]\nname = \"ask-readyz\"\nphase = \"pre-shutdown\"\ncommand = [\"sh\", \"-c\", {script:?}]\n\n\
         [[servers]]\nname = \"hooks\"\n"
    ));
    let mut gateway = GatewayProcess::spawn(&write_manifest(&dir, &manifest));
    wait_until_serving(&gateway).await;
    assert!(!out.exists(), "the hook must not run before shutdown");

    gateway.child.signal(libc::SIGTERM);
    exited_cleanly(&mut gateway);
    let log = gateway.log_text();
    assert_eq!(
        std::fs::read_to_string(&code).expect("the hook ran").trim(),
        "500",
        "log:\n{log}"
    );
    assert_eq!(
        std::fs::read_to_string(&out).expect("the hook got an answer"),
        "[+]ping ok\n[+]log ok\n[-]shutdown failed: reason withheld\nreadyz check failed\n"
    );
    assert!(log.contains("pre-shutdown hook finished"), "{log}");
}

/// kube runs its pre-shutdown hooks as the shutdown delay begins, and stops
/// its HTTP server once the delay has passed and the hooks have returned
/// (`RunWithContext` in `staging/src/k8s.io/apiserver/pkg/server/genericapiserver.go`):
/// the delay is not added after the hooks. The hook here waits for a file
/// the test writes only once the gateway says its delay has begun.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shutdown_delay_runs_while_the_pre_shutdown_hooks_do() {
    let dir = new_dir();
    let go = dir.path().join("go");
    let script = format!(
        "for i in $(seq 200); do [ -e '{}' ] && exit 0; sleep 0.1; done; exit 1",
        go.display()
    );
    let manifest = plaintext(&format!(
        "[limits]\nshutdown_delay = \"1s\"\n\n\
         [[hooks]]\nname = \"wait-for-go\"\nphase = \"pre-shutdown\"\ncommand = [\"sh\", \"-c\", {script:?}]\n\n\
         [[servers]]\nname = \"hooks\"\n"
    ));
    let mut gateway = GatewayProcess::spawn(&write_manifest(&dir, &manifest));
    wait_until_serving(&gateway).await;

    gateway.child.signal(libc::SIGTERM);
    eventually("the shutdown delay to begin while the hook runs", || {
        let log = gateway.log_text();
        std::future::ready(log.contains("waiting shutdown_delay").then_some(()))
    })
    .await;
    assert!(
        !gateway.log_text().contains("pre-shutdown hook"),
        "the hook is still waiting: {}",
        gateway.log_text()
    );
    std::fs::write(&go, "").expect("write the file the hook waits for");
    exited_cleanly(&mut gateway);
    assert!(
        gateway.log_text().contains("pre-shutdown hook finished"),
        "{}",
        gateway.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_delay_keeps_serving_while_readyz_fails() {
    let dir = new_dir();
    let manifest = plaintext(
        "[limits]\nshutdown_delay = \"3s\"\n\n[[servers]]\nname = \"delay\"\n\n\
         [[servers.routes]]\npath = \"/static\"\nstatic = { body = \"still here\" }\n",
    );
    let mut gateway = GatewayProcess::spawn(&write_manifest(&dir, &manifest));
    wait_until_serving(&gateway).await;

    gateway.child.signal(libc::SIGTERM);
    let url = gateway.url("/readyz?verbose");
    let failing = eventually("readyz to fail", || {
        let url = url.clone();
        async move {
            let answer = get(&http_client(), &url).await;
            (answer.status == 500).then_some(answer)
        }
    })
    .await;
    assert!(
        failing
            .body
            .contains("[-]shutdown failed: reason withheld\n"),
        "{}",
        failing.body
    );
    // During the delay, new connections are still accepted and served.
    let served = get(&http_client(), &gateway.url("/static")).await;
    assert_eq!((served.status, served.body.as_str()), (200, "still here"));
    assert_eq!(get(&http_client(), &gateway.url("/livez")).await.body, "ok");

    exited_cleanly(&mut gateway);
    let log = gateway.log_text();
    assert!(log.contains("waiting shutdown_delay"), "{log}");
    let refused = tokio::net::TcpStream::connect(gateway.addr).await;
    assert!(refused.is_err(), "nothing listens once the process exited");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_stops_the_binary_too() {
    let dir = new_dir();
    let manifest = plaintext("[[servers]]\nname = \"int\"\n");
    let mut gateway = GatewayProcess::spawn(&write_manifest(&dir, &manifest));
    wait_until_serving(&gateway).await;
    gateway.child.signal(libc::SIGINT);
    exited_cleanly(&mut gateway);
    assert!(
        gateway.log_text().contains("SIGINT"),
        "{}",
        gateway.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_manifest_stops_start_up_with_every_problem() {
    let dir = new_dir();
    let manifest = "[listen]\naddress = \"nowhere\"\n\n[limits]\nrequest_timeout = \"soon\"\n";
    let path = write_manifest(&dir, manifest);
    let output = std::process::Command::new(binary())
        .args(["run", "--config"])
        .arg(&path)
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run the binary");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(":2:11: listen.address: \"nowhere\" is not an ip:port address"),
        "{stderr}"
    );
    assert!(
        stderr.contains(":5:19: limits.request_timeout:"),
        "{stderr}"
    );
    assert!(
        stderr.contains("at least one [[servers]] table is needed"),
        "{stderr}"
    );
}

/// Starts a request the upstream answers with `first\n` and holds until
/// released; returns it once the first chunk arrived.
async fn held_stream(client: &reqwest::Client, url: String) -> reqwest::Response {
    let mut response = bounded("headers", client.get(url).header(MODE, "stream").send())
        .await
        .expect("a response");
    assert_eq!(response.status(), 200);
    let first = bounded("the first chunk", response.chunk())
        .await
        .expect("a chunk")
        .expect("not the end");
    assert_eq!(&first[..], b"first\n");
    response
}

async fn rest_of(mut response: reqwest::Response) -> String {
    let mut rest = Vec::new();
    while let Some(chunk) = bounded("the next chunk", response.chunk())
        .await
        .expect("a chunk")
    {
        rest.extend_from_slice(&chunk);
    }
    String::from_utf8_lossy(&rest).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_drain_lets_http1_and_h2_streams_finish() {
    let upstream = Upstream::start().await;
    let manifest = plaintext(&format!(
        "[[servers]]\nname = \"drain\"\n\n[[servers.routes]]\nprefix = \"/up/\"\nupstream = \"{}\"\n",
        upstream.url()
    ));
    let mut gateway = TestGateway::start(&manifest).await;
    let h1 = held_stream(&http_client(), gateway.url("/up/h1")).await;
    let h2 = held_stream(&h2c_client(), gateway.url("/up/h2")).await;

    let shutdown = gateway.begin_shutdown();
    let addr = gateway.addr;
    eventually("new connections to be refused", || async move {
        tokio::net::TcpStream::connect(addr)
            .await
            .is_err()
            .then_some(())
    })
    .await;
    assert!(!shutdown.is_finished(), "two streams are still open");

    upstream.release(2);
    assert_eq!(rest_of(h1).await, "second\nthird\n");
    assert_eq!(rest_of(h2).await, "second\nthird\n");
    let drained = bounded("the drain", shutdown)
        .await
        .expect("the shutdown task");
    assert_eq!(drained, wasmgate::server::Drained::Complete);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_timeout_gives_up_on_a_request_that_never_ends() {
    let upstream = Upstream::start().await;
    let manifest = plaintext(&format!(
        "[limits]\nshutdown_timeout = \"500ms\"\n\n[[servers]]\nname = \"stuck\"\n\n\
         [[servers.routes]]\nprefix = \"/up/\"\nupstream = \"{}\"\n",
        upstream.url()
    ));
    let gateway = TestGateway::start(&manifest).await;
    let _stuck = held_stream(&http_client(), gateway.url("/up/stuck")).await;
    let drained = gateway.shutdown().await;
    assert_eq!(
        drained,
        wasmgate::server::Drained::TimedOut {
            open_connections: 1
        }
    );
}

/// A client that opened a connection and sent nothing (a TCP health check,
/// a port scan, a TLS client that never sent its ClientHello) has no
/// request to drain: the shutdown closes it at once, on TLS as on
/// plaintext. On TLS it used to hold the drain for all of
/// `shutdown_timeout`, and the cut did not reach it either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_sent_nothing_does_not_hold_the_shutdown() {
    for transport in ["plaintext = true", "cert_dir = \"generated\""] {
        let manifest = format!(
            "[listen]\naddress = \"127.0.0.1:0\"\n{transport}\n\n\
             [limits]\nread_header_timeout = \"30s\"\nshutdown_timeout = \"5s\"\n\n\
             [[servers]]\nname = \"main\"\n\n\
             [[servers.routes]]\npath = \"/static\"\nstatic = {{ body = \"static\" }}\n"
        );
        let gateway = TestGateway::start(&manifest).await;
        let _silent = connect(gateway.addr).await;
        // The listener accepts it (and, on TLS, begins its handshake).
        tokio::time::sleep(Duration::from_millis(200)).await;
        let started = std::time::Instant::now();
        let drained = gateway.shutdown().await;
        let took = started.elapsed();
        assert_eq!(drained, wasmgate::server::Drained::Complete, "{transport}");
        assert!(
            took < Duration::from_secs(2),
            "{transport}: the shutdown took {took:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_post_start_hook_keeps_readyz_failing() {
    let dir = new_dir();
    let manifest = plaintext(
        "[[hooks]]\nname = \"broken\"\nphase = \"post-start\"\ncommand = [\"sh\", \"-c\", \"echo no luck >&2; exit 3\"]\n\n\
         [[servers]]\nname = \"hooks\"\n",
    );
    let gateway = GatewayProcess::spawn(&write_manifest(&dir, &manifest));
    // The hook has certainly finished once the gateway logged its failure.
    let log = gateway.log.clone();
    eventually("the hook's failure in the log", || {
        let failed = log
            .lock()
            .expect("the log lock")
            .iter()
            .any(|line| line.contains("post-start hook failed"));
        async move { failed.then_some(()) }
    })
    .await;
    assert!(
        gateway.log_text().contains("no luck"),
        "the hook's stderr is logged: {}",
        gateway.log_text()
    );
    let answer = get(&http_client(), &gateway.url("/readyz")).await;
    assert_eq!(answer.status, 500);
    assert_eq!(
        answer.body,
        "[+]ping ok\n[+]log ok\n[-]poststarthook/broken failed: reason withheld\n[+]shutdown ok\nreadyz check failed\n"
    );
    assert_eq!(
        get(&http_client(), &gateway.url("/healthz")).await.body,
        "ok",
        "liveness is not affected"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_during_the_shutdown_delay_send_their_clients_away() {
    let manifest = plaintext(
        "[limits]\nshutdown_delay = \"3s\"\n\n[[servers]]\nname = \"leaving\"\n\n\
         [[servers.routes]]\npath = \"/static\"\nstatic = { body = \"static\" }\n",
    );
    let mut gateway = TestGateway::start(&manifest).await;
    let addr = gateway.addr;
    // Connections opened while serving normally: kept alive.
    let mut h1 = connect(addr).await;
    assert!(!get_static_on(&mut h1).await.contains("connection: close"));
    let (mut h2, connection) = h2c_handshake(addr).await;
    let h2_connection = tokio::spawn(connection);
    get_static_over_h2(&mut h2, addr).await;

    let shutdown = gateway.begin_shutdown();
    let readyz = gateway.url("/readyz");
    eventually("the shutdown to begin (readyz fails)", || {
        let readyz = readyz.clone();
        async move { (get(&http_client(), &readyz).await.status != 200).then_some(()) }
    })
    .await;
    // Still served during the delay, on old connections and new ones, with
    // the answer telling the client to go.
    let mut fresh = bounded("a connection", tokio::net::TcpStream::connect(addr))
        .await
        .expect("the listener is open during the delay");
    for stream in [&mut h1, &mut fresh] {
        let head = get_static_on(stream).await;
        assert!(head.contains("connection: close"), "{head}");
        assert_eq!(read_to_close(stream).await, "", "then the server closes it");
    }
    get_static_over_h2(&mut h2, addr).await;
    let ended = bounded("the GOAWAY to end the HTTP/2 connection", h2_connection)
        .await
        .expect("the connection task");
    assert!(ended.is_ok(), "a graceful end: {ended:?}");
    assert!(
        !shutdown.is_finished(),
        "the clients left before the listener closed"
    );
    let drained = bounded("the shutdown", shutdown)
        .await
        .expect("the shutdown task");
    assert_eq!(drained, wasmgate::server::Drained::Complete);
}
