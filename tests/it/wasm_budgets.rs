//! A filter's budgets, with the real fault components: a looping filter is
//! stopped at its `timeout` while other requests go on being served, a
//! memory-hungry one is capped at its `memory` without the gateway's RSS
//! growing, an answer is copied out no larger than that `memory`, a
//! `sha256` pin is enforced at load, and the compiled-component cache
//! serves a second load from memory.
//!
//! No timing assertions beyond generous upper bounds for "did not hang".

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::support::*;

/// Tokens, then fault-authz with `settings` for paths under `/fault/` only,
/// then RBAC (which allows `/open/*` and `/fault/*` to everyone).
/// A manifest with `fault-authz` (these settings) first on `/fault/*`.
fn fault_manifest(upstream: &Upstream, settings: &str) -> String {
    authorizer_manifest(upstream, "fault-authz", settings)
}

/// The same with `component` in fault-authz's place.
fn authorizer_manifest(upstream: &Upstream, component: &str, settings: &str) -> String {
    let faults = filter(
        "authorization.filters",
        "faults",
        component,
        None,
        &format!("match = {{ path_prefixes = [\"/fault/\"] }}\n{settings}"),
    );
    plaintext(&[tokens(), faults, rbac(), routes(&upstream.url())].concat())
}

async fn fault_gateway(upstream: &Upstream, settings: &str) -> TestGateway {
    TestGateway::start(&fault_manifest(upstream, settings)).await
}

/// alice's `GET` of `url`.
async fn alice_gets(client: &reqwest::Client, url: impl reqwest::IntoUrl) -> Answer {
    send(client.get(url).bearer_auth("alice-token")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_looping_filter_is_stopped_while_other_requests_are_served() {
    let upstream = Upstream::start().await;
    let gateway = fault_gateway(&upstream, "timeout = \"100ms\"\nisolation = \"pooled\"\n").await;
    let client = http_client();

    // One looping request, alone: stopped at its timeout with a 503.
    let started = Instant::now();
    let answer = alice_gets(&client, gateway.url("/fault/loop")).await;
    answer.assert_status(503, "ServiceUnavailable");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "not stopped: {:?}",
        started.elapsed()
    );

    // Now keep four looping requests in flight all the time (twice the
    // worker threads), and meanwhile complete other requests.
    let in_flight = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let loops_done = Arc::new(AtomicUsize::new(0));
    let mut loopers = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let (client, url) = (client.clone(), gateway.url("/fault/loop"));
        let (in_flight, stop, loops_done) = (in_flight.clone(), stop.clone(), loops_done.clone());
        loopers.spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                in_flight.fetch_add(1, Ordering::SeqCst);
                let answer = alice_gets(&client, &url).await;
                in_flight.fetch_sub(1, Ordering::SeqCst);
                answer.assert_status(503, "ServiceUnavailable");
                loops_done.fetch_add(1, Ordering::SeqCst);
            }
        });
    }
    // Wait until the loops are really running.
    eventually("looping requests in flight", || {
        let in_flight = in_flight.clone();
        async move { (in_flight.load(Ordering::SeqCst) >= 4).then_some(()) }
    })
    .await;
    let mut overlapped = 0;
    for i in 0..20 {
        let path = if i % 2 == 0 {
            format!("/open/served-{i}")
        } else {
            "/healthz".to_owned()
        };
        let started = Instant::now();
        let answer = alice_gets(&client, gateway.url(&path)).await;
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{path} waited {:?} behind the loops",
            started.elapsed()
        );
        if in_flight.load(Ordering::SeqCst) > 0 {
            overlapped += 1;
        }
    }
    assert!(
        overlapped > 0,
        "no request completed while a loop was in flight"
    );
    stop.store(true, Ordering::SeqCst);
    while let Some(done) = bounded("the looping requests to end", loopers.join_next()).await {
        done.expect("a looping task");
    }
    assert!(
        loops_done.load(Ordering::SeqCst) >= 4,
        "every looping request was answered"
    );
    // And the filter still answers normally afterwards.
    echo(&alice_gets(&client, gateway.url("/fault/allow")).await);
}

/// A filter that waits in the host (`std::thread::sleep`: a WASI clock the
/// host waits on, where no guest code runs for the epoch to stop) is
/// stopped at its `timeout` all the same, its instance dropped, in both
/// isolations; it used to hold its turn and the request for the whole sleep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_sleeping_in_a_host_call_is_stopped_at_its_timeout() {
    let upstream = Upstream::start().await;
    for isolation in ["pooled", "per-request"] {
        let settings = format!("timeout = \"100ms\"\nisolation = \"{isolation}\"\n");
        let gateway = fault_gateway(&upstream, &settings).await;
        for _ in 0..2 {
            let stopped = (503, "ServiceUnavailable");
            stopped_then_served(&gateway, "/fault/sleep-20000", stopped, isolation).await;
        }
    }
}

/// `path` is answered `status` well within the 20 s a client waits, and
/// the filter then answers `/fault/allow` as ever.
async fn stopped_then_served(
    gateway: &TestGateway,
    path: &str,
    (code, reason): (u16, &str),
    isolation: &str,
) {
    let client = http_client();
    let started = Instant::now();
    let answer = alice_gets(&client, gateway.url(path)).await;
    answer.assert_status(code, reason);
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{isolation}: {path} not stopped: {:?}",
        started.elapsed()
    );
    echo(&alice_gets(&client, gateway.url("/fault/allow")).await);
}

/// A line a filter logs is held to 4 KiB, as its other words are: a line
/// of 1 MiB reached the gateway's log whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filters_log_line_is_held_to_4_kib() {
    build_filters();
    let upstream = Upstream::start().await;
    let dir = new_dir();
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, fault_manifest(&upstream, "")).expect("write the manifest");
    let gateway = GatewayProcess::spawn(&path);
    let client = http_client();
    echo(&alice_gets(&client, gateway.url("/fault/log-1024")).await);
    let line = eventually("the filter's log line", || {
        let log = gateway.log_text();
        async move {
            log.lines()
                .find(|line| line.contains("fault-authz: lll"))
                .map(str::to_owned)
        }
    })
    .await;
    assert!(
        line.len() < 8 * 1024,
        "a line of {} bytes: {}...",
        line.len(),
        &line[..200]
    );
    assert!(line.contains("... (1044493 more bytes)"), "{line}");
}

/// A line a filter logs is one line of the text log: its control
/// characters are escaped, so a line break in it cannot forge another event
/// (the line logged arrived as two, the second `forged: ...`; tracing
/// escaped its ESC alone, as `\x1b`). The JSON log
/// carries it as it was, escaped by JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filters_log_line_is_one_line_of_the_text_log() {
    const LOGGED: &str = "fault-authz: one line\nforged: a second line\r\u{1b}[2K";
    build_filters();
    let upstream = Upstream::start().await;
    let dir = new_dir();
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, fault_manifest(&upstream, "")).expect("write the manifest");
    let client = http_client();
    let logged = async |gateway: &GatewayProcess| {
        echo(&alice_gets(&client, gateway.url("/fault/log-lines")).await);
        eventually("the filter's log line", || {
            let log = gateway.log_text();
            async move {
                log.lines()
                    .find(|line| line.contains("fault-authz: one line"))
                    .map(str::to_owned)
            }
        })
        .await
    };

    let text = GatewayProcess::spawn(&path);
    let line = logged(&text).await;
    assert!(
        line.contains(r"fault-authz: one line\nforged: a second line\r\x1b[2K"),
        "{line}"
    );
    let log = text.log_text();
    assert!(
        !log.lines().any(|line| line.starts_with("forged")),
        "a forged line: {log}"
    );

    let json = GatewayProcess::spawn_with_args(&path, &["--log-format", "json"]);
    let line = logged(&json).await;
    let event: serde_json::Value = serde_json::from_str(&line).expect("a JSON event");
    assert_eq!(event["fields"]["message"], LOGGED, "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_hungry_filter_is_capped_and_rss_stays_bounded() {
    let upstream = Upstream::start().await;
    let gateway = fault_gateway(&upstream, "memory = \"8MiB\"\ntimeout = \"5s\"\n").await;
    let client = http_client();

    // Warm up (first instantiation, connection pools), then measure.
    gateway_alloc(&client, &gateway).await;
    let before = vm_rss_kib();
    for _ in 0..50 {
        gateway_alloc(&client, &gateway).await;
    }
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..50 {
        let (client, url) = (client.clone(), gateway.url("/fault/alloc"));
        tasks.spawn(async move { alice_gets(&client, url).await });
    }
    while let Some(done) = bounded("concurrent alloc requests", tasks.join_next()).await {
        done.expect("an alloc task")
            .assert_status(500, "InternalError");
    }
    let after = vm_rss_kib();
    // 100 capped instances that each touched 8 MiB: had their memory been
    // kept, RSS would have grown by ~800 MiB. The pool keeps a few MiB of
    // each slot used resident, and other tests of this binary run beside.
    let grown_mib = after.saturating_sub(before) / 1024;
    assert!(
        grown_mib < 384,
        "RSS grew by {grown_mib} MiB ({before} KiB -> {after} KiB)"
    );
    assert!(after / 1024 < 2048, "RSS is {} MiB", after / 1024);
    // The filter still answers normally afterwards.
    echo(&alice_gets(&client, gateway.url("/fault/allow")).await);
}

/// A filter's `memory` holds for all its linear memories together:
/// grow-authz's two core instances each grow their own memory to 3 MiB,
/// 6 MiB in all. Within an 8 MiB cap it answers; within 4 MiB the second
/// growth is refused, which the guest takes as any allocator does (a trap),
/// as `alloc` is capped. The cap held for each memory alone, so each 3 MiB
/// fitted a 4 MiB cap and the filter had twice its `memory`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_cap_holds_for_all_of_a_filters_memories_together() {
    let upstream = Upstream::start().await;
    let roomy = TestGateway::start(&authorizer_manifest(
        &upstream,
        "grow-authz",
        "memory = \"8MiB\"\n",
    ))
    .await;
    let tight = TestGateway::start(&authorizer_manifest(
        &upstream,
        "grow-authz",
        "memory = \"4MiB\"\n",
    ))
    .await;
    let client = http_client();
    echo(&alice_gets(&client, roomy.url("/fault/memories")).await);
    capped(&alice_gets(&client, tight.url("/fault/memories")).await);
    // The filter goes on answering what fits.
    echo(&alice_gets(&client, tight.url("/fault/allow")).await);
}

/// The same on the engine a host falls back to when it cannot reserve the
/// instance pool, where a table is bounded as the pool bounds one (20,000
/// elements): grow-authz's growth of a table by a million elements (8 MB of
/// the gateway's memory, outside any `memory` cap) is refused, a trap. The
/// fallback bounded no table, so the growth was granted and answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fallback_engine_bounds_memories_and_tables_as_the_pool_does() {
    build_filters();
    let upstream = Upstream::start().await;
    let dir = new_dir();
    let path = dir.path().join("gateway.toml");
    std::fs::write(
        &path,
        authorizer_manifest(&upstream, "grow-authz", "memory = \"4MiB\"\n"),
    )
    .expect("write the manifest");
    let gateway = GatewayProcess::spawn_without_the_pool(&path, &[]);
    let client = http_client();
    echo(&alice_gets(&client, gateway.url("/fault/allow")).await);
    capped(&alice_gets(&client, gateway.url("/fault/table")).await);
    capped(&alice_gets(&client, gateway.url("/fault/memories")).await);
    echo(&alice_gets(&client, gateway.url("/fault/allow")).await);
}

/// A gateway started as any other reserves its instance pool: the pool's
/// totals (its slots for every filter's memories, tables and core
/// instances) fit the address space a host gives a process by default, so
/// the gateway never runs on the fallback engine, which allocates an
/// instance per call, unless the host holds it to less (the tests above).
/// Raising a total past what the host can reserve would move every gateway
/// to that engine silently; this is where it shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_reserves_its_instance_pool() {
    build_filters();
    let upstream = Upstream::start().await;
    let dir = new_dir();
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, authorizer_manifest(&upstream, "grow-authz", ""))
        .expect("write the manifest");
    let gateway = GatewayProcess::spawn(&path);
    echo(&alice_gets(&http_client(), gateway.url("/fault/allow")).await);
    assert!(
        !gateway.log_text().contains("pooling allocator unavailable"),
        "{}",
        gateway.log_text()
    );
}

/// The pooled engine refuses grow-authz's table growth too (its own bound).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_bounds_a_filters_table() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&authorizer_manifest(&upstream, "grow-authz", "")).await;
    let client = http_client();
    capped(&alice_gets(&client, gateway.url("/fault/table")).await);
    echo(&alice_gets(&client, gateway.url("/fault/allow")).await);
}

/// A component that holds more than a filter may (hoard-authz: seventeen
/// core instances, memories and tables; a filter may have 20, 2 and 4) is
/// refused when it is loaded, naming the filter, by `wasmgate check` and by
/// a reload, which keeps the chain in force. The pool had no bound for one
/// component, so hoard-authz was loaded, and each of its instances took
/// seventeen of the memory and table slots every filter's instances share:
/// others then found the pool empty, a `429`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_holding_more_than_a_filter_may_is_refused_at_load() {
    build_filters();
    let upstream = Upstream::start().await;
    let words = [
        "filter \"faults\"",
        "17 Wasm linear memories",
        "maximum of 2",
    ];
    let refused = |problems: &str| {
        assert!(words.iter().all(|w| problems.contains(w)), "{problems}");
    };
    let dir = new_dir();
    let hoard = refused_by(check, dir.path(), &upstream, REFUSED_COMPONENT, &words);
    let words = ["25 core module instances", "maximum of 20"];
    refused_by(check, dir.path(), &upstream, TOO_MANY_INSTANCES, &words);

    let gateway = ReloadGateway::start(&fault_manifest(&upstream, "")).await;
    let client = http_client();
    echo(&alice_gets(&client, gateway.url("/fault/allow")).await);
    let generation = gateway.generation();
    let hoard = std::fs::read_to_string(hoard).expect("read the manifest");
    write_atomically(&gateway.path, &hoard);
    refused(&gateway.rejected().await);
    assert_eq!(gateway.generation(), generation);
    echo(&alice_gets(&client, gateway.url("/fault/allow")).await);
    gateway.shutdown().await;
}

/// The engine a host falls back to when it cannot reserve the pool holds a
/// filter to the pool's counts (20 core instances, 2 memories, 4 tables).
/// hoard-authz's seventeen memories and tables are refused when it is
/// loaded, by `wasmgate check` as by the pool, naming the filter: that
/// engine loaded it, and every call failed closed at instantiation.
/// throng-authz's twenty-five core instances, which wasmtime's API does not
/// count before they are made, are stopped by the store's limits at its
/// first call, which fails closed, and the gateway serves on. The store's
/// limits were wasmtime's defaults, 10,000 of each: a component could make
/// 10,000 tables of 20,000 elements, 1.6 GB of the host's memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fallback_engine_holds_a_filter_to_the_pools_counts() {
    build_filters();
    let upstream = Upstream::start().await;
    let dir = new_dir();
    let words = [
        "filter \"faults\"",
        "holds 17 Wasm linear memories, past a filter's maximum of 2",
    ];
    let check = check_without_the_pool;
    refused_by(check, dir.path(), &upstream, REFUSED_COMPONENT, &words);

    let throng = dir.path().join("throng.toml");
    std::fs::write(
        &throng,
        authorizer_manifest(&upstream, TOO_MANY_INSTANCES, ""),
    )
    .expect("write the manifest");
    let gateway = GatewayProcess::spawn_without_the_pool(&throng, &[]);
    let client = http_client();
    capped(&alice_gets(&client, gateway.url("/fault/allow")).await);
    // The log is written off the request path: the line may follow the
    // answer.
    eventually("the store's refusal in the log", || async {
        gateway
            .log_text()
            .contains("instance count too high")
            .then_some(())
    })
    .await;
    echo(&alice_gets(&client, gateway.url("/open/x")).await);
}

/// Writes the manifest of a gateway with the authorizer `component` into
/// `dir`, has `check` ([`check`] or [`check_without_the_pool`]) refuse it
/// saying each of `words`, and returns the manifest's path.
fn refused_by(
    check: fn(&Path) -> Checked,
    dir: &Path,
    upstream: &Upstream,
    component: &str,
    words: &[&str],
) -> std::path::PathBuf {
    let path = dir.join(format!("{component}.toml"));
    std::fs::write(&path, authorizer_manifest(upstream, component, ""))
        .expect("write the manifest");
    let checked = check(&path);
    assert!(!checked.success, "check passed: {}", checked.stdout);
    assert!(
        words.iter().all(|word| checked.stderr.contains(word)),
        "{}",
        checked.stderr
    );
    path
}

/// The answer to a filter that trapped at a cap: the authorization stage
/// failed, closed.
fn capped(answer: &Answer) {
    let status = answer.assert_status(500, "InternalError");
    assert_eq!(
        status["message"],
        "Internal error occurred: the authorization stage failed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_instance_that_keeps_growing_is_retired_before_its_cap() {
    let upstream = Upstream::start().await;
    let gateway = fault_gateway(&upstream, "memory = \"8MiB\"\nisolation = \"pooled\"\n").await;
    let client = http_client();
    // Each call leaks 1 MiB and the calls come one at a time, so one pooled
    // instance serves them: it would reach its 8 MiB cap, and trap, within
    // eight calls. Retired once past 6 MiB, it never does.
    every_call_answers(&client, &gateway.url("/fault/leak-1024"), 24).await;
}

/// Sends `calls` requests to `url`, one at a time; each must be answered.
async fn every_call_answers(client: &reqwest::Client, url: &str, calls: usize) {
    for call in 1..=calls {
        let answer = alice_gets(client, url).await;
        assert_eq!(answer.status, 200, "call {call}: {}", answer.body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_cap_too_tight_to_pool_is_warned_about_once() {
    let upstream = Upstream::start().await;
    // The filter starts at 1.13 MiB; one 512 KiB leak takes it past three
    // quarters of a 2 MiB cap on every instance's first call.
    let dir = new_dir();
    let manifest = dir.path().join("gw.toml");
    std::fs::write(
        &manifest,
        fault_manifest(&upstream, "isolation = \"pooled\"\nmemory = \"2MiB\"\n"),
    )
    .expect("write the manifest");
    let gateway = GatewayProcess::spawn(&manifest);
    every_call_answers(&http_client(), &gateway.url("/fault/leak-512"), 3).await;
    const WARNING: &str = "no instance can be reused: raise `memory` to pool it";
    eventually("the warning in the log", || async {
        gateway.log_text().contains(WARNING).then_some(())
    })
    .await;
    let log = gateway.log_text();
    assert_eq!(log.matches(WARNING).count(), 1, "{log}");
}

/// What the host copies out of a filter in one call is held to the filter's
/// `memory`: an authenticator whose groups all point at the same 1 MiB of
/// its memory (the component ABI allows it) would otherwise have the host
/// copy a MiB a group, up to wasmtime's default of 128 MiB a call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_is_copied_out_of_a_filter_no_larger_than_its_memory() {
    let upstream = Upstream::start().await;
    let dir = new_dir();
    let manifest = dir.path().join("gw.toml");
    // Per-request: the aliasing guest's post-return frees the shared bytes
    // once a group, so no instance of it is ever reused.
    let aliasing = filter(
        "authentication.filters",
        "aliasing",
        "fault-authn",
        Some(serde_json::json!({"user": "aliased"})),
        "memory = \"16MiB\"\nisolation = \"per-request\"\n",
    );
    std::fs::write(
        &manifest,
        plaintext(&[aliasing, tokens(), rbac(), routes(&upstream.url())].concat()),
    )
    .expect("write the manifest");
    let gateway = GatewayProcess::spawn(&manifest);
    let client = http_client();
    let with_fault = |fault: &str| {
        send(
            client
                .get(gateway.url("/open/aliased"))
                .header("x-fault", fault)
                .bearer_auth("alice-token"),
        )
    };
    // 4 groups copy 4 MiB, within the 16 MiB: the answer is taken.
    assert_eq!(
        echo(&with_fault("aliased-groups-4").await)["path"],
        "/open/aliased"
    );
    // 32 copy 32 MiB: the call is a trap, the request fails closed.
    let status = with_fault("aliased-groups-32")
        .await
        .assert_status(500, "InternalError");
    assert_eq!(
        status["message"],
        "Internal error occurred: the authentication stage failed"
    );
    const CAUSE: &str = "too much data is being copied between the host and the guest";
    eventually("the trap's cause in the log", || async {
        gateway.log_text().contains(CAUSE).then_some(())
    })
    .await;
    // And the filter goes on answering.
    echo(&with_fault("authenticated").await);
    assert_eq!(upstream.hits(), 2);
}

async fn gateway_alloc(client: &reqwest::Client, gateway: &TestGateway) {
    // A trap (allocation failed at the cap), not a timeout.
    capped(&alice_gets(client, gateway.url("/fault/alloc")).await);
}

fn manifest_with_pin(pin: &str) -> String {
    let settings = format!("sha256 = \"{pin}\"\n");
    let pinned = filter(
        "authorization.filters",
        "pinned",
        "fault-authz",
        None,
        &settings,
    );
    plaintext(&[tokens(), pinned, rbac(), routes("http://127.0.0.1:9")].concat())
}

#[test]
fn a_sha256_pin_is_checked_at_load() {
    let component = component_path("fault-authz");
    let digest = hex::encode(Sha256::digest(
        std::fs::read(&component).expect("read the component"),
    ));
    let path = Path::new("/nonexistent/wasmgate/gateway.toml");

    let wrong = "0".repeat(64);
    let config = wasmgate::config::parse(path, &manifest_with_pin(&wrong))
        .unwrap_or_else(|error| panic!("{error}"));
    let error = match wasmgate::wasm::load_stages(&config) {
        Ok(_) => panic!("a wrong pin loaded"),
        Err(error) => error.to_string(),
    };
    assert!(
        error.contains(r#"filter "pinned""#),
        "names the filter: {error}"
    );
    assert!(
        error.contains(&component.display().to_string()),
        "names the component: {error}"
    );
    assert!(
        error.contains(&format!(
            "has sha256 {digest}, but the manifest pins {wrong}"
        )),
        "{error}"
    );
    // The same error stops a gateway from being built.
    let config = wasmgate::config::parse(path, &manifest_with_pin(&wrong))
        .unwrap_or_else(|error| panic!("{error}"));
    let built = wasmgate::server::Gateway::new(config);
    assert!(built.is_err_and(|error| error.to_string().contains("but the manifest pins")));

    for pin in [
        digest.clone(),
        format!("sha256:{digest}"),
        digest.to_uppercase(),
    ] {
        let config = wasmgate::config::parse(path, &manifest_with_pin(&pin))
            .unwrap_or_else(|error| panic!("{error}"));
        if let Err(error) = wasmgate::wasm::load_stages(&config) {
            panic!("the right pin {pin} did not load: {error}");
        }
    }
    // A pin that is not a digest at all is a manifest error.
    let error = wasmgate::config::parse(path, &manifest_with_pin("abc")).expect_err("a short pin");
    assert!(
        error.to_string().contains("must be 64 hexadecimal digits"),
        "{error}"
    );
}

#[test]
fn the_second_load_of_a_config_compiles_nothing() {
    let path = Path::new("/nonexistent/wasmgate/gateway.toml");
    // Every component there is, so that no test running beside this one
    // compiles anything after the first load.
    let mut pieces = Vec::new();
    for (i, name) in all_components().iter().enumerate() {
        let table = match name.as_str() {
            n if n.ends_with("-authn") => "authentication.filters",
            n if n.ends_with("-authz") => "authorization.filters",
            n if n.ends_with("-audit") => "audit.filters",
            _ => "admission.validating",
        };
        pieces.push(filter(table, &format!("filter-{i}"), name, None, ""));
    }
    let count = pieces.len();
    assert!(count >= 10, "{count} components");
    pieces.push("\n[[audit.policy]]\nlevel = \"Metadata\"\n".to_owned());
    pieces.push(routes("http://127.0.0.1:9"));
    let manifest = plaintext(&pieces.concat());
    let host = wasmgate::wasm::WasmHost::shared().expect("the Wasm host");

    let config = wasmgate::config::parse(path, &manifest).unwrap_or_else(|error| panic!("{error}"));
    if let Err(error) = wasmgate::wasm::load_stages(&config) {
        panic!("{error}");
    }
    let first = host.cache_stats();
    let config = wasmgate::config::parse(path, &manifest).unwrap_or_else(|error| panic!("{error}"));
    if let Err(error) = wasmgate::wasm::load_stages(&config) {
        panic!("{error}");
    }
    let second = host.cache_stats();
    assert_eq!(
        second.compiled, first.compiled,
        "nothing compiled again: {first:?} -> {second:?}"
    );
    assert_eq!(
        second.from_disk, first.from_disk,
        "nothing read from disk again: {first:?} -> {second:?}"
    );
    assert!(
        second.from_memory >= first.from_memory + count as u64,
        "all {count} from memory: {first:?} -> {second:?}"
    );
}

/// A compiled component the disk cache holds is run only as the gateway
/// wrote it: an entry whose code was changed since (here fault-authz's
/// denial reworded) or cut short is compiled again. Wasmtime checks an
/// artifact's header only, so the changed code ran: the denial came back
/// reworded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compiled_component_changed_on_disk_is_compiled_again_not_run() {
    build_filters();
    let upstream = Upstream::start().await;
    let dir = new_dir();
    let cache = dir.path().join("cache");
    let manifest = dir.path().join("gateway.toml");
    std::fs::write(&manifest, fault_manifest(&upstream, "")).expect("write the manifest");
    let checked = std::process::Command::new(binary())
        .args(["check", "--config"])
        .arg(&manifest)
        .env("XDG_CACHE_HOME", &cache)
        .output()
        .expect("run wasmgate check");
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    let component = std::fs::read(component_path("fault-authz")).expect("the component");
    let digest = hex::encode(Sha256::digest(&component));
    let compiled = cache.join("wasmgate").join("compiled");
    let entry = std::fs::read_dir(&compiled)
        .expect("the disk cache")
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| path.to_string_lossy().contains(&digest))
        .expect("fault-authz's entry");
    let client = http_client();
    let cache_env = [("XDG_CACHE_HOME", cache.to_str().expect("UTF-8"))];

    // The reason's bytes changed in place, as a disk fault or another
    // program could; then the entry (written again) cut short.
    let reworded = |mut bytes: Vec<u8>| {
        let at = bytes
            .windows(14)
            .position(|window| window == b"deny requested")
            .expect("the reason in the compiled code");
        bytes[at..at + 14].copy_from_slice(b"DENY REQUESTED");
        bytes
    };
    let cut_short = |bytes: Vec<u8>| bytes[..bytes.len() / 2].to_vec();
    for (damage, damaged) in [
        ("reworded", reworded as fn(_) -> _),
        ("cut short", cut_short),
    ] {
        let bytes = std::fs::read(&entry).expect("the entry");
        std::fs::write(&entry, damaged(bytes)).expect("damage the entry");
        let gateway = GatewayProcess::spawn_with_env(&manifest, &cache_env);
        let answer = alice_gets(&client, gateway.url("/fault/deny")).await;
        answer.assert_status(403, "Forbidden");
        assert!(
            answer.body.contains("fault-authz: deny requested"),
            "{damage}: the changed code ran: {}",
            answer.body
        );
        let log = gateway.log_text();
        assert!(log.contains("compiled component"), "{damage}: {log}");
    }
}

/// Each call's outcome is counted per filter at `/metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_outcome_is_counted_in_the_metrics() {
    let upstream = Upstream::start().await;
    let rbac_config =
        rbac_config_reading_metrics(serde_json::json!({"groups": ["system:unauthenticated"]}));
    // A name no other test uses: the metrics are process-wide.
    let probe = filter(
        "authorization.filters",
        "metrics-probe",
        "fault-authz",
        None,
        "timeout = \"100ms\"\nmemory = \"8MiB\"\nmatch = { path_prefixes = [\"/fault/\"] }\n",
    );
    let rbac = rbac_with(rbac_config);
    let gateway =
        TestGateway::start(&plaintext(&[probe, rbac, routes(&upstream.url())].concat())).await;
    let client = http_client();
    let expected = [
        ("answer", ["/fault/allow", "/fault/deny"].as_slice()),
        ("error", &["/fault/error"]),
        ("trap", &["/fault/trap", "/fault/alloc", "/fault/trap"]),
        ("timeout", &["/fault/loop"]),
    ];
    for (_, paths) in expected {
        for path in paths {
            get(&client, &gateway.url(path)).await;
        }
    }
    let metrics = get(&client, &gateway.url("/metrics")).await;
    assert_eq!(metrics.status, 200, "{}", metrics.body);
    for (outcome, paths) in expected {
        let line = format!(
            "wasmgate_filter_calls_total{{filter=\"metrics-probe\",outcome=\"{outcome}\"}} {}",
            paths.len()
        );
        assert!(
            metrics.body.lines().any(|l| l == line),
            "no {line:?} in:\n{}",
            metrics.body
        );
    }
    let count =
        "wasmgate_filter_call_duration_seconds_count{filter=\"metrics-probe\"} 7".to_owned();
    assert!(
        metrics.body.lines().any(|l| l == count),
        "no {count:?} in:\n{}",
        metrics.body
    );
}

/// The request's own deadline (504) can end a filter call half-way: the
/// call is dropped with its instance, and the filter goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_timeout_can_cut_a_filter_call_short() {
    let upstream = Upstream::start().await;
    for isolation in ["pooled", "per-request"] {
        let settings = format!("timeout = \"10s\"\nisolation = \"{isolation}\"\n");
        let faults = filter(
            "authorization.filters",
            "faults",
            "fault-authz",
            None,
            &format!("match = {{ path_prefixes = [\"/fault/\"] }}\n{settings}"),
        );
        let manifest = plaintext(
            &[
                "[limits]\nrequest_timeout = \"300ms\"\n".to_owned(),
                tokens(),
                faults,
                rbac(),
                routes(&upstream.url()),
            ]
            .concat(),
        );
        let gateway = TestGateway::start(&manifest).await;
        for _ in 0..3 {
            stopped_then_served(&gateway, "/fault/loop", (504, "Timeout"), isolation).await;
        }
    }
}
