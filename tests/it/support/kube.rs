//! Kube's own clients against the gateway: external programs (`kubectl`,
//! `curl`, a Python venv's interpreter) run with no proxy and no user
//! configuration leaking in, and a kubeconfig written for one user.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::{bounded, require_program};

pub const KUBECTL: &str = "/usr/bin/kubectl";

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
