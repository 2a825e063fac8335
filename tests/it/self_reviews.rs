//! What kube clients ask the server itself, answered by the gateway:
//! `/version`, `/api`'s `serverAddressByClientCIDRs`, and the self-subject
//! reviews behind `kubectl auth can-i` and `kubectl auth whoami`, over TLS
//! with a kubeconfig, authenticated by token-authn and authorized by
//! rbac-authz. A route that claims the reviews' paths takes them over.

use serde_json::{Value, json};

use crate::support::*;

/// [`rbac_config`] plus kube's `system:basic-user` and `system:discovery`
/// for every authenticated user.
fn rbac_with_basic_user() -> Value {
    let mut config = rbac_config();
    config["roles"].as_array_mut().expect("roles").push(json!({
        "name": "basic-user",
        "rules": [
            {"verbs": ["create"], "apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]},
            {"verbs": ["create"], "apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"]},
            {"verbs": ["get"], "nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/version", "/version/"]},
        ],
    }));
    config["bindings"]
        .as_array_mut()
        .expect("bindings")
        .push(json!({"role": "basic-user", "groups": ["system:authenticated"]}));
    config
}

fn manifest(routes: &str) -> String {
    format!(
        "[listen]\naddress = \"127.0.0.1:0\"\n\n[listen.tls]\ncert = \"server.crt\"\nkey = \"server.key\"\n{}{}{routes}",
        tokens(),
        rbac_with(rbac_with_basic_user()),
    )
}

/// The widgets API as discovery describes it (kubectl resolves
/// `widgets.demo.example.io` through it), `/private/` to `upstream`.
fn widget_routes(upstream: &str) -> String {
    format!(
        r#"
[[servers]]
name = "gw"

[[servers.routes]]
api = "/apis/demo.example.io/v1"
static = {{ status = 200, content_type = "application/json", body = '{{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"demo.example.io/v1","resources":[{{"name":"widgets","singularName":"widget","namespaced":true,"kind":"Widget","verbs":["create","delete","get","list"]}}]}}' }}

[[servers.routes]]
prefix = "/private/"
upstream = "{upstream}"
"#
    )
}

fn spawn(dir: &tempfile::TempDir, manifest: &str) -> GatewayProcess {
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, manifest).expect("write the manifest");
    GatewayProcess::spawn(&path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_auth_can_i_and_whoami_are_answered_by_the_gateway() {
    build_filters();
    let dir = new_dir();
    write_server_pki(dir.path());
    let upstream = Upstream::start().await;
    let gateway = spawn(&dir, &manifest(&widget_routes(&upstream.url())));
    let server = format!("https://localhost:{}", gateway.addr.port());
    let ca = dir.path().join("ca.crt");
    let alice = Kubectl::new(dir.path(), "alice", &server, &ca, "alice-token");
    let bob = Kubectl::new(dir.path(), "bob", &server, &ca, "bob-token");

    let whoami: Value =
        serde_json::from_str(&alice.ok(&["auth", "whoami", "-o", "json"]).await).expect("JSON");
    assert_eq!(whoami["kind"], "SelfSubjectReview");
    assert_eq!(whoami["status"]["userInfo"]["username"], "alice");
    assert_eq!(whoami["status"]["userInfo"]["uid"], "1001");
    assert_eq!(
        whoami["status"]["userInfo"]["groups"],
        json!(["dev", "system:authenticated"])
    );

    // The union's answer for each user, as rbac-authz decides.
    let cases = [
        (&alice, "create", "widgets.demo.example.io", "default", true),
        (&alice, "delete", "widgets.demo.example.io", "other", false),
        (&bob, "list", "widgets.demo.example.io", "other", true),
        (&bob, "create", "widgets.demo.example.io", "default", false),
    ];
    for (kubectl, verb, resource, namespace, allowed) in cases {
        let (ok, stdout, stderr) = kubectl
            .run(&["auth", "can-i", verb, resource, "-n", namespace])
            .await;
        let expected = if allowed { "yes" } else { "no" };
        // A denial carries the authorizer's reason: `no - RBAC: ...`.
        assert_eq!(
            (ok, stdout.split_whitespace().next().unwrap_or_default()),
            (allowed, expected),
            "can-i {verb} {resource} -n {namespace}: {stderr}"
        );
    }
    // Non-resource URLs too.
    let (ok, stdout, _) = bob.run(&["auth", "can-i", "get", "/private/bob"]).await;
    assert_eq!((ok, stdout.trim()), (true, "yes"));
    let (ok, stdout, _) = alice.run(&["auth", "can-i", "get", "/private/bob"]).await;
    assert!(!ok && stdout.starts_with("no - RBAC: "), "{stdout}");

    // `--list` asks a rules review: Wasm authorizers cannot list their
    // rules, and kubectl says the list is incomplete.
    let (_, stdout, stderr) = alice.run(&["auth", "can-i", "--list"]).await;
    assert!(
        stderr.contains("incomplete") || stdout.contains("incomplete"),
        "stdout: {stdout}\nstderr: {stderr}"
    );

    // The review groups are in discovery.
    let versions = alice.ok(&["api-versions"]).await;
    for group_version in ["authentication.k8s.io/v1", "authorization.k8s.io/v1"] {
        assert!(
            versions.lines().any(|line| line == group_version),
            "{versions}"
        );
    }
    assert_eq!(upstream.hits(), 0, "nothing of this reached the upstream");
}

/// Where the authorizers can list what they allow, kube's rules review says
/// it: with `always_allow` and no authorizer filter everything is allowed
/// (kube's `AlwaysAllow` rules, `staging/src/k8s.io/apiserver/pkg/authorization/authorizerfactory/builtin.go`),
/// and `kubectl auth can-i --list` shows `*.*` with every verb, complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_allow_rules_review_lists_everything_complete() {
    build_filters();
    let dir = new_dir();
    write_server_pki(dir.path());
    let upstream = Upstream::start().await;
    let manifest = format!(
        "[listen]\naddress = \"127.0.0.1:0\"\n\n[listen.tls]\ncert = \"server.crt\"\nkey = \"server.key\"\n{}\n[authorization]\nalways_allow = true\n{}",
        tokens(),
        widget_routes(&upstream.url()),
    );
    let gateway = spawn(&dir, &manifest);
    let server = format!("https://localhost:{}", gateway.addr.port());
    let ca = dir.path().join("ca.crt");
    let alice = Kubectl::new(dir.path(), "alice", &server, &ca, "alice-token");
    let (ok, stdout, stderr) = alice.run(&["auth", "can-i", "--list"]).await;
    assert!(ok, "{stderr}");
    assert!(
        !stdout.contains("incomplete") && !stderr.contains("incomplete"),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert!(rows.contains(&vec!["*.*", "[]", "[]", "[*]"]), "{stdout}");
    assert!(rows.contains(&vec!["[*]", "[]", "[*]"]), "{stdout}");
    assert_eq!(
        alice
            .ok(&["auth", "can-i", "delete", "widgets.demo.example.io"])
            .await
            .trim(),
        "yes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_and_api_answer_what_kube_clients_require() {
    build_filters();
    let dir = new_dir();
    write_server_pki(dir.path());
    let upstream = Upstream::start().await;
    let gateway = spawn(&dir, &manifest(&routes(&upstream.url())));
    let server = format!("https://localhost:{}", gateway.addr.port());
    let alice = Kubectl::new(
        dir.path(),
        "alice",
        &server,
        &dir.path().join("ca.crt"),
        "alice-token",
    );
    for path in ["/version", "/version/"] {
        let version: Value =
            serde_json::from_str(&alice.ok(&["get", "--raw", path]).await).expect("JSON");
        assert_eq!(
            version["gitVersion"],
            format!("v{}", env!("CARGO_PKG_VERSION"))
        );
        for field in [
            "major",
            "minor",
            "gitCommit",
            "gitTreeState",
            "buildDate",
            "goVersion",
            "compiler",
            "platform",
        ] {
            assert!(version[field].is_string(), "{field} in {version}");
        }
    }
    let api: Value =
        serde_json::from_str(&alice.ok(&["get", "--raw", "/api"]).await).expect("JSON");
    assert_eq!(
        api["serverAddressByClientCIDRs"],
        json!([{"clientCIDR": "0.0.0.0/0", "serverAddress": format!("localhost:{}", gateway.addr.port())}])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_that_claims_the_review_paths_takes_them() {
    let dir = new_dir();
    let upstream = Upstream::start().await;
    let manifest = plaintext(&format!(
        "\n[[servers]]\nname = \"gw\"\n\n[[servers.routes]]\npath = \"/hello\"\nstatic = {{ body = \"hello\" }}\n\n[[servers]]\nname = \"kube\"\n\n[[servers.routes]]\nprefix = \"/\"\nupstream = \"{}\"\n",
        upstream.url()
    ));
    let gateway = spawn(&dir, &manifest);
    let client = reqwest::Client::new();
    for path in [
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        "/version",
    ] {
        let answer = send(client.post(gateway.url(path)).body("{}")).await;
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
        assert_eq!(answer.json()["path"], path, "the upstream echoed it");
    }
}
