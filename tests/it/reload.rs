//! Hot reload: swaps under load, requests that outlive a swap, the
//! compiled-component cache across reloads, the file watcher (editors'
//! atomic renames, symlink swaps, Kubernetes ConfigMap `..data` swaps),
//! SIGHUP and `POST /debug/reload` on the real binary, settings that need a
//! restart, and `wasmgate check` giving a reload's verdict.
//!
//! Two chains take turns: `GET /which` answers "A" (body, and `x-chain: A`
//! from the static headers table) or "B". The invalid versions would answer
//! "C" if they were ever taken.

mod manifests;
mod served;

use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wasmgate::reload_trigger::ReloadOutcome;
use wasmgate::wasm::WasmHost;

use crate::support::*;
use manifests::*;
use served::*;

fn other(which: &str) -> &'static str {
    if which == "A" { "B" } else { "A" }
}

// ---------------------------------------------------------------------------
// Swaps under load
// ---------------------------------------------------------------------------

/// Valid swaps (alternating A and B) the load test makes.
const SWAPS: usize = 60;
/// Requests one load client sends at most.
const MAX_REQUESTS_PER_CLIENT: u64 = 40_000;

#[derive(Clone, Copy, Debug)]
enum ClientKind {
    /// HTTP/1.1, pooled keep-alive connections (shared by two tasks).
    KeepAlive,
    /// HTTP/2 prior knowledge, one multiplexed connection.
    H2c,
    /// HTTP/1.1, a new connection for every request.
    Fresh,
}

#[derive(Default)]
struct Tally {
    a: AtomicU64,
    b: AtomicU64,
    failures: Mutex<Vec<String>>,
}

async fn load_client(
    kind: ClientKind,
    client: reqwest::Client,
    url: String,
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
) {
    for _ in 0..MAX_REQUESTS_PER_CLIENT {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        match try_served(&client, &url).await {
            Ok(served) if served.is("A") => {
                tally.a.fetch_add(1, Ordering::Relaxed);
            }
            Ok(served) if served.is("B") => {
                tally.b.fetch_add(1, Ordering::Relaxed);
            }
            Ok(served) => tally
                .failures
                .lock()
                .expect("the tally lock")
                .push(format!("{kind:?}: a mixed or wrong answer: {served:?}")),
            Err(error) => tally
                .failures
                .lock()
                .expect("the tally lock")
                .push(format!("{kind:?}: {error}")),
        }
        // Continuous, but leaving the shared cores some room (and the
        // fresh connections some ephemeral ports).
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Samples `GET url` for `period`: every answer must be chain `which`.
async fn stays_served(client: &reqwest::Client, url: &str, which: &str, period: Duration) {
    let start = Instant::now();
    while start.elapsed() < period {
        let answer = served(client, url).await;
        assert!(
            answer.is(which),
            "chain {which} should still be served, got {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The generation once no reload has happened for a while.
async fn settled_generation(gateway: &ReloadGateway) -> u64 {
    bounded("the reloads to settle", async {
        loop {
            let generation = gateway.generation();
            tokio::time::sleep(Duration::from_millis(400)).await;
            if gateway.generation() == generation {
                return generation;
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn swaps_under_load_never_fail_a_request_nor_mix_two_chains() {
    let gateway = ReloadGateway::start(&chain("A")).await;
    let url = gateway.url("/which");
    let probe = http_client();
    let base = gateway.url("");
    let failures_before =
        metric(&metrics_text(&probe, &base).await, RELOAD_FAILURES).unwrap_or(0.0);
    let successes_before =
        metric(&metrics_text(&probe, &base).await, RELOAD_SUCCESSES).unwrap_or(0.0);

    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let keep_alive = http_client();
    let fresh = reqwest::Client::builder()
        .no_proxy()
        .timeout(BOUND)
        .http1_only()
        .pool_max_idle_per_host(0)
        .build()
        .expect("build a client");
    let clients = [
        (ClientKind::KeepAlive, keep_alive.clone()),
        (ClientKind::KeepAlive, keep_alive),
        (ClientKind::H2c, h2c_client()),
        (ClientKind::Fresh, fresh),
    ];
    let mut load = tokio::task::JoinSet::new();
    for (kind, client) in clients {
        load.spawn(load_client(
            kind,
            client,
            url.clone(),
            stop.clone(),
            tally.clone(),
        ));
    }

    let mut current = "A";
    let (mut by_watcher, mut by_reload, mut rejected) = (0, 0, 0);
    for swap in 0..SWAPS {
        if swap % 10 == 5 {
            // An invalid version: refused by reload() (and by the watcher's
            // own reload of it, after its debounce); nothing changes.
            let (invalid, problem) = if (swap / 10) % 2 == 0 {
                (broken_toml(), "gateway.toml:")
            } else {
                (
                    bad_upstream(),
                    "\"ftp://127.0.0.1:21\" is not an http:// or https:// URL",
                )
            };
            // Pending watcher reloads of the last valid version (harmless,
            // they swap in the same chain) are let through first.
            let generation = settled_generation(&gateway).await;
            write_atomically(&gateway.path, &invalid);
            let problems = gateway.rejected().await;
            assert!(
                problems.contains(problem),
                "the problems should name {problem:?}:\n{problems}"
            );
            rejected += 1;
            stays_served(&probe, &url, current, Duration::from_millis(500)).await;
            assert_eq!(
                gateway.generation(),
                generation,
                "a refused reload must not change the generation"
            );
        }
        let next = other(current);
        write_atomically(&gateway.path, &chain(next));
        if swap % 2 == 0 {
            // Through the file watcher alone.
            wait_until_served(&probe, &url, next).await;
            by_watcher += 1;
        } else {
            gateway.swapped().await;
            let answer = served(&probe, &url).await;
            assert!(
                answer.is(next),
                "after reload() chain {next} must serve, got {answer:?}"
            );
            by_reload += 1;
        }
        current = next;
    }

    stop.store(true, Ordering::Relaxed);
    bounded("the load clients to finish", async {
        while let Some(joined) = load.join_next().await {
            joined.expect("a load client panicked");
        }
    })
    .await;

    let failures = std::mem::take(&mut *tally.failures.lock().expect("the tally lock"));
    let (a, b) = (
        tally.a.load(Ordering::Relaxed),
        tally.b.load(Ordering::Relaxed),
    );
    assert!(
        failures.is_empty(),
        "{} of {} requests failed or were not wholly one chain's; the first ones:\n{}",
        failures.len(),
        failures.len() as u64 + a + b,
        failures
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    eprintln!(
        "{} answers (A {a}, B {b}); {by_watcher} swaps by the watcher, {by_reload} by reload(), {rejected} refused",
        a + b
    );
    assert!(
        a > 0 && b > 0,
        "both chains should have answered: A {a}, B {b}"
    );
    assert_eq!(by_watcher + by_reload, SWAPS);
    assert!(by_watcher >= 25 && by_reload >= 25);

    let text = metrics_text(&probe, &base).await;
    let failures_after = metric(&text, RELOAD_FAILURES).expect("the failure count is exported");
    let successes_after = metric(&text, RELOAD_SUCCESSES).expect("the success count is exported");
    assert!(
        failures_after - failures_before >= f64::from(rejected),
        "{rejected} refused reloads, but the failure count went {failures_before} -> {failures_after}"
    );
    assert!(
        successes_after - successes_before >= SWAPS as f64,
        "{SWAPS} swaps, but the success count went {successes_before} -> {successes_after}"
    );
    let last_success = metric(&text, LAST_RELOAD_SUCCESS).expect("the last success is exported");
    assert!(last_success > 0.0, "last reload success: {last_success}");
    gateway.shutdown().await;
}

/// Edits that follow each other as fast as the previous one is swapped in
/// are all seen: no change is lost while the watcher moves on to the new
/// configuration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn back_to_back_edits_are_all_seen_by_the_watcher() {
    let gateway = ReloadGateway::start(&chain("A")).await;
    let url = gateway.url("/which");
    let client = http_client();
    let mut current = "A";
    for _ in 0..40 {
        let next = other(current);
        let before = gateway.generation();
        write_atomically(&gateway.path, &chain(next));
        // The next edit is written the moment a swap is stored.
        bounded("a swap", async {
            while gateway.generation() == before {
                tokio::task::yield_now().await;
            }
        })
        .await;
        wait_until_served(&client, &url, next).await;
        current = next;
    }
    gateway.shutdown().await;
}

// ---------------------------------------------------------------------------
// A request keeps the chain it started on
// ---------------------------------------------------------------------------

fn slow_chain(upstream: &Upstream) -> String {
    crate::support::plaintext(&format!(
        "[[servers]]\nname = \"main\"\n\n{}\n[[servers.routes]]\nprefix = \"/slow/\"\nupstream = \"{}\"\n",
        which_route("A"),
        upstream.url()
    ))
}

fn slow_gone_chain() -> String {
    crate::support::plaintext(&format!(
        "[[servers]]\nname = \"main\"\n\n{}\n[[servers.routes]]\nprefix = \"/slow/\"\nstatic = {{ body = \"B\", headers = {{ x-chain = \"B\" }} }}\n",
        which_route("B")
    ))
}

#[tokio::test]
async fn a_request_under_way_finishes_on_the_chain_it_started_on() {
    let upstream = Upstream::start().await;
    let gateway = ReloadGateway::start(&slow_chain(&upstream)).await;
    let url = gateway.url("/slow/stream");

    // Two long requests on chain A, over HTTP/1.1 and h2c: the upstream sends
    // "first" and holds the rest until released.
    let h1 = http_client();
    let h2 = h2c_client();
    let mut long = Vec::new();
    for client in [&h1, &h2] {
        let mut response = bounded(
            "the long response's head",
            client.get(&url).header(MODE, "stream").send(),
        )
        .await
        .expect("send the long request");
        assert_eq!(response.status(), 200);
        let first = bounded("the first chunk", response.chunk())
            .await
            .expect("read the first chunk")
            .expect("a first chunk");
        assert_eq!(&first[..], b"first\n");
        long.push(response);
    }

    // Swap to chain B, where /slow/ is a static answer.
    write_atomically(&gateway.path, &slow_gone_chain());
    gateway.swapped().await;
    for client in [&h1, &h2, &http_client()] {
        let answer = served(client, &url).await;
        assert!(answer.is("B"), "a new request must see chain B: {answer:?}");
        assert!(served(client, &gateway.url("/which")).await.is("B"));
    }

    // The long requests finish with chain A's (the upstream's) whole body.
    upstream.release(2);
    for mut response in long {
        let mut rest = Vec::new();
        while let Some(chunk) = bounded("the rest of the long response", response.chunk())
            .await
            .expect("read the rest of the long response")
        {
            rest.extend_from_slice(&chunk);
        }
        assert_eq!(String::from_utf8_lossy(&rest), "second\nthird\n");
    }
    assert_eq!(upstream.hits(), 2, "chain B never proxies /slow/");
    gateway.shutdown().await;
}

/// The same with an upstream that streams its body over about 1.5 s.
#[tokio::test]
async fn a_slow_body_started_before_a_swap_arrives_whole() {
    let upstream = Upstream::start().await;
    let gateway = ReloadGateway::start(&slow_chain(&upstream)).await;
    let url = gateway.url("/slow/body");
    let client = http_client();
    let response = bounded(
        "the slow response's head",
        client.get(&url).header(MODE, "slow-body:1500").send(),
    )
    .await
    .expect("send the slow request");
    assert_eq!(response.status(), 200);
    let body = tokio::spawn(async move { bounded("the slow body", response.bytes()).await });

    write_atomically(&gateway.path, &slow_gone_chain());
    gateway.swapped().await;
    assert!(served(&http_client(), &url).await.is("B"));

    let body = body
        .await
        .expect("the body task")
        .expect("read the slow body");
    assert_eq!(body.len(), 16 * 4096, "the whole slow body");
    assert!(body.iter().all(|&byte| byte == b'x'));
    gateway.shutdown().await;
}

// ---------------------------------------------------------------------------
// The compiled-component cache
// ---------------------------------------------------------------------------

/// An authenticator `component` with `config`, every request allowed.
fn authn_chain(component: &std::path::Path, config: &str) -> String {
    crate::support::plaintext(&format!(
        "[authentication]\nanonymous = true\n\n[[authentication.filters]]\nname = \"authn\"\ncomponent = \"{}\"\nconfig = {config}\n\n[authorization]\nalways_allow = true\n\n[[servers]]\nname = \"main\"\n\n{}",
        component.display(),
        which_route("A")
    ))
}

/// token-authn knowing one token.
fn token_chain(component: &std::path::Path, token: &str, user: &str) -> String {
    authn_chain(
        component,
        &format!("{{ tokens = [{{ token = \"{token}\", user = \"{user}\" }}] }}"),
    )
}

async fn status_with_token(gateway: &ReloadGateway, token: &str) -> u16 {
    let response = bounded(
        "a response",
        http_client()
            .get(gateway.url("/which"))
            .bearer_auth(token)
            .send(),
    )
    .await
    .expect("send a request");
    response.status().as_u16()
}

/// The only test of this binary that loads components in this process, so
/// the cache statistics move only because of it.
#[tokio::test]
async fn a_reload_compiles_only_a_changed_component() {
    let token_authn = component_path("token-authn");
    let x509_authn = component_path("x509-authn");
    let gateway = ReloadGateway::start(&token_chain(&token_authn, "t1", "alice")).await;
    let client = http_client();
    let base = gateway.url("");
    let host = WasmHost::shared().expect("the wasm host");
    assert_eq!(status_with_token(&gateway, "t1").await, 200);
    assert_eq!(status_with_token(&gateway, "t2").await, 401);

    // Reloading the same manifest: the component comes from memory.
    let before = host.cache_stats();
    let memory_before =
        metric(&metrics_text(&client, &base).await, COMPONENTS_FROM_MEMORY).unwrap_or(0.0);
    gateway.swapped().await;
    let after = host.cache_stats();
    assert_eq!(
        after.compiled, before.compiled,
        "nothing compiled: {before:?} -> {after:?}"
    );
    assert_eq!(
        after.from_disk, before.from_disk,
        "nothing read from disk: {before:?} -> {after:?}"
    );
    assert!(
        after.from_memory > before.from_memory,
        "from memory: {before:?} -> {after:?}"
    );
    let memory_after = metric(&metrics_text(&client, &base).await, COMPONENTS_FROM_MEMORY)
        .expect("components loaded from memory are counted");
    assert!(
        memory_after > memory_before,
        "components_loaded_total{{source=memory}}: {memory_before} -> {memory_after}"
    );

    // Only the filter's config changes: still no compile, and the new config
    // is in force.
    let before = host.cache_stats();
    write_atomically(&gateway.path, &token_chain(&token_authn, "t2", "bob"));
    gateway.swapped().await;
    let after = host.cache_stats();
    assert_eq!(
        after.compiled, before.compiled,
        "nothing compiled: {before:?} -> {after:?}"
    );
    assert_eq!(
        after.from_disk, before.from_disk,
        "nothing read from disk: {before:?} -> {after:?}"
    );
    assert!(
        after.from_memory > before.from_memory,
        "from memory: {before:?} -> {after:?}"
    );
    assert_eq!(status_with_token(&gateway, "t1").await, 401);
    assert_eq!(status_with_token(&gateway, "t2").await, 200);

    // Another component: compiled, or read from the disk cache, once.
    let before = host.cache_stats();
    write_atomically(&gateway.path, &authn_chain(&x509_authn, "{}"));
    gateway.swapped().await;
    let after = host.cache_stats();
    assert_eq!(
        (after.compiled + after.from_disk) - (before.compiled + before.from_disk),
        1,
        "the new component is compiled or read from disk once: {before:?} -> {after:?}"
    );
    // x509-authn has no opinion on bearer tokens: t2 is nobody's now.
    assert_eq!(status_with_token(&gateway, "t2").await, 401);
    gateway.shutdown().await;
}

// ---------------------------------------------------------------------------
// The file watcher
// ---------------------------------------------------------------------------

#[tokio::test]
async fn an_editor_style_atomic_rename_triggers_a_reload() {
    let gateway = ReloadGateway::start(&chain("A")).await;
    let url = gateway.url("/which");
    let client = http_client();
    write_atomically(&gateway.path, &chain("B"));
    wait_until_served(&client, &url, "B").await;

    // vim's default: the old file is renamed to a backup, a new one written.
    let backup = gateway.path.with_file_name("gateway.toml~");
    std::fs::rename(&gateway.path, &backup).expect("rename to the backup");
    std::fs::write(&gateway.path, chain("A")).expect("write the new file");
    std::fs::remove_file(&backup).expect("remove the backup");
    wait_until_served(&client, &url, "A").await;

    // And a plain write in place.
    std::fs::write(&gateway.path, chain("B")).expect("write in place");
    wait_until_served(&client, &url, "B").await;
    gateway.shutdown().await;
}

#[tokio::test]
async fn a_symlink_swap_triggers_a_reload_and_so_does_editing_its_target() {
    let dir = crate::support::new_dir();
    let (v1, v2) = (dir.path().join("v1.toml"), dir.path().join("v2.toml"));
    std::fs::write(&v1, chain("A")).expect("write v1");
    std::fs::write(&v2, chain("B")).expect("write v2");
    let manifest = dir.path().join("manifest.toml");
    std::os::unix::fs::symlink("v1.toml", &manifest).expect("link the manifest");
    let gateway = ReloadGateway::start_from(dir, manifest.clone()).await;
    let url = gateway.url("/which");
    let client = http_client();
    assert!(served(&client, &url).await.is("A"));

    // ln -s v2.toml tmp && mv -T tmp manifest.toml
    swap_symlink(&manifest, std::path::Path::new("v2.toml"));
    wait_until_served(&client, &url, "B").await;

    // The file the manifest points at is the configuration: editing it
    // (through its own name) is an edit of the manifest.
    write_atomically(&v2, &chain("A"));
    wait_until_served(&client, &url, "A").await;
    gateway.shutdown().await;
}

#[tokio::test]
async fn a_configmap_style_data_swap_triggers_a_reload() {
    // The layout kubelet gives a ConfigMap volume:
    //   gw.toml -> ..data/gw.toml, ..data -> ..v1, ..v1/gw.toml
    let dir = crate::support::new_dir();
    let root = dir.path().to_path_buf();
    std::fs::create_dir(root.join("..v1")).expect("create ..v1");
    std::fs::write(root.join("..v1/gw.toml"), chain("A")).expect("write ..v1/gw.toml");
    std::os::unix::fs::symlink("..v1", root.join("..data")).expect("link ..data");
    std::os::unix::fs::symlink("..data/gw.toml", root.join("gw.toml")).expect("link gw.toml");
    let gateway = ReloadGateway::start_from(dir, root.join("gw.toml")).await;
    let url = gateway.url("/which");
    let client = http_client();
    assert!(served(&client, &url).await.is("A"));

    // kubelet's update: a new version folder, ..data_tmp -> it, renamed
    // over ..data, the old version removed.
    for (version, old, which) in [("..v2", "..v1", "B"), ("..v3", "..v2", "A")] {
        std::fs::create_dir(root.join(version)).expect("create the version folder");
        std::fs::write(root.join(version).join("gw.toml"), chain(which)).expect("write gw.toml");
        std::os::unix::fs::symlink(version, root.join("..data_tmp")).expect("link ..data_tmp");
        std::fs::rename(root.join("..data_tmp"), root.join("..data")).expect("rename ..data_tmp");
        std::fs::remove_dir_all(root.join(old)).expect("remove the old version");
        wait_until_served(&client, &url, which).await;
    }
    gateway.shutdown().await;
}

#[tokio::test]
async fn shutdown_stops_watching_the_manifest() {
    let gateway = ReloadGateway::start(&chain("A")).await;
    let ino = std::fs::metadata(gateway.dir.path())
        .expect("the temp dir")
        .ino();
    eventually("the watcher to watch the manifest's folder", || async {
        inotify_watches(ino).then_some(())
    })
    .await;
    // The folder is kept: deleting it would end the watch by itself.
    let (_, dir) = gateway.shutdown_keeping_dir().await;
    eventually("the watcher to stop with the gateway", || async {
        (!inotify_watches(ino)).then_some(())
    })
    .await;
    drop(dir);
}

// ---------------------------------------------------------------------------
// A manifest written in pieces
// ---------------------------------------------------------------------------

/// Anonymous requests one hammering client sends at most.
const MAX_ANONYMOUS_REQUESTS: usize = 20_000;

/// Sends anonymous `GET url` until `stop` (or the bound), and returns every
/// answer that was not a 401.
async fn anonymous_hammer(url: String, stop: Arc<AtomicBool>) -> Vec<String> {
    let client = http_client();
    let mut let_through = Vec::new();
    for _ in 0..MAX_ANONYMOUS_REQUESTS {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        match try_served(&client, &url).await {
            Ok(served) if served.status == 401 => {}
            Ok(served) => let_through.push(format!("{served:?}")),
            // A refused connection lets nothing through; it is not the
            // question here.
            Err(_) => {}
        }
    }
    let_through
}

/// The case: a manifest rewritten in place in two writes 200 ms
/// apart, the first piece valid on its own (everything before
/// `[authentication]`). It is loaded only once whole, and no anonymous
/// request is ever let through, on the real binary.
#[tokio::test]
async fn a_manifest_written_in_two_pieces_is_never_loaded_half_written() {
    let dir = crate::support::new_dir();
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, token_protected("A")).expect("write the manifest");
    let gateway = GatewayProcess::spawn(&path);
    let (url, base) = (gateway.url("/which"), gateway.url(""));
    let client = http_client();
    let with_token = |client: &reqwest::Client| client.get(&url).bearer_auth("t1");
    assert_eq!(crate::support::send(with_token(&client)).await.body, "A");

    let stop = Arc::new(AtomicBool::new(false));
    let hammers: Vec<_> = (0..2)
        .map(|_| tokio::spawn(anonymous_hammer(url.clone(), stop.clone())))
        .collect();
    let whole = token_protected("B");
    let (first, rest) = whole.split_at(whole.find("[authentication]").expect("the split"));
    assert!(
        wasmgate::config::parse(&path, first).is_ok(),
        "the first piece is a valid manifest on its own"
    );
    write_in_two_pieces(&path, first, rest, Duration::from_millis(200)).await;
    eventually("chain B to be served to the token", || async {
        let answer = crate::support::send(with_token(&client)).await;
        (answer.body == "B").then_some(())
    })
    .await;
    // Past the settle interval, in case a late reload were still to come.
    tokio::time::sleep(wasmgate::server::reload::SETTLE * 2).await;
    stop.store(true, Ordering::Relaxed);
    let mut let_through = Vec::new();
    for hammer in hammers {
        let_through.extend(
            bounded("a hammering client", hammer)
                .await
                .expect("the client task"),
        );
    }
    assert!(
        let_through.is_empty(),
        "{} anonymous requests were let through: {:?}",
        let_through.len(),
        &let_through[..let_through.len().min(5)]
    );
    let text = crate::support::send(client.get(format!("{base}/metrics")).bearer_auth("t1"))
        .await
        .body;
    assert_eq!(
        metric(&text, RELOAD_SUCCESSES),
        Some(1.0),
        "one reload, of the whole manifest:\n{text}"
    );
    assert!(
        crate::support::send(client.get(&url)).await.status == 401,
        "anonymous requests are still refused"
    );
    drop(gateway);
}

// ---------------------------------------------------------------------------
// SIGHUP and POST /debug/reload, on the binary
// ---------------------------------------------------------------------------

#[tokio::test]
async fn sighup_and_debug_reload_reload_the_running_binary() {
    let dir = crate::support::new_dir();
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, chain("A")).expect("write the manifest");
    let gateway = GatewayProcess::spawn(&path);
    gateway.wait_for_signal_handlers(&[libc::SIGHUP]);
    let client = http_client();
    let url = gateway.url("/which");
    let base = gateway.url("");
    assert!(served(&client, &url).await.is("A"));
    let text = metrics_text(&client, &base).await;
    assert_eq!(
        metric(&text, RELOAD_SUCCESSES).unwrap_or(0.0),
        0.0,
        "no reload yet:\n{text}"
    );
    assert!(
        metric(&text, LAST_RELOAD_SUCCESS).is_some_and(|at| at > 0.0),
        "the configuration loaded at start is the last successful load:\n{text}"
    );

    // SIGHUP with nothing changed: a reload happens (the watcher has nothing
    // to see), counted as a success.
    gateway.child.signal(libc::SIGHUP);
    eventually("the SIGHUP reload to be counted", || async {
        let text = metrics_text(&client, &base).await;
        (metric(&text, RELOAD_SUCCESSES) == Some(1.0)).then_some(())
    })
    .await;

    // SIGHUP after an edit: the new chain.
    write_atomically(&path, &chain("B"));
    gateway.child.signal(libc::SIGHUP);
    wait_until_served(&client, &url, "B").await;

    // POST /debug/reload after a good edit: a Success Status, chain A at once.
    write_atomically(&path, &chain("A"));
    let answer = crate::support::send(client.post(gateway.url("/debug/reload"))).await;
    assert_eq!(answer.status, 200, "body: {}", answer.body);
    let status = answer.json();
    assert_eq!(status["kind"], "Status", "body: {}", answer.body);
    assert_eq!(status["status"], "Success", "body: {}", answer.body);
    assert!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.contains("generation")),
        "body: {}",
        answer.body
    );
    assert!(served(&client, &url).await.is("A"));

    // After a bad edit: 422 Invalid listing the problem; chain A stays.
    write_atomically(&path, &bad_upstream());
    let answer = crate::support::send(client.post(gateway.url("/debug/reload"))).await;
    let status = answer.assert_status(422, "Invalid");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("gateway.toml:")
            && message.contains("\"ftp://127.0.0.1:21\" is not an http:// or https:// URL"),
        "the problem with its place: {message}"
    );
    stays_served(&client, &url, "A", Duration::from_millis(500)).await;
    let text = metrics_text(&client, &base).await;
    assert!(
        metric(&text, RELOAD_FAILURES).is_some_and(|n| n >= 1.0),
        "{text}"
    );

    // GET is not a reload.
    let answer = crate::support::get(&client, &gateway.url("/debug/reload")).await;
    answer.assert_status(405, "MethodNotAllowed");
    drop(gateway);
}

// ---------------------------------------------------------------------------
// Settings that need a restart
// ---------------------------------------------------------------------------

fn chain_at(address: &str, which: &str) -> String {
    chain(which).replace(
        "address = \"127.0.0.1:0\"",
        &format!("address = \"{address}\""),
    )
}

#[tokio::test]
async fn a_changed_listen_address_needs_a_restart_and_the_old_one_serves_the_new_routes() {
    let gateway = ReloadGateway::start(&chain("A")).await;
    let client = http_client();
    let url = gateway.url("/which");

    write_atomically(&gateway.path, &chain_at("127.0.0.1:1", "B"));
    let (_, restart_required) = gateway.swapped().await;
    assert!(
        restart_required
            .iter()
            .any(|s| s.contains("listen.address")),
        "restart required: {restart_required:?}"
    );
    assert!(
        served(&client, &url).await.is("B"),
        "the old address serves the new routes"
    );

    // Another edit: the address still differs from the one listened on.
    write_atomically(&gateway.path, &chain_at("127.0.0.1:1", "A"));
    let (_, restart_required) = gateway.swapped().await;
    assert!(
        restart_required
            .iter()
            .any(|s| s.contains("listen.address")),
        "still not listening on the new address: {restart_required:?}"
    );
    assert!(served(&client, &url).await.is("A"));

    // Back to the address listened on: nothing needs a restart any more.
    write_atomically(&gateway.path, &chain("B"));
    let (_, restart_required) = gateway.swapped().await;
    assert!(
        restart_required.is_empty(),
        "restart required: {restart_required:?}"
    );
    assert!(served(&client, &url).await.is("B"));
    gateway.shutdown().await;
}

fn tls_chain(which: &str) -> String {
    format!(
        "[listen]\naddress = \"127.0.0.1:0\"\n\n[listen.tls]\ncert = \"server.crt\"\nkey = \"server.key\"\n\n[[servers]]\nname = \"main\"\n\n{}",
        which_route(which)
    )
}

/// Whether the listener speaks TLS is bound at start: a reload that changes
/// it says a restart is needed, and the listener keeps its transport.
#[tokio::test]
async fn a_changed_transport_needs_a_restart_and_is_not_applied() {
    // Plaintext at start, TLS in the new manifest.
    let gateway = ReloadGateway::start(&chain("A")).await;
    crate::support::write_server_pki(gateway.dir.path());
    write_atomically(&gateway.path, &tls_chain("B"));
    let (_, restart_required) = gateway.swapped().await;
    assert!(
        restart_required
            .iter()
            .any(|s| s.contains("listen.plaintext")),
        "restart required: {restart_required:?}"
    );
    let answer = try_served(&http_client(), &gateway.url("/which")).await;
    assert!(
        matches!(&answer, Ok(served) if served.is("B")),
        "plaintext keeps being served, with the new routes: {answer:?}"
    );
    gateway.shutdown().await;

    // TLS at start, plaintext in the new manifest.
    let dir = crate::support::new_dir();
    let ca = crate::support::write_server_pki(dir.path());
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, tls_chain("A")).expect("write the manifest");
    let gateway = ReloadGateway::start_from(dir, path).await;
    let https = format!("https://localhost:{}/which", gateway.addr.port());
    let client = crate::support::tls_client(&ca.cert_pem);
    assert!(served(&client, &https).await.is("A"));
    write_atomically(&gateway.path, &chain("B"));
    let (_, restart_required) = gateway.swapped().await;
    assert!(
        restart_required
            .iter()
            .any(|s| s.contains("listen.plaintext")),
        "restart required: {restart_required:?}"
    );
    let answer = try_served(&client, &https).await;
    assert!(
        matches!(&answer, Ok(served) if served.is("B")),
        "TLS keeps being served, with the new routes: {answer:?}"
    );
    gateway.shutdown().await;
}

/// Writes a Secret volume's version folder `version` holding `server`'s
/// certificate and key, and points `..data` at it as kubelet does
/// (`..data_tmp` renamed over it); the folder it replaced is removed.
fn swap_secret_version(volume: &std::path::Path, version: &str, server: &CertAndKey) {
    let folder = volume.join(version);
    std::fs::create_dir(&folder).expect("create the version folder");
    std::fs::write(folder.join("tls.crt"), &server.cert_pem).expect("write tls.crt");
    std::fs::write(folder.join("tls.key"), &server.key_pem).expect("write tls.key");
    let old = std::fs::read_link(volume.join("..data")).ok();
    std::os::unix::fs::symlink(version, volume.join("..data_tmp")).expect("link ..data_tmp");
    std::fs::rename(volume.join("..data_tmp"), volume.join("..data")).expect("rename ..data_tmp");
    if let Some(old) = old {
        std::fs::remove_dir_all(volume.join(old)).expect("remove the old version");
    }
}

/// The serving certificate and key are files the manifest names, as
/// kube-apiserver's `--tls-cert-file` and `--tls-private-key-file` are, and
/// kube serves a rotated pair without a restart (it watches the files:
/// `server/dynamiccertificates/dynamic_serving_content.go`). Rotated the way
/// cert-manager and kubelet rotate a Secret volume, in a folder of its own,
/// the new certificate is served with nothing else asked of the gateway.
#[tokio::test]
async fn a_rotated_serving_certificate_is_served_without_a_reload_request() {
    let dir = crate::support::new_dir();
    let volume = dir.path().join("tls");
    std::fs::create_dir(&volume).expect("create the volume");
    let first = Ca::new("first CA");
    swap_secret_version(&volume, "..v1", &first.server_cert());
    for file in ["tls.crt", "tls.key"] {
        std::os::unix::fs::symlink(format!("..data/{file}"), volume.join(file))
            .expect("link the file");
    }
    let path = dir.path().join("gateway.toml");
    let manifest = tls_chain("A")
        .replace("server.crt", "tls/tls.crt")
        .replace("server.key", "tls/tls.key");
    std::fs::write(&path, manifest).expect("write the manifest");
    let gateway = ReloadGateway::start_from(dir, path).await;
    let https = format!("https://localhost:{}/which", gateway.addr.port());
    assert!(served(&tls_client(&first.cert_pem), &https).await.is("A"));

    let second = Ca::new("second CA");
    swap_secret_version(&volume, "..v2", &second.server_cert());
    wait_until_served(&tls_client(&second.cert_pem), &https, "A").await;
    gateway.shutdown().await;
}

// ---------------------------------------------------------------------------
// `wasmgate check` and a reload agree
// ---------------------------------------------------------------------------

#[tokio::test]
async fn check_gives_the_verdict_a_reload_gives() {
    let gateway = ReloadGateway::start(&chain("A")).await;
    let client = http_client();
    let url = gateway.url("/which");

    let valid = check(&gateway.path);
    assert!(
        valid.success,
        "check of the running manifest: {}",
        valid.stderr
    );
    assert!(valid.stdout.contains(": valid"), "{}", valid.stdout);

    for (name, invalid) in [
        ("broken TOML", broken_toml()),
        ("a bad upstream URL", bad_upstream()),
        ("a missing component", missing_component()),
    ] {
        write_atomically(&gateway.path, &invalid);
        let checked = check(&gateway.path);
        let problems = gateway.rejected().await;
        assert!(
            !checked.success,
            "check accepted {name}: {}",
            checked.stdout
        );
        let check_lines: Vec<&str> = checked.stderr.lines().collect();
        let reload_lines: Vec<&str> = problems.lines().collect();
        assert!(!reload_lines.is_empty(), "{name}: no problem listed");
        assert_eq!(
            check_lines, reload_lines,
            "{name}: check and reload list the same problems"
        );
        assert!(
            reload_lines
                .iter()
                .all(|line| line.starts_with(&gateway.path.display().to_string())),
            "{name}: every problem names the file: {reload_lines:?}"
        );
        assert!(served(&client, &url).await.is("A"), "{name} was not taken");
    }

    // And a valid edit again: both accept it.
    write_atomically(&gateway.path, &chain("B"));
    assert!(check(&gateway.path).success);
    gateway.swapped().await;
    assert!(served(&client, &url).await.is("B"));
    gateway.shutdown().await;
}

#[tokio::test]
async fn debug_reload_on_an_in_process_gateway_reports_a_refusal_as_invalid() {
    let gateway = ReloadGateway::start(&chain("A")).await;
    write_atomically(&gateway.path, &broken_toml());
    let answer = crate::support::send(http_client().post(gateway.url("/debug/reload"))).await;
    let status = answer.assert_status(422, "Invalid");
    assert!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.contains("gateway.toml:")),
        "body: {}",
        answer.body
    );
    match gateway.reload().await {
        ReloadOutcome::Rejected(_) => {}
        ReloadOutcome::Swapped { generation, .. } => panic!("swapped in generation {generation}"),
    }
    gateway.shutdown().await;
}
