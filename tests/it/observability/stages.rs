//! kube's metrics of the stages the Wasm filters run, read from `/metrics`
//! of a real gateway process with the shipped token-authn, rbac-authz,
//! label-defaults, policy-deny and jsonl-audit components after known
//! traffic: `authentication_attempts` and `authentication_duration_seconds`
//! by result, `apiserver_authorization_decisions_total`, the admission step
//! and per-filter admission histograms, and `apiserver_audit_event_total`.

use super::sample;
use crate::support::{GatewayProcess, Upstream, http_client, new_dir, plaintext, send};
use crate::support::{
    WIDGETS, audit_log_sink, build_filters, filter, rbac_config_reading_metrics, rbac_with, routes,
    tokens,
};
use serde_json::json;

/// The tests' RBAC, and alice may read `/metrics` (a non-resource URL).
fn rbac_with_metrics() -> String {
    rbac_with(rbac_config_reading_metrics(json!({"users": ["alice"]})))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stage_metrics_count_known_traffic_under_kubes_names() {
    build_filters();
    let upstream = Upstream::start().await;
    let dir = new_dir();
    let manifest = plaintext(
        &[
            "[authentication]\nanonymous = false\n".to_owned(),
            tokens(),
            rbac_with_metrics(),
            filter(
                "admission.mutating",
                "labels",
                "label-defaults",
                Some(json!({"labels": {"team": "a"}})),
                "",
            ),
            filter(
                "admission.validating",
                "policy",
                "policy-deny",
                Some(json!({"rules": [
                    {"pointer": "/spec/replicas", "op": "gt", "value": 10, "message": "too many"},
                ]})),
                "",
            ),
            "\n[audit]\nmode = \"blocking\"\n[[audit.policy]]\nlevel = \"Metadata\"\n".to_owned(),
            audit_log_sink(),
            routes(&upstream.url()),
        ]
        .concat(),
    );
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, manifest).expect("write the manifest");
    let gateway = GatewayProcess::spawn(&path);
    let client = http_client();
    let as_alice = |request: reqwest::RequestBuilder| request.bearer_auth("alice-token");

    // 2 allowed lists, 1 allowed create, 1 create the policy rejects.
    for _ in 0..2 {
        assert_eq!(
            send(as_alice(client.get(gateway.url(WIDGETS))))
                .await
                .status,
            200
        );
    }
    let created = send(as_alice(client.post(gateway.url(WIDGETS))).json(&json!({
        "apiVersion": "demo.example.io/v1", "kind": "Widget",
        "metadata": {"name": "w1"}, "spec": {"replicas": 1},
    })))
    .await;
    assert_eq!(created.status, 200, "{}", created.body);
    let rejected = send(as_alice(client.post(gateway.url(WIDGETS))).json(&json!({
        "apiVersion": "demo.example.io/v1", "kind": "Widget",
        "metadata": {"name": "w2"}, "spec": {"replicas": 50},
    })))
    .await;
    assert_eq!(rejected.status, 403, "{}", rejected.body);
    // A token nobody knows: kube's union returns the bearer token
    // authenticator's `invalidToken`, an authentication error (401).
    let unknown = send(client.get(gateway.url(WIDGETS)).bearer_auth("nobody")).await;
    assert_eq!(unknown.status, 401);
    // No credentials at all: a failure (401).
    let none = send(client.get(gateway.url(WIDGETS))).await;
    assert_eq!(none.status, 401);
    // bob may not create widgets: no rule allows it.
    let denied = send(
        client
            .post(gateway.url(WIDGETS))
            .bearer_auth("bob-token")
            .json(&json!({"metadata": {"name": "w3"}})),
    )
    .await;
    assert_eq!(denied.status, 403);

    // The scrape is authenticated and authorized like any request.
    let scrape = send(as_alice(client.get(gateway.url("/metrics")))).await;
    assert_eq!(scrape.status, 200, "{}", scrape.body);
    let text = scrape.body;
    assert!(
        sample(
            &text,
            "authentication_attempts_total",
            r#"result="success""#
        ) >= Some(5.0),
        "{text}"
    );
    for result in ["failure", "error"] {
        assert_eq!(
            sample(
                &text,
                "authentication_attempts_total",
                &format!(r#"result="{result}""#)
            ),
            Some(1.0),
            "{result}: {text}"
        );
    }
    assert!(
        sample(
            &text,
            "authentication_duration_seconds_count",
            r#"result="success""#
        ) >= Some(5.0),
        "{text}"
    );
    assert!(
        sample(
            &text,
            "apiserver_authorization_decisions_total",
            r#"type="Wasm",name="rbac",decision="allowed""#
        ) >= Some(4.0),
        "{text}"
    );
    // RBAC has no opinion on what no rule allows: not a terminal decision,
    // so, as in kube, not counted (the union's denial is in the 403s); the
    // series is there from the start, at 0.
    assert_eq!(
        sample(
            &text,
            "apiserver_authorization_decisions_total",
            r#"type="Wasm",name="rbac",decision="denied""#
        ),
        Some(0.0),
        "{text}"
    );
    let step = |kind: &str, rejected: bool| {
        let labels = format!(r#"type="{kind}",operation="CREATE",rejected="{rejected}""#);
        sample(
            &text,
            "apiserver_admission_step_admission_duration_seconds_count",
            &labels,
        )
    };
    assert_eq!(step("admit", false), Some(2.0), "{text}");
    assert_eq!(step("validate", false), Some(1.0), "{text}");
    assert_eq!(step("validate", true), Some(1.0), "{text}");
    let controller = |name: &str, kind: &str, rejected: bool| {
        let labels =
            format!(r#"name="{name}",type="{kind}",operation="CREATE",rejected="{rejected}""#);
        sample(
            &text,
            "apiserver_admission_controller_admission_duration_seconds_count",
            &labels,
        )
    };
    assert_eq!(controller("labels", "admit", false), Some(2.0), "{text}");
    assert_eq!(controller("policy", "validate", true), Some(1.0), "{text}");
    assert!(
        text.contains(r#"apiserver_admission_step_admission_duration_seconds_bucket{le="0.005",type="admit",operation="CREATE",rejected="false"}"#),
        "kube's admission buckets: {text}"
    );
    // Metadata level, two stages each, for the requests past authentication.
    let events = text
        .lines()
        .find_map(|line| line.strip_prefix("apiserver_audit_event_total "))
        .and_then(|value| value.parse::<f64>().ok());
    assert!(events >= Some(10.0), "{events:?} {text}");
    assert_eq!(
        sample(
            &text,
            "apiserver_request_total",
            r#"verb="POST",dry_run="",group="demo.example.io",version="v1",resource="widgets",subresource="",scope="resource",component="apiserver",code="403""#
        ),
        Some(2.0),
        "{text}"
    );
}
