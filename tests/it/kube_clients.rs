//! kubectl and the Python `kubernetes` client through the gateway to a
//! kube-like API server, as a user would run them: the gateway, over TLS
//! with token-authn and rbac-authz, routes `/api/` and the widgets API to the server (`aggregate = true`, identity
//! by request headers) and serves `/apis`, `/api` (legacy and aggregated),
//! `/openapi/v2` and `/openapi/v3` merged from what the server answers its
//! background refresh. `get`, `create -f`, `apply -f` (twice),
//! `explain`, `get -w`, `auth can-i`, `auth whoami`, `exec` (over
//! WebSocket, `v5.channel.k8s.io`) and `logs -f` (past the request
//! timeout) work, and so do the
//! Python client's `VersionApi`, `CoreV1Api` and `CustomObjectsApi` calls;
//! the OpenAPI documents answer with kube-openapi's caching headers and are
//! authorized as non-resource URLs; v2 is served as gnostic's protobuf too
//! (decoded here, and read by `kubectl explain --output
//! plaintext-openapiv2`), and a v2 document gnostic refuses as JSON only;
//! discovery merges the groups of two aggregated servers, one reached by a
//! prefix route, and one that never answers holds back no other's.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::support::*;

fn rbac() -> Value {
    json!({
        "roles": [
            {"name": "editor", "rules": [
                {"verbs": ["*"], "apiGroups": [""], "resources": ["configmaps"]},
                {"verbs": ["*"], "apiGroups": ["demo.example.io"], "resources": ["widgets"]},
                {"verbs": ["get"], "apiGroups": [""], "resources": ["pods", "pods/log", "pods/exec"]},
            ]},
            {"name": "basic-user", "rules": [
                {"verbs": ["create"], "apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]},
                {"verbs": ["create"], "apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"]},
                {"verbs": ["get"], "nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/version", "/version/"]},
            ]},
            {"name": "openapi-reader", "rules": [
                {"verbs": ["get"], "nonResourceURLs": ["/openapi", "/openapi/*"]},
            ]},
        ],
        "bindings": [
            {"role": "editor", "namespace": "default", "users": ["alice"]},
            {"role": "basic-user", "groups": ["system:authenticated"]},
            {"role": "openapi-reader", "groups": ["dev"]},
        ],
    })
}

fn manifest(kube: &str) -> String {
    manifest_with(kube, "")
}

/// [`manifest`] with `limits`, the `[limits]` table's keys.
fn manifest_with(kube: &str, limits: &str) -> String {
    format!(
        r#"[listen]
address = "127.0.0.1:0"

[listen.tls]
cert = "server.crt"
key = "server.key"

[limits]
{limits}
{}{}
[[servers]]
name = "gw"

[[servers.routes]]
prefix = "/api/"
upstream = {{ url = "{kube}", ca = "ca.crt", identity = "request-header" }}
aggregate = true

[[servers.routes]]
api = "/apis/demo.example.io/v1"
upstream = {{ url = "{kube}", ca = "ca.crt", identity = "request-header" }}
aggregate = true
"#,
        tokens(),
        rbac_with(rbac()),
    )
}

struct Setup {
    _dir: tempfile::TempDir,
    dir: std::path::PathBuf,
    kube: KubeApi,
    gateway: GatewayProcess,
    ca_pem: String,
    alice: Kubectl,
    bob: Kubectl,
}

async fn setup() -> Setup {
    setup_with("").await
}

/// [`setup`] with `limits`, the `[limits]` table's keys.
async fn setup_with(limits: &str) -> Setup {
    build_filters();
    let dir = new_dir();
    let ca = write_server_pki(dir.path());
    let kube = KubeApi::start(&ca.server_cert()).await;
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, manifest_with(&kube.url(), limits)).expect("write the manifest");
    let gateway = GatewayProcess::spawn(&path);
    let server = format!("https://localhost:{}", gateway.addr.port());
    let ca_file = dir.path().join("ca.crt");
    let alice = Kubectl::new(dir.path(), "alice", &server, &ca_file, "alice-token");
    let bob = Kubectl::new(dir.path(), "bob", &server, &ca_file, "bob-token");
    // The first request waits for the aggregator's first refresh: the
    // server's OpenAPI is listed at once.
    let root = alice.ok(&["get", "--raw", "/openapi/v3"]).await;
    assert!(
        root.contains("\"api/v1\"") && root.contains("\"apis/demo.example.io/v1\""),
        "{root}"
    );
    Setup {
        dir: dir.path().to_owned(),
        _dir: dir,
        kube,
        gateway,
        ca_pem: ca.cert_pem.clone(),
        alice,
        bob,
    }
}

impl Setup {
    fn write(&self, name: &str, text: &str) -> String {
        let path = self.dir.join(name);
        std::fs::write(&path, text).expect("write a manifest for kubectl");
        path.to_str().expect("UTF-8").to_owned()
    }
}

/// What client-go's `OpenAPISchema()` asks `/openapi/v2` for.
const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

/// The groups `/apis` lists in these tests: the server's, then the
/// gateway's own (the self-subject reviews').
const SERVED_GROUPS: [&str; 3] = [
    "demo.example.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
];

/// The group names of an `APIGroupList`, in order.
fn legacy_group_names(list: &Value) -> Vec<&str> {
    list["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .filter_map(|group| group["name"].as_str())
        .collect()
}

/// The group names of an `APIGroupDiscoveryList`, in order.
fn group_names(list: &Value) -> Vec<&str> {
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|item| item["metadata"]["name"].as_str())
        .collect()
}

fn config_map(name: &str, data: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n{data}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_create_apply_explain_and_auth_work_through_the_gateway() {
    let setup = setup().await;
    let alice = &setup.alice;
    setup
        .kube
        .create_config_map("default", "seeded", json!({"k": "v"}));

    let listed = alice.ok(&["get", "configmaps", "-o", "name"]).await;
    assert_eq!(listed.trim(), "configmap/seeded");
    let by_short_name = alice.ok(&["get", "cm", "seeded", "-o", "json"]).await;
    let seeded: Value = serde_json::from_str(&by_short_name).expect("JSON");
    assert_eq!(seeded["data"], json!({"k": "v"}));

    let created = setup.write("created.yaml", &config_map("created", "  a: \"1\"\n"));
    let out = alice.ok(&["create", "-f", &created]).await;
    assert_eq!(out.trim(), "configmap/created created");
    let stored = setup
        .kube
        .object("configmaps", "default", "created")
        .expect("created at the server");
    assert_eq!(stored["data"], json!({"a": "1"}));

    let applied = setup.write("applied.yaml", &config_map("applied", "  x: \"1\"\n"));
    let out = alice.ok(&["apply", "-f", &applied]).await;
    assert_eq!(out.trim(), "configmap/applied created");
    let changed = setup.write(
        "applied.yaml",
        &config_map("applied", "  x: \"2\"\n  z: \"3\"\n"),
    );
    let out = alice.ok(&["apply", "-f", &changed]).await;
    assert_eq!(out.trim(), "configmap/applied configured");
    let stored = setup
        .kube
        .object("configmaps", "default", "applied")
        .expect("applied at the server");
    assert_eq!(stored["data"], json!({"x": "2", "z": "3"}));
    let last_applied =
        stored["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .expect("kubectl's last-applied annotation");
    assert!(last_applied.contains("\"z\":\"3\""), "{last_applied}");

    let explained = alice.ok(&["explain", "configmap.data"]).await;
    assert!(explained.contains("KIND:       ConfigMap"), "{explained}");
    assert!(
        explained.contains("FIELD: data <map[string]string>"),
        "{explained}"
    );
    assert!(
        explained.contains("Data contains the configuration data."),
        "{explained}"
    );

    assert_eq!(
        alice
            .ok(&["auth", "can-i", "create", "configmaps"])
            .await
            .trim(),
        "yes"
    );
    let (allowed, out, _) = setup
        .bob
        .run(&["auth", "can-i", "create", "configmaps"])
        .await;
    assert!(!allowed && out.starts_with("no - RBAC"), "{out}");
    let whoami: Value =
        serde_json::from_str(&alice.ok(&["auth", "whoami", "-o", "json"]).await).expect("JSON");
    assert_eq!(whoami["status"]["userInfo"]["username"], "alice");
    // bob may not read configmaps: the gateway refuses before the server.
    let (ok, _, err) = setup.bob.run(&["get", "configmaps"]).await;
    assert!(!ok && err.contains("Forbidden"), "{err}");

    // The server was told who asked: alice, and the aggregator refreshing;
    // bob's read of configmaps never reached it.
    let requests = setup.kube.requests();
    let asked = |line: &str| requests.iter().any(|request| request == line);
    assert!(
        asked("alice POST /api/v1/namespaces/default/configmaps"),
        "{requests:?}"
    );
    assert!(
        asked("alice PATCH /api/v1/namespaces/default/configmaps/applied"),
        "{requests:?}"
    );
    assert!(asked("system:aggregator GET /openapi/v3"), "{requests:?}");
    assert!(
        !requests
            .iter()
            .any(|request| request.starts_with("bob ") && request.contains("configmaps")),
        "{requests:?}"
    );
    drop(setup.gateway);
}

/// `/openapi/v2` as client-go's `OpenAPISchema()` asks for it: gnostic's
/// `Document`, decoded here with prost, holds the JSON's paths and
/// definitions in the JSON's order, its schemas' fields, `$ref`s and
/// vendor extensions; tagged with the JSON's ETag (kube-openapi re-uses
/// it), `304` on `If-None-Match`; a media type it does not serve is `406`.
async fn v2_protobuf_answers_as_kube_openapi_does(
    authorized: &dyn Fn(&str) -> reqwest::RequestBuilder,
    json: &Value,
    json_etag: &str,
) {
    use gnostic::{parameter, parameters_item};
    use prost::Message;

    let asked = || authorized("/openapi/v2").header("accept", V2_PROTOBUF);
    let (status, headers, body) = send_for_bytes(asked()).await;
    assert_eq!(status, 200);
    let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    assert_eq!(
        header("content-type"),
        Some("application/com.github.proto-openapi.spec.v2.v1.0+protobuf")
    );
    assert_eq!(header("etag"), Some(json_etag));
    assert_eq!(header("vary"), Some("Accept"));
    let document = gnostic::Document::decode(body).expect("gnostic's Document");
    assert_eq!(document.swagger, "2.0");

    let paths = document.paths.expect("paths");
    let names: Vec<&str> = paths.path.iter().map(|named| named.name.as_str()).collect();
    let json_paths: Vec<&str> = json["paths"]
        .as_object()
        .expect("paths")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(names, json_paths);
    let definitions = document.definitions.expect("definitions");
    let names: Vec<&str> = definitions
        .additional_properties
        .iter()
        .map(|named| named.name.as_str())
        .collect();
    let json_definitions: Vec<&str> = json["definitions"]
        .as_object()
        .expect("definitions")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(names, json_definitions);

    let widget = definitions
        .additional_properties
        .iter()
        .find(|named| named.name == "io.example.demo.v1.Widget")
        .and_then(|named| named.value.as_ref())
        .expect("the Widget schema");
    assert_eq!(
        widget.description,
        json["definitions"]["io.example.demo.v1.Widget"]["description"]
    );
    let property = |schema: &gnostic::Schema, name: &str| {
        schema
            .properties
            .as_ref()
            .and_then(|properties| {
                properties
                    .additional_properties
                    .iter()
                    .find(|named| named.name == name)
            })
            .and_then(|named| named.value.clone())
            .unwrap_or_else(|| panic!("property {name}"))
    };
    let spec = property(widget, "spec");
    assert_eq!(property(&spec, "size").format, "int64");
    assert_eq!(
        property(widget, "metadata").r#ref,
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    let gvk = &widget.vendor_extension[0];
    assert_eq!(gvk.name, "x-kubernetes-group-version-kind");
    let gvk_value: Value =
        serde_json::from_str(&gvk.value.as_ref().expect("a value").yaml).expect("its text");
    assert_eq!(
        gvk_value,
        json["definitions"]["io.example.demo.v1.Widget"]["x-kubernetes-group-version-kind"]
    );
    let widgets = paths
        .path
        .iter()
        .find(|named| named.name == "/apis/demo.example.io/v1/namespaces/{namespace}/widgets")
        .and_then(|named| named.value.as_ref())
        .expect("the widgets path");
    let post = widgets.post.as_ref().expect("post");
    assert!(matches!(
        post.parameters[0].oneof.as_ref(),
        Some(parameters_item::Oneof::Parameter(gnostic::Parameter {
            oneof: Some(parameter::Oneof::BodyParameter(body)),
        })) if body.schema.as_ref().is_some_and(|schema| schema.r#ref == "#/definitions/io.example.demo.v1.Widget")
    ));

    let (status, _, body) = send_for_bytes(asked().header("if-none-match", json_etag)).await;
    assert_eq!((status, body.len()), (304, 0));
    let refused = send(authorized("/openapi/v2").header("accept", "text/plain")).await;
    refused.assert_status(406, "NotAcceptable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_explain_reads_openapi_v2_as_protobuf_through_the_gateway() {
    let setup = setup().await;
    // -v=7 logs each request's headers: the Accept kubectl sends is the
    // protobuf's.
    let (ok, explained, log) = setup
        .alice
        .run(&[
            "explain",
            "widgets.spec",
            "--output",
            "plaintext-openapiv2",
            "-v=7",
        ])
        .await;
    assert!(ok, "{log}\n{explained}");
    assert!(explained.contains("KIND:     Widget"), "{explained}");
    assert!(
        explained.contains("What the widget should be."),
        "{explained}"
    );
    assert!(explained.contains("color\t<string>"), "{explained}");
    assert!(explained.contains("The widget's size."), "{explained}");
    let asked = format!(
        "GET https://localhost:{}/openapi/v2",
        setup.gateway.addr.port()
    );
    let request = log
        .split_once(&asked)
        .map(|(_, after)| after)
        .unwrap_or_else(|| panic!("{log}"));
    assert!(
        request.contains("Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf"),
        "{log}"
    );
    assert!(request.contains("Response Status: 200 OK"), "{log}");
    // A map (additionalProperties a schema) read from the protobuf.
    let data = setup
        .alice
        .ok(&[
            "explain",
            "configmap.data",
            "--output",
            "plaintext-openapiv2",
        ])
        .await;
    assert!(data.contains("KIND:     ConfigMap"), "{data}");
    assert!(data.contains("<map[string]string>"), "{data}");
    assert!(
        data.contains("Data contains the configuration data."),
        "{data}"
    );
    // The gateway answered from its merged document: the server was asked
    // for v2 only by the aggregator, and only for JSON.
    let requests = setup.kube.requests();
    assert!(
        requests
            .iter()
            .all(|request| !request.ends_with("GET /openapi/v2")
                || request.starts_with("system:aggregator ")),
        "{requests:?}"
    );
    drop(setup.gateway);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_watch_sees_a_change_made_while_it_watches() {
    let setup = setup().await;
    setup.kube.create_config_map("default", "before", json!({}));
    let mut watch = setup
        .alice
        .spawn(&["get", "configmaps", "--watch", "-o", "name"]);
    let stdout = watch.stdout.take().expect("kubectl's stdout");
    let mut lines = BufReader::new(stdout).lines();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut next_line = async || {
        let left = deadline.saturating_duration_since(Instant::now());
        tokio::time::timeout(left, lines.next_line())
            .await
            .expect("a line from kubectl get --watch in time")
            .expect("kubectl's stdout")
            .expect("kubectl get --watch still running")
    };
    assert_eq!(next_line().await, "configmap/before");
    // The watch request is open once kubectl has listed; an event arrives
    // only if the change comes after it subscribed, so change until seen.
    let mut round = 0;
    loop {
        round += 1;
        let name = format!("during-{round}");
        setup.kube.create_config_map("default", &name, json!({}));
        let seen = tokio::time::timeout(Duration::from_secs(2), next_line()).await;
        match seen {
            Ok(line) => {
                assert!(line.starts_with("configmap/during-"), "{line}");
                break;
            }
            Err(_) => assert!(Instant::now() < deadline, "no watch event arrived"),
        }
    }
    drop(watch);
}

/// kubectl's exec and followed log through the gateway, as against kube.
/// kubectl 1.32 execs over WebSocket, offering `v5.channel.k8s.io` first
/// (SPDY only when the upgrade fails): the pod's choice of protocol comes
/// back in the 101, and its stdout and exit Status reach kubectl, which
/// prints the one and exits 0 on the other. `logs -f`, long-running in
/// kube (`BasicLongRunningRequestCheck`'s `log`,
/// `staging/src/k8s.io/apiserver/pkg/server/filters/longrunning.go`), shows
/// each line as the pod writes it, for longer than `request_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_exec_and_logs_follow_work_through_the_gateway() {
    const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
    let setup = setup_with("request_timeout = \"2s\"").await;
    let alice = &setup.alice;
    let out = alice
        .ok(&[
            "exec", "p", "--", "echo", "hello", "through", "the", "gateway",
        ])
        .await;
    assert_eq!(out, "hello through the gateway\n");
    let requests = setup.kube.requests();
    let exec = |method: &str| {
        requests.iter().any(|request| {
            request.starts_with(&format!(
                "alice {method} /api/v1/namespaces/default/pods/p/exec"
            ))
        })
    };
    assert!(
        exec("GET") && !exec("POST"),
        "over WebSocket, no SPDY fallback: {requests:?}"
    );

    let mut follow = alice.spawn(&["logs", "-f", "p"]);
    let stdout = follow.stdout.take().expect("kubectl's stdout");
    let mut lines = BufReader::new(stdout).lines();
    let started = Instant::now();
    let mut expected = 0;
    while started.elapsed() < REQUEST_TIMEOUT * 2 {
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .expect("a log line within 10 s")
            .expect("kubectl's stdout")
            .unwrap_or_else(|| panic!("kubectl logs -f ended after {expected} lines"));
        expected += 1;
        assert_eq!(line, format!("line {expected}"));
    }
    drop(follow);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_and_aggregated_discovery_answer_as_kube_does() {
    let setup = setup().await;
    let client = tls_client_no_redirects(&setup.ca_pem);
    let base = format!("https://localhost:{}", setup.gateway.addr.port());
    let authorized = |path: &str| {
        client
            .get(format!("{base}{path}"))
            .bearer_auth("alice-token")
    };

    let root = send(authorized("/openapi/v3")).await;
    assert_eq!(root.status, 200);
    let url = root.json()["paths"]["api/v1"]["serverRelativeURL"]
        .as_str()
        .expect("a URL")
        .to_owned();
    let hash = url.split_once("?hash=").expect("a hash").1.to_owned();
    let document = send(authorized(&url)).await;
    assert_eq!(document.status, 200);
    assert_eq!(document.header("cache-control"), Some("public, immutable"));
    let etag = document.header("etag").expect("an ETag").to_owned();
    assert_eq!(etag, format!("\"{hash}\""));
    assert!(document.json()["components"]["schemas"]["io.k8s.api.core.v1.ConfigMap"].is_object());
    let again = send(authorized("/openapi/v3/api/v1").header("if-none-match", &etag)).await;
    assert_eq!((again.status, again.body.as_str()), (304, ""));
    let group = send(authorized("/openapi/v3/apis/demo.example.io/v1")).await;
    assert_eq!(group.status, 200);
    assert!(group.json()["components"]["schemas"]["io.example.demo.v1.Widget"].is_object());
    assert!(
        group.json()["components"]["schemas"]["io.k8s.api.core.v1.ConfigMap"].is_null(),
        "a group version's document is its own"
    );
    let stale = send(authorized("/openapi/v3/api/v1?hash=0123")).await;
    assert_eq!(stale.status, 301);
    assert_eq!(stale.header("location"), Some(url.as_str()));

    let v2 = send(authorized("/openapi/v2")).await;
    assert_eq!(v2.status, 200);
    let v2_json = v2.json();
    assert!(v2_json["definitions"]["io.example.demo.v1.Widget"].is_object());
    assert!(v2_json["paths"]["/api/v1/namespaces/{namespace}/configmaps"].is_object());
    let v2_etag = v2.header("etag").expect("an ETag").to_owned();
    v2_protobuf_answers_as_kube_openapi_does(&authorized, &v2_json, &v2_etag).await;
    // The documents go through the chain like any request: authenticated,
    // then authorized as non-resource URLs (bob, outside group dev, may
    // not get them).
    let anonymous = get(&client, &format!("{base}/openapi/v2")).await;
    anonymous.assert_status(401, "Unauthorized");
    for path in ["/openapi/v2", "/openapi/v3", "/openapi/v3/api/v1"] {
        let refused = send(client.get(format!("{base}{path}")).bearer_auth("bob-token")).await;
        let status = refused.assert_status(403, "Forbidden");
        let message = status["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with(&format!(
                "forbidden: User \"bob\" cannot get path \"{path}\""
            )),
            "{status}"
        );
    }

    let aggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json;q=0.9";
    let groups = send(authorized("/apis").header("accept", aggregated)).await;
    assert_eq!(
        groups.header("content-type"),
        Some("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
    );
    // Tagged as kube tags its aggregated discovery: the quoted SHA-512 of
    // the body, and a 304 for a client that has it.
    let etag = groups.header("etag").expect("an ETag").to_owned();
    let hash = hex::encode_upper(<sha2::Sha512 as sha2::Digest>::digest(
        groups.body.as_bytes(),
    ));
    assert_eq!(etag, format!("\"{hash}\""));
    assert_eq!(groups.header("cache-control"), Some("public"));
    let cached = send(
        authorized("/apis")
            .header("accept", aggregated)
            .header("if-none-match", &etag),
    )
    .await;
    assert_eq!((cached.status, cached.body.as_str()), (304, ""));
    assert_eq!(cached.header("etag"), Some(etag.as_str()));
    assert_eq!(group_names(&groups.json()), SERVED_GROUPS);
    let core = send(authorized("/api").header("accept", aggregated)).await;
    assert_eq!(
        core.json()["items"][0]["versions"][0]["resources"][0]["resource"],
        "configmaps"
    );
    let beta = send(authorized("/api").header(
        "accept",
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList",
    ))
    .await;
    assert_eq!(beta.json()["apiVersion"], "apidiscovery.k8s.io/v2beta1");
    // Each version is a document of its own: v2's tag is not v2beta1's.
    assert_ne!(beta.header("etag"), core.header("etag"));
    let legacy = send(authorized("/apis")).await;
    assert_eq!(legacy.json()["kind"], "APIGroupList");
    assert_eq!(legacy.header("etag"), None);
    assert_eq!(legacy.json()["groups"][0]["name"], "demo.example.io");
}

/// The Python client's calls a new user makes first, through the gateway.
const PYTHON_CLIENT: &str = r#"
import json, sys
from kubernetes import client

configuration = client.Configuration()
configuration.host = sys.argv[1]
configuration.ssl_ca_cert = sys.argv[2]
configuration.api_key = {"authorization": sys.argv[3]}
configuration.api_key_prefix = {"authorization": "Bearer"}
api = client.ApiClient(configuration)

version = client.VersionApi(api).get_code()
config_maps = client.CoreV1Api(api).list_namespaced_config_map("default")
custom = client.CustomObjectsApi(api)
widget = {"apiVersion": "demo.example.io/v1", "kind": "Widget",
          "metadata": {"name": "from-python"}, "spec": {"size": 3}}
created = custom.create_namespaced_custom_object("demo.example.io", "v1", "default", "widgets", widget)
widgets = custom.list_namespaced_custom_object("demo.example.io", "v1", "default", "widgets")
print(json.dumps({
    "gitVersion": version.git_version,
    "configMaps": [item.metadata.name for item in config_maps.items],
    "created": created["metadata"]["name"],
    "widgets": [item["spec"]["size"] for item in widgets["items"]],
}))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_reads_the_version_config_maps_and_custom_objects() {
    let python = tokio::task::spawn_blocking(python_kubernetes)
        .await
        .expect("the Python client installed");
    let setup = setup().await;
    setup
        .kube
        .create_config_map("default", "for-python", json!({"k": "v"}));
    let script = setup.write("client.py", PYTHON_CLIENT);
    let server = format!("https://localhost:{}", setup.gateway.addr.port());
    let ca = setup.dir.join("ca.crt");
    let (ok, out, err) = run_client(
        python.to_str().expect("UTF-8"),
        &[&script, &server, ca.to_str().expect("UTF-8"), "alice-token"],
        &setup.alice.home,
    )
    .await;
    assert!(ok, "the Python client failed: {err}");
    let answer: Value = serde_json::from_str(out.trim()).expect("the script's JSON");
    assert_eq!(
        answer,
        json!({
            "gitVersion": format!("v{}", env!("CARGO_PKG_VERSION")),
            "configMaps": ["for-python"],
            "created": "from-python",
            "widgets": [3],
        })
    );
    let stored = setup
        .kube
        .object("widgets", "default", "from-python")
        .expect("the widget at the server");
    assert_eq!(stored["spec"]["size"], 3);
}

/// kube's aggregated discovery lists the groups of every APIService, not
/// only those a route declares: with the core API at one server and
/// `prefix = "/apis/demo.example.io/"` (a prefix, no `api` root declared)
/// at another, `/apis` lists
/// the second's `demo.example.io` and `/api` the first's ConfigMaps, each
/// kept to the paths routed to its server (the first's own widgets, and the
/// second's ConfigMaps, are not listed), and kubectl finds both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_merges_the_groups_of_every_aggregated_upstream() {
    build_filters();
    let dir = new_dir();
    let ca = write_server_pki(dir.path());
    let core = KubeApi::start(&ca.server_cert()).await;
    let groups = KubeApi::start(&ca.server_cert()).await;
    let manifest = manifest(&core.url())
        .split("\n[[servers.routes]]\napi = ")
        .next()
        .expect("the manifest's first part")
        .to_owned()
        + &format!(
            "\n[[servers.routes]]\nprefix = \"/apis/demo.example.io/\"\nupstream = {{ url = \"{}\", ca = \"ca.crt\", identity = \"request-header\" }}\naggregate = true\n",
            groups.url()
        );
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, &manifest).expect("write the manifest");
    let gateway = GatewayProcess::spawn(&path);
    let server = format!("https://localhost:{}", gateway.addr.port());
    let ca_file = dir.path().join("ca.crt");
    let alice = Kubectl::new(dir.path(), "alice", &server, &ca_file, "alice-token");
    let client = tls_client(&ca.cert_pem);
    let ask = |path: &str, accept: &str| {
        client
            .get(format!("{server}{path}"))
            .bearer_auth("alice-token")
            .header("accept", accept.to_owned())
    };
    let aggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
    let apis = send(ask("/apis", aggregated)).await;
    assert_eq!(group_names(&apis.json()), SERVED_GROUPS);
    let core_resources = send(ask("/api", aggregated)).await.json();
    let resources: Vec<&str> = core_resources["items"][0]["versions"][0]["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter_map(|resource| resource["resource"].as_str())
        .collect();
    assert_eq!(resources, ["configmaps", "pods"]);

    let listed = alice
        .ok(&["api-resources", "--no-headers", "-o", "name"])
        .await;
    let listed: Vec<&str> = listed.lines().collect();
    assert!(listed.contains(&"configmaps"), "{listed:?}");
    assert!(listed.contains(&"widgets.demo.example.io"), "{listed:?}");
    assert_eq!(alice.ok(&["get", "widgets", "-o", "name"]).await.trim(), "");
    let widget_requests = |server: &KubeApi| {
        server
            .requests()
            .into_iter()
            .filter(|request| request.starts_with("alice ") && request.contains("widgets"))
            .count()
    };
    assert_eq!(widget_requests(&core), 0, "{:?}", core.requests());
    assert!(widget_requests(&groups) > 0, "{:?}", groups.requests());
}

/// kube's aggregator asks each APIService on its own (a worker per service,
/// `staging/src/k8s.io/kube-aggregator/pkg/apiserver/handler_discovery.go`),
/// so one that never answers holds back only its own groups: the first
/// `/apis` after a start lists the groups of the upstream that answers,
/// although the other takes every request and never writes a byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_never_answers_holds_back_only_its_own_groups() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the silent upstream");
    let silent_addr = silent.local_addr().expect("its address");
    let _silent = spawn_server(silent, None, |_request| std::future::pending());
    let (_answering, answering_addr) = upstream_serving("/apis", || {
        let group = json!({"name": "answering.example.io",
            "versions": [{"groupVersion": "answering.example.io/v1", "version": "v1"}]});
        json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [group]})
    })
    .await;
    let route = |group: &str, addr: std::net::SocketAddr| {
        format!(
            "\n[[servers.routes]]\nprefix = \"/apis/{group}/\"\nupstream = \"http://{addr}\"\naggregate = true\n"
        )
    };
    let gateway = TestGateway::start(&plaintext(&format!(
        "[[servers]]\nname = \"gw\"\n{}{}",
        route("silent.example.io", silent_addr),
        route("answering.example.io", answering_addr),
    )))
    .await;
    let apis = send(http_client().get(gateway.url("/apis"))).await;
    assert_eq!(apis.status, 200, "{}", apis.body);
    let list = apis.json();
    let names = legacy_group_names(&list);
    assert!(names.contains(&"answering.example.io"), "{names:?}");
    assert!(!names.contains(&"silent.example.io"), "{names:?}");
}

/// An upstream that serves only `path`, `document()` at each request (404
/// elsewhere), and its address.
async fn upstream_serving(
    path: &'static str,
    document: impl Fn() -> Value + Send + Sync + 'static,
) -> (tokio::task::JoinHandle<()>, std::net::SocketAddr) {
    upstream_of_documents(move |asked| (asked == path).then(&document)).await
}

/// An upstream that serves `documents(path)` as JSON, 404 where it gives
/// none, and its address.
async fn upstream_of_documents(
    documents: impl Fn(&str) -> Option<Value> + Send + Sync + 'static,
) -> (tokio::task::JoinHandle<()>, std::net::SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the upstream");
    let addr = listener.local_addr().expect("its address");
    let documents = std::sync::Arc::new(documents);
    let server = spawn_server(listener, None, move |request| {
        let answer = match documents(request.uri().path()) {
            Some(document) => http::Response::new(full(document.to_string())),
            None => http::Response::builder()
                .status(404)
                .body(full(""))
                .expect("a 404"),
        };
        async move { Ok::<_, std::convert::Infallible>(answer) }
    });
    (server, addr)
}

/// kube's aggregator lists the APIServices it proxies to, each for the
/// group version it is sent
/// (`staging/src/k8s.io/kube-aggregator/pkg/apiserver/handler_apis.go`,
/// `handler_discovery.go`); the gateway lists what the delegation chain
/// sends each upstream. Upstream `a` takes all of `/apis/` (a catch-all
/// prefix of the first server) and lists `a.example.io` and
/// `x.example.io`, whose `api` route of the same server goes to `b`; `b`
/// also has `/apis/y.example.io/v1` as a route of the second server,
/// which never gets it (the first server's prefix takes it). `/apis` lists
/// `a.example.io` (from `a`) and `x.example.io` (`b`'s route), not
/// `y.example.io`; OpenAPI v3 and v2 hold `a`'s documents for `a.example.io`
/// and `b`'s for `x.example.io`, nothing of `y.example.io`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_and_openapi_list_what_the_chain_sends_each_upstream() {
    fn documents(
        name: &'static str,
        groups: &'static [&'static str],
    ) -> impl Fn(&str) -> Option<Value> {
        move |path| {
            let group_list = json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups
                .iter()
                .map(|group| json!({"name": group, "versions": [{"groupVersion": format!("{group}/v1"), "version": "v1"}]}))
                .collect::<Vec<_>>()});
            let v3_root = json!({"paths": groups
                .iter()
                .map(|group| (format!("apis/{group}/v1"), json!({"serverRelativeURL": format!("/openapi/v3/apis/{group}/v1?hash=1")})))
                .collect::<serde_json::Map<_, _>>()});
            let v2 = json!({"swagger": "2.0", "info": {"title": name, "version": "v1"}, "paths": groups
                .iter()
                .map(|group| (format!("/apis/{group}/v1/{name}s"), json!({})))
                .collect::<serde_json::Map<_, _>>()});
            match path {
                "/apis" => Some(group_list),
                "/openapi/v3" => Some(v3_root),
                "/openapi/v2" => Some(v2),
                _ => {
                    if let Some(group) = path.strip_prefix("/openapi/v3/apis/") {
                        return Some(
                            json!({"openapi": "3.0.0", "info": {"title": format!("{name}: {group}"), "version": "v1"}, "paths": {}}),
                        );
                    }
                    let group = path.strip_prefix("/apis/")?.strip_suffix("/v1")?;
                    groups.contains(&group).then_some(())?;
                    Some(
                        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{group}/v1"),
                        "resources": [{"name": format!("{name}s"), "singularName": name, "namespaced": true, "kind": name, "verbs": ["get", "list"]}]}),
                    )
                }
            }
        }
    }
    let (_a, a) = upstream_of_documents(documents("a", &["a.example.io", "x.example.io"])).await;
    let (_b, b) = upstream_of_documents(documents("b", &["x.example.io", "y.example.io"])).await;
    let route = |kind: &str, path: &str, addr: std::net::SocketAddr| {
        format!(
            "\n[[servers.routes]]\n{kind} = \"{path}\"\nupstream = \"http://{addr}\"\naggregate = true\n"
        )
    };
    let gateway = TestGateway::start(&plaintext(&format!(
        "[[servers]]\nname = \"one\"\n{}{}\n[[servers]]\nname = \"two\"\n{}",
        route("prefix", "/apis/", a),
        route("api", "/apis/x.example.io/v1", b),
        route("api", "/apis/y.example.io/v1", b),
    )))
    .await;
    let client = http_client();

    let apis = send(client.get(gateway.url("/apis"))).await.json();
    assert_eq!(legacy_group_names(&apis), ["a.example.io", "x.example.io"]);
    let x = send(client.get(gateway.url("/apis/x.example.io/v1"))).await;
    assert_eq!(x.json()["resources"][0]["name"], "bs", "{}", x.body);
    let y = send(client.get(gateway.url("/apis/y.example.io/v1"))).await;
    assert_eq!(y.status, 404, "a takes it: {}", y.body);

    let v3 = send(client.get(gateway.url("/openapi/v3"))).await.json();
    let listed: Vec<&String> = v3["paths"].as_object().expect("paths").keys().collect();
    assert_eq!(listed, ["apis/a.example.io/v1", "apis/x.example.io/v1"]);
    for (group, served_by) in [("a.example.io", "a"), ("x.example.io", "b")] {
        let url = v3["paths"][format!("apis/{group}/v1")]["serverRelativeURL"]
            .as_str()
            .expect("a URL");
        let document = send(client.get(gateway.url(url))).await.json();
        assert_eq!(
            document["info"]["title"],
            format!("{served_by}: {group}/v1")
        );
    }
    let v2 = send(client.get(gateway.url("/openapi/v2"))).await.json();
    let paths: Vec<&String> = v2["paths"].as_object().expect("paths").keys().collect();
    assert_eq!(
        paths,
        ["/apis/a.example.io/v1/as", "/apis/x.example.io/v1/bs"]
    );
}

/// An upstream's `/openapi/v3` index is bounded as each document is: of
/// an index that lists 1,005 group versions, the gateway fetches and serves
/// the first 1,000 (`MAX_V3_GROUP_VERSIONS`, docs/deploy.md) and counts the
/// 5 it dropped, which the status page shows on the upstream's route; a
/// reload that takes the upstream out of the chain takes its series out
/// of /metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openapi_v3_index_is_taken_up_to_its_bound() {
    const LISTED: usize = 1005;
    const TAKEN: usize = 1000;
    let fetched = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&fetched);
    let (_server, addr) = upstream_of_documents(move |path| {
        if path == "/openapi/v3" {
            let paths: serde_json::Map<String, Value> = (0..LISTED)
                .map(|n| {
                    let url = format!("/openapi/v3/apis/g{n:04}.example.io/v1?hash=1");
                    (
                        format!("apis/g{n:04}.example.io/v1"),
                        json!({"serverRelativeURL": url}),
                    )
                })
                .collect();
            return Some(json!({"paths": paths}));
        }
        let group = path.strip_prefix("/openapi/v3/apis/")?;
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Some(json!({"openapi": "3.0.0", "info": {"title": group, "version": "v1"}, "paths": {}}))
    })
    .await;
    // A process of its own: the status page and the metrics are the
    // process's.
    let dir = new_dir();
    let path = dir.path().join("gateway.toml");
    let manifest = plaintext(&format!(
        "[[servers]]\nname = \"gw\"\n\n[[servers.routes]]\nprefix = \"/apis/\"\nupstream = \"http://{addr}\"\naggregate = true\n"
    ));
    std::fs::write(&path, manifest).expect("write the manifest");
    let gateway = GatewayProcess::spawn(&path);
    let url = |path: &str| format!("http://{}{path}", gateway.addr);
    let client = http_client();
    let deadline = Instant::now() + Duration::from_secs(60);
    let listed = loop {
        let root = send(client.get(url("/openapi/v3"))).await;
        if root.status == 200 {
            break root.json()["paths"]
                .as_object()
                .expect("paths")
                .keys()
                .cloned()
                .collect::<Vec<_>>();
        }
        assert!(Instant::now() < deadline, "no v3 index: {}", root.body);
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let expected: Vec<String> = (0..TAKEN)
        .map(|n| format!("apis/g{n:04}.example.io/v1"))
        .collect();
    assert_eq!(
        (listed.len(), listed.last()),
        (TAKEN, expected.last()),
        "the first {TAKEN} listed"
    );
    assert!(listed == expected, "the first {TAKEN} listed, in order");
    assert_eq!(fetched.load(std::sync::atomic::Ordering::SeqCst), TAKEN);
    let status = send(client.get(url("/debug/status"))).await.json();
    let route = &status["servers"][0]["routes"][0];
    assert_eq!(route["route"], "/apis/", "{status}");
    assert_eq!(route["openapi_v3_dropped"], 5.0, "{status}");
    let log = gateway.log.lock().expect("the log").join("\n");
    assert!(
        log.contains("lists more group versions than the gateway takes")
            && log.contains(&addr.to_string()),
        "{log}"
    );

    // A reload that takes the upstream out of the chain takes its series
    // out of /metrics; it stayed, naming an upstream the gateway no longer
    // had, for the process's life.
    let names_it = |metrics: &str| {
        metrics.lines().any(|line| {
            line.starts_with("wasmgate_openapi_v3_group_versions_dropped{")
                && line.contains(&addr.to_string())
        })
    };
    assert!(
        names_it(&send(client.get(url("/metrics"))).await.body),
        "the series is there before the reload"
    );
    let replaced = dir.path().join("next.toml");
    std::fs::write(
        &replaced,
        plaintext("[[servers]]\nname = \"gw\"\n\n[[servers.routes]]\npath = \"/x\"\nstatic = { body = \"x\" }\n"),
    )
    .expect("write the next manifest");
    std::fs::rename(&replaced, &path).expect("replace the manifest");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let metrics = send(client.get(url("/metrics"))).await.body;
        let reloaded =
            metric(&metrics, "wasmgate_config_reload_total{result=\"success\"}") == Some(1.0);
        if reloaded && !names_it(&metrics) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "reloaded: {reloaded}; the series still there: {}",
            names_it(&metrics)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An upstream that serves only `/openapi/v2`, `spec()` at each request,
/// and a plaintext gateway that routes the widgets API to it with
/// `aggregate = true`.
async fn gateway_to_a_v2_upstream(
    spec: impl Fn() -> Value + Send + Sync + 'static,
) -> (tokio::task::JoinHandle<()>, TestGateway) {
    let (server, addr) = upstream_serving("/openapi/v2", spec).await;
    let gateway = TestGateway::start(&plaintext(&format!(
        "[[servers]]\nname = \"gw\"\n\n[[servers.routes]]\nprefix = \"/apis/demo.example.io/\"\nupstream = \"http://{addr}\"\naggregate = true\n"
    )))
    .await;
    (server, gateway)
}

/// kube's OpenAPI controllers download every APIService's spec again each
/// minute (`staging/src/k8s.io/kube-aggregator/pkg/controllers/openapi/controller.go`),
/// and so does the gateway: an upstream whose v2 document names the round
/// it was asked in is served as asked first, then, within a refresh
/// interval and a little, as asked again; the old `ETag` no longer gets a
/// 304.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_is_fetched_again_in_the_background_every_minute() {
    let rounds = std::sync::atomic::AtomicUsize::new(0);
    let (_server, gateway) = gateway_to_a_v2_upstream(move || {
        let round = rounds.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        json!({"swagger": "2.0", "info": {"title": "rounds", "version": "v1"},
            "paths": {format!("/apis/demo.example.io/v1/round-{round}"): {}}})
    })
    .await;
    let client = http_client();
    let paths = |answer: &Answer| -> Vec<String> {
        answer.json()["paths"]
            .as_object()
            .map(|paths| paths.keys().cloned().collect())
            .unwrap_or_default()
    };

    let first = send(client.get(gateway.url("/openapi/v2"))).await;
    assert_eq!(paths(&first), ["/apis/demo.example.io/v1/round-1"]);
    let etag = first.header("etag").expect("an ETag").to_owned();
    let revalidate = || {
        send(
            client
                .get(gateway.url("/openapi/v2"))
                .header("if-none-match", &etag),
        )
    };
    assert_eq!(revalidate().await.status, 304);

    let deadline = Instant::now() + Duration::from_secs(90);
    let refreshed = loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let answer = send(client.get(gateway.url("/openapi/v2"))).await;
        if paths(&answer) != ["/apis/demo.example.io/v1/round-1"] {
            break answer;
        }
        assert!(Instant::now() < deadline, "no refresh within 90 s");
    };
    assert_eq!(paths(&refreshed), ["/apis/demo.example.io/v1/round-2"]);
    assert_ne!(refreshed.header("etag"), Some(etag.as_str()));
    assert_eq!(revalidate().await.status, 200, "the old ETag is stale");
    // The protobuf was made again from the new document.
    let (status, headers, body) = send_for_bytes(
        client
            .get(gateway.url("/openapi/v2"))
            .header("accept", V2_PROTOBUF),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(headers.get("etag"), refreshed.headers.get("etag"));
    let document = <gnostic::Document as prost::Message>::decode(body).expect("a Document");
    let protobuf_paths: Vec<String> = document
        .paths
        .into_iter()
        .flat_map(|paths| paths.path)
        .map(|named| named.name)
        .collect();
    assert_eq!(protobuf_paths, ["/apis/demo.example.io/v1/round-2"]);
}

/// A v2 document gnostic's parser refuses (a schema with `nullable`, a
/// key of OpenAPI v3, not v2) is served as JSON, and its protobuf is a
/// `503` naming what gnostic refuses, as kube-openapi answers when
/// `ToProtoBinary` fails; nothing panics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v2_document_gnostic_refuses_is_served_as_json_only() {
    let (_server, gateway) = gateway_to_a_v2_upstream(|| {
        json!({"swagger": "2.0", "info": {"title": "v3-ish", "version": "v1"},
            "paths": {"/apis/demo.example.io/v1/widgets": {}},
            "definitions": {"io.example.demo.v1.Widget": {"type": "object", "nullable": true}}})
    })
    .await;
    let client = http_client();
    let json = send(client.get(gateway.url("/openapi/v2"))).await;
    assert_eq!(json.status, 200);
    assert_eq!(
        json.json()["definitions"]["io.example.demo.v1.Widget"]["nullable"],
        true
    );
    let protobuf = send(
        client
            .get(gateway.url("/openapi/v2"))
            .header("accept", V2_PROTOBUF),
    )
    .await;
    let status = protobuf.assert_status(503, "ServiceUnavailable");
    assert_eq!(
        status["message"],
        "the OpenAPI v2 document cannot be served as protobuf: \
         $root.definitions.io.example.demo.v1.Widget has invalid properties: nullable"
    );
}
