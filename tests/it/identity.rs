//! The identity reaches the upstream (issue 12, section 1): each `identity`
//! mode's headers at an echo upstream (under kube's names or those
//! `identity_headers` gives), the client's credentials stripped (and
//! forwarded where a route says so), and two gateways over real TLS,
//! the front one in request-header mode with a proxy client certificate,
//! the back one trusting it through `requestheader-authn`.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::certs::{Ca, CertAndKey};
use crate::support::clients::{http_client, send, tls_client, tls_client_with_identity};
use crate::support::filters::{build_filters, filter, rbac_with, tokens_with};
use crate::support::gateway::{TestGateway, plaintext};
use crate::support::upstream::{Upstream, echo, echoed_header, echoed_values};
use crate::support::{eventually, new_dir};

const WIDGETS: &str = "/apis/demo.example.io/v1/namespaces/default/widgets";

fn users() -> Value {
    json!({"tokens": [
        {"token": "alice-token", "user": "alice", "uid": "1001", "groups": ["dev"]},
        {"token": "front-token", "user": "front-gw", "groups": ["gateways"]},
    ]})
}

/// alice administers widgets, front-gw may impersonate anyone, everyone may
/// use `/open/*`.
fn rbac_rules() -> Value {
    json!({
        "roles": [
            {"name": "widget-admin", "rules": [{"verbs": ["*"], "apiGroups": ["demo.example.io"], "resources": ["widgets"]}]},
            {"name": "open", "rules": [{"verbs": ["*"], "nonResourceURLs": ["/open/*"]}]},
            {"name": "impersonator", "rules": [{"verbs": ["impersonate"], "apiGroups": ["", "authentication.k8s.io"], "resources": ["*"]}]},
        ],
        "bindings": [
            {"role": "widget-admin", "users": ["alice"]},
            {"role": "open", "groups": ["system:authenticated", "system:unauthenticated"]},
            {"role": "impersonator", "users": ["front-gw", "alice"]},
        ],
    })
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).expect("write a test file");
}

fn write_pair(dir: &Path, stem: &str, pair: &CertAndKey) {
    write(dir, &format!("{stem}.crt"), &pair.cert_pem);
    write(dir, &format!("{stem}.key"), &pair.key_pem);
}

/// None of `names` reached the upstream that echoed `seen`.
fn assert_absent(seen: &Value, names: &[&str]) {
    for name in names {
        assert_eq!(
            echoed_header(seen, name),
            None,
            "{name} reached the upstream"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_header_mode_names_the_user_and_strips_the_clients_credentials() {
    build_filters();
    let upstream = Upstream::start().await;
    let url = upstream.url();
    let manifest = plaintext(&format!(
        "[authentication]\nanonymous = true\n{}{}\
         [[servers]]\nname = \"gw\"\n\
         [[servers.routes]]\nprefix = \"/open/rh/\"\nupstream = {{ url = \"{url}\", identity = \"request-header\" }}\n\
         [[servers.routes]]\nprefix = \"/open/none/\"\nupstream = \"{url}\"\n\
         [[servers.routes]]\nprefix = \"/open/forward/\"\nupstream = \"{url}\"\nforward_credentials = true\n\
         [[servers.routes]]\nprefix = \"/open/named/\"\nupstream = {{ url = \"{url}\", identity = \"request-header\", \
         identity_headers = {{ user = \"X-Forwarded-User\", group = \"X-Forwarded-Groups\", extra_prefix = \"X-Forwarded-Extra-\" }} }}\n",
        tokens_with(users()).replace("\n\n", "\nheaders = [\"authorization\", \"x-api-key\"]\n\n"),
        rbac_with(rbac_rules()),
    ));
    let gateway = TestGateway::start(&manifest).await;
    let client = http_client();
    let hostile = |path: &str| {
        client
            .get(gateway.url(path))
            .bearer_auth("alice-token")
            .header("x-api-key", "secret")
            .header("x-remote-user", "admin")
            .header("x-remote-group", "system:masters")
            // The same names as a CGI server (Rack, PHP, WSGI) reads them.
            .header("x_api_key", "secret")
            .header("x_remote_user", "admin")
    };

    let seen = echo(&send(hostile("/open/rh/x")).await);
    assert_eq!(
        echoed_header(&seen, "x-remote-user").as_deref(),
        Some("alice")
    );
    assert_eq!(
        echoed_header(&seen, "x-remote-uid").as_deref(),
        Some("1001")
    );
    assert_eq!(
        echoed_values(&seen, "x-remote-group"),
        ["dev", "system:authenticated"]
    );
    assert_eq!(echoed_header(&seen, "authorization"), None);
    assert_eq!(echoed_header(&seen, "x-api-key"), None);
    assert_absent(&seen, &["x_api_key", "x_remote_user"]);

    let seen = echo(&send(hostile("/open/none/x")).await);
    assert_absent(
        &seen,
        &[
            "x_api_key",
            "x_remote_user",
            "x-remote-user",
            "x-remote-group",
            "authorization",
            "x-api-key",
        ],
    );

    let seen = echo(&send(hostile("/open/forward/x")).await);
    assert_eq!(
        echoed_header(&seen, "authorization").as_deref(),
        Some("Bearer alice-token")
    );
    assert_eq!(echoed_header(&seen, "x-api-key").as_deref(), Some("secret"));
    assert_eq!(echoed_header(&seen, "x-remote-user"), None);

    // Anonymous requests carry kube's anonymous user, as the aggregator's do.
    let seen = echo(&send(client.get(gateway.url("/open/rh/x"))).await);
    assert_eq!(
        echoed_header(&seen, "x-remote-user").as_deref(),
        Some("system:anonymous")
    );
    assert_eq!(
        echoed_values(&seen, "x-remote-group"),
        ["system:unauthenticated"]
    );

    // An impersonated user's extra key reaches the upstream escaped as
    // client-go escapes it; the Impersonate-* headers do not.
    let seen = echo(
        &send(
            client
                .get(gateway.url("/open/rh/x"))
                .bearer_auth("alice-token")
                .header("impersonate-user", "bob")
                .header("impersonate-extra-example.com%2fscopes", "read"),
        )
        .await,
    );
    assert_eq!(
        echoed_header(&seen, "x-remote-user").as_deref(),
        Some("bob")
    );
    assert_eq!(
        echoed_header(&seen, "x-remote-extra-example.com%2fscopes").as_deref(),
        Some("read")
    );
    assert!(echoed_values(&seen, "impersonate-user").is_empty());

    // identity_headers renames the headers (kube's --requestheader-*
    // flags); what the client wrote under the new names is gone too, and
    // a name left out (uid) keeps kube's default.
    let seen = echo(
        &send(
            hostile("/open/named/x")
                .header("x-forwarded-user", "admin")
                .header("x-forwarded-groups", "system:masters")
                .header("x-forwarded-extra-scopes", "everything")
                .header("x_forwarded_user", "admin")
                .header("x_forwarded_extra_scopes", "everything"),
        )
        .await,
    );
    assert_eq!(
        echoed_header(&seen, "x-forwarded-user").as_deref(),
        Some("alice")
    );
    assert_eq!(
        echoed_values(&seen, "x-forwarded-groups"),
        ["dev", "system:authenticated"]
    );
    assert_eq!(
        echoed_header(&seen, "x-remote-uid").as_deref(),
        Some("1001")
    );
    assert_absent(
        &seen,
        &[
            "x-remote-user",
            "x-remote-group",
            "x-forwarded-extra-scopes",
            "x_forwarded_user",
            "x_forwarded_extra_scopes",
            "authorization",
            "x-api-key",
            "x_api_key",
            "x_remote_user",
        ],
    );
}

/// The back gateway: TLS, trusting only the front proxy CA's client
/// certificates, requestheader-authn and RBAC, in front of `upstream` in
/// request-header mode.
async fn back_gateway(upstream: &Upstream, proxy_ca: &Ca, extra_auth: &str) -> (TestGateway, Ca) {
    let dir = new_dir();
    let (manifest, server_ca) =
        back_manifest(dir.path(), upstream, proxy_ca, front_proxy(), extra_auth);
    (TestGateway::start_in(dir, &manifest).await, server_ca)
}

/// requestheader-authn's config in [`back_manifest`]: the front proxy's CA,
/// its certificate's CN, and kube's header names.
fn front_proxy() -> Value {
    json!({"client_ca": "front-proxy-ca.crt", "allowed_names": ["front-proxy"]})
}

/// [`back_gateway`]'s manifest, requestheader-authn configured with
/// `requestheader`, with the files it names written to `dir`, and the CA of
/// its serving certificate.
fn back_manifest(
    dir: &Path,
    upstream: &Upstream,
    proxy_ca: &Ca,
    requestheader: Value,
    extra_auth: &str,
) -> (String, Ca) {
    let server_ca = crate::support::certs::write_server_pki(dir);
    write(dir, "front-proxy-ca.crt", &proxy_ca.cert_pem);
    let requestheader = filter(
        "authentication.filters",
        "front-proxy",
        "requestheader-authn",
        Some(requestheader),
        "config_files = [\"client_ca\"]",
    );
    let manifest = format!(
        "[listen]\naddress = \"127.0.0.1:0\"\n\n[listen.tls]\ncert = \"server.crt\"\nkey = \"server.key\"\nclient_ca = \"front-proxy-ca.crt\"\n\n\
         [authentication]\nanonymous = true\n{requestheader}{extra_auth}{}\
         [[servers]]\nname = \"back\"\n\
         [[servers.routes]]\napi = \"/apis/demo.example.io/v1\"\nupstream = {{ url = \"{}\", identity = \"request-header\" }}\n",
        rbac_with(rbac_rules()),
        upstream.url(),
    );
    (manifest, server_ca)
}

/// The front gateway: plaintext, alice's token, everything allowed, the
/// widgets API routed to `back_url` with `identity_keys` (after `url` and `ca`),
/// in `dir` (which holds the files those keys name).
async fn front_gateway(
    dir: tempfile::TempDir,
    back_url: &str,
    back_ca: &Ca,
    identity_keys: &str,
) -> TestGateway {
    write(dir.path(), "back-ca.crt", &back_ca.cert_pem);
    let manifest = plaintext(&format!(
        "[authentication]\n{}[authorization]\nalways_allow = true\n\n\
         [[servers]]\nname = \"front\"\n\
         [[servers.routes]]\napi = \"/apis/demo.example.io/v1\"\n\
         upstream = {{ url = \"{}\", ca = \"back-ca.crt\", {identity_keys} }}\n",
        tokens_with(users()),
        back_url,
    ));
    TestGateway::start_in(dir, &manifest).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_front_gateway_tells_a_back_gateway_who_the_user_is() {
    build_filters();
    let upstream = Upstream::start().await;
    let proxy_ca = Ca::new("front-proxy CA");
    let (back, back_ca) = back_gateway(&upstream, &proxy_ca, "").await;

    let front_dir = new_dir();
    write_pair(
        front_dir.path(),
        "proxy",
        &proxy_ca.client_cert("front-proxy"),
    );
    let front = front_gateway(
        front_dir,
        &back.url(""),
        &back_ca,
        "identity = \"request-header\", client_cert = \"proxy.crt\", client_key = \"proxy.key\"",
    )
    .await;

    // alice's token at the front is user alice at the back, authorized there.
    let alice = send(
        http_client()
            .get(front.url(WIDGETS))
            .bearer_auth("alice-token"),
    )
    .await;
    let seen = echo(&alice);
    assert_eq!(
        echoed_header(&seen, "x-remote-user").as_deref(),
        Some("alice")
    );
    assert_eq!(
        echoed_values(&seen, "x-remote-group"),
        ["dev", "system:authenticated"]
    );

    // An extra value's key crosses both gateways escaped as client-go
    // escapes it and is read back by requestheader-authn as the key it was
    // (the back escapes it again for its own upstream).
    let with_extra = send(
        http_client()
            .get(front.url(WIDGETS))
            .bearer_auth("alice-token")
            .header("impersonate-user", "alice")
            .header("impersonate-extra-example.com%2fscopes", "read"),
    )
    .await;
    assert_eq!(
        echoed_values(&echo(&with_extra), "x-remote-extra-example.com%2fscopes"),
        ["read"]
    );

    // Straight to the back without the proxy's certificate, `X-Remote-User:
    // admin` is nobody's word: the request is anonymous, and RBAC refuses it.
    let direct = tls_client(&back_ca.cert_pem)
        .get(back.url(WIDGETS))
        .header("x-remote-user", "admin")
        .header("x-remote-group", "system:masters");
    let answer = send(direct).await;
    let status = answer.assert_status(403, "Forbidden");
    assert!(
        status["message"]
            .as_str()
            .unwrap_or_default()
            .contains("system:anonymous"),
        "{status}"
    );

    // A certificate of the same CA whose CN is not in allowed_names neither.
    let mallory = tls_client_with_identity(&back_ca.cert_pem, &proxy_ca.client_cert("mallory"))
        .get(back.url(WIDGETS))
        .header("x-remote-user", "alice");
    send(mallory).await.assert_status(403, "Forbidden");

    // The proxy certificate is re-read when its files change: one with a CN
    // the back does not allow makes alice anonymous there.
    write_pair(
        front.dir.path(),
        "proxy",
        &proxy_ca.client_cert("not-the-proxy"),
    );
    eventually("the front presents the new certificate", || async {
        let answer = send(
            http_client()
                .get(front.url(WIDGETS))
                .bearer_auth("alice-token"),
        )
        .await;
        (answer.status == 403).then_some(())
    })
    .await;
}

/// requestheader-authn reads what a front proxy sends as kube's
/// requestheader authenticator reads it
/// (`staging/src/k8s.io/apiserver/pkg/authentication/request/headerrequest/requestheader.go`):
/// an extra key lower-cased as sent and then percent-decoded, so a key
/// client-go escaped keeps the case its escapes spell (`%D0%9A` is `К`, not
/// `к`); the groups header by header in the order the names are configured
/// (`allHeaderValues`), an empty value no group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requestheader_authn_reads_the_proxys_headers_as_kube_does() {
    build_filters();
    let upstream = Upstream::start().await;
    let proxy_ca = Ca::new("front-proxy CA");
    let mut config = front_proxy();
    config["group_headers"] = json!(["X-Remote-Group", "X-Remote-Team"]);
    let dir = new_dir();
    let (manifest, back_ca) = back_manifest(dir.path(), &upstream, &proxy_ca, config, "");
    let back = TestGateway::start_in(dir, &manifest).await;

    let proxy = tls_client_with_identity(&back_ca.cert_pem, &proxy_ca.client_cert("front-proxy"));
    let answer = send(
        proxy
            .get(back.url(WIDGETS))
            .header("x-remote-user", "alice")
            .header("x-remote-team", "red")
            .header("x-remote-group", "")
            .header("x-remote-group", "dev")
            .header("x-remote-extra-%D0%9Aey", "one"),
    )
    .await;
    let seen = echo(&answer);
    assert_eq!(
        echoed_header(&seen, "x-remote-user").as_deref(),
        Some("alice")
    );
    // The back escapes the key again for its own upstream: `Кey`.
    let read = (
        echoed_values(&seen, "x-remote-group"),
        echoed_values(&seen, "x-remote-extra-%d0%9aey"),
    );
    let groups = ["dev", "red", "system:authenticated"].map(str::to_owned);
    assert_eq!(read, (groups.to_vec(), vec!["one".to_owned()]), "{seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonate_mode_acts_as_the_user_with_the_gateways_own_token() {
    build_filters();
    let upstream = Upstream::start().await;
    let unused_ca = Ca::new("unused front-proxy CA");
    let (back, back_ca) = back_gateway(&upstream, &unused_ca, &tokens_with(users())).await;

    let front_dir = new_dir();
    write(front_dir.path(), "token", "front-token\n");
    let front = front_gateway(
        front_dir,
        &back.url(""),
        &back_ca,
        "identity = \"impersonate\", bearer_token_file = \"token\"",
    )
    .await;
    let as_alice = || async {
        send(
            http_client()
                .get(front.url(WIDGETS))
                .bearer_auth("alice-token"),
        )
        .await
    };

    // The back authenticates the front's token, checks that front-gw may
    // impersonate alice, and serves alice.
    let seen = echo(&as_alice().await);
    assert_eq!(
        echoed_header(&seen, "x-remote-user").as_deref(),
        Some("alice")
    );
    assert_eq!(
        echoed_header(&seen, "x-remote-uid").as_deref(),
        Some("1001")
    );
    assert_eq!(
        echoed_values(&seen, "x-remote-group"),
        ["dev", "system:authenticated"],
        "Impersonate-Group carried alice's groups"
    );

    // The token file is re-read when it changes: a token the back does not
    // know gets the front's requests refused, the right one served again.
    write(front.dir.path(), "token", "revoked-token");
    eventually("the front sends the new token", || async {
        (as_alice().await.status == 401).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    write(front.dir.path(), "token", "front-token");
    eventually("the front sends the restored token", || async {
        (as_alice().await.status == 200).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonate_mode_acts_as_the_user_with_the_gateways_client_certificate() {
    build_filters();
    let upstream = Upstream::start().await;
    let client_ca = Ca::new("gateway clients CA");
    let x509 = filter("authentication.filters", "certs", "x509-authn", None, "");
    // The back runs as a process of its own: reload.rs counts x509-authn's
    // first load in this one.
    let back_dir = new_dir();
    let (manifest, back_ca) =
        back_manifest(back_dir.path(), &upstream, &client_ca, front_proxy(), &x509);
    let path = back_dir.path().join("gateway.toml");
    std::fs::write(&path, manifest).expect("write the back's manifest");
    let back = crate::support::process::GatewayProcess::spawn(&path);

    let front_dir = new_dir();
    write_pair(front_dir.path(), "gw", &client_ca.client_cert("front-gw"));
    let front = front_gateway(
        front_dir,
        &back.url(""),
        &back_ca,
        "identity = \"impersonate\", client_cert = \"gw.crt\", client_key = \"gw.key\"",
    )
    .await;

    // The back's x509-authn makes the front's certificate user front-gw
    // (requestheader-authn has no opinion: its CN is not an allowed
    // proxy name), which may impersonate alice: the back serves alice.
    let seen = echo(
        &send(
            http_client()
                .get(front.url(WIDGETS))
                .bearer_auth("alice-token"),
        )
        .await,
    );
    assert_eq!(
        echoed_header(&seen, "x-remote-user").as_deref(),
        Some("alice")
    );
    assert_eq!(
        echoed_values(&seen, "x-remote-group"),
        ["dev", "system:authenticated"]
    );
    assert_eq!(echoed_header(&seen, "authorization"), None);
}

/// Headers a request sends, as name and value.
type Headers<'a> = &'a [(&'a str, &'a str)];

/// What reached an upstream in request-header mode, for a request by alice
/// (who may impersonate anyone) with `headers`.
async fn as_alice_upstream(gateway: &TestGateway, headers: Headers<'_>) -> Value {
    let mut request = http_client()
        .get(gateway.url("/open/rh/x"))
        .bearer_auth("alice-token");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    echo(&send(request).await)
}

/// The impersonated user reaches the upstream as kube's `WithImpersonation`
/// (`staging/src/k8s.io/apiserver/pkg/endpoints/filters/impersonation/impersonation.go`)
/// makes it: `system:anonymous` in `system:unauthenticated`; a service
/// account in its groups only when no `Impersonate-Group` names others; a
/// user in `system:unauthenticated` not in `system:authenticated`; an
/// empty `Impersonate-User` no impersonation at all; an extra key
/// percent-decoded as `url.PathUnescape` does (`&` is part of the key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_impersonated_user_reaches_the_upstream_as_kube_makes_it() {
    build_filters();
    let upstream = Upstream::start().await;
    let url = upstream.url();
    let manifest = plaintext(&format!(
        "{}{}[[servers]]\nname = \"gw\"\n\
         [[servers.routes]]\nprefix = \"/open/rh/\"\nupstream = {{ url = \"{url}\", identity = \"request-header\" }}\n",
        tokens_with(users()),
        rbac_with(rbac_rules()),
    ));
    let gateway = TestGateway::start(&manifest).await;

    let robot = "system:serviceaccount:default:robot";
    // The headers alice sends, and the user and groups the upstream is told
    // (system:anonymous may use /open/* through system:unauthenticated).
    let cases: [(Headers, &str, &[&str]); 5] = [
        (
            &[("impersonate-user", "system:anonymous")],
            "system:anonymous",
            &["system:unauthenticated"],
        ),
        (
            &[("impersonate-user", robot)],
            robot,
            &[
                "system:serviceaccounts",
                "system:serviceaccounts:default",
                "system:authenticated",
            ],
        ),
        (
            &[("impersonate-user", robot), ("impersonate-group", "dev")],
            robot,
            &["dev", "system:authenticated"],
        ),
        (
            &[
                ("impersonate-user", "bob"),
                ("impersonate-group", "system:unauthenticated"),
            ],
            "bob",
            &["system:unauthenticated"],
        ),
        (
            &[("impersonate-user", "")],
            "alice",
            &["dev", "system:authenticated"],
        ),
    ];
    for (headers, user, groups) in cases {
        let seen = as_alice_upstream(&gateway, headers).await;
        assert_eq!(
            echoed_header(&seen, "x-remote-user").as_deref(),
            Some(user),
            "{headers:?}"
        );
        assert_eq!(
            echoed_values(&seen, "x-remote-group"),
            groups,
            "{headers:?}"
        );
    }

    let seen = as_alice_upstream(
        &gateway,
        &[
            ("impersonate-user", "bob"),
            ("impersonate-extra-scopes&team", "red"),
        ],
    )
    .await;
    assert_eq!(
        echoed_header(&seen, "x-remote-extra-scopes&team").as_deref(),
        Some("red")
    );
    assert_eq!(echoed_header(&seen, "x-remote-extra-scopes"), None);
}
