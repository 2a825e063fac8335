//! The four Wasm stages end to end with the real components from
//! `filters/dist` (built by `filters/build.sh` once per test binary):
//! authentication (a union, kube's 401, credential headers removed, mTLS,
//! JWT), authorization (a union, kube's 403, monitor mode, `match`),
//! impersonation, the four outcomes of a filter call under each failure
//! policy, and admission (mutation reaching the upstream, order, denials).
//!
//! Each test runs an in-process gateway on 127.0.0.1:0 (plaintext unless
//! it tests mTLS) in front of the echoing upstream of `common`.

mod common;
#[path = "common/wasm.rs"]
mod wasm_common;

use std::path::Path;
use std::time::{Duration, Instant};

use base64ct::Encoding as _;
use common::*;
use serde_json::{Value, json};
use wasm_common::*;

/// A plaintext gateway made of these manifest pieces.
async fn gateway(pieces: &[&str]) -> TestGateway {
    TestGateway::start(&plaintext(&pieces.concat())).await
}

fn with_headers(
    mut request: reqwest::RequestBuilder,
    headers: &[(&str, &str)],
) -> reqwest::RequestBuilder {
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request
}

/// kube's 401, byte for byte.
const UNAUTHORIZED_BODY: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}"#;

fn assert_unauthorized(answer: &Answer) {
    answer.assert_status(401, "Unauthorized");
    assert_eq!(answer.body, UNAUTHORIZED_BODY);
}

fn fault_authn(settings: &str) -> String {
    filter(
        "authentication.filters",
        "faulty",
        "fault-authn",
        Some(json!({"user": "fault-user", "groups": ["faulty"]})),
        settings,
    )
}

fn fault_authz(name: &str, settings: &str) -> String {
    filter("authorization.filters", name, "fault-authz", None, settings)
}

// ---------------------------------------------------------------------------
// Authentication
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authenticators_are_a_union_tried_in_order() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&[
        &fault_authn(""),
        &tokens(),
        &rbac(),
        &routes(&upstream.url()),
    ])
    .await;
    let client = http_client();
    let who =
        |headers: &[(&str, &str)]| whoami(with_headers(client.get(gateway.url(WHOAMI)), headers));
    let alice = ("authorization", "Bearer alice-token");

    // The first authenticator that answers `authenticated` wins, though the
    // second would have recognised the token too.
    assert_eq!(
        who(&[("x-fault", "authenticated"), alice]).await,
        "fault-user"
    );
    // No opinion passes the request on.
    assert_eq!(who(&[("x-fault", "no-opinion"), alice]).await, "alice");
    assert_eq!(who(&[alice]).await, "alice");
    assert_eq!(who(&[("authorization", "Bearer bob-token")]).await, "bob");
    // The first filter's own error is logged and the next one is tried.
    assert_eq!(who(&[("x-fault", "error"), alice]).await, "alice");

    // Nobody recognises the request (anonymous not allowed): kube's 401.
    assert_unauthorized(&get(&client, &gateway.url("/open/x")).await);
    assert_unauthorized(
        &send(
            client
                .get(gateway.url("/open/x"))
                .header("x-fault", "no-opinion"),
        )
        .await,
    );
    assert_unauthorized(
        &send(
            client
                .get(gateway.url("/open/x"))
                .header("x-fault", "error"),
        )
        .await,
    );
    assert_unauthorized(
        &send(
            client
                .get(gateway.url("/open/x"))
                .bearer_auth("nobody-token"),
        )
        .await,
    );
    assert_eq!(
        upstream.hits(),
        0,
        "no unauthenticated request reached the upstream"
    );

    // Every authenticated user is in system:authenticated, which RBAC's
    // `open` role is bound to (fault-user's own groups are only `faulty`).
    let answer = send(
        client
            .get(gateway.url("/open/x"))
            .header("x-fault", "authenticated"),
    )
    .await;
    assert_eq!(echo(&answer)["path"], "/open/x");

    // The order is the manifest's: with the token authenticator first, the
    // token's user wins.
    let swapped = self::gateway(&[
        &tokens(),
        &fault_authn(""),
        &rbac(),
        &routes(&upstream.url()),
    ])
    .await;
    let request = client
        .get(swapped.url(WHOAMI))
        .header("x-fault", "authenticated")
        .bearer_auth("alice-token");
    assert_eq!(whoami(request).await, "alice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authenticator_sees_only_the_headers_its_manifest_lists() {
    let upstream = Upstream::start().await;
    // The same filter twice: one given only `authorization`, the other only
    // `x-fault` (the header that makes it answer).
    let blind = filter(
        "authentication.filters",
        "blind",
        "fault-authn",
        Some(json!({"user": "blind-user"})),
        "headers = [\"authorization\"]\n",
    );
    let seeing = filter(
        "authentication.filters",
        "seeing",
        "fault-authn",
        Some(json!({"user": "seeing-user"})),
        "headers = [\"X-Fault\"]\n",
    );
    let gateway = gateway(&[&blind, &seeing, &rbac(), &routes(&upstream.url())]).await;
    let client = http_client();
    // The first never sees the `x-fault` header, so has no opinion; the
    // second does, and answers.
    let who = whoami(with_headers(
        client.get(gateway.url(WHOAMI)),
        &[("x-fault", "authenticated")],
    ))
    .await;
    assert_eq!(who, "seeing-user");
}

#[test]
fn listed_headers_are_checked() {
    let text = plaintext(&format!(
        "{}{}{}",
        filter(
            "authentication.filters",
            "listing",
            "fault-authn",
            None,
            "headers = [\"authorization\", \"Authorization\", \"bad header\"]\n",
        ),
        filter(
            "authorization.filters",
            "rbac",
            "rbac-authz",
            None,
            "headers = [\"authorization\"]\n",
        ),
        routes("http://127.0.0.1:9"),
    ));
    let error = wasmgate::config::parse(Path::new("gw.toml"), &text)
        .expect_err("refused")
        .to_string();
    for expected in [
        "authentication.filters[0].headers: \"Authorization\" is listed twice",
        "authentication.filters[0].headers: \"bad header\" is not a header name",
        "authorization.filters[0].headers: only authentication filters see request headers",
    ] {
        assert!(error.contains(expected), "{expected:?} not in:\n{error}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unrecognised_requests_are_anonymous_when_allowed() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&[
        "[authentication]\nanonymous = true\n",
        &tokens(),
        &rbac(),
        &routes(&upstream.url()),
    ])
    .await;
    let client = http_client();
    assert_eq!(
        whoami(client.get(gateway.url(WHOAMI))).await,
        "system:anonymous"
    );
    // system:anonymous is in system:unauthenticated, bound to `open`.
    echo(&get(&client, &gateway.url("/open/anyone")).await);
    // ...but may not list widgets.
    let denied = get(&client, &gateway.url(WIDGETS)).await;
    let status = denied.assert_status(403, "Forbidden");
    let message = status["message"].as_str().expect("a message");
    assert!(
        message.starts_with(
            r#"widgets.demo.example.io is forbidden: User "system:anonymous" cannot list resource "widgets" in API group "demo.example.io" in the namespace "default""#
        ),
        "{message}"
    );
    // A known token still identifies its user.
    assert_eq!(
        whoami(client.get(gateway.url(WHOAMI)).bearer_auth("bob-token")).await,
        "bob"
    );
    // As in kube, a bearer token nobody accepts is a 401 even so.
    assert_unauthorized(&send(client.get(gateway.url("/open/x")).bearer_auth("stolen")).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credential_headers_do_not_reach_the_upstream() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&[&tokens(), &rbac(), &routes(&upstream.url())]).await;
    for client in [http_client(), h2c_client()] {
        let request = client
            .get(gateway.url(WIDGETS))
            .bearer_auth("alice-token")
            .header("X-Remote-User", "mallory")
            .header("X-Remote-Group", "system:masters")
            .header("X-Remote-Extra-Scopes", "everything")
            .header("X-Remote-Extra-Acme.io%2fteam", "red")
            .header("X-Kept", "yes");
        let echo = echo(&send(request).await);
        assert_eq!(echo["path"], WIDGETS);
        let headers = echo["headers"].as_object().expect("echoed headers");
        for name in headers.keys() {
            assert!(
                name != "authorization" && !name.starts_with("x-remote-"),
                "credential header {name} reached the upstream: {headers:?}"
            );
        }
        assert_eq!(
            echoed_header(&echo, "x-kept").as_deref(),
            Some("yes"),
            "other headers pass: {headers:?}"
        );
    }
}

/// kube counts anonymous as a successful authentication (the anonymous
/// authenticator is the union's last member), so the credential headers of
/// a request that goes on anonymous are removed too: an upstream that
/// trusts `X-Remote-User` must not receive one the client made up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credential_headers_of_anonymous_requests_do_not_reach_the_upstream() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&[
        "[authentication]\nanonymous = true\n",
        &tokens(),
        &rbac(),
        &routes(&upstream.url()),
    ])
    .await;
    let request = http_client()
        .get(gateway.url("/open/anonymous"))
        .header("Authorization", "Basic YWRtaW46YWRtaW4=")
        .header("X-Remote-User", "admin")
        .header("X-Remote-Group", "system:masters")
        .header("X-Remote-Extra-Scopes", "everything")
        .header("X-Kept", "yes");
    let echo = echo(&send(request).await);
    let headers = echo["headers"].as_object().expect("echoed headers");
    for name in headers.keys() {
        assert!(
            name != "authorization" && !name.starts_with("x-remote-"),
            "credential header {name} reached the upstream: {headers:?}"
        );
    }
    assert_eq!(echoed_header(&echo, "x-kept").as_deref(), Some("yes"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x509_client_certificates_name_the_user_over_mtls() {
    let upstream = Upstream::start().await;
    let dir = new_dir();
    let server_ca = write_server_pki(dir.path());
    let client_ca = common::Ca::new("wasmgate test client CA");
    std::fs::write(dir.path().join("client-ca.crt"), &client_ca.cert_pem)
        .expect("write client-ca.crt");
    let mut rbac_config = rbac_config();
    rbac_config["bindings"]
        .as_array_mut()
        .expect("bindings")
        .push(json!({"role": "widget-viewer", "groups": ["team-x"]}));
    let manifest = [
        "[listen]\naddress = \"127.0.0.1:0\"\n[listen.tls]\ncert = \"server.crt\"\nkey = \"server.key\"\nclient_ca = \"client-ca.crt\"\n",
        &filter("authentication.filters", "x509", "x509-authn", Some(json!({})), ""),
        &filter("authorization.filters", "rbac", "rbac-authz", Some(rbac_config), ""),
        &routes(&upstream.url()),
    ]
    .concat();
    let gateway = TestGateway::start_in(dir, &manifest).await;
    assert!(gateway.https);

    // CN is the user, O the groups: carol of team-x may list widgets.
    let carol = tls_client_with_identity(
        &server_ca.cert_pem,
        &client_ca.client_cert_in("carol", &["team-x"]),
    );
    assert_eq!(whoami(carol.get(gateway.url(WHOAMI))).await, "carol");
    echo(&get(&carol, &gateway.url(WIDGETS)).await);
    // dave, of another organization, may not.
    let dave = tls_client_with_identity(
        &server_ca.cert_pem,
        &client_ca.client_cert_in("dave", &["team-y"]),
    );
    let denied = get(&dave, &gateway.url(WIDGETS)).await;
    let message = denied.assert_status(403, "Forbidden")["message"]
        .as_str()
        .expect("a message")
        .to_owned();
    assert!(
        message.contains(r#"User "dave" cannot list resource "widgets""#),
        "{message}"
    );
    // Without a certificate nobody recognises the request.
    assert_unauthorized(&get(&tls_client(&server_ca.cert_pem), &gateway.url(WIDGETS)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_tokens_signed_rs256_and_es256_authenticate() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&[
        &filter(
            "authentication.filters",
            "oidc",
            "jwt-authn",
            Some(jwt_config()),
            "",
        ),
        &rbac(),
        &routes(&upstream.url()),
    ])
    .await;
    let client = http_client();
    let with_token = |token: String| client.get(gateway.url(WHOAMI)).bearer_auth(token);

    assert_eq!(
        whoami(with_token(sign_jwt("RS256", &jwt_claims("rs-user")))).await,
        "rs-user"
    );
    assert_eq!(
        whoami(with_token(sign_jwt("ES256", &jwt_claims("es-user")))).await,
        "es-user"
    );
    // The token is a credential header too: it does not reach the upstream.
    let answer = send(
        client
            .get(gateway.url("/open/jwt"))
            .bearer_auth(sign_jwt("ES256", &jwt_claims("es-user"))),
    )
    .await;
    assert_eq!(echoed_header(&echo(&answer), "authorization"), None);

    let now = unix_now();
    let mut expired = jwt_claims("late-user");
    expired["iat"] = json!(now - 7200);
    expired["nbf"] = json!(now - 7200);
    expired["exp"] = json!(now - 3600);
    let mut wrong_audience = jwt_claims("other-user");
    wrong_audience["aud"] = json!("someone-else");
    let mut tampered = sign_jwt("RS256", &jwt_claims("rs-user"));
    let forged_claims =
        base64ct::Base64UrlUnpadded::encode_string(jwt_claims("root").to_string().as_bytes());
    let parts: Vec<&str> = tampered.split('.').collect();
    tampered = format!("{}.{forged_claims}.{}", parts[0], parts[2]);
    for (what, token) in [
        ("expired", sign_jwt("RS256", &expired)),
        ("wrong audience", sign_jwt("ES256", &wrong_audience)),
        ("forged claims", tampered),
    ] {
        let answer = send(client.get(gateway.url("/open/jwt")).bearer_auth(token)).await;
        assert_eq!(answer.status, 401, "{what}: {}", answer.body);
        assert_unauthorized(&answer);
    }
}

// ---------------------------------------------------------------------------
// Authorization
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Impersonation
// ---------------------------------------------------------------------------

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
    let gateway = gateway(&[
        &tokens(),
        &filter(
            "authorization.filters",
            "rbac",
            "rbac-authz",
            Some(config),
            "",
        ),
        &routes(&upstream.url()),
    ])
    .await;
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

// ---------------------------------------------------------------------------
// The four outcomes of a call, under each failure policy
// ---------------------------------------------------------------------------

/// fail-closed: error and trap are a 500, a timeout a 503, and the client
/// learns nothing of the filter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authorizer_failures_fail_closed_without_detail() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&[
        &tokens(),
        &fault_authz(
            "faults",
            "timeout = \"100ms\"\nfailure_policy = \"fail-closed\"\n",
        ),
        &rbac(),
        &routes(&upstream.url()),
    ])
    .await;
    let client = http_client();
    let as_alice = |path: &str| send(client.get(gateway.url(path)).bearer_auth("alice-token"));

    echo(&as_alice("/fault/allow").await);
    for path in ["/fault/error", "/fault/trap"] {
        let status = as_alice(path).await.assert_status(500, "InternalError");
        assert_eq!(
            status["message"], "Internal error occurred: the authorization stage failed",
            "{path}"
        );
        assert_no_internal_detail(&status);
    }
    let started = Instant::now();
    let status = as_alice("/fault/loop")
        .await
        .assert_status(503, "ServiceUnavailable");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the loop was not stopped: {:?}",
        started.elapsed()
    );
    assert_eq!(
        status["message"],
        "the authorization stage did not answer in time"
    );
    assert_no_internal_detail(&status);
    // slow, within the budget: an answer.
    echo(&as_alice("/fault/slow-20").await);
    // slow, past the budget: a timeout.
    as_alice("/fault/slow-5000")
        .await
        .assert_status(503, "ServiceUnavailable");
    assert_eq!(upstream.hits(), 2);
}

/// fail-open: a failed authorizer is skipped; the next one decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authorizer_failures_fail_open_to_the_next_authorizer() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&[
        &tokens(),
        &fault_authz(
            "faults",
            "timeout = \"100ms\"\nfailure_policy = \"fail-open\"\n",
        ),
        &rbac(),
        &routes(&upstream.url()),
    ])
    .await;
    let client = http_client();
    for path in ["/fault/error", "/fault/trap", "/fault/loop"] {
        let answer = send(client.get(gateway.url(path)).bearer_auth("alice-token")).await;
        assert_eq!(echo(&answer)["path"], path);
    }
    // RBAC still decides after the skipped filter.
    send(
        client
            .get(gateway.url("/private/trap"))
            .bearer_auth("alice-token"),
    )
    .await
    .assert_status(403, "Forbidden");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authenticator_traps_and_timeouts_follow_the_failure_policy() {
    let upstream = Upstream::start().await;
    let closed = gateway(&[
        &fault_authn("timeout = \"100ms\"\n"),
        &tokens(),
        &rbac(),
        &routes(&upstream.url()),
    ])
    .await;
    let open = gateway(&[
        &fault_authn("timeout = \"100ms\"\nfailure_policy = \"fail-open\"\n"),
        &tokens(),
        &rbac(),
        &routes(&upstream.url()),
    ])
    .await;
    let client = http_client();
    let request = |gateway: &TestGateway, fault: &str| {
        client
            .get(gateway.url("/open/x"))
            .header("x-fault", fault)
            .bearer_auth("alice-token")
    };

    // fail-closed (the default).
    let status = send(request(&closed, "trap"))
        .await
        .assert_status(500, "InternalError");
    assert_eq!(
        status["message"],
        "Internal error occurred: the authentication stage failed"
    );
    assert_no_internal_detail(&status);
    let status = send(request(&closed, "loop"))
        .await
        .assert_status(503, "ServiceUnavailable");
    assert_eq!(
        status["message"],
        "the authentication stage did not answer in time"
    );
    assert_eq!(upstream.hits(), 0);

    // fail-open: the next authenticator (the token) is tried.
    for fault in ["trap", "loop"] {
        echo(&send(request(&open, fault)).await);
        let who = whoami(
            client
                .get(open.url(WHOAMI))
                .header("x-fault", fault)
                .bearer_auth("alice-token"),
        )
        .await;
        assert_eq!(who, "alice", "{fault}");
    }
    // fail-open and nothing else recognises the request: 401.
    assert_unauthorized(&send(client.get(open.url("/open/x")).header("x-fault", "trap")).await);
}

/// A trap throws the pooled instance away: the next request on the same
/// filter gets a healthy one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trap_does_not_poison_the_next_request() {
    let upstream = Upstream::start().await;
    for isolation in ["pooled", "per-request"] {
        let gateway = gateway(&[
            &tokens(),
            &fault_authz(
                "faults",
                &format!("isolation = \"{isolation}\"\ntimeout = \"200ms\"\nmemory = \"16MiB\"\n"),
            ),
            &rbac(),
            &routes(&upstream.url()),
        ])
        .await;
        let client = http_client();
        let as_alice = |path: &str| send(client.get(gateway.url(path)).bearer_auth("alice-token"));
        echo(&as_alice("/private/allow").await);
        for round in 0..5 {
            as_alice("/fault/trap")
                .await
                .assert_status(500, "InternalError");
            echo(&as_alice("/private/allow").await);
            as_alice("/fault/loop")
                .await
                .assert_status(503, "ServiceUnavailable");
            echo(&as_alice("/private/allow").await);
            as_alice("/fault/alloc")
                .await
                .assert_status(500, "InternalError");
            let answer = as_alice("/private/allow").await;
            assert_eq!(
                answer.status, 200,
                "{isolation} round {round}: {}",
                answer.body
            );
        }
        // Concurrently, too: traps beside answers.
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..16 {
            let (client, url) = (
                client.clone(),
                gateway.url(if i % 2 == 0 {
                    "/fault/trap"
                } else {
                    "/private/allow"
                }),
            );
            tasks.spawn(async move {
                (
                    i,
                    send(client.get(url).bearer_auth("alice-token"))
                        .await
                        .status,
                )
            });
        }
        while let Some(done) = bounded("concurrent requests", tasks.join_next()).await {
            let (i, status) = done.expect("a request task");
            assert_eq!(
                status,
                if i % 2 == 0 { 500 } else { 200 },
                "{isolation} request {i}"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// Admission
// ---------------------------------------------------------------------------

fn admission_filter(
    kind: &str,
    name: &str,
    component: &str,
    config: Option<Value>,
    settings: &str,
) -> String {
    filter(
        &format!("admission.{kind}"),
        name,
        component,
        config,
        settings,
    )
}

fn create(
    client: &reqwest::Client,
    gateway: &TestGateway,
    path: &str,
    object: &Value,
) -> reqwest::RequestBuilder {
    client
        .post(gateway.url(path))
        .bearer_auth("alice-token")
        .header("content-type", "application/json")
        .body(object.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutations_reach_the_upstream_in_order_before_validation() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&[
        &tokens(),
        &rbac(),
        &admission_filter("mutating", "labels-a", "label-defaults", Some(json!({"labels": {"team": "a", "env": "dev"}})), ""),
        &admission_filter(
            "mutating",
            "labels-b",
            "label-defaults",
            Some(json!({"labels": {"team": "b", "tier": "gold"}, "overwrite": true})),
            "",
        ),
        &admission_filter(
            "validating",
            "policy",
            "policy-deny",
            Some(json!({"name": "policy", "rules": [
                {"pointer": "/metadata/labels/tier", "op": "absent", "message": "the tier label is missing"},
                {"pointer": "/spec/replicas", "op": "gt", "value": 10, "message": "replicas above 10 are not allowed"},
            ]})),
            "",
        ),
        &routes(&upstream.url()),
    ])
    .await;
    let client = http_client();

    let object = json!({"apiVersion": "demo.example.io/v1", "kind": "Widget", "metadata": {"name": "w1"}, "spec": {"replicas": 3}});
    let echo = echo(&send(create(&client, &gateway, WIDGETS, &object)).await);
    let received = echoed_body(&echo);
    // Both mutations, in manifest order: b overwrote a's team; and the
    // validating filter saw b's tier (else it would have denied).
    assert_eq!(
        received["metadata"]["labels"],
        json!({"team": "b", "env": "dev", "tier": "gold"})
    );
    assert_eq!(received["spec"], object["spec"]);
    let body_length = echo["body"].as_str().expect("a body").len();
    assert_eq!(
        echoed_header(&echo, "content-length"),
        Some(body_length.to_string()),
        "a correct Content-Length"
    );

    // The same over HTTP/2, and with a chunked body of unknown length.
    let received = echoed_body(&self::echo(
        &send(create(&h2c_client(), &gateway, WIDGETS, &object)).await,
    ));
    assert_eq!(received["metadata"]["labels"]["tier"], "gold");
    let chunks = vec![
        Ok::<_, std::io::Error>(object.to_string()[..10].to_owned()),
        Ok(object.to_string()[10..].to_owned()),
    ];
    let request = client
        .post(gateway.url(WIDGETS))
        .bearer_auth("alice-token")
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            chunks,
        )));
    let chunked = self::echo(&send(request).await);
    assert_eq!(echoed_body(&chunked)["metadata"]["labels"]["tier"], "gold");
    let body_length = chunked["body"].as_str().expect("a body").len();
    assert_eq!(
        echoed_header(&chunked, "content-length"),
        Some(body_length.to_string()),
        "{chunked}"
    );
    assert_eq!(
        echoed_header(&chunked, "transfer-encoding"),
        None,
        "{chunked}"
    );

    // A validating denial: 403 with the webhook message.
    let big = json!({"metadata": {"name": "big"}, "spec": {"replicas": 20}});
    let status = send(create(&client, &gateway, WIDGETS, &big))
        .await
        .assert_status(403, "Forbidden");
    assert_eq!(
        status["message"],
        r#"admission webhook "policy" denied the request: replicas above 10 are not allowed"#
    );

    // Requests without an object skip admission: a GET even with a body the
    // policy would deny reaches the upstream unchanged.
    let request = client
        .get(gateway.url(WIDGETS))
        .bearer_auth("alice-token")
        .body(big.to_string());
    let echo_get = self::echo(&send(request).await);
    assert_eq!(echoed_body(&echo_get), big);

    // A body that is not JSON: 400.
    let request = client
        .post(gateway.url(WIDGETS))
        .bearer_auth("alice-token")
        .header("content-type", "application/json")
        .body("{not json");
    let status = send(request).await.assert_status(400, "BadRequest");
    let message = status["message"].as_str().expect("a message");
    assert!(
        message.starts_with("the request body is not valid JSON"),
        "{message}"
    );
    assert_eq!(
        upstream.hits(),
        4,
        "the denied and the invalid creates did not reach the upstream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_can_mutate_only_in_the_mutating_list() {
    let upstream = Upstream::start().await;
    let mutating = gateway(&[
        &tokens(),
        &rbac(),
        &admission_filter("mutating", "faults", "fault-admission", None, ""),
        &routes(&upstream.url()),
    ])
    .await;
    let validating = gateway(&[
        &tokens(),
        &rbac(),
        &admission_filter("validating", "faults", "fault-admission", None, ""),
        &routes(&upstream.url()),
    ])
    .await;
    let client = http_client();
    let object = |name: &str| json!({"metadata": {"name": name, "labels": {"keep": "me"}}});

    let received = echoed_body(&echo(
        &send(create(&client, &mutating, WIDGETS, &object("mutate"))).await,
    ));
    assert_eq!(
        received["metadata"]["labels"],
        json!({"keep": "me", "fault-admission": "mutated"})
    );
    let received = echoed_body(&echo(
        &send(create(&client, &mutating, WIDGETS, &object("patch"))).await,
    ));
    assert_eq!(
        received["metadata"]["annotations"],
        json!({"fault-admission": "patched"})
    );

    for name in ["mutate", "patch"] {
        let status = send(create(&client, &validating, WIDGETS, &object(name)))
            .await
            .assert_status(500, "InternalError");
        assert_eq!(
            status["message"],
            "Internal error occurred: the admission stage failed"
        );
    }
    let received = echoed_body(&echo(
        &send(create(&client, &validating, WIDGETS, &object("allow"))).await,
    ));
    assert_eq!(
        received,
        object("allow"),
        "an allowed object goes on unchanged"
    );
    let status = send(create(&client, &validating, WIDGETS, &object("deny")))
        .await
        .assert_status(403, "Forbidden");
    assert_eq!(status["message"], "fault-admission: deny requested");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_sees_dry_run() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&[
        &tokens(),
        &rbac(),
        &admission_filter("validating", "faults", "fault-admission", None, ""),
        &routes(&upstream.url()),
    ])
    .await;
    let client = http_client();
    let object = json!({"metadata": {"name": "dry-run"}});
    echo(&send(create(&client, &gateway, WIDGETS, &object)).await);
    let status = send(create(
        &client,
        &gateway,
        &format!("{WIDGETS}?dryRun=All"),
        &object,
    ))
    .await
    .assert_status(403, "Forbidden");
    assert_eq!(
        status["message"],
        "fault-admission: the request is a dry run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_failures_follow_the_failure_policy() {
    let upstream = Upstream::start().await;
    let closed = gateway(&[
        &tokens(),
        &rbac(),
        &admission_filter(
            "validating",
            "faults",
            "fault-admission",
            None,
            "timeout = \"100ms\"\nmemory = \"8MiB\"\n",
        ),
        &routes(&upstream.url()),
    ])
    .await;
    let open = gateway(&[
        &tokens(),
        &rbac(),
        &admission_filter(
            "mutating",
            "faults",
            "fault-admission",
            None,
            "timeout = \"100ms\"\nmemory = \"8MiB\"\nfailure_policy = \"fail-open\"\n",
        ),
        &routes(&upstream.url()),
    ])
    .await;
    let client = http_client();
    let object = |name: &str| json!({"metadata": {"name": name}});
    for name in ["error", "trap", "alloc"] {
        let status = send(create(&client, &closed, WIDGETS, &object(name)))
            .await
            .assert_status(500, "InternalError");
        assert_no_internal_detail(&status);
    }
    let status = send(create(&client, &closed, WIDGETS, &object("loop")))
        .await
        .assert_status(503, "ServiceUnavailable");
    assert_eq!(
        status["message"],
        "the admission stage did not answer in time"
    );
    assert_eq!(upstream.hits(), 0);

    for name in ["error", "trap", "alloc", "loop"] {
        let received = echoed_body(&echo(
            &send(create(&client, &open, WIDGETS, &object(name))).await,
        ));
        assert_eq!(
            received,
            object(name),
            "{name}: the object goes on unchanged"
        );
    }
}

/// A monitored admission filter is asked and logged, never obeyed: its
/// denial, its mutation and its failures all let the object go on as sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monitor_mode_admission_filter_never_stops_a_request() {
    let upstream = Upstream::start().await;
    let settings = "mode = \"monitor\"\ntimeout = \"100ms\"\n";
    let gateway = gateway(&[
        &tokens(),
        &rbac(),
        &admission_filter(
            "mutating",
            "watch-mutations",
            "fault-admission",
            None,
            settings,
        ),
        &admission_filter(
            "validating",
            "watch-validations",
            "fault-admission",
            None,
            settings,
        ),
        &routes(&upstream.url()),
    ])
    .await;
    let client = http_client();
    for name in ["deny", "mutate", "patch", "error", "trap", "loop"] {
        let object = json!({"metadata": {"name": name}});
        let received = echoed_body(&echo(
            &send(create(&client, &gateway, WIDGETS, &object)).await,
        ));
        assert_eq!(received, object, "{name}");
    }
}
