//! kube's request metrics and the gateway's own, read from `/metrics` after
//! known traffic through a real gateway process (its metrics are its own:
//! nothing else in a test binary counts into them) and a real upstream:
//! kube's names, labels and buckets, unknown verbs and resources folded, and
//! the number of series bounded after 10,000 requests to random paths.

use std::collections::BTreeSet;
use std::time::Duration;

use super::sample;
use crate::support::{GatewayProcess, Upstream, bounded, get, http_client, new_dir, plaintext};
use crate::support::{build_filters, rbac_config_reading_metrics, rbac_with, routes, send, tokens};

/// A route for one API group to the upstream, and a catch-all prefix.
fn manifest(upstream: &Upstream) -> String {
    let up = upstream.url();
    plaintext(&format!(
        r#"
[[servers]]
name = "front"

[[servers.routes]]
api = "/apis/demo.example.io"
upstream = "{up}"

[[servers.routes]]
prefix = "/anything/"
upstream = "{up}"
"#
    ))
}

/// A gateway process run from `manifest`.
fn spawn(manifest: &str) -> (tempfile::TempDir, GatewayProcess) {
    let dir = new_dir();
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, manifest).expect("write the manifest");
    let gateway = GatewayProcess::spawn(&path);
    (dir, gateway)
}

async fn scrape(gateway: &GatewayProcess) -> String {
    let answer = get(&http_client(), &gateway.url("/metrics")).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.body
}

fn series_of(text: &str, name: &str) -> BTreeSet<String> {
    let prefix = format!("{name}{{");
    text.lines()
        .filter(|line| line.starts_with(&prefix))
        .map(|line| {
            line.rsplit_once(' ')
                .map_or(line, |(series, _)| series)
                .to_owned()
        })
        .collect()
}

const WIDGETS: &str = "/apis/demo.example.io/v1/namespaces/default/widgets";
const WIDGET_LABELS: &str = r#"dry_run="",group="demo.example.io",version="v1",resource="widgets",subresource="",scope="namespace",component="apiserver""#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn known_traffic_is_counted_under_kubes_names_labels_and_buckets() {
    let upstream = Upstream::start().await;
    let (_dir, gateway) = spawn(&manifest(&upstream));
    let client = http_client();
    for _ in 0..3 {
        assert_eq!(get(&client, &gateway.url(WIDGETS)).await.status, 200);
    }
    let created = crate::support::send(client.post(gateway.url(WIDGETS)).body("{}")).await;
    assert_eq!(created.status, 200);
    let dry_run = crate::support::send(
        client
            .post(gateway.url(&format!("{WIDGETS}?dryRun=All")))
            .body("{}"),
    )
    .await;
    assert_eq!(dry_run.status, 200);
    // A dry run kube does not know (it accepts only `All`) is `invalid`.
    let odd_dry_run = crate::support::send(
        client
            .post(gateway.url(&format!("{WIDGETS}?dryRun=Server")))
            .body("{}"),
    )
    .await;
    assert_eq!(odd_dry_run.status, 200);
    // An HTTP method kube does not know is folded into `other`.
    let odd = crate::support::send(client.request(
        reqwest::Method::from_bytes(b"FROB").expect("a method"),
        gateway.url(WIDGETS),
    ))
    .await;
    assert_eq!(odd.status, 200);
    // kube's verbs are the HTTP method's (a GET of a collection a LIST), its
    // scope `resource` for one named object and for a create; a request to
    // a connect subresource is a CONNECT.
    let widget = format!("{WIDGETS}/w1");
    for (method, path) in [
        (reqwest::Method::GET, widget.clone()),
        (reqwest::Method::PUT, widget.clone()),
        (reqwest::Method::DELETE, WIDGETS.to_owned()),
        (reqwest::Method::GET, format!("{widget}/log")),
    ] {
        let answer = crate::support::send(client.request(method, gateway.url(&path))).await;
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
    }
    // No route: a 404 from the gateway itself, under the folded resource.
    assert_eq!(
        get(&client, &gateway.url("/apis/nowhere.example.io/v1/things"))
            .await
            .status,
        404
    );

    let text = scrape(&gateway).await;
    let count = |verb: &str, labels: &str, code: u16| {
        let labels = format!(r#"verb="{verb}",{labels},code="{code}""#);
        sample(&text, "apiserver_request_total", &labels)
    };
    assert_eq!(count("LIST", WIDGET_LABELS, 200), Some(3.0), "{text}");
    let one_widget = WIDGET_LABELS.replace(r#"scope="namespace""#, r#"scope="resource""#);
    assert_eq!(count("POST", &one_widget, 200), Some(1.0), "{text}");
    let dry = one_widget.replace(r#"dry_run="""#, r#"dry_run="All""#);
    assert_eq!(count("POST", &dry, 200), Some(1.0), "{text}");
    let invalid = one_widget.replace(r#"dry_run="""#, r#"dry_run="invalid""#);
    assert_eq!(count("POST", &invalid, 200), Some(1.0), "{text}");
    assert_eq!(count("GET", &one_widget, 200), Some(1.0), "{text}");
    assert_eq!(count("PUT", &one_widget, 200), Some(1.0), "{text}");
    assert_eq!(count("DELETE", WIDGET_LABELS, 200), Some(1.0), "{text}");
    let log = one_widget.replace(r#"subresource="""#, r#"subresource="log""#);
    assert_eq!(count("CONNECT", &log, 200), Some(1.0), "{text}");
    assert_eq!(count("other", WIDGET_LABELS, 200), Some(1.0), "{text}");
    let folded = r#"dry_run="",group="other",version="other",resource="other",subresource="other",scope="cluster",component="apiserver""#;
    assert_eq!(count("LIST", folded, 404), Some(1.0), "{text}");

    // kube's duration buckets (5 ms to 60 s) and size buckets (1 kB up).
    let list = format!(r#"verb="LIST",{WIDGET_LABELS}"#);
    assert_eq!(
        sample(&text, "apiserver_request_duration_seconds_count", &list),
        Some(3.0),
        "{text}"
    );
    for bucket in ["0.005", "0.025", "60.0", "+Inf"] {
        let labels = format!(r#"le="{bucket}",{list}"#);
        assert!(
            sample(&text, "apiserver_request_duration_seconds_bucket", &labels).is_some(),
            "no {bucket} bucket:\n{text}"
        );
    }
    let sized = list.replace(r#"dry_run="","#, "");
    assert_eq!(
        sample(&text, "apiserver_response_sizes_count", &sized),
        Some(3.0),
        "{text}"
    );
    assert!(
        sample(
            &text,
            "apiserver_response_sizes_bucket",
            &format!(r#"le="1000.0",{sized}"#)
        )
        .is_some(),
        "{text}"
    );
    // Sizes are of read requests only, as in kube.
    let create_sizes = sized
        .replace("LIST", "POST")
        .replace(r#"scope="namespace""#, r#"scope="resource""#);
    assert_eq!(
        sample(&text, "apiserver_response_sizes_count", &create_sizes),
        None
    );

    // This scrape is itself a read-only request in flight.
    assert_eq!(
        sample(
            &text,
            "apiserver_current_inflight_requests",
            r#"request_kind="readOnly""#
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "apiserver_current_inflight_requests",
            r#"request_kind="mutating""#
        ),
        Some(0.0),
        "{text}"
    );
    // The native steps kube times: every request passed these.
    for filter in ["authentication", "impersonation", "maxinflight"] {
        let labels = format!(r#"filter="{filter}""#);
        let counted = sample(
            &text,
            "apiserver_request_filter_duration_seconds_count",
            &labels,
        );
        assert!(counted >= Some(7.0), "{filter}: {counted:?}\n{text}");
    }
    let up = upstream.url();
    let route = format!(r#"server="front",route="/apis/demo.example.io",upstream="{up}/""#);
    assert_eq!(
        sample(
            &text,
            "wasmgate_upstream_requests_total",
            &format!(r#"{route},code="2xx""#)
        ),
        Some(11.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "wasmgate_upstream_request_duration_seconds_count",
            &route
        ),
        Some(11.0),
        "{text}"
    );
    assert!(
        sample(
            &text,
            "wasmgate_upstream_connections_opened_total",
            &format!(r#"upstream="{up}/""#)
        ) >= Some(1.0),
        "{text}"
    );
    assert!(text.contains("\nwasmgate_chain_generation 1\n"), "{text}");
}

/// kube's `MonitorRequest` labels a request by the route it reaches
/// (`installer.go`): a list or watch that a `metadata.name` field selector
/// narrows to one object (request info's name) is still a collection's,
/// and only a GET watches (`getVerbIfWatch`, `metrics.go`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_by_name_and_a_head_with_watch_are_labelled_by_kubes_route() {
    let upstream = Upstream::start().await;
    let (_dir, gateway) = spawn(&manifest(&upstream));
    let client = http_client();
    let by_name = format!("{WIDGETS}?fieldSelector=metadata.name%3Dw1");
    for (method, path) in [
        (reqwest::Method::GET, by_name.clone()),
        (reqwest::Method::GET, format!("{by_name}&watch=1")),
        (reqwest::Method::HEAD, format!("{WIDGETS}?watch=1")),
    ] {
        let answer = send(client.request(method, gateway.url(&path))).await;
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
    }
    let text = scrape(&gateway).await;
    let count = |verb: &str, labels: &str| {
        let labels = format!(r#"verb="{verb}",{labels},code="200""#);
        sample(&text, "apiserver_request_total", &labels)
    };
    assert_eq!(count("LIST", WIDGET_LABELS), Some(2.0), "{text}");
    assert_eq!(count("WATCH", WIDGET_LABELS), Some(1.0), "{text}");
    let one_widget = WIDGET_LABELS.replace(r#"scope="namespace""#, r#"scope="resource""#);
    assert_eq!(count("GET", &one_widget), None, "{text}");
    assert_eq!(count("WATCH", &one_widget), None, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_random_paths_leave_the_series_bounded() {
    let upstream = Upstream::start().await;
    let (_dir, gateway) = spawn(&manifest(&upstream));
    let client = http_client();
    let base = gateway.url("");
    // A tiny xorshift: random names without a dependency, and a failure
    // reproducible from its seed.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let paths: Vec<String> = (0..10_000)
        .map(|i| {
            let (a, b) = (next(), next());
            match i % 4 {
                // Resources of a served group, proxied and answered 200.
                0 => format!("/apis/demo.example.io/v1/namespaces/n{a:x}/r{b:x}"),
                // Groups no route serves: 404 from the gateway.
                1 => format!("/apis/g{a:x}.example.io/v{}/r{b:x}", b % 7),
                // Non-resource paths, proxied by the prefix route.
                2 => format!("/anything/{a:x}/{b:x}"),
                // Non-resource paths nothing serves.
                _ => format!("/{a:x}"),
            }
        })
        .collect();
    let methods = ["GET", "POST", "PUT", "DELETE", "PATCH", "FROB", "XYZZY"];
    let sent = bounded("10,000 requests", async {
        let mut sent = 0usize;
        for chunk in paths.chunks(32) {
            let requests = chunk.iter().enumerate().map(|(index, path)| {
                let method = methods[(index + sent) % methods.len()];
                let request = client.request(
                    reqwest::Method::from_bytes(method.as_bytes()).expect("a method"),
                    format!("{base}{path}"),
                );
                async move { request.send().await.map(|response| response.status()) }
            });
            for status in futures_util::future::join_all(requests).await {
                status.expect("an answer");
            }
            sent += chunk.len();
        }
        sent
    })
    .await;
    assert_eq!(sent, 10_000);
    tokio::time::sleep(Duration::from_millis(100)).await;

    let text = scrape(&gateway).await;
    let totals = series_of(&text, "apiserver_request_total");
    // Every request is counted, in a bounded number of series: at most
    // 500 resources of their own (`MAX_RESOURCES`), times the few verbs,
    // scopes and codes each is answered with.
    let counted: f64 = text
        .lines()
        .filter(|line| line.starts_with("apiserver_request_total{"))
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum();
    assert!(counted >= 10_000.0, "only {counted} counted");
    let resources: BTreeSet<&str> = totals
        .iter()
        .filter_map(|series| series.split("resource=\"").nth(1)?.split('"').next())
        .collect();
    let paths: BTreeSet<&str> = totals
        .iter()
        .filter_map(|series| series.split("subresource=\"").nth(1)?.split('"').next())
        .collect();
    assert!(
        resources.len() + paths.len() <= 2 * 500 + 2,
        "{} resources, {} paths",
        resources.len(),
        paths.len()
    );
    assert!(
        totals.len() <= 4 * 500,
        "{} series of apiserver_request_total",
        totals.len()
    );
    // The folded series carry the rest, and unknown methods are `other`.
    assert!(
        totals
            .iter()
            .any(|series| series.contains(r#"resource="other""#))
    );
    let verbs: BTreeSet<&str> = totals
        .iter()
        .filter_map(|series| series.split("verb=\"").nth(1)?.split('"').next())
        .collect();
    assert!(verbs.contains("other"), "{verbs:?}");
    assert!(
        !verbs.contains("FROB") && !verbs.contains("frob"),
        "{verbs:?}"
    );
    assert!(verbs.len() <= 14, "{verbs:?}");
    // The whole exposition stays small enough to scrape every few seconds.
    assert!(text.len() < 8 << 20, "{} bytes of metrics", text.len());
}

/// The gateway's own refusals say nothing of what exists behind it: a
/// client without credentials that sends more random paths than there are
/// series to give (each answered 401 by authentication) leaves them all
/// folded, and the widgets a user then lists get their series as before.
/// Were a 401 enough to give a path series of its own, anyone could use
/// them up and fold every resource served later into `other`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_paths_the_gateway_refuses_use_up_no_series() {
    build_filters();
    let upstream = Upstream::start().await;
    let (_dir, gateway) = spawn(&plaintext(
        &[
            "[authentication]\nanonymous = false\n".to_owned(),
            tokens(),
            rbac_with(rbac_config_reading_metrics(
                serde_json::json!({"users": ["alice"]}),
            )),
            routes(&upstream.url()),
        ]
        .concat(),
    ));
    let client = http_client();
    // More than `request::MAX_RESOURCES`, the paths that get series.
    let paths: Vec<String> = (0..520)
        .map(|i| match i % 2 {
            0 => format!("/apis/g{i}.example.io/v1/things"),
            _ => format!("/junk/{i}"),
        })
        .collect();
    bounded("the refused requests", async {
        for chunk in paths.chunks(32) {
            let refused = chunk.iter().map(|path| send(client.get(gateway.url(path))));
            for answer in futures_util::future::join_all(refused).await {
                assert_eq!(answer.status, 401, "{}", answer.body);
            }
        }
    })
    .await;
    let listed = send(client.get(gateway.url(WIDGETS)).bearer_auth("alice-token")).await;
    assert_eq!(listed.status, 200, "{}", listed.body);

    let scrape = send(
        client
            .get(gateway.url("/metrics"))
            .bearer_auth("alice-token"),
    )
    .await;
    assert_eq!(scrape.status, 200, "{}", scrape.body);
    let text = scrape.body;
    let widgets = format!(r#"verb="LIST",{WIDGET_LABELS},code="200""#);
    assert_eq!(
        sample(&text, "apiserver_request_total", &widgets),
        Some(1.0),
        "{text}"
    );
    let folded = r#"dry_run="",group="other",version="other",resource="other",subresource="other",scope="cluster",component="apiserver",code="401""#;
    assert!(
        sample(
            &text,
            "apiserver_request_total",
            &format!(r#"verb="LIST",{folded}"#)
        ) >= Some(1.0),
        "{text}"
    );
    let totals = series_of(&text, "apiserver_request_total");
    assert!(
        totals
            .iter()
            .all(|series| !series.contains("g0.example.io") && !series.contains("/junk/")),
        "{totals:#?}"
    );
}

/// The sum of the samples named `name` whose labels include `label`.
fn sum_with(text: &str, name: &str, label: &str) -> f64 {
    let prefix = format!("{name}{{");
    text.lines()
        .filter(|line| line.starts_with(&prefix) && line.contains(label))
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// A WebSocket exec through the gateway to a real upstream that switches
/// protocols: the request is counted (code 101) and logged once its 101 is
/// sent, and it stays in `apiserver_longrunning_requests`, never in the
/// in-flight gauge, until the tunnel closes; then the gauge is 0 again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgraded_request_is_counted_at_its_101_and_long_running_until_its_tunnel_closes() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;

    let ca = crate::support::Ca::new("wasmgate test CA");
    let upstream =
        crate::support::TunnelUpstream::start(&ca.server_cert(), &ca, Duration::from_secs(1)).await;
    let dir = new_dir();
    std::fs::write(dir.path().join("ca.crt"), &ca.cert_pem).expect("write ca.crt");
    let up = upstream.url();
    let path = dir.path().join("gateway.toml");
    let manifest = plaintext(&format!(
        "[access_log]\nmode = \"on\"\n\n[[servers]]\nname = \"front\"\n\n[[servers.routes]]\nprefix = \"/api/\"\nupstream = {{ url = \"{up}\", ca = \"ca.crt\" }}\n"
    ));
    std::fs::write(&path, manifest).expect("write the manifest");
    let gateway = GatewayProcess::spawn(&path);

    let exec = "/api/v1/namespaces/default/pods/p/exec?command=sh&stdin=true";
    let stream = crate::support::connect(gateway.addr).await;
    let (mut socket, response) = bounded(
        "the WebSocket handshake",
        tokio_tungstenite::client_async(format!("ws://{}{exec}", gateway.addr), stream),
    )
    .await
    .expect("the gateway switches to WebSocket");
    assert_eq!(response.status(), 101);
    let message = Message::text("through the tunnel");
    socket.send(message.clone()).await.expect("send");
    let echoed = bounded("the echo", socket.next()).await;
    assert_eq!(echoed.expect("a message").expect("a good message"), message);

    // The tunnel is the only long-running request.
    let all = "";
    let open = scrape(&gateway).await;
    assert_eq!(
        sum_with(&open, "apiserver_request_total", r#"subresource="exec""#),
        1.0,
        "counted when its 101 was sent: {open}"
    );
    assert_eq!(
        sum_with(&open, "apiserver_longrunning_requests", all),
        1.0,
        "{open}"
    );
    assert_eq!(
        sum_with(&open, "apiserver_current_inflight_requests", ""),
        1.0,
        "only the scrape itself is in flight: {open}"
    );
    let logged = crate::support::eventually("the upgrade's access log line", || {
        let log = gateway.log_text();
        async move {
            log.lines()
                .find(|line| line.contains("/pods/p/exec") && line.contains("code=101"))
                .map(str::to_owned)
        }
    })
    .await;
    assert!(logged.contains("bytes_out=0"), "{logged}");

    socket.close(None).await.expect("close the WebSocket");
    drop(socket);
    crate::support::eventually("the long-running gauge back at 0", || async {
        let text = scrape(&gateway).await;
        (sum_with(&text, "apiserver_longrunning_requests", all) == 0.0).then_some(())
    })
    .await;
    let closed = scrape(&gateway).await;
    assert_eq!(
        sum_with(&closed, "apiserver_request_total", r#"code="101""#),
        1.0,
        "counted once: {closed}"
    );
}

/// Starts requests to `url` whose bodies the upstream holds, until one is
/// refused; the held ones, to drop once released, and the refusal.
async fn hold_until_refused(
    client: &reqwest::Client,
    url: &str,
) -> (Vec<reqwest::Response>, crate::support::Answer) {
    let mut held = Vec::new();
    for _ in 0..8 {
        let sent = client
            .post(url)
            .header(crate::support::MODE, "stream")
            .body("{}")
            .send();
        let response = bounded("a held request's head", sent)
            .await
            .expect("a response");
        if response.status() == 429 {
            let refused = crate::support::Answer::of(response).await;
            return (held, refused);
        }
        assert_eq!(response.status(), 200);
        held.push(response);
    }
    panic!("no request was refused");
}

/// The 429 of max-in-flight and of priority and fairness is a termination
/// in self-defense, as kube records it (`RecordRequestTermination` with
/// 429 in `staging/src/k8s.io/apiserver/pkg/server/filters/maxinflight.go`
/// and `priority-and-fairness.go`); only the timeout's were counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_429s_of_max_in_flight_and_flow_control_are_terminations() {
    let flow_control = r#"
[flow_control]

[[flow_control.priority_levels]]
name = "tight"
nominal_concurrency_shares = 100
reject = true

[[flow_control.flow_schemas]]
name = "tight"
priority_level = "tight"
matching_precedence = 500

[[flow_control.flow_schemas.rules]]
groups = ["system:unauthenticated", "system:authenticated"]
resource_rules = [{ verbs = ["*"], api_groups = ["*"], resources = ["*"], namespaces = ["*"], cluster_scope = true }]
"#;
    for (limiter, extra) in [("max-in-flight", ""), ("flow control", flow_control)] {
        let upstream = Upstream::start().await;
        let limits = "max_requests_in_flight = 1\nmax_mutating_requests_in_flight = 1";
        let manifest = crate::support::limits_manifest(&upstream, limits);
        let (_dir, gateway) = spawn(&format!("{manifest}\n{extra}"));
        let client = http_client();
        let url = gateway.url("/apis/g.example.io/v1/namespaces/a/widgets");
        let (held, refused) = hold_until_refused(&client, &url).await;
        assert_eq!(refused.status, 429, "{limiter}: {}", refused.body);
        upstream.release(held.len());
        for response in held {
            bounded("a held body", response.text())
                .await
                .expect("a body");
        }
        let text = scrape(&gateway).await;
        let code = r#"code="429""#;
        assert_eq!(
            sum_with(&text, "apiserver_request_terminations_total", code),
            1.0,
            "{limiter}: {text}"
        );
        assert_eq!(
            sum_with(&text, "apiserver_request_total", code),
            1.0,
            "{limiter}: {text}"
        );
    }
}
