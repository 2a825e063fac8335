//! The generic server: builds everything a [`Config`] describes (health,
//! the delegation chain, the handler chain around it, TLS) into a
//! [`snapshot::Snapshot`], binds the listener, starts the reloader, runs
//! post-start hooks, and shuts down as kube-apiserver does:
//! readyz fails, pre-shutdown hooks run, after `shutdown_delay` the listener
//! closes, in-flight requests drain for up to `shutdown_timeout`.

mod error;
mod header_deadline;
mod lifecycle;
mod listener;
pub mod reload;
pub(crate) mod snapshot;
mod systemd;
pub(crate) mod tls;

use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::source::{FileSource, ManifestSource};
use crate::config::{Config, Hook, HookPhase, Transport};
use crate::delegation::Targets;
use crate::handler::SharedHandler;
use crate::health::{Check, Flag, Health};
use crate::reload_trigger::{ReloadOutcome, ReloadRequests, ReloadTrigger};
pub(crate) use error::StartError;
use reload::{Bound, Reloader};
use snapshot::{Live, Purpose, Shared, Snapshot};

/// How long shutdown waits for queued audit events to be written.
const AUDIT_FLUSH_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long shutdown waits for the collector to take the last spans.
const TRACE_FLUSH_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// How long shutdown waits for requests to end once their connections were
/// closed (HTTP/2 streams end in tasks of their own, moments later).
const CUT_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// What [`Gateway::check`] built: the configuration, and the steps of its
/// chain, outermost first.
pub struct Checked {
    /// The configuration, completed.
    pub config: Config,
    /// The steps of the chain `chain::build` installed, outermost first.
    pub steps: Vec<&'static str>,
}

/// A gateway built from a configuration, not yet listening.
pub struct Gateway {
    snapshot: Snapshot,
    shared: Arc<Shared>,
    reload_requests: ReloadRequests,
    shutting_down: Flag,
    post_start: Vec<(Hook, Flag)>,
    /// Where reloads load the manifest from.
    source: Arc<dyn ManifestSource>,
}

impl Gateway {
    /// Builds the whole request flow for `config`.
    pub fn new(config: Config) -> Result<Gateway, StartError> {
        Self::build(config, Targets::Live, Purpose::Serve, |servers| servers)
    }

    /// Like [`Gateway::new`] for a manifest that reloads from `source` (a
    /// file with `run --listen`, the fleet's etcd) rather than from the file
    /// `config` names, with readiness checks that report on that source.
    pub fn with_source(
        config: Config,
        source: Arc<dyn ManifestSource>,
        readyz: Vec<Check>,
    ) -> Result<Gateway, StartError> {
        let mut gateway =
            Self::build_with(config, readyz, Targets::Live, Purpose::Serve, |servers| {
                servers
            })?;
        gateway.source = source;
        Ok(gateway)
    }

    /// Like [`Gateway::new`], with a hook to replace what the handler chain
    /// wraps; tests use it to put a misbehaving handler at the centre.
    pub fn with_center(
        config: Config,
        center: impl FnOnce(SharedHandler) -> SharedHandler,
    ) -> Result<Gateway, StartError> {
        Self::build(config, Targets::Live, Purpose::Serve, center)
    }

    /// A gateway whose routes report themselves instead of serving, for
    /// `wasmgate try`; it is called through [`Gateway::handler`], not started.
    pub fn reporting(config: Config) -> Result<Gateway, StartError> {
        Self::build(config, Targets::Report, Purpose::Check, |servers| servers)
    }

    /// Everything a start would build, without starting or writing anything:
    /// the verdict `wasmgate check` gives, the same a reload gives.
    pub fn check(config: Config) -> Result<Checked, StartError> {
        let built = Self::build(config, Targets::Live, Purpose::Check, |servers| servers)?;
        Ok(Checked {
            config: built.snapshot.config,
            steps: built.snapshot.steps,
        })
    }

    /// The whole chain, to call without a listener.
    pub fn handler(&self) -> SharedHandler {
        self.snapshot.handler.clone()
    }

    /// The steps of the chain, outermost first, as `chain::build` installed them.
    pub(crate) fn steps(&self) -> &[&'static str] {
        &self.snapshot.steps
    }

    /// Waits until queued audit events are written (for callers that use
    /// [`Gateway::handler`] directly and then stop).
    pub async fn flush_audit(&self) {
        self.shared.audit.flush(AUDIT_FLUSH_LIMIT).await;
    }

    fn build(
        config: Config,
        targets: Targets,
        purpose: Purpose,
        center: impl FnOnce(SharedHandler) -> SharedHandler,
    ) -> Result<Gateway, StartError> {
        Self::build_with(config, Vec::new(), targets, purpose, center)
    }

    fn build_with(
        config: Config,
        readyz: Vec<Check>,
        targets: Targets,
        purpose: Purpose,
        center: impl FnOnce(SharedHandler) -> SharedHandler,
    ) -> Result<Gateway, StartError> {
        let shutting_down = Flag::default();
        let mut health = Health::new(shutting_down.clone());
        for check in readyz {
            health.add_readyz_check(check);
        }
        let mut post_start = Vec::new();
        for hook in config
            .hooks
            .iter()
            .filter(|hook| hook.phase == HookPhase::PostStart)
        {
            let done = Flag::default();
            let flag = done.clone();
            health.add_readyz_check(Check::new(
                format!("poststarthook/{}", hook.name),
                move || {
                    if flag.is_set() {
                        Ok(())
                    } else {
                        Err("not finished".to_owned())
                    }
                },
            ));
            post_start.push((hook.clone(), done));
        }
        let (trigger, reload_requests) = ReloadTrigger::new();
        let shared = Arc::new(Shared::new(Arc::new(health), Some(trigger)));
        let source = Arc::new(FileSource {
            path: config.source.clone(),
            listen: None,
        });
        let snapshot = snapshot::build(config, &shared, targets, purpose, center)?;
        Ok(Gateway {
            snapshot,
            shared,
            reload_requests,
            shutting_down,
            post_start,
            source,
        })
    }

    /// Binds the listener and starts serving; starts the reloader and, when
    /// the manifest is a file, the watcher.
    pub async fn start(self) -> Result<RunningGateway, StartError> {
        let config = &self.snapshot.config;
        let address = config.listen.address;
        if matches!(config.listen.transport, Transport::Plaintext) {
            tracing::warn!(%address, "serving plaintext HTTP: listen.plaintext = true");
        }
        let tcp = TcpListener::bind(address)
            .await
            .map_err(|source| StartError::Bind { address, source })?;
        let local_addr = tcp
            .local_addr()
            .map_err(|source| StartError::Bind { address, source })?;
        let scheme = if self.snapshot.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let pre_shutdown = config
            .hooks
            .iter()
            .filter(|h| h.phase == HookPhase::PreShutdown)
            .cloned()
            .collect();
        crate::status_page::publish(&self.snapshot.layout);
        crate::metrics::metrics()
            .gateway
            .chain_generation
            .set(i64::try_from(self.snapshot.generation).unwrap_or(i64::MAX));
        let live: Live = Arc::new(ArcSwap::from_pointee(self.snapshot));
        let bound = Bound::of(&live.load().config);
        let reloader = Reloader {
            source: self.source,
            live: live.clone(),
            shared: self.shared.clone(),
            bound,
        };
        let reloading = reloader.spawn(self.reload_requests);
        let drain = listener::Drain {
            shutting_down: self.shutting_down.clone(),
            stop_accepting: CancellationToken::new(),
            close_connections: CancellationToken::new(),
            cut_connections: CancellationToken::new(),
            connections: TaskTracker::new(),
            requests: TaskTracker::new(),
        };
        let listener = listener::Listener {
            tcp,
            live: live.clone(),
        };
        let accepting = tokio::spawn(listener.run(drain.clone()));
        let log_flusher = self.shared.health.log_flushes.spawn_flusher();
        tracing::info!(address = %local_addr, "listening on {scheme}://{local_addr}");
        lifecycle::spawn_post_start_hooks(self.post_start, local_addr);
        systemd::ready();
        let watchdog = systemd::spawn_watchdog();
        Ok(RunningGateway {
            local_addr,
            live,
            shared: self.shared,
            pre_shutdown,
            shutting_down: self.shutting_down,
            drain,
            accepting,
            log_flusher,
            reloading,
            watchdog,
        })
    }
}

/// A listening gateway.
pub struct RunningGateway {
    /// The address the listener is bound to (the port chosen, for port 0).
    pub local_addr: SocketAddr,
    live: Live,
    shared: Arc<Shared>,
    pre_shutdown: Vec<Hook>,
    shutting_down: Flag,
    drain: listener::Drain,
    accepting: JoinHandle<()>,
    log_flusher: JoinHandle<()>,
    /// The reloader and its file watcher, stopped by the shutdown.
    reloading: JoinHandle<()>,
    /// `WATCHDOG=1` to systemd, when it asked for it.
    watchdog: Option<JoinHandle<()>>,
}

/// How a shutdown ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drained {
    /// Every connection finished its requests.
    Complete,
    /// `shutdown_timeout` passed with this many connections still open.
    TimedOut {
        /// The connections still open when the grace period ended.
        open_connections: usize,
    },
}

impl RunningGateway {
    /// Asks for a reload (SIGHUP) without waiting for it.
    pub fn request_reload(&self) {
        if let Some(trigger) = &self.shared.reload {
            trigger.request();
        }
    }

    /// Reloads now and says how it went.
    pub async fn reload(&self) -> Option<ReloadOutcome> {
        self.shared.reload.as_ref()?.reload().await
    }

    /// What asks this gateway's reloader for a reload (the fleet's watch).
    pub fn reload_trigger(&self) -> Option<ReloadTrigger> {
        self.shared.reload.clone()
    }

    /// The generation of the snapshot in force (1 at start, one more per
    /// successful reload).
    pub fn generation(&self) -> u64 {
        self.live.load().generation
    }

    /// kube's shutdown sequence; returns once the connections have drained or
    /// the shutdown timeout passed.
    pub async fn shutdown(self) -> Drained {
        let limits = self.live.load().config.limits.clone();
        tracing::info!("shutting down: readyz now fails");
        systemd::stopping();
        self.shutting_down.set();
        // The pre-shutdown hooks and the delay start together, and the
        // listener closes once both are over: kube's RunWithContext runs
        // its pre-shutdown hooks as the shutdown delay begins and stops its
        // HTTP server when the delay has passed and the hooks have returned
        // (staging/src/k8s.io/apiserver/pkg/server/genericapiserver.go).
        let delay = async {
            if !limits.shutdown_delay.is_zero() {
                tracing::info!(delay = ?limits.shutdown_delay, "waiting shutdown_delay before closing the listener");
                tokio::time::sleep(limits.shutdown_delay).await;
            }
        };
        tokio::join!(
            lifecycle::run_pre_shutdown_hooks(&self.pre_shutdown, self.local_addr),
            delay
        );
        self.drain.stop_accepting.cancel();
        let _ = self.accepting.await;
        self.drain.connections.close();
        self.drain.requests.close();
        self.drain.close_connections.cancel();
        tracing::info!(
            open = self.drain.connections.len(),
            "listener closed, draining connections"
        );
        let drained = tokio::time::timeout(limits.shutdown_timeout, self.drain.wait()).await;
        let open_connections = self.drain.connections.len();
        if drained.is_err() {
            // What is left is closed now, and what its requests were doing
            // is dropped: their audit events are complete before the flush.
            tracing::warn!(
                open_connections,
                "shutdown timeout passed: closing the connections still open"
            );
            self.drain.cut_connections.cancel();
            if tokio::time::timeout(CUT_LIMIT, self.drain.wait())
                .await
                .is_err()
            {
                tracing::warn!("requests still running after their connections were closed");
            }
        }
        // Then the audit backends, so every event of every request is
        // written: the live snapshot's, and those of the snapshots reloads
        // replaced, which requests in flight may still have written to.
        self.shared.audit.flush(AUDIT_FLUSH_LIMIT).await;
        // And the spans of the last requests.
        if let Some(tracer) = &self.live.load().tracer {
            tracer.flush(TRACE_FLUSH_LIMIT).await;
        }
        self.log_flusher.abort();
        self.reloading.abort();
        if let Some(watchdog) = &self.watchdog {
            watchdog.abort();
        }
        match drained {
            Ok(()) => {
                tracing::info!("all connections drained");
                Drained::Complete
            }
            Err(_) => Drained::TimedOut { open_connections },
        }
    }
}
