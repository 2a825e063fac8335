//! Hot reload: the manifest (or a component or file it names) changes, and
//! the chain is rebuilt beside the running one, validated, and swapped in with
//! one pointer swap ([`super::snapshot`]). A bad edit changes nothing: the
//! running chain keeps serving and the problems are logged with their
//! file:line:column. Triggers: the file watcher (editors' atomic renames and
//! Kubernetes ConfigMap symlink swaps included), SIGHUP, and
//! `POST /debug/reload` (behind authorization, as a non-resource URL).
//!
//! A file written in place is reloaded only once it has settled
//! ([`SETTLE`]), so a manifest written in pieces is never loaded half-written;
//! a file replaced whole (a rename) is reloaded at once. A gateway serving a
//! generated self-signed certificate also reloads when that certificate is
//! due for renewal, which the reload (as a start) does.
//!
//! Reloads run one at a time on one task; triggers that arrive during a
//! reload are served by the next one, unless the source says it still
//! holds what that reload loaded (the fleet's revision,
//! `ManifestSource::stamp`): then that reload answers them, and a SIGHUP
//! during a fleet apply does not swap the revision in a second time. How a
//! reload is asked for, and what it answers, is `crate::reload_trigger`.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::error::StartError;
use super::snapshot::{self, Live, Purpose, Shared};
use super::tls;
use crate::config::source::ManifestSource;
use crate::config::{self, Config, Transport};
use crate::delegation::Targets;
use crate::metrics::{ReloadResult, metrics};
use crate::reload_trigger::{ReloadOutcome, ReloadRequests, ReloadTrigger};

/// Bursts of file events (an editor's save is several) become one reload.
const DEBOUNCE: Duration = Duration::from_millis(200);

/// A file written in place (rather than replaced by a rename) is reloaded
/// only once no file changed and the manifest's content stayed the same for
/// this long: a manifest written in two pieces is never loaded half-written.
/// A rename or a symlink swap puts a whole file in place at once, and
/// reloads after [`DEBOUNCE`] only.
pub const SETTLE: Duration = Duration::from_secs(1);

/// How often, at most and at least, a gateway serving a self-signed
/// certificate looks whether it is due for renewal; a renewal that failed
/// (an invalid manifest at that moment) is tried again after the shorter.
const RENEWAL_CHECK: std::ops::RangeInclusive<Duration> =
    Duration::from_secs(60 * 60)..=Duration::from_secs(12 * 60 * 60);

/// Rebuilds and swaps the snapshot of one gateway.
pub(crate) struct Reloader {
    /// Where the manifest is loaded from: its file, or the fleet's etcd.
    pub(crate) source: Arc<dyn ManifestSource>,
    pub live: Live,
    pub shared: Arc<Shared>,
    /// The settings of the configuration the gateway started with that only
    /// a restart changes.
    pub bound: Bound,
}

/// What the gateway bound at start: the socket, whether it speaks TLS, the
/// hooks. A reload is compared with these, not with the previous reload,
/// since none of them changes until a restart.
pub(crate) struct Bound {
    address: SocketAddr,
    plaintext: bool,
    hooks: Vec<(String, Vec<String>)>,
}

impl Bound {
    pub(crate) fn of(config: &Config) -> Bound {
        Bound {
            address: config.listen.address,
            plaintext: matches!(config.listen.transport, Transport::Plaintext),
            hooks: config
                .hooks
                .iter()
                .map(|hook| (hook.name.to_string(), hook.command.clone()))
                .collect(),
        }
    }
}

impl Reloader {
    /// Starts the watcher now (so that a change made once the gateway has
    /// started is seen), then serves reload requests on a task of its own,
    /// until every trigger is gone or the task is aborted.
    pub(crate) fn spawn(self, requests: ReloadRequests) -> JoinHandle<()> {
        record_success();
        let watch = self.watch();
        tokio::spawn(self.run(watch, requests))
    }

    /// Serves reload requests, watching the files of the configuration in
    /// force (when the manifest is a file).
    async fn run(self, mut watch: Option<FileWatch>, mut requests: ReloadRequests) {
        // Requests that came during the last reload and are owed one.
        let mut owed = None;
        loop {
            let mut replies: Vec<_> = match owed.take() {
                Some(replies) => replies,
                None => {
                    let first = tokio::select! {
                        request = requests.recv() => match request {
                            Some(request) => request,
                            None => break,
                        },
                        () = self.certificate_renewal_due() => {
                            tracing::info!("the self-signed serving certificate expires soon: reloading to renew it");
                            None
                        }
                    };
                    first.into_iter().collect()
                }
            };
            while let Ok(next) = requests.try_recv() {
                replies.extend(next);
            }
            super::systemd::reloading();
            let (outcome, loaded) = self.reload().await;
            super::systemd::ready();
            // Those that came meanwhile are answered by this reload when
            // the source still holds what it loaded (the fleet's revision);
            // else (a file, or a new candidate) they get a reload of their own.
            let mut during = None::<Vec<_>>;
            while let Ok(next) = requests.try_recv() {
                during.get_or_insert_default().extend(next);
            }
            if let Some(during) = during {
                if loaded.is_some() && loaded == self.source.stamp() {
                    replies.extend(during);
                } else {
                    owed = Some(during);
                }
            }
            if let (ReloadOutcome::Swapped { .. }, Some(watch)) = (&outcome, watch.as_mut()) {
                // The new configuration may name other components. The same
                // watcher goes on, so no change made meanwhile goes unseen.
                if let Err(error) = watch.follow(&self.live.load().config) {
                    tracing::warn!(%error, "cannot watch every file of the new configuration");
                }
            }
            for reply in replies {
                let _ = reply.send(outcome.clone());
            }
        }
    }

    /// Resolves once the self-signed certificate in force expires within
    /// [`tls::RENEW_BEFORE`]: a reload then generates a new one (as a start
    /// does). Never resolves for a gateway with given or no certificates.
    async fn certificate_renewal_due(&self) {
        let cert_dir = match &self.live.load().config.listen.transport {
            Transport::SelfSigned { cert_dir } if !self.bound.plaintext => cert_dir.clone(),
            _ => return std::future::pending().await,
        };
        loop {
            let now = SystemTime::now();
            let due = tls::kept_until(&cert_dir)
                .and_then(|until| until.checked_sub(tls::RENEW_BEFORE))
                .and_then(|due| due.duration_since(now).ok())
                .unwrap_or(Duration::ZERO);
            let wait = due.clamp(*RENEWAL_CHECK.start(), *RENEWAL_CHECK.end());
            tokio::time::sleep(wait).await;
            let still_good = tls::kept_until(&cert_dir)
                .is_some_and(|until| until > SystemTime::now() + tls::RENEW_BEFORE);
            if !still_good {
                return;
            }
        }
    }

    fn watch(&self) -> Option<FileWatch> {
        let trigger = self.shared.reload.clone()?;
        let path = self.source.watched_file().filter(|path| path.is_file())?;
        let started = FileWatch::start(path, trigger).and_then(|mut watch| {
            watch.follow(&self.live.load().config)?;
            Ok(watch)
        });
        match started {
            Ok(watch) => Some(watch),
            Err(error) => {
                tracing::warn!(%error, "cannot watch the configuration files: reload with SIGHUP or POST /debug/reload");
                None
            }
        }
    }

    /// Builds a new snapshot from the manifest's source and swaps it in, or
    /// changes nothing and says why; with the source's stamp from before it
    /// was loaded.
    pub(crate) async fn reload(&self) -> (ReloadOutcome, Option<u64>) {
        let started = Instant::now();
        let cache_before = crate::wasm::WasmHost::shared()
            .map(|host| host.cache_stats())
            .ok();
        let (source, shared) = (self.source.clone(), self.shared.clone());
        // Read before the load: a candidate set in between makes the stamp
        // differ afterwards, and the requests of the meantime reload again.
        let loaded = self.source.stamp();
        // Loading compiles what changed: CPU work, kept off the async workers.
        let built = tokio::task::spawn_blocking(move || {
            let config = source.load().map_err(|error| error.to_string())?;
            snapshot::build(config, &shared, Targets::Live, Purpose::Serve, |servers| {
                servers
            })
            .map_err(|error: StartError| error.to_string())
        })
        .await
        .unwrap_or_else(|error| Err(format!("the reload task failed: {error}")));
        let outcome = match built {
            Ok(mut snapshot) => {
                let restart_required = restart_required(&self.bound, &snapshot.config);
                if self.bound.plaintext
                    != matches!(snapshot.config.listen.transport, Transport::Plaintext)
                {
                    // The listener keeps speaking what it spoke at start.
                    snapshot.tls = self.live.load().tls.clone();
                }
                let generation = snapshot.generation;
                crate::status_page::publish(&snapshot.layout);
                crate::status_page::record_reload(Ok(generation));
                metrics()
                    .gateway
                    .chain_generation
                    .set(i64::try_from(generation).unwrap_or(i64::MAX));
                self.live.store(Arc::new(snapshot));
                metrics()
                    .config_reloads
                    .get_or_create(&ReloadResult {
                        result: "success".into(),
                    })
                    .inc();
                record_success();
                let after = crate::wasm::WasmHost::shared()
                    .map(|host| host.cache_stats())
                    .ok();
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
                ReloadOutcome::Swapped {
                    generation,
                    restart_required,
                }
            }
            Err(problems) => {
                metrics()
                    .config_reloads
                    .get_or_create(&ReloadResult {
                        result: "failure".into(),
                    })
                    .inc();
                tracing::error!(
                    "configuration reload refused, the running configuration is unchanged:\n{problems}"
                );
                crate::status_page::record_reload(Err(problems.to_string()));
                ReloadOutcome::Rejected(problems)
            }
        };
        (outcome, loaded)
    }
}

/// The configuration in force was loaded successfully now.
fn record_success() {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    metrics()
        .config_last_reload_success
        .set(i64::try_from(now).unwrap_or(i64::MAX));
}

/// Settings bound at start (the socket, whether it speaks TLS, the hooks)
/// that `new` sets otherwise.
fn restart_required(bound: &Bound, new: &Config) -> Vec<String> {
    let mut changed = Vec::new();
    if bound.address != new.listen.address {
        changed.push(format!(
            "listen.address ({} -> {})",
            bound.address, new.listen.address
        ));
    }
    if bound.plaintext != matches!(new.listen.transport, Transport::Plaintext) {
        changed.push("listen.plaintext".to_owned());
    }
    if bound.hooks != Bound::of(new).hooks {
        changed.push("hooks".to_owned());
    }
    changed
}

/// Watches the manifest, the components the configuration in force names
/// and the files read into it, requesting a reload when one of them
/// changes. Folders are watched, not files, so that replacing a file by
/// rename (editors) or swapping a symlink (ConfigMaps) is seen. One watcher
/// serves the reloader's whole life: what it watches follows each new
/// configuration, and no change is lost between two of them. Watching stops
/// when it is dropped.
struct FileWatch {
    watcher: notify::RecommendedWatcher,
    manifest: PathBuf,
    /// The files whose changes count, read by the watcher's callback.
    files: Arc<Mutex<HashSet<PathBuf>>>,
    folders: HashSet<PathBuf>,
}

impl FileWatch {
    fn start(manifest: &Path, trigger: ReloadTrigger) -> notify::Result<FileWatch> {
        let manifest = std::path::absolute(manifest)?;
        let manifest_dir = manifest.parent().map(Path::to_path_buf).unwrap_or_default();
        let files = Arc::new(Mutex::new(HashSet::new()));
        let watched = files.clone();
        let (events, mut received) = mpsc::unbounded_channel::<Change>();
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            let Ok(event) = event else { return };
            let Ok(files) = watched.lock() else { return };
            let relevant = event.paths.iter().any(|path| {
                files.contains(path)
                    // A ConfigMap mount swaps its `..data` symlink.
                    || (path.parent() == Some(manifest_dir.as_path())
                        && path.file_name().is_some_and(|name| name.to_string_lossy().starts_with("..data")))
            });
            if let (true, Some(change)) = (relevant, Change::of(&event.kind)) {
                let _ = events.send(change);
            }
        })?;
        let settled = manifest.clone();
        tokio::spawn(async move {
            while let Some(first) = received.recv().await {
                let mut change = first;
                tokio::time::sleep(DEBOUNCE).await;
                while let Ok(next) = received.try_recv() {
                    change = change.max(next);
                }
                if change == Change::InPlace && !settle(&mut received, &settled).await {
                    return;
                }
                tracing::info!("configuration files changed: reloading");
                trigger.request();
            }
        });
        Ok(FileWatch {
            watcher,
            manifest,
            files,
            folders: HashSet::new(),
        })
    }

    /// Watches the manifest, the components `config` names and the files
    /// read into it (certificates, CAs, `config_files`), and where those of
    /// them that are symlinks point (best effort).
    fn follow(&mut self, config: &Config) -> notify::Result<()> {
        let mut files: HashSet<PathBuf> = config
            .stages
            .all_filters()
            .map(|f| f.component.clone())
            .chain(config.files_read.iter().cloned())
            .collect();
        files = files
            .into_iter()
            .filter_map(|path| std::path::absolute(path).ok())
            .collect();
        files.insert(self.manifest.clone());
        let folders: HashSet<PathBuf> = files
            .iter()
            .filter_map(|file| file.parent().map(Path::to_path_buf))
            .collect();
        // A file reached through a symlink changes where it really is, too.
        let targets: HashSet<PathBuf> = files
            .iter()
            .filter_map(|file| std::fs::canonicalize(file).ok())
            .filter(|target| !files.contains(target))
            .collect();
        let target_folders: HashSet<PathBuf> = targets
            .iter()
            .filter_map(|file| file.parent().map(Path::to_path_buf))
            .filter(|folder| !folders.contains(folder))
            .collect();
        files.extend(targets);
        if let Ok(mut watched) = self.files.lock() {
            *watched = files;
        }
        let mut watching = HashSet::new();
        let mut failed = None;
        // Watched again even when already watched: a folder deleted and made
        // anew is then watched too (watching twice is harmless).
        for folder in folders.iter().chain(&target_folders) {
            match self.watcher.watch(folder, RecursiveMode::NonRecursive) {
                Ok(()) => {
                    watching.insert(folder.clone());
                }
                // Best effort: the links themselves are watched.
                Err(error) if target_folders.contains(folder) => {
                    tracing::debug!(folder = %folder.display(), %error, "cannot watch the folder a symlink points into");
                }
                Err(error) => failed = failed.or(Some(error)),
            }
        }
        for stale in self.folders.difference(&watching) {
            let _ = self.watcher.unwatch(stale);
        }
        self.folders = watching;
        failed.map_or(Ok(()), Err)
    }
}

/// How a watched file changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Change {
    /// Put in place whole: renamed over, created, removed, its metadata
    /// changed.
    Replaced,
    /// Written in place: it may be half-written still.
    InPlace,
}

impl Change {
    /// `None` for events that change nothing (reads, closes).
    fn of(kind: &notify::EventKind) -> Option<Change> {
        use notify::EventKind;
        use notify::event::ModifyKind;
        match kind {
            EventKind::Access(_) => None,
            EventKind::Create(_)
            | EventKind::Remove(_)
            | EventKind::Modify(ModifyKind::Name(_) | ModifyKind::Metadata(_)) => {
                Some(Change::Replaced)
            }
            EventKind::Modify(_) | EventKind::Any | EventKind::Other => Some(Change::InPlace),
        }
    }
}

/// Waits until, for [`SETTLE`], no watched file changed and the manifest's
/// content stayed the same. False when the watcher is gone.
async fn settle(changes: &mut mpsc::UnboundedReceiver<Change>, manifest: &Path) -> bool {
    loop {
        let before = content_digest(manifest);
        tokio::time::sleep(SETTLE).await;
        let mut changed = false;
        loop {
            match changes.try_recv() {
                Ok(_) => changed = true,
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => return false,
            }
        }
        if !changed && content_digest(manifest) == before {
            return true;
        }
        tracing::debug!("configuration files still changing: waiting for them to settle");
    }
}

/// The manifest's content hash; `None` when it cannot be read.
fn content_digest(manifest: &Path) -> Option<[u8; 32]> {
    use sha2::Digest;
    let bytes = config::files::read_limited(manifest, config::bounds::MANIFEST_FILE).ok()?;
    Some(sha2::Sha256::digest(&bytes).into())
}
