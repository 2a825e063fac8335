//! `wasmgate try`: one request through a manifest's chain, in process with
//! no network, reporting every filter's outcome (answer, error, trap,
//! timeout, exhausted, skipped), the user, and either the route the director chose or
//! the answer the chain gave itself. Run as the real binary, with the real
//! components.

use std::io::Read;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};

use serde_json::{Value, json};

use crate::support::*;

/// `wasmgate try --config <manifest> <args>`, bounded; its exit status,
/// standard output and standard error.
fn run_try(manifest: &Path, args: &[&str]) -> (ExitStatus, String, String) {
    run_try_logging(manifest, args, None)
}

/// [`run_try`] with `RUST_LOG` set to `rust_log` (unset when None).
fn run_try_logging(
    manifest: &Path,
    args: &[&str],
    rust_log: Option<&str>,
) -> (ExitStatus, String, String) {
    let mut command = Command::new(binary());
    command.env_remove("RUST_LOG");
    if let Some(rust_log) = rust_log {
        command.env("RUST_LOG", rust_log);
    }
    let child = command
        .arg("try")
        .arg("--config")
        .arg(manifest)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start wasmgate try");
    let mut child = ChildGuard::new(child);
    let readers: Vec<_> = [
        Box::new(child.child_mut().stdout.take().expect("stdout")) as Box<dyn Read + Send>,
        Box::new(child.child_mut().stderr.take().expect("stderr")),
    ]
    .into_iter()
    .map(|mut pipe| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    })
    .collect();
    let status = child.wait_exit(BOUND);
    let mut texts = readers
        .into_iter()
        .map(|reader| reader.join().expect("a pipe reader"));
    let (stdout, stderr) = (
        texts.next().unwrap_or_default(),
        texts.next().unwrap_or_default(),
    );
    (status, stdout, stderr)
}

/// Runs `try` and parses its report, failing on a non-zero exit.
fn report(manifest: &Path, args: &[&str]) -> Value {
    let (status, stdout, stderr) = run_try(manifest, args);
    assert!(
        status.success(),
        "wasmgate try {args:?} failed ({status}):\n{stderr}"
    );
    serde_json::from_str(&stdout)
        .unwrap_or_else(|error| panic!("not a JSON report ({error}):\n{stdout}\n{stderr}"))
}

/// `(stage, filter, outcome)` of every trace entry.
fn outcomes(report: &Value) -> Vec<(String, String, String)> {
    report["filters"]
        .as_array()
        .expect("a filters list")
        .iter()
        .map(|entry| {
            let text = |key: &str| {
                entry[key]
                    .as_str()
                    .unwrap_or_else(|| panic!("{key} in {entry}"))
                    .to_owned()
            };
            (text("stage"), text("filter"), text("outcome"))
        })
        .collect()
}

fn triple(stage: &str, filter: &str, outcome: &str) -> (String, String, String) {
    (stage.to_owned(), filter.to_owned(), outcome.to_owned())
}

fn write_manifest(dir: &Path) -> std::path::PathBuf {
    let faults = filter(
        "authorization.filters",
        "faults",
        "fault-authz",
        None,
        "timeout = \"100ms\"\nmatch = { path_prefixes = [\"/fault/\"] }\n",
    );
    let labels = filter(
        "admission.mutating",
        "labels",
        "label-defaults",
        Some(json!({"labels": {"team": "platform"}})),
        "",
    );
    let policy = filter(
        "admission.validating",
        "policy",
        "policy-deny",
        Some(
            json!({"rules": [{"pointer": "/spec/replicas", "op": "gt", "value": 10, "message": "too many"}]}),
        ),
        "",
    );
    let manifest = plaintext(
        &[
            tokens(),
            faults,
            rbac(),
            labels,
            policy,
            routes("http://127.0.0.1:9"),
        ]
        .concat(),
    );
    let path = dir.join("gateway.toml");
    std::fs::write(&path, manifest).expect("write the manifest");
    path
}

#[test]
fn try_reports_each_filter_outcome_and_the_decision() {
    let dir = new_dir();
    let manifest = write_manifest(dir.path());
    let alice = ["-H", "Authorization: Bearer alice-token"];

    // A trap: the chain answers 500 itself.
    let trapped = report(
        &manifest,
        &[&["--path", "/fault/trap"][..], &alice].concat(),
    );
    assert_eq!(
        outcomes(&trapped),
        [
            triple("authentication", "tokens", "answer"),
            triple("authorization", "faults", "trap")
        ]
    );
    assert_eq!(trapped["decision"], "answered");
    assert_eq!(trapped["status"], 500);
    assert_eq!(trapped["body"]["reason"], "InternalError");
    assert_eq!(trapped["user"]["name"], "alice");
    assert_eq!(trapped["requestInfo"]["path"], "/fault/trap");
    // The trap's detail carries what the filter wrote to stderr: the panic.
    let detail = trapped["filters"][1]["detail"].as_str().expect("a detail");
    assert!(
        detail.contains("the filter's stderr (last bytes):") && detail.contains("panicked at"),
        "{detail}"
    );

    // A filter error, a timeout, a deny: each its own outcome.
    let failed = report(
        &manifest,
        &[&["--path", "/fault/error"][..], &alice].concat(),
    );
    assert_eq!(
        outcomes(&failed)[1],
        triple("authorization", "faults", "error")
    );
    assert_eq!(failed["status"], 500);
    let stopped = report(
        &manifest,
        &[&["--path", "/fault/loop"][..], &alice].concat(),
    );
    assert_eq!(
        outcomes(&stopped)[1],
        triple("authorization", "faults", "timeout")
    );
    assert_eq!(stopped["status"], 503);
    let denied = report(
        &manifest,
        &[&["--path", "/fault/deny"][..], &alice].concat(),
    );
    assert_eq!(
        outcomes(&denied)[1],
        triple("authorization", "faults", "answer")
    );
    assert_eq!(denied["status"], 403);
    let detail = denied["filters"][1]["detail"].as_str().expect("a detail");
    assert!(detail.contains("deny"), "{detail}");

    // Outside its match the fault filter is skipped; RBAC allows; the
    // director's choice is reported, and nothing is contacted.
    let routed = report(&manifest, &[&["--path", "/open/x"][..], &alice].concat());
    assert_eq!(
        outcomes(&routed),
        [
            triple("authentication", "tokens", "answer"),
            triple("authorization", "faults", "skipped"),
            triple("authorization", "rbac", "answer"),
        ]
    );
    assert_eq!(routed["decision"], "routed");
    assert_eq!(routed["status"], 200);
    assert_eq!(routed["route"]["server"], "gw");
    assert_eq!(routed["route"]["route"], json!({"prefix": "/open/"}));
    let groups = routed["user"]["groups"].as_array().expect("groups");
    assert!(
        groups.contains(&json!("system:authenticated")),
        "{groups:?}"
    );
    // The authenticator's answer is told as the filter gave it: the group
    // kube's AuthenticatedGroupAdder adds is the request's, not the filter's.
    let told = routed["filters"][0]["detail"].as_str().expect("a detail");
    assert!(
        told.starts_with(r#"authenticated "alice" groups ["#)
            && !told.contains("system:authenticated"),
        "{told}"
    );

    // An unrecognised request: a 401 after the authenticator's answer.
    let anonymous = report(&manifest, &["--path", "/open/x"]);
    assert_eq!(
        outcomes(&anonymous),
        [triple("authentication", "tokens", "answer")]
    );
    assert_eq!(anonymous["status"], 401);
}

/// `--repeat 2` reports the second of two requests: a cached filter's
/// answer came from its cache (`hit`), the first time from the filter
/// (`miss`), and a filter without a cache says nothing of one.
#[test]
fn try_says_whether_an_answer_came_from_the_cache() {
    let dir = new_dir();
    let cached = filter(
        "authentication.filters",
        "cached-tokens",
        "token-authn",
        Some(tokens_config()),
        "headers = [\"authorization\"]\ncache = true\n",
    );
    let manifest = plaintext(&[cached, rbac(), routes("http://127.0.0.1:9")].concat());
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, manifest).expect("write the manifest");
    let alice = [
        "--path",
        "/open/x",
        "-H",
        "Authorization: Bearer alice-token",
    ];
    let caches = |report: &Value| -> Vec<Value> {
        report["filters"]
            .as_array()
            .expect("filters")
            .iter()
            .map(|entry| entry["cache"].clone())
            .collect()
    };
    let first = report(&path, &alice);
    assert_eq!(caches(&first), [json!("miss"), Value::Null], "{first}");
    let second = report(&path, &[&alice[..], &["--repeat", "2"]].concat());
    assert_eq!(caches(&second), [json!("hit"), Value::Null], "{second}");
    assert_eq!(second["status"], 200, "{second}");
    let (status, _, stderr) = run_try(&path, &[&alice[..], &["--repeat", "0"]].concat());
    assert!(!status.success(), "--repeat 0 is refused: {stderr}");
}

/// A call the gateway has no room for is `exhausted`, by name, and a 429.
#[test]
fn try_reports_a_call_refused_filter_memory_as_exhausted() {
    let dir = new_dir();
    // The filter may grow to 16 MiB, all filters together to 4 MiB.
    let faults = filter(
        "authorization.filters",
        "faults",
        "fault-authz",
        None,
        "memory = \"16MiB\"\nmatch = { path_prefixes = [\"/fault/\"] }\n",
    );
    let manifest = plaintext(
        &[
            "[limits]\nfilter_memory = \"4MiB\"\n".to_owned(),
            faults,
            routes("http://127.0.0.1:9"),
        ]
        .concat(),
    );
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, manifest).expect("write the manifest");
    let refused = report(&path, &["--path", "/fault/leak-4096"]);
    assert_eq!(
        outcomes(&refused),
        [triple("authorization", "faults", "exhausted")]
    );
    let detail = refused["filters"][0]["detail"].as_str().expect("a detail");
    assert!(detail.contains("limits.filter_memory"), "{detail}");
    assert_eq!(refused["status"], 429);
    assert_eq!(refused["body"]["reason"], "TooManyRequests");
    assert_eq!(refused["body"]["details"]["retryAfterSeconds"], 1);
}

#[test]
fn try_runs_admission_on_a_body_from_a_file() {
    let dir = new_dir();
    let manifest = write_manifest(dir.path());
    let body = dir.path().join("widget.json");
    std::fs::write(
        &body,
        json!({"metadata": {"name": "big"}, "spec": {"replicas": 20}}).to_string(),
    )
    .expect("write");
    let args = [
        "--method",
        "POST",
        "--path",
        WIDGETS,
        "-H",
        "Authorization: Bearer alice-token",
        "-H",
        "Content-Type: application/json",
        "--body",
        body.to_str().expect("a UTF-8 path"),
    ];
    let denied = report(&manifest, &args);
    assert_eq!(
        outcomes(&denied),
        [
            triple("authentication", "tokens", "answer"),
            triple("authorization", "faults", "skipped"),
            triple("authorization", "rbac", "answer"),
            triple("admission", "labels", "answer"),
            triple("admission", "policy", "answer"),
        ]
    );
    assert!(
        denied["filters"][3]["detail"]
            .as_str()
            .expect("a detail")
            .starts_with("patched: "),
        "{denied}"
    );
    assert_eq!(denied["status"], 403);
    assert_eq!(denied["decision"], "answered");
    assert_eq!(
        denied["body"]["message"],
        r#"admission webhook "policy" denied the request: too many"#
    );
}

#[test]
fn try_rejects_bad_arguments_and_manifests() {
    let dir = new_dir();
    let manifest = write_manifest(dir.path());
    let (status, _, stderr) = run_try(&manifest, &["--path", "/open/x", "-H", "no colon here"]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("is not a `Name: value` header"), "{stderr}");

    let broken = dir.path().join("broken.toml");
    std::fs::write(&broken, plaintext(&tokens())).expect("write the manifest");
    let (status, stdout, stderr) = run_try(&broken, &["--path", "/open/x"]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.contains("no authorization filter"), "{stderr}");
}

#[test]
fn a_filter_formats_its_debug_lines_only_for_a_log_that_keeps_them() {
    let dir = new_dir();
    let manifest = write_manifest(dir.path());
    let request = [
        "--path",
        "/apis/demo.example.io/v1/namespaces/default/widgets",
        "-H",
        "Authorization: Bearer alice-token",
    ];
    // rbac-authz asks `host.log-enabled(debug)` before writing out why it
    // allowed: at debug the reason is in the log...
    let (status, _, stderr) = run_try_logging(&manifest, &request, Some("wasmgate::filter=debug"));
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains(r#"RBAC: allowed by RoleBinding "bindings[0]/default" of role "widget-admin" to User "alice""#),
        "{stderr}"
    );
    // ...and at the default level the filter never writes it.
    let (status, _, stderr) = run_try_logging(&manifest, &request, None);
    assert!(status.success(), "{stderr}");
    assert!(!stderr.contains("RBAC: allowed"), "{stderr}");
}

/// A manifest with the fixtures that fail the ways Python and JavaScript
/// code fails: `throw-authn` (JavaScript, as header `x-fault` says) and
/// `raise-authz` (Python, as the last path segment says, on `/fault/`).
fn write_language_faults_manifest(dir: &Path) -> std::path::PathBuf {
    let pooled = "isolation = \"pooled\"\ntimeout = \"5s\"\n";
    let thrower = filter(
        "authentication.filters",
        "thrower",
        "throw-authn",
        None,
        pooled,
    );
    let raiser = filter(
        "authorization.filters",
        "raiser",
        "raise-authz",
        None,
        &format!("{pooled}match = {{ path_prefixes = [\"/fault/\"] }}\n"),
    );
    let manifest = plaintext(
        &[
            "[authentication]\nanonymous = true\n".to_owned(),
            thrower,
            raiser,
            rbac(),
            routes("http://127.0.0.1:9"),
        ]
        .concat(),
    );
    let path = dir.join("languages.toml");
    std::fs::write(&path, manifest).expect("write the manifest");
    path
}

/// The 1-based number of the line of `filters/<file>` that contains `text`.
fn line_of(file: &str, text: &str) -> usize {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("filters")
        .join(file);
    let source = std::fs::read_to_string(&path).expect("read the fixture's source");
    source
        .lines()
        .position(|line| line.contains(text))
        .unwrap_or_else(|| panic!("no {text:?} in {}", path.display()))
        + 1
}

/// The outcome and detail `try` reports for the filter at `index`.
fn outcome_of(report: &Value, index: usize) -> (String, String) {
    let entry = &report["filters"][index];
    let text = |key: &str| {
        entry[key]
            .as_str()
            .unwrap_or_else(|| panic!("{key} in {report}"))
            .to_owned()
    };
    (text("outcome"), text("detail"))
}

#[test]
fn a_raised_exception_and_a_thrown_error_are_filter_errors_with_their_message() {
    let dir = new_dir();
    let manifest = write_language_faults_manifest(dir.path());

    // JavaScript: `throw new Error(...)` is the authenticator's `error` case,
    // with the message and the place; an error is a 401, not a trap's 500.
    let thrown = report(&manifest, &["--path", "/fault/x", "-H", "x-fault: throw"]);
    let (outcome, detail) = outcome_of(&thrown, 0);
    assert_eq!(outcome, "error", "{thrown}");
    let line = line_of("js/throw-authn/filter.js", "throw new Error(");
    assert!(
        detail.starts_with(&format!(
            "Error: throw-authn: cannot read the credentials of /fault/x (at filter.js:{line}:"
        )),
        "{detail}"
    );
    assert_eq!(thrown["status"], 401, "{thrown}");
    // An Error the engine throws, and a thrown string, alike.
    let (outcome, detail) = outcome_of(
        &report(
            &manifest,
            &["--path", "/fault/x", "-H", "x-fault: type-error"],
        ),
        0,
    );
    let line = line_of("js/throw-authn/filter.js", "request.missing.field");
    assert_eq!(outcome, "error");
    assert!(detail.starts_with("TypeError: "), "{detail}");
    assert!(
        detail.contains(&format!("(at filter.js:{line}:")),
        "{detail}"
    );
    let (outcome, detail) = outcome_of(
        &report(&manifest, &["--path", "/fault/x", "-H", "x-fault: string"]),
        0,
    );
    assert_eq!(
        (outcome.as_str(), detail.as_str()),
        ("error", "throw-authn: a thrown string")
    );

    // Python: `raise ValueError(...)` is the authorizer's `err`, with the
    // exception's type, message and line; fail-closed, the stage's 500.
    let raised = report(&manifest, &["--path", "/fault/raise"]);
    assert_eq!(
        outcomes(&raised),
        [
            triple("authentication", "thrower", "answer"),
            triple("authorization", "raiser", "error"),
        ]
    );
    let line = line_of("python/raise-authz/app.py", "raise ValueError(");
    assert_eq!(
        outcome_of(&raised, 1).1,
        format!("ValueError: raise-authz: no rule for system:anonymous (at app.py:{line})")
    );
    assert_eq!(raised["status"], 500);
    assert_eq!(
        raised["body"]["message"],
        "Internal error occurred: the authorization stage failed"
    );
    // Raised in a helper: the helper's line. `Err(message)`: the message as it is.
    let line = line_of("python/raise-authz/app.py", "return rules[key]");
    assert_eq!(
        outcome_of(&report(&manifest, &["--path", "/fault/keyerror"]), 1),
        (
            "error".to_owned(),
            format!("KeyError: 'rules' (at app.py:{line})")
        )
    );
    assert_eq!(
        outcome_of(&report(&manifest, &["--path", "/fault/err"]), 1),
        ("error".to_owned(), "raise-authz: Err requested".to_owned())
    );
    // Neither fixture in the way: RBAC decides.
    let allowed = report(&manifest, &["--path", "/fault/allow"]);
    assert_eq!(outcome_of(&allowed, 1).0, "answer");
    assert_eq!(allowed["status"], 200, "{allowed}");
}

#[test]
fn a_real_trap_stays_a_trap_and_shows_the_filters_stderr() {
    let dir = new_dir();
    let manifest = write_language_faults_manifest(dir.path());

    // JavaScript: recursion without end is SpiderMonkey's InternalError, an
    // engine fault; what the filter printed and the error are in the detail.
    let trapped = report(&manifest, &["--path", "/fault/x", "-H", "x-fault: recurse"]);
    let (outcome, detail) = outcome_of(&trapped, 0);
    assert_eq!(outcome, "trap", "{trapped}");
    assert!(
        detail.contains("the filter's stderr (last bytes):"),
        "{detail}"
    );
    assert!(
        detail.contains("throw-authn: about to recurse without end"),
        "{detail}"
    );
    assert!(
        detail.contains("InternalError: too much recursion"),
        "{detail}"
    );
    assert_eq!(trapped["status"], 500, "{trapped}");

    // Python: a RecursionError, with the interpreter's traceback.
    let trapped = report(&manifest, &["--path", "/fault/recurse"]);
    let (outcome, detail) = outcome_of(&trapped, 1);
    assert_eq!(outcome, "trap", "{trapped}");
    assert!(
        detail.contains("raise-authz: about to recurse without end"),
        "{detail}"
    );
    assert!(
        detail.contains("RecursionError: maximum recursion depth exceeded"),
        "{detail}"
    );
    assert_eq!(trapped["status"], 500);
}
