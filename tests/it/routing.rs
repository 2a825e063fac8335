//! Routing over real sockets: the delegation chain of two servers and the
//! not-found end, kube's API-root rule, exact before prefix, longest prefix
//! first, and the discovery documents built from every server's API roots.

use serde_json::json;

use crate::support::*;

/// Two delegating servers; the first fronts an upstream for one API root.
fn manifest(upstream: &Upstream) -> String {
    let up = upstream.url();
    plaintext(&format!(
        r#"
[[servers]]
name = "one"

[[servers.routes]]
path = "/only-one"
static = {{ body = "one:/only-one" }}

[[servers.routes]]
prefix = "/shared/"
static = {{ body = "one:/shared/" }}

[[servers.routes]]
api = "/apis/g.example.io/v1"
upstream = "{up}"

[[servers.routes]]
path = "/exact/thing"
static = {{ body = "exact" }}

[[servers.routes]]
prefix = "/exact/"
static = {{ body = "prefix-short" }}

[[servers.routes]]
prefix = "/exact/th"
static = {{ body = "prefix-long" }}

[[servers]]
name = "two"

[[servers.routes]]
path = "/only-two"
static = {{ body = "two:/only-two" }}

[[servers.routes]]
prefix = "/shared/"
static = {{ body = "two:/shared/" }}

[[servers.routes]]
api = "/apis/other.example.io/v1beta1"
static = {{ body = "two:other" }}

[[servers.routes]]
api = "/api/v1"
upstream = "{up}"

[[servers.routes]]
api = "/apis/multi.example.io/v1alpha1"
static = {{ body = "multi" }}

[[servers.routes]]
api = "/apis/multi.example.io/v1"
static = {{ body = "multi" }}

[[servers.routes]]
api = "/apis/multi.example.io/v2beta1"
static = {{ body = "multi" }}
"#
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delegation_serves_each_path_from_the_first_server_that_has_it() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&manifest(&upstream)).await;
    let client = http_client();

    let one = get(&client, &gateway.url("/only-one")).await;
    assert_eq!((one.status, one.body.as_str()), (200, "one:/only-one"));
    let two = get(&client, &gateway.url("/only-two")).await;
    assert_eq!((two.status, two.body.as_str()), (200, "two:/only-two"));
    // Both servers have /shared/: the first one wins.
    let shared = get(&client, &gateway.url("/shared/x")).await;
    assert_eq!((shared.status, shared.body.as_str()), (200, "one:/shared/"));

    for path in [
        "/neither",
        "/only-one/more",
        "/only-twox",
        "/",
        "/apis/g.example.io/v1beta1",
    ] {
        let missing = get(&client, &gateway.url(path)).await;
        assert_eq!(missing.status, 404, "{path}");
        assert_eq!(missing.body, NOT_FOUND_BODY, "{path}");
        assert_eq!(
            missing.header("content-type"),
            Some("application/json"),
            "{path}"
        );
    }
    assert_eq!(
        upstream.hits(),
        0,
        "no request above should reach the upstream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_roots_take_the_root_and_what_is_below_it_only() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&manifest(&upstream)).await;
    let client = http_client();

    for path in [
        "/apis/g.example.io/v1",
        "/apis/g.example.io/v1/x",
        "/apis/g.example.io/v1/namespaces/default/widgets?limit=5",
    ] {
        let answer = get(&client, &gateway.url(path)).await;
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
        assert_eq!(
            answer.json()["path"],
            path,
            "the upstream sees the whole path and query"
        );
    }
    // Same prefix, another version: not under the root, and no other server
    // serves it.
    let beta = get(&client, &gateway.url("/apis/g.example.io/v1beta1")).await;
    assert_eq!((beta.status, beta.body.as_str()), (404, NOT_FOUND_BODY));
    let beta_below = get(&client, &gateway.url("/apis/g.example.io/v1beta1/x")).await;
    assert_eq!(beta_below.status, 404);

    // The legacy group's root, on the second server.
    let pods = get(&client, &gateway.url("/api/v1/namespaces/default/pods")).await;
    assert_eq!(pods.status, 200);
    assert_eq!(pods.json()["path"], "/api/v1/namespaces/default/pods");
    let other = get(
        &client,
        &gateway.url("/apis/other.example.io/v1beta1/things"),
    )
    .await;
    assert_eq!((other.status, other.body.as_str()), (200, "two:other"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_paths_come_before_prefixes_and_the_longest_prefix_wins() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&manifest(&upstream)).await;
    let client = http_client();
    let cases = [
        ("/exact/thing", "exact"),
        ("/exact/thing2", "prefix-long"),
        ("/exact/th", "prefix-long"),
        ("/exact/other", "prefix-short"),
        ("/exact/", "prefix-short"),
    ];
    for (path, expected) in cases {
        let answer = get(&client, &gateway.url(path)).await;
        assert_eq!(
            (answer.status, answer.body.as_str()),
            (200, expected),
            "{path}"
        );
    }
    let no_slash = get(&client, &gateway.url("/exact")).await;
    assert_eq!(
        (no_slash.status, no_slash.body.as_str()),
        (404, NOT_FOUND_BODY)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_lists_the_api_roots_of_every_server() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&manifest(&upstream)).await;
    let client = http_client();

    let group = |name: &str, versions: &[&str]| {
        let entries: Vec<_> = versions
            .iter()
            .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
            .collect();
        json!({
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": name,
            "versions": entries,
            "preferredVersion": entries[0],
        })
    };
    let g = group("g.example.io", &["v1"]);
    let multi = group("multi.example.io", &["v1", "v2beta1", "v1alpha1"]);
    let other = group("other.example.io", &["v1beta1"]);
    // The gateway's own self-subject review groups are listed too.
    let authn = group("authentication.k8s.io", &["v1"]);
    let authz = group("authorization.k8s.io", &["v1"]);

    for path in ["/apis", "/apis/"] {
        let list = get(&client, &gateway.url(path)).await;
        assert_eq!(list.status, 200, "{path}");
        assert_eq!(list.header("content-type"), Some("application/json"));
        assert_eq!(
            list.json(),
            json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [authn, authz, g, multi, other]}),
            "{path}"
        );
    }
    for (path, expected) in [
        ("/apis/g.example.io", &g),
        ("/apis/multi.example.io/", &multi),
        ("/apis/other.example.io", &other),
    ] {
        let answer = get(&client, &gateway.url(path)).await;
        assert_eq!(answer.status, 200, "{path}");
        assert_eq!(&answer.json(), expected, "{path}");
    }
    let legacy = get(&client, &gateway.url("/api")).await;
    assert_eq!(legacy.status, 200);
    assert_eq!(
        legacy.json(),
        json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": gateway.addr.to_string()},
        ]})
    );

    let unknown_group = get(&client, &gateway.url("/apis/nope.example.io")).await;
    assert_eq!(
        (unknown_group.status, unknown_group.body.as_str()),
        (404, NOT_FOUND_BODY)
    );
    let post = send(client.post(gateway.url("/apis")).body("{}")).await;
    post.assert_status(405, "MethodNotAllowed");
    assert_eq!(upstream.hits(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_api_roots_discovery_lists_only_the_gateways_groups() {
    let gateway = TestGateway::start(&plaintext("[[servers]]\nname = \"only\"\n")).await;
    let client = http_client();
    let list = get(&client, &gateway.url("/apis")).await;
    let names: Vec<String> = list.json()["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .filter_map(|group| group["name"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(names, ["authentication.k8s.io", "authorization.k8s.io"]);
    let legacy = get(&client, &gateway.url("/api")).await;
    assert_eq!(legacy.json()["versions"], json!([]));
    let missing = get(&client, &gateway.url("/apis/g.example.io/v1")).await;
    assert_eq!(
        (missing.status, missing.body.as_str()),
        (404, NOT_FOUND_BODY)
    );
}
