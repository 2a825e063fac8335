//! Authorization: the first allow or deny wins and no opinion is kube's
//! 403, a filter's reason held to 4 KiB, monitor mode, a filter's `match`,
//! and `always_allow`.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_allow_or_deny_wins_and_no_opinion_is_forbidden() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&[
        &tokens(),
        &fault_authz("faults", ""),
        &rbac(),
        &routes(&upstream.url()),
    ])
    .await;
    let client = http_client();
    let as_alice = |path: &str| send(client.get(gateway.url(path)).bearer_auth("alice-token"));

    // fault-authz allows a path RBAC knows nothing about.
    echo(&as_alice("/private/allow").await);
    // fault-authz denies a path RBAC allows (/fault/* is open): the first
    // decision wins, and its reason follows kube's message.
    let denied = as_alice("/fault/deny").await;
    let status = denied.assert_status(403, "Forbidden");
    assert_eq!(
        status["message"],
        r#"forbidden: User "alice" cannot get path "/fault/deny": fault-authz: deny requested"#
    );
    // fault-authz has no opinion: RBAC decides.
    echo(&as_alice("/fault/no-opinion").await);
    // Nobody allows it: a 403 in kube's words.
    let status = as_alice("/private/nothing")
        .await
        .assert_status(403, "Forbidden");
    let message = status["message"].as_str().expect("a message");
    assert!(
        message.starts_with(r#"forbidden: User "alice" cannot get path "/private/nothing""#),
        "{message}"
    );

    // A resource request denied: kube's resource 403 with its details.
    let request = client
        .delete(gateway.url(&format!("{WIDGETS}/w1")))
        .bearer_auth("bob-token");
    let status = send(request).await.assert_status(403, "Forbidden");
    let message = status["message"].as_str().expect("a message");
    assert!(
        message.starts_with(
            r#"widgets.demo.example.io "w1" is forbidden: User "bob" cannot delete resource "widgets" in API group "demo.example.io" in the namespace "default""#
        ),
        "{message}"
    );
    assert_eq!(
        status["details"],
        json!({"name": "w1", "group": "demo.example.io", "kind": "widgets"})
    );
    let request = client
        .get(gateway.url("/apis/demo.example.io/v1/widgets"))
        .bearer_auth("alice-token");
    let status = send(request).await.assert_status(403, "Forbidden");
    let message = status["message"].as_str().expect("a message");
    assert!(message.contains("at the cluster scope"), "{message}");
    assert_eq!(
        upstream.hits(),
        2,
        "only the two allowed requests reached the upstream"
    );
}

/// A filter's reason is its own words, which the gateway holds to 4 KiB
/// (what kube holds the warnings of admission webhooks to) before the 403,
/// the log and the decision cache see it: fault-authz's no-opinion reason
/// quotes the path's last segment, here of 10,000 bytes; the path itself,
/// the gateway's own words, is shown whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filters_reason_is_cut_at_4_kib() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&[
        &tokens(),
        &fault_authz("faults", ""),
        &routes(&upstream.url()),
    ])
    .await;
    let word = "w".repeat(10_000);
    let path = format!("/private/{word}");
    let request = http_client()
        .get(gateway.url(&path))
        .bearer_auth("alice-token");
    let status = send(request).await.assert_status(403, "Forbidden");
    let reason = format!("fault-authz: no opinion on \"{word}\"");
    assert_eq!(
        status["message"],
        format!(
            "forbidden: User \"alice\" cannot get path \"{path}\": {}... ({} more bytes)",
            &reason[..4096],
            reason.len() - 4096
        )
    );
    assert_eq!(upstream.hits(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monitor_mode_decision_is_never_enforced() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&[
        &tokens(),
        &fault_authz("watcher", "mode = \"monitor\"\ntimeout = \"100ms\"\n"),
        &rbac(),
        &routes(&upstream.url()),
    ])
    .await;
    let client = http_client();
    // The monitored filter denies; RBAC allows /fault/*: allowed.
    echo(
        &send(
            client
                .get(gateway.url("/fault/deny"))
                .bearer_auth("alice-token"),
        )
        .await,
    );
    // The monitored filter allows; RBAC does not: forbidden.
    send(
        client
            .get(gateway.url("/private/allow"))
            .bearer_auth("alice-token"),
    )
    .await
    .assert_status(403, "Forbidden");
    // A monitored filter never fails a request either, whatever its
    // failure policy (fail-closed by default): its trap, error or timeout is
    // logged and the next authorizer decides.
    for path in ["/fault/trap", "/fault/error", "/fault/loop"] {
        let answer = send(client.get(gateway.url(path)).bearer_auth("alice-token")).await;
        assert_eq!(echo(&answer)["path"], path);
    }
    send(
        client
            .get(gateway.url("/private/trap"))
            .bearer_auth("alice-token"),
    )
    .await
    .assert_status(403, "Forbidden");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_runs_only_for_what_its_match_selects() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&[
        &tokens(),
        &fault_authz("fault-paths", "match = { path_prefixes = [\"/fault/\"] }\n"),
        &fault_authz(
            "widget-deletes",
            "match = { verbs = [\"delete\"], resources = [\"widgets\"] }\n",
        ),
        &rbac(),
        &routes(&upstream.url()),
    ])
    .await;
    let client = http_client();
    // `deny` under /fault/ is selected by the first filter...
    send(
        client
            .get(gateway.url("/fault/deny"))
            .bearer_auth("alice-token"),
    )
    .await
    .assert_status(403, "Forbidden");
    // ...and not under /open/, where RBAC allows it.
    echo(
        &send(
            client
                .get(gateway.url("/open/deny"))
                .bearer_auth("alice-token"),
        )
        .await,
    );
    // The second filter sees deletes of widgets only.
    let widget = gateway.url(&format!("{WIDGETS}/deny"));
    echo(&send(client.get(&widget).bearer_auth("alice-token")).await);
    let status = send(client.delete(&widget).bearer_auth("alice-token"))
        .await
        .assert_status(403, "Forbidden");
    assert!(
        status["message"]
            .as_str()
            .expect("a message")
            .ends_with("fault-authz: deny requested"),
        "{status}"
    );
    // A widget delete whose name fault-authz has no opinion on: RBAC allows alice.
    echo(
        &send(
            client
                .delete(gateway.url(&format!("{WIDGETS}/w1")))
                .bearer_auth("alice-token"),
        )
        .await,
    );
}

#[test]
fn authentication_without_authorization_is_a_config_error() {
    let path = Path::new("/nonexistent/wasmgate/gateway.toml");
    let routes = routes("http://127.0.0.1:9");
    let manifest = plaintext(&[tokens(), routes.clone()].concat());
    let error =
        wasmgate::config::parse(path, &manifest).expect_err("authentication without authorization");
    let text = error.to_string();
    assert!(
        text.contains("no authorization filter") && text.contains("always_allow"),
        "{text}"
    );

    // Saying so explicitly is accepted...
    let manifest = plaintext(
        &[
            tokens(),
            "\n[authorization]\nalways_allow = true\n".to_owned(),
            routes.clone(),
        ]
        .concat(),
    );
    let config = wasmgate::config::parse(path, &manifest).unwrap_or_else(|error| panic!("{error}"));
    assert!(config.stages.authorization.always_allow);
    // ...but not together with authorizers.
    let manifest = plaintext(
        &[
            tokens(),
            "\n[authorization]\nalways_allow = true\n".to_owned(),
            rbac(),
            routes,
        ]
        .concat(),
    );
    let text = wasmgate::config::parse(path, &manifest)
        .expect_err("both")
        .to_string();
    assert!(
        text.contains("authorization.always_allow") && text.contains("conflicts"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_allow_lets_authenticated_requests_through() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&[
        &tokens(),
        "\n[authorization]\nalways_allow = true\n",
        &routes(&upstream.url()),
    ])
    .await;
    let client = http_client();
    let echo = echo(
        &send(
            client
                .delete(gateway.url(&format!("{WIDGETS}/w1")))
                .bearer_auth("bob-token"),
        )
        .await,
    );
    assert_eq!(echo["method"], "DELETE");
    assert_unauthorized(&get(&client, &gateway.url(WIDGETS)).await);
}
