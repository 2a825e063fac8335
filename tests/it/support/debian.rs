//! Programs from Debian's packages that tests run (etcd, Prometheus,
//! Chromium): found on PATH, or installed with apt-get first when absent
//! (as `filters/build.sh` installs its C tools, and `.ci/run` does before
//! the tests). A program that cannot be installed fails the test with its
//! package's name: nothing is skipped.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;

/// `program` from PATH, installed from Debian's `package` first when absent.
pub fn program(program: &str, package: &str) -> PathBuf {
    // One apt-get at a time: tests run in parallel and dpkg has one lock.
    static INSTALLING: Mutex<()> = Mutex::new(());
    if let Some(path) = on_path(program) {
        return path;
    }
    let _one = INSTALLING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(path) = on_path(program) {
        return path;
    }
    let installed = apt_get(&["update"])
        .and_then(|()| apt_get(&["install", "-y", "--no-install-recommends", package]));
    match installed.and_then(|()| {
        on_path(program).ok_or_else(|| format!("{package} installed no {program} on PATH"))
    }) {
        Ok(path) => path,
        Err(message) => panic!(
            "this test needs {program} (Debian's {package}) and it cannot be installed: {message}"
        ),
    }
}

fn apt_get(args: &[&str]) -> Result<(), String> {
    let output = Command::new("apt-get")
        .args([
            "-o",
            "DPkg::Lock::Timeout=300",
            "-o",
            "Dpkg::Use-Pty=0",
            "-q",
        ])
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .output()
        .map_err(|error| format!("cannot run apt-get: {error}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "apt-get {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

fn on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|path| path.is_file())
    })
}
