//! Helpers shared by the integration tests, one module per concern; every
//! wait in them is bounded, so a test that would hang fails instead:
//! - [`gateway`]: a gateway started in this process on 127.0.0.1:0 from a
//!   manifest in a temp dir, with or without its reloader at hand;
//! - [`clients`]: reqwest clients (HTTP/1.1, h2c, TLS), whole answers read
//!   and checked as kube Statuses, `/metrics` read;
//! - [`raw`]: exchanges on raw TCP sockets, byte for byte;
//! - [`certs`]: a PKI made with rcgen, and certificates read back;
//! - [`upstream`]: an upstream server that echoes, streams and sleeps on
//!   request;
//! - [`tunnel`]: an https upstream that switches to WebSocket or SPDY and
//!   echoes, or streams watch events;
//! - [`process`]: the `wasmgate` binary as a child process, external
//!   programs, what `/proc` says of a process;
//! - [`filters`]: the components built once per run by `filters/build.sh`
//!   and manifest pieces that use them;
//! - [`audit`]: JSON-lines audit logs read back;
//! - [`jwt`]: throw-away signing keys and tokens;
//! - [`kube`]: kube's clients (`kubectl` with a kubeconfig, other programs)
//!   run with no proxy and no user configuration;
//! - [`kube_api`]: a small kube-like API server (ConfigMaps, a custom
//!   resource, discovery, OpenAPI) to stand where a kube-apiserver would;
//! - [`otlp`]: a real OTLP/gRPC trace receiver, and the span tree it got;
//! - [`etcd`]: a real etcd (Debian's `etcd-server`) on loopback ports;
//! - [`debian`]: programs from Debian's packages, installed when absent.

use std::future::Future;
use std::time::{Duration, Instant};

pub mod audit;
pub mod certs;
pub mod clients;
pub mod debian;
pub mod etcd;
pub mod filters;
pub mod gateway;
pub mod jwt;
pub mod kube;
pub mod kube_api;
pub mod otlp;
pub mod process;
pub mod raw;
pub mod tunnel;
pub mod upstream;

pub use audit::*;
pub use certs::*;
pub use clients::*;
pub use filters::*;
pub use gateway::*;
pub use jwt::*;
pub use kube::*;
pub use kube_api::*;
pub use otlp::*;
pub use process::*;
pub use raw::*;
pub use tunnel::*;
pub use upstream::*;

/// The longest any single wait of a test may take before the test fails.
pub const BOUND: Duration = Duration::from_secs(20);

/// Awaits `future`, failing the test with `what` if it takes longer than
/// [`BOUND`].
pub async fn bounded<T>(what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(BOUND, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out after {BOUND:?} waiting for {what}"),
    }
}

/// Polls `probe` every 50 ms until it returns `Some`, failing the test after
/// [`BOUND`].
pub async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            start.elapsed() < BOUND,
            "timed out after {BOUND:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A new temp dir, removed when dropped.
pub fn new_dir() -> tempfile::TempDir {
    tempfile::tempdir().expect("create a temp dir")
}

/// Seconds since the epoch, now.
pub fn unix_now() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970");
    i64::try_from(now.as_secs()).expect("seconds fit")
}
