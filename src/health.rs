//! Health probes, in kube's formats
//! (`staging/src/k8s.io/apiserver/pkg/server/healthz/healthz.go`): `/healthz`,
//! `/livez`, `/readyz`, one check at `/<endpoint>/<check>`, `?verbose` and
//! `?exclude=<check>`. A failing check's reason goes to the log; the client
//! reads `reason withheld`.
//!
//! Checks: `ping` (always ok), `log` (the log is being flushed), and for
//! readyz only one `poststarthook/<name>` per post-start hook, failing until
//! it finished, and last `shutdown` (fails once shutdown began), which kube's
//! `installReadyz` adds after every other readyz check
//! (`staging/src/k8s.io/apiserver/pkg/server/genericapiserver.go`).
//! A gateway run from the fleet's etcd adds `config-revision`, which passes
//! and, under `?verbose`, names the revision it serves and where from
//! ([`Check::reporting`]): `[+]config-revision ok (revision 42 from etcd)`.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::future::BoxFuture;
use http::header::{CONTENT_TYPE, HeaderName};
use http::{HeaderValue, StatusCode};

use crate::body::{Body, Request, Response};
use crate::handler::Handler;
use crate::status::GatewayError;

/// One named check: passing with a detail to show under `?verbose` (empty
/// for most), or failing with a reason for the log.
#[derive(Clone)]
pub struct Check {
    name: String,
    probe: Arc<dyn Fn() -> Result<String, String> + Send + Sync>,
}

impl Check {
    pub(crate) fn new(
        name: impl Into<String>,
        probe: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        Self::reporting(name, move || probe().map(|()| String::new()))
    }

    /// A check whose pass carries a detail that `?verbose` shows.
    pub(crate) fn reporting(
        name: impl Into<String>,
        probe: impl Fn() -> Result<String, String> + Send + Sync + 'static,
    ) -> Self {
        Check {
            name: name.into(),
            probe: Arc::new(probe),
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    fn run(&self) -> Result<String, String> {
        (self.probe)()
    }
}

/// A flag a check reads: set when something has happened (shutdown began, a
/// hook finished).
#[derive(Debug, Default, Clone)]
pub(crate) struct Flag(Arc<AtomicBool>);

impl Flag {
    pub(crate) fn set(&self) {
        self.0.store(true, Ordering::Release);
    }

    pub(crate) fn is_set(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// The log check's evidence: when stderr was last flushed successfully.
#[derive(Debug, Clone)]
pub(crate) struct LogFlushes(Arc<AtomicU64>);

/// How stale the last flush may be before the `log` check fails.
const LOG_FLUSH_MAX_AGE: Duration = Duration::from_secs(60);
const LOG_FLUSH_INTERVAL: Duration = Duration::from_secs(5);

impl LogFlushes {
    fn new() -> Self {
        LogFlushes(Arc::new(AtomicU64::new(unix_seconds())))
    }

    /// Flushes stderr every few seconds on a blocking thread, recording each
    /// success; a log that blocks (a full pipe nobody reads) stops them.
    pub(crate) fn spawn_flusher(&self) -> tokio::task::JoinHandle<()> {
        let last = self.0.clone();
        tokio::spawn(async move {
            loop {
                let flushed =
                    tokio::task::spawn_blocking(|| std::io::Write::flush(&mut std::io::stderr()))
                        .await;
                if matches!(flushed, Ok(Ok(()))) {
                    last.store(unix_seconds(), Ordering::Release);
                }
                tokio::time::sleep(LOG_FLUSH_INTERVAL).await;
            }
        })
    }

    fn check(&self) -> Result<(), String> {
        let age = unix_seconds().saturating_sub(self.0.load(Ordering::Acquire));
        if age > LOG_FLUSH_MAX_AGE.as_secs() {
            return Err(format!("logging blocked: last flush {age}s ago"));
        }
        Ok(())
    }
}

fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The three endpoints and their checks.
pub(crate) struct Health {
    healthz: Vec<Check>,
    livez: Vec<Check>,
    readyz: Vec<Check>,
    pub log_flushes: LogFlushes,
}

impl Health {
    /// The default checks; `shutdown` fails once `shutting_down` is set.
    pub(crate) fn new(shutting_down: Flag) -> Self {
        let log_flushes = LogFlushes::new();
        let log = {
            let flushes = log_flushes.clone();
            Check::new("log", move || flushes.check())
        };
        let ping = Check::new("ping", || Ok(()));
        let shutdown = Check::new("shutdown", move || {
            if shutting_down.is_set() {
                Err("process is shutting down".to_owned())
            } else {
                Ok(())
            }
        });
        Health {
            healthz: vec![ping.clone(), log.clone()],
            livez: vec![ping.clone(), log.clone()],
            readyz: vec![ping, log, shutdown],
            log_flushes,
        }
    }

    /// Adds a readiness check (post-start hooks, the fleet's revision),
    /// before `shutdown`, which stays last.
    pub(crate) fn add_readyz_check(&mut self, check: Check) {
        let before_shutdown = self.readyz.len().saturating_sub(1);
        self.readyz.insert(before_shutdown, check);
    }

    fn endpoint(&self, name: &str) -> Option<&[Check]> {
        match name {
            "healthz" => Some(&self.healthz),
            "livez" => Some(&self.livez),
            "readyz" => Some(&self.readyz),
            _ => None,
        }
    }

    fn serve(&self, request: &Request) -> Response {
        let path = request.uri().path().trim_start_matches('/');
        let (endpoint, check) = match path.split_once('/') {
            Some((endpoint, check)) => (endpoint, Some(check)),
            None => (path, None),
        };
        let Some(checks) = self.endpoint(endpoint) else {
            return GatewayError::NotFound.into_response();
        };
        match check {
            None => all_checks(endpoint, checks, &Query::parse(request.uri().query())),
            Some(name) => match checks.iter().find(|c| c.name() == name) {
                Some(check) => one_check(check),
                None => GatewayError::NotFound.into_response(),
            },
        }
    }
}

impl Handler for Health {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        let response = self.serve(&request);
        Box::pin(async move { response })
    }
}

struct Query {
    verbose: bool,
    exclude: BTreeSet<String>,
}

impl Query {
    fn parse(query: Option<&str>) -> Query {
        let mut parsed = Query {
            verbose: false,
            exclude: BTreeSet::new(),
        };
        for (key, value) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            match key.as_ref() {
                "verbose" => parsed.verbose = true,
                "exclude" => {
                    parsed.exclude.insert(value.into_owned());
                }
                _ => {}
            }
        }
        parsed
    }
}

/// kube's `handleRootHealth`.
fn all_checks(endpoint: &str, checks: &[Check], query: &Query) -> Response {
    let mut excluded = query.exclude.clone();
    let mut report = String::new();
    let mut failed = false;
    for check in checks {
        if excluded.remove(check.name()) {
            let _ = writeln!(report, "[+]{} excluded: ok", check.name());
            continue;
        }
        match check.run() {
            Ok(detail) if detail.is_empty() => {
                let _ = writeln!(report, "[+]{} ok", check.name());
            }
            Ok(detail) => {
                let _ = writeln!(report, "[+]{} ok ({detail})", check.name());
            }
            Err(reason) => {
                failed = true;
                tracing::warn!(endpoint, check = check.name(), %reason, "health check failed");
                let _ = writeln!(report, "[-]{} failed: reason withheld", check.name());
            }
        }
    }
    if !excluded.is_empty() {
        let names: Vec<String> = excluded.iter().map(|name| format!("{name:?}")).collect();
        let names = names.join(",");
        let _ = writeln!(
            report,
            "warn: some health checks cannot be excluded: no matches for {names}"
        );
        // And in the log, as kube's handleRootHealth logs it.
        tracing::warn!(
            endpoint,
            "cannot exclude some health checks, no health checks are installed matching {names}"
        );
    }
    if failed {
        let _ = writeln!(report, "{endpoint} check failed");
        return text(StatusCode::INTERNAL_SERVER_ERROR, report);
    }
    if !query.verbose {
        return text(StatusCode::OK, "ok".to_owned());
    }
    let _ = writeln!(report, "{endpoint} check passed");
    text(StatusCode::OK, report)
}

/// kube's `adaptCheckToHandler`: one check, its error shown.
fn one_check(check: &Check) -> Response {
    match check.run() {
        Ok(_) => text(StatusCode::OK, "ok".to_owned()),
        Err(reason) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal server error: {reason}\n"),
        ),
    }
}

fn text(status: StatusCode, body: String) -> Response {
    let mut response = http::Response::new(Body::full(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(
        HeaderName::from_static("x-content-type-options"),
        HeaderValue::from_static("nosniff"),
    );
    response
}
