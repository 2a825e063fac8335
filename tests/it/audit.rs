//! The audit stage with the real jsonl-audit component writing to a file:
//! the policy's first matching rule sets the level (Metadata, Request with
//! the request object, RequestResponse with the response object too), a
//! rule's omitted stages are not written, no matching rule means no event;
//! long-running requests get ResponseStarted; batch mode delivers; the
//! Audit-ID header is the events' auditID; impersonation and authorization
//! decisions are recorded. Every request that got RequestReceived gets
//! ResponseComplete, 25 of 25: those answered 504 by the timeout, those
//! their clients abandon (HTTP/1.1 and HTTP/2), those cut at shutdown (in
//! both modes, written before the log is flushed), one whose body stalls
//! until its deadline, one cut while its ResponseComplete is written; and failed
//! authentications are audited as kube's `WithFailedAuthenticationAudit`
//! audits them.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::support::*;

/// The policy of these tests, first match wins.
const POLICY: &str = r#"
[[audit.policy]]
level = "None"
non_resource_urls = ["/healthz*"]

[[audit.policy]]
level = "RequestResponse"
users = ["alice"]
verbs = ["create"]
resources = [{ group = "demo.example.io", resources = ["widgets"] }]

[[audit.policy]]
level = "Request"
verbs = ["create", "update"]

[[audit.policy]]
level = "Metadata"
users = ["bob"]

[[audit.policy]]
level = "Metadata"
non_resource_urls = ["/open/*"]
omit_stages = ["RequestReceived"]

[[audit.policy]]
level = "Metadata"
non_resource_urls = ["/private/*"]
"#;

/// A gateway with tokens, RBAC, the policy above and jsonl-audit writing to
/// `audit.jsonl` beside the manifest; returns it and the file's path.
async fn audited_gateway(upstream: &Upstream, mode: &str) -> (TestGateway, PathBuf) {
    audited_gateway_with(upstream, mode, "").await
}

/// The same, with `limits` in its `[limits]`.
async fn audited_gateway_with(
    upstream: &Upstream,
    mode: &str,
    limits: &str,
) -> (TestGateway, PathBuf) {
    let audit = format!("\n[limits]\n{limits}\n\n[audit]\nmode = \"{mode}\"\n{POLICY}");
    let sink = audit_log_sink();
    let manifest = plaintext(
        &[
            "[authentication]\nanonymous = true\n".to_owned(),
            tokens(),
            rbac(),
            audit,
            sink,
            routes(&upstream.url()),
        ]
        .concat(),
    );
    let gateway = TestGateway::start(&manifest).await;
    let log = gateway.dir.path().join("audit.jsonl");
    (gateway, log)
}

fn audit_id(answer: &Answer) -> String {
    answer
        .header("audit-id")
        .expect("an Audit-ID header")
        .to_owned()
}

fn annotations(event: &Value) -> Value {
    event.get("annotations").cloned().unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_mode_records_each_request_at_its_rule_level() {
    let upstream = Upstream::start().await;
    let (gateway, log) = audited_gateway(&upstream, "blocking").await;
    let client = http_client();
    let widget =
        json!({"apiVersion": "demo.example.io/v1", "kind": "Widget", "metadata": {"name": "w1"}});

    // alice creates: rules 2 and 3 match, the first (RequestResponse) wins.
    // The client's Audit-ID is kept and is every event's auditID.
    let request = client
        .post(gateway.url(WIDGETS))
        .bearer_auth("alice-token")
        .header("Audit-ID", "alice-creates-w1")
        .header("content-type", "application/json")
        .body(widget.to_string());
    let answer = send(request).await;
    let echoed = echo(&answer);
    assert_eq!(audit_id(&answer), "alice-creates-w1");
    // Blocking: the events are written before the response is sent.
    let events = events_of(&log, "alice-creates-w1");
    assert_eq!(
        stages_of(&events),
        ["RequestReceived", "ResponseComplete"],
        "{events:#?}"
    );
    for event in &events {
        assert_eq!(event["kind"], "Event");
        assert_eq!(event["apiVersion"], "audit.k8s.io/v1");
        assert_eq!(event["level"], "RequestResponse");
        assert_eq!(event["verb"], "create");
        assert_eq!(event["requestURI"], WIDGETS);
        assert_eq!(
            event["user"],
            json!({"username": "alice", "uid": "1001", "groups": ["dev", "system:authenticated"]})
        );
        assert_eq!(
            event["objectRef"],
            json!({"resource": "widgets", "namespace": "default", "apiGroup": "demo.example.io", "apiVersion": "v1"})
        );
        assert_eq!(event["sourceIPs"], json!(["127.0.0.1"]));
        assert!(event.get("impersonatedUser").is_none(), "{event}");
    }
    // RequestReceived is written before the body is read, as kube's.
    let (received, complete) = (&events[0], &events[1]);
    assert!(
        received.get("requestObject").is_none()
            && received.get("responseStatus").is_none()
            && received.get("responseObject").is_none(),
        "{received}"
    );
    assert_eq!(complete["requestObject"], widget);
    assert_eq!(complete["responseStatus"]["code"], 200);
    assert_eq!(
        complete["responseObject"], echoed,
        "the response body, as the client got it"
    );
    assert_eq!(
        annotations(complete),
        json!({"authorization.k8s.io/decision": "allow", "authorization.k8s.io/reason": ""})
    );
    assert_eq!(
        received["requestReceivedTimestamp"],
        complete["requestReceivedTimestamp"]
    );

    // bob creates (rule 3, Request): the object, no response object; RBAC
    // forbids him, and the decision and its reason are annotated.
    let request = client
        .post(gateway.url(WIDGETS))
        .bearer_auth("bob-token")
        .header("content-type", "application/json")
        .body(widget.to_string());
    let answer = send(request).await;
    answer.assert_status(403, "Forbidden");
    let events = events_of(&log, &audit_id(&answer));
    assert_eq!(
        stages_of(&events),
        ["RequestReceived", "ResponseComplete"],
        "{events:#?}"
    );
    assert!(events.iter().all(|event| event["level"] == "Request"));
    assert!(events[0].get("requestObject").is_none(), "{}", events[0]);
    assert_eq!(events[1]["requestObject"], widget);
    assert!(
        events
            .iter()
            .all(|event| event.get("responseObject").is_none())
    );
    let complete = &events[1];
    assert_eq!(complete["responseStatus"]["code"], 403);
    assert_eq!(complete["responseStatus"]["status"], "Failure");
    let annotations = annotations(complete);
    assert_eq!(annotations["authorization.k8s.io/decision"], "forbid");
    let reason = annotations["authorization.k8s.io/reason"]
        .as_str()
        .expect("a reason");
    assert!(
        reason.starts_with("RBAC: no rules authorize user \"bob\""),
        "{reason}"
    );

    // alice updates (rule 3: Request).
    let request = client
        .put(gateway.url(&format!("{WIDGETS}/w1")))
        .bearer_auth("alice-token")
        .header("content-type", "application/json")
        .body(widget.to_string());
    let answer = send(request).await;
    echo(&answer);
    let events = events_of(&log, &audit_id(&answer));
    assert_eq!(events.len(), 2);
    assert!(
        events
            .iter()
            .all(|event| event["level"] == "Request" && event["verb"] == "update"),
        "{events:#?}"
    );

    // bob lists (rule 4, by user: Metadata): no objects recorded.
    let answer = send(client.get(gateway.url(WIDGETS)).bearer_auth("bob-token")).await;
    echo(&answer);
    let events = events_of(&log, &audit_id(&answer));
    assert_eq!(stages_of(&events), ["RequestReceived", "ResponseComplete"]);
    for event in &events {
        assert_eq!(event["level"], "Metadata");
        assert_eq!(event["verb"], "list");
        assert!(
            event.get("requestObject").is_none() && event.get("responseObject").is_none(),
            "{event}"
        );
    }

    // A non-resource URL rule that omits RequestReceived.
    let answer = send(
        client
            .get(gateway.url("/open/x"))
            .bearer_auth("alice-token"),
    )
    .await;
    echo(&answer);
    let events = events_of(&log, &audit_id(&answer));
    assert_eq!(stages_of(&events), ["ResponseComplete"], "{events:#?}");
    assert_eq!(events[0]["level"], "Metadata");
    assert_eq!(events[0]["verb"], "get");
    assert!(events[0].get("objectRef").is_none());

    // Level None (/healthz), and no rule at all (anonymous lists widgets): no events.
    let healthz = send(
        client
            .get(gateway.url("/healthz"))
            .bearer_auth("alice-token"),
    )
    .await;
    assert_eq!(healthz.status, 200, "{}", healthz.body);
    let anonymous = get(&client, &gateway.url(WIDGETS)).await;
    anonymous.assert_status(403, "Forbidden");
    for answer in [&healthz, &anonymous] {
        assert_eq!(events_of(&log, &audit_id(answer)), Vec::<Value>::new());
    }
    assert_eq!(
        audit_events(&log).len(),
        2 + 2 + 2 + 2 + 1,
        "only the events above were written"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_running_request_gets_response_started_then_complete() {
    let upstream = Upstream::start().await;
    let (gateway, log) = audited_gateway(&upstream, "blocking").await;
    let client = http_client();

    let request = client
        .get(gateway.url(&format!("{WIDGETS}?watch=true")))
        .bearer_auth("bob-token")
        .header(MODE, "stream");
    let mut response = bounded("the watch's headers", request.send())
        .await
        .expect("send the watch");
    assert_eq!(response.status(), 200);
    let id = response
        .headers()
        .get("audit-id")
        .expect("an Audit-ID")
        .to_str()
        .expect("text")
        .to_owned();
    let first = bounded("the first chunk", response.chunk())
        .await
        .expect("read a chunk")
        .expect("a chunk");
    assert_eq!(&first[..], b"first\n");

    // The response has started and is still streaming.
    let events = events_of(&log, &id);
    assert_eq!(
        stages_of(&events),
        ["RequestReceived", "ResponseStarted"],
        "{events:#?}"
    );
    assert_eq!(events[1]["responseStatus"]["code"], 200);
    assert!(
        events
            .iter()
            .all(|event| event["verb"] == "watch" && event["level"] == "Metadata")
    );

    // The upstream finishes the stream: ResponseComplete follows.
    upstream.release(1);
    let mut rest = Vec::new();
    while let Some(chunk) = bounded("the rest of the watch", response.chunk())
        .await
        .expect("read a chunk")
    {
        rest.extend_from_slice(&chunk);
    }
    assert_eq!(rest, b"second\nthird\n");
    let events = wait_for_events(&log, &id, 3).await;
    assert_eq!(
        stages_of(&events),
        ["RequestReceived", "ResponseStarted", "ResponseComplete"],
        "{events:#?}"
    );
    assert_eq!(events[2]["responseStatus"]["code"], 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_mode_delivers_every_event() {
    let upstream = Upstream::start().await;
    let (mut gateway, log) = audited_gateway(&upstream, "batch").await;
    let client = http_client();
    let mut ids = Vec::new();
    for i in 0..10 {
        let answer = send(
            client
                .get(gateway.url(&format!("{WIDGETS}/w{i}")))
                .bearer_auth("bob-token"),
        )
        .await;
        echo(&answer);
        ids.push(audit_id(&answer));
    }
    for id in &ids {
        let events = wait_for_events(&log, id, 2).await;
        assert_eq!(
            stages_of(&events),
            ["RequestReceived", "ResponseComplete"],
            "{events:#?}"
        );
        assert_eq!(events[0]["verb"], "get");
    }
    // Shutdown flushes whatever is queued.
    let answer = send(
        client
            .get(gateway.url("/private/flush"))
            .bearer_auth("alice-token"),
    )
    .await;
    answer.assert_status(403, "Forbidden");
    let id = audit_id(&answer);
    // (begin_shutdown keeps the gateway's temp dir, and the log, alive.)
    let drained = bounded("the shutdown", gateway.begin_shutdown())
        .await
        .expect("the shutdown task");
    assert_eq!(drained, wasmgate::server::Drained::Complete);
    assert_eq!(
        stages_of(&events_of(&log, &id)),
        ["RequestReceived", "ResponseComplete"]
    );
    assert_eq!(audit_events(&log).len(), 22);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonation_is_recorded_beside_the_requesting_user() {
    let upstream = Upstream::start().await;
    let (gateway, log) = audited_gateway(&upstream, "blocking").await;
    let client = http_client();
    let request = client
        .get(gateway.url("/private/bob"))
        .bearer_auth("alice-token")
        .header("Impersonate-User", "bob");
    let answer = send(request).await;
    echo(&answer);
    let events = events_of(&log, &audit_id(&answer));
    assert_eq!(
        stages_of(&events),
        ["RequestReceived", "ResponseComplete"],
        "{events:#?}"
    );
    let complete = &events[1];
    assert_eq!(
        complete["user"]["username"], "alice",
        "the user is who made the request"
    );
    assert_eq!(
        complete["impersonatedUser"],
        json!({"username": "bob", "groups": ["system:authenticated"]})
    );
    // The decision was about bob, the impersonated user: RBAC allowed it.
    assert_eq!(
        annotations(complete),
        json!({"authorization.k8s.io/decision": "allow", "authorization.k8s.io/reason": ""})
    );
    assert!(
        events[0].get("impersonatedUser").is_none(),
        "impersonation is decided after RequestReceived"
    );
}

/// A Status the gateway answers with is recorded as kube's
/// `LogResponseObject` records the Status `WriteObjectNegotiated` writes
/// (`audit/request.go`, `audit/context.go`): its status, message, reason,
/// details and code, at level Metadata too; an upstream's response, not a
/// Status kube wrote, by its code alone (kube's audit response writer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateways_own_status_is_recorded_whole() {
    let upstream = Upstream::start().await;
    let (gateway, log) = audited_gateway(&upstream, "blocking").await;
    let client = http_client();

    // bob deletes a widget (rule 4, Metadata): RBAC forbids him.
    let answer = send(
        client
            .delete(gateway.url(&format!("{WIDGETS}/w1")))
            .bearer_auth("bob-token"),
    )
    .await;
    answer.assert_status(403, "Forbidden");
    let mut recorded = answer.json();
    let object = recorded.as_object_mut().expect("a Status");
    object.remove("kind");
    object.remove("apiVersion");
    let events = events_of(&log, &audit_id(&answer));
    assert_eq!(stages_of(&events), ["RequestReceived", "ResponseComplete"]);
    assert_eq!(events[1]["level"], "Metadata");
    assert_eq!(events[1]["responseStatus"], recorded, "{}", events[1]);
    assert!(
        recorded["message"].as_str().is_some_and(
            |message| message.starts_with("widgets.demo.example.io \"w1\" is forbidden")
        ),
        "{recorded}"
    );

    // The upstream's 200, not a Status the gateway wrote: the code only.
    let answer = send(client.get(gateway.url(WIDGETS)).bearer_auth("bob-token")).await;
    echo(&answer);
    let events = events_of(&log, &audit_id(&answer));
    assert_eq!(
        events[1]["responseStatus"],
        json!({"metadata": {}, "code": 200})
    );
}

/// kube's `maybeTruncateUserAgent` (`audit/request.go`): a user agent
/// longer than 1024 bytes is recorded as its first 1024 and
/// `...TRUNCATED`, in every event of the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_user_agent_is_truncated_as_kube_does() {
    let upstream = Upstream::start().await;
    let (gateway, log) = audited_gateway(&upstream, "blocking").await;
    let client = http_client();
    let agent = format!("{}{}", "a".repeat(1000), "b".repeat(1000));
    let request = client
        .get(gateway.url(WIDGETS))
        .bearer_auth("bob-token")
        .header("user-agent", &agent);
    let answer = send(request).await;
    echo(&answer);
    let events = events_of(&log, &audit_id(&answer));
    assert_eq!(stages_of(&events), ["RequestReceived", "ResponseComplete"]);
    let truncated = format!("{}...TRUNCATED", &agent[..1024]);
    for event in &events {
        assert_eq!(event["userAgent"], truncated.as_str());
    }
    // One of exactly 1024 bytes is recorded whole.
    let answer = send(
        client
            .get(gateway.url(WIDGETS))
            .bearer_auth("bob-token")
            .header("user-agent", &agent[..1024]),
    )
    .await;
    echo(&answer);
    let events = events_of(&log, &audit_id(&answer));
    assert_eq!(events[1]["userAgent"], &agent[..1024]);
}

/// The most of a response audit records (the gateway's
/// `MAX_RECORDED_RESPONSE`, kube's 3 MiB request body limit).
const MAX_RECORDED_RESPONSE: usize = 3 * 1024 * 1024;

/// alice creating a widget (RequestResponse), the upstream answering
/// `held-json:<kib>`.
fn create_answered_with(
    client: &reqwest::Client,
    gateway: &TestGateway,
    kib: usize,
) -> reqwest::RequestBuilder {
    client
        .post(gateway.url(WIDGETS))
        .bearer_auth("alice-token")
        .header(MODE, format!("held-json:{kib}"))
        .header("content-type", "application/json")
        .body(json!({"kind": "Widget", "metadata": {"name": "w1"}}).to_string())
}

/// kube's truncate backend (`plugin/pkg/audit/truncate/truncate.go`): a
/// response too large to record streams to the client as it comes, every
/// byte once and in order, and its event has neither object and is
/// annotated `audit.k8s.io/truncated: "true"`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_too_large_to_record_streams_and_its_event_is_truncated() {
    let upstream = Upstream::start().await;
    let (gateway, log) = audited_gateway(&upstream, "blocking").await;
    let client = http_client();
    let kib = MAX_RECORDED_RESPONSE / 1024 + 1024;
    let prefix = format!("{{\"pad\":\"{}", "x".repeat(kib * 1024));
    let mut response = bounded(
        "the response's head while the upstream holds its end",
        client.execute(
            create_answered_with(&client, &gateway, kib)
                .build()
                .expect("a request"),
        ),
    )
    .await
    .expect("a response");
    assert_eq!(response.status(), 200);
    let id = response
        .headers()
        .get("audit-id")
        .and_then(|id| id.to_str().ok())
        .expect("an Audit-ID")
        .to_owned();
    // All the upstream sent reaches the client before the upstream ends.
    let mut received = Vec::new();
    while received.len() < prefix.len() {
        let chunk = bounded("the bytes sent so far", response.chunk())
            .await
            .expect("the body")
            .expect("more bytes before the end");
        received.extend_from_slice(&chunk);
    }
    upstream.release(1);
    while let Some(chunk) = bounded("the rest", response.chunk())
        .await
        .expect("the body")
    {
        received.extend_from_slice(&chunk);
    }
    assert!(
        received == format!("{prefix}\"}}").as_bytes(),
        "the client got {} bytes, not the {} the upstream sent",
        received.len(),
        prefix.len() + 2
    );
    let events = wait_for_events(&log, &id, 2).await;
    assert_eq!(stages_of(&events), ["RequestReceived", "ResponseComplete"]);
    let complete = &events[1];
    assert_eq!(complete["level"], "RequestResponse");
    assert_eq!(complete["responseStatus"]["code"], 200);
    assert!(
        complete.get("responseObject").is_none() && complete.get("requestObject").is_none(),
        "{}",
        complete.get("responseObject").is_some()
    );
    assert_eq!(annotations(complete)["audit.k8s.io/truncated"], "true");
}

/// A response within the bound is recorded whole, and not annotated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_within_the_bound_is_recorded_whole() {
    let upstream = Upstream::start().await;
    let (gateway, log) = audited_gateway(&upstream, "blocking").await;
    let client = http_client();
    upstream.release(1);
    let kib = MAX_RECORDED_RESPONSE / 1024 - 64;
    let answer = send(create_answered_with(&client, &gateway, kib)).await;
    assert_eq!(answer.status, 200);
    let body = answer.json();
    assert_eq!(body["pad"].as_str().map(str::len), Some(kib * 1024));
    let events = events_of(&log, &audit_id(&answer));
    assert_eq!(stages_of(&events), ["RequestReceived", "ResponseComplete"]);
    let complete = &events[1];
    assert!(
        complete["responseObject"] == body,
        "the response, recorded whole"
    );
    assert_eq!(complete["requestObject"]["metadata"]["name"], "w1");
    assert!(
        annotations(complete)
            .get("audit.k8s.io/truncated")
            .is_none(),
        "{}",
        annotations(complete)
    );
}

/// kube's `ProcessEventStage` (`audit/context.go`): a RequestReceived
/// event's stageTimestamp is its requestReceivedTimestamp; the later
/// stages' are when they were reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_received_is_stamped_when_the_request_was_received() {
    let upstream = Upstream::start().await;
    let (gateway, log) = audited_gateway(&upstream, "blocking").await;
    let client = http_client();
    for _ in 0..5 {
        let answer = send(client.get(gateway.url(WIDGETS)).bearer_auth("bob-token")).await;
        echo(&answer);
        let events = events_of(&log, &audit_id(&answer));
        assert_eq!(stages_of(&events), ["RequestReceived", "ResponseComplete"]);
        let received = &events[0];
        assert_eq!(
            received["stageTimestamp"], received["requestReceivedTimestamp"],
            "{received}"
        );
    }
}

/// kube's resource matching (`policy/checker.go`): `widgets` is the
/// resource only, never its subresources (kube's audit docs: "Resource
/// "pods" doesn't match requests to any subresource of pods"); `*/scale` is
/// that subresource of any resource; `widgets/*` every subresource of
/// widgets; `*` everything in the group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_resources_match_subresources_as_kube_does() {
    let upstream = Upstream::start().await;
    let policy = r#"
[audit]
mode = "blocking"

[[audit.policy]]
level = "Metadata"
resources = [{ group = "demo.example.io", resources = ["widgets"] }]

[[audit.policy]]
level = "Request"
resources = [{ group = "demo.example.io", resources = ["*/scale"] }]

[[audit.policy]]
level = "RequestResponse"
resources = [{ group = "demo.example.io", resources = ["widgets/*"] }]

[[audit.policy]]
level = "Metadata"
namespaces = ["other"]
resources = [{ group = "demo.example.io", resources = ["*"] }]
"#;
    let sink = audit_log_sink();
    let manifest = plaintext(
        &[
            tokens(),
            rbac(),
            policy.to_owned(),
            sink,
            routes(&upstream.url()),
        ]
        .concat(),
    );
    let gateway = TestGateway::start(&manifest).await;
    let log = gateway.dir.path().join("audit.jsonl");
    let client = http_client();
    let level_of = async |path: &str| {
        let answer = send(client.get(gateway.url(path)).bearer_auth("alice-token")).await;
        let events = events_of(&log, &audit_id(&answer));
        events
            .first()
            .map(|event| event["level"].as_str().expect("a level").to_owned())
    };
    let other = "/apis/demo.example.io/v1/namespaces/other/gadgets";
    for (path, level) in [
        (format!("{WIDGETS}/w1"), Some("Metadata")),
        (format!("{WIDGETS}/w1/scale"), Some("Request")),
        (format!("{WIDGETS}/w1/status"), Some("RequestResponse")),
        (format!("{other}/g1/status"), Some("Metadata")),
        (
            "/apis/demo.example.io/v1/namespaces/default/gadgets/g1".to_owned(),
            None,
        ),
    ] {
        assert_eq!(level_of(&path).await.as_deref(), level, "{path}");
    }
}

/// kube's whole `Policy` (`audit/policy/checker.go`, `audit/request.go`):
/// the policy's `omitStages` are left out of every rule's requests, its
/// `omitManagedFields` holds where a rule does not say otherwise, and a
/// rule's `resourceNames` match only requests naming one of them. Left out
/// are the object's, a list's items' and a Table's rows' managed fields,
/// from the recorded copy only: the client gets every byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_omits_stages_and_managed_fields_and_matches_names_as_kube_does() {
    let upstream = Upstream::start().await;
    let policy = r#"
[audit]
mode = "blocking"
omit_stages = ["RequestReceived"]
omit_managed_fields = true

[[audit.policy]]
level = "RequestResponse"
resources = [{ group = "demo.example.io", resources = ["widgets"], resource_names = ["kept"] }]
omit_managed_fields = false

[[audit.policy]]
level = "RequestResponse"
resources = [{ group = "demo.example.io", resources = ["widgets"] }]
"#;
    let manifest = plaintext(
        &[
            tokens(),
            rbac(),
            policy.to_owned(),
            audit_log_sink(),
            routes(&upstream.url()),
        ]
        .concat(),
    );
    let gateway = TestGateway::start(&manifest).await;
    let log = gateway.dir.path().join("audit.jsonl");
    let client = http_client();
    let managed = json!([{"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:spec": {}}}]);
    let widget = |name: &str| json!({"kind": "Widget", "metadata": {"name": name, "managedFields": managed, "labels": {"a": "b"}}});
    let bodies = [
        (format!("{WIDGETS}/w1"), widget("w1")),
        (
            WIDGETS.to_owned(),
            json!({"kind": "WidgetList", "metadata": {}, "items": [widget("w2"), widget("w3")]}),
        ),
        (
            WIDGETS.to_owned(),
            json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "rows": [{"cells": ["w4"], "object": widget("w4")}]}),
        ),
        (format!("{WIDGETS}/kept"), widget("kept")),
    ];
    for (path, body) in bodies {
        let answer = send(
            client
                .put(gateway.url(&path))
                .bearer_auth("alice-token")
                .header(MODE, "reflect")
                .header("content-type", "application/json")
                .body(body.to_string()),
        )
        .await;
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
        assert_eq!(answer.json(), body, "{path}: the client gets every byte");
        let events = events_of(&log, &audit_id(&answer));
        assert_eq!(stages_of(&events), ["ResponseComplete"], "{path}");
        let mut expected = body.clone();
        if !path.ends_with("/kept") {
            strip_managed_fields(&mut expected);
        }
        assert_eq!(events[0]["requestObject"], expected, "{path}");
        assert_eq!(events[0]["responseObject"], expected, "{path}");
    }
}

/// `body` without `metadata.managedFields` anywhere.
fn strip_managed_fields(body: &mut Value) {
    match body {
        Value::Object(map) => {
            if let Some(Value::Object(metadata)) = map.get_mut("metadata") {
                metadata.shift_remove("managedFields");
            }
            map.values_mut().for_each(strip_managed_fields);
        }
        Value::Array(values) => values.iter_mut().for_each(strip_managed_fields),
        _ => {}
    }
}

/// How many requests each completeness test sends.
const MANY: usize = 25;

/// Asserts the request `id` was received and completed with `code`.
fn assert_completed(events: &[Value], id: &str, code: u16, reason: &str) {
    assert_eq!(
        stages_of(events),
        ["RequestReceived", "ResponseComplete"],
        "{id}: {events:#?}"
    );
    let status = &events[1]["responseStatus"];
    assert_eq!(status["code"], code, "{id}: {status}");
    if !reason.is_empty() {
        assert_eq!(status["reason"], reason, "{id}: {status}");
    }
    assert!(
        status["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{id}: the event says what happened: {status}"
    );
}

/// A raw HTTP/1.1 `GET` of widget `name` by bob, with audit ID `id`, that
/// the upstream never answers; returns once it is written.
async fn hanging_request(gateway: &TestGateway, id: &str, name: &str) -> tokio::net::TcpStream {
    let request = format!(
        "GET {WIDGETS}/{name} HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer bob-token\r\n\
         Audit-ID: {id}\r\n{MODE}: hang\r\n\r\n"
    );
    raw_request(gateway.addr, request.as_bytes()).await
}

async fn wait_for_arrivals(upstream: &Upstream, count: usize) {
    for _ in 0..count {
        upstream.next_arrival().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_answered_504_by_the_timeout_are_completed_with_504() {
    let upstream = Upstream::start().await;
    let (gateway, log) =
        audited_gateway_with(&upstream, "blocking", "request_timeout = \"2s\"").await;
    let client = http_client();
    let answers = futures_util::future::join_all((0..MANY).map(|i| {
        send(
            client
                .get(gateway.url(&format!("{WIDGETS}/w{i}")))
                .bearer_auth("bob-token")
                .header(MODE, "hang"),
        )
    }))
    .await;
    for answer in &answers {
        answer.assert_status(504, "Timeout");
        let id = audit_id(answer);
        let events = wait_for_events(&log, &id, 2).await;
        assert_completed(&events, &id, 504, "Timeout");
    }
    assert_eq!(audit_events(&log).len(), 2 * MANY);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_their_clients_abandon_are_completed() {
    let upstream = Upstream::start().await;
    let (gateway, log) = audited_gateway(&upstream, "blocking").await;
    let mut ids = Vec::new();

    // HTTP/1.1: connections closed while the upstream holds the answer.
    let mut connections = Vec::new();
    for i in 0..MANY {
        let id = format!("abandoned-h1-{i}");
        connections.push(hanging_request(&gateway, &id, &format!("w{i}")).await);
        ids.push(id);
    }
    wait_for_arrivals(&upstream, MANY).await;
    drop(connections);

    // HTTP/2: streams reset by a client that stops waiting.
    let client = h2c_client();
    let mut waiting = Vec::new();
    for i in 0..MANY {
        let id = format!("abandoned-h2-{i}");
        let request = client
            .get(gateway.url(&format!("{WIDGETS}/v{i}")))
            .bearer_auth("bob-token")
            .header("Audit-ID", &id)
            .header(MODE, "hang");
        waiting.push(tokio::spawn(request.send()));
        ids.push(id);
    }
    wait_for_arrivals(&upstream, MANY).await;
    for request in &waiting {
        request.abort();
    }

    for id in &ids {
        let events = wait_for_events(&log, id, 2).await;
        assert_completed(&events, id, 499, "");
    }
    assert_eq!(audit_events(&log).len(), 2 * ids.len());
}

async fn requests_cut_at_shutdown_are_completed_before_the_log_is_flushed(mode: &str) {
    let upstream = Upstream::start().await;
    let (mut gateway, log) =
        audited_gateway_with(&upstream, mode, "shutdown_timeout = \"300ms\"").await;
    let mut connections = Vec::new();
    for i in 0..MANY {
        connections.push(hanging_request(&gateway, &format!("cut-{i}"), &format!("w{i}")).await);
    }
    wait_for_arrivals(&upstream, MANY).await;
    let drained = bounded("the shutdown", gateway.begin_shutdown())
        .await
        .expect("the shutdown task");
    assert_eq!(
        drained,
        wasmgate::server::Drained::TimedOut {
            open_connections: MANY
        }
    );
    // Written by the time the shutdown returned: no waiting here.
    for i in 0..MANY {
        let id = format!("cut-{i}");
        assert_completed(&events_of(&log, &id), &id, 503, "ServiceUnavailable");
    }
    assert_eq!(audit_events(&log).len(), 2 * MANY);
    drop(connections);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_cut_at_shutdown_are_completed_in_blocking_mode() {
    requests_cut_at_shutdown_are_completed_before_the_log_is_flushed("blocking").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_cut_at_shutdown_are_completed_in_batch_mode() {
    requests_cut_at_shutdown_are_completed_before_the_log_is_flushed("batch").await;
}

/// kube's `WithFailedAuthenticationAudit`: one event at ResponseStarted,
/// for no user, with the 401 Status the client got (kube's failed handler
/// writes it through `WriteObjectNegotiated`, whose `LogResponseObject`
/// replaces the note of the credentials tried), at the level of the first
/// rule that does not name users or groups. The event used to keep that
/// note as its message, with the Status's `Failure` and no reason: neither
/// what kube records nor what the client got.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_authentications_are_audited_as_kube_does() {
    let upstream = Upstream::start().await;
    let (gateway, log) = audited_gateway(&upstream, "blocking").await;
    let client = http_client();
    for i in 0..MANY {
        let path = format!("/private/x{i}");
        let answer = send(
            client
                .get(gateway.url(&path))
                .bearer_auth(format!("wrong-token-{i}")),
        )
        .await;
        answer.assert_status(401, "Unauthorized");
        let id = audit_id(&answer);
        let events = events_of(&log, &id);
        assert_eq!(stages_of(&events), ["ResponseStarted"], "{events:#?}");
        let event = &events[0];
        assert_eq!(event["level"], "Metadata");
        assert_eq!(event["verb"], "get");
        assert_eq!(event["requestURI"], path);
        assert_eq!(event["user"], json!({}), "no user: authentication failed");
        assert_eq!(event["sourceIPs"], json!(["127.0.0.1"]));
        assert_eq!(
            event["responseStatus"],
            json!({"metadata": {}, "status": "Failure", "code": 401,
                   "message": "Unauthorized", "reason": "Unauthorized"})
        );
    }

    // A create matches rule 3 (Request), not alice's rule 2: a rule naming
    // users never matches an unknown user. No object is recorded.
    let answer = send(
        client
            .post(gateway.url(WIDGETS))
            .bearer_auth("wrong-token")
            .header("content-type", "application/json")
            .body("{}"),
    )
    .await;
    answer.assert_status(401, "Unauthorized");
    let events = events_of(&log, &audit_id(&answer));
    assert_eq!(stages_of(&events), ["ResponseStarted"], "{events:#?}");
    assert_eq!(events[0]["level"], "Request");
    assert!(events[0].get("requestObject").is_none(), "{}", events[0]);

    // A list no rule covers for an unknown user is not audited.
    let answer = send(client.get(gateway.url(WIDGETS)).bearer_auth("wrong-token")).await;
    answer.assert_status(401, "Unauthorized");
    assert_eq!(events_of(&log, &audit_id(&answer)), Vec::<Value>::new());
    assert_eq!(audit_events(&log).len(), MANY + 1);
}

/// kube's `WithAudit` writes RequestReceived before its handler reads the
/// body, and ResponseComplete however the request ends: at level Request
/// and above a create whose body stalls until its deadline (100 bytes
/// announced, 10 sent) is received and completed with the 504 its client
/// got. Audit used to read the body before it made any event: such a
/// request left none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_body_stalls_until_its_deadline_is_received_and_completed() {
    let upstream = Upstream::start().await;
    let (gateway, log) =
        audited_gateway_with(&upstream, "blocking", "request_timeout = \"1s\"").await;
    let id = "stalled-body";
    // bob's create: level Request (the third rule).
    let head = format!(
        "POST {WIDGETS} HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer bob-token\r\n\
         Audit-ID: {id}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"kind\": "
    );
    let mut stream = raw_request(gateway.addr, head.as_bytes()).await;
    let (answered, _) = read_one_response(&mut stream).await;
    assert!(
        answered.starts_with("HTTP/1.1 504"),
        "the deadline answers: {answered}"
    );
    let events = wait_for_events(&log, id, 2).await;
    assert_completed(&events, id, 504, "Timeout");
    assert!(
        events
            .iter()
            .all(|event| event.get("requestObject").is_none()),
        "no body, no object: {events:#?}"
    );
    drop(stream);
    gateway.shutdown().await;
}

/// In blocking mode a request's ResponseComplete is written in a task of
/// its own that the request waits for: a request cut while its write waits
/// (here its deadline passes while the auditor waits for the one instance
/// slot a slow authorizer call holds) still gets its ResponseComplete,
/// after its RequestReceived. The write used to be the request's own
/// future, and was dropped with it: the event was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_cut_while_its_response_complete_is_written_is_completed() {
    build_filters();
    let upstream = Upstream::start().await;
    let manifest = plaintext(
        &[
            // One instance slot for every filter (a call waits up to 2.5 s
            // for room); max-in-flight's cover check off.
            "[limits]\nfilter_instances = 1\nmax_mutating_requests_in_flight = 0\nrequest_timeout = \"10s\"\n"
                .to_owned(),
            "[authentication]\nanonymous = true\n".to_owned(),
            filter("authorization.filters", "slow-authz", "fault-authz", None, "timeout = \"5s\"\n"),
            "\n[audit]\nmode = \"blocking\"\n[[audit.policy]]\nlevel = \"Metadata\"\n".to_owned(),
            filter("audit.filters", "log", "jsonl-audit", None, "sink = \"audit.jsonl\"\n"),
            routes(&upstream.url()),
        ]
        .concat(),
    );
    let gateway = TestGateway::start(&manifest).await;
    let log = gateway.dir.path().join("audit.jsonl");
    let client = http_client();
    // Allowed at once, answered by the upstream after 500 ms, deadline 1 s.
    let cut = tokio::spawn(send(
        client
            .get(gateway.url("/open/allow?timeout=1s"))
            .header("Audit-ID", "cut-while-writing")
            .header(MODE, "slow:500"),
    ));
    upstream.next_arrival().await;
    // Its authorizer call holds the only instance slot for 1.5 s: the
    // ResponseComplete's write, from 0.5 s, waits for it (up to 2.5 s) and
    // is cut with its request at 1 s; it gets the slot at 1.5 s.
    let slow = tokio::spawn(send(client.get(gateway.url("/open/slow-1500"))));
    let answer = cut.await.expect("the cut request");
    assert_eq!(answer.status, 504, "{}", answer.body);
    let answer = slow.await.expect("the slow request");
    assert_eq!(answer.status, 200, "{}", answer.body);
    let events = wait_for_events(&log, "cut-while-writing", 2).await;
    assert_eq!(stages_of(&events), ["RequestReceived", "ResponseComplete"]);
    gateway.shutdown().await;
}

/// kube's `WithAuthorization` notes an authorizer's error in the audit event
/// as `authorization.k8s.io/reason: internal error`, with no decision
/// (`staging/src/k8s.io/apiserver/pkg/endpoints/filters/authorization.go`,
/// `reasonError`); a fail-closed authorizer's error, trap or timeout is
/// noted so, and the event is told from a denial's and an allowed
/// request's (a decision and a reason each, the allowed one's empty).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authorizers_failure_is_audited_as_kubes_internal_error() {
    let upstream = Upstream::start().await;
    let (gateway, log) = fault_authz_audited(&upstream, "100ms").await;
    let client = http_client();
    for (word, code) in [("error", 500), ("trap", 500), ("loop", 503)] {
        let answer = send(client.get(gateway.url(&format!("/fault/{word}")))).await;
        assert_eq!(answer.status, code, "{}", answer.body);
        let events = events_of(&log, &audit_id(&answer));
        let complete = events.last().expect("a ResponseComplete");
        assert_eq!(complete["stage"], "ResponseComplete");
        assert_eq!(
            annotations(complete),
            json!({"authorization.k8s.io/reason": "internal error"}),
            "{word}"
        );
    }
    // An allowed request has the allowing authorizer's reason beside its
    // decision, as kube adds both whatever the reason; a filter's `allow`
    // gives none, so it is kube's empty one.
    let answer = send(client.get(gateway.url("/fault/allow"))).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let events = events_of(&log, &audit_id(&answer));
    assert_eq!(
        annotations(events.last().expect("a ResponseComplete")),
        json!({
            "authorization.k8s.io/decision": "allow",
            "authorization.k8s.io/reason": "",
        })
    );
    let answer = send(client.get(gateway.url("/fault/deny"))).await;
    assert_eq!(answer.status, 403, "{}", answer.body);
    let events = events_of(&log, &audit_id(&answer));
    assert_eq!(
        annotations(events.last().expect("a ResponseComplete")),
        json!({
            "authorization.k8s.io/decision": "forbid",
            "authorization.k8s.io/reason": "fault-authz: deny requested",
        })
    );
    assert_eq!(upstream.hits(), 1, "the allowed request alone");
    gateway.shutdown().await;
}

/// kube's `WithAudit` (`staging/src/k8s.io/apiserver/pkg/endpoints/filters/audit.go`)
/// writes a Panic event in place of ResponseComplete when its handler
/// panics, its status a 500 InternalError whose message names the panic
/// (`APIServer panic'd: %v`): so for a panic in a step's future (`/panic`)
/// and in its `call`, before any future (`/panic-now`). The message used to
/// leave the panic out, and a panic in a `call` went past audit's catch:
/// the request was completed as one its client had abandoned (499).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_is_audited_at_stage_panic_naming_it() {
    let manifest = plaintext(
        &[
            crate::chain::SERVERS.to_owned(),
            "[authentication]\nanonymous = true\n".to_owned(),
            "\n[audit]\nmode = \"blocking\"\n[[audit.policy]]\nlevel = \"Metadata\"\n".to_owned(),
            audit_log_sink(),
        ]
        .concat(),
    );
    let gateway = TestGateway::start_with_center(new_dir(), &manifest, |next| {
        std::sync::Arc::new(crate::chain::Panicky { next })
    })
    .await;
    let log = gateway.dir.path().join("audit.jsonl");
    let client = http_client();
    for (path, panic) in [
        ("/panic", "the centre panicked while serving"),
        ("/panic-now", "the centre panicked at once"),
    ] {
        let answer = send(client.get(gateway.url(path))).await;
        answer.assert_status(500, "InternalError");
        let events = wait_for_events(&log, &audit_id(&answer), 2).await;
        assert_eq!(
            stages_of(&events),
            ["RequestReceived", "Panic"],
            "{path}: {events:#?}"
        );
        assert_eq!(
            events[1]["responseStatus"],
            json!({"metadata": {}, "status": "Failure", "reason": "InternalError", "code": 500,
                   "message": format!("APIServer panic'd: {panic}")}),
            "{path}"
        );
    }
}

/// kube's latency annotations (`writeLatencyToAnnotation` in
/// `staging/src/k8s.io/apiserver/pkg/endpoints/filters/audit.go`): the
/// ResponseComplete of a request slower than 500 ms says how long each
/// layer took, as Go writes a duration, and the total. An authorizer that
/// spins until its 700 ms timeout makes such a request: its event has the
/// authorization union's time and the total, and no layer that took none
/// (no authenticator was asked); a quick request's has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_request_is_completed_with_the_time_each_layer_took() {
    let upstream = Upstream::start().await;
    let (gateway, log) = fault_authz_audited(&upstream, "700ms").await;
    let client = http_client();

    let slow = send(client.get(gateway.url("/fault/loop"))).await;
    assert_eq!(slow.status, 503, "{}", slow.body);
    let events = events_of(&log, &audit_id(&slow));
    let complete = annotations(events.last().expect("a ResponseComplete"));
    let latency = |layer: &str| {
        let written = complete[format!("apiserver.latency.k8s.io/{layer}")]
            .as_str()
            .unwrap_or_else(|| panic!("no {layer} latency: {complete}"))
            .to_owned();
        go_seconds(&written)
    };
    let (authorization, total) = (latency("authorization"), latency("total"));
    assert!(
        (0.69..=total).contains(&authorization) && total > 0.5,
        "{complete}"
    );
    let keys: Vec<&String> = complete
        .as_object()
        .expect("annotations")
        .keys()
        .filter(|key| key.starts_with("apiserver.latency.k8s.io/"))
        .collect();
    assert_eq!(
        keys,
        [
            "apiserver.latency.k8s.io/authorization",
            "apiserver.latency.k8s.io/total"
        ],
        "{complete}"
    );

    let quick = send(client.get(gateway.url("/fault/allow"))).await;
    assert_eq!(quick.status, 200, "{}", quick.body);
    let events = events_of(&log, &audit_id(&quick));
    let complete = annotations(events.last().expect("a ResponseComplete"));
    assert!(
        !complete.to_string().contains("apiserver.latency.k8s.io"),
        "{complete}"
    );
    gateway.shutdown().await;
}

/// Seconds from a duration as Go writes one below a minute (`512.3ms`,
/// `1.5s`).
fn go_seconds(written: &str) -> f64 {
    let (number, scale) = match written.strip_suffix("ms") {
        Some(number) => (number, 1e-3),
        None => (
            written.strip_suffix('s').expect("a Go duration in seconds"),
            1.0,
        ),
    };
    number.parse::<f64>().expect("a number") * scale
}

/// A gateway whose one authorizer is fault-authz with `timeout`, auditing
/// every request at level Metadata, blocking, into `audit.jsonl`; returns
/// it and that file's path.
async fn fault_authz_audited(upstream: &Upstream, timeout: &str) -> (TestGateway, PathBuf) {
    build_filters();
    let manifest = plaintext(
        &[
            "[authentication]\nanonymous = true\n".to_owned(),
            filter(
                "authorization.filters",
                "fault-authz",
                "fault-authz",
                None,
                &format!("timeout = \"{timeout}\"\n"),
            ),
            "\n[audit]\nmode = \"blocking\"\n[[audit.policy]]\nlevel = \"Metadata\"\n".to_owned(),
            audit_log_sink(),
            routes(&upstream.url()),
        ]
        .concat(),
    );
    let gateway = TestGateway::start(&manifest).await;
    let log = gateway.dir.path().join("audit.jsonl");
    (gateway, log)
}
