//! A filter gets no WASI capability unless the manifest grants it: no
//! environment, no files, no standard streams; granted, it sees exactly
//! what was named.

use std::time::Duration;

use wasmgate::server::Gateway;

fn fault_authz() -> String {
    let status = std::process::Command::new("bash")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/filters/build.sh"))
        .arg("--only")
        .arg("rust")
        .stdout(std::process::Stdio::null())
        .status()
        .expect("bash runs");
    assert!(status.success(), "filters/build.sh failed");
    concat!(env!("CARGO_MANIFEST_DIR"), "/filters/dist/fault-authz.wasm").to_owned()
}

async fn denial_reason(manifest: &str, dir: &std::path::Path, word: &str) -> String {
    let path = dir.join("gw.toml");
    std::fs::write(&path, manifest).expect("manifest written");
    let config = wasmgate::config::load(&path).expect("valid manifest");
    let gateway = Gateway::new(config)
        .expect("gateway")
        .start()
        .await
        .expect("started");
    let url = format!("http://{}/fault/{word}", gateway.local_addr);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let response = client.get(url).send().await.expect("response");
    assert_eq!(response.status(), 403);
    let body: serde_json::Value = response.json().await.expect("a Status");
    gateway.shutdown().await;
    body["message"].as_str().unwrap_or_default().to_owned()
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

#[tokio::test]
async fn nothing_is_granted_by_default() {
    let component = fault_authz();
    let dir = tempfile::tempdir().expect("tempdir");
    // SAFETY: set before any gateway runs; nothing else reads this variable.
    unsafe { std::env::set_var("FAULT_ENV", "the gateway's own environment") };
    let text = manifest(&component, "");
    assert!(
        denial_reason(&text, dir.path(), "env")
            .await
            .ends_with("env: unset")
    );
    let file = denial_reason(&text, dir.path(), "file").await;
    assert!(file.contains("file unreadable"), "{file}");
}

#[tokio::test]
async fn granted_environment_and_folders_are_visible() {
    let component = fault_authz();
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    std::fs::create_dir(&data).expect("data folder");
    std::fs::write(data.join("fault.txt"), "granted contents\n").expect("file written");
    let wasi = r#"wasi = { env = { FAULT_ENV = "from the manifest" }, dirs = [{ host = "data", guest = "/data" }] }"#;
    let text = manifest(&component, wasi);
    assert!(
        denial_reason(&text, dir.path(), "env")
            .await
            .ends_with("env: from the manifest")
    );
    assert!(
        denial_reason(&text, dir.path(), "file")
            .await
            .ends_with("file: granted contents")
    );
}

/// Without a folder to open, the WASI context is made on the filter's first
/// WASI call, with every grant in it.
#[tokio::test]
async fn an_environment_granted_alone_is_visible() {
    let component = fault_authz();
    let dir = tempfile::tempdir().expect("tempdir");
    let wasi = r#"wasi = { env = { FAULT_ENV = "granted alone" } }"#;
    let text = manifest(&component, wasi);
    assert!(
        denial_reason(&text, dir.path(), "env")
            .await
            .ends_with("env: granted alone")
    );
}

#[test]
fn a_granted_folder_must_exist() {
    let dir = tempfile::tempdir().expect("tempdir");
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
