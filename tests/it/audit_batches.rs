//! Audit in batches (kube's batch backend) with the real jsonl-audit
//! component, which takes a batch per call: every request's events reach
//! the sink, in stage order, in fewer calls than events; a buffer too small
//! for a burst drops events and counts every one (written + dropped = made);
//! blocking mode has each event written before the response; an auditor
//! built against `wasmgate:filter@0.1.0` (the compat-0-1-audit fixture),
//! which exports `audit` and not `audit-batch`, gets every event of a batch,
//! one call each; shutdown writes what is queued at once, though its batch
//! would wait a minute more.

use std::path::PathBuf;

use crate::support::*;

/// kube's count of the events the batch buffer dropped
/// (`staging/src/k8s.io/apiserver/plugin/pkg/audit/buffered/buffered.go`).
const DROPPED: &str = r#"apiserver_audit_error_total{plugin="buffered"}"#;

/// An anonymous gateway auditing every request at Metadata level with
/// jsonl-audit (named `name`) and these `[audit]` settings.
async fn audited(upstream: &Upstream, name: &str, audit: &str) -> (TestGateway, PathBuf) {
    audited_by(upstream, name, "jsonl-audit", "", audit).await
}

/// [`audited`], with the auditor `component` of `filters/dist/` and these
/// further keys of its filter entry.
async fn audited_by(
    upstream: &Upstream,
    name: &str,
    component: &str,
    settings: &str,
    audit: &str,
) -> (TestGateway, PathBuf) {
    let manifest = plaintext(
        &[
            "[authentication]\nanonymous = true\n[authorization]\nalways_allow = true\n".to_owned(),
            format!("\n[audit]\n{audit}\n[[audit.policy]]\nlevel = \"Metadata\"\n"),
            filter(
                "audit.filters",
                name,
                component,
                None,
                &format!("sink = \"audit.jsonl\"\n{settings}"),
            ),
            routes(&upstream.url()),
        ]
        .concat(),
    );
    let gateway = TestGateway::start(&manifest).await;
    let path = gateway.dir.path().join("audit.jsonl");
    (gateway, path)
}

/// `count` requests at once; their Audit-IDs.
async fn burst(gateway: &TestGateway, count: usize) -> Vec<String> {
    let client = http_client();
    let mut requests = tokio::task::JoinSet::new();
    for i in 0..count {
        let request = client.get(gateway.url(&format!("/open/{i}")));
        requests.spawn(async move { send(request).await });
    }
    let mut ids = Vec::new();
    while let Some(answer) = bounded("a burst", requests.join_next()).await {
        let answer = answer.expect("a request task");
        assert_eq!(answer.status, 200, "{}", answer.body);
        ids.push(answer.header("audit-id").expect("an Audit-ID").to_owned());
    }
    ids
}

#[tokio::test]
async fn batches_deliver_every_event_in_order_in_fewer_local_filter_calls() {
    build_filters();
    let upstream = Upstream::start().await;
    let (gateway, path) = audited(
        &upstream,
        "batched-audit",
        "mode = \"batch\"\nmax_batch_size = 50\nmax_batch_wait = \"200ms\"",
    )
    .await;
    let ids = burst(&gateway, 40).await;
    for id in &ids {
        let events = wait_for_events(&path, id, 2).await;
        assert_eq!(
            stages_of(&events),
            ["RequestReceived", "ResponseComplete"],
            "{id}"
        );
        assert_each_stage_its_own(&events);
    }
    let batches = local_filter_calls("batched-audit", "answer");
    assert!(
        (1..80).contains(&batches),
        "80 events in {batches} calls: batched"
    );
    gateway.shutdown().await;
}

/// A RequestReceived and the ResponseComplete made later from the same
/// record: the first as it was when the request came (written or rendered
/// into its line then, the record lent rather than copied), the second with
/// the response.
fn assert_each_stage_its_own(events: &[serde_json::Value]) {
    let (received, complete) = (&events[0], &events[1]);
    assert_eq!(received["auditID"], complete["auditID"]);
    assert_eq!(
        received["requestReceivedTimestamp"],
        complete["requestReceivedTimestamp"]
    );
    assert!(received.get("responseStatus").is_none(), "{received}");
    assert_eq!(complete["responseStatus"]["code"], 200, "{complete}");
    let stamp = |event: &serde_json::Value| {
        let text = event["stageTimestamp"].as_str().expect("a stageTimestamp");
        humantime::parse_rfc3339(text).expect("RFC 3339")
    };
    assert!(stamp(received) <= stamp(complete), "{received} {complete}");
}

#[tokio::test]
async fn a_full_buffer_drops_and_counts_every_dropped_event() {
    build_filters();
    let upstream = Upstream::start().await;
    let dropped_before = local_metric(DROPPED);
    let (gateway, path) = audited(
        &upstream,
        "tiny-buffer-audit",
        "mode = \"batch\"\nqueue_size = 1\nmax_batch_size = 1\nmax_batch_wait = \"0s\"",
    )
    .await;
    let ids = burst(&gateway, 200).await;
    // Every event made is written or dropped, none lost unaccounted.
    let made = 2 * ids.len() as u64;
    let (written, dropped) = eventually("every event written or dropped", || async {
        let written = audit_events(&path).len() as u64;
        let dropped = local_metric(DROPPED) - dropped_before;
        (written + dropped == made).then_some((written, dropped))
    })
    .await;
    assert!(
        dropped > 0,
        "200 requests at once overflow a buffer of one ({written} written)"
    );
    gateway.shutdown().await;
}

#[tokio::test]
async fn blocking_mode_writes_each_event_before_the_response() {
    build_filters();
    let upstream = Upstream::start().await;
    let (gateway, path) = audited(&upstream, "blocking-audit", "mode = \"blocking\"").await;
    let client = http_client();
    for i in 0..10 {
        let answer = get(&client, &gateway.url(&format!("/open/{i}"))).await;
        let id = answer.header("audit-id").expect("an Audit-ID");
        // Read at once, without waiting: both events are already there.
        let events = events_of(&path, id);
        assert_eq!(stages_of(&events), ["RequestReceived", "ResponseComplete"]);
        assert_each_stage_its_own(&events);
    }
    assert_eq!(
        local_filter_calls("blocking-audit", "answer"),
        20,
        "one call per event"
    );
    gateway.shutdown().await;
}

/// A batch waiting to fill for a minute is written at shutdown, at once
/// (well within the shutdown's 10 s flush limit), every event of every
/// request.
#[tokio::test]
async fn shutdown_writes_the_batch_still_filling() {
    build_filters();
    let upstream = Upstream::start().await;
    let (mut gateway, path) = audited(
        &upstream,
        "shutdown-audit",
        "mode = \"batch\"\nmax_batch_size = 400\nmax_batch_wait = \"60s\"",
    )
    .await;
    let ids = burst(&gateway, 5).await;
    assert!(
        audit_events(&path).is_empty(),
        "the batch waits to fill: nothing written yet"
    );
    let started = std::time::Instant::now();
    bounded("the gateway to shut down", gateway.begin_shutdown())
        .await
        .expect("the shutdown task");
    // Without the flush the shutdown would wait out its 10 s flush limit
    // and leave the batch to a process about to exit.
    let took = started.elapsed();
    assert!(
        took < std::time::Duration::from_secs(8),
        "the shutdown waited {took:?}: the flush did not cut the batch's wait short"
    );
    for id in &ids {
        assert_eq!(
            stages_of(&events_of(&path, id)),
            ["RequestReceived", "ResponseComplete"],
            "{id}"
        );
    }
}

/// 0.1.0's auditor takes one event a call: a batch of the backend (one
/// recorded filter call, one fresh instance with `per-request` isolation)
/// reaches it as one `audit` call per event, which the fixture numbers from
/// 1 in each instance; every event is written, in stage order per request.
#[tokio::test]
async fn a_0_1_0_auditor_gets_the_events_of_a_batch_one_call_each() {
    build_filters();
    let upstream = Upstream::start().await;
    let (gateway, path) = audited_by(
        &upstream,
        "legacy-audit",
        "compat-0-1-audit",
        "isolation = \"per-request\"\n",
        "mode = \"batch\"\nmax_batch_size = 50\nmax_batch_wait = \"200ms\"",
    )
    .await;
    let ids = burst(&gateway, 20).await;
    let lines = eventually("40 lines", || async {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let lines: Vec<Vec<String>> = text
            .lines()
            .map(|line| line.split(' ').map(str::to_owned).collect())
            .collect();
        (lines.len() >= 40).then_some(lines)
    })
    .await;
    assert_eq!(lines.len(), 40, "{lines:?}");
    for id in &ids {
        let stages: Vec<&str> = lines
            .iter()
            .filter(|line| line[0] == *id)
            .map(|line| line[1].as_str())
            .collect();
        assert_eq!(stages, ["RequestReceived", "ResponseComplete"], "{id}");
    }
    let batches = local_filter_calls("legacy-audit", "answer");
    assert!((1..40).contains(&batches), "40 events in {batches} batches");
    let first_calls = lines.iter().filter(|line| line[2] == "1").count() as u64;
    assert_eq!(
        first_calls, batches,
        "each batch is one instance, called once per event"
    );
    gateway.shutdown().await;
}

/// The manifest of [`audited`], with `limits` (lines of `[limits]`), for a
/// gateway that reloads it.
fn audited_manifest(upstream: &Upstream, audit: &str, limits: &str) -> String {
    plaintext(
        &[
            format!("[limits]\n{limits}\n"),
            "[authentication]\nanonymous = true\n[authorization]\nalways_allow = true\n".to_owned(),
            format!("\n[audit]\n{audit}\n[[audit.policy]]\nlevel = \"Metadata\"\n"),
            filter(
                "audit.filters",
                "reloaded-audit",
                "jsonl-audit",
                None,
                "sink = \"audit.jsonl\"\n",
            ),
            routes(&upstream.url()),
        ]
        .concat(),
    )
}

/// Every audit backend still writing is flushed at shutdown, not only the
/// live configuration's: the batch of the configuration a reload replaced
/// (waiting its minute to fill; a request still in flight keeps that
/// configuration's backend alive, and the shutdown's cut completes that
/// request there) is written before the shutdown returns, as the live
/// one's is (`shutdown_writes_the_batch_still_filling`,
/// `requests_cut_at_shutdown_are_completed_in_batch_mode`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_then_shutdown_writes_the_previous_generations_queued_events() {
    build_filters();
    let upstream = Upstream::start().await;
    let manifest = audited_manifest(
        &upstream,
        "mode = \"batch\"\nmax_batch_size = 400\nmax_batch_wait = \"60s\"",
        "shutdown_timeout = \"300ms\"",
    );
    let gateway = ReloadGateway::start(&manifest).await;
    let path = gateway.dir.path().join("audit.jsonl");
    let client = http_client();
    // Five requests answered on generation 1: their events wait in its batch.
    let mut ids = Vec::new();
    for i in 0..5 {
        let answer = send(client.get(gateway.url(&format!("/open/{i}")))).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        ids.push(answer.header("audit-id").expect("an Audit-ID").to_owned());
    }
    // One request still in flight on generation 1 (its upstream never
    // answers): it keeps generation 1's chain, hence its backend, alive.
    let hanging = raw_request(
        gateway.addr,
        format!(
            "GET /open/hang HTTP/1.1\r\nHost: gateway\r\nAudit-ID: hanging-on-generation-1\r\n{MODE}: hang\r\n\r\n"
        )
        .as_bytes(),
    )
    .await;
    upstream.next_arrival().await;
    ids.push("hanging-on-generation-1".to_owned());
    assert!(
        audit_events(&path).is_empty(),
        "the batch waits to fill: nothing written yet"
    );
    let (generation, _) = gateway.swapped().await;
    assert_eq!(generation, 2);
    // The shutdown cuts the hanging request (its ResponseComplete goes to
    // generation 1's backend too) and flushes the audit log.
    // The temp dir kept: the log is read after the gateway is gone.
    let (drained, _dir) = gateway.shutdown_keeping_dir().await;
    assert!(matches!(
        drained,
        wasmgate::server::Drained::TimedOut { .. }
    ));
    // Read at once, as the exiting process leaves it.
    let written = audit_events(&path).len();
    for id in &ids {
        assert_eq!(
            stages_of(&events_of(&path, id)),
            ["RequestReceived", "ResponseComplete"],
            "{id}: every event of generation 1 is written by the time the shutdown returns \
             ({written} of 12 events written)"
        );
    }
    drop(hanging);
}
