//! The generic server: builds everything a [`Config`] describes (health,
//! the delegation chain, the handler chain around it, TLS), binds the
//! listener, runs post-start hooks, and shuts down as kube-apiserver does:
//! readyz fails, pre-shutdown hooks run, after `shutdown_delay` the listener
//! closes, in-flight requests drain for up to `shutdown_timeout`.

mod lifecycle;
mod listener;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::chain::audit::AuditBackend;
use crate::config::{Config, Hook, HookPhase, Transport};
use crate::delegation::Targets;
use crate::handler::SharedHandler;
use crate::health::{Check, Flag, Health};

/// How long shutdown waits for queued audit events to be written.
const AUDIT_FLUSH_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Why the gateway could not be built or started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Filters(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Upstream(#[from] crate::upstream::UpstreamError),
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    #[error("cannot listen on {address}: {source}")]
    Bind {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// A gateway built from a configuration, not yet listening.
pub struct Gateway {
    config: Config,
    handler: SharedHandler,
    audit: Option<Arc<AuditBackend>>,
    health: Arc<Health>,
    shutting_down: Flag,
    post_start: Vec<(Hook, Flag)>,
}

impl Gateway {
    /// Builds the whole request flow for `config`.
    pub fn new(config: Config) -> Result<Gateway, StartError> {
        Self::build(config, Targets::Live, |servers| servers)
    }

    /// Like [`Gateway::new`], with a hook to replace what the handler chain
    /// wraps; tests use it to put a misbehaving handler at the centre.
    pub fn with_center(
        config: Config,
        center: impl FnOnce(SharedHandler) -> SharedHandler,
    ) -> Result<Gateway, StartError> {
        Self::build(config, Targets::Live, center)
    }

    /// A gateway whose routes report themselves instead of serving, for
    /// `wasmgate try`; it is called through [`Gateway::handler`], not started.
    pub fn reporting(config: Config) -> Result<Gateway, StartError> {
        Self::build(config, Targets::Report, |servers| servers)
    }

    /// The whole chain, to call without a listener.
    pub fn handler(&self) -> SharedHandler {
        self.handler.clone()
    }

    /// Waits until queued audit events are written (for callers that use
    /// [`Gateway::handler`] directly and then stop).
    pub async fn flush_audit(&self) {
        if let Some(audit) = &self.audit {
            audit.flush(AUDIT_FLUSH_LIMIT).await;
        }
    }

    fn build(
        config: Config,
        targets: Targets,
        center: impl FnOnce(SharedHandler) -> SharedHandler,
    ) -> Result<Gateway, StartError> {
        let shutting_down = Flag::default();
        let mut health = Health::new(shutting_down.clone());
        let mut post_start = Vec::new();
        for hook in config.hooks.iter().filter(|hook| hook.phase == HookPhase::PostStart) {
            let done = Flag::default();
            let flag = done.clone();
            health.add_readyz_check(Check::new(format!("poststarthook/{}", hook.name), move || {
                if flag.is_set() { Ok(()) } else { Err("not finished".to_owned()) }
            }));
            post_start.push((hook.clone(), done));
        }
        let health = Arc::new(health);
        let stages = crate::wasm::load_stages(&config)?;
        let servers = crate::delegation::build(&config, &health, targets)?;
        let chain = crate::chain::build(&config, stages, center(servers));
        Ok(Gateway { config, handler: chain.handler, audit: chain.audit, health, shutting_down, post_start })
    }

    /// Binds the listener and starts serving.
    pub async fn start(self) -> Result<RunningGateway, StartError> {
        let address = self.config.listen.address;
        let tls = match &self.config.listen.transport {
            Transport::Plaintext => {
                tracing::warn!(%address, "serving plaintext HTTP: listen.plaintext = true");
                None
            }
            Transport::Tls(material) => Some(tls::server_config(material)?),
            Transport::SelfSigned { cert_dir } => Some(tls::server_config(&tls::self_signed(cert_dir, address)?)?),
        };
        let tcp = TcpListener::bind(address).await.map_err(|source| StartError::Bind { address, source })?;
        let local_addr = tcp.local_addr().map_err(|source| StartError::Bind { address, source })?;
        let drain = listener::Drain {
            stop_accepting: CancellationToken::new(),
            close_connections: CancellationToken::new(),
            connections: TaskTracker::new(),
        };
        let listener = listener::Listener {
            tcp,
            tls: tls.map(TlsAcceptor::from),
            handler: self.handler,
            limits: self.config.limits.clone(),
        };
        let accepting = tokio::spawn(listener.run(drain.clone()));
        let log_flusher = self.health.log_flushes.spawn_flusher();
        let scheme = if matches!(self.config.listen.transport, Transport::Plaintext) { "http" } else { "https" };
        tracing::info!(address = %local_addr, "listening on {scheme}://{local_addr}");
        lifecycle::spawn_post_start_hooks(self.post_start, local_addr);
        let pre_shutdown = self.config.hooks.into_iter().filter(|h| h.phase == HookPhase::PreShutdown).collect();
        Ok(RunningGateway {
            local_addr,
            limits: self.config.limits,
            audit: self.audit,
            pre_shutdown,
            shutting_down: self.shutting_down,
            drain,
            accepting,
            log_flusher,
        })
    }
}

/// A listening gateway.
pub struct RunningGateway {
    pub local_addr: SocketAddr,
    limits: crate::config::Limits,
    audit: Option<Arc<AuditBackend>>,
    pre_shutdown: Vec<Hook>,
    shutting_down: Flag,
    drain: listener::Drain,
    accepting: JoinHandle<()>,
    log_flusher: JoinHandle<()>,
}

/// How a shutdown ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drained {
    /// Every connection finished its requests.
    Complete,
    /// `shutdown_timeout` passed with this many connections still open.
    TimedOut { open_connections: usize },
}

impl RunningGateway {
    /// kube's shutdown sequence; returns once the connections have drained or
    /// the shutdown timeout passed.
    pub async fn shutdown(self) -> Drained {
        tracing::info!("shutting down: readyz now fails");
        self.shutting_down.set();
        lifecycle::run_pre_shutdown_hooks(&self.pre_shutdown, self.local_addr).await;
        if !self.limits.shutdown_delay.is_zero() {
            tracing::info!(delay = ?self.limits.shutdown_delay, "waiting shutdown_delay before closing the listener");
            tokio::time::sleep(self.limits.shutdown_delay).await;
        }
        self.drain.stop_accepting.cancel();
        let _ = self.accepting.await;
        self.drain.connections.close();
        self.drain.close_connections.cancel();
        tracing::info!(open = self.drain.connections.len(), "listener closed, draining connections");
        let drained = tokio::time::timeout(self.limits.shutdown_timeout, self.drain.connections.wait()).await;
        // Then the audit backend, so every event of every drained request is written.
        if let Some(audit) = &self.audit {
            audit.flush(AUDIT_FLUSH_LIMIT).await;
        }
        self.log_flusher.abort();
        match drained {
            Ok(()) => {
                tracing::info!("all connections drained");
                Drained::Complete
            }
            Err(_) => {
                let open_connections = self.drain.connections.len();
                tracing::warn!(open_connections, "shutdown timeout passed with connections still open");
                Drained::TimedOut { open_connections }
            }
        }
    }
}
