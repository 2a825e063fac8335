//! `wasmgate check` golden tests: every `tests/manifests/<name>.toml` is
//! checked by the real binary and its output compared, byte for byte, with
//! `<name>.expected` (the folder's absolute path written as `<dir>`). Broken
//! manifests must exit non-zero with every problem on stderr; manifests
//! named `valid*` must exit 0 with the summary on stdout.
//!
//! `WASMGATE_BLESS=1 cargo test --test check` rewrites the `.expected` files
//! from the current output (review the diff before committing).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn manifests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("manifests")
}

struct Checked {
    success: bool,
    stdout: String,
    stderr: String,
}

fn check(manifest: &Path) -> Checked {
    let output = Command::new(common::binary())
        .args(["check", "--config"])
        .arg(manifest)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run wasmgate check");
    let dir = manifests_dir().display().to_string();
    let placeholder = |text: &[u8]| String::from_utf8_lossy(text).replace(&dir, "<dir>");
    Checked {
        success: output.status.success(),
        stdout: placeholder(&output.stdout),
        stderr: placeholder(&output.stderr),
    }
}

#[test]
fn every_manifest_gives_its_expected_output() {
    let bless = std::env::var_os("WASMGATE_BLESS").is_some();
    let mut manifests: Vec<PathBuf> = std::fs::read_dir(manifests_dir())
        .expect("tests/manifests")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
        .collect();
    manifests.sort();
    assert!(
        manifests.len() >= 14,
        "the golden manifests are missing: {manifests:?}"
    );

    let mut failures = Vec::new();
    for manifest in &manifests {
        let name = manifest
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("a file name");
        let valid = name.starts_with("valid");
        let checked = check(manifest);
        let (actual, other) = if valid {
            (&checked.stdout, &checked.stderr)
        } else {
            (&checked.stderr, &checked.stdout)
        };
        let expected_path = manifest.with_extension("expected");
        if bless {
            std::fs::write(&expected_path, actual).expect("write the expected output");
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_else(|_| {
            panic!(
                "{} is missing (WASMGATE_BLESS=1 writes it)",
                expected_path.display()
            )
        });
        if checked.success != valid {
            failures.push(format!(
                "{name}: exit success = {}, expected {valid}\n{actual}",
                checked.success
            ));
        }
        if *actual != expected {
            failures.push(format!(
                "{name}: output differs\n--- expected\n{expected}--- actual\n{actual}"
            ));
        }
        if !other.is_empty() {
            failures.push(format!(
                "{name}: unexpected output on the other stream:\n{other}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn problems_name_the_file_line_column_and_key() {
    // Every line of every broken manifest's report points into the manifest.
    for entry in std::fs::read_dir(manifests_dir()).expect("tests/manifests") {
        let path = entry.expect("an entry").path();
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("")
            .to_owned();
        if path.extension().is_none_or(|ext| ext != "toml") || name.starts_with("valid") {
            continue;
        }
        let checked = check(&path);
        for line in checked.stderr.lines() {
            let prefix = format!("<dir>/{name}.toml:");
            assert!(
                line.starts_with(&prefix),
                "{name}: {line:?} does not start with {prefix:?}"
            );
        }
    }
}

#[test]
fn a_missing_manifest_is_reported() {
    let checked = check(&manifests_dir().join("no-such-manifest.toml"));
    assert!(!checked.success);
    assert_eq!(
        checked.stderr,
        "<dir>/no-such-manifest.toml: cannot read the manifest: No such file or directory (os error 2)\n"
    );
}

#[test]
fn the_quickstart_example_is_valid() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join("quickstart.toml");
    let checked = check(&example);
    assert!(checked.success, "{}", checked.stderr);
    assert!(checked.stdout.contains(": valid\n"), "{}", checked.stdout);
}
