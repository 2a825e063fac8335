//! Admission: mutations reach the upstream in order before validation,
//! only mutating filters may mutate, dry runs are seen, failure policies
//! and monitor mode, connect requests admitted by their query's options,
//! their bodies unread and their options not to be changed, mutations
//! held to the request's path, and a pooled
//! Rust filter's inputs inside and beyond its SDK's call arena.

use super::*;

fn admission_filter(
    kind: &str,
    name: &str,
    component: &str,
    config: Option<Value>,
    settings: &str,
) -> String {
    filter(
        &format!("admission.{kind}"),
        name,
        component,
        config,
        settings,
    )
}

fn create(
    client: &reqwest::Client,
    gateway: &TestGateway,
    path: &str,
    object: &Value,
) -> reqwest::RequestBuilder {
    client
        .post(gateway.url(path))
        .bearer_auth("alice-token")
        .header("content-type", "application/json")
        .body(object.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutations_reach_the_upstream_in_order_before_validation() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&[
        &tokens(),
        &rbac(),
        &admission_filter("mutating", "labels-a", "label-defaults", Some(json!({"labels": {"team": "a", "env": "dev"}})), ""),
        &admission_filter(
            "mutating",
            "labels-b",
            "label-defaults",
            Some(json!({"labels": {"team": "b", "tier": "gold"}, "overwrite": true})),
            "",
        ),
        &admission_filter(
            "validating",
            "policy",
            "policy-deny",
            Some(json!({"rules": [
                {"pointer": "/metadata/labels/tier", "op": "absent", "message": "the tier label is missing"},
                {"pointer": "/spec/replicas", "op": "gt", "value": 10, "message": "replicas above 10 are not allowed"},
            ]})),
            "",
        ),
        &routes(&upstream.url()),
    ])
    .await;
    let client = http_client();

    let object = json!({"apiVersion": "demo.example.io/v1", "kind": "Widget", "metadata": {"name": "w1"}, "spec": {"replicas": 3}});
    let echo = echo(&send(create(&client, &gateway, WIDGETS, &object)).await);
    let received = echoed_body(&echo);
    // Both mutations, in manifest order: b overwrote a's team; and the
    // validating filter saw b's tier (else it would have denied).
    assert_eq!(
        received["metadata"]["labels"],
        json!({"team": "b", "env": "dev", "tier": "gold"})
    );
    assert_eq!(received["spec"], object["spec"]);
    let body_length = echo["body"].as_str().expect("a body").len();
    assert_eq!(
        echoed_header(&echo, "content-length"),
        Some(body_length.to_string()),
        "a correct Content-Length"
    );

    // The same over HTTP/2, and with a chunked body of unknown length.
    let received = echoed_body(&self::echo(
        &send(create(&h2c_client(), &gateway, WIDGETS, &object)).await,
    ));
    assert_eq!(received["metadata"]["labels"]["tier"], "gold");
    let chunks = vec![
        Ok::<_, std::io::Error>(object.to_string()[..10].to_owned()),
        Ok(object.to_string()[10..].to_owned()),
    ];
    let request = client
        .post(gateway.url(WIDGETS))
        .bearer_auth("alice-token")
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            chunks,
        )));
    let chunked = self::echo(&send(request).await);
    assert_eq!(echoed_body(&chunked)["metadata"]["labels"]["tier"], "gold");
    let body_length = chunked["body"].as_str().expect("a body").len();
    assert_eq!(
        echoed_header(&chunked, "content-length"),
        Some(body_length.to_string()),
        "{chunked}"
    );
    assert_eq!(
        echoed_header(&chunked, "transfer-encoding"),
        None,
        "{chunked}"
    );

    // A validating denial: 403 with the webhook message.
    let big = json!({"metadata": {"name": "big"}, "spec": {"replicas": 20}});
    let status = send(create(&client, &gateway, WIDGETS, &big))
        .await
        .assert_status(403, "Forbidden");
    assert_eq!(
        status["message"],
        r#"admission webhook "policy" denied the request: replicas above 10 are not allowed"#
    );

    // Requests without an object skip admission: a GET even with a body the
    // policy would deny reaches the upstream unchanged.
    let request = client
        .get(gateway.url(WIDGETS))
        .bearer_auth("alice-token")
        .body(big.to_string());
    let echo_get = self::echo(&send(request).await);
    assert_eq!(echoed_body(&echo_get), big);

    // A body that is not JSON: 400.
    let request = client
        .post(gateway.url(WIDGETS))
        .bearer_auth("alice-token")
        .header("content-type", "application/json")
        .body("{not json");
    let status = send(request).await.assert_status(400, "BadRequest");
    let message = status["message"].as_str().expect("a message");
    assert!(
        message.starts_with("the request body is not valid JSON"),
        "{message}"
    );
    // Bodies a JSON parser reads but `serde_json::Value` refuses, as the
    // gateway's check does without building one: nested past its limit, a
    // number out of range, a string that is not UTF-8.
    let nested = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let bodies: [Vec<u8>; 3] = [
        nested.into_bytes(),
        br#"{"metadata": {"name": "w"}, "spec": {"replicas": 1e400}}"#.to_vec(),
        b"{\"metadata\": {\"name\": \"w\xff\"}}".to_vec(),
    ];
    for body in bodies {
        let request = client
            .post(gateway.url(WIDGETS))
            .bearer_auth("alice-token")
            .header("content-type", "application/json")
            .body(body.clone());
        let status = send(request).await.assert_status(400, "BadRequest");
        let message = status["message"].as_str().expect("a message");
        assert!(
            message.starts_with("the request body is not valid JSON"),
            "{}: {message}",
            String::from_utf8_lossy(&body)
        );
    }
    assert_eq!(
        upstream.hits(),
        4,
        "the denied and the invalid creates did not reach the upstream"
    );

    // An object no filter changes goes upstream as sent, byte for byte: both
    // label filters find their labels set (b's overwrite to the value it
    // has), so neither patches it.
    let as_sent = r#"{ "metadata" : { "name" : "w2", "labels" : {"team": "b", "env": "dev", "tier": "gold"} } }"#;
    let request = client
        .post(gateway.url(WIDGETS))
        .bearer_auth("alice-token")
        .header("content-type", "application/json")
        .body(as_sent);
    let unchanged = self::echo(&send(request).await);
    assert_eq!(unchanged["body"], as_sent, "{unchanged}");
}

/// A Rust filter's inputs are lowered into the SDK's call arena (32 KiB,
/// reset when a call's last input is freed) and, beyond it, into the
/// standard allocator. Objects on both sides of that size, in turn on one
/// pooled instance, are each patched whole, and the instance's memory does
/// not grow from call to call: it is never retired for nearing its cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_filter_patches_objects_inside_and_beyond_its_call_arena_alike() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&[
        &tokens(),
        &rbac(),
        &admission_filter(
            "mutating",
            "arena-labels",
            "label-defaults",
            Some(json!({"labels": {"team": "a"}})),
            "isolation = \"pooled\"\nmemory = \"3MiB\"\n",
        ),
        &routes(&upstream.url()),
    ])
    .await;
    let client = http_client();
    let sizes_kib = [1, 40, 2, 300, 30, 1, 100, 31];
    for (round, kib) in sizes_kib
        .iter()
        .cycle()
        .take(3 * sizes_kib.len())
        .enumerate()
    {
        // Bytes that differ from round to round, so a stale arena shows.
        let payload: String = (0..kib * 1024)
            .map(|i| char::from(b'a' + ((i + round) % 26) as u8))
            .collect();
        let object =
            json!({"metadata": {"name": format!("w{round}")}, "spec": {"payload": payload}});
        let received = echoed_body(&echo(
            &send(create(&client, &gateway, WIDGETS, &object)).await,
        ));
        assert_eq!(
            received["metadata"],
            json!({"name": format!("w{round}"), "labels": {"team": "a"}}),
            "round {round}, {kib} KiB"
        );
        assert!(
            received["spec"] == object["spec"],
            "round {round}, {kib} KiB: the payload changed"
        );
    }
    // Read from this process's registry (the gateway runs in it, and no
    // other test names a filter `arena-labels`).
    let retirements = local_metric(
        r#"wasmgate_filter_instance_retirements_total{filter="arena-labels",reason="memory"}"#,
    );
    assert_eq!(
        retirements, 0,
        "the instance's memory grew from call to call"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_can_mutate_only_in_the_mutating_list() {
    let upstream = Upstream::start().await;
    let mutating = gateway(&[
        &tokens(),
        &rbac(),
        &admission_filter("mutating", "faults", "fault-admission", None, ""),
        &routes(&upstream.url()),
    ])
    .await;
    let validating = gateway(&[
        &tokens(),
        &rbac(),
        &admission_filter("validating", "faults", "fault-admission", None, ""),
        &routes(&upstream.url()),
    ])
    .await;
    let client = http_client();
    let object = |name: &str| json!({"metadata": {"name": name, "labels": {"keep": "me"}}});

    let received = echoed_body(&echo(
        &send(create(&client, &mutating, WIDGETS, &object("mutate"))).await,
    ));
    assert_eq!(
        received["metadata"]["labels"],
        json!({"keep": "me", "fault-admission": "mutated"})
    );
    let received = echoed_body(&echo(
        &send(create(&client, &mutating, WIDGETS, &object("patch"))).await,
    ));
    assert_eq!(
        received["metadata"]["annotations"],
        json!({"fault-admission": "patched"})
    );

    for name in ["mutate", "patch"] {
        let status = send(create(&client, &validating, WIDGETS, &object(name)))
            .await
            .assert_status(500, "InternalError");
        assert_eq!(
            status["message"],
            "Internal error occurred: the admission stage failed"
        );
    }
    let received = echoed_body(&echo(
        &send(create(&client, &validating, WIDGETS, &object("allow"))).await,
    ));
    assert_eq!(
        received,
        object("allow"),
        "an allowed object goes on unchanged"
    );
    let status = send(create(&client, &validating, WIDGETS, &object("deny")))
        .await
        .assert_status(403, "Forbidden");
    assert_eq!(
        status["message"],
        r#"admission webhook "faults" denied the request: fault-admission: deny requested"#
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_sees_dry_run() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&[
        &tokens(),
        &rbac(),
        &admission_filter("validating", "faults", "fault-admission", None, ""),
        &routes(&upstream.url()),
    ])
    .await;
    let client = http_client();
    let object = json!({"metadata": {"name": "dry-run"}});
    echo(&send(create(&client, &gateway, WIDGETS, &object)).await);
    let status = send(create(
        &client,
        &gateway,
        &format!("{WIDGETS}?dryRun=All"),
        &object,
    ))
    .await
    .assert_status(403, "Forbidden");
    assert_eq!(
        status["message"],
        r#"admission webhook "faults" denied the request: fault-admission: the request is a dry run"#
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_failures_follow_the_failure_policy() {
    let upstream = Upstream::start().await;
    let closed = gateway(&[
        &tokens(),
        &rbac(),
        &admission_filter(
            "validating",
            "faults",
            "fault-admission",
            None,
            "timeout = \"100ms\"\nmemory = \"8MiB\"\n",
        ),
        &routes(&upstream.url()),
    ])
    .await;
    let open = gateway(&[
        &tokens(),
        &rbac(),
        &admission_filter(
            "mutating",
            "faults",
            "fault-admission",
            None,
            "timeout = \"100ms\"\nmemory = \"8MiB\"\nfailure_policy = \"fail-open\"\n",
        ),
        &routes(&upstream.url()),
    ])
    .await;
    let client = http_client();
    let object = |name: &str| json!({"metadata": {"name": name}});
    for name in ["error", "trap", "alloc"] {
        let status = send(create(&client, &closed, WIDGETS, &object(name)))
            .await
            .assert_status(500, "InternalError");
        assert_no_internal_detail(&status);
    }
    let status = send(create(&client, &closed, WIDGETS, &object("loop")))
        .await
        .assert_status(503, "ServiceUnavailable");
    assert_eq!(
        status["message"],
        "the admission stage did not answer in time"
    );
    assert_eq!(upstream.hits(), 0);

    for name in ["error", "trap", "alloc", "loop"] {
        let received = echoed_body(&echo(
            &send(create(&client, &open, WIDGETS, &object(name))).await,
        ));
        assert_eq!(
            received,
            object(name),
            "{name}: the object goes on unchanged"
        );
    }
}

/// A monitored admission filter is asked and logged, never obeyed: its
/// denial, its mutation and its failures all let the object go on as sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monitor_mode_admission_filter_never_stops_a_request() {
    let upstream = Upstream::start().await;
    let settings = "mode = \"monitor\"\ntimeout = \"100ms\"\n";
    let gateway = gateway(&[
        &tokens(),
        &rbac(),
        &admission_filter(
            "mutating",
            "watch-mutations",
            "fault-admission",
            None,
            settings,
        ),
        &admission_filter(
            "validating",
            "watch-validations",
            "fault-admission",
            None,
            settings,
        ),
        &routes(&upstream.url()),
    ])
    .await;
    let client = http_client();
    for name in ["deny", "mutate", "patch", "error", "trap", "loop"] {
        let object = json!({"metadata": {"name": name}});
        let received = echoed_body(&echo(
            &send(create(&client, &gateway, WIDGETS, &object)).await,
        ));
        assert_eq!(received, object, "{name}");
    }
}

/// An anonymous, always-allowed gateway with these admission pieces, the
/// core group's API routed to `upstream`.
async fn core_gateway(upstream: &Upstream, admission: &str) -> TestGateway {
    gateway(&[
        "[authentication]\nanonymous = true\n[authorization]\nalways_allow = true\n",
        admission,
        &format!(
            "\n[[servers]]\nname = \"core\"\n[[servers.routes]]\napi = \"/api/v1\"\nupstream = \"{}\"\n",
            upstream.url()
        ),
    ])
    .await
}

/// kube admits a connect request with the options of its query
/// (`ConnectResource`, `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/rest.go`)
/// and never reads its body: a pod proxy's upload, not JSON, passes an
/// admission filter that selects every connect request and reaches the
/// upstream as sent (a body read as the object would have been refused as
/// not JSON). The filter decides by the options: an exec of `deny` is
/// refused, an exec of `ls` goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_request_is_admitted_by_its_options_and_its_body_goes_on_unread() {
    let upstream = Upstream::start().await;
    let validating = admission_filter("validating", "faults", "fault-admission", None, "");
    let gateway = core_gateway(&upstream, &validating).await;
    let client = http_client();
    let upload = "field=value&more=%01";
    let echoed = echo(
        &send(
            client
                .post(gateway.url("/api/v1/namespaces/default/pods/p/proxy/upload"))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(upload),
        )
        .await,
    );
    assert_eq!(echoed["body"], upload);
    assert_eq!(
        echoed["path"],
        "/api/v1/namespaces/default/pods/p/proxy/upload"
    );

    let exec = "/api/v1/namespaces/default/pods/p/exec";
    let status = send(client.post(gateway.url(&format!("{exec}?command=deny&stdin=true"))))
        .await
        .assert_status(403, "Forbidden");
    assert_eq!(
        status["message"],
        r#"admission webhook "faults" denied the request: fault-admission: deny requested"#
    );
    echo(&send(client.post(gateway.url(&format!("{exec}?command=ls")))).await);
}

/// A connect request's options are its query, which goes upstream as sent:
/// a mutating filter that changes them is a filter error, failing the
/// request closed (its default policy), and the upstream never hears of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_requests_options_cannot_be_mutated() {
    let upstream = Upstream::start().await;
    let mutating = admission_filter("mutating", "faults", "fault-admission", None, "");
    let gateway = core_gateway(&upstream, &mutating).await;
    let client = http_client();
    let exec = "/api/v1/namespaces/default/pods/p/exec";
    for word in ["mutate", "patch"] {
        let status = send(client.post(gateway.url(&format!("{exec}?command={word}"))))
            .await
            .assert_status(500, "InternalError");
        assert_eq!(
            status["message"],
            "Internal error occurred: the admission stage failed"
        );
    }
    assert_eq!(
        upstream.hits(),
        0,
        "the refused execs never reached the upstream"
    );
    echo(&send(client.post(gateway.url(&format!("{exec}?command=ls")))).await);
    assert_eq!(upstream.hits(), 1);
}

/// The client's own object is held to its path before any filter sees it,
/// as kube's create, update and patch handlers hold it before admission: a
/// validating filter (which parses nothing for itself) is not asked about
/// an object in another namespace or under another name, and the request
/// is kube's 400 (not the filter's denial: the object is named `deny`),
/// in JSON and in YAML. An object the path places where it is goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clients_object_is_held_to_its_path_before_admission() {
    let upstream = Upstream::start().await;
    let validating = admission_filter("validating", "faults", "fault-admission", None, "");
    let gateway = core_gateway(&upstream, &validating).await;
    let client = http_client();
    let configmaps = "/api/v1/namespaces/default/configmaps";
    let write = |method: reqwest::Method, path: &str, content_type: &str, body: String| {
        client
            .request(method, gateway.url(path))
            .header("content-type", content_type)
            .body(body)
    };
    let elsewhere = json!({"metadata": {"name": "deny", "namespace": "kube-system"}});
    let other_namespace =
        "the namespace of the provided object does not match the namespace sent on the request";
    for (method, path, content_type, body) in [
        (
            reqwest::Method::POST,
            configmaps.to_owned(),
            "application/json",
            elsewhere.to_string(),
        ),
        (
            reqwest::Method::POST,
            configmaps.to_owned(),
            "application/yaml",
            "metadata:\n  name: deny\n  namespace: kube-system\n".to_owned(),
        ),
        (
            reqwest::Method::PUT,
            format!("{configmaps}/deny"),
            "application/json",
            elsewhere.to_string(),
        ),
        (
            reqwest::Method::PATCH,
            format!("{configmaps}/deny"),
            "application/merge-patch+json",
            elsewhere.to_string(),
        ),
    ] {
        let status = send(write(method.clone(), &path, content_type, body))
            .await
            .assert_status(400, "BadRequest");
        assert_eq!(
            status["message"], other_namespace,
            "{method} {path} {content_type}"
        );
    }
    let renamed = json!({"metadata": {"name": "deny", "namespace": "default"}});
    for (method, content_type) in [
        (reqwest::Method::PUT, "application/json"),
        (reqwest::Method::PATCH, "application/merge-patch+json"),
    ] {
        let status = send(write(
            method.clone(),
            &format!("{configmaps}/other"),
            content_type,
            renamed.to_string(),
        ))
        .await
        .assert_status(400, "BadRequest");
        assert_eq!(
            status["message"],
            "the name of the object (deny) does not match the name on the URL (other)",
            "{method}"
        );
    }
    assert_eq!(
        upstream.hits(),
        0,
        "no misplaced object reached the upstream"
    );

    let placed = json!({"metadata": {"name": "kept", "namespace": "default"}});
    let unplaced = json!({"metadata": {"name": "kept"}});
    for (method, path, body) in [
        (reqwest::Method::POST, configmaps.to_owned(), &placed),
        (reqwest::Method::POST, configmaps.to_owned(), &unplaced),
        (reqwest::Method::PUT, format!("{configmaps}/kept"), &placed),
    ] {
        let echoed = echoed_body(&echo(
            &send(write(method, &path, "application/json", body.to_string())).await,
        ));
        assert_eq!(&echoed, body);
    }
    assert_eq!(upstream.hits(), 3);
}

/// A mutation may not move the object out of the path authorization
/// decided on: an object a mutating filter put in another namespace, or
/// an updated or patched object it renamed, is kube's 400 with kube's
/// words (`EnsureObjectNamespaceMatchesRequestNamespace` in
/// `staging/src/k8s.io/apiserver/pkg/registry/rest/create.go`; `checkName`
/// in `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/rest.go`), and
/// the upstream never hears of it. A mutation that leaves both as the path
/// has them goes on, and so does a rename on a create, whose URL names no
/// object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutation_may_not_move_the_object_out_of_its_path() {
    let upstream = Upstream::start().await;
    let mutating = admission_filter("mutating", "faults", "fault-admission", None, "");
    let gateway = core_gateway(&upstream, &mutating).await;
    let client = http_client();
    let configmaps = "/api/v1/namespaces/default/configmaps";
    let object = |name: &str| json!({"metadata": {"name": name, "namespace": "default"}});
    let write = |method: reqwest::Method, path: &str, content_type: &str, body: &Value| {
        client
            .request(method, gateway.url(path))
            .header("content-type", content_type)
            .body(body.to_string())
    };
    let json = "application/json";
    let merge = "application/merge-patch+json";

    let moved = [
        (
            reqwest::Method::POST,
            configmaps.to_owned(),
            json,
            "move-namespace",
        ),
        (
            reqwest::Method::PUT,
            format!("{configmaps}/move-namespace"),
            json,
            "move-namespace",
        ),
        (
            reqwest::Method::PATCH,
            format!("{configmaps}/move-namespace"),
            merge,
            "move-namespace",
        ),
    ];
    for (method, path, content_type, name) in moved {
        let status = send(write(method.clone(), &path, content_type, &object(name)))
            .await
            .assert_status(400, "BadRequest");
        assert_eq!(
            status["message"],
            "the namespace of the provided object does not match the namespace sent on the request",
            "{method} {path}"
        );
    }
    for (method, content_type) in [
        (reqwest::Method::PUT, json),
        (reqwest::Method::PATCH, merge),
    ] {
        let status = send(write(
            method.clone(),
            &format!("{configmaps}/rename"),
            content_type,
            &object("rename"),
        ))
        .await
        .assert_status(400, "BadRequest");
        assert_eq!(
            status["message"],
            "the name of the object (renamed) does not match the name on the URL (rename)",
            "{method}"
        );
    }
    assert_eq!(upstream.hits(), 0, "no moved object reached the upstream");

    let created = echoed_body(&echo(
        &send(write(
            reqwest::Method::POST,
            configmaps,
            json,
            &object("rename"),
        ))
        .await,
    ));
    assert_eq!(created["metadata"]["name"], "renamed");
    let updated = echoed_body(&echo(
        &send(write(
            reqwest::Method::PUT,
            &format!("{configmaps}/mutate"),
            json,
            &object("mutate"),
        ))
        .await,
    ));
    assert_eq!(updated["metadata"]["labels"]["fault-admission"], "mutated");
    assert_eq!(
        (
            &updated["metadata"]["name"],
            &updated["metadata"]["namespace"]
        ),
        (&json!("mutate"), &json!("default"))
    );
    // A namespace is in none: moving one "into" another is not checked
    // here (kube clears the field, `ExpectedNamespaceForResource`).
    echo(
        &send(write(
            reqwest::Method::PUT,
            "/api/v1/namespaces/move-namespace",
            json,
            &json!({"metadata": {"name": "move-namespace"}}),
        ))
        .await,
    );
}

/// A mutation that makes the object larger than the body limit is the
/// filter's failure, as a patch that does not apply is: the upstream is
/// never sent a body over the limit the client's own was held to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutation_over_the_body_limit_is_the_filters_failure() {
    let upstream = Upstream::start().await;
    // Thirty labels of sixty characters: about 2 KiB added to the object.
    let labels: serde_json::Map<String, Value> = (0..30)
        .map(|index| (format!("l{index}"), Value::String("v".repeat(60))))
        .collect();
    let limits = "\n[limits]\nmax_request_body = \"1KiB\"\n";
    let manifest = |settings: &str| {
        [
            limits.to_owned(),
            tokens(),
            rbac(),
            admission_filter(
                "mutating",
                "labels",
                "label-defaults",
                Some(json!({ "labels": labels })),
                settings,
            ),
            routes(&upstream.url()),
        ]
    };
    let closed = manifest("");
    let closed = gateway(&closed.iter().map(String::as_str).collect::<Vec<_>>()).await;
    let open = manifest("failure_policy = \"fail-open\"\n");
    let open = gateway(&open.iter().map(String::as_str).collect::<Vec<_>>()).await;
    let client = http_client();
    let object = json!({"metadata": {"name": "w"}});

    let status = send(create(&client, &closed, WIDGETS, &object))
        .await
        .assert_status(500, "InternalError");
    assert_eq!(
        status["message"],
        "Internal error occurred: the admission stage failed"
    );
    assert_eq!(upstream.hits(), 0);

    // Skipped, the filter's change is not made: the object goes on as sent.
    let echo = echo(&send(create(&client, &open, WIDGETS, &object)).await);
    assert_eq!(echoed_body(&echo), object);
    assert_eq!(
        echoed_header(&echo, "content-length"),
        Some(object.to_string().len().to_string())
    );
}

/// kube decodes a YAML body (`application/yaml`, and server-side apply's
/// `application/apply-patch+yaml`) before admission, as it decodes JSON:
/// the filters judge its object, given as JSON, and the upstream gets
/// exactly what they judged, that JSON (a create's as `application/json`,
/// an apply's under its own type). A body in a type the gateway cannot
/// read (protobuf, which kube reads for its built-in types with their
/// schemas) is kube's 415 `UnsupportedMediaType`, a patch's as kube's
/// patch handler words it; a request without a body passes as it did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_yaml_body_is_admitted_as_kube_decodes_it_and_an_unread_one_is_415() {
    let upstream = Upstream::start().await;
    let mutating = admission_filter("mutating", "faults", "fault-admission", None, "");
    let gateway = core_gateway(&upstream, &mutating).await;
    let client = http_client();
    let configmaps = "/api/v1/namespaces/default/configmaps";
    let yaml = |name: &str| {
        format!(
            "---\n# a comment\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata: {{k: \"v\", on: \"yes\"}}\n"
        )
    };
    let write = |method: reqwest::Method, path: &str, content_type: &str, body: String| {
        client
            .request(method, gateway.url(path))
            .header("content-type", content_type)
            .body(body)
    };
    let post = |content_type: &str, body: String| {
        write(reqwest::Method::POST, configmaps, content_type, body)
    };

    // The filter reads the YAML's name: `deny` is its denial.
    let status = send(post("application/yaml", yaml("deny")))
        .await
        .assert_status(403, "Forbidden");
    assert_eq!(
        status["message"],
        r#"admission webhook "faults" denied the request: fault-admission: deny requested"#
    );
    let object = |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v", "true": "yes"}});
    // Allowed, unchanged: the upstream gets its JSON, as JSON.
    let allowed = echo(&send(post("application/yaml; charset=utf-8", yaml("allow"))).await);
    assert_eq!(echoed_body(&allowed), object("allow"));
    assert_eq!(
        echoed_header(&allowed, "content-type").as_deref(),
        Some("application/json")
    );
    let length = allowed["body"].as_str().expect("a body").len();
    assert_eq!(
        echoed_header(&allowed, "content-length"),
        Some(length.to_string())
    );
    // Mutated: the filter's change, as JSON.
    let mutated = echo(&send(post("application/yaml", yaml("mutate"))).await);
    let mut expected = object("mutate");
    expected["metadata"]["labels"] = json!({"fault-admission": "mutated"});
    assert_eq!(echoed_body(&mutated), expected);
    assert_eq!(
        echoed_header(&mutated, "content-type").as_deref(),
        Some("application/json")
    );
    // Server-side apply: its JSON under its own type, which kube reads.
    let apply = "application/apply-patch+yaml";
    let applied = echo(
        &send(write(
            reqwest::Method::PATCH,
            &format!("{configmaps}/allow?fieldManager=t"),
            apply,
            yaml("allow"),
        ))
        .await,
    );
    assert_eq!(echoed_body(&applied), object("allow"));
    assert_eq!(
        echoed_header(&applied, "content-type").as_deref(),
        Some(apply)
    );
    let status = send(write(
        reqwest::Method::PATCH,
        &format!("{configmaps}/deny"),
        apply,
        yaml("deny"),
    ))
    .await
    .assert_status(403, "Forbidden");
    assert!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.contains("deny requested"))
    );
    let hits = upstream.hits();

    // kube's 415 for what it (or the gateway) has no decoder for.
    let serializer = "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml";
    for content_type in ["application/vnd.kubernetes.protobuf", "text/plain"] {
        let status = send(post(content_type, "k8s\0\n\u{2}v1".to_owned()))
            .await
            .assert_status(415, "UnsupportedMediaType");
        assert_eq!(status["message"], serializer, "{content_type}");
    }
    let patches = "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml";
    let status = send(write(
        reqwest::Method::PATCH,
        &format!("{configmaps}/allow"),
        "application/json",
        object("allow").to_string(),
    ))
    .await
    .assert_status(415, "UnsupportedMediaType");
    assert_eq!(status["message"], patches);
    assert_eq!(upstream.hits(), hits, "no unread body reached the upstream");
    // A delete without a body has nothing to read, whatever its type.
    echo(
        &send(
            client
                .delete(gateway.url(&format!("{configmaps}/allow")))
                .header("content-type", "application/vnd.kubernetes.protobuf"),
        )
        .await,
    );
}

/// A hostile YAML body gets a clear 400, at once, and the gateway goes
/// on: a few hundred bytes of nested aliases that expand to a billion
/// strings (held to the body limit as they are read), two documents
/// (kube decodes one object), and nesting deeper than a JSON body may
/// (read on a stack that holds it: on a runtime worker's, it would have
/// aborted the process).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_yaml_body_is_a_400_at_once() {
    let upstream = Upstream::start().await;
    let mutating = admission_filter("mutating", "faults", "fault-admission", None, "");
    let gateway = core_gateway(&upstream, &mutating).await;
    let client = http_client();
    let configmaps = "/api/v1/namespaces/default/configmaps";
    let mut laughs = String::from(
        "metadata: {name: allow}\nl0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n",
    );
    for level in 1..10 {
        let items = vec![format!("*l{}", level - 1); 10].join(", ");
        laughs.push_str(&format!("l{level}: &l{level} [{items}]\n"));
    }
    let deep = format!("{}{}", "[".repeat(1000), "]".repeat(1000));
    let two = "metadata: {name: allow}\n---\nmetadata: {name: deny}\n".to_owned();
    for body in [laughs, two, deep] {
        let request = client
            .post(gateway.url(configmaps))
            .header("content-type", "application/yaml")
            .body(body.clone());
        let answer = tokio::time::timeout(Duration::from_secs(60), send(request))
            .await
            .expect("answered without hanging");
        let status = answer.assert_status(400, "BadRequest");
        let message = status["message"].as_str().expect("a message");
        assert!(
            message.starts_with("the request body is not valid YAML: "),
            "{}: {message}",
            &body[..40]
        );
    }
    assert_eq!(upstream.hits(), 0);
    // Still serving.
    let fine = client
        .post(gateway.url(configmaps))
        .header("content-type", "application/yaml")
        .body("metadata: {name: allow}\n");
    assert_eq!(
        echoed_body(&echo(&send(fine).await)),
        json!({"metadata": {"name": "allow"}})
    );
}
