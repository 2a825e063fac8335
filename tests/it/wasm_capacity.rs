//! Filters under stress, with the real fault components: more concurrent
//! calls than instance slots wait, then get kube's 429 with `Retry-After`,
//! never a 500, whatever the failure policy; the `[limits] filter_memory`
//! cap makes calls wait, and refuses a growth past it with the same 429;
//! memory after a burst of big calls stays bounded; 4,000 traps log a
//! bounded number of bytes while the metrics count every one; and
//! `filter_instances` is checked against the in-flight limits; a burst of
//! dear calls takes turns, one per worker thread, each within its timeout.
//!
//! No timing assertions beyond generous upper bounds for "did not hang".

use std::path::Path;

use crate::support::*;

/// A fail-closed `fault-authn` authenticator named `name` (it does what
/// the request's `x-fault` header says; with none it has no opinion, and
/// the request is anonymous), every request allowed, and `/open/` routed
/// upstream.
fn authn_manifest(upstream: &Upstream, name: &str, limits: &str, settings: &str) -> String {
    let faults = filter(
        "authentication.filters",
        name,
        "fault-authn",
        None,
        &format!("failure_policy = \"fail-closed\"\n{settings}"),
    );
    plaintext(
        &[
            format!("[limits]\n{limits}\n\n[authentication]\nanonymous = true\n"),
            faults,
            "\n[authorization]\nalways_allow = true\n".to_owned(),
            routes(&upstream.url()),
        ]
        .concat(),
    )
}

/// Sends `count` requests to `url` at once, each with `x-fault: <fault>`;
/// their answers, in no particular order.
async fn burst(url: &str, fault: &str, count: usize) -> Vec<Answer> {
    let client = http_client();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..count {
        let request = client.get(url).header("x-fault", fault);
        tasks.spawn(async move { send(request).await });
    }
    let mut answers = Vec::new();
    while let Some(answer) = bounded("a burst of requests", tasks.join_next()).await {
        answers.push(answer.expect("a request task"));
    }
    answers
}

/// Asserts the answer is kube's 429 Status for a stage at capacity, with
/// `Retry-After`, and no internal detail.
fn assert_at_capacity(answer: &Answer, stage: &str) {
    let status = answer.assert_status(429, "TooManyRequests");
    assert_eq!(answer.header("retry-after"), Some("1"), "{}", answer.body);
    assert_eq!(status["details"]["retryAfterSeconds"], 1, "{status}");
    assert_eq!(
        status["message"],
        format!("the {stage} stage is at capacity, please try again later")
    );
    assert_no_internal_detail(&status);
}

/// Counts the answers of a burst by code, asserting each is a 200 from the
/// upstream or the 429 of [`assert_at_capacity`]: never a 500.
fn served_and_refused(answers: &[Answer], stage: &str) -> (usize, usize) {
    let mut served = 0;
    let mut refused = 0;
    for answer in answers {
        match answer.status {
            200 => {
                echo(answer);
                served += 1;
            }
            429 => {
                assert_at_capacity(answer, stage);
                refused += 1;
            }
            other => panic!("{other}, neither served nor refused: {}", answer.body),
        }
    }
    (served, refused)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_calls_than_instance_slots_wait_then_get_429_never_500() {
    let upstream = Upstream::start().await;
    for isolation in ["per-request", "pooled"] {
        // A name per run: the metrics are process-wide.
        let name = format!("slots-{isolation}");
        // Two slots; in-flight limits off, so only the slots refuse; a call
        // waits at most a quarter of the 2 s request timeout.
        let limits = "filter_instances = 2\nmax_requests_in_flight = 0\n\
                      max_mutating_requests_in_flight = 0\nrequest_timeout = \"2s\"";
        let settings = format!("isolation = \"{isolation}\"\ntimeout = \"5s\"\n");
        let gateway =
            TestGateway::start(&authn_manifest(&upstream, &name, limits, &settings)).await;
        let url = gateway.url("/open/slow");

        // Four calls of 100 ms on two slots: the last two wait, and are served.
        let (served, refused) =
            served_and_refused(&burst(&url, "slow-100", 4).await, "authentication");
        assert_eq!(
            (served, refused),
            (4, 0),
            "{isolation}: waiting calls were served"
        );

        // Sixteen calls of 300 ms: 2.4 s of work on two slots, and no call
        // waits past 500 ms: the first ones are served, the rest refused.
        let answers = burst(&url, "slow-300", 16).await;
        let (served, refused) = served_and_refused(&answers, "authentication");
        assert!(
            served >= 2,
            "{isolation}: {served} served, {refused} refused"
        );
        assert!(
            refused >= 1,
            "{isolation}: {served} served, {refused} refused"
        );

        // Every refusal is counted as its own outcome, none as a trap.
        let metrics = gateway.url("/metrics");
        assert_eq!(
            filter_calls(&metrics, &name, "exhausted").await,
            refused as u64
        );
        assert_eq!(filter_calls(&metrics, &name, "trap").await, 0);
        // And the filter serves normally afterwards.
        echo(&send(http_client().get(&url).header("x-fault", "allow")).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_burst_of_dear_calls_takes_turns_within_the_timeout_rather_than_all_passing_it() {
    let upstream = Upstream::start().await;
    let work = "work-200";
    // What one such call takes alone, on this machine, with room to spare.
    let calm = TestGateway::start(&authn_manifest(
        &upstream,
        "turns-calm",
        "",
        "isolation = \"pooled\"\ntimeout = \"10s\"\n",
    ))
    .await;
    let url = calm.url("/open/dear");
    echo(&send(http_client().get(&url).header("x-fault", "allow")).await);
    let started = std::time::Instant::now();
    echo(&send(http_client().get(&url).header("x-fault", work)).await);
    let alone = started.elapsed();

    // A timeout of eight times that, and one worker thread: 48 such calls
    // sharing it would each take about 48 times as long, all pass it, and
    // each lose its instance; taking turns, one at a time, each runs
    // within it (with room for a noisy machine) and the others wait
    // outside it.
    let timeout = (alone * 8).as_millis().max(200);
    let settings = format!("isolation = \"pooled\"\ntimeout = \"{timeout}ms\"\n");
    let gateway = TestGateway::start(&authn_manifest(&upstream, "turns", "", &settings)).await;
    let url = gateway.url("/open/dear");
    let (served, refused) = served_and_refused(&burst(&url, work, 48).await, "authentication");
    assert_eq!(
        (served, refused),
        (48, 0),
        "one call alone took {alone:?}; the timeout was {timeout} ms"
    );
    let metrics = gateway.url("/metrics");
    assert_eq!(filter_calls(&metrics, "turns", "timeout").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_filter_memory_cap_makes_calls_wait_then_refuses() {
    let upstream = Upstream::start().await;
    // `fault-authn` runs in about 1.13 MiB: 3 MiB holds two instances.
    let limits = "filter_memory = \"3MiB\"\nrequest_timeout = \"2s\"";
    let settings = "memory = \"2MiB\"\ntimeout = \"5s\"\n";
    let gateway =
        TestGateway::start(&authn_manifest(&upstream, "memory-cap", limits, settings)).await;
    let url = gateway.url("/open/slow");
    // One call first: from then on an instance reserves what the filter
    // needs before it is made, and waits for it.
    echo(&send(http_client().get(&url).header("x-fault", "allow")).await);

    let (served, refused) = served_and_refused(&burst(&url, "slow-100", 4).await, "authentication");
    assert_eq!((served, refused), (4, 0), "waiting calls were served");

    let answers = burst(&url, "slow-300", 16).await;
    let (served, refused) = served_and_refused(&answers, "authentication");
    assert!(served >= 2, "{served} served, {refused} refused");
    assert!(refused >= 1, "{served} served, {refused} refused");
    let metrics = gateway.url("/metrics");
    assert_eq!(
        filter_calls(&metrics, "memory-cap", "exhausted").await,
        refused as u64
    );
    assert_eq!(filter_calls(&metrics, "memory-cap", "trap").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_growth_past_the_filter_memory_cap_is_refused_with_429_not_a_trap() {
    let upstream = Upstream::start().await;
    // The filter may grow to 16 MiB, the filters together to 4 MiB: a call
    // that needs 5 MiB is refused memory by the gateway, not by its own cap.
    let limits = "filter_memory = \"4MiB\"";
    let settings = "memory = \"16MiB\"\n";
    let gateway =
        TestGateway::start(&authn_manifest(&upstream, "over-cap", limits, settings)).await;
    let client = http_client();
    let url = gateway.url("/open/big");
    for _ in 0..3 {
        let answer = send(client.get(&url).header("x-fault", "leak-4096")).await;
        assert_at_capacity(&answer, "authentication");
    }
    // Below the cap the same filter is served.
    echo(&send(client.get(&url).header("x-fault", "leak-1024")).await);
    let metrics = gateway.url("/metrics");
    assert_eq!(filter_calls(&metrics, "over-cap", "exhausted").await, 3);
    assert_eq!(filter_calls(&metrics, "over-cap", "trap").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_after_a_burst_of_big_calls_stays_bounded() {
    let upstream = Upstream::start().await;
    // Each call grows its instance to about 17 MiB; 256 MiB of filter
    // memory runs about 15 at once.
    let limits = "filter_memory = \"256MiB\"";
    let settings = "memory = \"32MiB\"\ntimeout = \"10s\"\n";
    let gateway = TestGateway::start(&authn_manifest(&upstream, "burst", limits, settings)).await;
    let url = gateway.url("/open/burst");
    // Warm up (first instantiation, connection pools), then measure.
    echo(&send(http_client().get(&url).header("x-fault", "leak-16384")).await);
    let before = vm_rss_kib();
    let answers = burst(&url, "leak-16384", 300).await;
    let (served, refused) = served_and_refused(&answers, "authentication");
    let after = vm_rss_kib();
    // 300 instances that each touched 16 MiB: 4.8 GiB had they all run at
    // once and kept it; 1.06 GB of RSS stayed after such a burst before the
    // cap. Other tests of this binary run beside this one.
    let grown_mib = after.saturating_sub(before) / 1024;
    assert!(
        grown_mib < 384,
        "RSS grew by {grown_mib} MiB ({before} KiB -> {after} KiB); {served} served, {refused} refused"
    );
    assert!(served > 0, "{served} served, {refused} refused");
}

#[test]
fn four_thousand_traps_log_a_few_lines_and_are_all_counted() {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let upstream = runtime.block_on(Upstream::start());
    let dir = new_dir();
    let manifest = dir.path().join("gw.toml");
    std::fs::write(&manifest, authn_manifest(&upstream, "trap-log", "", ""))
        .expect("write the manifest");
    let gateway = GatewayProcess::spawn(&manifest);
    const TRAPS: usize = 4000;
    let log_before = gateway.log_text().len();
    runtime.block_on(async {
        let client = http_client();
        let url = gateway.url("/open/trap");
        let mut tasks = tokio::task::JoinSet::new();
        // 16 clients, 250 traps each.
        for _ in 0..16 {
            let (client, url) = (client.clone(), url.clone());
            tasks.spawn(async move {
                for _ in 0..TRAPS / 16 {
                    let answer = send(client.get(&url).header("x-fault", "trap")).await;
                    let status = answer.assert_status(500, "InternalError");
                    assert_no_internal_detail(&status);
                }
            });
        }
        while let Some(done) = bounded("4,000 traps", tasks.join_next()).await {
            done.expect("a trap task");
        }
        assert_eq!(
            filter_calls(&gateway.url("/metrics"), "trap-log", "trap").await,
            TRAPS as u64
        );
    });
    let log = gateway.log_text();
    let logged = &log[log_before..];
    let trapped = logged.matches("filter trapped").count();
    // One full line per filter per 10 s interval: a handful at most.
    assert!(
        (1..=6).contains(&trapped),
        "{trapped} trap lines:\n{logged}"
    );
    assert!(
        logged.len() < 32 * 1024,
        "{} bytes logged for {TRAPS} traps",
        logged.len()
    );
}

fn check(limits: &str, with_filter: bool) -> Result<(), String> {
    let filter_piece = if with_filter {
        filter("authentication.filters", "faults", "fault-authn", None, "")
    } else {
        String::new()
    };
    let manifest = plaintext(
        &[
            format!("[limits]\n{limits}\n\n[authorization]\nalways_allow = true\n"),
            filter_piece,
            routes("http://127.0.0.1:9"),
        ]
        .concat(),
    );
    let path = Path::new("/nonexistent/wasmgate/gateway.toml");
    wasmgate::config::parse(path, &manifest)
        .map(drop)
        .map_err(|error| error.to_string())
}

#[test]
fn filter_instances_must_cover_the_in_flight_limits() {
    // The defaults hold: 400 + 200 in flight, 1000 instances.
    check("", true).unwrap_or_else(|error| panic!("{error}"));
    let error = check("filter_instances = 500", true).expect_err("500 < 600");
    assert!(
        error.contains(
            "limits.filter_instances: max_requests_in_flight + max_mutating_requests_in_flight (600) \
             is more than filter_instances (500)"
        ),
        "{error}"
    );
    let error = check("max_requests_in_flight = 900", true).expect_err("1100 > 1000");
    assert!(error.contains("limits.max_requests_in_flight: "), "{error}");
    assert!(
        error.contains("(1100) is more than filter_instances (1000)"),
        "{error}"
    );
    // Without filters, or with an in-flight limit off, nothing is required.
    check("filter_instances = 10", false).unwrap_or_else(|error| panic!("{error}"));
    check("filter_instances = 10\nmax_requests_in_flight = 0", true)
        .unwrap_or_else(|error| panic!("{error}"));
    check(
        "filter_instances = 10\nmax_requests_in_flight = 5\nmax_mutating_requests_in_flight = 5",
        true,
    )
    .unwrap_or_else(|error| panic!("{error}"));
    // Bounds.
    for (bad, problem) in [
        (
            "filter_instances = 0",
            "limits.filter_instances: must be a positive number",
        ),
        (
            "filter_instances = 1001",
            "limits.filter_instances: must be at most 1000",
        ),
        (
            "filter_memory = \"512KiB\"",
            "limits.filter_memory: must be at least 1MiB",
        ),
        (
            "filter_memory = \"2TiB\"",
            "limits.filter_memory: must be at most 1TiB",
        ),
    ] {
        let error = check(bad, false).expect_err(bad);
        assert!(error.contains(problem), "{error}");
    }
}
