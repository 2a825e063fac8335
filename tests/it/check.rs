//! `wasmgate check` golden tests: every `tests/manifests/<name>.toml` is
//! checked by the real binary and its output compared, byte for byte, with
//! `<name>.expected` (the folder's absolute path written as `<dir>`). Broken
//! manifests must exit non-zero with every problem on stderr; manifests
//! named `valid*` must exit 0 with the summary on stdout.
//!
//! `WASMGATE_BLESS=1 cargo test --test it check::` rewrites the `.expected` files
//! from the current output (review the diff before committing).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::Checked;

fn manifests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("manifests")
}

/// `wasmgate check`'s output, with the golden folder's absolute path written
/// as `<dir>`.
fn check(manifest: &Path) -> Checked {
    let checked = crate::support::check(manifest);
    let dir = manifests_dir().display().to_string();
    Checked {
        stdout: checked.stdout.replace(&dir, "<dir>"),
        stderr: checked.stderr.replace(&dir, "<dir>"),
        ..checked
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

// ---------------------------------------------------------------------------
// Files that are not what they should be. These cannot be committed (a
// FIFO, a sparse file of hundreds of MiB): each test makes its own.
// ---------------------------------------------------------------------------

fn mkfifo(path: &Path) {
    let made = Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("run mkfifo");
    assert!(made.success(), "mkfifo {}", path.display());
}

/// A plaintext manifest with one authentication filter whose component is
/// `component`.
fn manifest_with_component(component: &Path) -> String {
    format!(
        "[listen]\naddress = \"127.0.0.1:8443\"\nplaintext = true\n\n[authentication]\nanonymous = true\n\n\
         [[authentication.filters]]\nname = \"tokens\"\ncomponent = {:?}\n\n\
         [authorization]\nalways_allow = true\n\n[[servers]]\nname = \"main\"\n",
        component.display().to_string()
    )
}

#[test]
fn a_fifo_as_a_component_is_refused_without_hanging() {
    let dir = crate::support::new_dir();
    let fifo = dir.path().join("filter.wasm");
    mkfifo(&fifo);
    let manifest = dir.path().join("gateway.toml");
    std::fs::write(&manifest, manifest_with_component(&fifo)).expect("write the manifest");
    let checked = check(&manifest);
    assert!(!checked.success);
    assert_eq!(
        checked.stderr,
        format!(
            "{}:10:13: filter \"tokens\": cannot read {}: not a regular file (a FIFO)\n",
            manifest.display(),
            fifo.display()
        )
    );
}

#[test]
fn a_component_larger_than_256mib_is_refused_unread() {
    let dir = crate::support::new_dir();
    let component = dir.path().join("huge.wasm");
    let file = std::fs::File::create(&component).expect("create the component");
    // Sparse: no disk is used, and nothing reads it.
    file.set_len(256 * 1024 * 1024 + 1).expect("grow the file");
    let manifest = dir.path().join("gateway.toml");
    std::fs::write(&manifest, manifest_with_component(&component)).expect("write the manifest");
    let checked = check(&manifest);
    assert!(!checked.success);
    assert_eq!(
        checked.stderr,
        format!(
            "{}:10:13: filter \"tokens\": cannot read {}: larger than 256MiB (268435457 bytes)\n",
            manifest.display(),
            component.display()
        )
    );
}

#[test]
fn a_manifest_that_is_a_device_or_a_fifo_is_refused_without_hanging() {
    let dir = crate::support::new_dir();
    let fifo = dir.path().join("gateway.toml");
    mkfifo(&fifo);
    for (manifest, kind) in [
        (Path::new("/dev/zero"), "a character device"),
        (&fifo, "a FIFO"),
    ] {
        let checked = check(manifest);
        assert!(!checked.success);
        assert_eq!(
            checked.stderr,
            format!(
                "{}: cannot read the manifest: not a regular file ({kind})\n",
                manifest.display()
            )
        );
    }
}

#[test]
fn a_cert_dir_whose_certificate_is_not_a_file_is_refused() {
    let dir = crate::support::new_dir();
    let certs = dir.path().join("certs");
    std::fs::create_dir_all(certs.join("wasmgate.crt"))
        .expect("a folder in the certificate's place");
    let manifest = dir.path().join("gateway.toml");
    std::fs::write(
        &manifest,
        "[listen]\naddress = \"127.0.0.1:8443\"\ncert_dir = \"certs\"\n\n[[servers]]\nname = \"main\"\n",
    )
    .expect("write the manifest");
    let checked = check(&manifest);
    assert!(!checked.success);
    assert_eq!(
        checked.stderr,
        format!(
            "{}:3:12: listen.cert_dir: cannot use {}: not a regular file (a directory)\n",
            manifest.display(),
            certs.join("wasmgate.crt").display()
        )
    );
}
