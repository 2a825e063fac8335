//! A real Prometheus (Debian's `prometheus`, installed when missing)
//! scrapes a real gateway process with the scrape config and alerting rules
//! docs/observability.md ships: after two scrapes its HTTP API answers
//! `apiserver_request_total` of known traffic, the rules are loaded and
//! healthy, and every query of the Grafana dashboard runs. `promtool check
//! rules` passes on the rules file.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::debian::program;
use crate::support::{
    ChildGuard, GatewayProcess, Upstream, eventually, get, http_client, new_dir, plaintext,
};
use serde_json::Value;

const WIDGETS: &str = "/apis/demo.example.io/v1/namespaces/default/widgets";

fn docs(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docs/observability")
        .join(file)
}

fn promtool() -> PathBuf {
    program("promtool", "prometheus")
}

#[test]
fn promtool_accepts_the_alerting_rules() {
    let output = Command::new(promtool())
        .args(["check", "rules"])
        .arg(docs("wasmgate-alerts.yml"))
        .output()
        .expect("run promtool");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(text.contains("SUCCESS: 7 rules found"), "{text}");
}

/// Prometheus on a free loopback port with its data in `dir`, scraping
/// `target` every second with the docs' config and rules.
fn start_prometheus(dir: &Path, target: &str) -> (ChildGuard, String) {
    let config = std::fs::read_to_string(docs("prometheus.yml"))
        .expect("the docs' scrape config")
        .replace("127.0.0.1:8443", target)
        .replace("scrape_interval: 15s", "scrape_interval: 1s")
        .replace("evaluation_interval: 15s", "evaluation_interval: 1s");
    std::fs::write(dir.join("prometheus.yml"), config).expect("write the config");
    std::fs::copy(docs("wasmgate-alerts.yml"), dir.join("wasmgate-alerts.yml"))
        .expect("copy the rules");
    let check = Command::new(promtool())
        .args(["check", "config"])
        .arg(dir.join("prometheus.yml"))
        .output()
        .expect("run promtool");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    let address = format!("127.0.0.1:{}", crate::support::free_port());
    let child = Command::new(program("prometheus", "prometheus"))
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={address}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("prometheus.log")).expect("a log file"))
        .spawn()
        .expect("start prometheus");
    (ChildGuard::new(child), format!("http://{address}"))
}

/// One instant query's result vector.
async fn query(api: &str, promql: &str) -> Option<Vec<Value>> {
    let response = http_client()
        .get(format!("{api}/api/v1/query"))
        .query(&[("query", promql)])
        .send()
        .await
        .ok()?;
    let body: Value = response.json().await.ok()?;
    (body["status"] == "success").then(|| body["data"]["result"].as_array().cloned())?
}

fn value(sample: &Value) -> f64 {
    sample["value"][1]
        .as_str()
        .and_then(|text| text.parse().ok())
        .unwrap_or(f64::NAN)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_kubes_request_metrics_of_known_traffic() {
    let upstream = Upstream::start().await;
    let dir = new_dir();
    let up = upstream.url();
    let manifest = plaintext(&format!(
        "\n[[servers]]\nname = \"front\"\n\n[[servers.routes]]\napi = \"/apis/demo.example.io\"\nupstream = \"{up}\"\n"
    ));
    std::fs::write(dir.path().join("gateway.toml"), manifest).expect("write the manifest");
    let gateway = GatewayProcess::spawn(&dir.path().join("gateway.toml"));
    let client = http_client();
    for _ in 0..7 {
        assert_eq!(get(&client, &gateway.url(WIDGETS)).await.status, 200);
    }

    let (prometheus, api) = start_prometheus(dir.path(), &gateway.addr.to_string());
    let log = dir.path().join("prometheus.log");
    let scrapes = eventually("two scrapes of the gateway", || {
        let api = api.clone();
        async move {
            let result = query(&api, r#"count_over_time(up{job="wasmgate"}[5m])"#).await?;
            result.first().map(value).filter(|count| *count >= 2.0)
        }
    })
    .await;
    assert!(scrapes >= 2.0);
    let up = query(&api, r#"up{job="wasmgate"}"#).await.expect("up");
    assert_eq!(
        up.first().map(value),
        Some(1.0),
        "{:?}\n{}",
        up,
        std::fs::read_to_string(&log).unwrap_or_default()
    );

    let lists = query(
        &api,
        r#"apiserver_request_total{job="wasmgate",verb="LIST",group="demo.example.io",resource="widgets",scope="namespace",code="200"}"#,
    )
    .await
    .expect("the query runs");
    assert_eq!(lists.len(), 1, "{lists:?}");
    assert_eq!(value(&lists[0]), 7.0, "{lists:?}");
    assert_eq!(lists[0]["metric"]["component"], "apiserver");
    // The scrapes themselves are counted: GETs of the non-resource /metrics.
    let scraped = query(
        &api,
        r#"apiserver_request_total{job="wasmgate",verb="GET",subresource="/metrics",code="200"}"#,
    )
    .await
    .expect("the query runs");
    assert!(scraped.first().map(value) >= Some(1.0), "{scraped:?}");

    // The rules are loaded and evaluate without error.
    let rules = eventually("the rules evaluated", || {
        let api = api.clone();
        async move {
            let body: Value = http_client()
                .get(format!("{api}/api/v1/rules"))
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            let rules = body["data"]["groups"][0]["rules"].as_array()?.clone();
            rules
                .iter()
                .all(|rule| rule["health"] == "ok")
                .then_some(rules)
        }
    })
    .await;
    assert_eq!(rules.len(), 7);

    // Every query of the dashboard runs against the scraped data.
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(docs("wasmgate-dashboard.json")).expect("the dashboard"),
    )
    .expect("the dashboard is JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() >= 10);
    for target in panels
        .iter()
        .flat_map(|panel| panel["targets"].as_array().into_iter().flatten())
    {
        let expr = target["expr"]
            .as_str()
            .expect("an expression")
            .replace("$job", ".*")
            .replace("$__rate_interval", "1m")
            .replace("$__range", "5m");
        assert!(
            query(&api, &expr).await.is_some(),
            "the dashboard's query fails: {expr}"
        );
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    drop(prometheus);
}
