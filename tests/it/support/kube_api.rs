//! A small kube-like API server over TLS, to stand behind the gateway where
//! a kube-apiserver would (none can run on this machine): two real resource
//! types kept in memory, ConfigMaps (`/api/v1`) and Widgets
//! (`demo.example.io/v1`, as a custom resource), with create, get, list,
//! update, delete, patch (JSON merge and strategic merge, which for these
//! types' maps are the same) and watch (a stream of JSON events); its
//! discovery, legacy and aggregated; one running pod, `p` (container
//! `app`), whose log is streamed with `follow` and which execs over
//! WebSocket as kubelet does (`v5.channel.k8s.io`: echoes the command's
//! arguments on stdout); its OpenAPI v2 and v3 documents,
//! written from kube's own schemas for these fields
//! (`api/openapi-spec/v3/api__v1_openapi.json`), trimmed to them.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;

use super::certs::CertAndKey;
use super::upstream::{UpstreamBody, channel_body, full, spawn_server, tls_acceptor};

/// One resource type the server serves.
struct Kind {
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    short_names: &'static [&'static str],
    /// The schema's name in the OpenAPI documents.
    schema: &'static str,
}

const CONFIG_MAPS: Kind = Kind {
    group: "",
    version: "v1",
    plural: "configmaps",
    singular: "configmap",
    kind: "ConfigMap",
    short_names: &["cm"],
    schema: "io.k8s.api.core.v1.ConfigMap",
};

const WIDGETS: Kind = Kind {
    group: "demo.example.io",
    version: "v1",
    plural: "widgets",
    singular: "widget",
    kind: "Widget",
    short_names: &[],
    schema: "io.example.demo.v1.Widget",
};

const KINDS: [&Kind; 2] = [&CONFIG_MAPS, &WIDGETS];

/// The longest a watch stays open.
const MAX_WATCH: Duration = Duration::from_secs(60);

impl Kind {
    fn api_version(&self) -> String {
        match self.group {
            "" => self.version.to_owned(),
            group => format!("{group}/{}", self.version),
        }
    }

    /// `/api/v1` or `/apis/<group>/<version>`.
    fn root(&self) -> String {
        match self.group {
            "" => format!("/api/{}", self.version),
            group => format!("/apis/{group}/{}", self.version),
        }
    }

    fn gvk(&self) -> Value {
        json!([{"group": self.group, "version": self.version, "kind": self.kind}])
    }
}

#[derive(Default)]
struct Store {
    /// (plural, namespace, name) -> object.
    objects: BTreeMap<(&'static str, String, String), Value>,
    revision: u64,
}

struct State {
    store: Mutex<Store>,
    /// (plural, namespace, event) of every change.
    events: broadcast::Sender<(&'static str, String, Value)>,
    /// `<X-Remote-User> <METHOD> <path>` of each request that named a user.
    requests: Mutex<Vec<String>>,
}

/// The running server; stopped when dropped.
pub struct KubeApi {
    pub addr: SocketAddr,
    state: Arc<State>,
    task: JoinHandle<()>,
}

impl Drop for KubeApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl KubeApi {
    /// Serves `cert` on 127.0.0.1:0.
    pub async fn start(cert: &CertAndKey) -> KubeApi {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the kube-like server");
        let addr = listener.local_addr().expect("its address");
        let (events, _) = broadcast::channel(64);
        let state = Arc::new(State {
            store: Mutex::new(Store::default()),
            events,
            requests: Mutex::new(Vec::new()),
        });
        let serving = Arc::clone(&state);
        let task = spawn_server(listener, Some(tls_acceptor(cert)), move |request| {
            answer(Arc::clone(&serving), request)
        });
        KubeApi { addr, state, task }
    }

    /// `https://localhost:PORT`.
    pub fn url(&self) -> String {
        format!("https://localhost:{}", self.addr.port())
    }

    /// `<user> <METHOD> <path>` of each request the gateway named a user
    /// for (`X-Remote-User`), in order.
    pub fn requests(&self) -> Vec<String> {
        self.state.requests.lock().expect("requests").clone()
    }

    /// The stored object, if any.
    pub fn object(&self, plural: &str, namespace: &str, name: &str) -> Option<Value> {
        let store = self.state.store.lock().expect("store");
        store
            .objects
            .iter()
            .find(|((p, ns, n), _)| *p == plural && ns == namespace && n == name)
            .map(|(_, object)| object.clone())
    }

    /// Creates a ConfigMap as another client would, behind the gateway's back.
    pub fn create_config_map(&self, namespace: &str, name: &str, data: Value) {
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data});
        if create(&self.state, &CONFIG_MAPS, namespace, object).is_err() {
            panic!("ConfigMap {name} exists already");
        }
    }
}

type Answer = http::Response<UpstreamBody>;

async fn answer(state: Arc<State>, request: http::Request<Incoming>) -> Result<Answer, Infallible> {
    if let Some(user) = request
        .headers()
        .get("x-remote-user")
        .and_then(|value| value.to_str().ok())
    {
        let line = format!("{user} {} {}", request.method(), request.uri().path());
        state.requests.lock().expect("requests").push(line);
    }
    let path = request.uri().path().trim_end_matches('/').to_owned();
    let accept = header(&request, http::header::ACCEPT);
    let aggregated = accept.contains("as=APIGroupDiscoveryList");
    let response = match path.as_str() {
        "/api" if aggregated => aggregated_discovery(true),
        "/apis" if aggregated => aggregated_discovery(false),
        "/api" => json_answer(
            StatusCode::OK,
            &json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "localhost"}]}),
        ),
        "/apis" => json_answer(
            StatusCode::OK,
            &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [api_group(&WIDGETS)]}),
        ),
        "/apis/demo.example.io" => json_answer(StatusCode::OK, &api_group(&WIDGETS)),
        "/openapi/v2" if accepts_json(&accept) => json_answer(StatusCode::OK, &openapi_v2()),
        "/openapi/v2" => status(StatusCode::NOT_ACCEPTABLE, "NotAcceptable", "only JSON"),
        "/openapi/v3" => json_answer(StatusCode::OK, &openapi_v3_root()),
        _ if pod_path(&path).is_some() => pod(request, &path),
        _ => match path.strip_prefix("/openapi/v3") {
            Some(group_version) => match KINDS.iter().find(|kind| kind.root() == group_version) {
                Some(kind) => json_answer(StatusCode::OK, &openapi_v3(kind)),
                None => not_found("the server could not find the requested resource"),
            },
            None => resources(state, request, &path).await,
        },
    };
    Ok(response)
}

/// The pod `p` and its subresources: the namespace and what follows
/// `/pods/p` (empty for the pod itself).
fn pod_path(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix("/api/v1/namespaces/")?;
    let (namespace, rest) = rest.split_once("/pods/p")?;
    (rest.is_empty() || rest.starts_with('/')).then_some((namespace, rest))
}

/// The pod `p`, its log (streamed, a line every 100 ms, with `follow`)
/// and its exec over WebSocket.
fn pod(mut request: http::Request<Incoming>, path: &str) -> Answer {
    let Some((namespace, subresource)) = pod_path(path) else {
        return not_found("the server could not find the requested resource");
    };
    let query: Vec<(String, String)> =
        url::form_urlencoded::parse(request.uri().query().unwrap_or("").as_bytes())
            .into_owned()
            .collect();
    match (subresource, request.method().as_str()) {
        ("", "GET") => json_answer(
            StatusCode::OK,
            &json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": namespace, "uid": "7f1c6e0a-0000-4000-8000-000000000001", "resourceVersion": "1", "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {"containers": [{"name": "app", "image": "app:1"}]},
                "status": {"phase": "Running"}}),
        ),
        ("/log", "GET") => {
            let follow = query
                .iter()
                .any(|(key, value)| key == "follow" && value == "true");
            let (sender, receiver) = mpsc::channel(16);
            tokio::spawn(async move {
                let lines = async {
                    for line in 1.. {
                        if !follow && line > 3 {
                            return;
                        }
                        if sender
                            .send(Bytes::from(format!("line {line}\n")))
                            .await
                            .is_err()
                        {
                            return;
                        }
                        if follow {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                };
                let _ = tokio::time::timeout(MAX_WATCH, lines).await;
            });
            let mut response = http::Response::new(channel_body(receiver));
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("text/plain"),
            );
            response
        }
        ("/exec", "GET") => {
            let offered = header(&request, http::header::SEC_WEBSOCKET_PROTOCOL);
            if !offered
                .split(',')
                .any(|protocol| protocol.trim() == "v5.channel.k8s.io")
            {
                return status(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    "v5.channel.k8s.io only",
                );
            }
            let key = header(&request, http::header::SEC_WEBSOCKET_KEY);
            let command: Vec<String> = query
                .into_iter()
                .filter(|(key, _)| key == "command")
                .map(|(_, value)| value)
                .collect();
            let upgraded = hyper::upgrade::on(&mut request);
            tokio::spawn(async move {
                use futures_util::SinkExt;
                use tokio_tungstenite::tungstenite::Message;
                let Ok(upgraded) = upgraded.await else { return };
                let mut socket = tokio_tungstenite::WebSocketStream::from_raw_socket(
                    hyper_util::rt::TokioIo::new(upgraded),
                    tokio_tungstenite::tungstenite::protocol::Role::Server,
                    None,
                )
                .await;
                // Channel 1 is stdout, channel 3 the Status the command
                // ended with (`remotecommand`'s v4 and v5).
                let mut stdout = vec![1u8];
                stdout.extend_from_slice(command.get(1..).unwrap_or_default().join(" ").as_bytes());
                stdout.push(b'\n');
                let mut ended = vec![3u8];
                ended.extend_from_slice(br#"{"metadata":{},"status":"Success"}"#);
                for frame in [stdout, ended] {
                    if socket.send(Message::binary(frame)).await.is_err() {
                        return;
                    }
                }
                // A normal closure, as kubelet's: gorilla's reader in
                // kubectl takes any other (1005, no code) for an error.
                let normal = tokio_tungstenite::tungstenite::protocol::CloseFrame {
                    code:
                        tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode::Normal,
                    reason: "".into(),
                };
                let _ = socket.close(Some(normal)).await;
            });
            let accept =
                tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
            let mut response = http::Response::new(full(""));
            *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
            let headers = response.headers_mut();
            for (name, value) in [
                (http::header::CONNECTION, "Upgrade".to_owned()),
                (http::header::UPGRADE, "websocket".to_owned()),
                (http::header::SEC_WEBSOCKET_ACCEPT, accept),
                (
                    http::header::SEC_WEBSOCKET_PROTOCOL,
                    "v5.channel.k8s.io".to_owned(),
                ),
            ] {
                headers.insert(
                    name,
                    http::HeaderValue::from_str(&value).expect("a header value"),
                );
            }
            response
        }
        _ => status(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        ),
    }
}

fn header(request: &http::Request<Incoming>, name: http::header::HeaderName) -> String {
    request
        .headers()
        .get_all(name)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .collect::<Vec<_>>()
        .join(",")
}

fn accepts_json(accept: &str) -> bool {
    accept.is_empty() || accept.contains("application/json") || accept.contains("*/*")
}

/// What a path below an API root names.
enum Target<'a> {
    ResourceList(&'a Kind),
    Collection(&'a Kind, String),
    Object(&'a Kind, String, String),
}

fn target(path: &str) -> Option<Target<'static>> {
    for kind in KINDS {
        let Some(rest) = path.strip_prefix(&kind.root()) else {
            continue;
        };
        let segments: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
        return match segments.as_slice() {
            [] => Some(Target::ResourceList(kind)),
            ["namespaces", namespace, plural] if *plural == kind.plural => {
                Some(Target::Collection(kind, (*namespace).to_owned()))
            }
            ["namespaces", namespace, plural, name] if *plural == kind.plural => Some(
                Target::Object(kind, (*namespace).to_owned(), (*name).to_owned()),
            ),
            _ => None,
        };
    }
    None
}

async fn resources(state: Arc<State>, request: http::Request<Incoming>, path: &str) -> Answer {
    let Some(target) = target(path) else {
        return not_found("the server could not find the requested resource");
    };
    let method = request.method().clone();
    let watch = request.uri().query().is_some_and(|query| {
        url::form_urlencoded::parse(query.as_bytes())
            .any(|(key, value)| key == "watch" && (value == "true" || value == "1"))
    });
    let content_type = header(&request, http::header::CONTENT_TYPE);
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return status(StatusCode::BAD_REQUEST, "BadRequest", "unreadable body"),
    };
    match (target, method.as_str()) {
        (Target::ResourceList(kind), "GET") => json_answer(StatusCode::OK, &resource_list(kind)),
        (Target::Collection(kind, namespace), "GET") if watch => {
            watch_stream(&state, kind, namespace)
        }
        (Target::Collection(kind, namespace), "GET") => list(&state, kind, &namespace),
        (Target::Collection(kind, namespace), "POST") => match parse(&body) {
            Ok(object) => match create(&state, kind, &namespace, object) {
                Ok(created) => json_answer(StatusCode::CREATED, &created),
                Err(refusal) => refusal.answer(),
            },
            Err(refusal) => refusal.answer(),
        },
        (Target::Object(kind, namespace, name), "GET") => {
            match stored(&state, kind, &namespace, &name) {
                Some(object) => json_answer(StatusCode::OK, &object),
                None => missing(kind, &name),
            }
        }
        (Target::Object(kind, namespace, name), "PATCH") => {
            patch(&state, kind, &namespace, &name, &content_type, &body)
        }
        (Target::Object(kind, namespace, name), "PUT") => match parse(&body) {
            Ok(object) => replace(&state, kind, &namespace, &name, object),
            Err(refusal) => refusal.answer(),
        },
        (Target::Object(kind, namespace, name), "DELETE") => {
            delete(&state, kind, &namespace, &name)
        }
        _ => status(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        ),
    }
}

/// Why a request is refused: a Status to answer with.
struct Refusal {
    code: StatusCode,
    reason: &'static str,
    message: String,
}

impl Refusal {
    fn answer(self) -> Answer {
        status(self.code, self.reason, &self.message)
    }
}

fn parse(body: &Bytes) -> Result<Value, Refusal> {
    serde_json::from_slice(body).map_err(|error| Refusal {
        code: StatusCode::BAD_REQUEST,
        reason: "BadRequest",
        message: format!("the body is not JSON: {error}"),
    })
}

fn stored(state: &State, kind: &Kind, namespace: &str, name: &str) -> Option<Value> {
    let store = state.store.lock().expect("store");
    store
        .objects
        .get(&(kind.plural, namespace.to_owned(), name.to_owned()))
        .cloned()
}

/// Stores `object` under a new resource version and tells the watchers.
fn commit(state: &State, kind: &Kind, namespace: &str, mut object: Value, event: &str) -> Value {
    let mut store = state.store.lock().expect("store");
    store.revision += 1;
    object["metadata"]["resourceVersion"] = json!(store.revision.to_string());
    let name = object["metadata"]["name"].as_str().unwrap_or("").to_owned();
    let key = (plural_of(kind), namespace.to_owned(), name);
    if event == "DELETED" {
        store.objects.remove(&key);
    } else {
        store.objects.insert(key, object.clone());
    }
    let _ = state.events.send((
        plural_of(kind),
        namespace.to_owned(),
        json!({"type": event, "object": object}),
    ));
    object
}

fn plural_of(kind: &Kind) -> &'static str {
    KINDS
        .iter()
        .find(|known| known.plural == kind.plural)
        .map_or("", |known| known.plural)
}

fn create(
    state: &State,
    kind: &Kind,
    namespace: &str,
    mut object: Value,
) -> Result<Value, Refusal> {
    let Some(name) = object["metadata"]["name"].as_str().map(str::to_owned) else {
        return Err(Refusal {
            code: StatusCode::UNPROCESSABLE_ENTITY,
            reason: "Invalid",
            message: "metadata.name: Required value".to_owned(),
        });
    };
    if stored(state, kind, namespace, &name).is_some() {
        return Err(Refusal {
            code: StatusCode::CONFLICT,
            reason: "AlreadyExists",
            message: format!("{} \"{name}\" already exists", kind.plural),
        });
    }
    object["apiVersion"] = json!(kind.api_version());
    object["kind"] = json!(kind.kind);
    let metadata = &mut object["metadata"];
    metadata["namespace"] = json!(namespace);
    metadata["uid"] = json!(uuid::Uuid::new_v4().to_string());
    metadata["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
    Ok(commit(state, kind, namespace, object, "ADDED"))
}

fn replace(state: &State, kind: &Kind, namespace: &str, name: &str, object: Value) -> Answer {
    let Some(current) = stored(state, kind, namespace, name) else {
        return missing(kind, name);
    };
    let mut object = object;
    object["metadata"]["uid"] = current["metadata"]["uid"].clone();
    object["metadata"]["namespace"] = json!(namespace);
    object["metadata"]["creationTimestamp"] = current["metadata"]["creationTimestamp"].clone();
    json_answer(
        StatusCode::OK,
        &commit(state, kind, namespace, object, "MODIFIED"),
    )
}

/// JSON merge patch and strategic merge patch: for maps of strings (a
/// ConfigMap's `data`, its labels and annotations) strategic merge is the
/// merge patch.
fn patch(
    state: &State,
    kind: &Kind,
    namespace: &str,
    name: &str,
    content_type: &str,
    body: &Bytes,
) -> Answer {
    let media = content_type.split(';').next().unwrap_or("").trim();
    if !matches!(
        media,
        "application/merge-patch+json" | "application/strategic-merge-patch+json"
    ) {
        let message = format!(
            "the body of the request was in an unknown format - accepted media types include: application/merge-patch+json, application/strategic-merge-patch+json (got {media:?})"
        );
        return status(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            &message,
        );
    }
    let Some(mut object) = stored(state, kind, namespace, name) else {
        return missing(kind, name);
    };
    let patch = match parse(body) {
        Ok(patch) => patch,
        Err(refusal) => return refusal.answer(),
    };
    json_patch::merge(&mut object, &patch);
    json_answer(
        StatusCode::OK,
        &commit(state, kind, namespace, object, "MODIFIED"),
    )
}

fn delete(state: &State, kind: &Kind, namespace: &str, name: &str) -> Answer {
    match stored(state, kind, namespace, name) {
        Some(object) => json_answer(
            StatusCode::OK,
            &commit(state, kind, namespace, object, "DELETED"),
        ),
        None => missing(kind, name),
    }
}

fn list(state: &State, kind: &Kind, namespace: &str) -> Answer {
    let store = state.store.lock().expect("store");
    let items: Vec<&Value> = store
        .objects
        .iter()
        .filter(|((plural, ns, _), _)| *plural == kind.plural && ns == namespace)
        .map(|(_, object)| object)
        .collect();
    json_answer(
        StatusCode::OK,
        &json!({
            "kind": format!("{}List", kind.kind),
            "apiVersion": kind.api_version(),
            "metadata": {"resourceVersion": store.revision.to_string()},
            "items": items,
        }),
    )
}

/// Every change to `kind` in `namespace` from now on, one JSON event a line,
/// for at most [`MAX_WATCH`].
fn watch_stream(state: &State, kind: &Kind, namespace: String) -> Answer {
    let mut events = state.events.subscribe();
    let plural = plural_of(kind);
    let (sender, receiver) = mpsc::channel(16);
    tokio::spawn(async move {
        let stream = async {
            while let Ok((changed, ns, event)) = events.recv().await {
                if changed != plural || ns != namespace {
                    continue;
                }
                let mut line = event.to_string();
                line.push('\n');
                if sender.send(Bytes::from(line)).await.is_err() {
                    return;
                }
            }
        };
        let _ = tokio::time::timeout(MAX_WATCH, stream).await;
    });
    let mut response = http::Response::new(channel_body(receiver));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

fn json_answer(code: StatusCode, value: &Value) -> Answer {
    json_typed(code, value, "application/json")
}

fn json_typed(code: StatusCode, value: &Value, content_type: &'static str) -> Answer {
    let mut response = http::Response::new(full(value.to_string()));
    *response.status_mut() = code;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    response
}

fn status(code: StatusCode, reason: &str, message: &str) -> Answer {
    json_answer(
        code,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code.as_u16()}),
    )
}

fn not_found(message: &str) -> Answer {
    status(StatusCode::NOT_FOUND, "NotFound", message)
}

fn missing(kind: &Kind, name: &str) -> Answer {
    let mut answer = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("{} \"{name}\" not found", kind.plural), "reason": "NotFound",
        "details": {"name": name, "kind": kind.plural}, "code": 404});
    if !kind.group.is_empty() {
        answer["details"]["group"] = json!(kind.group);
    }
    json_answer(StatusCode::NOT_FOUND, &answer)
}

// ---- discovery ----

fn api_group(kind: &Kind) -> Value {
    let version = json!({"groupVersion": kind.api_version(), "version": kind.version});
    json!({"kind": "APIGroup", "apiVersion": "v1", "name": kind.group, "versions": [version], "preferredVersion": version})
}

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "get",
    "list",
    "patch",
    "update",
    "watch",
    "deletecollection",
];

fn resource_list(kind: &Kind) -> Value {
    let mut resources = vec![json!({
        "name": kind.plural,
        "singularName": kind.singular,
        "namespaced": true,
        "kind": kind.kind,
        "verbs": VERBS,
        "shortNames": kind.short_names,
    })];
    if kind.group.is_empty() {
        resources.extend([
            json!({"name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod", "verbs": ["get"], "shortNames": ["po"]}),
            json!({"name": "pods/exec", "singularName": "", "namespaced": true, "kind": "PodExecOptions", "verbs": ["create", "get"]}),
            json!({"name": "pods/log", "singularName": "", "namespaced": true, "kind": "Pod", "verbs": ["get"]}),
        ]);
    }
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": kind.api_version(),
        "resources": resources,
    })
}

/// kube's `APIGroupDiscoveryList` for `/api` (`core`) or `/apis`.
fn aggregated_discovery(core: bool) -> Answer {
    let items: Vec<Value> = KINDS
        .iter()
        .filter(|kind| kind.group.is_empty() == core)
        .map(|kind| {
            let mut metadata = json!({"creationTimestamp": null});
            if !core {
                metadata["name"] = json!(kind.group);
            }
            let mut resources = vec![json!({
                "resource": kind.plural,
                "responseKind": {"group": kind.group, "version": kind.version, "kind": kind.kind},
                "scope": "Namespaced",
                "singularResource": kind.singular,
                "verbs": VERBS,
                "shortNames": kind.short_names,
            })];
            if core {
                resources.push(json!({
                    "resource": "pods",
                    "responseKind": {"group": "", "version": "v1", "kind": "Pod"},
                    "scope": "Namespaced",
                    "singularResource": "pod",
                    "verbs": ["get"],
                    "shortNames": ["po"],
                    "subresources": [
                        {"subresource": "exec", "responseKind": {"group": "", "version": "v1", "kind": "PodExecOptions"}, "verbs": ["create", "get"]},
                        {"subresource": "log", "responseKind": {"group": "", "version": "v1", "kind": "Pod"}, "verbs": ["get"]},
                    ],
                }));
            }
            json!({"metadata": metadata, "versions": [{
                "version": kind.version,
                "resources": resources,
                "freshness": "Current",
            }]})
        })
        .collect();
    json_typed(
        StatusCode::OK,
        &json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items}),
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
    )
}

// ---- OpenAPI ----

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
const API_VERSION_DOC: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const KIND_DOC: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
/// kube's description of `ConfigMap.data`.
pub const CONFIG_MAP_DATA_DOC: &str = "Data contains the configuration data. Each key must consist of alphanumeric characters, '-', '_' or '.'. Values with non-UTF-8 byte sequences must use the BinaryData field. The keys stored in Data must not overlap with the keys in the BinaryData field, this is enforced during validation process.";

/// The schemas of `kind`, its list and the metadata they use; `reference`
/// turns a schema name into a `$ref` (v2's `#/definitions/`, v3's
/// `#/components/schemas/`).
fn schemas(kind: &Kind, reference: &dyn Fn(&str) -> String) -> serde_json::Map<String, Value> {
    let metadata_ref = |name: &str, v3: bool| {
        if v3 {
            json!({"allOf": [{"$ref": reference(name)}], "default": {}})
        } else {
            json!({"$ref": reference(name)})
        }
    };
    let v3 = reference("x").starts_with("#/components/");
    let mut properties = json!({
        "apiVersion": {"description": API_VERSION_DOC, "type": "string"},
        "kind": {"description": KIND_DOC, "type": "string"},
        "metadata": metadata_ref(OBJECT_META, v3),
    });
    let description = if kind.kind == "ConfigMap" {
        properties["data"] = json!({"description": CONFIG_MAP_DATA_DOC, "type": "object", "additionalProperties": {"type": "string", "default": ""}});
        properties["binaryData"] = json!({"description": "BinaryData contains the binary data. Each key must consist of alphanumeric characters, '-', '_' or '.'. BinaryData can contain byte sequences that are not in the UTF-8 range. The keys stored in BinaryData must not overlap with the ones in the Data field, this is enforced during validation process. Using this field will require 1.10+ apiserver and kubelet.", "type": "object", "additionalProperties": {"type": "string", "format": "byte"}});
        properties["immutable"] = json!({"description": "Immutable, if set to true, ensures that data stored in the ConfigMap cannot be updated (only object metadata can be modified). If not set to true, the field can be modified at any time. Defaulted to nil.", "type": "boolean"});
        "ConfigMap holds configuration data for pods to consume."
    } else {
        properties["spec"] = json!({"description": "What the widget should be.", "type": "object", "properties": {
            "color": {"description": "The widget's color.", "type": "string"},
            "size": {"description": "The widget's size.", "type": "integer", "format": "int64"},
        }});
        "A widget, a custom resource of demo.example.io."
    };
    let mut schemas = serde_json::Map::new();
    schemas.insert(
        kind.schema.to_owned(),
        json!({"description": description, "type": "object", "properties": properties, "x-kubernetes-group-version-kind": kind.gvk()}),
    );
    schemas.insert(
        format!("{}List", kind.schema),
        json!({
            "description": format!("{}List is a list of {} objects.", kind.kind, kind.kind),
            "type": "object",
            "required": ["items"],
            "properties": {
                "apiVersion": {"description": API_VERSION_DOC, "type": "string"},
                "kind": {"description": KIND_DOC, "type": "string"},
                "items": {"description": format!("Items is the list of {} objects.", kind.kind), "type": "array", "items": metadata_ref(kind.schema, v3)},
                "metadata": metadata_ref(LIST_META, v3),
            },
            "x-kubernetes-group-version-kind": [{"group": kind.group, "version": kind.version, "kind": format!("{}List", kind.kind)}],
        }),
    );
    schemas.insert(
        OBJECT_META.to_owned(),
        json!({"description": "ObjectMeta is metadata that all persisted resources must have, which includes all objects users must create.", "type": "object", "properties": {
            "name": {"description": "Name must be unique within a namespace.", "type": "string"},
            "namespace": {"description": "Namespace defines the space within which each name must be unique.", "type": "string"},
            "labels": {"description": "Map of string keys and values that can be used to organize and categorize (scope and select) objects.", "type": "object", "additionalProperties": {"type": "string", "default": ""}},
            "annotations": {"description": "Annotations is an unstructured key value map stored with a resource that may be set by external tools to store and retrieve arbitrary metadata.", "type": "object", "additionalProperties": {"type": "string", "default": ""}},
            "uid": {"description": "UID is the unique in time and space value for this object.", "type": "string"},
            "resourceVersion": {"description": "An opaque value that represents the internal version of this object.", "type": "string"},
            "creationTimestamp": {"description": "CreationTimestamp is a timestamp representing the server time when this object was created.", "type": "string", "format": "date-time"},
        }}),
    );
    schemas.insert(
        LIST_META.to_owned(),
        json!({"description": "ListMeta describes metadata that synthetic resources must have, including lists and various status objects.", "type": "object", "properties": {
            "resourceVersion": {"description": "String that identifies the server's internal version of this object.", "type": "string"},
        }}),
    );
    schemas
}

fn query_parameter(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "uniqueItems": true, "schema": {"type": "string"}})
}

/// kube's paths for a namespaced resource, in v3's shape: each
/// operation's group-version-kind, create and patch with
/// `fieldValidation` (kubectl checks it to validate on the server) and
/// patch's media types (kubectl reads strategic merge's for apply).
fn v3_paths(kind: &Kind) -> Value {
    let reference = |name: &str| format!("#/components/schemas/{name}");
    let gvk = json!({"group": kind.group, "version": kind.version, "kind": kind.kind});
    let body = |name: &str| json!({"content": {"application/json": {"schema": {"$ref": reference(name)}}}});
    let ok = |name: &str| json!({"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": reference(name)}}}}});
    let field_validation = query_parameter(
        "fieldValidation",
        "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields.",
    );
    let field_manager = query_parameter(
        "fieldManager",
        "fieldManager is a name associated with the actor or entity that is making these changes.",
    );
    let dry_run = query_parameter(
        "dryRun",
        "When present, indicates that modifications should not be persisted.",
    );
    let namespace = json!({"name": "namespace", "in": "path", "required": true, "description": "object name and auth scope, such as for teams and projects", "schema": {"type": "string", "uniqueItems": true}});
    let name = json!({"name": "name", "in": "path", "required": true, "description": format!("name of the {}", kind.kind), "schema": {"type": "string", "uniqueItems": true}});
    let patch_schema = json!({"schema": {"type": "object"}});
    let list = format!("{}List", kind.schema);
    json!({
        format!("{}/namespaces/{{namespace}}/{}", kind.root(), kind.plural): {
            "get": {"description": format!("list or watch objects of kind {}", kind.kind), "operationId": format!("list{}", kind.kind), "responses": ok(&list), "x-kubernetes-action": "list", "x-kubernetes-group-version-kind": gvk},
            "post": {"description": format!("create a {}", kind.kind), "operationId": format!("create{}", kind.kind), "parameters": [dry_run, field_manager, field_validation], "requestBody": body(kind.schema), "responses": ok(kind.schema), "x-kubernetes-action": "post", "x-kubernetes-group-version-kind": gvk},
            "parameters": [namespace],
        },
        format!("{}/namespaces/{{namespace}}/{}/{{name}}", kind.root(), kind.plural): {
            "get": {"description": format!("read the specified {}", kind.kind), "operationId": format!("read{}", kind.kind), "responses": ok(kind.schema), "x-kubernetes-action": "get", "x-kubernetes-group-version-kind": gvk},
            "put": {"description": format!("replace the specified {}", kind.kind), "operationId": format!("replace{}", kind.kind), "parameters": [dry_run, field_manager, field_validation], "requestBody": body(kind.schema), "responses": ok(kind.schema), "x-kubernetes-action": "put", "x-kubernetes-group-version-kind": gvk},
            "patch": {"description": format!("partially update the specified {}", kind.kind), "operationId": format!("patch{}", kind.kind), "parameters": [dry_run, field_manager, field_validation],
                "requestBody": {"content": {
                    "application/json-patch+json": patch_schema, "application/merge-patch+json": patch_schema,
                    "application/strategic-merge-patch+json": patch_schema, "application/apply-patch+yaml": patch_schema,
                }, "required": true},
                "responses": ok(kind.schema), "x-kubernetes-action": "patch", "x-kubernetes-group-version-kind": gvk},
            "delete": {"description": format!("delete a {}", kind.kind), "operationId": format!("delete{}", kind.kind), "responses": ok(kind.schema), "x-kubernetes-action": "delete", "x-kubernetes-group-version-kind": gvk},
            "parameters": [name, namespace],
        },
    })
}

fn openapi_v3(kind: &Kind) -> Value {
    let reference = |name: &str| format!("#/components/schemas/{name}");
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": v3_paths(kind),
        "components": {"schemas": schemas(kind, &reference)},
    })
}

/// kube's v3 root: each group version at a URL carrying its document's hash.
fn openapi_v3_root() -> Value {
    let paths: serde_json::Map<String, Value> = KINDS
        .iter()
        .map(|kind| {
            let document = openapi_v3(kind).to_string();
            let hash =
                hex::encode_upper(<sha2::Sha512 as sha2::Digest>::digest(document.as_bytes()));
            let path = kind.root().trim_start_matches('/').to_owned();
            let url = format!("/openapi/v3/{path}?hash={hash}");
            (path, json!({"serverRelativeURL": url}))
        })
        .collect();
    json!({"paths": paths})
}

/// v2: the same schemas under `definitions`, and v2's form of the paths
/// (parameters inline, `consumes` for patch).
fn openapi_v2() -> Value {
    let reference = |name: &str| format!("#/definitions/{name}");
    let mut definitions = serde_json::Map::new();
    let mut paths = serde_json::Map::new();
    for kind in KINDS {
        definitions.extend(schemas(kind, &reference));
        let gvk = json!({"group": kind.group, "version": kind.version, "kind": kind.kind});
        let ok = json!({"200": {"description": "OK", "schema": {"$ref": reference(kind.schema)}}});
        let field_validation = json!({"name": "fieldValidation", "in": "query", "type": "string", "uniqueItems": true, "description": "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields."});
        let body = json!({"name": "body", "in": "body", "required": true, "schema": {"$ref": reference(kind.schema)}});
        let patch_body =
            json!({"name": "body", "in": "body", "required": true, "schema": {"type": "object"}});
        paths.insert(
            format!("{}/namespaces/{{namespace}}/{}", kind.root(), kind.plural),
            json!({
                "get": {"operationId": format!("list{}", kind.kind), "responses": {"200": {"description": "OK", "schema": {"$ref": reference(&format!("{}List", kind.schema))}}}, "x-kubernetes-action": "list", "x-kubernetes-group-version-kind": gvk},
                "post": {"operationId": format!("create{}", kind.kind), "parameters": [body, field_validation], "responses": ok, "x-kubernetes-action": "post", "x-kubernetes-group-version-kind": gvk},
                "parameters": [{"name": "namespace", "in": "path", "required": true, "type": "string", "uniqueItems": true}],
            }),
        );
        paths.insert(
            format!("{}/namespaces/{{namespace}}/{}/{{name}}", kind.root(), kind.plural),
            json!({
                "get": {"operationId": format!("read{}", kind.kind), "responses": ok, "x-kubernetes-action": "get", "x-kubernetes-group-version-kind": gvk},
                "patch": {"operationId": format!("patch{}", kind.kind), "consumes": ["application/json-patch+json", "application/merge-patch+json", "application/strategic-merge-patch+json", "application/apply-patch+yaml"], "parameters": [patch_body, field_validation], "responses": ok, "x-kubernetes-action": "patch", "x-kubernetes-group-version-kind": gvk},
                "parameters": [
                    {"name": "name", "in": "path", "required": true, "type": "string", "uniqueItems": true},
                    {"name": "namespace", "in": "path", "required": true, "type": "string", "uniqueItems": true},
                ],
            }),
        );
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "definitions": definitions,
    })
}
