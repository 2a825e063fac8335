//! A filter gets no WASI capability unless the manifest grants it: no
//! environment, no files, no standard streams; granted, it sees exactly
//! what was named.

use crate::support::{GatewayProcess, TestGateway, component_path, get, http_client, new_dir};

fn fault_authz() -> String {
    component_path("fault-authz").display().to_string()
}

/// The message of the 403 the fault authorizer answers at `url`
/// (`/fault/env` or `/fault/file`): what the filter saw.
async fn denial_reason(url: &str) -> String {
    let answer = get(&http_client(), url).await;
    let status = answer.assert_status(403, "Forbidden");
    status["message"].as_str().unwrap_or_default().to_owned()
}

fn manifest(component: &str, wasi: &str) -> String {
    format!(
        r#"
[listen]
address = "127.0.0.1:0"
plaintext = true
[[authorization.filters]]
name = "faults"
component = "{component}"
{wasi}
[[servers]]
name = "s"
[[servers.routes]]
prefix = "/"
static = {{ body = "reached" }}
"#
    )
}

/// The binary runs with `FAULT_ENV` in its own environment (set on the
/// child, not in this process, whose environment every test shares): the
/// filter sees neither it nor any file.
#[tokio::test]
async fn nothing_is_granted_by_default() {
    let dir = new_dir();
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, manifest(&fault_authz(), "")).expect("write the manifest");
    let gateway =
        GatewayProcess::spawn_with_env(&path, &[("FAULT_ENV", "the gateway's own environment")]);
    let env = denial_reason(&gateway.url("/fault/env")).await;
    assert!(env.ends_with("env: unset"), "{env}");
    let file = denial_reason(&gateway.url("/fault/file")).await;
    assert!(file.contains("file unreadable"), "{file}");
}

#[tokio::test]
async fn granted_environment_and_folders_are_visible() {
    let dir = new_dir();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).expect("data folder");
    std::fs::write(data.join("fault.txt"), "granted contents\n").expect("file written");
    let wasi = r#"wasi = { env = { FAULT_ENV = "from the manifest" }, dirs = [{ host = "data", guest = "/data" }] }"#;
    let gateway = TestGateway::start_in(dir, &manifest(&fault_authz(), wasi)).await;
    let env = denial_reason(&gateway.url("/fault/env")).await;
    assert!(env.ends_with("env: from the manifest"), "{env}");
    let file = denial_reason(&gateway.url("/fault/file")).await;
    assert!(file.ends_with("file: granted contents"), "{file}");
    gateway.shutdown().await;
}

/// Without a folder to open, the WASI context is made on the filter's first
/// WASI call, with every grant in it.
#[tokio::test]
async fn an_environment_granted_alone_is_visible() {
    let wasi = r#"wasi = { env = { FAULT_ENV = "granted alone" } }"#;
    let gateway = TestGateway::start(&manifest(&fault_authz(), wasi)).await;
    let env = denial_reason(&gateway.url("/fault/env")).await;
    assert!(env.ends_with("env: granted alone"), "{env}");
    gateway.shutdown().await;
}

#[test]
fn a_granted_folder_must_exist() {
    let dir = new_dir();
    let path = dir.path().join("gw.toml");
    let text = manifest(
        "x.wasm",
        r#"wasi = { dirs = [{ host = "missing", guest = "/data" }] }"#,
    );
    let error = wasmgate::config::parse(&path, &text)
        .expect_err("refused")
        .to_string();
    assert!(
        error.contains("authorization.filters[0].wasi.dirs") && error.contains("is not a folder"),
        "{error}"
    );
}
