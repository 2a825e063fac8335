//! Kube's own clients against the gateway: external programs (`kubectl`,
//! `curl`, a Python venv's interpreter) run with no proxy and no user
//! configuration leaking in, a kubeconfig written for one user, and
//! gnostic's OpenAPI v2 messages, which client-go decodes `/openapi/v2`'s
//! protobuf as.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::{bounded, require_program};

pub const KUBECTL: &str = "/usr/bin/kubectl";

/// gnostic-models' `openapi_v2` messages, generated from the same vendored
/// proto/gnostic/OpenAPIv2.proto by the gateway's build.rs: the decoder
/// client-go's `OpenAPISchema()` uses, in Rust.
#[allow(missing_docs, dead_code, clippy::all, clippy::pedantic)]
pub mod gnostic {
    include!(concat!(env!("OUT_DIR"), "/openapi.v2.rs"));
}

/// `program args...` with no proxy and no user configuration leaking in,
/// killed (by PID) when dropped.
fn client_command(program: &Path, args: &[&str], home: &Path) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .env("HOME", home)
        .env("KUBECONFIG", home.join("no-kubeconfig"))
        .env("NO_PROXY", "*")
        .env_remove("HTTPS_PROXY")
        .env_remove("https_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .env_remove("ALL_PROXY")
        .env_remove("all_proxy")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

/// Runs `program args...` (see [`client_command`]), killed if it outlives
/// the bound.
pub async fn run_client(program: &str, args: &[&str], home: &Path) -> (bool, String, String) {
    let program = require_program(program);
    let mut command = client_command(&program, args, home);
    let output = bounded(
        &format!("{} {}", program.display(), args.join(" ")),
        command.output(),
    )
    .await
    .unwrap_or_else(|error| panic!("cannot run {}: {error}", program.display()));
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `kubectl` for one user: a kubeconfig naming the gateway, its CA and the
/// user's bearer token, in a HOME of its own.
pub struct Kubectl {
    pub home: PathBuf,
    kubeconfig: PathBuf,
}

impl Kubectl {
    pub fn new(dir: &Path, user: &str, server: &str, ca: &Path, token: &str) -> Kubectl {
        let home = dir.join(format!("home-{user}"));
        std::fs::create_dir_all(&home).expect("a HOME for kubectl");
        let kubeconfig = home.join("kubeconfig");
        let config = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: gateway\n  cluster:\n    server: {server}\n    certificate-authority: {}\nusers:\n- name: {user}\n  user:\n    token: {token}\ncontexts:\n- name: {user}\n  context:\n    cluster: gateway\n    user: {user}\n    namespace: default\ncurrent-context: {user}\n",
            ca.display()
        );
        std::fs::write(&kubeconfig, config).expect("write the kubeconfig");
        Kubectl { home, kubeconfig }
    }

    /// `kubectl --kubeconfig <theirs> args...`: success, stdout, stderr.
    pub async fn run(&self, args: &[&str]) -> (bool, String, String) {
        let kubeconfig = self.kubeconfig.to_str().expect("a UTF-8 path");
        let mut all = vec!["--kubeconfig", kubeconfig];
        all.extend_from_slice(args);
        run_client(KUBECTL, &all, &self.home).await
    }

    /// `kubectl args...` left running (a watch), its stdout piped; killed
    /// when dropped.
    pub fn spawn(&self, args: &[&str]) -> tokio::process::Child {
        let kubeconfig = self.kubeconfig.to_str().expect("a UTF-8 path");
        let mut all = vec!["--kubeconfig", kubeconfig];
        all.extend_from_slice(args);
        client_command(&require_program(KUBECTL), &all, &self.home)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start kubectl")
    }

    /// The same, failing the test unless kubectl succeeds; its stdout.
    pub async fn ok(&self, args: &[&str]) -> String {
        let (ok, stdout, stderr) = self.run(args).await;
        assert!(ok, "kubectl {args:?} failed: {stderr}\nstdout: {stdout}");
        stdout
    }
}

/// The Python `kubernetes` client this test suite pins (client 32 is kube
/// 1.32's, as the machine's kubectl).
pub const PYTHON_KUBERNETES_VERSION: &str = "32.0.1";

/// The interpreter of a venv with the Python `kubernetes` client, installed
/// once (with pip, from PyPI) into the tool cache as filters/build.sh
/// installs its tools: `$WASMGATE_TOOLS_DIR` or
/// `~/.cache/wasmgate/tools`, `python-kubernetes-<version>/`. An flock on
/// a lock file beside it serialises test binaries that install it at once;
/// a `.installed` marker written last says the venv is complete.
pub fn python_kubernetes() -> PathBuf {
    static INSTALLED: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    let installed = INSTALLED.get_or_init(install_python_kubernetes);
    match installed {
        Ok(python) => python.clone(),
        Err(message) => panic!("{message}"),
    }
}

fn install_python_kubernetes() -> Result<PathBuf, String> {
    use std::os::fd::AsRawFd;
    let tools = match std::env::var_os("WASMGATE_TOOLS_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").ok_or("HOME is not set")?)
            .join(".cache/wasmgate/tools"),
    };
    std::fs::create_dir_all(&tools).map_err(|error| format!("{}: {error}", tools.display()))?;
    let venv = tools.join(format!("python-kubernetes-{PYTHON_KUBERNETES_VERSION}"));
    let python = venv.join("bin/python");
    let marker = venv.join(".installed");
    let lock = std::fs::File::create(tools.join("python-kubernetes.lock"))
        .map_err(|error| format!("the install lock: {error}"))?;
    // SAFETY: flock on a descriptor this function owns; released when
    // `lock` is closed.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err("cannot take the install lock".to_owned());
    }
    if marker.exists() {
        return Ok(python);
    }
    let run = |program: &Path, args: &[&str]| -> Result<(), String> {
        let output = std::process::Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|error| format!("cannot run {}: {error}", program.display()))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{} {} failed: {}",
                program.display(),
                args.join(" "),
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    };
    let _ = std::fs::remove_dir_all(&venv);
    let venv_arg = venv.to_str().ok_or("the tool cache path is not UTF-8")?;
    run(Path::new("python3"), &["-m", "venv", venv_arg])?;
    let requirement = format!("kubernetes=={PYTHON_KUBERNETES_VERSION}");
    run(
        &python,
        &[
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-input",
            &requirement,
        ],
    )?;
    std::fs::write(&marker, PYTHON_KUBERNETES_VERSION)
        .map_err(|error| format!("the install marker: {error}"))?;
    Ok(python)
}
