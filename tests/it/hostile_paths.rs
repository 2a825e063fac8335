//! The path that is judged is the path that is served: a real gateway (token
//! authentication, RBAC, jsonl-audit) in front of a real upstream that
//! reports the path a normalising server (Go's mux, nginx, Tomcat) would
//! serve, attacked with every spelling of issue 17 over HTTP/1.1 (raw
//! sockets: the bytes an attacker sends) and HTTP/2 (h2c, hyper's client,
//! which sends `:path` as given). Each case asserts what the client got,
//! what reached the upstream (never a path authorization did not judge) and
//! what the audit log recorded. A property test then sends generated paths
//! through the built chain to the real upstream: whatever is forwarded is
//! the path request info resolved.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http_body_util::{BodyExt, Empty};
use serde_json::{Value, json};
use wasmgate::body::{Request, Response};
use wasmgate::context::RequestContext;
use wasmgate::handler::{Handler, SharedHandler};

use crate::support::*;

const WIDGETS_DEFAULT: &str = "/apis/demo.example.io/v1/namespaces/default/widgets";
const WIDGETS_KUBE_SYSTEM: &str = "/apis/demo.example.io/v1/namespaces/kube-system/widgets";
const SECRETS_KUBE_SYSTEM: &str = "/api/v1/namespaces/kube-system/secrets";

/// alice administers `default` (widgets and secrets) and nothing else;
/// `lister` may only list widgets; everyone may get `/public/*`,
/// `/openapi/*` (kube's `system:discovery`) and `/files/*`.
fn rbac_config() -> Value {
    json!({
        "roles": [
            {"name": "namespace-admin", "rules": [
                {"verbs": ["*"], "apiGroups": ["demo.example.io"], "resources": ["widgets"]},
                {"verbs": ["*"], "apiGroups": [""], "resources": ["secrets"]},
            ]},
            {"name": "widget-lister", "rules": [{"verbs": ["list"], "apiGroups": ["demo.example.io"], "resources": ["widgets"]}]},
            {"name": "public", "rules": [{"verbs": ["get"], "nonResourceURLs": ["/public/*", "/openapi/*", "/files/*"]}]},
        ],
        "bindings": [
            {"role": "namespace-admin", "namespace": "default", "users": ["alice"]},
            {"role": "widget-lister", "users": ["lister"]},
            {"role": "public", "groups": ["system:authenticated", "system:unauthenticated"]},
        ],
    })
}

fn tokens_config() -> Value {
    json!({"tokens": [
        {"token": "alice-token", "user": "alice", "uid": "1", "groups": []},
        {"token": "lister-token", "user": "lister", "uid": "2", "groups": []},
    ]})
}

/// The gateway of these tests and its audit log: every request audited at
/// Metadata level, in blocking mode; the APIs, `/public/` and `/openapi/`
/// routed to `upstream`, and `/files/` to its `/store` folder, keeping
/// escaped slashes.
async fn hostile_gateway(upstream: &Upstream) -> (TestGateway, PathBuf) {
    let url = upstream.url();
    let routes = format!(
        r#"
[[servers]]
name = "gw"

[[servers.routes]]
api = "/apis/demo.example.io/v1"
upstream = "{url}"

[[servers.routes]]
api = "/api"
upstream = "{url}"

[[servers.routes]]
prefix = "/public/"
upstream = "{url}"

[[servers.routes]]
prefix = "/openapi/"
upstream = "{url}"

[[servers.routes]]
prefix = "/files/"
upstream = "{url}/store"
escaped_slashes = "keep"
"#
    );
    let manifest = plaintext(
        &[
            "[authentication]\nanonymous = true\n".to_owned(),
            tokens_with(tokens_config()),
            rbac_with(rbac_config()),
            "\n[audit]\nmode = \"blocking\"\n\n[[audit.policy]]\nlevel = \"Metadata\"\n".to_owned(),
            audit_log_sink(),
            routes,
        ]
        .concat(),
    );
    let gateway = TestGateway::start(&manifest).await;
    let log = gateway.dir.path().join("audit.jsonl");
    (gateway, log)
}

// ---------------------------------------------------------------------------
// Sending exactly the attacker's bytes
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum Protocol {
    Http1,
    Http2,
}

/// What the client got.
#[derive(Debug)]
struct Reply {
    status: u16,
    audit_id: Option<String>,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|error| panic!("not JSON ({error}): {}", self.body))
    }
}

/// `GET target` with an optional bearer token, the target sent as given.
async fn get(
    protocol: Protocol,
    gateway: &TestGateway,
    target: &str,
    token: Option<&str>,
) -> Reply {
    match protocol {
        Protocol::Http1 => get_http1(gateway, target, token).await,
        Protocol::Http2 => get_http2(gateway, target, token).await,
    }
}

async fn get_http1(gateway: &TestGateway, target: &str, token: Option<&str>) -> Reply {
    let authorization = token
        .map(|token| format!("Authorization: Bearer {token}\r\n"))
        .unwrap_or_default();
    let request =
        format!("GET {target} HTTP/1.1\r\nHost: gw\r\n{authorization}Connection: close\r\n\r\n");
    let response = raw_exchange(gateway.addr, request.as_bytes()).await;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head: {response:?}"));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {head:?}"));
    let audit_id = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("audit-id")
            .then(|| value.trim().to_owned())
    });
    Reply {
        status,
        audit_id,
        body: body.to_owned(),
    }
}

async fn get_http2(gateway: &TestGateway, target: &str, token: Option<&str>) -> Reply {
    let (mut sender, connection) = h2c_handshake(gateway.addr).await;
    tokio::spawn(connection);
    let uri: http::Uri = format!("http://{}{target}", gateway.addr)
        .parse()
        .unwrap_or_else(|error| panic!("{target:?} is not a URI: {error}"));
    assert_eq!(
        uri.path_and_query().map(|pq| pq.as_str()),
        Some(target),
        "the client would not send the target as given"
    );
    let mut request = http::Request::get(uri);
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let request = request.body(Empty::<Bytes>::new()).expect("a request");
    let response = bounded("an HTTP/2 response", sender.send_request(request))
        .await
        .expect("an HTTP/2 response");
    let status = response.status().as_u16();
    let audit_id = response
        .headers()
        .get("audit-id")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let body = bounded("the response body", response.into_body().collect())
        .await
        .expect("a body")
        .to_bytes();
    Reply {
        status,
        audit_id,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

// ---------------------------------------------------------------------------
// The cases and what each must come to
// ---------------------------------------------------------------------------

/// How a request must end.
#[derive(Debug, Clone, Copy)]
enum Outcome {
    /// 400 from the canonical request target, with this in its message;
    /// nothing reaches the upstream or the audit log.
    Refused(&'static str),
    /// Judged as this canonical target (what the audit log records) and
    /// denied: nothing reaches the upstream.
    Denied { judged: &'static str },
    /// Judged and forwarded as `judged`: the upstream receives exactly
    /// `forwarded` (the route's base path and `judged`) and serves
    /// `served` (what a normalising server makes of it).
    Served {
        judged: &'static str,
        forwarded: &'static str,
        served: &'static str,
    },
}

struct Case {
    name: &'static str,
    token: Option<&'static str>,
    target: &'static str,
    outcome: Outcome,
}

/// Every spelling of issue 17, with what it must come to.
fn attack_cases() -> Vec<Case> {
    use Outcome::*;
    vec![
        Case {
            name: "a namespace admin climbs from default into kube-system",
            token: Some("alice-token"),
            target: "/apis/demo.example.io/v1/namespaces/default/widgets/../../kube-system/widgets",
            outcome: Denied {
                judged: WIDGETS_KUBE_SYSTEM,
            },
        },
        Case {
            name: "anonymous reaches the API through a public grant",
            token: None,
            target: "/public/../apis/demo.example.io/v1/namespaces/default/widgets",
            outcome: Denied {
                judged: WIDGETS_DEFAULT,
            },
        },
        Case {
            name: "system:discovery's /openapi/* reads kube-system's secrets",
            token: None,
            target: "/openapi/v2/../../api/v1/namespaces/kube-system/secrets",
            outcome: Denied {
                judged: SECRETS_KUBE_SYSTEM,
            },
        },
        Case {
            name: "%2e%2e",
            token: Some("alice-token"),
            target: "/apis/demo.example.io/v1/namespaces/default/widgets/%2e%2e/%2e%2e/kube-system/widgets",
            outcome: Denied {
                judged: WIDGETS_KUBE_SYSTEM,
            },
        },
        Case {
            name: "%2E.",
            token: None,
            target: "/public/%2E./api/v1/namespaces/kube-system/secrets",
            outcome: Denied {
                judged: SECRETS_KUBE_SYSTEM,
            },
        },
        Case {
            name: "..%2F",
            token: None,
            target: "/public/..%2F..%2Fapi/v1/namespaces/kube-system/secrets",
            outcome: Refused("encoded \"/\""),
        },
        Case {
            name: ";/..",
            token: None,
            target: "/public;/../api/v1/namespaces/kube-system/secrets",
            outcome: Refused("path parameters"),
        },
        Case {
            name: "..; (Tomcat's ..)",
            token: None,
            target: "/public/..;/api/v1/namespaces/kube-system/secrets",
            outcome: Refused("path parameters"),
        },
        Case {
            name: "%3F/..",
            token: None,
            target: "/public/x%3F/../../api/v1/namespaces/kube-system/secrets",
            outcome: Denied {
                judged: SECRETS_KUBE_SYSTEM,
            },
        },
        Case {
            name: "an encoded backslash",
            token: None,
            target: "/public/..%5C..%5Capi/v1/namespaces/kube-system/secrets",
            outcome: Refused("encoded \"/\""),
        },
        Case {
            name: "above the root",
            token: None,
            target: "/public/../../api/v1/namespaces/kube-system/secrets",
            outcome: Refused("above the root"),
        },
        Case {
            name: "an encoded NUL",
            token: None,
            target: "/public/secrets%00.json",
            outcome: Refused("NUL"),
        },
        Case {
            name: "an invalid escape",
            token: None,
            target: "/public/%zz/../x",
            outcome: Refused("invalid percent-encoding"),
        },
        Case {
            name: "an overlong UTF-8 dot",
            token: None,
            target: "/public/%C0%AE%C0%AE/api/v1/namespaces/kube-system/secrets",
            outcome: Refused("UTF-8"),
        },
        Case {
            name: "a duplicated watch",
            token: Some("lister-token"),
            target: "/apis/demo.example.io/v1/namespaces/default/widgets?watch=0&watch=1",
            outcome: Refused("\"watch\" is given more than once"),
        },
        Case {
            name: "a watch hidden behind ;",
            token: Some("lister-token"),
            target: "/apis/demo.example.io/v1/namespaces/default/widgets?watch=1;x=y",
            outcome: Refused("\"watch\" is ambiguous"),
        },
        Case {
            name: "a duplicated timeout",
            token: Some("lister-token"),
            target: "/apis/demo.example.io/v1/widgets?timeout=1s&timeout=9m",
            outcome: Refused("\"timeout\" is given more than once"),
        },
        // What may be served is served as judged.
        Case {
            name: "alice's dot-segments inside default",
            token: Some("alice-token"),
            target: "/apis/demo.example.io/v1/namespaces/default/./widgets/x/../y",
            outcome: Served {
                judged: "/apis/demo.example.io/v1/namespaces/default/widgets/y",
                forwarded: "/apis/demo.example.io/v1/namespaces/default/widgets/y",
                served: "/apis/demo.example.io/v1/namespaces/default/widgets/y",
            },
        },
        Case {
            name: "escapes of unreserved characters, lower-case hex, merged slashes",
            token: None,
            target: "/public//%61%2d%7e/%c3%a9/%3f",
            outcome: Served {
                judged: "/public/a-~/%C3%A9/%3F",
                forwarded: "/public/a-~/%C3%A9/%3F",
                served: "/public/a-~/é/?",
            },
        },
        Case {
            name: "a raw character to escape after an escape",
            token: None,
            target: "/public/%3F\"",
            outcome: Served {
                judged: "/public/%3F%22",
                forwarded: "/public/%3F%22",
                served: "/public/?\"",
            },
        },
        Case {
            name: "a list that is only a list",
            token: Some("lister-token"),
            target: "/apis/demo.example.io/v1/namespaces/default/widgets?watch=0&limit=5",
            outcome: Served {
                judged: "/apis/demo.example.io/v1/namespaces/default/widgets?watch=0&limit=5",
                forwarded: "/apis/demo.example.io/v1/namespaces/default/widgets?watch=0&limit=5",
                served: "/apis/demo.example.io/v1/namespaces/default/widgets",
            },
        },
        Case {
            name: "a route that keeps escaped slashes, behind a base path",
            token: None,
            target: "/files/reports%2f2024/./q1",
            outcome: Served {
                judged: "/files/reports%2F2024/q1",
                forwarded: "/store/files/reports%2F2024/q1",
                served: "/store/files/reports/2024/q1",
            },
        },
    ]
}

/// Runs every case over `protocol` and checks the client's answer, the
/// upstream's arrivals and the audit log.
async fn run_cases(protocol: Protocol) {
    let upstream = Upstream::start().await;
    let (gateway, log) = hostile_gateway(&upstream).await;
    let mut unaudited = Vec::new();
    for case in attack_cases() {
        let context = format!("{protocol:?}, {}: GET {}", case.name, case.target);
        let hits = upstream.hits();
        let reply = get(protocol, &gateway, case.target, case.token).await;
        let audit_id = reply
            .audit_id
            .clone()
            .unwrap_or_else(|| panic!("{context}: no Audit-ID in {reply:?}"));
        match case.outcome {
            Outcome::Refused(message) => {
                assert_eq!(reply.status, 400, "{context}: {}", reply.body);
                let status = reply.json();
                assert_eq!(status["reason"], "BadRequest", "{context}");
                let said = status["message"].as_str().unwrap_or_default();
                assert!(said.contains(message), "{context}: {said:?}");
                assert_eq!(upstream.hits(), hits, "{context}: reached the upstream");
                unaudited.push((context, audit_id));
            }
            Outcome::Denied { judged } => {
                assert_eq!(reply.status, 403, "{context}: {}", reply.body);
                assert_eq!(upstream.hits(), hits, "{context}: reached the upstream");
                let events = wait_for_events(&log, &audit_id, 2).await;
                assert_audited(&context, &events, judged, 403);
            }
            Outcome::Served {
                judged,
                forwarded,
                served,
            } => {
                assert_eq!(reply.status, 200, "{context}: {}", reply.body);
                let echo = reply.json();
                assert_eq!(
                    upstream.next_arrival().await,
                    format!("GET {forwarded}"),
                    "{context}"
                );
                assert_eq!(echo["path"], forwarded, "{context}");
                // A route that keeps escaped slashes is for upstreams that
                // read them as data; this one decodes them, which shows why
                // keeping them is the route's opt-in, never the default.
                assert_eq!(echo["served"], served, "{context}");
                let events = wait_for_events(&log, &audit_id, 2).await;
                assert_audited(&context, &events, judged, 200);
            }
        }
    }
    // Refused before request info, these never reached the audit stage
    // (every audited request above was written after them, in blocking mode).
    for (context, audit_id) in unaudited {
        assert_eq!(
            events_of(&log, &audit_id),
            Vec::<Value>::new(),
            "{context}: audited"
        );
    }
}

/// The request's two events record the judged target and the code.
fn assert_audited(context: &str, events: &[Value], judged: &str, code: u16) {
    assert_eq!(
        stages_of(events),
        ["RequestReceived", "ResponseComplete"],
        "{context}"
    );
    for event in events {
        assert_eq!(event["requestURI"], judged, "{context}: {event}");
    }
    assert_eq!(events[1]["responseStatus"]["code"], code, "{context}");
}

#[tokio::test]
async fn every_spelling_over_http1_is_judged_as_served() {
    run_cases(Protocol::Http1).await;
}

#[tokio::test]
async fn every_spelling_over_http2_is_judged_as_served() {
    run_cases(Protocol::Http2).await;
}

/// The audit log records a judged resource request as what it is: the
/// namespace, resource and verb the upstream would serve, not a harmless
/// non-resource `get`.
#[tokio::test]
async fn the_audit_log_records_the_resource_that_was_judged() {
    let upstream = Upstream::start().await;
    let (gateway, log) = hostile_gateway(&upstream).await;
    let reply = get(
        Protocol::Http1,
        &gateway,
        "/openapi/v2/../../api/v1/namespaces/kube-system/secrets",
        None,
    )
    .await;
    assert_eq!(reply.status, 403, "{}", reply.body);
    let message = reply.json()["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        message.contains("cannot list resource \"secrets\"")
            && message.contains("in the namespace \"kube-system\""),
        "{message}"
    );
    let audit_id = reply.audit_id.expect("an Audit-ID");
    let events = wait_for_events(&log, &audit_id, 2).await;
    for event in &events {
        assert_eq!(event["verb"], "list", "{event}");
        assert_eq!(event["objectRef"]["namespace"], "kube-system", "{event}");
        assert_eq!(event["objectRef"]["resource"], "secrets", "{event}");
    }
    assert_eq!(upstream.hits(), 0);
}

/// Paths a route does not keep escaped slashes for are refused even when
/// another route keeps them.
#[tokio::test]
async fn escaped_slashes_pass_only_where_a_route_keeps_them() {
    let upstream = Upstream::start().await;
    let (gateway, _log) = hostile_gateway(&upstream).await;
    for protocol in [Protocol::Http1, Protocol::Http2] {
        let reply = get(protocol, &gateway, "/public/a%2Fb", None).await;
        assert_eq!(reply.status, 400, "{protocol:?}: {}", reply.body);
        let reply = get(protocol, &gateway, "/files/a%2Fb%5cc", None).await;
        assert_eq!(reply.status, 200, "{protocol:?}: {}", reply.body);
        assert_eq!(reply.json()["path"], "/store/files/a%2Fb%5Cc");
    }
    assert_eq!(upstream.hits(), 2);
}

/// An absolute-form target may leave its path out (`http://gw?x=1`): its
/// path is `/`, judged, audited (as kube's `req.URL.RequestURI()` writes
/// it, `staging/src/k8s.io/apiserver/pkg/audit/request.go`) and forwarded
/// behind the base path as `/` is, never as the bare base path.
#[tokio::test]
async fn an_absolute_target_without_a_path_is_served_as_its_root() {
    let upstream = Upstream::start().await;
    let manifest = plaintext(&format!(
        "[audit]\nmode = \"blocking\"\n\n[[audit.policy]]\nlevel = \"Metadata\"\n\n{}\n\
         [[servers]]\nname = \"gw\"\n\n[[servers.routes]]\nprefix = \"/\"\nupstream = \"{}/base\"\n",
        audit_log_sink(),
        upstream.url()
    ));
    let gateway = TestGateway::start(&manifest).await;
    let log = gateway.dir.path().join("audit.jsonl");
    for (target, judged) in [("http://gw?x=1", "/?x=1"), ("http://gw/?x=1", "/?x=1")] {
        let reply = get_http1(&gateway, target, None).await;
        assert_eq!(reply.status, 200, "{target}: {}", reply.body);
        assert_eq!(reply.json()["path"], "/base/?x=1", "{target}");
        let audit_id = reply.audit_id.expect("an Audit-ID");
        let events = wait_for_events(&log, &audit_id, 2).await;
        assert_audited(target, &events, judged, 200);
    }
}

// ---------------------------------------------------------------------------
// Property: the path forwarded is the path judged
// ---------------------------------------------------------------------------

/// What request info resolved, and the URI it resolved it from, as the
/// centre of the chain (after authorization, before the director) saw them.
#[derive(Default)]
struct Judged(Mutex<Option<(String, String)>>);

struct Recorder {
    judged: Arc<Judged>,
    next: SharedHandler,
}

impl Handler for Recorder {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        let info_path = RequestContext::of(request.extensions())
            .info
            .as_ref()
            .map(|info| info.path.to_string())
            .unwrap_or_default();
        let target = request
            .uri()
            .path_and_query()
            .map(|pq| pq.as_str().to_owned())
            .unwrap_or_default();
        if let Ok(mut judged) = self.judged.0.lock() {
            *judged = Some((target, info_path));
        }
        self.next.call(request)
    }
}

struct Fixture {
    runtime: tokio::runtime::Runtime,
    handler: SharedHandler,
    judged: Arc<Judged>,
    _gateway: wasmgate::server::Gateway,
    _upstream: Upstream,
}

/// One gateway for every generated case: a prefix route for every path to
/// the upstream's `/base` folder, no authorization (everything reaches the
/// director), the recorder at the centre.
fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let judged = Arc::new(Judged::default());
        let (gateway, upstream) = runtime.block_on(async {
            let upstream = Upstream::start().await;
            let manifest = plaintext(&format!(
                "[[servers]]\nname = \"gw\"\n\n[[servers.routes]]\nprefix = \"/\"\nupstream = \"{}/base\"\n",
                upstream.url()
            ));
            let path = Path::new("gateway.toml");
            let config = wasmgate::config::parse(path, &manifest).expect("a valid manifest");
            let recorder = judged.clone();
            let gateway = wasmgate::server::Gateway::with_center(config, move |next| {
                Arc::new(Recorder {
                    judged: recorder,
                    next,
                })
            })
            .expect("a gateway");
            (gateway, upstream)
        });
        Fixture {
            runtime,
            handler: gateway.handler(),
            judged,
            _gateway: gateway,
            _upstream: upstream,
        }
    })
}

/// The pieces generated paths are made of: names, every spelling of a dot,
/// escapes of every class, the refused characters, and the routes the
/// gateway serves itself.
const PIECES: &[&str] = &[
    "a",
    "kube-system",
    "api",
    "v1",
    ".",
    "..",
    "%2e",
    "%2E",
    "%2e%2e",
    ".%2E",
    "",
    "%61",
    "%2F",
    "%2f",
    "%5C",
    "%3F",
    "%23",
    "%25",
    "%252e",
    "%20",
    "%C3%A9",
    "%FF",
    "%zz",
    "%",
    "%00",
    ";",
    "..;",
    "\\",
    "\"",
    "{",
    ":",
    "@",
    "healthz",
];

const QUERIES: &[&str] = &[
    "",
    "?watch=1",
    "?watch=0&watch=1",
    "?limit=1;watch=1",
    "?a=%zz&b=1",
    "?timeout=1s",
];

fn any_target() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let segment = prop::collection::vec(prop::sample::select(PIECES), 0..3)
        .prop_map(|pieces| pieces.concat());
    (
        prop::collection::vec(segment, 0..6),
        prop::sample::select(QUERIES),
    )
        .prop_map(|(segments, query)| format!("/{}{query}", segments.join("/")))
}

/// One generated request through the chain: refused with a 400 before
/// anything judged it, or judged and forwarded byte for byte, and served as
/// judged by a normalising upstream.
async fn judged_is_forwarded(target: &str) -> Result<(), proptest::test_runner::TestCaseError> {
    use proptest::prop_assert_eq;
    let Ok(uri) = format!("http://gw{target}").parse::<http::Uri>() else {
        return Ok(()); // not a request any client can send
    };
    let fixture = fixture();
    if let Ok(mut judged) = fixture.judged.0.lock() {
        *judged = None;
    }
    let mut request = http::Request::new(wasmgate::body::Body::empty());
    *request.uri_mut() = uri.clone();
    request
        .headers_mut()
        .insert("host", http::HeaderValue::from_static("gw"));
    // What the listener gives every request: its connection.
    RequestContext::learn(request.extensions_mut()).connection =
        Some(std::sync::Arc::new(wasmgate::context::ConnectionInfo::new(
            std::net::SocketAddr::from(([127, 0, 0, 1], 40000)),
            false,
            None,
        )));
    let response = fixture.handler.call(request).await;
    let status = response.status().as_u16();
    let from_upstream = response.headers().contains_key("x-upstream");
    let body = response
        .into_body()
        .collect()
        .await
        .map(|collected| collected.to_bytes())
        .unwrap_or_default();
    let judged = fixture
        .judged
        .0
        .lock()
        .ok()
        .and_then(|judged| judged.clone());
    let expected = wasmgate::request_target::canonicalize(uri.path());
    let query_ok = uri
        .query()
        .is_none_or(|query| wasmgate::request_target::check_query(query).is_ok());
    match expected {
        Ok(canonical) if query_ok && !canonical.escaped_slashes => {
            let (judged_target, info_path) = judged.ok_or_else(|| {
                proptest::test_runner::TestCaseError::fail(format!(
                    "{target:?}: not judged ({status})"
                ))
            })?;
            let canonical_target = match uri.query() {
                Some(query) => format!("{}?{query}", canonical.path),
                None => canonical.path.to_string(),
            };
            prop_assert_eq!(&judged_target, &canonical_target, "{:?}", target);
            let decoded = percent_encoding::percent_decode_str(&canonical.path).decode_utf8_lossy();
            prop_assert_eq!(&info_path, &decoded, "{:?}", target);
            if from_upstream {
                let echo: Value = serde_json::from_slice(&body).unwrap_or_default();
                prop_assert_eq!(
                    &echo["path"],
                    &format!("/base{judged_target}"),
                    "{:?}",
                    target
                );
                prop_assert_eq!(
                    &echo["served"],
                    &format!("/base{info_path}"),
                    "{:?}",
                    target
                );
            }
        }
        _ => {
            prop_assert_eq!(status, 400, "{:?}", target);
            proptest::prop_assert!(judged.is_none(), "{:?} was judged", target);
        }
    }
    Ok(())
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config::with_cases(400))]

    #[test]
    fn the_path_forwarded_is_the_path_judged(target in any_target()) {
        let fixture = fixture();
        fixture.runtime.block_on(judged_is_forwarded(&target))?;
    }
}
