//! Hot reload: the manifest (or a component it names) changes, and the
//! chain is rebuilt beside the running one, validated, and swapped in with
//! one pointer swap (`server::snapshot`). A bad edit changes nothing: the
//! running chain keeps serving and the problems are logged with their
//! file:line:column. Triggers: the file watcher (editors' atomic renames and
//! Kubernetes ConfigMap symlink swaps included), SIGHUP, and
//! `POST /debug/reload` (behind authorization, as a non-resource URL).
//!
//! Reloads run one at a time on one task; triggers that arrive during a
//! reload are served by the next one.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::future::BoxFuture;
use notify::{RecursiveMode, Watcher};
use tokio::sync::{mpsc, oneshot};

use crate::body::{Request, Response};
use crate::config::{self, Config, Transport};
use crate::delegation::Targets;
use crate::handler::Handler;
use crate::metrics::{ReloadResult, metrics};
use crate::server::StartError;
use crate::server::snapshot::{self, Live, Purpose, Shared};
use crate::status::{GatewayError, Status};

/// Bursts of file events (an editor's save is several) become one reload.
const DEBOUNCE: Duration = Duration::from_millis(200);

/// How a reload ended.
#[derive(Debug, Clone)]
pub enum ReloadOutcome {
    /// The new chain is in force.
    Swapped {
        generation: u64,
        /// Settings that changed but take effect only after a restart.
        restart_required: Vec<String>,
    },
    /// The new configuration was refused; the running chain is unchanged.
    Rejected(String),
}

/// Asks the reloader for a reload; with a reply channel, to hear how it went.
#[derive(Clone)]
pub struct ReloadTrigger(mpsc::UnboundedSender<Option<oneshot::Sender<ReloadOutcome>>>);

pub type ReloadRequests = mpsc::UnboundedReceiver<Option<oneshot::Sender<ReloadOutcome>>>;

impl ReloadTrigger {
    pub fn new() -> (ReloadTrigger, ReloadRequests) {
        let (sender, receiver) = mpsc::unbounded_channel();
        (ReloadTrigger(sender), receiver)
    }

    /// Requests a reload without waiting for it.
    pub fn request(&self) {
        let _ = self.0.send(None);
    }

    /// Requests a reload and waits for its outcome.
    pub async fn reload(&self) -> Option<ReloadOutcome> {
        let (reply, outcome) = oneshot::channel();
        self.0.send(Some(reply)).ok()?;
        outcome.await.ok()
    }
}

/// Rebuilds and swaps the snapshot of one gateway.
pub struct Reloader {
    pub path: PathBuf,
    pub live: Live,
    pub shared: Arc<Shared>,
}

impl Reloader {
    /// Serves reload requests until every trigger is gone, watching the
    /// files of the configuration in force (when the manifest is a file).
    pub async fn run(self, mut requests: ReloadRequests) {
        let mut watcher = self.watch();
        while let Some(first) = requests.recv().await {
            let mut replies: Vec<_> = first.into_iter().collect();
            while let Ok(next) = requests.try_recv() {
                replies.extend(next);
            }
            let outcome = self.reload().await;
            if matches!(outcome, ReloadOutcome::Swapped { .. }) {
                // The new configuration may name other components.
                drop(watcher.take());
                watcher = self.watch();
            }
            for reply in replies {
                let _ = reply.send(outcome.clone());
            }
        }
    }

    fn watch(&self) -> Option<notify::RecommendedWatcher> {
        let trigger = self.shared.reload.clone()?;
        if !self.path.is_file() {
            return None;
        }
        match watch(&self.path, &self.live.load().config, trigger) {
            Ok(watcher) => Some(watcher),
            Err(error) => {
                tracing::warn!(%error, "cannot watch the configuration files: reload with SIGHUP or POST /debug/reload");
                None
            }
        }
    }

    /// Builds a new snapshot from the manifest on disk and swaps it in, or
    /// changes nothing and says why.
    pub async fn reload(&self) -> ReloadOutcome {
        let started = Instant::now();
        let cache_before = crate::wasm::WasmHost::shared().map(|host| host.cache_stats()).ok();
        let (path, shared) = (self.path.clone(), self.shared.clone());
        // Loading compiles what changed: CPU work, kept off the async workers.
        let built = tokio::task::spawn_blocking(move || {
            let config = config::load(&path).map_err(|error| error.to_string())?;
            snapshot::build(config, &shared, Targets::Live, Purpose::Serve, |servers| servers)
                .map_err(|error: StartError| error.to_string())
        })
        .await
        .unwrap_or_else(|error| Err(format!("the reload task failed: {error}")));
        match built {
            Ok(snapshot) => {
                let restart_required = restart_required(&self.live.load().config, &snapshot.config);
                let generation = snapshot.generation;
                self.live.store(Arc::new(snapshot));
                metrics().config_reloads.get_or_create(&ReloadResult { result: "success".into() }).inc();
                let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
                metrics().config_last_reload_success.set(i64::try_from(now).unwrap_or(i64::MAX));
                let after = crate::wasm::WasmHost::shared().map(|host| host.cache_stats()).ok();
                let compiled = match (cache_before, after) {
                    (Some(before), Some(after)) => after.compiled - before.compiled,
                    _ => 0,
                };
                tracing::info!(
                    generation,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    components_compiled = compiled,
                    "configuration reloaded"
                );
                for setting in &restart_required {
                    tracing::warn!(setting = %setting, "changed, but takes effect only after a restart");
                }
                ReloadOutcome::Swapped { generation, restart_required }
            }
            Err(problems) => {
                metrics().config_reloads.get_or_create(&ReloadResult { result: "failure".into() }).inc();
                tracing::error!("configuration reload refused, the running configuration is unchanged:\n{problems}");
                ReloadOutcome::Rejected(problems)
            }
        }
    }
}

/// Settings bound at start (the socket, whether it speaks TLS, the hooks).
fn restart_required(running: &Config, new: &Config) -> Vec<String> {
    let mut changed = Vec::new();
    if running.listen.address != new.listen.address {
        changed.push(format!("listen.address ({} -> {})", running.listen.address, new.listen.address));
    }
    let plaintext = |config: &Config| matches!(config.listen.transport, Transport::Plaintext);
    if plaintext(running) != plaintext(new) {
        changed.push("listen.plaintext".to_owned());
    }
    let hooks = |config: &Config| -> Vec<(String, Vec<String>)> {
        config.hooks.iter().map(|hook| (hook.name.to_string(), hook.command.clone())).collect()
    };
    if hooks(running) != hooks(new) {
        changed.push("hooks".to_owned());
    }
    changed
}

/// Watches the manifest and the components it names, requesting a reload
/// when one of them changes. Folders are watched, not files, so that
/// replacing a file by rename (editors) or swapping a symlink (ConfigMaps)
/// is seen. Returns the watcher; watching stops when it is dropped.
fn watch(manifest: &Path, config: &Config, trigger: ReloadTrigger) -> notify::Result<notify::RecommendedWatcher> {
    let manifest = std::path::absolute(manifest)?;
    let mut watched_files: HashSet<PathBuf> = config.stages.all_filters().map(|f| f.component.clone()).collect();
    watched_files = watched_files.into_iter().filter_map(|path| std::path::absolute(path).ok()).collect();
    watched_files.insert(manifest.clone());
    let manifest_dir = manifest.parent().map(Path::to_path_buf).unwrap_or_default();
    let folders: HashSet<PathBuf> = watched_files.iter().filter_map(|file| file.parent().map(Path::to_path_buf)).collect();

    let (events, mut received) = mpsc::unbounded_channel::<()>();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let Ok(event) = event else { return };
        let relevant = event.paths.iter().any(|path| {
            watched_files.contains(path)
                // A ConfigMap mount swaps its `..data` symlink.
                || (path.parent() == Some(manifest_dir.as_path())
                    && path.file_name().is_some_and(|name| name.to_string_lossy().starts_with("..data")))
        });
        if relevant && !matches!(event.kind, notify::EventKind::Access(_)) {
            let _ = events.send(());
        }
    })?;
    for folder in &folders {
        watcher.watch(folder, RecursiveMode::NonRecursive)?;
    }
    tokio::spawn(async move {
        while received.recv().await.is_some() {
            tokio::time::sleep(DEBOUNCE).await;
            while received.try_recv().is_ok() {}
            tracing::info!("configuration files changed: reloading");
            trigger.request();
        }
    });
    Ok(watcher)
}

/// `POST /debug/reload`: reload now and answer how it went.
pub struct ReloadEndpoint(pub ReloadTrigger);

impl Handler for ReloadEndpoint {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        Box::pin(async move {
            if request.method() != http::Method::POST {
                return GatewayError::MethodNotAllowed.into_response();
            }
            match self.0.reload().await {
                Some(ReloadOutcome::Swapped { generation, restart_required }) => {
                    let mut message = format!("configuration reloaded: generation {generation}");
                    if !restart_required.is_empty() {
                        message.push_str(&format!("; restart required for: {}", restart_required.join(", ")));
                    }
                    Status::success(message).into_response()
                }
                Some(ReloadOutcome::Rejected(problems)) => GatewayError::Invalid { message: problems }.into_response(),
                None => GatewayError::ServiceUnavailable { message: "the reloader is not running".to_owned() }.into_response(),
            }
        })
    }
}
