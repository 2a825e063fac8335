//! `wasmgate new-filter`: every language × kind is scaffolded into a temp
//! dir by the real binary, built by `filters/build.sh` with the real tools,
//! and run by `wasmgate try` on the `try.toml` it wrote, unchanged, with the
//! documented outcome: an authenticator has no opinion, an authorizer
//! allows, an admission filter allows the object, an auditor writes one JSON
//! line per event to standard output, a json auditor the gateway's kube
//! `Event` lines as they are. All 20 are built (a cold run takes a
//! few minutes, mostly componentize-py, componentize-js and compiling their
//! components; later runs reuse `filters/build.sh`'s and the gateway's
//! caches, since the sources are the same).
//!
//! One more test scaffolds into `filters/<lang>/` of a copy of the checkout
//! and runs the exact commands `new-filter` printed, from there: a Rust
//! crate (which `filters/build.sh` records in the copy's `Cargo.lock`) and a
//! C filter.
//! Another builds one Rust filter in two copies of the checkout, which share
//! `filters/build.sh`'s cargo cache: each installs its own component.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::support::{binary, new_dir};

const KINDS: [&str; 5] = [
    "authenticator",
    "authorizer",
    "admission",
    "auditor",
    "json-auditor",
];

fn checkout() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `wasmgate new-filter` in `cwd`; returns its standard output.
fn new_filter(cwd: &Path, args: &[&str]) -> String {
    let output = Command::new(binary())
        .arg("new-filter")
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run wasmgate new-filter");
    assert!(
        output.status.success(),
        "wasmgate new-filter {args:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The command on the line after `heading` in new-filter's output.
fn printed_command(output: &str, heading: &str) -> String {
    let mut lines = output.lines();
    lines
        .find(|line| line.starts_with(heading))
        .unwrap_or_else(|| panic!("no {heading:?} in:\n{output}"));
    lines.next().expect("a command").trim().to_owned()
}

/// Runs `command` with bash in `cwd`, `wasmgate` meaning the binary under
/// test; returns (stdout, stderr), failing the test when it fails.
fn run(cwd: &Path, command: &str) -> (String, String) {
    let command = command.strip_prefix("wasmgate ").map_or_else(
        || command.to_owned(),
        |rest| format!("{} {rest}", binary().display()),
    );
    let output = Command::new("bash")
        .args(["-c", &command])
        .current_dir(cwd)
        .env("RUST_LOG", "wasmgate::filter=debug")
        .output()
        .expect("run bash");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "`{command}` failed:\n{stderr}");
    (stdout, stderr)
}

/// What the build of a `kind` scaffold named `name` prints: the components
/// it put in `dist`, an authorizer's fallback (rbac-authz, which its
/// `try.toml` lists after it) first.
fn built(kind: &str, dist: &Path, name: &str) -> String {
    let mut components = Vec::new();
    if kind == "authorizer" {
        components.push(dist.join("rbac-authz.wasm"));
    }
    components.push(dist.join(format!("{name}.wasm")));
    let lines: Vec<String> = components.iter().map(|c| c.display().to_string()).collect();
    lines.join("\n")
}

/// Checks a `wasmgate try` run of a `kind` scaffold named `name`.
fn assert_tried(kind: &str, name: &str, stdout: &str, stderr: &str) {
    // Records an auditor writes to stdout come before the pretty report.
    let start = stdout.find("\n{\n").map_or(0, |at| at + 1);
    let (records, report) = stdout.split_at(start);
    let report: Value = serde_json::from_str(report)
        .unwrap_or_else(|error| panic!("no JSON report ({error}):\n{stdout}"));
    assert_eq!(report["status"], 200, "{name}: {report:#}");
    assert_eq!(report["decision"], "routed", "{name}: {report:#}");
    let filters = report["filters"].as_array().expect("filters");
    match kind {
        "auditor" | "json-auditor" => {
            assert!(
                filters.is_empty(),
                "{name}: audit filters are not in the report"
            );
            let stages: Vec<String> = records
                .lines()
                .map(|line| {
                    let record: Value = serde_json::from_str(line).unwrap_or_else(|error| {
                        panic!("{name}: not a JSON record ({error}): {line}")
                    });
                    // The record auditor's own line names the user; the
                    // gateway's kube Event has `user.username`.
                    let user = if kind == "auditor" {
                        &record["user"]
                    } else {
                        assert_eq!(record["kind"], "Event", "{name}: {record}");
                        assert_eq!(record["apiVersion"], "audit.k8s.io/v1", "{name}: {record}");
                        &record["user"]["username"]
                    };
                    assert_eq!(user, "system:anonymous", "{name}: {record}");
                    assert_eq!(record["verb"], "list", "{name}: {record}");
                    record["stage"].as_str().expect("a stage").to_owned()
                })
                .collect();
            assert_eq!(
                stages,
                ["RequestReceived", "ResponseComplete"],
                "{name}:\n{stdout}"
            );
        }
        _ => {
            assert!(
                records.trim().is_empty(),
                "{name}: unexpected output before the report:\n{records}"
            );
            let (stage, detail) = match kind {
                "authenticator" => ("authentication", "no opinion"),
                "authorizer" => ("authorization", "allow"),
                _ => ("admission", "allowed"),
            };
            assert_eq!(filters.len(), 1, "{name}: {report:#}");
            assert_eq!(filters[0]["stage"], stage, "{name}");
            assert_eq!(filters[0]["filter"], name, "{name}");
            assert_eq!(filters[0]["outcome"], "answer", "{name}: {report:#}");
            assert_eq!(filters[0]["detail"], detail, "{name}: {report:#}");
            assert_eq!(report["user"]["name"], "system:anonymous", "{name}");
        }
    }
    // The filter's own debug line, through host.log.
    assert!(
        stderr.contains(&format!("filter=\"{name}\"")),
        "{name} logged nothing:\n{stderr}"
    );
}

/// Scaffolds, builds and tries every kind of `lang` in a temp dir.
fn every_kind_builds_and_tries(lang: &str) {
    let dir = new_dir();
    for kind in KINDS {
        let name = format!("new-{lang}-{kind}");
        let output = new_filter(
            dir.path(),
            &[
                "--lang",
                lang,
                "--kind",
                kind,
                &name,
                "--dir",
                &dir.path().display().to_string(),
            ],
        );
        let folder = dir.path().join(&name);
        assert!(
            folder.join("README.md").is_file() && folder.join("try.toml").is_file(),
            "{output}"
        );
        let build = printed_command(&output, "build it");
        let (stdout, stderr) = run(checkout(), &build);
        assert_eq!(
            stdout.trim(),
            built(kind, &folder.join("dist"), &name),
            "{stderr}"
        );
        let try_command = printed_command(&output, "try it");
        let (stdout, stderr) = run(checkout(), &try_command);
        assert_tried(kind, &name, &stdout, &stderr);
    }
}

#[test]
fn rust_scaffolds_build_and_pass_try() {
    every_kind_builds_and_tries("rust");
}

#[test]
fn python_scaffolds_build_and_pass_try() {
    every_kind_builds_and_tries("python");
}

#[test]
fn javascript_scaffolds_build_and_pass_try() {
    every_kind_builds_and_tries("js");
}

#[test]
fn c_scaffolds_build_and_pass_try() {
    every_kind_builds_and_tries("c");
}

/// Copies `from` into `to`, leaving out build outputs.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create a folder");
    for entry in std::fs::read_dir(from).expect("read a folder") {
        let entry = entry.expect("a folder entry");
        let name = entry.file_name();
        if name == "dist" || name == "target" || name == "__pycache__" || name == "node_modules" {
            continue;
        }
        let path = entry.path();
        if path.is_dir() {
            copy_tree(&path, &to.join(&name));
        } else {
            std::fs::copy(&path, to.join(&name)).expect("copy a file");
        }
    }
}

#[test]
fn in_a_checkout_the_printed_commands_build_and_try_the_new_filter() {
    let dir = new_dir();
    let copy: PathBuf = dir.path().join("wasmgate");
    copy_tree(&checkout().join("filters"), &copy.join("filters"));
    copy_tree(&checkout().join("wit"), &copy.join("wit"));
    for (lang, kind, name) in [
        ("rust", "authorizer", "team-guard"),
        ("c", "admission", "size-check"),
    ] {
        // From a subfolder: the checkout is found upward.
        let output = new_filter(
            &copy.join("filters"),
            &["--lang", lang, "--kind", kind, name],
        );
        let folder = copy.join("filters").join(lang).join(name);
        assert!(
            output.starts_with(&format!("created {}:", folder.display())),
            "{output}"
        );
        let build = printed_command(&output, "build it");
        let fallback = if kind == "authorizer" {
            "filters/rust/rbac-authz "
        } else {
            ""
        };
        assert_eq!(
            build,
            format!("filters/build.sh {fallback}filters/{lang}/{name}")
        );
        let (stdout, _) = run(&copy, &build);
        assert_eq!(stdout.trim(), built(kind, &copy.join("filters/dist"), name));
        let (stdout, stderr) = run(&copy, &printed_command(&output, "try it"));
        assert_tried(kind, name, &stdout, &stderr);
    }
    // The new crate is a workspace member by the glob, recorded in Cargo.lock.
    let lock = std::fs::read_to_string(copy.join("filters/Cargo.lock")).expect("read Cargo.lock");
    assert!(
        lock.contains("name = \"team-guard\""),
        "team-guard is not in the copy's Cargo.lock"
    );
    // A second scaffold of the same name is refused, in any language.
    let output = Command::new(binary())
        .args([
            "new-filter",
            "--lang",
            "python",
            "--kind",
            "authorizer",
            "team-guard",
        ])
        .current_dir(&copy)
        .output()
        .expect("run wasmgate new-filter");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("a filter named \"team-guard\" exists already"),
        "{stderr}"
    );
}

/// Two checkouts share `filters/build.sh`'s cargo cache, and each installs
/// its own build of a Rust filter: cargo tells a workspace crate's builds
/// apart by its path within the workspace, so `b`'s build counted `a`'s as
/// its own and installed it.
#[test]
fn two_checkouts_sharing_the_cargo_cache_each_install_their_own_component() {
    let dir = new_dir();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    for copy in [&a, &b] {
        copy_tree(&checkout().join("filters"), &copy.join("filters"));
        copy_tree(&checkout().join("wit"), &copy.join("wit"));
    }
    // b's fault-authn names itself differently in its messages.
    let source = b.join("filters/rust/fault-authn/src/lib.rs");
    let text = std::fs::read_to_string(&source).expect("read fault-authn");
    let renamed = text.replacen(
        "const NAME: &str = \"fault-authn\";",
        "const NAME: &str = \"fault-authn-of-checkout-b\";",
        1,
    );
    assert_ne!(
        renamed, text,
        "fault-authn's NAME is where this test expects"
    );
    std::fs::write(&source, renamed).expect("write fault-authn");
    let build = "filters/build.sh filters/rust/fault-authn";
    let marked = |copy: &Path| {
        let component = std::fs::read(copy.join("filters/dist/fault-authn.wasm"))
            .expect("read the installed component");
        component
            .windows(b"of-checkout-b".len())
            .any(|window| window == b"of-checkout-b")
    };
    for (copy, is_b) in [(&a, false), (&b, true), (&a, false)] {
        run(copy, build);
        assert_eq!(
            marked(copy),
            is_b,
            "{} installed the other checkout's component",
            copy.display()
        );
    }
}

/// Runs `command` (a build) with bash in `cwd`, expecting it to fail;
/// returns its standard error.
fn run_failing(cwd: &Path, command: &str) -> String {
    let output = Command::new("bash")
        .args(["-c", command])
        .current_dir(cwd)
        .output()
        .expect("run bash");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "`{command}` succeeded:\n{stderr}");
    stderr
}

/// Replaces the one occurrence of `from` in `file` with `to`.
fn edit(file: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(file).expect("read a scaffold source");
    assert_eq!(
        text.matches(from).count(),
        1,
        "{from:?} in {}",
        file.display()
    );
    std::fs::write(file, text.replace(from, to)).expect("write a scaffold source");
}

/// The 1-based number of the line of `file` that contains `text`.
fn line_of(file: &Path, text: &str) -> usize {
    let source = std::fs::read_to_string(file).expect("read a scaffold source");
    source
        .lines()
        .position(|line| line.contains(text))
        .unwrap_or_else(|| panic!("no {text:?} in {}", file.display()))
        + 1
}

/// A Python and a JavaScript authorizer scaffold, changed the way a new
/// author would: the one raises an exception, the other throws an Error.
/// `wasmgate try` reports the filter's error outcome with the message and
/// line (not a trap), and a syntax error fails the build with
/// file:line:column and no tool backtrace.
#[test]
fn a_scaffold_that_raises_or_throws_fails_as_a_filter_error_and_syntax_errors_name_their_line() {
    let dir = new_dir();
    let path = "/apis/example.com/v1/namespaces/default/things";
    for (lang, source, allow, fail, raised, broken, message) in [
        (
            "python",
            "app.py",
            "return Decision_Allow()",
            "raise LookupError(f\"no policy for {request.path}\")",
            "LookupError",
            "\ndef broken(:\n    pass\n",
            "SyntaxError: ",
        ),
        (
            "js",
            "filter.js",
            "return { tag: 'allow' };",
            "throw new Error(`no policy for ${request.path}`);",
            "Error",
            "\nexport const broken = ;\n",
            "SyntaxError: Unexpected token ';'",
        ),
    ] {
        let name = format!("failing-{lang}");
        let output = new_filter(
            dir.path(),
            &[
                "--lang",
                lang,
                "--kind",
                "authorizer",
                &name,
                "--dir",
                &dir.path().display().to_string(),
            ],
        );
        let folder = dir.path().join(&name);
        let readme = std::fs::read_to_string(folder.join("README.md")).expect("read the README");
        assert!(readme.contains("## Errors, traps and prints"), "{readme}");
        let file = folder.join(source);
        edit(&file, allow, fail);
        let line = line_of(&file, fail);
        let build = printed_command(&output, "build it");
        run(checkout(), &build);
        let (stdout, _) = run(checkout(), &printed_command(&output, "try it"));
        let report: Value = serde_json::from_str(&stdout)
            .unwrap_or_else(|error| panic!("no JSON report ({error}):\n{stdout}"));
        let entry = &report["filters"][0];
        assert_eq!(entry["outcome"], "error", "{lang}: {report:#}");
        let detail = entry["detail"].as_str().expect("a detail");
        assert!(
            detail.starts_with(&format!(
                "{raised}: no policy for {path} (at {source}:{line}"
            )),
            "{lang}: {detail}"
        );
        assert_eq!(report["status"], 500, "{lang}: fail-closed: {report:#}");

        // A syntax error: the build names the file, line and column.
        let text = std::fs::read_to_string(&file).expect("read");
        std::fs::write(&file, format!("{text}{broken}")).expect("write");
        let bad_line = text.lines().count() + 2;
        let stderr = run_failing(checkout(), &build);
        let located = format!("{}:{bad_line}:", file.display());
        let report_line = stderr
            .lines()
            .find(|line| line.starts_with(&located))
            .unwrap_or_else(|| panic!("{lang}: no {located:?} in:\n{stderr}"));
        let rest = &report_line[located.len()..];
        let (column, what) = rest.split_once(": ").expect("line:column: message");
        assert!(column.parse::<u32>().is_ok_and(|c| c > 0), "{report_line}");
        assert!(what.starts_with(message), "{report_line}");
        assert!(
            !stderr.contains("backtrace"),
            "{lang}: a tool backtrace:\n{stderr}"
        );
        // Counted from the failing filter's own build: what comes before it
        // (try.toml's fallback, rbac-authz, rebuilt when its cargo target
        // dir was used by another checkout) is not this filter's error.
        let own_build = format!("filters: {lang}: {name} ");
        let from_own_build = stderr
            .lines()
            .skip_while(|line| !line.starts_with(&own_build))
            .count();
        assert!(
            (1..=8).contains(&from_own_build),
            "{lang}: more than the error:\n{stderr}"
        );
    }
}

/// An authorizer scaffold changed to have no opinion, as most authorizers
/// have on what they do not judge: its `try.toml`'s fallback (rbac-authz)
/// allows the request, where a lone authorizer's no-opinion would be the
/// union's 403.
#[test]
fn an_authorizer_scaffold_with_no_opinion_is_allowed_by_its_fallback() {
    let dir = new_dir();
    let name = "undecided";
    let output = new_filter(
        dir.path(),
        &[
            "--lang",
            "python",
            "--kind",
            "authorizer",
            name,
            "--dir",
            &dir.path().display().to_string(),
        ],
    );
    let folder = dir.path().join(name);
    edit(
        &folder.join("app.py"),
        "return Decision_Allow()",
        "return Decision_NoOpinion(\"not mine\")",
    );
    run(checkout(), &printed_command(&output, "build it"));
    let (stdout, _) = run(checkout(), &printed_command(&output, "try it"));
    let report: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|error| panic!("no JSON report ({error}):\n{stdout}"));
    let answers: Vec<(&str, &str)> = report["filters"]
        .as_array()
        .expect("filters")
        .iter()
        .map(|entry| {
            (
                entry["filter"].as_str().expect("a filter"),
                entry["detail"].as_str().expect("a detail"),
            )
        })
        .collect();
    assert_eq!(
        answers,
        [(name, "no opinion: not mine"), ("fallback", "allow")],
        "{report:#}"
    );
    assert_eq!(report["status"], 200, "{report:#}");
}
