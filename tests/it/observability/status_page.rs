//! The live status page of a real gateway process, with the shipped
//! token-authn, rbac-authz and label-defaults filters and kube's suggested
//! API Priority and Fairness, after known traffic and a refused and an
//! applied reload: `/debug/status` (JSON) says what the chain (every step
//! `chain::build` installed, in order), the routes, the reloads and flow
//! control's levels did; `/debug/ui` is authorized as
//! a non-resource URL; and a real headless Chromium (Debian's `chromium`,
//! installed when missing) runs the page's script and shows the same
//! numbers. A screenshot is kept as a test artifact
//! (`<target>/tmp/status-page.png`).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::debian::program;
use crate::support::{
    ChildGuard, GatewayProcess, Upstream, check, get, http_client, new_dir, plaintext, send,
};
use crate::support::{WIDGETS, build_filters, filter, rbac_config, rbac_with, routes, tokens};
use serde_json::{Value, json};

/// The tests' RBAC; anonymous requests may read the status page (the
/// browser sends no token), alice may use every `/debug/` path.
fn rbac_with_status_page() -> String {
    let mut config = rbac_config();
    let roles = config["roles"].as_array_mut().expect("roles");
    roles.push(json!({"name": "status-page", "rules": [{"verbs": ["get"], "nonResourceURLs": ["/debug/ui", "/debug/ui/*", "/debug/status"]}]}));
    roles.push(
        json!({"name": "debug", "rules": [{"verbs": ["*"], "nonResourceURLs": ["/debug/*"]}]}),
    );
    let bindings = config["bindings"].as_array_mut().expect("bindings");
    bindings.push(json!({"role": "status-page", "groups": ["system:unauthenticated"]}));
    bindings.push(json!({"role": "debug", "users": ["alice"]}));
    rbac_with(config)
}

fn manifest(upstream: &Upstream, limits: &str) -> String {
    plaintext(
        &[
            format!(
                "[limits]\n{limits}\n\n[flow_control]\nenabled = true\n\n[authentication]\nanonymous = true\n"
            ),
            tokens(),
            rbac_with_status_page(),
            filter(
                "admission.mutating",
                "labels",
                "label-defaults",
                Some(json!({"labels": {"team": "a"}})),
                "",
            ),
            routes(&upstream.url()),
        ]
        .concat(),
    )
}

/// Runs headless Chromium on `url` with `args`, bounded; its stdout.
fn chromium(profile: &Path, args: &[String], url: &str) -> String {
    let child = Command::new(program("chromium", "chromium"))
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            // Long enough for the script's first polls to have run.
            "--virtual-time-budget=6000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let mut child = ChildGuard::new(child);
    let stdout = child.child_mut().stdout.take().expect("chromium's stdout");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let mut stdout = stdout;
        std::io::Read::read_to_string(&mut stdout, &mut text).map(|_| text)
    });
    let status = child.wait_exit(Duration::from_secs(90));
    assert!(status.success(), "chromium failed: {status}");
    reader
        .join()
        .expect("the reader thread")
        .expect("chromium's output")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_shows_the_chain_routes_and_reloads_in_a_real_browser() {
    build_filters();
    let upstream = Upstream::start().await;
    let dir = new_dir();
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, manifest(&upstream, "")).expect("write the manifest");
    let gateway = GatewayProcess::spawn(&path);
    let client = http_client();
    let as_alice = |request: reqwest::RequestBuilder| request.bearer_auth("alice-token");

    // Known traffic: 3 lists and 2 creates as alice.
    for _ in 0..3 {
        assert_eq!(
            send(as_alice(client.get(gateway.url(WIDGETS))))
                .await
                .status,
            200
        );
    }
    for name in ["w1", "w2"] {
        let created = send(
            as_alice(client.post(gateway.url(WIDGETS))).json(&json!({"metadata": {"name": name}})),
        )
        .await;
        assert_eq!(created.status, 200, "{}", created.body);
    }
    // A refused edit, then the good manifest again.
    std::fs::write(&path, manifest(&upstream, "max_requests_in_flight = -5"))
        .expect("write the bad manifest");
    let refused = send(as_alice(client.post(gateway.url("/debug/reload")))).await;
    assert_eq!(refused.status, 422, "{}", refused.body);
    std::fs::write(&path, manifest(&upstream, "")).expect("write the manifest again");
    let applied = send(as_alice(client.post(gateway.url("/debug/reload")))).await;
    assert_eq!(applied.status, 200, "{}", applied.body);

    // A non-resource URL: bob (authenticated, no rule for it) is refused.
    let bob = send(
        client
            .get(gateway.url("/debug/ui"))
            .bearer_auth("bob-token"),
    )
    .await;
    assert_eq!(bob.status, 403, "{}", bob.body);
    assert!(
        bob.body.contains(r#"cannot get path \"/debug/ui\""#),
        "{}",
        bob.body
    );

    // The JSON a script reads.
    let status: Value =
        serde_json::from_str(&get(&client, &gateway.url("/debug/status")).await.body)
            .expect("/debug/status is JSON");
    let chain = status["chain"].as_array().expect("the chain");
    let steps: Vec<&str> = chain
        .iter()
        .filter_map(|step| step["step"].as_str())
        .collect();
    // Every step, as `wasmgate check` lists them.
    let checked = check(&path);
    assert!(checked.success, "{}", checked.stderr);
    let listed = checked
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix("chain: "))
        .unwrap_or_default()
        .to_owned();
    assert_eq!(listed, steps.join(", "), "{}", checked.stdout);
    let timed: Vec<(&str, &str)> = chain
        .iter()
        .filter_map(|step| Some((step["step"].as_str()?, step["timed_as"].as_str()?)))
        .collect();
    assert_eq!(
        timed,
        [
            ("authentication", "authentication"),
            ("impersonation", "impersonation"),
            ("priority-and-fairness", "priorityandfairness"),
            ("authorization", "authorization"),
            ("admission", "admission"),
        ]
    );
    let step = |name: &str| {
        chain
            .iter()
            .find(|step| step["step"] == name)
            .unwrap_or_else(|| panic!("no step {name}: {chain:?}"))
    };
    assert!(
        step("authorization")["p99_seconds"].as_f64() > Some(0.0),
        "{}",
        step("authorization")
    );
    let tokens = &step("authentication")["filters"][0];
    assert_eq!(tokens["name"], "tokens");
    assert!(tokens["calls"]["answer"].as_f64() >= Some(5.0), "{tokens}");
    assert!(
        tokens["p99_seconds"].as_f64().is_some_and(|p99| p99 > 0.0),
        "{tokens}"
    );
    let labels = &step("admission")["filters"][0];
    assert_eq!(labels["name"], "labels");
    assert_eq!(labels["kind"], "mutating");
    assert_eq!(labels["calls"]["answer"], 2.0, "{labels}");
    let route = &status["servers"][0]["routes"][0];
    assert_eq!(route["route"], "/apis/demo.example.io/v1");
    assert_eq!(route["responses"]["2xx"], 5.0, "{route}");
    // The start, and the applied reload (the file watcher may add its own).
    assert!(
        status["generation"].as_u64() >= Some(2),
        "{}",
        status["generation"]
    );
    // Flow control's levels: kube's suggested ones. Each snapshot has its
    // own controller, so the counts start again at the applied reload:
    // three lists after it.
    for _ in 0..3 {
        let listed = send(as_alice(client.get(gateway.url(WIDGETS)))).await;
        assert_eq!(listed.status, 200, "{}", listed.body);
    }
    let status: Value =
        serde_json::from_str(&get(&client, &gateway.url("/debug/status")).await.body)
            .expect("/debug/status is JSON");
    let levels = status["flow_control"]
        .as_array()
        .expect("flow control's levels");
    let names: Vec<&str> = levels.iter().filter_map(|l| l["name"].as_str()).collect();
    for level in ["exempt", "global-default", "catch-all"] {
        assert!(names.contains(&level), "{names:?}");
    }
    let global = levels
        .iter()
        .find(|level| level["name"] == "global-default")
        .expect("global-default");
    // The three lists, and this poll itself, executing now.
    assert!(
        global["dispatched"].as_f64() >= Some(4.0),
        "{}",
        global["dispatched"]
    );
    assert_eq!(global["executing"], 1.0, "{}", global["executing"]);
    assert_eq!(
        global["queues"].as_array().map(Vec::len),
        Some(128),
        "kube's suggested global-default has 128 queues"
    );
    assert_eq!(status["config_revision"], Value::Null, "a manifest file");
    let reloads = status["reloads"].as_array().expect("reloads");
    assert_eq!(reloads[0]["result"], "success", "{reloads:?}");
    let failure = reloads
        .iter()
        .find(|reload| reload["result"] == "failure")
        .unwrap_or_else(|| panic!("no refused reload: {reloads:?}"));
    assert!(
        failure["error"]
            .as_str()
            .is_some_and(|error| error.contains("max_requests_in_flight")),
        "{failure}"
    );

    // The page, in a real browser, after its script has run.
    let profile = tempfile::tempdir().expect("a profile dir");
    let dom = chromium(
        profile.path(),
        &["--dump-dom".to_owned()],
        &gateway.url("/debug/ui"),
    );
    assert!(
        dom.contains("data-polled="),
        "the script never polled:\n{dom}"
    );
    for expected in [
        r#"data-step="authentication""#,
        r#"data-step="admission""#,
        r#"data-filter="tokens""#,
        r#"data-filter="labels""#,
        r#"data-route="/apis/demo.example.io/v1""#,
        "server gw",
        "max_requests_in_flight",
        "healthy",
        r#"data-level="global-default""#,
        r#"data-level="exempt""#,
        "manifest file",
        r#"data-step="request-metrics""#,
        "not timed",
    ] {
        assert!(
            dom.contains(expected),
            "{expected} is not on the page:\n{dom}"
        );
    }
    // The steps are drawn in request order.
    let at = |needle: &str| dom.find(needle).unwrap_or(usize::MAX);
    assert!(at(r#"data-step="authentication""#) < at(r#"data-step="authorization""#));
    assert!(at(r#"data-step="authorization""#) < at(r#"data-step="admission""#));
    // The mutating filter's two calls, as the page writes them.
    let labels_box = &dom[at(r#"data-filter="labels""#)..];
    assert!(labels_box.contains("2 calls"), "{labels_box}");
    assert!(
        labels_box.contains(r#"data-outcome="answer">answer 2<"#),
        "{labels_box}"
    );

    let screenshot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("status-page.png");
    let _ = std::fs::remove_file(&screenshot);
    let profile = tempfile::tempdir().expect("a profile dir");
    chromium(
        profile.path(),
        &[
            format!("--screenshot={}", screenshot.display()),
            "--window-size=1280,1500".to_owned(),
            "--hide-scrollbars".to_owned(),
        ],
        &gateway.url("/debug/ui"),
    );
    let png = std::fs::read(&screenshot).expect("the screenshot");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
}
