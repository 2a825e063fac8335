//! The filter contract's versions and `reads`, over real sockets with real
//! components: a filter built against `wasmgate:filter@0.4.0` (as 0.3.0,
//! which made them options) is given the optional fields its manifest
//! entry's `reads` lists (every one without `reads`), and a component built
//! against `0.2.0` (the compat-0-2-authn, compat-0-2-authz and
//! compat-0-2-admission fixtures: every shipped filter is on 0.4.0) still
//! loads and decides on 0.2.0's records, filled from 0.3.0's (a field `reads` leaves out as empty, `parts` from the path).
//! A record auditor built against `0.3.0` (compat-0-3-audit: 0.4.0 added
//! the serialised auditor, which jsonl-audit is) still loads and is given
//! every event's fields, beside jsonl-audit in one chain. The 0.1.0
//! fixtures are in `decision_cache` and `audit_batches`.

use std::path::Path;

use serde_json::json;

use crate::support::*;

/// A gateway with anonymous users and `filters` (manifest entries).
async fn start(filters: &[String]) -> (TestGateway, Upstream) {
    build_filters();
    let upstream = Upstream::start().await;
    let manifest = plaintext(
        &[
            "[authentication]\nanonymous = true\n".to_owned(),
            filters.concat(),
            routes(&upstream.url()),
        ]
        .concat(),
    );
    (TestGateway::start(&manifest).await, upstream)
}

/// The reason of the 403 `path` gets (kube's message ends with it).
async fn denial(gateway: &TestGateway, path: &str) -> String {
    let answer = get(&http_client(), &gateway.url(path)).await;
    let status = answer.assert_status(403, "Forbidden");
    status["message"].as_str().unwrap_or_default().to_owned()
}

/// A list of resource `attributes` with a label selector: the fixture's
/// word is the path's last segment.
const ATTRIBUTES: &str =
    "/apis/demo.example.io/v1/namespaces/default/attributes?labelSelector=team%3Da";

#[tokio::test]
async fn a_0_2_0_authorizer_decides_as_before() {
    let (gateway, _upstream) = start(&[filter(
        "authorization.filters",
        "legacy-authz",
        "compat-0-2-authz",
        None,
        "isolation = \"pooled\"\n",
    )])
    .await;
    let client = http_client();
    let allowed = send(client.get(gateway.url(&format!("{WIDGETS}/allow")))).await;
    assert_eq!(allowed.status, 200, "{}", allowed.body);
    let denied = denial(&gateway, "/fault/deny").await;
    assert!(
        denied.ends_with("compat-0-2-authz: deny requested"),
        "{denied}"
    );
    let attributes = denial(&gateway, ATTRIBUTES).await;
    for given in [
        "user=system:anonymous ",
        "resource-request=true verb=list api-prefix=apis api-group=demo.example.io api-version=v1 namespace=default resource=attributes name= parts=attributes label-selector=team=a field-selector=",
    ] {
        assert!(attributes.contains(given), "{given:?} not in {attributes}");
    }
    gateway.shutdown().await;
}

/// `reads` works for a 0.2.0 component too: what it leaves out reaches the
/// component as 0.2.0 had it when empty; `parts`, gone from 0.3.0, is still
/// the path's.
#[tokio::test]
async fn a_0_2_0_authorizer_sees_what_reads_leaves_out_as_empty() {
    let (gateway, _upstream) = start(&[filter(
        "authorization.filters",
        "legacy-reads",
        "compat-0-2-authz",
        None,
        "reads = [\"api-version\"]\n",
    )])
    .await;
    let attributes = denial(&gateway, ATTRIBUTES).await;
    let given = "verb=list api-prefix= api-group=demo.example.io api-version=v1 namespace=default resource=attributes name= parts=attributes label-selector= field-selector=";
    assert!(attributes.contains(given), "{given:?} not in {attributes}");
    gateway.shutdown().await;
}

/// The name compat-0-2-authn gives a `/whoami?q=1` request with `x-compat:
/// word` (`attributes`: the request view spelled out), or its status.
async fn legacy_user(gateway: &TestGateway, word: &str) -> String {
    whoami(
        http_client()
            .get(gateway.url(&format!("{WHOAMI}?q=1")))
            .header("x-compat", word),
    )
    .await
}

#[tokio::test]
async fn a_0_2_0_authenticator_decides_as_before() {
    let (gateway, _upstream) = start(&[
        filter(
            "authentication.filters",
            "legacy-authn",
            "compat-0-2-authn",
            None,
            "isolation = \"pooled\"\n",
        ),
        rbac(),
    ])
    .await;
    assert_eq!(legacy_user(&gateway, "user").await, "compat-0-2-authn");
    assert_eq!(legacy_user(&gateway, "none").await, "system:anonymous");
    // Its error is an authenticator's error, never anonymous: a 401.
    send(
        http_client()
            .get(gateway.url(WHOAMI))
            .header("x-compat", "error"),
    )
    .await
    .assert_status(401, "Unauthorized");
    let given = legacy_user(&gateway, "attributes").await;
    assert!(
        given.starts_with("method=GET path=/whoami query=q=1 remote-addr=127.0.0.1:"),
        "{given}"
    );
    gateway.shutdown().await;
}

/// What `reads` leaves out of an authenticator's request view reaches a
/// 0.2.0 one as an empty string.
#[tokio::test]
async fn a_0_2_0_authenticator_sees_what_reads_leaves_out_as_empty() {
    let (gateway, _upstream) = start(&[
        filter(
            "authentication.filters",
            "legacy-authn-reads",
            "compat-0-2-authn",
            None,
            "reads = [\"path\"]\n",
        ),
        rbac(),
    ])
    .await;
    assert_eq!(
        legacy_user(&gateway, "attributes").await,
        "method= path=/whoami query= remote-addr="
    );
    gateway.shutdown().await;
}

/// The message of the answer a create of an object named `name` gets, and
/// its status code.
async fn admitted(gateway: &TestGateway, name: &str) -> (u16, String) {
    let object = json!({"metadata": {"name": name}});
    let answer = send(
        http_client()
            .post(gateway.url(WIDGETS))
            .header("content-type", "application/json")
            .body(object.to_string()),
    )
    .await;
    let message = serde_json::from_str::<serde_json::Value>(&answer.body)
        .ok()
        .and_then(|status| status["message"].as_str().map(str::to_owned))
        .unwrap_or_default();
    (answer.status, message)
}

/// What the client reads before a denial of the filter of
/// [`legacy_admission`], named `legacy-admission`.
const LEGACY_DENIED: &str = r#"admission webhook "legacy-admission" denied the request: "#;

/// A gateway that allows every request and admits with compat-0-2-admission
/// (manifest settings `settings`).
async fn legacy_admission(settings: &str) -> (TestGateway, Upstream) {
    start(&[
        "\n[authorization]\nalways_allow = true\n".to_owned(),
        filter(
            "admission.validating",
            "legacy-admission",
            "compat-0-2-admission",
            None,
            settings,
        ),
    ])
    .await
}

#[tokio::test]
async fn a_0_2_0_admission_filter_decides_as_before() {
    let (gateway, upstream) = legacy_admission("isolation = \"pooled\"\n").await;
    assert_eq!(admitted(&gateway, "fine").await.0, 200);
    assert_eq!(
        admitted(&gateway, "deny").await,
        (
            403,
            format!("{LEGACY_DENIED}compat-0-2-admission: deny requested")
        )
    );
    // Its error under the default failure policy (fail): the request fails.
    assert_eq!(admitted(&gateway, "error").await.0, 500);
    let (code, given) = admitted(&gateway, "attributes").await;
    assert_eq!(code, 403);
    assert_eq!(
        given,
        LEGACY_DENIED.to_owned()
            + "verb=create api-prefix=apis api-group=demo.example.io api-version=v1 namespace=default resource=widgets parts=widgets label-selector= user=system:anonymous groups=system:unauthenticated"
    );
    assert_eq!(upstream.hits(), 1, "only the allowed create went up");
    gateway.shutdown().await;
}

/// An admission review without the request info or the user (`reads`
/// leaves them out) reaches a 0.2.0 filter as empty records; `parts` is
/// still the path's.
#[tokio::test]
async fn a_0_2_0_admission_filter_sees_what_reads_leaves_out_as_empty() {
    for (reads, expected) in [
        (
            "reads = []\n",
            "verb= api-prefix= api-group= api-version= namespace= resource= parts= label-selector= user= groups=",
        ),
        (
            "reads = [\"user\"]\n",
            "verb= api-prefix= api-group= api-version= namespace= resource= parts= label-selector= user=system:anonymous groups=system:unauthenticated",
        ),
        (
            "reads = [\"api-version\"]\n",
            "verb=create api-prefix= api-group=demo.example.io api-version=v1 namespace=default resource=widgets parts=widgets label-selector= user= groups=",
        ),
    ] {
        let (gateway, _upstream) = legacy_admission(reads).await;
        assert_eq!(
            admitted(&gateway, "attributes").await,
            (403, format!("{LEGACY_DENIED}{expected}")),
            "{reads:?}"
        );
        gateway.shutdown().await;
    }
}

#[tokio::test]
async fn a_0_4_0_authorizer_is_given_the_options_it_reads() {
    let every = filter(
        "authorization.filters",
        "given-all",
        "fault-authz",
        None,
        "",
    );
    let (gateway, _upstream) = start(&[every]).await;
    let given = "/apis/demo.example.io/v1/namespaces/default/given?labelSelector=x";
    assert!(
        denial(&gateway, given)
            .await
            .ends_with("api-prefix=apis api-version=v1 label-selector=x field-selector="),
        "without reads, every option"
    );
    gateway.shutdown().await;

    let one = filter(
        "authorization.filters",
        "given-one",
        "fault-authz",
        None,
        "reads = [\"api-version\"]\n",
    );
    let (gateway, _upstream) = start(&[one]).await;
    let reason = denial(&gateway, given).await;
    assert!(
        reason.ends_with("api-prefix=- api-version=v1 label-selector=- field-selector=-"),
        "{reason}"
    );
    gateway.shutdown().await;
}

#[tokio::test]
async fn a_0_4_0_admission_filter_is_given_the_request_and_user_it_reads() {
    let client = http_client();
    for (reads, expected) in [
        ("", "request=create user=system:anonymous"),
        ("reads = []\n", "request=- user=-"),
        ("reads = [\"user\"]\n", "request=- user=system:anonymous"),
        // A field of the request info is read with the request info.
        ("reads = [\"api-version\"]\n", "request=create user=-"),
    ] {
        let (gateway, _upstream) = start(&[
            "\n[authorization]\nalways_allow = true\n".to_owned(),
            filter(
                "admission.validating",
                "given",
                "fault-admission",
                None,
                reads,
            ),
        ])
        .await;
        let object = json!({"metadata": {"name": "given"}});
        let status = send(
            client
                .post(gateway.url(WIDGETS))
                .header("content-type", "application/json")
                .body(object.to_string()),
        )
        .await
        .assert_status(403, "Forbidden");
        assert_eq!(
            status["message"],
            format!(r#"admission webhook "given" denied the request: {expected}"#),
            "{reads:?}"
        );
        gateway.shutdown().await;
    }
}

/// The lines of the sink file `name` beside the gateway's manifest, once
/// there are `count`.
async fn sink_lines(gateway: &TestGateway, name: &str, count: usize) -> Vec<String> {
    let path = gateway.dir.path().join(name);
    eventually(&format!("{count} lines in {name}"), || async {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        (lines.len() >= count).then_some(lines)
    })
    .await
}

/// In both modes: blocking (a batch of one event, written before the
/// request goes on) and batch (the records queued, since one auditor takes
/// them so, and serialised once a batch for jsonl-audit).
#[tokio::test]
async fn a_0_3_0_record_auditor_records_beside_a_serialised_one() {
    build_filters();
    for mode in ["blocking", "batch"] {
        record_and_serialised_auditors_in(mode).await;
    }
}

async fn record_and_serialised_auditors_in(mode: &str) {
    let upstream = Upstream::start().await;
    let manifest = plaintext(
        &[
            "[authentication]\nanonymous = true\n[authorization]\nalways_allow = true\n".to_owned(),
            format!("\n[audit]\nmode = \"{mode}\"\n[[audit.policy]]\nlevel = \"Metadata\"\n"),
            filter(
                "audit.filters",
                "legacy-audit",
                "compat-0-3-audit",
                None,
                "sink = \"legacy.log\"\nisolation = \"pooled\"\n",
            ),
            audit_log_sink(),
            routes(&upstream.url()),
        ]
        .concat(),
    );
    let gateway = TestGateway::start(&manifest).await;
    let answer = send(http_client().get(gateway.url("/open/versions"))).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let id = answer.header("audit-id").expect("an Audit-ID").to_owned();
    // The fixture ends each line with the size of the batch it came in:
    // one event each in blocking mode, both in one batch or one each in
    // batch mode (they are made apart by the request's round trip).
    let (lines, batch_sizes): (Vec<_>, Vec<_>) = sink_lines(&gateway, "legacy.log", 2)
        .await
        .into_iter()
        .map(|line| {
            let (line, size) = line.rsplit_once(' ').expect("a batch size");
            (line.to_owned(), size.to_owned())
        })
        .unzip();
    assert_eq!(
        lines,
        [
            format!("{id} RequestReceived system:anonymous -"),
            format!("{id} ResponseComplete system:anonymous 200"),
        ],
        "{mode}"
    );
    let expected_sizes: &[&[&str]] = match mode {
        "blocking" => &[&["1", "1"]],
        _ => &[&["1", "1"], &["2", "2"]],
    };
    let sizes: Vec<&str> = batch_sizes.iter().map(String::as_str).collect();
    assert!(
        expected_sizes.contains(&sizes.as_slice()),
        "{mode}: {sizes:?}"
    );
    let lines = sink_lines(&gateway, "audit.jsonl", 2).await;
    let events: Vec<serde_json::Value> = lines
        .iter()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    for (event, stage) in events.iter().zip(["RequestReceived", "ResponseComplete"]) {
        assert_eq!(event["auditID"], id.as_str(), "{mode}");
        assert_eq!(event["stage"], stage, "{mode}");
        assert_eq!(event["user"]["username"], "system:anonymous");
    }
    assert_eq!(events[1]["responseStatus"]["code"], 200);
    gateway.shutdown().await;
}

#[test]
fn reads_names_optional_fields_of_the_stage_records() {
    let text = plaintext(
        &[
            filter(
                "authentication.filters",
                "authn",
                "fault-authn",
                None,
                "reads = [\"path\", \"path\", \"verb\"]\n",
            ),
            filter(
                "authorization.filters",
                "authz",
                "fault-authz",
                None,
                "reads = [\"method\", \"label-selector\"]\n",
            ),
            filter(
                "admission.mutating",
                "admit",
                "fault-admission",
                None,
                "reads = [\"user\", \"request\", \"parts\"]\n",
            ),
            filter(
                "audit.filters",
                "audit",
                "jsonl-audit",
                None,
                "reads = []\n",
            ),
            routes("http://127.0.0.1:9"),
        ]
        .concat(),
    );
    let error = wasmgate::config::parse(Path::new("gw.toml"), &text)
        .expect_err("refused")
        .to_string();
    for expected in [
        "authentication.filters[0].reads: \"path\" is listed twice",
        "authentication.filters[0].reads: \"verb\" is not an optional field of this stage's records: one of method, path, query, remote-addr",
        "authorization.filters[0].reads: \"method\" is not an optional field of this stage's records: one of api-prefix, api-version, label-selector, field-selector",
        "admission.mutating[0].reads: \"parts\" is not an optional field of this stage's records: one of request, user, api-prefix, api-version, label-selector, field-selector",
        "audit.filters[0].reads: audit filters are given whole events",
    ] {
        assert!(error.contains(expected), "{expected:?} not in:\n{error}");
    }
    assert!(
        !error.contains("label-selector\" is not"),
        "a field of the stage is accepted:\n{error}"
    );
}
