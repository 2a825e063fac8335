//! The gateway under test, in this process: started from a manifest written
//! to `gateway.toml` in a temp dir (with any files it names), listening on
//! 127.0.0.1:0; [`ReloadGateway`] keeps its `RunningGateway` so a test can
//! call `reload()`, and [`write_atomically`] saves a new manifest over the
//! watched one as editors do.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::task::JoinHandle;
use wasmgate::config::Transport;
use wasmgate::reload_trigger::ReloadOutcome;
use wasmgate::server::{Drained, Gateway, RunningGateway};

use super::upstream::Upstream;
use super::{bounded, new_dir};

/// Writes `text` beside `path` and renames it over `path`, as editors save.
pub fn write_atomically(path: &Path, text: &str) {
    static COUNT: AtomicUsize = AtomicUsize::new(0);
    let name = path
        .file_name()
        .expect("a file name")
        .to_string_lossy()
        .into_owned();
    let temp = path.with_file_name(format!(
        ".{name}.{}.swp",
        COUNT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&temp, text).expect("write the temp file");
    std::fs::rename(&temp, path).expect("rename the temp file over the manifest");
}

/// `[listen]` on 127.0.0.1 port 0 in plaintext, followed by `rest`.
pub fn plaintext(rest: &str) -> String {
    format!("[listen]\naddress = \"127.0.0.1:0\"\nplaintext = true\n\n{rest}")
}

/// A gateway running in this process, with the temp dir its manifest (and
/// any files the manifest names) live in.
pub struct TestGateway {
    pub addr: SocketAddr,
    pub https: bool,
    pub dir: tempfile::TempDir,
    running: Option<RunningGateway>,
}

impl TestGateway {
    /// Writes `manifest` to `gateway.toml` in a new temp dir and starts it.
    pub async fn start(manifest: &str) -> TestGateway {
        Self::start_in(new_dir(), manifest).await
    }

    /// Writes `manifest` to `gateway.toml` in `dir` and starts it.
    pub async fn start_in(dir: tempfile::TempDir, manifest: &str) -> TestGateway {
        Self::start_with_center(dir, manifest, |servers| servers).await
    }

    /// Like [`TestGateway::start_in`], with `center` replacing what the
    /// handler chain wraps.
    pub async fn start_with_center(
        dir: tempfile::TempDir,
        manifest: &str,
        center: impl FnOnce(wasmgate::handler::SharedHandler) -> wasmgate::handler::SharedHandler,
    ) -> TestGateway {
        let path = dir.path().join("gateway.toml");
        std::fs::write(&path, manifest).expect("write the manifest");
        let config = match wasmgate::config::parse(&path, manifest) {
            Ok(config) => config,
            Err(error) => panic!("the test manifest is invalid:\n{error}\n---\n{manifest}"),
        };
        let https = !matches!(config.listen.transport, Transport::Plaintext);
        let gateway = Gateway::with_center(config, center).expect("build the gateway");
        let running = gateway.start().await.expect("start the gateway");
        TestGateway {
            addr: running.local_addr,
            https,
            dir,
            running: Some(running),
        }
    }

    /// The gateway's URL for `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}{path}", self.addr)
    }

    /// Begins kube's shutdown sequence in the background.
    pub fn begin_shutdown(&mut self) -> JoinHandle<Drained> {
        let running = self.running.take().expect("the gateway is running");
        tokio::spawn(running.shutdown())
    }

    pub async fn shutdown(mut self) -> Drained {
        let running = self.running.take().expect("the gateway is running");
        bounded("the gateway to shut down", running.shutdown()).await
    }
}

/// A gateway running in this process from a manifest file, kept with its
/// [`RunningGateway`] so tests can call `reload()`.
pub struct ReloadGateway {
    pub dir: tempfile::TempDir,
    /// The manifest the gateway was started from (and reloads).
    pub path: PathBuf,
    pub addr: SocketAddr,
    running: Option<RunningGateway>,
}

impl ReloadGateway {
    /// Writes `manifest` to `gateway.toml` in a new temp dir and starts it.
    pub async fn start(manifest: &str) -> ReloadGateway {
        let dir = new_dir();
        let path = dir.path().join("gateway.toml");
        std::fs::write(&path, manifest).expect("write the manifest");
        Self::start_from(dir, path).await
    }

    /// Starts the gateway from the manifest already at `path` (a file or a
    /// symlink to one), in `dir`.
    pub async fn start_from(dir: tempfile::TempDir, path: PathBuf) -> ReloadGateway {
        let config = match wasmgate::config::load(&path) {
            Ok(config) => config,
            Err(error) => panic!("the test manifest is invalid:\n{error}"),
        };
        let gateway = Gateway::new(config).expect("build the gateway");
        let running = bounded("the gateway to start", gateway.start())
            .await
            .expect("start the gateway");
        ReloadGateway {
            dir,
            path,
            addr: running.local_addr,
            running: Some(running),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn running(&self) -> &RunningGateway {
        self.running.as_ref().expect("the gateway is running")
    }

    pub fn generation(&self) -> u64 {
        self.running().generation()
    }

    /// `RunningGateway::reload()`, bounded.
    pub async fn reload(&self) -> ReloadOutcome {
        bounded("a reload", self.running().reload())
            .await
            .expect("the reloader is running")
    }

    /// Reloads and expects the new chain to be in force; returns the
    /// generation and the settings that need a restart.
    pub async fn swapped(&self) -> (u64, Vec<String>) {
        match self.reload().await {
            ReloadOutcome::Swapped {
                generation,
                restart_required,
            } => (generation, restart_required),
            ReloadOutcome::Rejected(problems) => {
                panic!("the reload was rejected:\n{problems}")
            }
        }
    }

    /// Reloads and expects the reload to be refused; returns the problems.
    pub async fn rejected(&self) -> String {
        match self.reload().await {
            ReloadOutcome::Rejected(problems) => problems,
            ReloadOutcome::Swapped { generation, .. } => {
                panic!("an invalid manifest was swapped in as generation {generation}")
            }
        }
    }

    pub async fn shutdown(self) -> Drained {
        self.shutdown_keeping_dir().await.0
    }

    /// Shuts down and hands back the temp dir, which then still exists.
    pub async fn shutdown_keeping_dir(self) -> (Drained, tempfile::TempDir) {
        let ReloadGateway { dir, running, .. } = self;
        let running = running.expect("the gateway is running");
        let drained = bounded("the gateway to shut down", running.shutdown()).await;
        (drained, dir)
    }
}

/// A plaintext gateway with these `[limits]` lines, routing `/up/` and the
/// API `/apis/g.example.io/v1` to `upstream`, and serving `static` on
/// `/static`.
pub fn limits_manifest(upstream: &Upstream, limits: &str) -> String {
    let up = upstream.url();
    plaintext(&format!(
        r#"
[limits]
{limits}

[[servers]]
name = "limits"

[[servers.routes]]
prefix = "/up/"
upstream = "{up}"

[[servers.routes]]
api = "/apis/g.example.io/v1"
upstream = "{up}"

[[servers.routes]]
path = "/static"
static = {{ body = "static" }}
"#
    ))
}

/// The static route the reload and fleet tests read: `GET /which` answers `which`
/// as its body and in the `x-chain` header (from the static headers table).
pub fn which_route(which: &str) -> String {
    format!(
        "[[servers.routes]]\npath = \"/which\"\nstatic = {{ body = \"{which}\", headers = {{ x-chain = \"{which}\" }} }}\n"
    )
}
