//! Processes: the `wasmgate` binary run as a child (killed by PID on drop),
//! `wasmgate check`, the external programs some tests need, and what
//! `/proc` tells of a process (signal handlers, inotify watches, RSS).

use std::io::BufRead;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::BOUND;

/// The `wasmgate` binary the tests run: the one cargo built for them, or
/// the one `WASMGATE_TEST_BINARY` names, so that a binary built another way
/// (`bench/pgo.sh`'s, a release) is tested as it will be deployed.
pub fn binary() -> PathBuf {
    std::env::var_os("WASMGATE_TEST_BINARY").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_wasmgate")),
        PathBuf::from,
    )
}

/// An external program the tests need; fails with a clear message when it is
/// not installed (nothing is skipped).
pub fn require_program(path: &str) -> PathBuf {
    let program = PathBuf::from(path);
    assert!(
        program.exists(),
        "{path} is needed by this test and is not installed: install it (apt-get install curl / kubectl) and rerun"
    );
    program
}

/// A child process killed by PID (SIGKILL) and reaped when dropped.
pub struct ChildGuard {
    child: Child,
}

impl ChildGuard {
    pub fn new(child: Child) -> ChildGuard {
        ChildGuard { child }
    }

    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).expect("a PID fits an i32")
    }

    /// Sends `signal` to the child, by PID.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on the PID of a child we own and have not reaped.
        let result = unsafe { libc::kill(self.pid(), signal) };
        assert_eq!(result, 0, "kill({}, {signal}) failed", self.pid());
    }

    /// Waits for the child to exit, at most `bound`.
    pub fn wait_exit(&mut self, bound: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("poll the child") {
                return status;
            }
            assert!(
                start.elapsed() < bound,
                "the child {} did not exit within {bound:?}",
                self.pid()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: kill(2) on the PID of a child we own and have not reaped.
            unsafe {
                libc::kill(self.pid(), libc::SIGKILL);
            }
            let _ = self.child.wait();
        }
    }
}

/// `wasmgate run --config <manifest>` as a child process.
pub struct GatewayProcess {
    pub child: ChildGuard,
    pub addr: SocketAddr,
    pub https: bool,
    /// Every stderr line so far.
    pub log: Arc<Mutex<Vec<String>>>,
}

impl GatewayProcess {
    /// Starts the binary and waits for its `listening on` line.
    pub fn spawn(manifest: &Path) -> GatewayProcess {
        GatewayProcess::spawn_with_args(manifest, &[])
    }

    /// The same, with more arguments for `wasmgate run`.
    pub fn spawn_with_args(manifest: &Path, args: &[&str]) -> GatewayProcess {
        GatewayProcess::spawn_with(manifest, args, &[])
    }

    /// The same, with these variables added to the binary's environment
    /// (which this process's own, shared by every test, keeps out of).
    pub fn spawn_with_env(manifest: &Path, env: &[(&str, &str)]) -> GatewayProcess {
        GatewayProcess::spawn_with(manifest, &[], env)
    }

    /// The same, with the binary's address space held too small for the
    /// engine's instance pool ([`without_the_pool`]), so the gateway runs
    /// filters on its fallback engine, allocating each instance on demand.
    pub fn spawn_without_the_pool(manifest: &Path, args: &[&str]) -> GatewayProcess {
        let mut command = GatewayProcess::command(manifest, args, &[]);
        without_the_pool(&mut command);
        let gateway = GatewayProcess::start(command);
        assert!(
            gateway.log_text().contains("pooling allocator unavailable"),
            "the gateway reserved its instance pool within {ADDRESS_SPACE_WITHOUT_THE_POOL} bytes: {}",
            gateway.log_text()
        );
        gateway
    }

    /// The same, with more arguments and these variables.
    pub fn spawn_with(manifest: &Path, args: &[&str], env: &[(&str, &str)]) -> GatewayProcess {
        GatewayProcess::start(GatewayProcess::command(manifest, args, env))
    }

    fn command(manifest: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut command = Command::new(binary());
        command
            .args(["run", "--config"])
            .arg(manifest)
            .args(args)
            .env_remove("RUST_LOG")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        command
    }

    fn start(mut command: Command) -> GatewayProcess {
        let child = command.spawn().expect("start the wasmgate binary");
        let mut child = ChildGuard::new(child);
        let stderr = child.child_mut().stderr.take().expect("the child's stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (listening_tx, listening_rx) = std::sync::mpsc::channel();
        let lines = log.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(at) = line.find("listening on ") {
                    // Text or JSON (`--log-format json`): the URL ends at a
                    // space or at the JSON string's quote.
                    let url = line[at + "listening on ".len()..]
                        .split(|c: char| c.is_whitespace() || c == '"')
                        .next()
                        .unwrap_or("")
                        .to_owned();
                    let _ = listening_tx.send(url);
                }
                lines.lock().expect("the log lock").push(line);
            }
        });
        let url = match listening_rx.recv_timeout(BOUND) {
            Ok(url) => url,
            Err(_) => panic!(
                "the gateway did not log `listening on` within {BOUND:?}; its log:\n{}",
                log.lock().expect("the log lock").join("\n")
            ),
        };
        let (scheme, addr) = url.split_once("://").expect("a URL in the listening line");
        GatewayProcess {
            child,
            addr: addr.parse().expect("an address in the listening line"),
            https: scheme == "https",
            log,
        }
    }

    pub fn url(&self, path: &str) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}{path}", self.addr)
    }

    pub fn log_text(&self) -> String {
        self.log.lock().expect("the log lock").join("\n")
    }

    /// Waits until the process catches every one of `signals` (read from
    /// `SigCgt` in `/proc/<pid>/status`): the binary logs `listening on`
    /// before it installs its signal handlers, so a signal sent at once
    /// could still kill it outright (SIGHUP's and SIGTERM's default action).
    pub fn wait_for_signal_handlers(&self, signals: &[i32]) {
        let status_file = format!("/proc/{}/status", self.child.pid());
        let wanted = signals
            .iter()
            .fold(0u64, |mask, signal| mask | (1u64 << (signal - 1)));
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
                "the gateway did not install its handlers of signals {signals:?} within {BOUND:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// What `wasmgate check --config FILE` said.
pub struct Checked {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `wasmgate check --config manifest`, bounded: a check that hangs
/// (on a FIFO, say) is killed and fails the test. `RUST_LOG` is not passed
/// on, so standard error holds what `check` says by default: the problems,
/// and nothing else.
pub fn check(manifest: &Path) -> Checked {
    checked(check_command(manifest), manifest)
}

/// [`check`] run as [`GatewayProcess::spawn_without_the_pool`] runs a
/// gateway: on the engine a host falls back to without the instance pool.
pub fn check_without_the_pool(manifest: &Path) -> Checked {
    let mut command = check_command(manifest);
    without_the_pool(&mut command);
    let checked = checked(command, manifest);
    assert!(
        checked.stderr.contains("pooling allocator unavailable"),
        "check reserved the instance pool within {ADDRESS_SPACE_WITHOUT_THE_POOL} bytes: {}",
        checked.stderr
    );
    checked
}

/// The address space a child is held to so that it cannot reserve the
/// engine's instance pool, which reserves terabytes.
const ADDRESS_SPACE_WITHOUT_THE_POOL: u64 = 64 << 30;

/// Holds the child's address space to [`ADDRESS_SPACE_WITHOUT_THE_POOL`]
/// (`RLIMIT_AS`): it runs filters on the engine that allocates each
/// instance on demand.
fn without_the_pool(command: &mut Command) {
    // SAFETY: setrlimit is async-signal-safe and touches nothing of the
    // parent's; it runs in the child between fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(command, || {
            let limit = libc::rlimit {
                rlim_cur: ADDRESS_SPACE_WITHOUT_THE_POOL,
                rlim_max: ADDRESS_SPACE_WITHOUT_THE_POOL,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

fn check_command(manifest: &Path) -> Command {
    let mut command = Command::new(binary());
    command
        .args(["check", "--config"])
        .arg(manifest)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

fn checked(mut command: Command, manifest: &Path) -> Checked {
    let mut child = command.spawn().expect("run wasmgate check");
    let started = Instant::now();
    while child.try_wait().expect("poll wasmgate check").is_none() {
        if started.elapsed() > BOUND {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "wasmgate check --config {} did not finish within {BOUND:?}",
                manifest.display()
            );
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

/// This process's resident set size, in KiB (`VmRSS` of /proc/self/status).
pub fn vm_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line")
}

/// A loopback port nothing listens on now, for a program that binds its own.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}
