//! Helpers of the Wasm stage tests (declared from each such test file as
//! `#[path = "common/wasm.rs"] mod wasm_common;`, beside `mod common;`): the
//! filter components built once per test binary with `filters/build.sh`,
//! manifest pieces, the user a request ran as (read from kube's 403), audit
//! log reading, JWT signing and a client PKI with organizations.
//!
//! Every wait here is bounded, like those of `common`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use base64ct::{Base64UrlUnpadded, Encoding};
use serde_json::{Value, json};

use crate::common::{Answer, BOUND, get, http_client, send};

/// The namespaced collection most tests ask for.
pub const WIDGETS: &str = "/apis/demo.example.io/v1/namespaces/default/widgets";

/// A path no RBAC rule of [`rbac`] allows: its 403 names the user.
pub const WHOAMI: &str = "/whoami";

// ---------------------------------------------------------------------------
// Components
// ---------------------------------------------------------------------------

/// Runs `filters/build.sh` once per test binary; fails the test with the
/// script's standard error if it fails.
pub fn build_filters() {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let output = Command::new("bash")
            .arg("filters/build.sh")
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .map_err(|error| format!("cannot run filters/build.sh: {error}"))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!(
                "filters/build.sh failed ({}):\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    });
    if let Err(message) = built {
        panic!("{message}");
    }
}

/// The absolute path of `filters/dist/<name>.wasm`, built first.
pub fn component_path(name: &str) -> PathBuf {
    build_filters();
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("filters/dist")
        .join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "filters/build.sh produced no {}",
        path.display()
    );
    path
}

/// Every component `filters/build.sh` put in `filters/dist`.
pub fn all_components() -> Vec<String> {
    build_filters();
    let dist = Path::new(env!("CARGO_MANIFEST_DIR")).join("filters/dist");
    let mut names: Vec<String> = std::fs::read_dir(&dist)
        .expect("read filters/dist")
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".wasm").map(str::to_owned)
        })
        .collect();
    names.sort();
    names
}

// ---------------------------------------------------------------------------
// Manifest pieces
// ---------------------------------------------------------------------------

/// A JSON value as a TOML inline value (keys quoted, strings JSON-escaped,
/// which TOML basic strings accept).
pub fn toml_inline(value: &Value) -> String {
    match value {
        Value::Null => panic!("TOML has no null"),
        Value::Bool(_) | Value::Number(_) | Value::String(_) => value.to_string(),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(toml_inline).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(map) => format!(
            "{{ {} }}",
            map.iter()
                .map(|(key, value)| format!(
                    "{} = {}",
                    Value::String(key.clone()),
                    toml_inline(value)
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// One `[[table]]` filter entry: `component` is a name in `filters/dist`,
/// `settings` more `key = value` lines (`timeout = "100ms"`).
pub fn filter(
    table: &str,
    name: &str,
    component: &str,
    config: Option<Value>,
    settings: &str,
) -> String {
    let path = component_path(component);
    let config = config
        .map(|config| format!("config = {}\n", toml_inline(&config)))
        .unwrap_or_default();
    format!(
        "\n[[{table}]]\nname = \"{name}\"\ncomponent = \"{}\"\n{config}{settings}\n",
        path.display()
    )
}

/// The two users of [`tokens`]: alice (group dev) and bob (group viewers).
pub fn tokens_config() -> Value {
    json!({"tokens": [
        {"token": "alice-token", "user": "alice", "uid": "1001", "groups": ["dev"]},
        {"token": "bob-token", "user": "bob", "uid": "1002", "groups": ["viewers"]},
    ]})
}

/// A token-authn authenticator named `tokens`.
pub fn tokens() -> String {
    filter(
        "authentication.filters",
        "tokens",
        "token-authn",
        Some(tokens_config()),
        "",
    )
}

/// The RBAC of most tests: alice administers widgets in `default`, group
/// viewers reads them everywhere, everyone may use `/open/*`, `/fault/*` and
/// `/healthz`, alice may impersonate bob (only), only bob may get
/// `/private/bob`. Nobody may get [`WHOAMI`].
pub fn rbac_config() -> Value {
    json!({
        "roles": [
            {"name": "widget-admin", "rules": [{"verbs": ["*"], "apiGroups": ["demo.example.io"], "resources": ["widgets"]}]},
            {"name": "widget-viewer", "rules": [{"verbs": ["get", "list", "watch"], "apiGroups": ["demo.example.io"], "resources": ["widgets"]}]},
            {"name": "open", "rules": [{"verbs": ["*"], "nonResourceURLs": ["/open/*", "/fault/*", "/healthz"]}]},
            {"name": "impersonate-bob", "rules": [{"verbs": ["impersonate"], "apiGroups": [""], "resources": ["users"], "resourceNames": ["bob"]}]},
            {"name": "bob-only", "rules": [{"verbs": ["get"], "nonResourceURLs": ["/private/bob"]}]},
        ],
        "bindings": [
            {"role": "widget-admin", "namespace": "default", "users": ["alice"]},
            {"role": "widget-viewer", "groups": ["viewers"]},
            {"role": "open", "groups": ["system:authenticated", "system:unauthenticated"]},
            {"role": "impersonate-bob", "users": ["alice"]},
            {"role": "bob-only", "users": ["bob"]},
        ],
    })
}

/// An rbac-authz authorizer named `rbac`, with [`rbac_config`].
pub fn rbac() -> String {
    filter(
        "authorization.filters",
        "rbac",
        "rbac-authz",
        Some(rbac_config()),
        "",
    )
}

/// One server routing the widgets API, `/open/`, `/fault/` and `/private/`
/// to `upstream` (a URL).
pub fn routes(upstream: &str) -> String {
    let mut out = String::from("\n[[servers]]\nname = \"gw\"\n");
    out.push_str(&format!(
        "\n[[servers.routes]]\napi = \"/apis/demo.example.io/v1\"\nupstream = \"{upstream}\"\n"
    ));
    for prefix in ["/open/", "/fault/", "/private/"] {
        out.push_str(&format!(
            "\n[[servers.routes]]\nprefix = \"{prefix}\"\nupstream = \"{upstream}\"\n"
        ));
    }
    out
}

// ---------------------------------------------------------------------------
// Reading answers
// ---------------------------------------------------------------------------

/// The user a request ran as, read from kube's 403 for [`WHOAMI`]
/// (`forbidden: User "alice" cannot get path "/whoami"...`).
pub async fn whoami(request: reqwest::RequestBuilder) -> String {
    let answer = send(request).await;
    let status = answer.assert_status(403, "Forbidden");
    let message = status["message"].as_str().expect("a message");
    let rest = message
        .strip_prefix("forbidden: User \"")
        .unwrap_or_else(|| panic!("not a path 403: {message}"));
    let (user, tail) = rest.split_once('"').expect("a quoted user");
    assert!(
        tail.starts_with(" cannot get path \"/whoami\""),
        "{message}"
    );
    user.to_owned()
}

/// The upstream's JSON echo (method, path, headers, body) of a 200.
pub fn echo(answer: &Answer) -> Value {
    assert_eq!(
        answer.status, 200,
        "the request should reach the upstream: {}",
        answer.body
    );
    assert_eq!(
        answer.header("x-upstream"),
        Some("yes"),
        "not the upstream's answer: {}",
        answer.body
    );
    answer.json()
}

/// The one value of header `name` the upstream received, if any.
pub fn echoed_header(echo: &Value, name: &str) -> Option<String> {
    let values = echo["headers"].get(name)?.as_array()?;
    assert_eq!(values.len(), 1, "{name} sent once: {values:?}");
    values[0].as_str().map(str::to_owned)
}

/// The body the upstream received, parsed as JSON.
pub fn echoed_body(echo: &Value) -> Value {
    let body = echo["body"].as_str().expect("an echoed body");
    serde_json::from_str(body)
        .unwrap_or_else(|error| panic!("the upstream got no JSON ({error}): {body}"))
}

/// Asserts a failure Status leaks no internal detail of the filter: no
/// filter, component, trap or Wasm words.
pub fn assert_no_internal_detail(status: &Value) {
    let message = status["message"]
        .as_str()
        .expect("a message")
        .to_lowercase();
    for word in [
        "fault",
        "wasm",
        "trap",
        "panic",
        "unreachable",
        "requested",
        "backtrace",
        ".rs",
        "memory",
        "deadline",
    ] {
        assert!(
            !message.contains(word),
            "internal detail {word:?} in the client's message: {message}"
        );
    }
}

/// The value of `wasmgate_filter_calls_total` for one filter and outcome,
/// read from a plaintext gateway's `/metrics` URL (0 before the first call).
pub async fn filter_calls(metrics_url: &str, filter: &str, outcome: &str) -> u64 {
    let metrics = get(&http_client(), metrics_url).await;
    assert_eq!(metrics.status, 200, "{}", metrics.body);
    let prefix =
        format!("wasmgate_filter_calls_total{{filter=\"{filter}\",outcome=\"{outcome}\"}} ");
    metrics
        .body
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map_or(0, |count| count.parse().expect("a count"))
}

/// The value of one series (`name{labels}`, as printed) of this process's
/// metrics, 0 when absent: for gateways running in this process, without
/// a request (which would itself pass through the filters it counts).
pub fn local_metric(series: &str) -> u64 {
    let prefix = format!("{series} ");
    wasmgate::metrics::metrics()
        .encode()
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map_or(0, |value| value.parse().expect("a count"))
}

/// [`filter_calls`], read with [`local_metric`].
pub fn local_filter_calls(filter: &str, outcome: &str) -> u64 {
    local_metric(&format!(
        "wasmgate_filter_calls_total{{filter=\"{filter}\",outcome=\"{outcome}\"}}"
    ))
}

// ---------------------------------------------------------------------------
// Audit logs
// ---------------------------------------------------------------------------

/// Every event in a JSON-lines audit file (none if it does not exist yet).
/// Only whole lines count: a last line without its newline is an event the
/// auditor is still writing, read in the middle of its write.
pub fn audit_events(path: &Path) -> Vec<Value> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    text.split_inclusive('\n')
        .filter_map(|line| line.strip_suffix('\n'))
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|error| panic!("not a JSON event ({error}): {line}"))
        })
        .collect()
}

/// The events of one request, in file order.
pub fn events_of(path: &Path, audit_id: &str) -> Vec<Value> {
    audit_events(path)
        .into_iter()
        .filter(|event| event["auditID"] == audit_id)
        .collect()
}

/// The stages of one request's events, in file order.
pub fn stages_of(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|event| event["stage"].as_str().expect("a stage").to_owned())
        .collect()
}

/// Polls (every 20 ms, at most [`BOUND`]) until the request's events are at
/// least `count`, and returns them.
pub async fn wait_for_events(path: &Path, audit_id: &str, count: usize) -> Vec<Value> {
    let started = Instant::now();
    loop {
        let events = events_of(path, audit_id);
        if events.len() >= count {
            return events;
        }
        assert!(
            started.elapsed() < BOUND,
            "timed out waiting for {count} events of {audit_id}; have {}: {events:?}",
            events.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---------------------------------------------------------------------------
// The process
// ---------------------------------------------------------------------------

/// This process's resident set size, in KiB (`VmRSS` of /proc/self/status).
pub fn vm_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line")
}

// ---------------------------------------------------------------------------
// JWT
// ---------------------------------------------------------------------------

pub const JWT_ISSUER: &str = "https://issuer.wasmgate.test";
pub const JWT_AUDIENCE: &str = "wasmgate";

struct JwtKeys {
    rsa: rsa::pkcs1v15::SigningKey<rsa::sha2::Sha256>,
    rsa_public_pem: String,
    ec: p256::ecdsa::SigningKey,
}

/// Throw-away signing keys, generated once per test binary.
fn jwt_keys() -> &'static JwtKeys {
    use rsa::Generate;
    use rsa::pkcs8::{EncodePublicKey, LineEnding};
    static KEYS: OnceLock<JwtKeys> = OnceLock::new();
    KEYS.get_or_init(|| {
        let private = rsa::PrivateKey::generate();
        let rsa_public_pem = private
            .to_public_key()
            .to_public_key_pem(LineEnding::LF)
            .expect("a PEM public key");
        JwtKeys {
            rsa: rsa::pkcs1v15::SigningKey::new(private),
            rsa_public_pem,
            ec: p256::ecdsa::SigningKey::generate(),
        }
    })
}

/// A jwt-authn config trusting the RSA key (PEM) and the P-256 key (JWK).
pub fn jwt_config() -> Value {
    let keys = jwt_keys();
    let point = keys.ec.verifying_key().to_sec1_point(false);
    let bytes = point.as_bytes();
    json!({
        "issuer": JWT_ISSUER,
        "audiences": [JWT_AUDIENCE],
        "keys": [
            {"pem": keys.rsa_public_pem},
            {"kty": "EC", "crv": "P-256", "kid": "ec-1", "x": Base64UrlUnpadded::encode_string(&bytes[1..33]),
             "y": Base64UrlUnpadded::encode_string(&bytes[33..65])},
        ],
        "groups_claim": "groups",
    })
}

/// Seconds since the epoch, now.
pub fn unix_now() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970");
    i64::try_from(now.as_secs()).expect("seconds fit")
}

/// Claims for `sub`, valid for five minutes, for [`JWT_AUDIENCE`].
pub fn jwt_claims(sub: &str) -> Value {
    let now = unix_now();
    json!({"iss": JWT_ISSUER, "aud": JWT_AUDIENCE, "sub": sub, "iat": now - 10, "nbf": now - 10, "exp": now + 300, "groups": ["jwt-users"]})
}

/// A compact JWS of `claims`, signed with `alg` (`RS256` or `ES256`).
pub fn sign_jwt(alg: &str, claims: &Value) -> String {
    use rsa::signature::{SignatureEncoding, Signer};
    let keys = jwt_keys();
    let header = match alg {
        "ES256" => json!({"alg": "ES256", "typ": "JWT", "kid": "ec-1"}),
        _ => json!({"alg": alg, "typ": "JWT"}),
    };
    let encode = |value: &Value| Base64UrlUnpadded::encode_string(value.to_string().as_bytes());
    let input = format!("{}.{}", encode(&header), encode(claims));
    let signature: Vec<u8> = match alg {
        "RS256" => keys.rsa.sign(input.as_bytes()).to_vec(),
        "ES256" => {
            let signature: p256::ecdsa::Signature = keys.ec.sign(input.as_bytes());
            signature.to_vec()
        }
        other => panic!("no key for {other}"),
    };
    format!("{input}.{}", Base64UrlUnpadded::encode_string(&signature))
}
