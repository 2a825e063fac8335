//! The shipped filters' own unit tests (their pure logic, on the host
//! target), run as part of the gateway's suite so `cargo test` is the one
//! command that tests everything.

use std::process::Command;

use crate::support::build_filters;

#[test]
fn every_filter_passes_its_unit_tests() {
    // After the components are built, so that two runs of the script never
    // work on this checkout at once (the other tests of this binary run
    // beside this one).
    build_filters();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/filters/build.sh");
    let output = Command::new("bash")
        .arg(script)
        .arg("--test")
        .output()
        .expect("bash runs");
    assert!(
        output.status.success(),
        "filters/build.sh --test failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
