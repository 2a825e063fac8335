//! Property tests (proptest, on stable): request info, the manifest loader
//! and the Status encoder take any input without panicking, and what they
//! produce keeps its invariants. Case counts are fixed and bounded, so a run
//! takes seconds; `PROPTEST_CASES=N` runs more. A failing case proptest
//! finds is written to `tests/proptest-regressions/properties.txt` (committed)
//! and replayed first on every run; a crash found is also kept below as a
//! named regression test.

use std::path::Path;

use futures_util::FutureExt;
use http::{Method, StatusCode};
use http_body_util::BodyExt;
use proptest::prelude::*;
use wasmgate::config::{self, ConfigError, Location};
use wasmgate::request_info::{RequestInfo, RequestInfoFactory};
use wasmgate::status::{GatewayError, Status};

/// `cases` cases, or `PROPTEST_CASES` when set (for a longer hunt).
fn config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(cases);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------
// Request info
// ---------------------------------------------------------------------------

fn method() -> impl Strategy<Value = Method> {
    prop_oneof![
        prop::sample::select(vec![
            Method::GET,
            Method::POST,
            Method::PUT,
            Method::PATCH,
            Method::DELETE,
            Method::HEAD,
            Method::OPTIONS,
            Method::CONNECT,
            Method::TRACE,
        ]),
        "[A-Za-z!#$%&'*+.^_`|~0-9-]{1,12}"
            .prop_filter_map("a method token", |text| Method::from_bytes(text.as_bytes())
                .ok()),
    ]
}

/// Segments as kube paths have them, and the hostile ones: escapes (valid
/// and not), dot-segments, empty segments, non-ASCII.
fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "api",
            "apis",
            "v1",
            "apps",
            "namespaces",
            "default",
            "kube-system",
            "pods",
            "widgets",
            "status",
            "finalize",
            "watch",
            "proxy",
            "exec",
            "log",
            "..",
            ".",
            "",
            "%2e%2e",
            "%2F",
            "%zz",
            "%",
            "%00",
            ";",
            "é",
            "\u{feff}",
        ])
        .prop_map(str::to_owned),
        "[a-z0-9.%-]{1,10}",
        any::<String>().prop_map(|text| text.replace('?', "")),
    ]
}

fn path() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::collection::vec(segment(), 0..9).prop_map(|segments| format!("/{}", segments.join("/"))),
        1 => any::<String>(),
    ]
}

fn query() -> impl Strategy<Value = Option<String>> {
    let pair = (
        prop::sample::select(vec![
            "watch",
            "labelSelector",
            "fieldSelector",
            "timeoutSeconds",
            "limit",
            "x",
        ]),
        prop_oneof![
            Just(String::new()),
            Just("metadata.name=x".to_owned()),
            Just("1".to_owned()),
            Just("false".to_owned()),
            "[a-z=,!()%;.&-]{0,16}",
        ],
    )
        .prop_map(|(key, value)| format!("{key}={value}"));
    prop_oneof![
        Just(None),
        prop::collection::vec(pair, 0..5).prop_map(|pairs| Some(pairs.join("&"))),
        any::<String>().prop_map(Some),
    ]
}

/// The invariants that hold whatever the request: a resource request's
/// attributes come from its (decoded) path.
fn request_info_invariants(
    method: &Method,
    info: &RequestInfo,
    unresolvable: bool,
) -> Result<(), TestCaseError> {
    let segments: Vec<&str> = info.path.split('/').collect();
    if !info.is_resource_request {
        prop_assert_eq!(&info.verb, &method.as_str().to_ascii_lowercase());
        prop_assert!(info.parts.is_empty());
        prop_assert!(info.resource.is_empty() && info.namespace.is_empty() && info.name.is_empty());
        return Ok(());
    }
    prop_assert!(segments.contains(&info.api_prefix.as_str()), "prefix");
    prop_assert!(segments.contains(&info.api_version.as_str()), "version");
    if info.parts.is_empty() {
        // kube's one unresolvable request: a special verb with nothing after.
        prop_assert!(
            unresolvable,
            "only an unresolvable request has no parts: {:?}",
            info
        );
        return Ok(());
    }
    prop_assert_eq!(&info.parts[0], &info.resource);
    prop_assert!(
        segments
            .windows(info.parts.len())
            .any(|window| window == info.parts.as_slice()),
        "parts {:?} are consecutive segments of {:?}",
        info.parts,
        info.path
    );
    if !info.namespace.is_empty() {
        prop_assert!(segments.contains(&info.namespace.as_str()), "namespace");
    }
    // list, watch and deletecollection may take the name from a
    // `metadata.name=` field selector instead.
    let name_from_selector = !info.field_selector.is_empty()
        && ["list", "watch", "deletecollection"].contains(&info.verb.as_str());
    if !info.name.is_empty() && !name_from_selector {
        prop_assert!(segments.contains(&info.name.as_str()), "name");
    }
    if !info.subresource.is_empty() {
        prop_assert!(info.parts.get(2) == Some(&info.subresource), "subresource");
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(2048))]

    #[test]
    fn request_info_never_panics_and_keeps_its_invariants(
        method in method(),
        path in path(),
        query in query(),
    ) {
        let info = RequestInfo::resolve(&method, &path, query.as_deref());
        let strict = RequestInfoFactory::default().try_resolve(&method, &path, query.as_deref());
        match &strict {
            Ok(resolved) => prop_assert_eq!(resolved, &info),
            Err(unresolvable) => prop_assert_eq!(unresolvable.partial.as_ref(), &info),
        }
        request_info_invariants(&method, &info, strict.is_err())?;
        // Deterministic: the same request is the same request.
        prop_assert_eq!(&RequestInfo::resolve(&method, &path, query.as_deref()), &info);
    }
}

// ---------------------------------------------------------------------------
// The manifest loader
// ---------------------------------------------------------------------------

/// The valid manifests the mutations start from.
fn valid_manifests() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    ["tests/manifests/valid.toml", "examples/quickstart.toml"]
        .iter()
        .map(|file| std::fs::read_to_string(root.join(file)).expect("a valid manifest"))
        .collect()
}

/// Text worth putting into a manifest: extreme numbers and durations,
/// TOML syntax, names of files that are not files.
fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "9223372036854775807",
            "-9223372036854775808",
            "-1",
            "0",
            "1e400",
            "nan",
            "\"18446744073709551615s\"",
            "\"99999999999999999999h\"",
            "\"0s\"",
            "\"1ns\"",
            "\"18446744073709551615\"",
            "\"16EiB\"",
            "\"0\"",
            "\"/dev/zero\"",
            "\"/\"",
            "\"\"",
            "\"\\u0000\"",
            "[[servers]]",
            "[listen]",
            "[[servers.routes]]",
            "[authentication]",
            "[[authentication.filters]]",
            "{",
            "}",
            "[",
            "]]",
            "=",
            "\n",
            "\"",
            "'''",
            "#",
            "\u{feff}",
            "é",
            "\r\n",
            "queue_size = ",
            "cert_dir = ",
            "component = ",
            "memory = ",
            "timeout = ",
        ])
        .prop_map(str::to_owned),
        any::<String>(),
    ]
}

#[derive(Debug, Clone)]
enum Mutation {
    Insert(usize, String),
    Delete(usize, usize),
    Replace(usize, usize, String),
    DuplicateLine(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), fragment()).prop_map(|(at, text)| Mutation::Insert(at, text)),
        (any::<usize>(), 0usize..64).prop_map(|(at, len)| Mutation::Delete(at, len)),
        (any::<usize>(), 0usize..16, fragment())
            .prop_map(|(at, len, text)| Mutation::Replace(at, len, text)),
        any::<usize>().prop_map(Mutation::DuplicateLine),
    ]
}

/// Applies `mutation` to `text`, at char boundaries.
fn mutate(text: &str, mutation: &Mutation) -> String {
    let boundary = |at: usize| {
        let mut at = at % (text.len() + 1);
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        at
    };
    match mutation {
        Mutation::Insert(at, fragment) => {
            let at = boundary(*at);
            format!("{}{fragment}{}", &text[..at], &text[at..])
        }
        Mutation::Delete(at, len) | Mutation::Replace(at, len, _) => {
            let start = boundary(*at);
            let end = boundary(start.saturating_add(*len).min(text.len()));
            let inserted = match mutation {
                Mutation::Replace(_, _, fragment) => fragment.as_str(),
                _ => "",
            };
            format!("{}{inserted}{}", &text[..start], &text[end.max(start)..])
        }
        Mutation::DuplicateLine(line) => {
            let mut lines: Vec<&str> = text.lines().collect();
            if !lines.is_empty() {
                let line = line % lines.len();
                let copy = lines[line];
                lines.insert(line, copy);
            }
            lines.join("\n")
        }
    }
}

/// Loads `source` as a manifest in `tests/manifests/` (so that the valid
/// manifests' relative files resolve) and checks what it reports: every
/// problem says where it is, by a position inside the text or by its key,
/// and a text that is not TOML is reported at a position.
fn load_invariants(source: &str) -> Result<(), TestCaseError> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/manifests/mutated.toml");
    let problems = match config::parse(&path, source) {
        Ok(_) => return Ok(()),
        Err(ConfigError::Invalid { problems, .. }) => problems,
        Err(other) => {
            return Err(TestCaseError::fail(format!(
                "not a manifest problem: {other}"
            )));
        }
    };
    prop_assert!(
        !problems.is_empty(),
        "an invalid manifest names its problems"
    );
    let lines = source.split('\n').count();
    for problem in &problems {
        prop_assert!(
            problem.location.is_some() || !problem.key.is_empty(),
            "{:?} says neither where nor what",
            problem
        );
        if let Some(Location { line, column }) = problem.location {
            prop_assert!(
                line >= 1 && line <= lines && column >= 1,
                "{:?} is outside the text",
                problem
            );
        }
        prop_assert!(!problem.message.is_empty());
    }
    if toml::from_str::<toml::Table>(source).is_err() {
        prop_assert!(
            problems.len() == 1 && problems[0].location.is_some(),
            "a TOML error has a position: {:?}",
            problems
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn the_manifest_loader_never_panics_on_arbitrary_text(source in any::<String>()) {
        load_invariants(&source)?;
    }

    #[test]
    fn the_manifest_loader_never_panics_on_mutated_valid_manifests(
        which in 0usize..2,
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        let mut source = valid_manifests()[which].clone();
        for mutation in &mutations {
            source = mutate(&source, mutation);
        }
        load_invariants(&source)?;
    }
}

// ---------------------------------------------------------------------------
// The Status encoder
// ---------------------------------------------------------------------------

/// Messages a Status may carry: control characters, quotes and escapes,
/// characters JSON or JavaScript treat specially, huge ones.
fn message() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => any::<String>(),
        3 => "[\u{0}-\u{1f}\"\\\\/\u{7f}\u{2028}\u{2029}\u{fffd}\u{feff}\u{ffff}\u{10ffff}]{0,64}",
        1 => (any::<char>(), 0usize..(1 << 20)).prop_map(|(c, count)| c.to_string().repeat(count)),
    ]
}

/// The body of a response the gateway built itself, read whole.
fn body_of(response: wasmgate::body::Response) -> Vec<u8> {
    response
        .into_body()
        .collect()
        .now_or_never()
        .expect("a Status body is ready at once")
        .expect("a Status body cannot fail")
        .to_bytes()
        .to_vec()
}

/// The body is JSON of kube's `metav1.Status` shape, carrying `message` as given.
fn status_invariants(
    body: &[u8],
    code: u16,
    reason: &str,
    message: &str,
) -> Result<(), TestCaseError> {
    let value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|error| TestCaseError::fail(format!("not JSON: {error}")))?;
    let object = value
        .as_object()
        .ok_or_else(|| TestCaseError::fail("not an object"))?;
    prop_assert_eq!(&value["kind"], "Status");
    prop_assert_eq!(&value["apiVersion"], "v1");
    prop_assert_eq!(&value["metadata"], &serde_json::json!({}));
    prop_assert_eq!(
        &value["status"],
        if code < 400 { "Success" } else { "Failure" }
    );
    prop_assert_eq!(value["message"].as_str(), Some(message));
    prop_assert_eq!(value["code"].as_u64(), Some(u64::from(code)));
    if reason.is_empty() {
        prop_assert!(!object.contains_key("reason"));
    } else {
        prop_assert_eq!(value["reason"].as_str(), Some(reason));
    }
    for key in object.keys() {
        prop_assert!(
            [
                "kind",
                "apiVersion",
                "metadata",
                "status",
                "message",
                "reason",
                "details",
                "code"
            ]
            .contains(&key.as_str()),
            "{} is not a Status field",
            key
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn a_status_is_always_kube_shaped_json(
        code in prop::sample::select(vec![400u16, 401, 403, 404, 409, 413, 422, 429, 500, 503, 504]),
        reason in "[A-Za-z]{0,20}",
        message in message(),
    ) {
        let status = StatusCode::from_u16(code).expect("a status code");
        let response = Status::failure(status, &reason, message.clone()).into_response();
        prop_assert_eq!(response.status().as_u16(), code);
        prop_assert_eq!(
            response.headers().get(http::header::CONTENT_TYPE).map(|v| v.as_bytes()),
            Some(&b"application/json"[..])
        );
        status_invariants(&body_of(response), code, &reason, &message)?;
    }

    #[test]
    fn a_gateway_error_with_any_message_is_kube_shaped_json(message in message()) {
        for (error, code, reason) in [
            (GatewayError::BadRequest { message: message.clone() }, 400, "BadRequest"),
            (GatewayError::Invalid { message: message.clone() }, 422, "Invalid"),
        ] {
            status_invariants(&body_of(error.into_response()), code, reason, &message)?;
        }
    }

    #[test]
    fn a_success_status_is_kube_shaped_json(message in message()) {
        status_invariants(&body_of(Status::success(message.clone()).into_response()), 200, "", &message)?;
    }
}
