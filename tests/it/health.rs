//! Health probes exactly as kube writes them
//! (`staging/src/k8s.io/apiserver/pkg/server/healthz/healthz.go`): `ok`,
//! `?verbose`, `?exclude=`, the warning for unknown excludes (in the body
//! and the log), single checks, post-start hooks holding readyz back, and
//! readyz failing once shutdown began.

use crate::support::*;

const SERVERS: &str = "[[servers]]\nname = \"health\"\n";

fn text_headers_ok(answer: &Answer) {
    assert_eq!(
        answer.header("content-type"),
        Some("text/plain; charset=utf-8")
    );
    assert_eq!(answer.header("x-content-type-options"), Some("nosniff"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthy_endpoints_answer_ok() {
    let gateway = TestGateway::start(&plaintext(SERVERS)).await;
    let client = http_client();
    for path in ["/healthz", "/livez", "/readyz"] {
        let answer = get(&client, &gateway.url(path)).await;
        assert_eq!((answer.status, answer.body.as_str()), (200, "ok"), "{path}");
        text_headers_ok(&answer);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verbose_lists_every_check() {
    let gateway = TestGateway::start(&plaintext(SERVERS)).await;
    let client = http_client();
    let cases = [
        (
            "/healthz?verbose",
            "[+]ping ok\n[+]log ok\nhealthz check passed\n",
        ),
        (
            "/livez?verbose=1",
            "[+]ping ok\n[+]log ok\nlivez check passed\n",
        ),
        (
            "/readyz?verbose",
            "[+]ping ok\n[+]log ok\n[+]shutdown ok\nreadyz check passed\n",
        ),
    ];
    for (path, expected) in cases {
        let answer = get(&client, &gateway.url(path)).await;
        assert_eq!(
            (answer.status, answer.body.as_str()),
            (200, expected),
            "{path}"
        );
        text_headers_ok(&answer);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn excluded_checks_are_listed_and_unknown_ones_warned_about() {
    let gateway = TestGateway::start(&plaintext(SERVERS)).await;
    let client = http_client();
    let cases = [
        (
            "/healthz?verbose&exclude=log",
            "[+]ping ok\n[+]log excluded: ok\nhealthz check passed\n",
        ),
        (
            "/readyz?verbose&exclude=log&exclude=shutdown",
            "[+]ping ok\n[+]log excluded: ok\n[+]shutdown excluded: ok\nreadyz check passed\n",
        ),
        (
            "/healthz?verbose&exclude=foo",
            "[+]ping ok\n[+]log ok\nwarn: some health checks cannot be excluded: no matches for \"foo\"\nhealthz check passed\n",
        ),
        // kube sorts the unknown names and joins them with a bare comma.
        (
            "/livez?verbose&exclude=foo&exclude=bar&exclude=ping",
            "[+]ping excluded: ok\n[+]log ok\nwarn: some health checks cannot be excluded: no matches for \"bar\",\"foo\"\nlivez check passed\n",
        ),
        // Without verbose the answer is just ok.
        ("/healthz?exclude=foo", "ok"),
    ];
    for (path, expected) in cases {
        let answer = get(&client, &gateway.url(path)).await;
        assert_eq!(
            (answer.status, answer.body.as_str()),
            (200, expected),
            "{path}"
        );
    }
}

/// kube's handleRootHealth also logs the names it could not exclude, verbose
/// or not: the probe's caller reads only `ok`, the operator the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_excludes_are_logged_too() {
    let dir = new_dir();
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, plaintext(SERVERS)).expect("write the manifest");
    let gateway = GatewayProcess::spawn(&path);
    let answer = get(&http_client(), &gateway.url("/readyz?exclude=nope")).await;
    assert_eq!((answer.status, answer.body.as_str()), (200, "ok"));
    let log = gateway.log.clone();
    eventually("the warning in the log", || {
        let logged = log.lock().expect("the log lock").iter().any(|line| {
            line.contains(
                "cannot exclude some health checks, no health checks are installed matching \"nope\"",
            ) && line.contains("endpoint=\"readyz\"")
        });
        async move { logged.then_some(()) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_check_at_a_time() {
    let gateway = TestGateway::start(&plaintext(SERVERS)).await;
    let client = http_client();
    for path in [
        "/readyz/ping",
        "/readyz/shutdown",
        "/livez/log",
        "/healthz/ping",
    ] {
        let answer = get(&client, &gateway.url(path)).await;
        assert_eq!((answer.status, answer.body.as_str()), (200, "ok"), "{path}");
    }
    // shutdown is a readyz check only; unknown names are not found.
    for path in [
        "/healthz/shutdown",
        "/readyz/nope",
        "/readyz/",
        "/healthz/ping/more",
    ] {
        let answer = get(&client, &gateway.url(path)).await;
        assert_eq!(
            (answer.status, answer.body.as_str()),
            (404, NOT_FOUND_BODY),
            "{path}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_start_hooks_hold_readyz_back_until_they_finish() {
    let dir = new_dir();
    let gate = dir.path().join("gate-open");
    let manifest = plaintext(&format!(
        r#"
[[hooks]]
name = "gate"
phase = "post-start"
command = ["sh", "-c", "while [ ! -e '{}' ]; do sleep 0.05; done"]

[[hooks]]
name = "forever"
phase = "post-start"
command = ["sleep", "30"]
timeout = "60s"

{SERVERS}"#,
        gate.display()
    ));
    let gateway = TestGateway::start_in(dir, &manifest).await;
    let client = http_client();

    let failing = get(&client, &gateway.url("/readyz")).await;
    assert_eq!(failing.status, 500);
    text_headers_ok(&failing);
    assert_eq!(
        failing.body,
        "[+]ping ok\n[+]log ok\n\
         [-]poststarthook/gate failed: reason withheld\n\
         [-]poststarthook/forever failed: reason withheld\n\
         [+]shutdown ok\n\
         readyz check failed\n"
    );
    // A failing readyz is verbose even without ?verbose; healthz is not held.
    assert_eq!(get(&client, &gateway.url("/healthz")).await.body, "ok");
    let single = get(&client, &gateway.url("/readyz/poststarthook/gate")).await;
    assert_eq!(
        (single.status, single.body.as_str()),
        (500, "internal server error: not finished\n")
    );

    std::fs::write(&gate, b"").expect("open the gate");
    let passed = eventually("the gate hook to finish", || {
        let client = client.clone();
        let url = gateway.url("/readyz");
        async move {
            let answer = get(&client, &url).await;
            answer
                .body
                .contains("[+]poststarthook/gate ok")
                .then_some(answer)
        }
    })
    .await;
    assert_eq!(passed.status, 500, "the other hook still holds readyz back");
    assert!(
        passed
            .body
            .contains("[-]poststarthook/forever failed: reason withheld\n"),
        "{}",
        passed.body
    );
    assert!(passed.body.ends_with("readyz check failed\n"));

    let excluded = get(
        &client,
        &gateway.url("/readyz?exclude=poststarthook/forever"),
    )
    .await;
    assert_eq!((excluded.status, excluded.body.as_str()), (200, "ok"));
    let single = get(&client, &gateway.url("/readyz/poststarthook/gate")).await;
    assert_eq!((single.status, single.body.as_str()), (200, "ok"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quick_post_start_hook_lets_readyz_pass() {
    let manifest = plaintext(&format!(
        "[[hooks]]\nname = \"quick\"\nphase = \"post-start\"\ncommand = [\"true\"]\n\n{SERVERS}"
    ));
    let gateway = TestGateway::start(&manifest).await;
    let client = http_client();
    let answer = eventually("readyz to pass", || {
        let client = client.clone();
        let url = gateway.url("/readyz?verbose");
        async move {
            let answer = get(&client, &url).await;
            (answer.status == 200).then_some(answer)
        }
    })
    .await;
    assert_eq!(
        answer.body,
        "[+]ping ok\n[+]log ok\n[+]poststarthook/quick ok\n[+]shutdown ok\nreadyz check passed\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_fails_once_shutdown_began() {
    let dir = new_dir();
    let release = dir.path().join("release");
    // The pre-shutdown hook holds the listener open until the test is done
    // looking.
    let manifest = plaintext(&format!(
        r#"
[[hooks]]
name = "hold"
phase = "pre-shutdown"
command = ["sh", "-c", "while [ ! -e '{}' ]; do sleep 0.05; done"]

{SERVERS}"#,
        release.display()
    ));
    let mut gateway = TestGateway::start_in(dir, &manifest).await;
    let client = http_client();
    assert_eq!(get(&client, &gateway.url("/readyz")).await.status, 200);

    let shutdown = gateway.begin_shutdown();
    let failing = eventually("readyz to fail", || {
        let client = client.clone();
        let url = gateway.url("/readyz");
        async move {
            let answer = get(&client, &url).await;
            (answer.status == 500).then_some(answer)
        }
    })
    .await;
    assert_eq!(
        failing.body,
        "[+]ping ok\n[+]log ok\n[-]shutdown failed: reason withheld\nreadyz check failed\n"
    );
    // Liveness is unaffected, and new connections are still served.
    assert_eq!(
        get(&http_client(), &gateway.url("/healthz")).await.body,
        "ok"
    );
    assert_eq!(get(&http_client(), &gateway.url("/livez")).await.body, "ok");

    std::fs::write(&release, b"").expect("release the hook");
    drop(client);
    let drained = bounded("the shutdown", shutdown)
        .await
        .expect("the shutdown task");
    assert_eq!(drained, wasmgate::server::Drained::Complete);
    let refused = tokio::net::TcpStream::connect(gateway.addr).await;
    assert!(refused.is_err(), "the listener is closed after shutdown");
}
