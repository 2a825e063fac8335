//! A real etcd for the fleet tests: Debian's
//! `etcd-server`, installed with apt-get when `etcd` is not on PATH (as
//! `filters/build.sh` installs its C tools), started on two loopback ports
//! picked free with a data dir of its own, and stopped by PID (killed when
//! dropped). A stopped etcd starts again on the same ports and data. An
//! [`EtcdCluster`] is three such members of one cluster.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::process::ChildGuard;
use super::{BOUND, free_port, new_dir};

/// One etcd member on 127.0.0.1.
pub struct Etcd {
    process: Option<ChildGuard>,
    pub client_port: u16,
    peer_port: u16,
    data: tempfile::TempDir,
    name: String,
    /// `--initial-cluster`: every member's name and peer URL.
    cluster: String,
}

impl Etcd {
    pub fn start() -> Etcd {
        let mut etcd = Etcd::member("fleet-test", free_port());
        etcd.cluster = format!("{}={}", etcd.name, etcd.peer_url());
        etcd.resume();
        etcd
    }

    fn member(name: &str, peer_port: u16) -> Etcd {
        Etcd {
            process: None,
            client_port: free_port(),
            peer_port,
            data: new_dir(),
            name: name.to_owned(),
            cluster: String::new(),
        }
    }

    fn peer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer_port)
    }

    /// `etcd://127.0.0.1:PORT/<prefix>`.
    pub fn url(&self, prefix: &str) -> String {
        format!("etcd://127.0.0.1:{}/{prefix}", self.client_port)
    }

    /// Kills the member by PID, keeping its data.
    pub fn stop(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.signal(libc::SIGKILL);
            process.wait_exit(BOUND);
        }
    }

    /// Stops the member where it is (SIGSTOP): its connections stay open
    /// and answer nothing, as a hung or partitioned etcd's do.
    pub fn freeze(&self) {
        self.process
            .as_ref()
            .expect("etcd is running")
            .signal(libc::SIGSTOP);
    }

    /// Lets a frozen member go on (SIGCONT).
    pub fn thaw(&self) {
        self.process
            .as_ref()
            .expect("etcd is running")
            .signal(libc::SIGCONT);
    }

    /// Starts the member (again) on its ports and data, and waits until it
    /// answers.
    pub fn resume(&mut self) {
        self.spawn();
        self.wait_until_serving();
    }

    fn spawn(&mut self) {
        assert!(self.process.is_none(), "etcd is running already");
        let client = format!("http://127.0.0.1:{}", self.client_port);
        let peer = self.peer_url();
        let child = Command::new(etcd_binary())
            .arg(format!("--name={}", self.name))
            .arg(format!(
                "--data-dir={}",
                self.data.path().join("member").display()
            ))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster={}", self.cluster))
            .arg("--log-level=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start etcd");
        self.process = Some(ChildGuard::new(child));
    }

    pub fn wait_until_serving(&self) {
        let start = Instant::now();
        let health = format!("127.0.0.1:{}", self.client_port);
        loop {
            // etcd answers /health once it has a leader.
            if let Ok(answer) = http_get(&health, "/health")
                && answer.contains("\"health\":\"true\"")
            {
                return;
            }
            assert!(
                start.elapsed() < BOUND,
                "etcd did not become healthy within {BOUND:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Three etcd members of one cluster on 127.0.0.1: one of them is cut off
/// from its quorum by freezing the two others.
pub struct EtcdCluster {
    pub members: Vec<Etcd>,
}

impl EtcdCluster {
    pub fn start() -> EtcdCluster {
        let mut members: Vec<Etcd> = (1..=3)
            .map(|n| Etcd::member(&format!("member-{n}"), free_port()))
            .collect();
        let cluster = members
            .iter()
            .map(|member| format!("{}={}", member.name, member.peer_url()))
            .collect::<Vec<_>>()
            .join(",");
        // Each waits for the others to elect a leader: all start, then all
        // are waited for.
        for member in &mut members {
            member.cluster = cluster.clone();
            member.spawn();
        }
        for member in &members {
            member.wait_until_serving();
        }
        EtcdCluster { members }
    }

    /// `etcd://127.0.0.1:PORT,127.0.0.1:PORT,127.0.0.1:PORT/<prefix>`: every
    /// member, in order.
    pub fn url(&self, prefix: &str) -> String {
        let endpoints = self
            .members
            .iter()
            .map(|member| format!("127.0.0.1:{}", member.client_port))
            .collect::<Vec<_>>()
            .join(",");
        format!("etcd://{endpoints}/{prefix}")
    }
}

/// A minimal blocking HTTP/1.0 GET, enough for etcd's /health.
fn http_get(address: &str, path: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n")?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}

/// `etcd` from PATH, installed from Debian's `etcd-server` first when absent.
fn etcd_binary() -> PathBuf {
    super::debian::program("etcd", "etcd-server")
}
