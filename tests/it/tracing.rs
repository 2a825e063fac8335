//! `[tracing]`: the spans of a request reach a real OTLP/gRPC receiver as
//! one tree (the request's span, the steps', the filter calls' and the
//! upstream call's), and the upstream is told the trace with the gateway's
//! upstream span as its parent. A client's `traceparent` is followed only
//! for `system:masters` and `system:monitoring`, from just inside
//! authentication, as kube's `WithTracing`; anyone else's span is linked
//! from a new trace sampled at the gateway's rate, so no client can have
//! its requests recorded by asking. An answer from a decision cache has its
//! filter span (marked a hit, with no instance), a self-subject access
//! review's authorizer calls are in its trace, a collector that is not
//! there costs a request nothing, a reload moves the spans to the new
//! endpoint, and shutdown sends the last of them.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::*;

/// A client's span: trace `trace_id`, span `span_id`, sampled or not.
fn traceparent(trace_id: &str, span_id: &str, sampled: bool) -> String {
    let flags = if sampled { "01" } else { "00" };
    format!("00-{trace_id}-{span_id}-{flags}")
}

/// The trace ID, parent span ID and flags of the `traceparent` the
/// upstream received.
fn upstream_traceparent(echo: &serde_json::Value) -> (String, String, String) {
    let value = echoed_header(echo, "traceparent").expect("the upstream got a traceparent");
    let parts: Vec<&str> = value.split('-').collect();
    assert_eq!(parts.len(), 4, "a traceparent: {value}");
    assert_eq!(parts[0], "00", "version 00: {value}");
    (
        parts[1].to_owned(),
        parts[2].to_owned(),
        parts[3].to_owned(),
    )
}

/// A receiver, an upstream, and a gateway tracing to the receiver at `rate`
/// per million in front of it (as [`traced_gateway`]).
async fn traced(rate: u32) -> (Collector, Upstream, TestGateway) {
    let collector = Collector::start().await;
    let upstream = Upstream::start().await;
    let gateway = traced_gateway(&tracing_table(collector.addr, rate), &upstream).await;
    (collector, upstream, gateway)
}

/// The tokens of most tests, and two privileged users: `root` (in
/// `system:masters`) and `prometheus` (in `system:monitoring`).
fn traced_tokens() -> String {
    let mut config = tokens_config();
    let tokens = config["tokens"].as_array_mut().expect("tokens");
    tokens.push(json!({"token": ROOT, "user": "root", "groups": ["system:masters"]}));
    tokens.push(json!({"token": MONITOR, "user": "prometheus", "groups": ["system:monitoring"]}));
    tokens_with(config)
}

/// A member of `system:masters`, whose `traceparent` is followed.
const ROOT: &str = "root-token";
/// A member of `system:monitoring`, whose `traceparent` is followed.
const MONITOR: &str = "monitor-token";
/// A user in neither, whose `traceparent` is only linked.
const ALICE: &str = "alice-token";

/// The RBAC of most tests, with widget-admin also bound to root and
/// prometheus.
fn traced_rbac_config() -> serde_json::Value {
    let mut config = rbac_config();
    config["bindings"]
        .as_array_mut()
        .expect("bindings")
        .push(json!({"role": "widget-admin", "users": ["root", "prometheus"]}));
    config
}

/// A gateway with `tracing` (a `[tracing]` table), the token authenticator
/// (with [`traced_tokens`]) and RBAC, in front of `upstream`.
async fn traced_gateway(tracing: &str, upstream: &Upstream) -> TestGateway {
    let manifest = plaintext(&format!(
        "{tracing}[authentication]\nanonymous = true\n{}{}{}",
        traced_tokens(),
        rbac_with(traced_rbac_config()),
        routes(&upstream.url())
    ));
    TestGateway::start(&manifest).await
}

/// GET the widgets with `token`, and `traceparent` when given: the echo.
async fn get_widgets(
    gateway: &TestGateway,
    token: &str,
    traceparent: Option<&str>,
) -> serde_json::Value {
    let mut request = http_client().get(gateway.url(WIDGETS)).bearer_auth(token);
    if let Some(value) = traceparent {
        request = request.header("traceparent", value);
    }
    echo(&send(request).await)
}

fn one<'a>(spans: &'a [ReceivedSpan], name: &str) -> &'a ReceivedSpan {
    let found: Vec<&ReceivedSpan> = spans.iter().filter(|span| span.name == name).collect();
    assert_eq!(found.len(), 1, "one span {name:?} in {spans:#?}");
    found[0]
}

/// Sends a privileged request that traces `trace_id`, and checks that its
/// spans are all the collector has received: none of the requests before.
async fn only_trace_exported(gateway: &TestGateway, collector: &Collector, trace_id: &str) {
    let parent = traceparent(trace_id, "00f067aa0ba902b7", true);
    get_widgets(gateway, ROOT, Some(&parent)).await;
    collector.trace(trace_id, 6).await;
    let others: Vec<ReceivedSpan> = collector
        .spans()
        .into_iter()
        .filter(|span| span.trace_id != trace_id)
        .collect();
    assert!(others.is_empty(), "other traces recorded: {others:#?}");
}

/// The request span of a widgets GET.
const GET_WIDGETS: &str = "GET /apis/demo.example.io/v1/namespaces/{:namespace}/widgets";

#[tokio::test]
async fn one_request_is_one_span_tree() {
    let (collector, upstream, gateway) = traced(1_000_000).await;
    let echo = get_widgets(&gateway, ALICE, None).await;

    // The upstream is in the gateway's trace, under its upstream span.
    let (trace_id, sent_parent, sent_flags) = upstream_traceparent(&echo);
    assert_eq!(sent_flags, "01");

    // request, 4 steps, 2 filter calls, the upstream call.
    let spans = collector.trace(&trace_id, 8).await;
    eprintln!("{}", render_tree(&spans, ""));
    assert!(spans.iter().all(|span| span.service == "wasmgate"));

    let request = one(&spans, GET_WIDGETS);
    assert_eq!(request.parent_span_id, "", "the trace's root");
    assert_eq!(request.kind, 2, "a server span");
    assert_eq!(request.attribute("http.request.method"), Some("GET"));
    assert_eq!(request.attribute("http.target"), Some(WIDGETS));
    assert_eq!(request.attribute("http.response.status_code"), Some("200"));
    assert!(
        request
            .attribute("audit-id")
            .is_some_and(|id| !id.is_empty()),
        "kube's audit-id attribute: {request:?}"
    );

    let steps = [
        "authentication",
        "impersonation",
        "max-in-flight",
        "authorization",
    ];
    for step in steps {
        let span = one(&spans, step);
        assert_eq!(
            span.parent_span_id, request.span_id,
            "{step} under the request"
        );
        assert_eq!(span.kind, 1, "{step}: an internal span");
    }
    // Each step's span ends where the next begins: siblings, in chain order.
    let starts: Vec<u64> = steps.iter().map(|step| one(&spans, step).start).collect();
    assert!(starts.is_sorted(), "steps in chain order: {starts:?}");

    for (name, step, outcome) in [
        ("authentication/tokens", "authentication", "authenticated"),
        ("authorization/rbac", "authorization", "allow"),
    ] {
        let span = one(&spans, name);
        assert_eq!(
            span.parent_span_id,
            one(&spans, step).span_id,
            "{name} under {step}"
        );
        assert_eq!(span.attribute("wasmgate.filter.stage"), Some(step));
        assert_eq!(span.attribute("wasmgate.filter.outcome"), Some(outcome));
        assert_eq!(
            span.attribute("wasmgate.filter.isolation"),
            Some("per-request")
        );
        assert_eq!(
            span.attribute("wasmgate.filter.fresh_instance"),
            Some("true")
        );
        assert_eq!(span.attribute("wasmgate.filter.cache"), None, "no cache");
        assert_eq!(span.status, 0, "{name} succeeded");
    }

    let call = one(&spans, "GET");
    assert_eq!(call.kind, 3, "a client span");
    assert_eq!(call.parent_span_id, request.span_id);
    assert_eq!(
        call.span_id, sent_parent,
        "the upstream's parent is the upstream span"
    );
    assert_eq!(call.attribute("http.response.status_code"), Some("200"));
    assert!(
        call.attribute("url.full") == Some(&format!("{}{WIDGETS}", upstream.url())),
        "{call:?}"
    );
    gateway.shutdown().await;
}

/// kube's `WithTracing` follows the `traceparent` of `system:masters` and
/// `system:monitoring` (`notSystemPrivilegedGroup` in
/// `staging/src/k8s.io/apiserver/pkg/endpoints/filters/traces.go`), and
/// sits inside authentication: the request's span is the client span's
/// child, in the client's trace, from the steps after authentication on.
#[tokio::test]
async fn a_privileged_clients_traceparent_is_followed_from_after_authentication() {
    let (collector, _upstream, gateway) = traced(0).await;
    let client_span = "00f067aa0ba902b7";
    for (token, trace_id) in [
        (ROOT, "4bf92f3577b34da6a3ce929d0e0e4736"),
        (MONITOR, "4bf92f3577b34da6a3ce929d0e0e4737"),
    ] {
        let echo = get_widgets(
            &gateway,
            token,
            Some(&traceparent(trace_id, client_span, true)),
        )
        .await;
        let (sent_trace, sent_parent, sent_flags) = upstream_traceparent(&echo);
        assert_eq!(
            (sent_trace.as_str(), sent_flags.as_str()),
            (trace_id, "01"),
            "{token}"
        );

        // request, 3 steps, 1 filter call, the upstream call.
        let spans = collector.trace(trace_id, 6).await;
        eprintln!("{}", render_tree(&spans, client_span));
        let request = one(&spans, GET_WIDGETS);
        assert_eq!(request.parent_span_id, client_span, "{token}");
        assert!(request.links.is_empty(), "{request:?}");
        for step in ["impersonation", "max-in-flight", "authorization"] {
            assert_eq!(one(&spans, step).parent_span_id, request.span_id, "{step}");
        }
        assert!(
            spans
                .iter()
                .all(|span| !span.name.starts_with("authentication")),
            "authentication comes before the trace is decided: {spans:#?}"
        );
        assert_eq!(one(&spans, "GET").span_id, sent_parent);
    }
    gateway.shutdown().await;
}

/// Anyone else's `traceparent`, with credentials or without, is kube's
/// public endpoint (otelhttp's `WithPublicEndpointFn`): a new trace,
/// sampled at the gateway's rate and told to the upstream, whose request
/// span links to the client's span. At rate 0 a client's sampled flag
/// records nothing: no client has its requests recorded by asking.
#[tokio::test]
async fn anyone_elses_traceparent_is_only_linked_and_never_forces_a_trace() {
    let client_trace = "7bf92f3577b34da6a3ce929d0e0e4736";
    let client_span = "00f067aa0ba902b7";
    let sampled = traceparent(client_trace, client_span, true);

    let (collector, _upstream, gateway) = traced(1_000_000).await;
    let seen = get_widgets(&gateway, ALICE, Some(&sampled)).await;
    let (trace_id, sent_parent, sent_flags) = upstream_traceparent(&seen);
    assert_ne!(trace_id, client_trace, "a new trace");
    assert_eq!(sent_flags, "01", "sampled at the gateway's rate");
    let spans = collector.trace(&trace_id, 6).await;
    let request = one(&spans, GET_WIDGETS);
    assert_eq!(request.parent_span_id, "", "the new trace's root");
    assert_eq!(
        request.links,
        vec![(client_trace.to_owned(), client_span.to_owned())],
        "linked to the client's span"
    );
    assert_eq!(one(&spans, "GET").span_id, sent_parent);
    assert!(
        collector
            .spans()
            .iter()
            .all(|span| span.trace_id != client_trace),
        "nothing in the client's trace"
    );
    gateway.shutdown().await;

    let (collector, upstream, gateway) = traced(0).await;
    let seen = get_widgets(&gateway, ALICE, Some(&sampled)).await;
    let (trace_id, _, sent_flags) = upstream_traceparent(&seen);
    assert_ne!(trace_id, client_trace);
    assert_eq!(sent_flags, "00", "not sampled at rate 0");
    // Nor without credentials (an anonymous request, on an open path).
    let answer = send(
        http_client()
            .get(gateway.url("/open/x"))
            .header("traceparent", &sampled),
    )
    .await;
    let (trace_id, _, sent_flags) = upstream_traceparent(&echo(&answer));
    assert_ne!(trace_id, client_trace);
    assert_eq!(sent_flags, "00", "not sampled at rate 0");
    // A privileged request after them is the only trace exported.
    only_trace_exported(&gateway, &collector, "8bf92f3577b34da6a3ce929d0e0e4736").await;
    drop(upstream);
    gateway.shutdown().await;
}

/// kube's `http.target` is the request URI as the client wrote it on the
/// request line, path and query (`r.URL.RequestURI()` in
/// `staging/src/k8s.io/apiserver/pkg/endpoints/filters/traces.go`),
/// whatever the protocol: over HTTP/2, whose request names the scheme and
/// host apart, it is the `:path` alone, not a URL.
#[tokio::test]
async fn over_http2_the_requests_http_target_is_its_path_and_query() {
    let (collector, _upstream, gateway) = traced(1_000_000).await;
    let trace_id = "5bf92f3577b34da6a3ce929d0e0e4736";
    let target = format!("{WIDGETS}?limit=1");
    let answer = send(
        h2c_client()
            .get(gateway.url(&target))
            .bearer_auth(ROOT)
            .header(
                "traceparent",
                traceparent(trace_id, "00f067aa0ba902b7", true),
            ),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let spans = collector.trace(trace_id, 6).await;
    let request = one(&spans, GET_WIDGETS);
    assert_eq!(
        request.attribute("network.protocol.version"),
        Some("2"),
        "{request:?}"
    );
    assert_eq!(request.attribute("http.target"), Some(target.as_str()));
    gateway.shutdown().await;
}

#[tokio::test]
async fn a_pooled_filters_reused_instance_and_its_refusal_are_in_its_span() {
    let collector = Collector::start().await;
    let upstream = Upstream::start().await;
    let manifest = plaintext(&format!(
        "{}{}{}{}",
        tracing_table(collector.addr, 1_000_000),
        tokens(),
        filter(
            "authorization.filters",
            "rbac",
            "rbac-authz",
            Some(rbac_config()),
            "isolation = \"pooled\"\n"
        ),
        routes(&upstream.url())
    ));
    let gateway = TestGateway::start(&manifest).await;
    let (first, _, _) = upstream_traceparent(&get_widgets(&gateway, ALICE, None).await);
    // bob may not delete widgets: RBAC has no opinion (so 403), in the instance alice's
    // request left in the pool. bob's traceparent is linked from a new trace.
    let second = "22222222222222222222222222222222";
    let answer = send(
        http_client()
            .delete(gateway.url(&format!("{WIDGETS}/w1")))
            .bearer_auth("bob-token")
            .header("traceparent", traceparent(second, "00f067aa0ba902b7", true)),
    )
    .await;
    answer.assert_status(403, "Forbidden");

    let spans = collector.trace(&first, 8).await;
    let rbac = one(&spans, "authorization/rbac");
    assert_eq!(rbac.attribute("wasmgate.filter.isolation"), Some("pooled"));
    assert_eq!(
        rbac.attribute("wasmgate.filter.fresh_instance"),
        Some("true")
    );

    // No upstream call this time: request, 3 steps, 1 filter.
    let spans = collector.linking_to(second, 5).await;
    let rbac = one(&spans, "authorization/rbac");
    assert_eq!(
        rbac.attribute("wasmgate.filter.outcome"),
        Some("no-opinion")
    );
    assert_eq!(
        rbac.attribute("wasmgate.filter.fresh_instance"),
        Some("false")
    );
    let request = one(
        &spans,
        "DELETE /apis/demo.example.io/v1/namespaces/{:namespace}/widgets/{:name}",
    );
    assert_eq!(request.attribute("http.response.status_code"), Some("403"));
    assert!(
        spans.iter().all(|span| span.name != "DELETE"),
        "no upstream call"
    );
    gateway.shutdown().await;
}

#[tokio::test]
async fn a_cache_hit_has_a_filter_span_marked_hit_with_no_instance() {
    let collector = Collector::start().await;
    let upstream = Upstream::start().await;
    let manifest = plaintext(&format!(
        "{}{}{}{}",
        tracing_table(collector.addr, 1_000_000),
        filter(
            "authentication.filters",
            "tokens",
            "token-authn",
            Some(tokens_config()),
            // Its key is what it is given: each request comes on a
            // connection of its own.
            "headers = [\"authorization\"]\nreads = []\ncache = true\n"
        ),
        filter(
            "authorization.filters",
            "rbac",
            "rbac-authz",
            Some(rbac_config()),
            "cache = true\n"
        ),
        routes(&upstream.url())
    ));
    let gateway = TestGateway::start(&manifest).await;
    let (first, _, _) = upstream_traceparent(&get_widgets(&gateway, ALICE, None).await);
    let (second, _, _) = upstream_traceparent(&get_widgets(&gateway, ALICE, None).await);
    // The same tree both times: request, 4 steps, 2 filters, the upstream.
    for (trace_id, cache, fresh) in [(first, "miss", Some("true")), (second, "hit", None)] {
        let spans = collector.trace(&trace_id, 8).await;
        for (name, outcome) in [
            ("authentication/tokens", "authenticated"),
            ("authorization/rbac", "allow"),
        ] {
            let span = one(&spans, name);
            assert_eq!(
                span.attribute("wasmgate.filter.cache"),
                Some(cache),
                "{name}"
            );
            assert_eq!(
                span.attribute("wasmgate.filter.outcome"),
                Some(outcome),
                "{name}: the cached answer"
            );
            assert_eq!(
                span.attribute("wasmgate.filter.fresh_instance"),
                fresh,
                "{name} ({cache}): an instance only when the filter ran"
            );
        }
    }
    gateway.shutdown().await;
}

#[tokio::test]
async fn a_self_subject_access_reviews_authorizer_calls_are_in_its_trace() {
    let collector = Collector::start().await;
    let upstream = Upstream::start().await;
    let mut config = traced_rbac_config();
    config["roles"].as_array_mut().expect("roles").push(serde_json::json!({
        "name": "reviews",
        "rules": [{"verbs": ["create"], "apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews"]}],
    }));
    config["bindings"]
        .as_array_mut()
        .expect("bindings")
        .push(serde_json::json!({"role": "reviews", "users": ["root"]}));
    let manifest = plaintext(&format!(
        "{}{}{}{}",
        tracing_table(collector.addr, 1_000_000),
        traced_tokens(),
        rbac_with(config),
        routes(&upstream.url())
    ));
    let gateway = TestGateway::start(&manifest).await;
    let trace_id = "66666666666666666666666666666666";
    let review = serde_json::json!({
        "kind": "SelfSubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "spec": {"resourceAttributes": {"verb": "get", "group": "demo.example.io", "resource": "widgets", "namespace": "default"}},
    });
    let answer = send(
        http_client()
            .post(gateway.url("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"))
            .bearer_auth(ROOT)
            .header(
                "traceparent",
                traceparent(trace_id, "00f067aa0ba902b7", true),
            )
            .header("content-type", "application/json")
            .body(review.to_string()),
    )
    .await;
    assert_eq!(answer.status, 201, "{}", answer.body);
    assert_eq!(answer.json()["status"]["allowed"], true, "{}", answer.body);

    // request, 3 steps, 1 filter, and the review's own call of rbac.
    let spans = collector.trace(trace_id, 6).await;
    let request = spans
        .iter()
        .find(|span| span.parent_span_id == "00f067aa0ba902b7")
        .expect("the request's span");
    let step = one(&spans, "authorization");
    let mut parents: Vec<&str> = spans
        .iter()
        .filter(|span| span.name == "authorization/rbac")
        .map(|span| span.parent_span_id.as_str())
        .collect();
    parents.sort_unstable();
    let mut expected = vec![step.span_id.as_str(), request.span_id.as_str()];
    expected.sort_unstable();
    assert_eq!(
        parents, expected,
        "the stage's call under its step, the review's under the request"
    );
    gateway.shutdown().await;
}

#[tokio::test]
async fn at_rate_zero_only_a_privileged_sampled_parent_is_recorded_and_every_trace_is_propagated() {
    let (collector, _upstream, gateway) = traced(0).await;
    let parent = "00f067aa0ba902b7";

    // The client's decision not to sample is kept, and passed on.
    let unsampled = "33333333333333333333333333333333";
    let echo = get_widgets(&gateway, ROOT, Some(&traceparent(unsampled, parent, false))).await;
    let (sent_trace, sent_parent, sent_flags) = upstream_traceparent(&echo);
    assert_eq!(
        (sent_trace.as_str(), sent_flags.as_str()),
        (unsampled, "00")
    );
    assert_ne!(sent_parent, parent, "the gateway's own (unrecorded) span");

    // No client span: a new trace, not sampled at rate 0, told all the same.
    let echo = get_widgets(&gateway, ROOT, None).await;
    let (fresh_trace, _, fresh_flags) = upstream_traceparent(&echo);
    assert_eq!(fresh_flags, "00");
    assert_ne!(fresh_trace, unsampled);

    // A privileged client's sampled parent is followed (kube's
    // ParentBased); the spans of one export came with it: nothing of the
    // two others.
    only_trace_exported(&gateway, &collector, "44444444444444444444444444444444").await;
    gateway.shutdown().await;
}

#[tokio::test]
async fn an_unsampled_request_makes_no_span_and_tells_the_upstream_its_trace_and_state() {
    let (collector, _upstream, gateway) = traced(0).await;
    let trace_id = "55555555555555555555555555555555";
    let client_span = "00f067aa0ba902b7";
    let echo = echo(
        &send(
            http_client()
                .get(gateway.url(WIDGETS))
                .bearer_auth(ROOT)
                .header("traceparent", traceparent(trace_id, client_span, false))
                .header("tracestate", "vendor=opaque"),
        )
        .await,
    );
    let (sent_trace, sent_parent, sent_flags) = upstream_traceparent(&echo);
    assert_eq!((sent_trace.as_str(), sent_flags.as_str()), (trace_id, "00"));
    assert_eq!(sent_parent.len(), 16, "a span ID: {sent_parent}");
    assert_ne!(sent_parent, client_span, "the gateway's own span ID");
    assert_ne!(sent_parent, "0000000000000000", "a valid span ID");
    assert_eq!(
        echoed_header(&echo, "tracestate").as_deref(),
        Some("vendor=opaque"),
        "the client's trace state goes on with its trace"
    );
    // Its two requests' IDs differ: each is the gateway's own.
    let again = get_widgets(
        &gateway,
        ROOT,
        Some(&traceparent(trace_id, client_span, false)),
    )
    .await;
    assert_ne!(upstream_traceparent(&again).1, sent_parent);
    // A sampled request after them is the only trace exported.
    only_trace_exported(&gateway, &collector, "66666666666666666666666666666666").await;
    gateway.shutdown().await;
}

#[tokio::test]
async fn a_new_trace_the_ratio_samples_is_the_one_exported_and_told_upstream() {
    let (collector, _upstream, gateway) = traced(1_000_000).await;
    // No client span: the gateway draws the trace ID its sampler judges.
    let echo = get_widgets(&gateway, ALICE, None).await;
    let (trace_id, sent_parent, sent_flags) = upstream_traceparent(&echo);
    assert_eq!(sent_flags, "01");
    let spans = collector.trace(&trace_id, 8).await;
    let request = one(&spans, GET_WIDGETS);
    assert_eq!(request.parent_span_id, "", "the trace's root");
    let call = one(&spans, "GET");
    assert_eq!(call.parent_span_id, request.span_id);
    assert_eq!(call.span_id, sent_parent, "the upstream's parent");
    gateway.shutdown().await;
}

#[tokio::test]
async fn an_unreachable_collector_never_slows_or_fails_a_request() {
    // A port nothing listens on.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("an address")
    };
    let upstream = Upstream::start().await;
    let gateway = traced_gateway(&tracing_table(closed, 1_000_000), &upstream).await;
    // Enough spans to fill the batch processor's queue (2048) past full.
    let started = Instant::now();
    for round in 0..300 {
        let one_started = Instant::now();
        let trace_id = format!("{round:032x}");
        get_widgets(
            &gateway,
            ROOT,
            Some(&traceparent(&trace_id, "00f067aa0ba902b7", true)),
        )
        .await;
        assert!(
            one_started.elapsed() < Duration::from_secs(2),
            "request {round} took {:?}",
            one_started.elapsed()
        );
    }
    eprintln!(
        "300 traced requests to a closed collector port: {:?}",
        started.elapsed()
    );
    gateway.shutdown().await;
}

#[tokio::test]
async fn a_reload_sends_spans_where_the_new_table_says() {
    let before = Collector::start().await;
    let after = Collector::start().await;
    let upstream = Upstream::start().await;
    let manifest = |collector: &Collector| {
        plaintext(&format!(
            "{}{}{}{}",
            tracing_table(collector.addr, 1_000_000),
            tokens(),
            rbac(),
            routes(&upstream.url())
        ))
    };
    let gateway = ReloadGateway::start(&manifest(&before)).await;
    std::fs::write(&gateway.path, manifest(&after)).expect("write the manifest");
    let (_, restart_required) = gateway.swapped().await;
    assert!(restart_required.is_empty(), "{restart_required:?}");
    let answer = send(http_client().get(gateway.url(WIDGETS)).bearer_auth(ALICE)).await;
    let (trace_id, _, _) = upstream_traceparent(&echo(&answer));
    after.trace(&trace_id, 8).await;
    assert!(
        before.spans().iter().all(|span| span.trace_id != trace_id),
        "the old collector got the new configuration's spans"
    );
    gateway.shutdown().await;
}

#[tokio::test]
async fn shutdown_sends_the_last_spans_before_it_returns() {
    let (collector, _upstream, gateway) = traced(1_000_000).await;
    let (trace_id, _, _) = upstream_traceparent(&get_widgets(&gateway, ALICE, None).await);
    // Well before the batch processor's 5 s delay.
    gateway.shutdown().await;
    let sent = collector
        .spans()
        .into_iter()
        .filter(|span| span.trace_id == trace_id)
        .count();
    assert_eq!(sent, 8, "the request's spans were sent at shutdown");
}

/// kube's span carries a client's long Audit-ID cut to its first 64
/// characters (`audit.GetAuditIDTruncated` in `WithTracing`,
/// `staging/src/k8s.io/apiserver/pkg/endpoints/filters/traces.go`); the
/// gateway accepts IDs of up to 256 and carried them whole.
#[tokio::test]
async fn a_long_audit_id_is_cut_to_its_first_64_characters_in_the_span() {
    let (collector, _upstream, gateway) = traced(1_000_000).await;
    let trace_id = "6bf92f3577b34da6a3ce929d0e0e4736";
    let audit_id = format!("{}{}", "a".repeat(64), "b".repeat(36));
    let answer = send(
        http_client()
            .get(gateway.url(WIDGETS))
            .bearer_auth(ROOT)
            .header("audit-id", &audit_id)
            .header(
                "traceparent",
                traceparent(trace_id, "00f067aa0ba902b7", true),
            ),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.header("audit-id"), Some(audit_id.as_str()));
    let spans = collector.trace(trace_id, 6).await;
    let request = one(&spans, GET_WIDGETS);
    assert_eq!(
        request.attribute("audit-id"),
        Some(&audit_id[..64]),
        "{request:?}"
    );
    gateway.shutdown().await;
}
