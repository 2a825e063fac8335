//! The four outcomes of a filter call (answer, error, trap, timeout) under
//! each failure policy: fail closed without detail, fail open to the next
//! filter, and a trap that does not poison the next request.

use super::*;

/// fail-closed: error and trap are a 500, a timeout a 503, and the client
/// learns nothing of the filter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authorizer_failures_fail_closed_without_detail() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&[
        &tokens(),
        &fault_authz(
            "faults",
            "timeout = \"100ms\"\nfailure_policy = \"fail-closed\"\n",
        ),
        &rbac(),
        &routes(&upstream.url()),
    ])
    .await;
    let client = http_client();
    let as_alice = |path: &str| send(client.get(gateway.url(path)).bearer_auth("alice-token"));

    echo(&as_alice("/fault/allow").await);
    for path in ["/fault/error", "/fault/trap"] {
        let status = as_alice(path).await.assert_status(500, "InternalError");
        assert_eq!(
            status["message"], "Internal error occurred: the authorization stage failed",
            "{path}"
        );
        assert_no_internal_detail(&status);
    }
    let started = Instant::now();
    let status = as_alice("/fault/loop")
        .await
        .assert_status(503, "ServiceUnavailable");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the loop was not stopped: {:?}",
        started.elapsed()
    );
    assert_eq!(
        status["message"],
        "the authorization stage did not answer in time"
    );
    assert_no_internal_detail(&status);
    // slow, within the budget: an answer.
    echo(&as_alice("/fault/slow-20").await);
    // slow, past the budget: a timeout.
    as_alice("/fault/slow-5000")
        .await
        .assert_status(503, "ServiceUnavailable");
    assert_eq!(upstream.hits(), 2);
}

/// fail-open: a failed authorizer is skipped; the next one decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authorizer_failures_fail_open_to_the_next_authorizer() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&[
        &tokens(),
        &fault_authz(
            "faults",
            "timeout = \"100ms\"\nfailure_policy = \"fail-open\"\n",
        ),
        &rbac(),
        &routes(&upstream.url()),
    ])
    .await;
    let client = http_client();
    for path in ["/fault/error", "/fault/trap", "/fault/loop"] {
        let answer = send(client.get(gateway.url(path)).bearer_auth("alice-token")).await;
        assert_eq!(echo(&answer)["path"], path);
    }
    // RBAC still decides after the skipped filter.
    send(
        client
            .get(gateway.url("/private/trap"))
            .bearer_auth("alice-token"),
    )
    .await
    .assert_status(403, "Forbidden");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authenticator_traps_and_timeouts_follow_the_failure_policy() {
    let upstream = Upstream::start().await;
    let closed = gateway(&[
        &fault_authn("timeout = \"100ms\"\n"),
        &tokens(),
        &rbac(),
        &routes(&upstream.url()),
    ])
    .await;
    let open = gateway(&[
        &fault_authn("timeout = \"100ms\"\nfailure_policy = \"fail-open\"\n"),
        &tokens(),
        &rbac(),
        &routes(&upstream.url()),
    ])
    .await;
    let client = http_client();
    let request = |gateway: &TestGateway, fault: &str| {
        client
            .get(gateway.url("/open/x"))
            .header("x-fault", fault)
            .bearer_auth("alice-token")
    };

    // fail-closed (the default).
    let status = send(request(&closed, "trap"))
        .await
        .assert_status(500, "InternalError");
    assert_eq!(
        status["message"],
        "Internal error occurred: the authentication stage failed"
    );
    assert_no_internal_detail(&status);
    let status = send(request(&closed, "loop"))
        .await
        .assert_status(503, "ServiceUnavailable");
    assert_eq!(
        status["message"],
        "the authentication stage did not answer in time"
    );
    assert_eq!(upstream.hits(), 0);

    // fail-open: the next authenticator (the token) is tried.
    for fault in ["trap", "loop"] {
        echo(&send(request(&open, fault)).await);
        let who = whoami(
            client
                .get(open.url(WHOAMI))
                .header("x-fault", fault)
                .bearer_auth("alice-token"),
        )
        .await;
        assert_eq!(who, "alice", "{fault}");
    }
    // fail-open and nothing else recognises the request: 401.
    assert_unauthorized(&send(client.get(open.url("/open/x")).header("x-fault", "trap")).await);
}

/// A trap throws the pooled instance away: the next request on the same
/// filter gets a healthy one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trap_does_not_poison_the_next_request() {
    let upstream = Upstream::start().await;
    for isolation in ["pooled", "per-request"] {
        let gateway = gateway(&[
            &tokens(),
            &fault_authz(
                "faults",
                &format!("isolation = \"{isolation}\"\ntimeout = \"200ms\"\nmemory = \"16MiB\"\n"),
            ),
            &rbac(),
            &routes(&upstream.url()),
        ])
        .await;
        let client = http_client();
        let as_alice = |path: &str| send(client.get(gateway.url(path)).bearer_auth("alice-token"));
        echo(&as_alice("/private/allow").await);
        for round in 0..5 {
            as_alice("/fault/trap")
                .await
                .assert_status(500, "InternalError");
            echo(&as_alice("/private/allow").await);
            as_alice("/fault/loop")
                .await
                .assert_status(503, "ServiceUnavailable");
            echo(&as_alice("/private/allow").await);
            as_alice("/fault/alloc")
                .await
                .assert_status(500, "InternalError");
            let answer = as_alice("/private/allow").await;
            assert_eq!(
                answer.status, 200,
                "{isolation} round {round}: {}",
                answer.body
            );
        }
        // Concurrently, too: traps beside answers.
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..16 {
            let (client, url) = (
                client.clone(),
                gateway.url(if i % 2 == 0 {
                    "/fault/trap"
                } else {
                    "/private/allow"
                }),
            );
            tasks.spawn(async move {
                (
                    i,
                    send(client.get(url).bearer_auth("alice-token"))
                        .await
                        .status,
                )
            });
        }
        while let Some(done) = bounded("concurrent requests", tasks.join_next()).await {
            let (i, status) = done.expect("a request task");
            assert_eq!(
                status,
                if i % 2 == 0 { 500 } else { 200 },
                "{isolation} request {i}"
            );
        }
    }
}
