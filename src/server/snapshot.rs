//! What one configuration builds for requests to use, swapped whole on a
//! reload: the handler chain, the TLS acceptor, the connection settings,
//! the audit backend and the tracer. The listener takes the current snapshot when a
//! connection arrives (TLS, limits) and again for every request (the
//! chain), and a request keeps its snapshot to the end, so a reload never
//! changes a request under way; an old snapshot is dropped with its last
//! request.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use rustls::server::danger::ClientCertVerifier;
use tokio_rustls::TlsAcceptor;

use super::error::StartError;
use super::tls;
use crate::aggregator::Refresh;
use crate::chain::audit::AuditWriters;
use crate::config::{Config, Limits, Transport};
use crate::delegation::Targets;
use crate::handler::SharedHandler;
use crate::health::Health;
use crate::reload_trigger::ReloadTrigger;
use crate::traces::Tracer;

pub(crate) struct Snapshot {
    /// 1 for the configuration the gateway started with, then one more per
    /// successful reload.
    pub generation: u64,
    pub config: Config,
    pub handler: SharedHandler,
    /// The steps of the chain, outermost first ([`crate::chain::Chain::steps`]).
    pub steps: Vec<&'static str>,
    pub tls: Option<Tls>,
    pub http: Arc<auto::Builder<TokioExecutor>>,
    /// What the status page draws of this snapshot, once it is in force.
    pub layout: Arc<crate::status_page::Layout>,
    /// The configuration's `[tracing]`, when on (the chain holds it too).
    pub tracer: Option<Tracer>,
}

/// What the listener does TLS with.
#[derive(Clone)]
pub(crate) struct Tls {
    pub acceptor: TlsAcceptor,
    /// What verifies the client certificates of the acceptor's handshakes
    /// (`listen.tls.client_ca`): each request of a connection has its
    /// certificate verified by it again (`listener::ClientChain`).
    pub client_verifier: Option<Arc<dyn ClientCertVerifier>>,
}

/// The snapshot in force, shared by the listener and the reloader.
pub(crate) type Live = Arc<ArcSwap<Snapshot>>;

/// What survives reloads: the health checks (with the post-start hooks'
/// state), the reload trigger `/debug/reload` uses, the generation count,
/// every snapshot's audit backend (the shutdown flushes them all).
pub(crate) struct Shared {
    pub health: Arc<Health>,
    pub reload: Option<ReloadTrigger>,
    generations: AtomicU64,
    pub audit: AuditWriters,
}

impl Shared {
    pub(crate) fn new(health: Arc<Health>, reload: Option<ReloadTrigger>) -> Self {
        Shared {
            health,
            reload,
            generations: AtomicU64::new(0),
            audit: AuditWriters::default(),
        }
    }
}

/// How far to build: everything for serving, or what a check verifies.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    Serve,
    /// No files written: a self-signed certificate is not generated.
    Check,
}

/// Builds a snapshot: components loaded (from the cache when unchanged),
/// upstream clients, TLS, the chain. Nothing is swapped here.
pub(crate) fn build(
    config: Config,
    shared: &Shared,
    targets: Targets,
    purpose: Purpose,
    center: impl FnOnce(SharedHandler) -> SharedHandler,
) -> Result<Snapshot, StartError> {
    let stages = crate::wasm::load_stages(&config)?;
    let tls = tls_acceptor(&config, purpose)?;
    // Each snapshot has its own flow control: requests queued under one
    // configuration finish under it.
    let flow_control = config
        .flow_control
        .as_ref()
        .map(crate::flow_control::Controller::new);
    let servers = crate::delegation::build(
        &config,
        &shared.health,
        shared.reload.as_ref(),
        flow_control.as_ref(),
        targets,
        match purpose {
            Purpose::Serve => Refresh::Background,
            Purpose::Check => Refresh::Never,
        },
    )?;
    // Each snapshot has its own tracer too: a reload applies [tracing].
    let tracer = config
        .tracing
        .as_ref()
        .map(Tracer::new)
        .transpose()
        .map_err(StartError::Tracing)?;
    let chain = crate::chain::build(
        &config,
        stages,
        flow_control.clone(),
        tracer.clone(),
        center(servers),
    );
    let generation = shared.generations.fetch_add(1, Ordering::Relaxed) + 1;
    // Registered as it is built, not as it goes live: a snapshot a reload
    // replaces, or one never swapped in, is flushed at shutdown all the same.
    if let Some(audit) = &chain.audit {
        shared.audit.register(audit);
    }
    let timings: Vec<crate::status_page::StepTiming> = chain
        .steps
        .iter()
        .map(|&step| {
            let timed = chain.timed.iter().find(|timed| timed.step == step);
            (step, timed.map(|timed| timed.filter))
        })
        .collect();
    let layout = crate::status_page::Layout::new(generation, &config, &timings, flow_control);
    Ok(Snapshot {
        generation,
        http: Arc::new(http_builder(&config.limits)),
        config,
        handler: chain.handler,
        steps: chain.steps,
        tls,
        layout: Arc::new(layout),
        tracer,
    })
}

fn tls_acceptor(config: &Config, purpose: Purpose) -> Result<Option<Tls>, StartError> {
    let (server_config, client_verifier) = match (&config.listen.transport, purpose) {
        (Transport::Plaintext, _) | (Transport::SelfSigned { .. }, Purpose::Check) => {
            return Ok(None);
        }
        (Transport::Tls(material), _) => tls::server_config(material)?,
        (Transport::SelfSigned { cert_dir }, Purpose::Serve) => {
            tls::server_config(&tls::self_signed(cert_dir, config.listen.address)?)?
        }
    };
    Ok(Some(Tls {
        acceptor: TlsAcceptor::from(server_config),
        client_verifier,
    }))
}

/// hyper's smallest HTTP/1.1 read buffer: header limits below it are ours
/// to count (the listener does).
pub(crate) const HYPER_MIN_HEADER_BUFFER: usize = 8192;

fn http_builder(limits: &Limits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        // The listener keeps the header deadline (`header_deadline`):
        // hyper's runs while an idle keep-alive connection waits, and would
        // close it at the header timeout instead of the idle timeout.
        .header_read_timeout(None)
        .max_buf_size(limits.max_header_bytes.max(HYPER_MIN_HEADER_BUFFER));
    builder
        .http2()
        // RFC 8441: WebSockets over HTTP/2 (`upstream/upgrade.rs`).
        .enable_connect_protocol()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX));
    builder
}
