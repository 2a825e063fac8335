//! A fleet of gateways on one chain through a real etcd (Debian's
//! `etcd-server`, started per test on loopback ports, `support/etcd.rs`):
//! `wasmgate push`, `rollback` and `status` run as the binary, three
//! `wasmgate run --config etcd://...` processes follow the pushes under a
//! steady load, a revision refused by push and by every gateway, etcd
//! stopped for 10 s, two pushes racing, a component chunked past etcd's
//! request limit, a history past what a gRPC client decodes by default. Loads are bounded in count and time.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::support::etcd::{Etcd, EtcdCluster};
use crate::support::free_port;
use crate::support::*;

/// How soon every gateway must serve a pushed revision.
const APPLY_BOUND: Duration = Duration::from_secs(1);

// ---------------------------------------------------------------------------
// Manifests, the binary, the gateways
// ---------------------------------------------------------------------------

/// Chain `which`: token `t1` is user `chain-<which>` (token-authn), every
/// request to `/which` is audited (jsonl-audit, blocking, into `audit.log`
/// beside the manifest: a gateway's own state folder once pushed), and
/// `/which` answers `which`.
fn chain(which: &str) -> String {
    plaintext(&format!(
        "[authentication]\nanonymous = false\n\n\
         [[authentication.filters]]\nname = \"tokens\"\ncomponent = \"{tokens}\"\n\
         config = {{ tokens = [{{ token = \"t1\", user = \"chain-{lower}\" }}] }}\n\n\
         [authorization]\nalways_allow = true\n\n\
         [audit]\nmode = \"blocking\"\n\n[[audit.policy]]\nlevel = \"Metadata\"\nnon_resource_urls = [\"/which\"]\n\n\
         [[audit.filters]]\nname = \"log\"\ncomponent = \"{audit}\"\nsink = \"audit.log\"\n\
         config = {{ omit_stages = [\"RequestReceived\"] }}\n\n\
         [[servers]]\nname = \"main\"\n\n{route}",
        tokens = component_path("token-authn").display(),
        audit = component_path("jsonl-audit").display(),
        lower = which.to_ascii_lowercase(),
        route = which_route(which),
    ))
}

/// Writes the manifests of chains A and B into `dir`.
fn write_chains(dir: &Path) -> (PathBuf, PathBuf) {
    let (a, b) = (dir.join("a.toml"), dir.join("b.toml"));
    std::fs::write(&a, chain("A")).expect("write chain A");
    std::fs::write(&b, chain("B")).expect("write chain B");
    (a, b)
}

fn wasmgate(args: &[&str]) -> Output {
    Command::new(binary())
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run the wasmgate binary")
}

/// `wasmgate push`, which must succeed; the revision it wrote.
fn push(manifest: &Path, url: &str) -> i64 {
    try_push(manifest, url).unwrap_or_else(|failure| panic!("push failed: {failure}"))
}

/// `wasmgate push`: the revision it wrote, or what it said.
fn try_push(manifest: &Path, url: &str) -> Result<i64, String> {
    let output = wasmgate(&["push", "--config", &manifest.to_string_lossy(), "--to", url]);
    let said = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!("{}{said}", String::from_utf8_lossy(&output.stderr)));
    }
    Ok(said
        .strip_prefix("pushed revision ")
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|number| number.parse().ok())
        .unwrap_or_else(|| panic!("no revision in {said:?}")))
}

/// `wasmgate status --json`.
fn fleet_status(url: &str) -> serde_json::Value {
    let output = wasmgate(&["status", "--to", url, "--json"]);
    assert!(
        output.status.success(),
        "status failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("status --json prints JSON")
}

/// A gateway of the fleet, as a child process, with its state folder.
struct Member {
    process: GatewayProcess,
    state: PathBuf,
    id: String,
}

fn join(url: &str, state: &Path, id: &str, port: u16) -> Member {
    join_with_env(url, state, id, port, &[])
}

/// [`join`], with these variables in the gateway's environment.
fn join_with_env(url: &str, state: &Path, id: &str, port: u16, env: &[(&str, &str)]) -> Member {
    let listen = format!("127.0.0.1:{port}");
    let process = GatewayProcess::spawn_with(
        Path::new(url),
        &[
            "--listen",
            &listen,
            "--state-dir",
            &state.to_string_lossy(),
            "--gateway-id",
            id,
        ],
        env,
    );
    assert_eq!(process.addr.port(), port, "--listen is where it listens");
    Member {
        process,
        state: state.to_owned(),
        id: id.to_owned(),
    }
}

/// Three gateways on `url`, each with a state folder in `dir`.
fn three(url: &str, dir: &Path) -> Vec<Member> {
    (1..=3)
        .map(|n| {
            join(
                url,
                &dir.join(format!("gw{n}")),
                &format!("gw{n}"),
                free_port(),
            )
        })
        .collect()
}

/// `GET path` as user t1 (the chains let no anonymous request in, not to
/// `/metrics` or `/readyz` either): status and body.
async fn get_as_t1(client: &reqwest::Client, member: &Member, path: &str) -> Option<(u16, String)> {
    let response = client
        .get(member.process.url(path))
        .bearer_auth("t1")
        .send()
        .await
        .ok()?;
    let status = response.status().as_u16();
    Some((status, response.text().await.ok()?))
}

/// The revision a gateway serves, from `wasmgate_config_revision`.
async fn revision_of(client: &reqwest::Client, member: &Member) -> Option<i64> {
    let (_, text) = get_as_t1(client, member, "/metrics").await?;
    metric(&text, "wasmgate_config_revision").map(|value| value as i64)
}

/// `/readyz?verbose` of a gateway.
async fn readyz(client: &reqwest::Client, member: &Member) -> String {
    let (status, text) = get_as_t1(client, member, "/readyz?verbose")
        .await
        .expect("readyz answers");
    assert_eq!(status, 200, "{text}");
    text
}

/// The `config-revision` line of a gateway's `/readyz?verbose`, and
/// `wasmgate_config_watch_down_since_timestamp_seconds`.
async fn watch_status(client: &reqwest::Client, member: &Member) -> (String, Option<f64>) {
    let readyz = readyz(client, member).await;
    let line = readyz
        .lines()
        .find(|line| line.contains("config-revision"))
        .unwrap_or_default()
        .to_owned();
    let metrics = get_as_t1(client, member, "/metrics").await;
    let since = metrics
        .and_then(|(_, text)| metric(&text, "wasmgate_config_watch_down_since_timestamp_seconds"));
    (line, since)
}

/// Waits until every gateway serves `revision`; how long the last took.
async fn all_apply(
    client: &reqwest::Client,
    members: &[Member],
    revision: i64,
    bound: Duration,
) -> Duration {
    let start = Instant::now();
    for member in members {
        loop {
            if revision_of(client, member).await == Some(revision) {
                break;
            }
            assert!(
                start.elapsed() < bound,
                "{} did not apply revision {revision} within {bound:?} (serves {:?})",
                member.id,
                revision_of(client, member).await
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    start.elapsed()
}

/// GET /which with token t1 and a fresh Audit-ID: the chain that answered.
async fn ask(client: &reqwest::Client, base: &str, audit_id: &str) -> Result<String, String> {
    let response = client
        .get(format!("{base}/which"))
        .bearer_auth("t1")
        .header("Audit-ID", audit_id)
        .send()
        .await
        .map_err(|error| error_chain(&error))?;
    let status = response.status().as_u16();
    let body = response.text().await.map_err(|error| error.to_string())?;
    if status != 200 || !(body == "A" || body == "B") {
        return Err(format!("{status} {body}"));
    }
    Ok(body)
}

/// A steady load through `bases`, one request after another per worker,
/// round robin, until stopped: what each Audit-ID got, and the failures.
struct Load {
    stop: Arc<AtomicBool>,
    workers: Vec<tokio::task::JoinHandle<Worked>>,
}

/// One load worker's (Audit-ID, chain) answers and its failures.
type Worked = (Vec<(String, String)>, Vec<String>);

const LOAD_WORKERS: usize = 3;

/// No load runs longer than this, whatever the test does.
const LOAD_LIMIT: Duration = Duration::from_secs(90);

impl Load {
    fn start(bases: Vec<String>) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let counter = Arc::new(AtomicUsize::new(0));
        let workers = (0..LOAD_WORKERS)
            .map(|worker| {
                let (stop, counter, bases) = (stop.clone(), counter.clone(), bases.clone());
                tokio::spawn(async move {
                    let client = http_client();
                    let (mut answers, mut failures) = (Vec::new(), Vec::new());
                    let started = Instant::now();
                    while !stop.load(Ordering::Relaxed) && started.elapsed() < LOAD_LIMIT {
                        let n = counter.fetch_add(1, Ordering::Relaxed);
                        let base = &bases[(n + worker) % bases.len()];
                        let audit_id = format!("load-{n}");
                        match ask(&client, base, &audit_id).await {
                            Ok(chain) => answers.push((audit_id, chain)),
                            Err(error) => failures.push(format!("{base} {audit_id}: {error}")),
                        }
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    (answers, failures)
                })
            })
            .collect();
        Load { stop, workers }
    }

    /// Stops the load: every answer by Audit-ID; fails on any failure.
    async fn finish(self) -> HashMap<String, String> {
        self.stop.store(true, Ordering::Relaxed);
        let mut answers = HashMap::new();
        let mut failures = Vec::new();
        for worker in self.workers {
            let (got, failed) = bounded("the load to stop", worker)
                .await
                .expect("a load worker");
            answers.extend(got);
            failures.extend(failed);
        }
        assert!(
            failures.is_empty(),
            "{} requests failed: {:#?}",
            failures.len(),
            &failures[..failures.len().min(10)]
        );
        answers
    }
}

/// The user each request's ResponseComplete event names, by Audit-ID, from
/// the whole lines of a gateway's audit log.
fn audited_users(state: &Path) -> HashMap<String, String> {
    let text = std::fs::read_to_string(state.join("audit.log")).unwrap_or_default();
    text.split_inclusive('\n')
        .filter(|line| line.ends_with('\n'))
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|event| event["stage"] == "ResponseComplete")
        .filter_map(|event| {
            Some((
                event["auditID"].as_str()?.to_owned(),
                event["user"]["username"].as_str()?.to_owned(),
            ))
        })
        .collect()
}

/// etcd, chains A and B written, A pushed, three gateways serving it.
struct Fleet {
    etcd: Etcd,
    url: String,
    dir: tempfile::TempDir,
    a: PathBuf,
    b: PathBuf,
    first: i64,
    members: Vec<Member>,
    client: reqwest::Client,
}

async fn three_on_chain_a() -> Fleet {
    let etcd = Etcd::start();
    let url = etcd.url("fleet");
    let dir = new_dir();
    let (a, b) = write_chains(dir.path());
    let first = push(&a, &url);
    let members = three(&url, dir.path());
    let client = http_client();
    all_apply(&client, &members, first, BOUND).await;
    Fleet {
        etcd,
        url,
        dir,
        a,
        b,
        first,
        members,
        client,
    }
}

/// Chains A and B written into a folder, A pushed, one gateway serving it.
struct One {
    b: PathBuf,
    members: [Member; 1],
    client: reqwest::Client,
}

async fn one_on_chain_a(url: &str, dir: &Path) -> One {
    let (a, b) = write_chains(dir);
    let first = push(&a, url);
    let members = [join(url, &dir.join("gw"), "gw", free_port())];
    let client = http_client();
    all_apply(&client, &members, first, BOUND).await;
    One { b, members, client }
}

// ---------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_gateways_follow_twenty_pushes_under_load_each_request_on_one_chain() {
    let Fleet {
        etcd: _etcd,
        url,
        dir: _dir,
        a,
        b,
        first: _,
        members,
        client,
    } = three_on_chain_a().await;
    let load = Load::start(members.iter().map(|m| m.process.url("")).collect());
    let mut slowest = Duration::ZERO;
    for round in 0..20 {
        let manifest = if round % 2 == 0 { &b } else { &a };
        let revision = push(manifest, &url);
        slowest = slowest.max(all_apply(&client, &members, revision, APPLY_BOUND).await);
    }
    let answers = load.finish().await;
    assert!(
        answers.len() > 100,
        "the load made only {} requests",
        answers.len()
    );
    let mut audited = HashMap::new();
    for member in &members {
        audited.extend(audited_users(&member.state));
    }
    let (mut a_answers, mut b_answers) = (0, 0);
    for (audit_id, chain) in &answers {
        let user = audited
            .get(audit_id)
            .unwrap_or_else(|| panic!("{audit_id} was not audited"));
        assert_eq!(
            user,
            &format!("chain-{}", chain.to_ascii_lowercase()),
            "{audit_id} answered by chain {chain}"
        );
        if chain == "A" {
            a_answers += 1
        } else {
            b_answers += 1
        }
    }
    assert!(
        a_answers > 0 && b_answers > 0,
        "both chains served ({a_answers} A, {b_answers} B)"
    );
    let status = fleet_status(&url);
    let gateways = status["gateways"].as_array().expect("gateways");
    assert_eq!(gateways.len(), 3, "{status:#}");
    for gateway in gateways {
        assert_eq!(gateway["up"], true, "{status:#}");
        assert_eq!(gateway["applied"], status["revision"], "{status:#}");
    }
    eprintln!(
        "slowest apply of 20 pushes to 3 gateways: {slowest:?}; {} requests",
        answers.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_manifest_is_refused_by_push_as_check_does_and_by_every_gateway() {
    let etcd = Etcd::start();
    let url = etcd.url("fleet");
    let dir = new_dir();
    let (a, _) = write_chains(dir.path());
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        chain("A").replace("anonymous = false", "anonymous = false\nanonymus = true"),
    )
    .expect("write");
    let pushed = wasmgate(&["push", "--config", &bad.to_string_lossy(), "--to", &url]);
    let checked = wasmgate(&["check", "--config", &bad.to_string_lossy()]);
    assert!(!pushed.status.success() && !checked.status.success());
    let problems = String::from_utf8_lossy(&checked.stderr);
    assert!(
        problems.contains("bad.toml:7:1: authentication.anonymus"),
        "check names the place: {problems}"
    );
    assert_eq!(
        String::from_utf8_lossy(&pushed.stderr),
        problems,
        "push says what check says"
    );

    let good = push(&a, &url);
    let members = three(&url, dir.path());
    let client = http_client();
    all_apply(&client, &members, good, BOUND).await;
    // Written by hand, bypassing push: a route to an ftp:// upstream.
    let text = format!(
        "{}\n[[servers.routes]]\nprefix = \"/bad/\"\nupstream = \"ftp://127.0.0.1:21\"\n",
        chain("B")
    );
    let mut raw =
        etcd_client::Client::connect([format!("http://127.0.0.1:{}", etcd.client_port)], None)
            .await
            .expect("an etcd client");
    let written = raw
        .put("/fleet/manifest", text, None)
        .await
        .expect("put by hand");
    let refused = written.header().expect("a header").revision();
    let status = eventually("every gateway to report the refusal", || async {
        let status = fleet_status(&url);
        let gateways = status["gateways"].as_array()?.clone();
        (gateways.len() == 3 && gateways.iter().all(|g| g["refused"]["revision"] == refused))
            .then_some(status)
    })
    .await;
    for gateway in status["gateways"].as_array().expect("gateways") {
        assert_eq!(gateway["applied"], good, "{status:#}");
        let error = gateway["refused"]["error"]
            .as_str()
            .expect("the refusal's error");
        assert!(
            error.contains(&format!("manifest-{refused}.toml:")) && error.contains("ftp"),
            "{error}"
        );
    }
    for member in &members {
        assert_eq!(
            ask(&client, &member.process.url(""), "after-refusal")
                .await
                .as_deref(),
            Ok("A")
        );
        let readyz = readyz(&client, member).await;
        assert!(
            readyz.contains(&format!(
                "[+]config-revision ok (revision {good} from {url}; revision {refused} refused; watching 127.0.0.1:{})",
                etcd.client_port
            )),
            "{readyz}"
        );
    }
    let table = String::from_utf8_lossy(&wasmgate(&["status", "--to", &url]).stdout).into_owned();
    assert!(table.contains(&format!("refused {refused}:")), "{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_away_for_ten_seconds_fails_no_request_and_a_restart_starts_from_disk() {
    let Fleet {
        mut etcd,
        url,
        dir,
        a: _,
        b,
        first,
        mut members,
        client,
    } = three_on_chain_a().await;
    // The load goes through the two gateways that keep running.
    let load = Load::start(members[..2].iter().map(|m| m.process.url("")).collect());
    etcd.stop();
    let away = Instant::now();
    let restarted = members.pop().expect("a third gateway");
    let port = restarted.process.addr.port();
    drop(restarted);
    let restarted = join(&url, &dir.path().join("gw3"), "gw3", port);
    assert!(
        restarted
            .process
            .log_text()
            .contains("starting from the disk copy"),
        "{}",
        restarted.process.log_text()
    );
    let readyz = readyz(&client, &restarted).await;
    assert!(
        readyz.contains(&format!("revision {first} from the disk copy")),
        "{readyz}"
    );
    assert_eq!(
        ask(&client, &restarted.process.url(""), "from-disk")
            .await
            .as_deref(),
        Ok("A")
    );
    members.push(restarted);
    tokio::time::sleep(Duration::from_secs(10).saturating_sub(away.elapsed())).await;
    etcd.resume();
    let answers = load.finish().await;
    assert!(
        answers.values().all(|chain| chain == "A"),
        "only chain A was in force"
    );
    let next = push(&b, &url);
    all_apply(&client, &members, next, BOUND).await;
    for member in &members {
        assert_eq!(
            ask(&client, &member.process.url(""), "after-etcd")
                .await
                .as_deref(),
            Ok("B")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_to_an_earlier_revision_reaches_all_three() {
    let Fleet {
        etcd: _etcd,
        url,
        dir: _dir,
        a: _,
        b,
        first,
        members,
        client,
    } = three_on_chain_a().await;
    let second = push(&b, &url);
    all_apply(&client, &members, second, BOUND).await;
    let output = wasmgate(&["rollback", "--to", &first.to_string(), "--etcd", &url]);
    let said = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let revision: i64 = said
        .rsplit(' ')
        .next()
        .and_then(|number| number.trim().parse().ok())
        .unwrap_or_else(|| panic!("no revision in {said:?}"));
    assert!(revision > second, "{said}");
    all_apply(&client, &members, revision, BOUND).await;
    for member in &members {
        assert_eq!(
            ask(&client, &member.process.url(""), "rolled-back")
                .await
                .as_deref(),
            Ok("A")
        );
    }
    // The status page says which revision is in force, and the reload the
    // rollback made.
    let (code, text) = get_as_t1(&client, &members[0], "/debug/status")
        .await
        .expect("/debug/status answers");
    assert_eq!(code, 200, "{text}");
    let status: serde_json::Value = serde_json::from_str(&text).expect("/debug/status is JSON");
    assert_eq!(status["config_revision"], revision as f64, "{text}");
    assert_eq!(status["reloads"][0]["result"], "success", "{text}");
    let missing = wasmgate(&["rollback", "--to", "99999", "--etcd", &url]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("not in the kept history"));
}

#[tokio::test]
async fn of_two_pushes_from_one_revision_the_second_is_told_to_push_again() {
    let etcd = Etcd::start();
    let dir = new_dir();
    let (a, b) = write_chains(dir.path());
    let target =
        wasmgate::fleet::Target::parse(&etcd.url("race"), Default::default()).expect("a target");
    let store = wasmgate::fleet::store::Store::open(&target)
        .await
        .expect("a store");
    let first = wasmgate::fleet::push::prepare(&a, &store)
        .await
        .expect("prepared");
    let second = wasmgate::fleet::push::prepare(&b, &store)
        .await
        .expect("prepared");
    wasmgate::fleet::push::commit(first, &store)
        .await
        .expect("the first wins");
    let lost = wasmgate::fleet::push::commit(second, &store)
        .await
        .expect_err("the second loses");
    assert!(lost.to_string().contains("push again"), "{lost}");
    let current = store.manifest().await.expect("read").expect("a manifest");
    assert!(current.text.contains("chain-a"), "the winner is in force");
}

#[tokio::test]
async fn a_component_larger_than_an_etcd_request_is_chunked_and_checked_on_read() {
    let etcd = Etcd::start();
    let target =
        wasmgate::fleet::Target::parse(&etcd.url("big"), Default::default()).expect("a target");
    let store = wasmgate::fleet::store::Store::open(&target)
        .await
        .expect("a store");
    let python = component_path("abac-authz");
    let bytes = std::fs::read(&python).expect("read the Python component");
    assert!(
        bytes.len() > 3 * 1024 * 1024 / 2,
        "the Python component is {} bytes",
        bytes.len()
    );
    let digest: [u8; 32] =
        sha2::Digest::finalize(<sha2::Sha256 as sha2::Digest>::new_with_prefix(&bytes)).into();
    store
        .put_component(&digest, &bytes)
        .await
        .expect("stored in chunks");
    assert_eq!(store.component(&digest).await.expect("read back"), bytes);
    let mut raw =
        etcd_client::Client::connect([format!("http://127.0.0.1:{}", etcd.client_port)], None)
            .await
            .expect("an etcd client");
    let chunk = format!("/big/components/sha256-{}/1", hex::encode(digest));
    raw.put(chunk, vec![0u8; 16], None)
        .await
        .expect("damage one chunk");
    let damaged = store
        .component(&digest)
        .await
        .expect_err("a damaged component is refused");
    assert!(damaged.to_string().contains("damaged"), "{damaged}");
}

/// The kept history may hold 100 manifests of up to 512 KiB, far past the
/// 4 MiB a gRPC client decodes by default: pushes and a rollback go on
/// working when it does (twelve pushes of a 400 KiB manifest).
#[tokio::test]
async fn pushes_and_a_rollback_work_with_a_history_past_four_mib() {
    let etcd = Etcd::start();
    let dir = new_dir();
    let manifest = dir.path().join("large.toml");
    let padding = format!("# {}\n", "x".repeat(1024)).repeat(400);
    std::fs::write(&manifest, format!("{padding}{}", chain("A"))).expect("write the manifest");
    let target =
        wasmgate::fleet::Target::parse(&etcd.url("large"), Default::default()).expect("a target");
    let store = wasmgate::fleet::store::Store::open(&target)
        .await
        .expect("a store");
    let mut revisions = Vec::new();
    for push in 1..=12 {
        match wasmgate::fleet::push::push(&manifest, &store).await {
            Ok(pushed) => revisions.push(pushed.revision),
            Err(error) => panic!("push {push}: {error}"),
        }
    }
    let stored = store.manifest().await.expect("read").expect("a manifest");
    assert!(
        stored.text.len() > 400 * 1024,
        "{} bytes",
        stored.text.len()
    );
    let history = store.history().await.expect("the history reads");
    assert_eq!(history.len(), 12);
    assert_eq!(history.last().map(|entry| entry.push), Some(12));
    let rolled = wasmgate::fleet::push::rollback(revisions[0], &store)
        .await
        .unwrap_or_else(|error| panic!("rollback: {error}"));
    assert!(rolled.revision > revisions[11]);
}

/// How many calls of `method` (`Watch`, `Range`) etcd has begun, from its
/// own gRPC metrics.
async fn etcd_calls(etcd: &Etcd, method: &str) -> u64 {
    let text = reqwest::get(format!("http://127.0.0.1:{}/metrics", etcd.client_port))
        .await
        .expect("etcd's /metrics")
        .text()
        .await
        .expect("etcd's metrics text");
    let label = format!("grpc_method=\"{method}\"");
    text.lines()
        .filter(|line| line.starts_with("grpc_server_started_total{") && line.contains(&label))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|value| value as u64)
        .sum()
}

/// etcd's history compacted past the last push (other keys written, then
/// compacted, as its `--auto-compaction` does): a gateway joining then
/// watches from the compaction on, quietly, and follows the next push. Its
/// watch from the manifest's own revision used to be cancelled at once,
/// again and again: some twenty Watch and Range calls in two idle seconds,
/// until the next push.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_joining_after_a_compaction_watches_quietly_and_follows_the_next_push() {
    let etcd = Etcd::start();
    let url = etcd.url("compacted");
    let dir = new_dir();
    let (a, b) = write_chains(dir.path());
    let first = push(&a, &url);
    let mut raw =
        etcd_client::Client::connect([format!("http://127.0.0.1:{}", etcd.client_port)], None)
            .await
            .expect("an etcd client");
    let mut revision = first;
    for n in 0..3 {
        let put = raw
            .put(format!("unrelated/{n}"), "x", None)
            .await
            .expect("put an unrelated key");
        revision = put.header().expect("a header").revision();
    }
    raw.compact(revision, None).await.expect("compact");
    let members = [join(&url, &dir.path().join("gw"), "gw", free_port())];
    let client = http_client();
    all_apply(&client, &members, first, BOUND).await;
    // Its first watch, from just after that revision, meets the compaction:
    // the manifest is read and the watch made again, from the compaction.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let (watches, ranges) = (
        etcd_calls(&etcd, "Watch").await,
        etcd_calls(&etcd, "Range").await,
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let watches = etcd_calls(&etcd, "Watch").await - watches;
    let ranges = etcd_calls(&etcd, "Range").await - ranges;
    assert!(
        watches <= 1 && ranges <= 1,
        "an idle gateway began {watches} watches and {ranges} Range calls in two seconds"
    );

    let second = push(&b, &url);
    all_apply(&client, &members, second, BOUND).await;
    assert_eq!(
        ask(&client, &members[0].process.url(""), "after-compaction")
            .await
            .as_deref(),
        Ok("B")
    );
}

/// `component` with a custom section of `padding` zero bytes appended, at
/// `to`: the same filter under another digest, `padding` more to fetch.
fn padded_component(component: &Path, padding: usize, to: &Path) {
    with_custom_section(component, &vec![0; padding], to);
}

/// `component` with a custom section holding `content` appended, at `to`.
fn with_custom_section(component: &Path, content: &[u8], to: &Path) {
    fn leb128(mut value: usize) -> Vec<u8> {
        let mut bytes = Vec::new();
        loop {
            let low = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                bytes.push(low);
                return bytes;
            }
            bytes.push(low | 0x80);
        }
    }
    let mut bytes = std::fs::read(component).expect("read the component");
    let name = b"padding";
    let mut section = leb128(name.len());
    section.extend_from_slice(name);
    section.extend_from_slice(content);
    bytes.push(0); // a custom section
    bytes.extend(leb128(section.len()));
    bytes.extend(section);
    std::fs::write(to, bytes).expect("write the padded component");
}

/// etcd hangs (SIGSTOP) just after a push, while the gateway fetches the
/// revision's new component: the fetch fails, and the revision is fetched
/// again once etcd answers. It was refused for good (`filter "tokens":
/// etcd: ...`): the watch went on past it, and the gateway served the
/// revision before until the next push.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_whose_components_etcd_failed_to_hand_over_is_fetched_again() {
    let etcd = Etcd::start();
    let url = etcd.url("hung");
    let dir = new_dir();
    let One {
        members, client, ..
    } = one_on_chain_a(&url, dir.path()).await;

    // Chain B with a token-authn of 64 more chunks, which the gateway has
    // not fetched yet.
    let tokens = component_path("token-authn");
    let padded = dir.path().join("token-authn-padded.wasm");
    padded_component(&tokens, 64 * wasmgate::fleet::store::CHUNK, &padded);
    let b = dir.path().join("b-padded.toml");
    let manifest = chain("B").replace(&tokens.display().to_string(), &padded.display().to_string());
    std::fs::write(&b, manifest).expect("write chain B");
    let target = wasmgate::fleet::Target::parse(&url, Default::default()).expect("a target");
    let store = wasmgate::fleet::store::Store::open(&target)
        .await
        .expect("a store");
    let pushed = wasmgate::fleet::push::push(&b, &store)
        .await
        .unwrap_or_else(|error| panic!("push: {error}"));
    etcd.freeze();
    // Past the gateway's etcd request timeout (5 s): its fetch fails.
    tokio::time::sleep(Duration::from_secs(7)).await;
    etcd.thaw();
    all_apply(&client, &members, pushed.revision, BOUND).await;
    assert_eq!(
        ask(&client, &members[0].process.url(""), "after-the-hang")
            .await
            .as_deref(),
        Ok("B")
    );
}

/// Writes chain B into `dir` with copies of its components of their own (a
/// custom section added): a gateway has neither fetched nor compiled them.
fn chain_b_with_fresh_components(dir: &Path) -> PathBuf {
    let mut manifest = chain("B");
    for name in ["token-authn", "jsonl-audit"] {
        let component = component_path(name);
        let fresh = dir.join(format!("{name}-fresh.wasm"));
        with_custom_section(&component, b"fresh", &fresh);
        manifest = manifest.replace(
            &component.display().to_string(),
            &fresh.display().to_string(),
        );
    }
    let b = dir.join("b-fresh.toml");
    std::fs::write(&b, manifest).expect("write chain B");
    b
}

/// A SIGHUP that comes while a gateway applies a revision is answered by
/// that apply: the revision is swapped in once. The apply's reload is told
/// by systemd's `RELOADING=1` on the gateway's `$NOTIFY_SOCKET`, and lasts
/// while it compiles the revision's token-authn and jsonl-audit, copies of
/// their own (a custom section added) that the gateway's compiled-component
/// cache (a folder of its own, `$XDG_CACHE_HOME`) does not hold; the SIGHUP
/// is sent then. It was served by a second reload of the same revision once
/// the apply was over: the generation moved by two for one revision, and
/// `POST /debug/reload` afterwards answered generation 4 where it now
/// answers 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sighup_during_a_fleet_apply_swaps_the_revision_in_once() {
    use std::os::unix::net::UnixDatagram;
    let etcd = Etcd::start();
    let url = etcd.url("sighup");
    let dir = new_dir();
    let (a, _) = write_chains(dir.path());
    let first = push(&a, &url);
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).expect("bind the notify socket");
    socket
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("a read timeout");
    let socket_env = socket_path.to_str().expect("a UTF-8 path");
    let cache = dir.path().join("cache");
    let members = [join_with_env(
        &url,
        &dir.path().join("gw"),
        "gw",
        free_port(),
        &[
            ("NOTIFY_SOCKET", socket_env),
            ("XDG_CACHE_HOME", cache.to_str().expect("a UTF-8 path")),
        ],
    )];
    let client = http_client();
    all_apply(&client, &members, first, BOUND).await;
    members[0].process.wait_for_signal_handlers(&[libc::SIGHUP]);
    let mut messages = Vec::new();
    let receive_until = |messages: &mut Vec<String>, wanted: &str, count: usize| {
        let started = Instant::now();
        let mut buffer = [0u8; 4096];
        while messages.iter().filter(|m| m.starts_with(wanted)).count() < count {
            assert!(started.elapsed() < BOUND, "no {wanted}: {messages:?}");
            if let Ok(read) = socket.recv(&mut buffer) {
                messages.push(String::from_utf8_lossy(&buffer[..read]).into_owned());
            }
        }
    };
    receive_until(&mut messages, "READY=1", 1);

    let b = chain_b_with_fresh_components(dir.path());
    let pushed = push(&b, &url);
    receive_until(&mut messages, "RELOADING=1", 1);
    members[0].process.child.signal(libc::SIGHUP);
    all_apply(&client, &members, pushed, BOUND).await;
    let log = members[0].process.log_text();
    let (sighup, applied) = (
        log.find("SIGHUP: reloading"),
        log.find("configuration reloaded"),
    );
    assert!(
        sighup.is_some() && applied.is_some() && sighup < applied,
        "the SIGHUP did not come during the apply's reload (its component compiled too fast?):\n{log}"
    );

    let answer = client
        .post(members[0].process.url("/debug/reload"))
        .bearer_auth("t1")
        .send()
        .await
        .expect("POST /debug/reload");
    let body = answer.text().await.expect("its body");
    assert!(
        body.contains("configuration reloaded: generation 3"),
        "start 1, the revision 2, this reload 3: {body}\n{}",
        members[0].process.log_text()
    );
}

/// The member a gateway watches, cut off from its quorum (the two others of
/// its three frozen): its watch requires a leader, as kube's etcd3 watcher's
/// does (`clientv3.WithRequireLeader`,
/// `staging/src/k8s.io/apiserver/pkg/storage/etcd3/watcher.go`), so the
/// member cancels it once it has had no leader for a while, and the gateway
/// says etcd is away and watches again until the member is back in its
/// quorum, then follows the next push. The watch stayed open and silent: a
/// member without a leader keeps a plain watch, which gets nothing while
/// the rest of the cluster may go on without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_on_a_member_cut_off_from_its_quorum_fails_and_comes_back() {
    let cluster = EtcdCluster::start();
    let watched = &cluster.members[0];
    let url = watched.url("quorum");
    let dir = new_dir();
    let One {
        b, members, client, ..
    } = one_on_chain_a(&url, dir.path()).await;

    let endpoint = format!("127.0.0.1:{}", watched.client_port);
    let watching = format!("; watching {endpoint}");
    let status = watch_status(&client, &members[0]).await;
    assert!(status.0.contains(&watching), "{status:?}");
    assert_eq!(status.1, Some(0.0), "{status:?}");

    cluster.members[1].freeze();
    cluster.members[2].freeze();
    let started = Instant::now();
    loop {
        let log = members[0].process.log_text();
        if log.contains("the fleet's etcd is away") && log.contains("no leader") {
            break;
        }
        assert!(
            started.elapsed() < BOUND,
            "the watch of a member without a leader did not fail within {BOUND:?}:\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (readyz, down_since) = watch_status(&client, &members[0]).await;
    let down = "; the watch is down since ";
    assert!(
        readyz.contains(down)
            && readyz.contains(&format!("({endpoint}: "))
            && readyz.contains("no leader"),
        "/readyz?verbose says the watch is down, on which member and why:\n{readyz}"
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64();
    assert!(
        down_since.is_some_and(|since| since > now - BOUND.as_secs_f64() && since <= now),
        "wasmgate_config_watch_down_since_timestamp_seconds is when it went down: {down_since:?}"
    );

    cluster.members[1].thaw();
    cluster.members[2].thaw();
    watched.wait_until_serving();
    let started = Instant::now();
    loop {
        let status = watch_status(&client, &members[0]).await;
        if status.0.contains(&watching) && status.1 == Some(0.0) {
            break;
        }
        assert!(
            started.elapsed() < BOUND,
            "the watch was not reported up again within {BOUND:?}: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let second = push(&b, &url);
    all_apply(&client, &members, second, BOUND).await;
    assert_eq!(
        ask(&client, &members[0].process.url(""), "after-the-partition")
            .await
            .as_deref(),
        Ok("B")
    );
}

/// A gateway given the three members of its etcd
/// (`etcd://A,B,C/PREFIX`, as kube-apiserver's `--etcd-servers` lists
/// them) watches through the one that answered its first read first; when
/// that one is frozen (SIGSTOP: its
/// connections open and silent, as a member cut off or hung), the watch's
/// keep-alive gives up on it and the gateway watches through the next
/// member, fetches a revision's new components from it, and applies it. A
/// URL named one endpoint: the gateway waited for that member to come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_given_three_members_follows_a_push_through_another_when_its_own_is_frozen() {
    let cluster = EtcdCluster::start();
    let url = cluster.url("members");
    let dir = new_dir();
    let One {
        members, client, ..
    } = one_on_chain_a(&url, dir.path()).await;
    // The watch is on the member that answered the first read first.
    let (readyz, _) = watch_status(&client, &members[0]).await;
    let frozen = cluster
        .members
        .iter()
        .find(|member| readyz.contains(&format!("; watching 127.0.0.1:{}", member.client_port)))
        .unwrap_or_else(|| panic!("the watch is on none of the members: {readyz}"));
    let on_frozen = format!("; watching 127.0.0.1:{}", frozen.client_port);

    frozen.freeze();
    // Pushed through a member of the two that go on (once they have
    // elected a leader, should the frozen one have been it).
    let b = chain_b_with_fresh_components(dir.path());
    let healthy = cluster
        .members
        .iter()
        .find(|member| member.client_port != frozen.client_port)
        .expect("a member left")
        .url("members");
    let started = Instant::now();
    let second = loop {
        match try_push(&b, &healthy) {
            Ok(revision) => break revision,
            Err(failure) => assert!(
                started.elapsed() < BOUND,
                "the two members left did not take a push within {BOUND:?}: {failure}"
            ),
        }
    };
    all_apply(&client, &members, second, 2 * BOUND).await;
    let (readyz, down_since) = watch_status(&client, &members[0]).await;
    assert!(
        !readyz.contains(&on_frozen) && readyz.contains("; watching 127.0.0.1:"),
        "the watch is on another member: {readyz}"
    );
    assert_eq!(down_since, Some(0.0), "{readyz}");
    assert_eq!(
        ask(
            &client,
            &members[0].process.url(""),
            "through-another-member"
        )
        .await
        .as_deref(),
        Ok("B")
    );
    frozen.thaw();
}

/// A gateway with no disk copy starts from the first member to answer: its
/// URL lists fifteen addresses that take connections and never answer (as
/// a frozen member's do) before the one member that answers. The first
/// read went to a member picked at random and, on a silent one, failed the
/// start after its timeout; now every member is asked at once and the watch
/// starts on the one that answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_with_no_disk_copy_starts_from_the_member_that_answers() {
    let etcd = Etcd::start();
    let dir = new_dir();
    let (a, _) = write_chains(dir.path());
    let first = push(&a, &etcd.url("fleet"));
    // Bound and listening, never accepted: the kernel completes each
    // connection and nothing ever answers on it.
    let silent: Vec<std::net::TcpListener> = (0..15)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("a silent address"))
        .collect();
    let mut endpoints: Vec<String> = silent
        .iter()
        .map(|listener| listener.local_addr().expect("its address").to_string())
        .collect();
    let answering = format!("127.0.0.1:{}", etcd.client_port);
    endpoints.push(answering.clone());
    let url = format!("etcd://{}/fleet", endpoints.join(","));
    let client = http_client();
    for id in ["gw1", "gw2"] {
        let member = join(&url, &dir.path().join(id), id, free_port());
        all_apply(&client, std::slice::from_ref(&member), first, BOUND).await;
        let readyz = readyz(&client, &member).await;
        assert!(
            readyz.contains(&format!("revision {first} from etcd://"))
                && readyz.contains(&format!("; watching {answering}")),
            "{readyz}"
        );
    }
}
