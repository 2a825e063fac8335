//! Authentication: authenticators are a union tried in order, kube's 401,
//! the headers an authenticator sees, anonymous requests, credential
//! headers kept from the upstream, mTLS client certificates and JWTs, and
//! a user without a name taken as no opinion.

use super::*;

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

/// An authenticator's user with an empty name is no one: its answer is no
/// opinion, as kube's x509 and request-header authenticators answer for an
/// empty name (`staging/src/k8s.io/apiserver/pkg/authentication/request/x509/x509.go`,
/// `request/headerrequest/requestheader.go`). The next authenticator is
/// asked, then anonymous, else kube's 401; the request never runs as "".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authenticated_user_without_a_name_is_no_opinion() {
    let upstream = Upstream::start().await;
    let nameless = filter(
        "authentication.filters",
        "nameless",
        "fault-authn",
        Some(json!({"user": "", "groups": ["system:masters"]})),
        "",
    );
    let client = http_client();
    let authenticated = ("x-fault", "authenticated");

    let anonymous = gateway(&[
        "[authentication]\nanonymous = true\n",
        &nameless,
        &tokens(),
        &rbac(),
        &routes(&upstream.url()),
    ])
    .await;
    let who =
        |headers: &[(&str, &str)]| whoami(with_headers(client.get(anonymous.url(WHOAMI)), headers));
    assert_eq!(who(&[authenticated]).await, "system:anonymous");
    assert_eq!(
        who(&[authenticated, ("authorization", "Bearer bob-token")]).await,
        "bob"
    );

    let closed = gateway(&[&nameless, &rbac(), &routes(&upstream.url())]).await;
    assert_unauthorized(
        &send(with_headers(
            client.get(closed.url("/open/x")),
            &[authenticated],
        ))
        .await,
    );
    assert_eq!(upstream.hits(), 0);
}

/// An authenticator's user is bounded (1,000 groups, 100 extra keys and
/// 1,000 values, 4 KiB a string, 64 KiB in all; docs/writing-filters.md):
/// past a bound the answer is the filter's error, counted as one, and the
/// next authenticator is asked, else kube's 401. It was taken whole, to be
/// carried to the upstream's `X-Remote-*` headers, the authorizers and
/// every audit event, bounded only by the filter's `memory`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authenticators_user_past_the_bounds_is_its_error() {
    let upstream = Upstream::start().await;
    let oversized = filter(
        "authentication.filters",
        "oversized",
        "fault-authn",
        Some(json!({"user": "big-user", "groups": ["faulty"]})),
        "memory = \"64MiB\"\n",
    );
    let gateway = gateway(&[&oversized, &tokens(), &rbac(), &routes(&upstream.url())]).await;
    let client = http_client();
    let who =
        |headers: &[(&str, &str)]| whoami(with_headers(client.get(gateway.url(WHOAMI)), headers));
    let alice = ("authorization", "Bearer alice-token");

    // Within the bounds: the filter's user.
    assert_eq!(who(&[("x-fault", "groups-1000"), alice]).await, "big-user");
    assert_eq!(who(&[("x-fault", "extra-4"), alice]).await, "big-user");
    let errors = local_filter_calls("oversized", "error");
    // Past them: the filter's error, so the token's user.
    for fault in ["groups-1001", "groups-100000", "extra-65", "extra-2000"] {
        assert_eq!(who(&[("x-fault", fault), alice]).await, "alice", "{fault}");
    }
    assert_eq!(local_filter_calls("oversized", "error"), errors + 4);
    // And no one else to ask: kube's 401.
    assert_unauthorized(
        &send(
            client
                .get(gateway.url("/open/x"))
                .header("x-fault", "groups-1001"),
        )
        .await,
    );
    assert_eq!(upstream.hits(), 0);
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
    let client_ca = crate::support::Ca::new("wasmgate test client CA");
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
        &rbac_with(rbac_config),
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
