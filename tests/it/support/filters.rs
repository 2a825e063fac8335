//! The filter components, built once per test run by `filters/build.sh`,
//! and manifest pieces that use them: filter entries, the token users and
//! the RBAC most tests share, and reading the user a request ran as.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::{Value, json};

use super::clients::send;

/// The namespaced collection most tests ask for.
pub const WIDGETS: &str = "/apis/demo.example.io/v1/namespaces/default/widgets";

/// A path no RBAC rule of [`rbac`] allows: its 403 names the user.
pub const WHOAMI: &str = "/whoami";

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

/// A fixture every engine refuses to load: it holds more memories and
/// tables than a filter may.
pub const REFUSED_COMPONENT: &str = "hoard-authz";

/// A fixture the pooled engine refuses to load, and the fallback engine at
/// its first call: it makes more core instances than a filter may.
pub const TOO_MANY_INSTANCES: &str = "throng-authz";

/// Every component `filters/build.sh` put in `filters/dist` that the
/// gateway loads (all but [`REFUSED_COMPONENT`] and [`TOO_MANY_INSTANCES`]).
pub fn all_components() -> Vec<String> {
    build_filters();
    let dist = Path::new(env!("CARGO_MANIFEST_DIR")).join("filters/dist");
    let mut names: Vec<String> = std::fs::read_dir(&dist)
        .expect("read filters/dist")
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".wasm").map(str::to_owned)
        })
        .filter(|name| name != REFUSED_COMPONENT && name != TOO_MANY_INSTANCES)
        .collect();
    names.sort();
    names
}

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

/// A jsonl-audit auditor named `audit-log` writing to `audit.jsonl` beside
/// the manifest.
pub fn audit_log_sink() -> String {
    filter(
        "audit.filters",
        "audit-log",
        "jsonl-audit",
        None,
        "sink = \"audit.jsonl\"\n",
    )
}

/// The two users of [`tokens`]: alice (group dev) and bob (group viewers).
pub fn tokens_config() -> Value {
    json!({"tokens": [
        {"token": "alice-token", "user": "alice", "uid": "1001", "groups": ["dev"]},
        {"token": "bob-token", "user": "bob", "uid": "1002", "groups": ["viewers"]},
    ]})
}

/// A token-authn authenticator named `tokens`, with [`tokens_config`].
pub fn tokens() -> String {
    tokens_with(tokens_config())
}

/// A token-authn authenticator named `tokens`, with these users.
pub fn tokens_with(config: Value) -> String {
    filter(
        "authentication.filters",
        "tokens",
        "token-authn",
        Some(config),
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

/// [`rbac_config`], and a role that may `get` `/metrics` bound to
/// `subjects` (`{"users": [...]}` or `{"groups": [...]}`).
pub fn rbac_config_reading_metrics(subjects: Value) -> Value {
    let mut config = rbac_config();
    config["roles"].as_array_mut().expect("roles").push(
        json!({"name": "metrics", "rules": [{"verbs": ["get"], "nonResourceURLs": ["/metrics"]}]}),
    );
    let mut binding = subjects;
    binding["role"] = json!("metrics");
    config["bindings"]
        .as_array_mut()
        .expect("bindings")
        .push(binding);
    config
}

/// An rbac-authz authorizer named `rbac`, with [`rbac_config`].
pub fn rbac() -> String {
    rbac_with(rbac_config())
}

/// An rbac-authz authorizer named `rbac`, with these roles and bindings.
pub fn rbac_with(config: Value) -> String {
    filter(
        "authorization.filters",
        "rbac",
        "rbac-authz",
        Some(config),
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
