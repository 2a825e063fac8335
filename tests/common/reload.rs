//! Helpers of the hot-reload tests (declared from `tests/reload.rs` as
//! `#[path = "common/reload.rs"] mod reload_common;`, beside `mod common;`):
//! an in-process gateway whose `RunningGateway` is kept for `reload()`,
//! manifests for two chains that answer "A" or "B" (body and `x-chain`
//! header) and for invalid versions, editor-style file writes, metric
//! reading, the filter components built once, and `wasmgate check` run as a
//! child process.
//!
//! Every wait here is bounded, like those of `common`.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use wasmgate::reload_trigger::ReloadOutcome;
use wasmgate::server::{Drained, Gateway, RunningGateway};

use crate::common::{BOUND, GatewayProcess, bounded, new_dir, plaintext};

/// How long a change seen only through the file watcher may take to be
/// served (the watcher debounces for 200 ms; a loaded machine is slower).
pub const WATCH_BOUND: Duration = Duration::from_secs(10);

/// The series the reload tests read at `/metrics`.
pub const RELOAD_SUCCESSES: &str = r#"wasmgate_config_reload_total{result="success"}"#;
pub const RELOAD_FAILURES: &str = r#"wasmgate_config_reload_total{result="failure"}"#;
pub const LAST_RELOAD_SUCCESS: &str = "wasmgate_config_last_reload_success_timestamp_seconds";
pub const COMPONENTS_FROM_MEMORY: &str = r#"wasmgate_components_loaded_total{source="memory"}"#;

// ---------------------------------------------------------------------------
// Manifests
// ---------------------------------------------------------------------------

/// The static route every reload test reads: `GET /which` answers `which`
/// as its body and in the `x-chain` header (from the static headers table).
pub fn which_route(which: &str) -> String {
    format!(
        "[[servers.routes]]\npath = \"/which\"\nstatic = {{ body = \"{which}\", headers = {{ x-chain = \"{which}\" }} }}\n"
    )
}

/// A plaintext gateway on 127.0.0.1:0 whose chain answers `which`.
pub fn chain(which: &str) -> String {
    plaintext(&format!(
        "[[servers]]\nname = \"main\"\n\n{}",
        which_route(which)
    ))
}

/// Invalid: the TOML does not parse (an inline table left open). Were it
/// taken, `/which` would answer "C".
pub fn broken_toml() -> String {
    plaintext(&format!(
        "[[servers]]\nname = \"main\"\n\n{}\n[[servers.routes]]\npath = \"/broken\"\nstatic = {{ body = \"C\"\n",
        which_route("C")
    ))
}

/// Invalid: a route proxies to an ftp:// URL. Were it taken, `/which` would
/// answer "C".
pub fn bad_upstream() -> String {
    plaintext(&format!(
        "[[servers]]\nname = \"main\"\n\n{}\n[[servers.routes]]\nprefix = \"/bad/\"\nupstream = \"ftp://127.0.0.1:21\"\n",
        which_route("C")
    ))
}

/// Invalid once the components are loaded: the authenticator's component
/// file does not exist. Were it taken, `/which` would answer "C".
pub fn missing_component() -> String {
    plaintext(&format!(
        "[authentication]\nanonymous = true\n\n[[authentication.filters]]\nname = \"tokens\"\ncomponent = \"no-such-filter.wasm\"\n\n[authorization]\nalways_allow = true\n\n[[servers]]\nname = \"main\"\n\n{}",
        which_route("C")
    ))
}

// ---------------------------------------------------------------------------
// Writing files as editors and Kubernetes do
// ---------------------------------------------------------------------------

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

/// Rewrites `path` in place in two writes `pause` apart, as a tool that
/// writes in pieces does: truncated, `first` written (and flushed to the
/// file, so a reader sees it), then `rest`.
pub async fn write_in_two_pieces(path: &Path, first: &str, rest: &str, pause: Duration) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .expect("open the manifest to write it in place");
    file.write_all(first.as_bytes())
        .expect("write the first piece");
    file.sync_data().expect("flush the first piece");
    tokio::time::sleep(pause).await;
    file.write_all(rest.as_bytes()).expect("write the rest");
}

/// A chain answering `which` on `/which` only to a request with a token
/// `token-authn` knows (`t1`, user alice): anonymous requests get 401. The
/// route comes first, the authentication last, so that everything before
/// `[authentication]` is a valid manifest on its own, one without
/// authentication, that would answer anyone.
pub fn token_protected(which: &str) -> String {
    format!(
        "{}[authentication]\nanonymous = false\n\n[[authentication.filters]]\nname = \"tokens\"\ncomponent = \"{}\"\n\
         config = {{ tokens = [{{ token = \"t1\", user = \"alice\" }}] }}\n\n[authorization]\nalways_allow = true\n",
        chain(which),
        component("token-authn").display()
    )
}

/// `ln -s target tmp && mv -T tmp link`: replaces `link` by a symlink to
/// `target` in one rename.
pub fn swap_symlink(link: &Path, target: &Path) {
    let temp = link.with_file_name(format!(
        ".{}.link-tmp",
        link.file_name().expect("a file name").to_string_lossy()
    ));
    let _ = std::fs::remove_file(&temp);
    std::os::unix::fs::symlink(target, &temp).expect("create the temp symlink");
    std::fs::rename(&temp, link).expect("rename the symlink over the manifest");
}

// ---------------------------------------------------------------------------
// The gateway, in process, with its reloader at hand
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Reading what is served
// ---------------------------------------------------------------------------

/// What `GET /which` answered: status, body, `x-chain` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    pub status: u16,
    pub body: String,
    pub chain: Option<String>,
}

impl Served {
    /// A whole answer of chain `which`: 200, body and header both `which`.
    pub fn is(&self, which: &str) -> bool {
        self.status == 200 && self.body == which && self.chain.as_deref() == Some(which)
    }
}

/// `GET url`, errors returned (with their causes) rather than panicking.
pub async fn try_served(client: &reqwest::Client, url: &str) -> Result<Served, String> {
    let response = client.get(url).send().await.map_err(|e| error_chain(&e))?;
    let status = response.status().as_u16();
    let chain = response
        .headers()
        .get("x-chain")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let body = response.text().await.map_err(|e| error_chain(&e))?;
    Ok(Served {
        status,
        body,
        chain,
    })
}

/// `GET url`, which must succeed.
pub async fn served(client: &reqwest::Client, url: &str) -> Served {
    match bounded("a response", try_served(client, url)).await {
        Ok(served) => served,
        Err(error) => panic!("GET {url} failed: {error}"),
    }
}

/// Polls `GET url` every few milliseconds until chain `which` answers,
/// failing after [`WATCH_BOUND`].
pub async fn wait_until_served(client: &reqwest::Client, url: &str, which: &str) {
    let start = Instant::now();
    let mut last = None;
    while start.elapsed() < WATCH_BOUND {
        let answer = try_served(client, url).await;
        if matches!(&answer, Ok(served) if served.is(which)) {
            return;
        }
        last = Some(answer);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("chain {which} was not served within {WATCH_BOUND:?}; last answer: {last:?}");
}

/// An error and every cause under it, on one line.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The `/metrics` text of the gateway at `base` (`http://127.0.0.1:PORT`).
pub async fn metrics_text(client: &reqwest::Client, base: &str) -> String {
    let served = served(client, &format!("{base}/metrics")).await;
    assert_eq!(served.status, 200, "GET /metrics: {}", served.body);
    served.body
}

/// The value of one series (`name{labels}`, as printed) in a metrics text.
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix(series)?.strip_prefix(' ')?;
        value.split_whitespace().next()?.parse().ok()
    })
}

// ---------------------------------------------------------------------------
// Components, the binary
// ---------------------------------------------------------------------------

/// The absolute path of `filters/dist/<name>.wasm`, after running
/// `filters/build.sh --only rust` once for this test binary.
pub fn component(name: &str) -> PathBuf {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let output = Command::new("bash")
            // Only the Rust filters are used here.
            .args(["filters/build.sh", "--only", "rust"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdin(Stdio::null())
            .output()
            .map_err(|error| format!("cannot run filters/build.sh: {error}"))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!(
                "filters/build.sh failed ({}):\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    });
    if let Err(message) = built {
        panic!("{message}");
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("filters/dist")
        .join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "filters/build.sh produced no {}",
        path.display()
    );
    path
}

/// What `wasmgate check --config FILE` said.
pub struct Checked {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `wasmgate check --config manifest` (logging off, so standard error
/// holds the problems only).
pub fn check(manifest: &Path) -> Checked {
    let mut child = Command::new(crate::common::binary())
        .args(["check", "--config"])
        .arg(manifest)
        .env("RUST_LOG", "off")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run wasmgate check");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("poll wasmgate check").is_some() {
            break;
        }
        if start.elapsed() > BOUND {
            let _ = child.kill();
            let _ = child.wait();
            panic!("wasmgate check did not finish within {BOUND:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().expect("wasmgate check's output");
    Checked {
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Waits until the child catches SIGHUP (read from `SigCgt` in
/// `/proc/<pid>/status`): the binary logs `listening on` before it installs
/// its signal handlers, and SIGHUP's default action ends the process.
pub fn wait_for_sighup_handler(gateway: &GatewayProcess) {
    let status_file = format!("/proc/{}/status", gateway.child.pid());
    let wanted = 1u64 << (libc::SIGHUP - 1);
    let start = Instant::now();
    loop {
        let status = std::fs::read_to_string(&status_file).unwrap_or_default();
        let caught = status
            .lines()
            .find_map(|line| line.strip_prefix("SigCgt:"))
            .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
            .unwrap_or(0);
        if caught & wanted == wanted {
            return;
        }
        assert!(
            start.elapsed() < BOUND,
            "the gateway did not install its SIGHUP handler within {BOUND:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether an inotify instance of this process watches the inode `ino`
/// (read from `/proc/self/fdinfo`).
pub fn inotify_watches(ino: u64) -> bool {
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return false;
    };
    fds.filter_map(Result::ok).any(|fd| {
        let is_inotify = std::fs::read_link(fd.path())
            .is_ok_and(|target| target.to_string_lossy() == "anon_inode:inotify");
        if !is_inotify {
            return false;
        }
        let info = std::fs::read_to_string(Path::new("/proc/self/fdinfo").join(fd.file_name()))
            .unwrap_or_default();
        info.lines()
            .filter(|line| line.starts_with("inotify wd:"))
            .filter_map(|line| line.split_whitespace().find_map(|f| f.strip_prefix("ino:")))
            .any(|hex| u64::from_str_radix(hex, 16) == Ok(ino))
    })
}
