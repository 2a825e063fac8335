//! How long a hot reload takes with every component already compiled (the
//! usual edit: a filter's config, a route, a limit), through the real
//! reloader of a running gateway, against a baseline measured in the same
//! run: the reload of a manifest with no filters.
//!
//!     cargo bench --bench reload

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark harness: a setup that fails stops the run with its message"
)]

use std::path::Path;
use std::time::Duration;

use criterion::Criterion;
use wasmgate::reload_trigger::ReloadOutcome;
use wasmgate::server::{Gateway, RunningGateway};

const GROUP: &str = "reload";

fn main() {
    let status = std::process::Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("filters/build.sh"))
        .stdout(std::process::Stdio::null())
        .status();
    assert!(status.is_ok_and(|s| s.success()), "filters/build.sh failed");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let plain = start(&runtime, &dir.path().join("plain.toml"), "");
    let full = start(&runtime, &dir.path().join("full.toml"), &full_chain());

    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let mut group = criterion.benchmark_group(GROUP);
    group.bench_function("no-filters", |b| {
        b.to_async(&runtime).iter(|| reload(&plain))
    });
    group.bench_function("full-chain-cached", |b| {
        b.to_async(&runtime).iter(|| reload(&full))
    });
    group.finish();
    criterion.final_summary();
    print_ratio();
}

async fn reload(gateway: &RunningGateway) {
    match gateway.reload().await {
        Some(ReloadOutcome::Swapped { .. }) => {}
        other => panic!("reload failed: {other:?}"),
    }
}

fn start(runtime: &tokio::runtime::Runtime, manifest: &Path, stages: &str) -> RunningGateway {
    let text = format!(
        "[listen]\naddress = \"127.0.0.1:0\"\nplaintext = true\n{stages}\n[[servers]]\nname = \"s\"\n[[servers.routes]]\npath = \"/v\"\nstatic = {{ body = \"ok\" }}\n"
    );
    std::fs::write(manifest, text).expect("manifest written");
    runtime.block_on(async {
        let config = wasmgate::config::load(manifest).expect("valid manifest");
        Gateway::new(config)
            .expect("gateway")
            .start()
            .await
            .expect("started")
    })
}

/// The quickstart's four stages.
fn full_chain() -> String {
    let dist = Path::new(env!("CARGO_MANIFEST_DIR")).join("filters/dist");
    let dist = dist.display();
    format!(
        r#"
[authentication]
anonymous = true
[[authentication.filters]]
name = "tokens"
component = "{dist}/token-authn.wasm"
config = {{ tokens = [{{ token = "t", user = "alice" }}] }}
[[authorization.filters]]
name = "rbac"
component = "{dist}/rbac-authz.wasm"
config = {{ roles = [{{ name = "all", rules = [{{ verbs = ["*"], nonResourceURLs = ["*"] }}] }}], bindings = [{{ role = "all", groups = ["system:authenticated"] }}] }}
[[admission.mutating]]
name = "labels"
component = "{dist}/label-defaults.wasm"
config = {{ labels = {{ team = "platform" }} }}
[[admission.validating]]
name = "policy"
component = "{dist}/policy-deny.wasm"
config = {{ rules = [{{ pointer = "/spec/replicas", op = "gt", value = 10 }}] }}
[audit]
[[audit.policy]]
level = "Metadata"
[[audit.filters]]
name = "audit"
component = "{dist}/jsonl-audit.wasm"
sink = "/dev/null"
"#
    )
}

fn print_ratio() {
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
        .join("criterion")
        .join(GROUP);
    let mean = |id: &str| -> Option<f64> {
        let text = std::fs::read_to_string(dir.join(id).join("new/estimates.json")).ok()?;
        serde_json::from_str::<serde_json::Value>(&text).ok()?["mean"]["point_estimate"].as_f64()
    };
    if let (Some(plain), Some(full)) = (mean("no-filters"), mean("full-chain-cached")) {
        println!("\nreload, no filters:           {:>8.1} µs", plain / 1000.0);
        println!(
            "reload, 5 filters (cached):   {:>8.1} µs   {:.1}x the baseline",
            full / 1000.0,
            full / plain
        );
    }
}
