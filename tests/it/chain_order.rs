//! The handler chain's order is written once, in `chain::build`, which
//! records the steps it installs (`Chain::steps`). For a manifest that
//! installs every step (the quickstart's four Wasm stages and HSTS, plus
//! CORS and tracing), this holds to that record the one drawing of the chain
//! (docs/architecture.md), the chain line of `wasmgate check` and the
//! `chain` of `wasmgate try`'s report, so none of them can drift from the
//! code.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use wasmgate::server::Gateway;

use crate::support::*;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The steps docs/architecture.md draws, outermost first: the first word of
/// each line under `chain::build` in the drawing of "One request, end to end".
fn drawn_steps() -> Vec<String> {
    let doc = std::fs::read_to_string(repo().join("docs/architecture.md"))
        .expect("read docs/architecture.md");
    let section = doc
        .split("## One request, end to end")
        .nth(1)
        .expect("docs/architecture.md has a \"One request, end to end\" section");
    let drawing = section
        .split("```")
        .nth(1)
        .expect("the section starts with a drawing");
    let steps: Vec<String> = drawing
        .lines()
        .skip_while(|line| !line.contains("chain::build"))
        .skip(1)
        .take_while(|line| line.starts_with("        ") && !line.trim().is_empty())
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    assert!(
        steps.len() > 10,
        "the drawing's chain lines were not found:\n{drawing}"
    );
    steps
}

/// The quickstart manifest with CORS and tracing added, its components named by
/// absolute path, written to a temp folder.
fn every_step_manifest(dir: &Path) -> PathBuf {
    build_filters();
    let quickstart = std::fs::read_to_string(repo().join("examples/quickstart.toml"))
        .expect("read examples/quickstart.toml");
    let dist = repo().join("filters/dist/");
    let manifest = format!(
        "{}\n[cors]\nallowed_origins = ['^https://console\\.example$']\n\n[tracing]\nendpoint = \"127.0.0.1:4317\"\n",
        quickstart.replace("../filters/dist/", &dist.display().to_string())
    );
    let path = dir.join("every-step.toml");
    std::fs::write(&path, manifest).expect("write the manifest");
    path
}

fn run(args: &[&str], manifest: &Path) -> String {
    let output = Command::new(binary())
        .args(args)
        .arg("--config")
        .arg(manifest)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run wasmgate");
    assert!(
        output.status.success(),
        "wasmgate {args:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 output")
}

#[tokio::test]
async fn the_drawing_of_the_chain_is_what_build_installs() {
    let dir = new_dir();
    let manifest = every_step_manifest(dir.path());
    let config = wasmgate::config::load(&manifest).expect("the manifest is valid");
    let checked = Gateway::check(config).expect("the gateway builds");
    assert_eq!(
        drawn_steps(),
        checked.steps,
        "docs/architecture.md's drawing of the chain (left) differs from what chain::build installs (right)"
    );
}

#[test]
fn check_prints_the_chain_build_installs() {
    let dir = new_dir();
    let manifest = every_step_manifest(dir.path());
    let summary = run(&["check"], &manifest);
    let line = summary
        .lines()
        .find_map(|line| line.strip_prefix("chain: "))
        .unwrap_or_else(|| panic!("no chain line in:\n{summary}"));
    assert_eq!(line, drawn_steps().join(", "), "{summary}");
}

#[test]
fn try_reports_the_chain_build_installs() {
    let dir = new_dir();
    let manifest = every_step_manifest(dir.path());
    // The audit policy records nothing for /healthz, so standard output
    // holds the report alone.
    let stdout = run(&["try", "--path", "/healthz"], &manifest);
    let report: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|error| panic!("not a JSON report ({error}):\n{stdout}"));
    assert_eq!(
        report["chain"],
        serde_json::json!(drawn_steps()),
        "{stdout}"
    );
}
