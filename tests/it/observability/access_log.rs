//! The access log of a real gateway process: one JSON line per request with
//! `--log-format json` (audit ID, user, verb, URI, code, bytes in and out,
//! latency, the server and route the request reached, the trace ID), a text line
//! without it, every request with `mode = "on"`, none with `"off"` and
//! its share with `"sampled"`.

use crate::support::{
    BOUND, GatewayProcess, MODE, Upstream, eventually, get, http_client, new_dir, plaintext, send,
};
use serde_json::Value;

const WIDGETS: &str = "/apis/demo.example.io/v1/namespaces/default/widgets";
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

fn spawn(
    upstream: &Upstream,
    access_log: &str,
    args: &[&str],
) -> (tempfile::TempDir, GatewayProcess) {
    let up = upstream.url();
    let manifest = plaintext(&format!(
        r#"
{access_log}

[[servers]]
name = "front"

[[servers.routes]]
api = "/apis/demo.example.io"
upstream = "{up}"
"#
    ));
    let dir = new_dir();
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, manifest).expect("write the manifest");
    let gateway = GatewayProcess::spawn_with_args(&path, args);
    (dir, gateway)
}

/// A gateway that logs every request, in JSON lines.
fn spawn_logging_every_request_as_json(upstream: &Upstream) -> (tempfile::TempDir, GatewayProcess) {
    spawn(
        upstream,
        "[access_log]\nmode = \"on\"",
        &["--log-format", "json"],
    )
}

/// The access log lines (JSON) the gateway has written so far.
fn json_lines(gateway: &GatewayProcess) -> Vec<Value> {
    gateway
        .log_text()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["target"] == "wasmgate::access")
        .map(|line| line["fields"].clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_gets_one_json_line_with_what_an_operator_asks() {
    let upstream = Upstream::start().await;
    let (_dir, gateway) = spawn_logging_every_request_as_json(&upstream);
    let client = http_client();
    let body = r#"{"metadata":{"name":"w1"}}"#;
    let created = send(
        client
            .post(gateway.url(WIDGETS))
            .header("audit-id", "access-log-1")
            .header("traceparent", format!("00-{TRACE_ID}-00f067aa0ba902b7-01"))
            .body(body),
    )
    .await;
    assert_eq!(created.status, 200);
    let missing = get(&client, &gateway.url("/nowhere")).await;
    assert_eq!(missing.status, 404);

    let lines = eventually("two access log lines", || {
        let lines = json_lines(&gateway);
        async move { (lines.len() >= 2).then_some(lines) }
    })
    .await;
    assert_eq!(lines.len(), 2, "{lines:#?}");
    let line = lines
        .iter()
        .find(|line| line["audit_id"] == "access-log-1")
        .unwrap_or_else(|| panic!("no line for the audit ID: {lines:#?}"));
    assert_eq!(line["message"], "request");
    assert_eq!(line["user"], "system:anonymous");
    assert_eq!(line["verb"], "create");
    assert_eq!(line["method"], "POST");
    assert_eq!(line["uri"], WIDGETS);
    assert_eq!(line["code"], 200);
    assert_eq!(line["bytes_in"], body.len());
    assert_eq!(line["bytes_out"], created.body.len());
    assert!(
        line["latency_us"]
            .as_u64()
            .is_some_and(|us| us > 0 && us < BOUND.as_micros() as u64)
    );
    assert_eq!(line["server"], "front");
    assert_eq!(line["route"], "/apis/demo.example.io");
    assert_eq!(line["trace_id"], TRACE_ID);
    assert_eq!(line["cut"], false);
    // The gateway's own 404: no route answered it.
    let not_found = lines
        .iter()
        .find(|line| line["uri"] == "/nowhere")
        .unwrap_or_else(|| panic!("no line for the 404: {lines:#?}"));
    assert_eq!(not_found["code"], 404);
    assert_eq!(not_found["route"], "");
    assert_eq!(not_found["bytes_out"], missing.body.len());
}

/// A request a route took, answered by the gateway for it (its deadline
/// passed while the upstream was silent: a 504), names the route it
/// reached; the gateway's own answers before any route (the 404 above)
/// name none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_timed_out_at_its_route_names_the_route() {
    let upstream = Upstream::start().await;
    let (_dir, gateway) = spawn_logging_every_request_as_json(&upstream);
    let answer = send(
        http_client()
            .get(gateway.url(&format!("{WIDGETS}?timeout=200ms")))
            .header(MODE, "hang")
            .header("audit-id", "timed-out-1"),
    )
    .await;
    assert_eq!(answer.status, 504, "{}", answer.body);
    let line = eventually("the timed-out request's line", || {
        let line = json_lines(&gateway)
            .into_iter()
            .find(|line| line["audit_id"] == "timed-out-1");
        async move { line }
    })
    .await;
    assert_eq!(line["code"], 504);
    assert_eq!(line["server"], "front");
    assert_eq!(line["route"], "/apis/demo.example.io");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_text_format_is_one_line_of_key_value_pairs() {
    let upstream = Upstream::start().await;
    let (_dir, gateway) = spawn(&upstream, "[access_log]", &[]);
    let answer = send(
        http_client()
            .get(gateway.url(WIDGETS))
            .header("audit-id", "text-1"),
    )
    .await;
    assert_eq!(answer.status, 200);
    let line = eventually("the access log line", || {
        let line = gateway
            .log_text()
            .lines()
            .find(|line| line.contains("wasmgate::access") && line.contains("text-1"))
            .map(str::to_owned);
        async move { line }
    })
    .await;
    for field in [
        "audit_id=\"text-1\"",
        "verb=\"list\"",
        "code=200",
        "server=\"front\"",
        "route=\"/apis/demo.example.io\"",
    ] {
        assert!(line.contains(field), "{field} missing from {line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_writes_nothing_and_sampled_writes_its_share() {
    let upstream = Upstream::start().await;
    let (_off_dir, off) = spawn(
        &upstream,
        "[access_log]\nmode = \"off\"",
        &["--log-format", "json"],
    );
    let (_dir, sampled) = spawn(
        &upstream,
        "[access_log]\nmode = \"sampled\"\nsample_rate_per_million = 250000",
        &["--log-format", "json"],
    );
    let client = http_client();
    for _ in 0..400 {
        assert_eq!(get(&client, &off.url(WIDGETS)).await.status, 200);
        assert_eq!(get(&client, &sampled.url(WIDGETS)).await.status, 200);
    }
    // The last line is written once its response has been sent: wait for
    // the count to settle.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(json_lines(&off).len(), 0);
    let kept = json_lines(&sampled).len();
    assert!((60..=140).contains(&kept), "{kept} of 400 lines at 25%");
}

/// The line's user is the one authentication found (reported to the log,
/// which asks for it, rather than copied onto every response), none for a
/// request it refused; a request that impersonates names the user it was
/// made as too (kube's impersonation filter notes it in its HTTP log).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_line_names_the_user_authentication_found() {
    let upstream = Upstream::start().await;
    let settings = format!(
        "[access_log]\nmode = \"on\"\n[authorization]\nalways_allow = true\n[authentication]\nanonymous = true\n{}",
        crate::support::tokens()
    );
    let (_dir, gateway) = spawn(&upstream, &settings, &["--log-format", "json"]);
    let client = http_client();
    let request = |audit_id: &str| {
        client
            .get(gateway.url(WIDGETS))
            .header("audit-id", audit_id)
    };
    let alice = send(request("access-log-alice").bearer_auth("alice-token")).await;
    assert_eq!(alice.status, 200);
    let anonymous = send(request("access-log-anonymous")).await;
    assert_eq!(anonymous.status, 200);
    let refused = send(request("access-log-refused").bearer_auth("no-such-token")).await;
    assert_eq!(refused.status, 401);
    let as_bob = send(
        request("access-log-as-bob")
            .bearer_auth("alice-token")
            .header("impersonate-user", "bob"),
    )
    .await;
    assert_eq!(as_bob.status, 200);

    let lines = eventually("four access log lines", || {
        let lines = json_lines(&gateway);
        async move { (lines.len() >= 4).then_some(lines) }
    })
    .await;
    let users_of = |audit_id: &str| {
        lines
            .iter()
            .find(|line| line["audit_id"] == audit_id)
            .map(|line| (line["user"].clone(), line["impersonated_user"].clone()))
            .unwrap_or_else(|| panic!("no line for {audit_id}: {lines:#?}"))
    };
    assert_eq!(users_of("access-log-alice"), ("alice".into(), "".into()));
    assert_eq!(
        users_of("access-log-anonymous"),
        ("system:anonymous".into(), "".into())
    );
    assert_eq!(users_of("access-log-refused"), ("".into(), "".into()));
    assert_eq!(
        users_of("access-log-as-bob"),
        ("alice".into(), "bob".into())
    );
}
