//! Impersonation: authorized per attribute (users, groups, extras, service
//! accounts), then the request runs as the impersonated user.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonation_is_authorized_then_the_request_runs_as_the_impersonated_user() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&[&tokens(), &rbac(), &routes(&upstream.url())]).await;
    let client = http_client();
    let as_alice = |path: &str| client.get(gateway.url(path)).bearer_auth("alice-token");

    // Only bob may get /private/bob; alice may impersonate bob.
    send(as_alice("/private/bob"))
        .await
        .assert_status(403, "Forbidden");
    let answer = send(as_alice("/private/bob").header("Impersonate-User", "bob")).await;
    let echo = echo(&answer);
    let headers = echo["headers"].as_object().expect("echoed headers");
    assert!(
        !headers.keys().any(|name| name.starts_with("impersonate-")),
        "{headers:?}"
    );
    assert_eq!(
        whoami(as_alice(WHOAMI).header("Impersonate-User", "bob")).await,
        "bob"
    );
    // An empty Impersonate-Uid is none (kube's impersonation.go asks
    // `len(requestedUID) > 0`): there is no uid to be allowed.
    let request = as_alice(WHOAMI)
        .header("Impersonate-User", "bob")
        .header("Impersonate-Uid", "");
    assert_eq!(whoami(request).await, "bob");

    // alice may not impersonate carol, nor any group.
    let status = send(as_alice("/open/x").header("Impersonate-User", "carol"))
        .await
        .assert_status(403, "Forbidden");
    let message = status["message"].as_str().expect("a message");
    assert!(
        message.starts_with(r#"users "carol" is forbidden: User "alice" cannot impersonate resource "users" in API group "" at the cluster scope"#),
        "{message}"
    );
    let request = as_alice("/open/x")
        .header("Impersonate-User", "bob")
        .header("Impersonate-Group", "system:masters");
    let status = send(request).await.assert_status(403, "Forbidden");
    let message = status["message"].as_str().expect("a message");
    assert!(
        message.contains(r#"cannot impersonate resource "groups""#),
        "{message}"
    );
    // bob may impersonate nobody.
    let request = client
        .get(gateway.url("/open/x"))
        .bearer_auth("bob-token")
        .header("Impersonate-User", "alice");
    let status = send(request).await.assert_status(403, "Forbidden");
    assert!(
        status["message"]
            .as_str()
            .expect("a message")
            .contains(r#"User "bob" cannot impersonate resource "users""#)
    );
    // Groups without a user are a bad request.
    let request = as_alice("/open/x").header("Impersonate-Group", "dev");
    send(request).await.assert_status(400, "BadRequest");
    assert_eq!(
        upstream.hits(),
        1,
        "only the allowed impersonation reached the upstream"
    );
}

/// Extras (`Impersonate-Extra-<key>`, the key percent-decoded as kube's
/// `url.PathUnescape` does: `%2F` is `/`, `+` stays `+`) and service
/// accounts are each authorized with verb `impersonate`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonating_extras_and_service_accounts_is_authorized_per_attribute() {
    let upstream = Upstream::start().await;
    let mut config = rbac_config();
    let impersonate = |resources: &[&str], names: &[&str]| json!({"verbs": ["impersonate"], "apiGroups": ["", "authentication.k8s.io"], "resources": resources, "resourceNames": names});
    config["roles"].as_array_mut().expect("roles").push(
        json!({"name": "impersonate-extras", "rules": [
            impersonate(&["userextras/acme.io/team"], &["red"]),
            impersonate(&["userextras/a+b"], &["x"]),
            impersonate(&["serviceaccounts"], &["robot"]),
        ]}),
    );
    let bindings = config["bindings"].as_array_mut().expect("bindings");
    bindings.push(json!({"role": "impersonate-extras", "users": ["alice"]}));
    let gateway = gateway(&[&tokens(), &rbac_with(config), &routes(&upstream.url())]).await;
    let client = http_client();
    let as_alice = |extra: &[(&str, &str)]| {
        with_headers(
            client
                .get(gateway.url("/open/x"))
                .bearer_auth("alice-token"),
            extra,
        )
    };

    echo(
        &send(as_alice(&[
            ("Impersonate-User", "bob"),
            ("Impersonate-Extra-Acme.io%2fTeam", "red"),
        ]))
        .await,
    );
    let status = send(as_alice(&[
        ("Impersonate-User", "bob"),
        ("Impersonate-Extra-Acme.io%2fteam", "blue"),
    ]))
    .await
    .assert_status(403, "Forbidden");
    let message = status["message"].as_str().expect("a message");
    assert!(
        message.contains(r#"cannot impersonate resource "userextras/acme.io/team""#),
        "{message}"
    );
    echo(
        &send(as_alice(&[
            ("Impersonate-User", "bob"),
            ("Impersonate-Extra-A+b", "x"),
        ]))
        .await,
    );

    // A service account is checked as one, in its namespace.
    let robot = "system:serviceaccount:default:robot";
    let request = client
        .get(gateway.url(WHOAMI))
        .bearer_auth("alice-token")
        .header("Impersonate-User", robot);
    assert_eq!(whoami(request).await, robot);
    let status = send(as_alice(&[(
        "Impersonate-User",
        "system:serviceaccount:default:other",
    )]))
    .await
    .assert_status(403, "Forbidden");
    let message = status["message"].as_str().expect("a message");
    assert!(
        message.contains(r#"cannot impersonate resource "serviceaccounts""#),
        "{message}"
    );
}

/// kube's `WithImpersonation` answers an authorizer's error as it answers a
/// denial: with its 403 for the attribute asked about
/// (`staging/src/k8s.io/apiserver/pkg/endpoints/filters/impersonation/impersonation.go`:
/// `if err != nil || decision != authorizer.DecisionAllow`, then
/// `responsewriters.Forbidden`). A fail-closed authorizer's error, trap or
/// timeout in an impersonation check is that 403, with what failed as its
/// reason (the stage's 500 or 503 before); the metrics still count the
/// filter's error, trap and timeout apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authorizer_failing_an_impersonation_check_is_kubes_403() {
    let upstream = Upstream::start().await;
    let filter = "impersonation-faults";
    let gateway = gateway(&[
        &tokens(),
        &fault_authz(
            filter,
            "timeout = \"100ms\"\nfailure_policy = \"fail-closed\"\n",
        ),
        &rbac(),
        &routes(&upstream.url()),
    ])
    .await;
    let client = http_client();
    let as_alice = |headers: &[(&str, &str)]| {
        with_headers(
            client
                .get(gateway.url("/open/x"))
                .bearer_auth("alice-token"),
            headers,
        )
    };
    let refused = |resource: &str, name: &str, reason: &str| {
        format!(
            r#"{resource} "{name}" is forbidden: User "alice" cannot impersonate resource "{resource}" in API group "" at the cluster scope: {reason}"#
        )
    };

    for (name, reason) in [
        ("error", "the authorization stage failed"),
        ("trap", "the authorization stage failed"),
        ("loop", "the authorization stage did not answer in time"),
        ("deny", "fault-authz: deny requested"),
    ] {
        let status = send(as_alice(&[("Impersonate-User", name)]))
            .await
            .assert_status(403, "Forbidden");
        assert_eq!(status["message"], refused("users", name, reason));
        assert_eq!(status["details"], json!({"name": name, "kind": "users"}));
    }
    // A group's check fails as the user's does.
    let status = send(as_alice(&[
        ("Impersonate-User", "bob"),
        ("Impersonate-Group", "error"),
    ]))
    .await
    .assert_status(403, "Forbidden");
    assert_eq!(
        status["message"],
        refused("groups", "error", "the authorization stage failed")
    );
    for (outcome, calls) in [("error", 2), ("trap", 1), ("timeout", 1)] {
        assert_eq!(local_filter_calls(filter, outcome), calls, "{outcome}");
    }
    assert_eq!(upstream.hits(), 0);
}

/// Each impersonation check names the version kube's object reference for
/// it names (`staging/src/k8s.io/apiserver/pkg/endpoints/filters/impersonation/impersonation.go`,
/// `APIVersion: gvk.Version`): `users`, `serviceaccounts` and `groups`
/// are references to a kind alone, so none; `userextras` and `uids` are
/// `authentication.k8s.io/v1`'s. fault-authz denies an attribute named
/// `given` with what it was given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_impersonation_check_names_the_version_kube_asks_with() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&[
        &tokens(),
        &fault_authz("impersonation-versions", ""),
        &routes(&upstream.url()),
    ])
    .await;
    let client = http_client();
    let versions = [
        (vec![("Impersonate-User", "given")], "users", ""),
        (
            vec![("Impersonate-User", "system:serviceaccount:ci:given")],
            "serviceaccounts",
            "",
        ),
        (
            vec![
                ("Impersonate-User", "allow"),
                ("Impersonate-Group", "given"),
            ],
            "groups",
            "",
        ),
        (
            vec![
                ("Impersonate-User", "allow"),
                ("Impersonate-Extra-scopes", "given"),
            ],
            "userextras/scopes",
            "v1",
        ),
        (
            vec![("Impersonate-User", "allow"), ("Impersonate-Uid", "given")],
            "uids",
            "v1",
        ),
    ];
    for (headers, resource, version) in versions {
        let request = with_headers(
            client
                .get(gateway.url("/open/x"))
                .bearer_auth("alice-token"),
            &headers,
        );
        let status = send(request).await.assert_status(403, "Forbidden");
        let message = status["message"].as_str().expect("a message");
        assert!(
            message.contains(&format!(r#"cannot impersonate resource "{resource}""#))
                && message.ends_with(&format!(
                    "api-prefix= api-version={version} label-selector= field-selector="
                )),
            "{headers:?}: {message}"
        );
    }
    assert_eq!(upstream.hits(), 0);
}
