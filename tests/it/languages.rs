//! Filters in Python, JavaScript and C beside the Rust ones: built from the
//! same `wit/` package by `filters/build.sh` (once per test binary), loaded
//! by the same host, and exercised through the real gateway over real
//! sockets, in both isolation modes:
//!
//! - `apikey-authn` (C): API keys in a header, by SHA-256;
//! - `abac-authz` (Python): attribute rules with working-hours windows;
//! - `schema-admission` (JavaScript): objects against JSON-schema rules (and
//!   an error, not a guess, when `reads` leaves out the request info);
//! - `raise-authz` (Python) and `throw-authn` (JavaScript), test fixtures
//!   that raise, throw and recurse: exceptions are filter errors, engine
//!   faults traps;
//! - `omit-audit` (Python), `lines-audit` (JavaScript) and `copy-audit` (C),
//!   json auditors: the gateway's kube audit lines, to their sinks, as the
//!   Rust `jsonl-audit` writes them (Python's less an omitted stage), and a
//!   raised exception the auditor's error outcome.
//!
//! One chain runs the three together with the Rust filters (token-authn,
//! rbac-authz, label-defaults, jsonl-audit). The last test starts the
//! gateway twice on the 10-20 MB interpreted components and checks that the
//! second start compiled nothing (the disk cache served them); the times are
//! printed, not asserted.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::support::*;

const ISOLATIONS: [&str; 2] = ["per-request", "pooled"];

async fn gateway(pieces: &[&str]) -> TestGateway {
    TestGateway::start(&plaintext(&pieces.concat())).await
}

fn isolation(mode: &str) -> String {
    format!("isolation = \"{mode}\"\n")
}

fn with_header(
    request: reqwest::RequestBuilder,
    name: &str,
    value: &str,
) -> reqwest::RequestBuilder {
    request.header(name, value)
}

// ---------------------------------------------------------------------------
// C: apikey-authn
// ---------------------------------------------------------------------------

/// alice's key in plain text, bob's by its SHA-256 only.
fn apikey_config() -> Value {
    json!({"keys": [
        {"key": "alice-key", "user": "alice", "uid": "1001", "groups": ["dev"], "name": "alice-laptop"},
        {"sha256": hex::encode(Sha256::digest(b"bob-key")), "user": "bob", "groups": ["viewers"]},
    ]})
}

fn apikeys(config: Value, settings: &str) -> String {
    filter(
        "authentication.filters",
        "apikeys",
        "apikey-authn",
        Some(config),
        settings,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_apikey_authn_maps_keys_to_users() {
    let upstream = Upstream::start().await;
    let client = http_client();
    for mode in ISOLATIONS {
        let gateway = gateway(&[
            "[authentication]\nanonymous = true\n",
            &apikeys(apikey_config(), &isolation(mode)),
            &rbac(),
            &routes(&upstream.url()),
        ])
        .await;
        let who = |key: &str| {
            whoami(with_header(
                client.get(gateway.url(WHOAMI)),
                "x-api-key",
                key,
            ))
        };
        // Twice each: a pooled instance is reused for the second call.
        for _ in 0..2 {
            assert_eq!(who("alice-key").await, "alice", "{mode}");
            assert_eq!(who("bob-key").await, "bob", "{mode}");
        }
        // No key: the request goes on as anonymous.
        assert_eq!(
            whoami(client.get(gateway.url(WHOAMI))).await,
            "system:anonymous"
        );
        // A key nobody knows is never downgraded to anonymous: 401.
        let stolen = send(with_header(
            client.get(gateway.url("/open/x")),
            "x-api-key",
            "stolen",
        ))
        .await;
        stolen.assert_status(401, "Unauthorized");
        // alice (widget-admin in default by RBAC) reaches the upstream.
        let answer = send(with_header(
            client.get(gateway.url(WIDGETS)),
            "x-api-key",
            "alice-key",
        ))
        .await;
        assert_eq!(echo(&answer)["path"], WIDGETS);
    }
    assert_eq!(upstream.hits(), 2, "only alice's two list requests went up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_apikey_authn_reads_a_scheme_of_the_authorization_header() {
    let upstream = Upstream::start().await;
    let mut config = apikey_config();
    config["header"] = json!("authorization");
    config["scheme"] = json!("ApiKey");
    let gateway = gateway(&[
        &apikeys(config, ""),
        &tokens(),
        &rbac(),
        &routes(&upstream.url()),
    ])
    .await;
    let client = http_client();
    let answer = send(with_header(
        client.get(gateway.url(WIDGETS)),
        "authorization",
        "apikey alice-key",
    ))
    .await;
    // The key authenticated alice, and as an Authorization header it was
    // removed before the upstream.
    let echo = echo(&answer);
    assert_eq!(echoed_header(&echo, "authorization"), None);
    // Another scheme is not this filter's: the token authenticator takes it.
    assert_eq!(
        whoami(client.get(gateway.url(WHOAMI)).bearer_auth("bob-token")).await,
        "bob"
    );
    // A bad config is the filter's error outcome: nobody authenticates, 401.
    let broken = self::gateway(&[
        &apikeys(json!({"keys": "alice-key"}), ""),
        &rbac(),
        &routes(&upstream.url()),
    ])
    .await;
    let answer = send(with_header(
        client.get(broken.url(WIDGETS)),
        "x-api-key",
        "alice-key",
    ))
    .await;
    answer.assert_status(401, "Unauthorized");
}

// ---------------------------------------------------------------------------
// Python: abac-authz
// ---------------------------------------------------------------------------

const WRITES: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];
const AFTER_HOURS: &str = "developers write only in working hours";

/// The current UTC hour, 0-23.
fn utc_hour() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970");
    now.as_secs() / 3600 % 24
}

/// Group dev may not write outside `hours`; everyone may read resources;
/// dev may write widgets.
fn abac_config(hours: &str) -> Value {
    json!({"utc_offset": "+00:00", "rules": [
        {"name": "working-hours", "effect": "deny", "groups": ["dev"], "verbs": WRITES,
         "outside": {"hours": hours}, "reason": AFTER_HOURS},
        {"name": "reads", "effect": "allow", "verbs": ["get", "list", "watch"], "resources": ["*"]},
        {"name": "dev-writes", "effect": "allow", "groups": ["dev"], "api_groups": ["demo.example.io"]},
    ]})
}

fn abac(config: Value, settings: &str) -> String {
    filter(
        "authorization.filters",
        "abac",
        "abac-authz",
        Some(config),
        settings,
    )
}

fn widget(name: &str, replicas: i64) -> Value {
    json!({"apiVersion": "demo.example.io/v1", "kind": "Widget", "metadata": {"name": name}, "spec": {"replicas": replicas}})
}

fn post(
    client: &reqwest::Client,
    gateway: &TestGateway,
    credential: (&str, &str),
    object: &Value,
) -> reqwest::RequestBuilder {
    client
        .post(gateway.url(WIDGETS))
        .header(credential.0, credential.1)
        .header("content-type", "application/json")
        .body(object.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_abac_authz_denies_writes_outside_working_hours() {
    let upstream = Upstream::start().await;
    let client = http_client();
    let alice = ("authorization", "Bearer alice-token");
    // Working hours that exclude the present hour, and a whole day.
    let hour = utc_hour();
    let closed = format!("{:02}:00-{:02}:00", (hour + 2) % 24, (hour + 3) % 24);
    for mode in ISOLATIONS {
        let gateway = gateway(&[
            &tokens(),
            &abac(abac_config(&closed), &isolation(mode)),
            &routes(&upstream.url()),
        ])
        .await;
        // Reads are allowed at any time, to anyone authenticated.
        for credential in ["Bearer alice-token", "Bearer bob-token"] {
            let answer = send(
                client
                    .get(gateway.url(WIDGETS))
                    .header("authorization", credential),
            )
            .await;
            echo(&answer);
        }
        // alice (group dev) writes after hours: denied, with the rule's reason.
        let denied = send(post(&client, &gateway, alice, &widget("w1", 1))).await;
        let status = denied.assert_status(403, "Forbidden");
        assert_eq!(
            status["message"],
            format!(
                "widgets.demo.example.io is forbidden: User \"alice\" cannot create resource \"widgets\" in API group \"demo.example.io\" in the namespace \"default\": {AFTER_HOURS}"
            ),
            "{mode}"
        );
        // bob (group viewers) matches no rule for writes: no opinion, so 403.
        let denied = send(post(
            &client,
            &gateway,
            ("authorization", "Bearer bob-token"),
            &widget("w2", 1),
        ))
        .await;
        let status = denied.assert_status(403, "Forbidden");
        assert!(
            status["message"]
                .as_str()
                .expect("a message")
                .ends_with("no abac-authz rule matched"),
            "{status}"
        );
    }
    // With working hours all day long, alice's write goes through.
    let open = gateway(&[
        &tokens(),
        &abac(abac_config("00:00-24:00"), &isolation("pooled")),
        &routes(&upstream.url()),
    ])
    .await;
    let answer = send(post(&client, &open, alice, &widget("w3", 1))).await;
    assert_eq!(echoed_body(&echo(&answer)), widget("w3", 1));
    // A bad config is the filter's error outcome: fail-closed, 500.
    let broken = gateway(&[
        &tokens(),
        &abac(json!({"rules": [{"effect": "permit"}]}), ""),
        &routes(&upstream.url()),
    ])
    .await;
    let answer = send(client.get(broken.url(WIDGETS)).bearer_auth("alice-token")).await;
    let status = answer.assert_status(500, "InternalError");
    assert_no_internal_detail(&status);
}

// ---------------------------------------------------------------------------
// JavaScript: schema-admission
// ---------------------------------------------------------------------------

/// Widgets need a DNS-label name and 1-10 replicas, and nothing else in spec.
fn widget_schema() -> Value {
    json!({"schemas": [{"resources": ["widgets"], "api_groups": ["demo.example.io"], "schema": {
        "type": "object",
        "required": ["metadata", "spec"],
        "properties": {
            "metadata": {"type": "object", "required": ["name"], "properties": {
                "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
            }},
            "spec": {"type": "object", "required": ["replicas"], "additionalProperties": false, "properties": {
                "replicas": {"type": "integer", "minimum": 1, "maximum": 10},
            }},
        },
    }}]})
}

fn schema(config: Value, settings: &str) -> String {
    filter(
        "admission.validating",
        "schema",
        "schema-admission",
        Some(config),
        settings,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn javascript_schema_admission_rejects_invalid_objects() {
    let upstream = Upstream::start().await;
    let client = http_client();
    let alice = ("authorization", "Bearer alice-token");
    for mode in ISOLATIONS {
        let gateway = gateway(&[
            &tokens(),
            &rbac(),
            &schema(widget_schema(), &isolation(mode)),
            &routes(&upstream.url()),
        ])
        .await;
        for name in ["ok-1", "ok-2"] {
            let answer = send(post(&client, &gateway, alice, &widget(name, 3))).await;
            assert_eq!(echoed_body(&echo(&answer)), widget(name, 3), "{mode}");
        }
        let mut invalid = widget("big", 20);
        invalid["spec"]["color"] = json!("red");
        let answer = send(post(&client, &gateway, alice, &invalid)).await;
        let status = answer.assert_status(422, "Invalid");
        assert_eq!(
            status["message"],
            "admission webhook \"schema\" denied the request: Widget.demo.example.io \"big\" is invalid: [spec.replicas: Invalid value: 20: must be less than or equal to 10, spec.color: Forbidden: unknown field \"color\"]",
            "{mode}"
        );
        let answer = send(post(
            &client,
            &gateway,
            alice,
            &json!({"metadata": {"name": "Bad_Name"}}),
        ))
        .await;
        let status = answer.assert_status(422, "Invalid");
        assert_eq!(
            status["message"],
            "admission webhook \"schema\" denied the request: widgets.demo.example.io \"Bad_Name\" is invalid: [spec: Required value, metadata.name: Invalid value: \"Bad_Name\": must match the pattern '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$']",
            "{mode}"
        );
        // A patch document is not an object: not validated, by default.
        let patch = client
            .patch(gateway.url(&format!("{WIDGETS}/ok-1")))
            .bearer_auth("alice-token")
            .header("content-type", "application/merge-patch+json")
            .body(r#"{"spec":{"replicas":50}}"#);
        echo(&send(patch).await);
    }
    // A bad config is the filter's error outcome: fail-closed, 500.
    let broken = gateway(&[
        &tokens(),
        &rbac(),
        &schema(json!({"schemas": [{"schema": {"type": "int"}}]}), ""),
        &routes(&upstream.url()),
    ])
    .await;
    let answer = send(post(&client, &broken, alice, &widget("w", 1))).await;
    let status = answer.assert_status(500, "InternalError");
    assert_no_internal_detail(&status);
}

/// Without the request info, which picks the schemas (the manifest's `reads`
/// leaves it out), schema-admission fails as its error outcome, never a
/// trap or a guess: fail-closed, a 500 with no detail for the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn javascript_schema_admission_without_the_request_info_is_a_filter_error() {
    let upstream = Upstream::start().await;
    let client = http_client();
    // A name no other test uses: the metrics are process-wide.
    let gateway = gateway(&[
        "[authentication]\nanonymous = true\n\n[authorization]\nalways_allow = true\n",
        &filter(
            "admission.validating",
            "blind-schema",
            "schema-admission",
            Some(widget_schema()),
            "reads = []\n",
        ),
        &routes(&upstream.url()),
    ])
    .await;
    let answer = send(
        client
            .post(gateway.url(WIDGETS))
            .header("content-type", "application/json")
            .body(widget("w1", 3).to_string()),
    )
    .await;
    let status = answer.assert_status(500, "InternalError");
    assert_no_internal_detail(&status);
    let metrics = gateway.url("/metrics");
    assert_eq!(filter_calls(&metrics, "blind-schema", "error").await, 1);
    assert_eq!(filter_calls(&metrics, "blind-schema", "trap").await, 0);
    assert_eq!(upstream.hits(), 0);
}

// ---------------------------------------------------------------------------
// Every language in one chain
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_python_javascript_and_rust_filters_run_in_one_chain() {
    let upstream = Upstream::start().await;
    let abac_rules = json!({"rules": [
        {"name": "freeze", "effect": "deny", "verbs": ["delete", "deletecollection"], "reason": "deletes are frozen"},
        {"name": "reads", "effect": "allow", "verbs": ["get", "list", "watch"], "resources": ["*"]},
    ]});
    // The schema wants the team label that label-defaults adds: only the
    // mutated object is valid, which proves mutation runs first.
    let mut schema_config = widget_schema();
    schema_config["schemas"][0]["schema"]["properties"]["metadata"]["properties"]["labels"] = json!({
        "type": "object", "required": ["team"], "properties": {"team": {"const": "platform"}},
    });
    schema_config["schemas"][0]["schema"]["properties"]["metadata"]["required"] =
        json!(["name", "labels"]);
    let audit = "\n[audit]\nmode = \"blocking\"\n\n[[audit.policy]]\nlevel = \"Metadata\"\n";
    let gateway = gateway(&[
        &apikeys(apikey_config(), ""),
        &tokens(),
        &abac(abac_rules, &isolation("pooled")),
        &rbac(),
        &filter(
            "admission.mutating",
            "labels",
            "label-defaults",
            Some(json!({"labels": {"team": "platform"}})),
            "",
        ),
        &schema(schema_config, &isolation("pooled")),
        audit,
        &filter(
            "audit.filters",
            "audit-log",
            "jsonl-audit",
            None,
            "sink = \"audit.jsonl\"\n",
        ),
        &routes(&upstream.url()),
    ])
    .await;
    let log = gateway.dir.path().join("audit.jsonl");
    let client = http_client();
    let alice_key = ("x-api-key", "alice-key");

    // C authenticates, Python allows the read.
    let answer = send(with_header(
        client.get(gateway.url(WIDGETS)),
        alice_key.0,
        alice_key.1,
    ))
    .await;
    echo(&answer);

    // C authenticates, Python has no opinion on writes, Rust RBAC allows,
    // Rust adds the label, JavaScript validates the result.
    let answer = send(post(&client, &gateway, alice_key, &widget("w1", 3))).await;
    let created = echoed_body(&echo(&answer));
    assert_eq!(created["metadata"]["labels"], json!({"team": "platform"}));
    let audit_id = answer.header("audit-id").expect("an Audit-ID").to_owned();
    let events = wait_for_events(&log, &audit_id, 2).await;
    assert_eq!(stages_of(&events), ["RequestReceived", "ResponseComplete"]);
    let complete = &events[1];
    assert_eq!(complete["user"]["username"], "alice");
    assert_eq!(
        complete["user"]["groups"],
        json!(["dev", "system:authenticated"])
    );
    assert_eq!(
        complete["annotations"]["authorization.k8s.io/decision"],
        "allow"
    );

    // The JavaScript schema still rejects what the label cannot fix.
    let answer = send(post(&client, &gateway, alice_key, &widget("w2", 20))).await;
    answer.assert_status(422, "Invalid");

    // Rust authenticates bob; Python's freeze denies before RBAC is asked.
    let answer = send(
        client
            .delete(gateway.url(&format!("{WIDGETS}/w1")))
            .bearer_auth("bob-token"),
    )
    .await;
    let status = answer.assert_status(403, "Forbidden");
    assert!(
        status["message"]
            .as_str()
            .expect("a message")
            .ends_with(": deletes are frozen"),
        "{status}"
    );
    let audit_id = answer.header("audit-id").expect("an Audit-ID").to_owned();
    let events = wait_for_events(&log, &audit_id, 2).await;
    assert_eq!(events[1]["user"]["username"], "bob");
    assert_eq!(
        events[1]["annotations"]["authorization.k8s.io/decision"],
        "forbid"
    );
    assert_eq!(upstream.hits(), 2, "the read and the valid create");
}

// ---------------------------------------------------------------------------
// Exceptions are filter errors, engine faults traps: raise-authz (Python) and
// throw-authn (JavaScript), served
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raised_or_thrown_exception_is_served_as_a_filter_error_and_an_engine_fault_as_a_trap() {
    let upstream = Upstream::start().await;
    let rbac_config = rbac_config_reading_metrics(json!({"groups": ["system:unauthenticated"]}));
    // Names no other test uses: the metrics are process-wide.
    let pooled = "isolation = \"pooled\"\ntimeout = \"5s\"\n";
    let gateway = gateway(&[
        "[authentication]\nanonymous = true\n",
        &filter(
            "authentication.filters",
            "served-thrower",
            "throw-authn",
            None,
            pooled,
        ),
        &filter(
            "authorization.filters",
            "served-raiser",
            "raise-authz",
            None,
            &format!("{pooled}match = {{ path_prefixes = [\"/fault/\"] }}\n"),
        ),
        &rbac_with(rbac_config),
        &routes(&upstream.url()),
    ])
    .await;
    let client = http_client();
    let fault = |value: &str| with_header(client.get(gateway.url("/open/x")), "x-fault", value);

    // JavaScript: a thrown Error is the authenticator's error: the request
    // is not recognised, a 401; recursion without end traps: fail-closed, 500.
    send(fault("throw"))
        .await
        .assert_status(401, "Unauthorized");
    send(fault("string"))
        .await
        .assert_status(401, "Unauthorized");
    let trapped = send(fault("recurse")).await;
    let status = trapped.assert_status(500, "InternalError");
    assert_no_internal_detail(&status);
    // The pooled instance that answered with an error serves the next call.
    echo(&send(fault("user")).await);
    assert_eq!(
        filter_calls(&gateway.url("/metrics"), "served-thrower", "error").await,
        2
    );
    assert_eq!(
        filter_calls(&gateway.url("/metrics"), "served-thrower", "trap").await,
        1
    );

    // Python: a raised exception is the authorizer's err: fail-closed, the
    // stage's error Status; the client sees no message of the filter's.
    for path in ["/fault/raise", "/fault/keyerror", "/fault/err"] {
        let status = send(client.get(gateway.url(path)))
            .await
            .assert_status(500, "InternalError");
        assert_eq!(
            status["message"], "Internal error occurred: the authorization stage failed",
            "{path}"
        );
        assert_no_internal_detail(&status);
    }
    send(client.get(gateway.url("/fault/recurse")))
        .await
        .assert_status(500, "InternalError");
    echo(&send(client.get(gateway.url("/fault/allow"))).await);
    assert_eq!(
        filter_calls(&gateway.url("/metrics"), "served-raiser", "error").await,
        3
    );
    assert_eq!(
        filter_calls(&gateway.url("/metrics"), "served-raiser", "trap").await,
        1
    );
    assert_eq!(
        upstream.hits(),
        2,
        "the authenticated call and /fault/allow"
    );
}

// ---------------------------------------------------------------------------
// JSON auditors: omit-audit (Python), lines-audit (JavaScript), copy-audit (C)
// ---------------------------------------------------------------------------

/// A json auditor entry named `name` on `component`, writing to `sink`, its
/// instance pooled (what `wasmgate new-filter` advises for Python and
/// JavaScript).
fn json_auditor(name: &str, component: &str, config: Option<Value>, sink: &str) -> String {
    filter(
        "audit.filters",
        name,
        component,
        config,
        &format!("sink = \"{sink}\"\n{}", isolation("pooled")),
    )
}

/// The whole text of an audit sink, once it holds `per_request` events of
/// every request in `audit_ids`.
async fn sink_text(path: &std::path::Path, audit_ids: &[String], per_request: usize) -> String {
    for audit_id in audit_ids {
        let events = wait_for_events(path, audit_id, per_request).await;
        assert_eq!(events.len(), per_request, "{}: {events:?}", path.display());
    }
    std::fs::read_to_string(path).expect("read the audit sink")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_javascript_and_c_json_auditors_write_kubes_audit_lines_to_their_sinks() {
    let upstream = Upstream::start().await;
    // Batches of several events, at level Request: the create's line holds
    // its object.
    let audit = "\n[audit]\nmode = \"batch\"\nmax_batch_size = 50\nmax_batch_wait = \"200ms\"\n\n\
                 [[audit.policy]]\nlevel = \"Request\"\n";
    let omit_received = json!({"omit_stages": ["RequestReceived"]});
    let gateway = gateway(&[
        &tokens(),
        &rbac(),
        audit,
        &json_auditor("audit-log", "jsonl-audit", None, "rust.jsonl"),
        &json_auditor(
            "python-lines",
            "omit-audit",
            Some(omit_received),
            "python.jsonl",
        ),
        &json_auditor("js-lines", "lines-audit", None, "js.jsonl"),
        &json_auditor("c-lines", "copy-audit", None, "c.jsonl"),
        &routes(&upstream.url()),
    ])
    .await;
    let client = http_client();
    let mut requests = tokio::task::JoinSet::new();
    for i in 0..6 {
        let read = client
            .get(gateway.url(&format!("{WIDGETS}/w{i}")))
            .bearer_auth("alice-token");
        requests.spawn(async move { send(read).await });
    }
    let created = client
        .post(gateway.url(WIDGETS))
        .bearer_auth("alice-token")
        .header("content-type", "application/json")
        .body(widget("w1", 3).to_string());
    requests.spawn(async move { send(created).await });
    let mut audit_ids = Vec::new();
    while let Some(answer) = bounded("the requests", requests.join_next()).await {
        let answer = answer.expect("a request task");
        echo(&answer);
        audit_ids.push(answer.header("audit-id").expect("an Audit-ID").to_owned());
    }

    let dir = gateway.dir.path();
    let rust = sink_text(&dir.join("rust.jsonl"), &audit_ids, 2).await;
    // JavaScript and C append the gateway's lines as they are: the same
    // bytes as jsonl-audit's, in the same order.
    assert_eq!(sink_text(&dir.join("js.jsonl"), &audit_ids, 2).await, rust);
    assert_eq!(sink_text(&dir.join("c.jsonl"), &audit_ids, 2).await, rust);
    // Python drops the lines of the stage its config omits, by the batch's
    // stages.
    let completed: String = rust
        .split_inclusive('\n')
        .filter(|line| !line.contains("\"stage\":\"RequestReceived\""))
        .collect();
    assert_eq!(
        sink_text(&dir.join("python.jsonl"), &audit_ids, 1).await,
        completed
    );

    let events = audit_events(&dir.join("python.jsonl"));
    assert_eq!(events.len(), 7, "{events:?}");
    for event in &events {
        assert_eq!(event["kind"], "Event");
        assert_eq!(event["apiVersion"], "audit.k8s.io/v1");
        assert_eq!(event["stage"], "ResponseComplete");
        assert_eq!(event["user"]["username"], "alice");
        assert_eq!(event["responseStatus"]["code"], 200);
    }
    let create = events
        .iter()
        .find(|event| event["verb"] == "create")
        .expect("the create's event");
    assert_eq!(create["requestObject"], widget("w1", 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_json_auditors_exception_is_its_error_outcome() {
    let upstream = Upstream::start().await;
    // A name no other test uses: the metrics are process-wide.
    let gateway = gateway(&[
        "[authentication]\nanonymous = true\n\n[authorization]\nalways_allow = true\n",
        "\n[audit]\nmode = \"blocking\"\n\n[[audit.policy]]\nlevel = \"Metadata\"\n",
        &json_auditor(
            "unknown-stage-lines",
            "omit-audit",
            Some(json!({"omit_stages": ["Sometime"]})),
            "python.jsonl",
        ),
        &routes(&upstream.url()),
    ])
    .await;
    let answer = send(http_client().get(gateway.url("/open/x"))).await;
    // Audit never fails a request.
    echo(&answer);
    bounded("the auditor's two errors", async {
        while local_filter_calls("unknown-stage-lines", "error") < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(local_filter_calls("unknown-stage-lines", "trap"), 0);
    assert!(audit_events(&gateway.dir.path().join("python.jsonl")).is_empty());
}

// ---------------------------------------------------------------------------
// Cold and warm start of the interpreted components
// ---------------------------------------------------------------------------

/// Runs `wasmgate check` on `manifest` with the compiled-component cache in
/// `cache` (through XDG_CACHE_HOME); returns its log and how long it took.
fn check_with_cache(manifest: &std::path::Path, cache: &std::path::Path) -> (String, Duration) {
    let started = Instant::now();
    let output = Command::new(binary())
        .args(["check", "--config"])
        .arg(manifest)
        .env("XDG_CACHE_HOME", cache)
        .env("RUST_LOG", "wasmgate::wasm::engine=debug")
        .output()
        .expect("run wasmgate check");
    let elapsed = started.elapsed();
    let log = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "wasmgate check failed:\n{log}");
    (log, elapsed)
}

#[test]
fn interpreted_components_compile_once_then_start_from_the_disk_cache() {
    let dir = new_dir();
    let cache = dir.path().join("cache");
    let manifest = dir.path().join("gateway.toml");
    let pieces = [
        tokens(),
        abac(abac_config("08:00-18:00"), &isolation("pooled")),
        schema(widget_schema(), &isolation("pooled")),
        routes("http://127.0.0.1:9"),
    ];
    std::fs::write(&manifest, plaintext(&pieces.concat())).expect("write the manifest");
    let sizes: Vec<String> = ["abac-authz", "schema-admission"]
        .iter()
        .map(|name| {
            let bytes = std::fs::metadata(component_path(name))
                .expect("a component")
                .len();
            format!("{name} {:.1} MB", bytes as f64 / 1e6)
        })
        .collect();

    let (cold, cold_time) = check_with_cache(&manifest, &cache);
    // The info line of a compilation; the disk cache's debug line reads
    // "loaded compiled component from the disk cache".
    let compiled = cold.matches(": compiled component").count();
    assert_eq!(
        compiled, 3,
        "a cold start compiles every component:\n{cold}"
    );

    let (warm, warm_time) = check_with_cache(&manifest, &cache);
    assert_eq!(
        warm.matches(": compiled component").count(),
        0,
        "a warm start compiles nothing:\n{warm}"
    );
    assert_eq!(
        warm.matches("loaded compiled component from the disk cache")
            .count(),
        3,
        "a warm start loads every component from the disk cache:\n{warm}"
    );
    eprintln!(
        "wasmgate check ({}, token-authn): cold start {:.2} s (compiling), warm start {:.2} s (disk cache)",
        sizes.join(", "),
        cold_time.as_secs_f64(),
        warm_time.as_secs_f64()
    );
}
