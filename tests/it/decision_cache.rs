//! The decision caches over real sockets, with real components: a hit does
//! not call the filter (counted by `wasmgate_filter_calls_total`), an
//! authenticated answer expires after `ttl` and an unauthorized one after
//! `negative_ttl`, errors and traps are never cached, a filter shortens its entry (jwt-authn at the token's `exp`), 100
//! concurrent misses for one key make one call, a reload starts with empty
//! caches (a revoked token is refused at once), key material over 10 KB is
//! not cached, a hit replays the authorization annotations in audit, a kept
//! answer that settles nothing hands on to the next filter of the union, and a
//! component built against `wasmgate:filter@0.1.0` (the compat-0-1-authn
//! fixture) loads and
//! has its answers cached too.
//!
//! The metrics are process-wide, so every test names its filters apart, and
//! reads the counters from this process's registry (the gateways run in it).

use std::time::Duration;

use serde_json::json;

use crate::support::*;

fn token_authn(name: &str, config: serde_json::Value, settings: &str) -> String {
    filter(
        "authentication.filters",
        name,
        "token-authn",
        Some(config),
        &format!("headers = [\"authorization\"]\nreads = []\n{settings}"),
    )
}

fn rbac_authz(name: &str, settings: &str) -> String {
    filter(
        "authorization.filters",
        name,
        "rbac-authz",
        Some(rbac_config()),
        settings,
    )
}

/// A manifest of the authenticator entry `authn` with authorization always
/// allowing, routed to `upstream`.
fn authn_only(authn: String, upstream: &Upstream) -> String {
    plaintext(
        &[
            authn,
            "\n[authorization]\nalways_allow = true\n".to_owned(),
            routes(&upstream.url()),
        ]
        .concat(),
    )
}

fn bearer(client: &reqwest::Client, url: &str, token: &str) -> reqwest::RequestBuilder {
    client
        .get(url)
        .header("authorization", format!("Bearer {token}"))
}

#[tokio::test]
async fn hits_do_not_call_the_filters_and_replay_the_audit_annotations() {
    build_filters();
    let upstream = Upstream::start().await;
    let manifest = plaintext(
        &[
            token_authn("hit-tokens", tokens_config(), "cache = true\n"),
            rbac_authz("hit-rbac", "cache = true\n"),
            "\n[audit]\nmode = \"blocking\"\n[[audit.policy]]\nlevel = \"Metadata\"\n".to_owned(),
            filter(
                "audit.filters",
                "hit-audit",
                "jsonl-audit",
                None,
                "sink = \"audit.jsonl\"\n",
            ),
            routes(&upstream.url()),
        ]
        .concat(),
    );
    let gateway = TestGateway::start(&manifest).await;
    let client = http_client();
    let url = gateway.url("/apis/demo.example.io/v1/namespaces/default/widgets");
    let mut audit_ids = Vec::new();
    for _ in 0..5 {
        let answer = send(bearer(&client, &url, "alice-token")).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        audit_ids.push(answer.header("audit-id").expect("an Audit-ID").to_owned());
    }
    assert_eq!(
        local_filter_calls("hit-tokens", "answer"),
        1,
        "one authentication call"
    );
    assert_eq!(
        local_filter_calls("hit-rbac", "answer"),
        1,
        "one authorization call"
    );
    assert_eq!(
        local_metric("wasmgate_decision_cache_hits_total{filter=\"hit-tokens\"}"),
        4
    );
    assert_eq!(
        local_metric("wasmgate_decision_cache_misses_total{filter=\"hit-rbac\"}"),
        1
    );
    assert_eq!(
        local_metric("wasmgate_decision_cache_entries{filter=\"hit-rbac\"}"),
        1
    );
    // Another user is another key.
    let answer = send(bearer(&client, &url, "bob-token")).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(local_filter_calls("hit-tokens", "answer"), 2);
    assert_eq!(local_filter_calls("hit-rbac", "answer"), 2);
    // The last request was answered from the caches; its event carries the
    // decision as the first one's does.
    let audit = gateway.dir.path().join("audit.jsonl");
    let last = wait_for_events(&audit, audit_ids.last().expect("five requests"), 2).await;
    let complete = last.last().expect("a ResponseComplete");
    assert_eq!(
        complete["annotations"]["authorization.k8s.io/decision"], "allow",
        "{complete}"
    );
    gateway.shutdown().await;
}

/// A union's kept answers are weighed without calling their filters, and
/// one that settles nothing (no opinion) hands the request to the next
/// filter, which is called: in authentication and in authorization alike.
#[tokio::test]
async fn a_kept_answer_that_settles_nothing_hands_on_to_the_next_filter() {
    build_filters();
    let upstream = Upstream::start().await;
    let only = |user: &str, uid: &str, group: &str| json!({"tokens": [{"token": format!("{user}-token"), "user": user, "uid": uid, "groups": [group]}]});
    let manifest = plaintext(
        &[
            token_authn(
                "union-kept-tokens",
                only("alice", "1001", "dev"),
                "cache = true\n",
            ),
            token_authn("union-called-tokens", only("bob", "1002", "viewers"), ""),
            filter(
                "authorization.filters",
                "union-kept-rbac",
                "rbac-authz",
                Some(json!({"roles": [], "bindings": []})),
                "cache = true\n",
            ),
            rbac_authz("union-called-rbac", ""),
            routes(&upstream.url()),
        ]
        .concat(),
    );
    let gateway = TestGateway::start(&manifest).await;
    let client = http_client();
    let url = gateway.url("/apis/demo.example.io/v1/namespaces/default/widgets");
    for _ in 0..3 {
        let answer = send(bearer(&client, &url, "bob-token")).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    for (filter, calls) in [
        ("union-kept-tokens", 1),
        ("union-called-tokens", 3),
        ("union-kept-rbac", 1),
        ("union-called-rbac", 3),
    ] {
        assert_eq!(local_filter_calls(filter, "answer"), calls, "{filter}");
    }
    assert_eq!(
        local_metric("wasmgate_decision_cache_hits_total{filter=\"union-kept-rbac\"}"),
        2
    );
    // A token neither knows: the kept filter's no-opinion is replayed, the
    // other filter is asked each time, and the union refuses.
    let answer = send(bearer(&client, &url, "mallory-token")).await;
    assert_eq!(answer.status, 401, "{}", answer.body);
    let answer = send(bearer(&client, &url, "mallory-token")).await;
    assert_eq!(answer.status, 401, "{}", answer.body);
    assert_eq!(local_filter_calls("union-kept-tokens", "answer"), 2);
    assert_eq!(local_filter_calls("union-called-tokens", "answer"), 5);
    gateway.shutdown().await;
}

#[tokio::test]
async fn answers_expire_after_the_ttl() {
    build_filters();
    let upstream = Upstream::start().await;
    let manifest = authn_only(
        token_authn(
            "ttl-tokens",
            tokens_config(),
            "cache = { ttl = \"300ms\" }\n",
        ),
        &upstream,
    );
    let gateway = TestGateway::start(&manifest).await;
    let client = http_client();
    let url = gateway.url("/open/x");
    for _ in 0..3 {
        let answer = send(bearer(&client, &url, "alice-token")).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    assert_eq!(
        local_filter_calls("ttl-tokens", "answer"),
        1,
        "the answer was cached"
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    let answer = send(bearer(&client, &url, "alice-token")).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(
        local_filter_calls("ttl-tokens", "answer"),
        2,
        "the answer expired"
    );
    gateway.shutdown().await;
}

#[tokio::test]
async fn denials_expire_after_the_negative_ttl() {
    build_filters();
    let upstream = Upstream::start().await;
    let manifest = plaintext(
        &[
            token_authn("neg-tokens", tokens_config(), "cache = true\n"),
            rbac_authz(
                "neg-rbac",
                "cache = { ttl = \"5m\", negative_ttl = \"300ms\" }\n",
            ),
            routes(&upstream.url()),
        ]
        .concat(),
    );
    let gateway = TestGateway::start(&manifest).await;
    let client = http_client();
    // Only bob may get /private/bob.
    let url = gateway.url("/private/bob");
    for _ in 0..3 {
        send(bearer(&client, &url, "alice-token"))
            .await
            .assert_status(403, "Forbidden");
    }
    assert_eq!(
        local_filter_calls("neg-rbac", "answer"),
        1,
        "the denial was cached"
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    send(bearer(&client, &url, "alice-token"))
        .await
        .assert_status(403, "Forbidden");
    assert_eq!(
        local_filter_calls("neg-rbac", "answer"),
        2,
        "the denial expired"
    );
    gateway.shutdown().await;
}

/// A manifest of compat-0-1-authn named `name`, answering as its request's
/// `x-fault` says and cached by that header alone, anonymous requests
/// allowed and every request authorized, routed to `upstream`.
fn cached_faults(name: &str, upstream: &Upstream) -> String {
    let faults = filter(
        "authentication.filters",
        name,
        "compat-0-1-authn",
        None,
        "headers = [\"x-fault\"]\nreads = []\ncache = true\ntimeout = \"10s\"\n",
    );
    plaintext(
        &[
            "[authentication]\nanonymous = true\n".to_owned(),
            faults,
            "\n[authorization]\nalways_allow = true\n".to_owned(),
            routes(&upstream.url()),
        ]
        .concat(),
    )
}

/// compat-0-1-authn is built against wasmgate:filter@0.1.0: it loads, its
/// answers are cached (without a TTL of its own), its errors never are, and
/// 100 concurrent requests with one credential make one call.
#[tokio::test]
async fn a_0_1_0_authenticator_is_cached_but_not_its_errors_and_concurrent_misses_merge() {
    build_filters();
    let upstream = Upstream::start().await;
    let manifest = cached_faults("legacy-faults", &upstream);
    let gateway = TestGateway::start(&manifest).await;
    let client = http_client();
    let url = gateway.url("/open/x");
    for _ in 0..3 {
        let answer = send(client.get(&url).header("x-fault", "error")).await;
        answer.assert_status(401, "Unauthorized");
    }
    assert_eq!(
        local_filter_calls("legacy-faults", "error"),
        3,
        "errors are not cached"
    );
    for _ in 0..2 {
        let answer = send(client.get(&url).header("x-fault", "trap")).await;
        assert_ne!(answer.status, 200, "{}", answer.body);
    }
    assert_eq!(
        local_filter_calls("legacy-faults", "trap"),
        2,
        "traps are not cached"
    );

    for _ in 0..3 {
        let answer = send(client.get(&url).header("x-fault", "authenticated")).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    assert_eq!(
        local_filter_calls("legacy-faults", "answer"),
        1,
        "answers are"
    );

    // A 200 ms answer, asked for by 100 requests at once: one call.
    let mut requests = tokio::task::JoinSet::new();
    for _ in 0..100 {
        let request = client.get(&url).header("x-fault", "slow-200");
        requests.spawn(async move { send(request).await });
    }
    while let Some(answer) = bounded("100 concurrent requests", requests.join_next()).await {
        let answer = answer.expect("a request task");
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    assert_eq!(
        local_filter_calls("legacy-faults", "answer"),
        2,
        "100 concurrent misses made one call"
    );
    gateway.shutdown().await;
}

/// A request that calls the filter for a key and goes away before the
/// answer (its own `?timeout=` ends it) hands the call on: one of the
/// requests waiting for it calls the filter, its answer is kept, and the
/// others share it, as kube's singleflight call outlives the request that
/// started it (`cached_token_authenticator.go` runs the shared lookup on a
/// context of its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_calling_request_goes_away_one_of_its_waiters_calls() {
    build_filters();
    let upstream = Upstream::start().await;
    let manifest = cached_faults("handed-on", &upstream);
    let gateway = TestGateway::start(&manifest).await;
    let client = http_client();
    let slow = |query: &str| {
        let request = client
            .get(gateway.url(&format!("/open/x{query}")))
            .header("x-fault", "slow-3000");
        tokio::spawn(async move { send(request).await })
    };
    // The others reach the cache well within the first one's 1.5 s.
    let leader = slow("?timeout=1500ms");
    eventually("the first request calls the filter", || async {
        let misses = local_metric("wasmgate_decision_cache_misses_total{filter=\"handed-on\"}");
        (misses == 1).then_some(())
    })
    .await;
    let waiters: Vec<_> = (0..5).map(|_| slow("")).collect();
    let answer = bounded("the first request", leader).await.expect("a task");
    answer.assert_status(504, "Timeout");
    for waiter in waiters {
        let answer = bounded("a waiting request", waiter).await.expect("a task");
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    assert_eq!(
        local_filter_calls("handed-on", "answer"),
        1,
        "one waiter called the filter for all"
    );
    let answer = send(
        client
            .get(gateway.url("/open/x"))
            .header("x-fault", "slow-3000"),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(
        local_filter_calls("handed-on", "answer"),
        1,
        "its answer was kept"
    );
    gateway.shutdown().await;
}

/// What compat-0-2-authn names its user after (`x-compat: attributes`: the
/// fields it is given), as the echoing upstream heard it (request-header
/// identity), for a request `client` sends to `path`.
async fn spelled_out_user(gateway: &TestGateway, client: &reqwest::Client, path: &str) -> String {
    let request = client
        .get(gateway.url(path))
        .header("x-compat", "attributes");
    let seen = echo(&send(request).await);
    echoed_header(&seen, "x-remote-user").expect("the user reached the upstream")
}

/// An authenticator's key holds the request-view fields it is given (its
/// `reads`), as kube's caches key by all they send their webhook: an answer
/// kept for one path, or for one client's address, is not another's.
#[tokio::test]
async fn an_authenticators_key_holds_the_fields_it_reads() {
    build_filters();
    let upstream = Upstream::start().await;
    let url = upstream.url();
    let manifest = plaintext(&format!(
        "{}\n[authorization]\nalways_allow = true\n\n[[servers]]\nname = \"gw\"\n\n\
         [[servers.routes]]\nprefix = \"/open/\"\nupstream = {{ url = \"{url}\", identity = \"request-header\" }}\n",
        filter(
            "authentication.filters",
            "spelled-out",
            "compat-0-2-authn",
            None,
            "headers = [\"x-compat\"]\nreads = [\"path\", \"remote-addr\"]\ncache = true\n",
        ),
    ));
    let gateway = TestGateway::start(&manifest).await;
    let (one, other) = (http_client(), http_client());
    let first = spelled_out_user(&gateway, &one, "/open/a").await;
    assert!(first.contains("path=/open/a"), "{first}");
    let second = spelled_out_user(&gateway, &one, "/open/b").await;
    assert!(
        second.contains("path=/open/b"),
        "{second}: /open/a's answer"
    );
    let elsewhere = spelled_out_user(&gateway, &other, "/open/a").await;
    assert_ne!(
        elsewhere, first,
        "another client's address, the first one's answer"
    );
    assert_eq!(local_filter_calls("spelled-out", "answer"), 3);
    gateway.shutdown().await;
}

#[tokio::test]
async fn key_material_over_10_kb_is_not_cached() {
    build_filters();
    let upstream = Upstream::start().await;
    let long = "x".repeat(11 * 1024);
    let config = json!({"tokens": [{"token": long, "user": "long", "groups": []}]});
    let manifest = authn_only(
        token_authn("long-tokens", config, "cache = true\n"),
        &upstream,
    );
    let gateway = TestGateway::start(&manifest).await;
    let client = http_client();
    for _ in 0..3 {
        let answer = send(bearer(&client, &gateway.url("/open/x"), &long)).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    assert_eq!(
        local_filter_calls("long-tokens", "answer"),
        3,
        "each request called the filter"
    );
    gateway.shutdown().await;
}

#[tokio::test]
async fn a_reload_starts_with_empty_caches() {
    build_filters();
    let upstream = Upstream::start().await;
    let manifest = |tokens: serde_json::Value| {
        authn_only(
            token_authn("reload-tokens", tokens, "cache = true\n"),
            &upstream,
        )
    };
    let gateway = ReloadGateway::start(&manifest(tokens_config())).await;
    let client = http_client();
    let url = gateway.url("/open/x");
    for _ in 0..2 {
        let answer = send(bearer(&client, &url, "alice-token")).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    // alice's token revoked: refused on the very next request.
    let bob_only = json!({"tokens": [{"token": "bob-token", "user": "bob", "groups": []}]});
    write_atomically(&gateway.path, &manifest(bob_only));
    gateway.swapped().await;
    send(bearer(&client, &url, "alice-token"))
        .await
        .assert_status(401, "Unauthorized");
    gateway.shutdown().await;
}

/// jwt-authn caps its entry at the token's `exp` (plus its leeway): a token
/// that expires in two seconds is accepted from the cache until then, and
/// refused after, though the manifest's TTL is two minutes.
#[tokio::test]
async fn a_filter_shortens_its_entry_to_the_tokens_expiry() {
    build_filters();
    let upstream = Upstream::start().await;
    let mut config = jwt_config();
    config["leeway_seconds"] = json!(0);
    let manifest = authn_only(
        filter(
            "authentication.filters",
            "expiring-jwt",
            "jwt-authn",
            Some(config),
            "headers = [\"authorization\"]\ncache = true\n",
        ),
        &upstream,
    );
    let gateway = TestGateway::start(&manifest).await;
    let client = http_client();
    let url = gateway.url("/open/x");
    let mut claims = jwt_claims("brief-user");
    claims["exp"] = json!(unix_now() + 2);
    let token = sign_jwt("RS256", &claims);
    for _ in 0..2 {
        let answer = send(bearer(&client, &url, &token)).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    assert_eq!(local_filter_calls("expiring-jwt", "answer"), 1);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    send(bearer(&client, &url, &token))
        .await
        .assert_status(401, "Unauthorized");
    gateway.shutdown().await;
}
