//! A gateway run from the fleet's etcd: the first revision loaded (from
//! etcd, or from the disk copy when etcd is away), then the manifest
//! watched. Each new revision is parsed, its missing components fetched
//! into the state folder (by digest: one already there is neither fetched
//! nor, thanks to the engine's cache, compiled again), and handed to the
//! reloader as the [`FleetSource`]'s next candidate: the same complete,
//! validate, compile, swap as a file reload. A revision refused at any step
//! leaves the last good chain serving and is reported in the fleet status.
//!
//! The first revision is asked of every member at once, and the watch
//! starts on the first to answer. The watch is on one member at a time, and
//! so are the reads of the revisions it hands over (the member that just
//! answered). When etcd goes away the watch fails, and so does it when the
//! member watched loses its leader (cut off from its quorum: the watch
//! requires a leader, as kube's does, rather than staying open and silent
//! while the others go on without it) or stops answering (the connection's
//! keep-alive gives up on it); the gateway reports the watch down, serves
//! on, tries again through the next endpoint of its URL with a growing
//! pause ([`BACKOFF`]), and resumes the watch just after the last revision
//! it applied or refused, so no revision is missed and none is applied
//! twice. A revision whose components could not be fetched (etcd went away
//! meanwhile, the state folder could not be written) is neither: the watch
//! fails there, and resumes from that revision.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{EventType, WatchOptions};
use tokio::sync::watch as channel;

use super::disk::StateDir;
use super::status::{AppliedFrom, GatewayStatus, Refusal, WatchDown, WatchStatus};
use super::store::{Store, StoredManifest};
use super::{FleetError, Revision, Target};
use crate::config::source::{ManifestSource, with_listen};
use crate::config::{self, Config, ConfigError};
use crate::health::Check;
use crate::metrics::metrics;
use crate::reload_trigger::{ReloadOutcome, ReloadTrigger};

/// The pause before watching again after etcd failed, doubled each time.
const BACKOFF: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(100)..=Duration::from_secs(5);

/// How `run --config etcd://...` was asked to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The fleet's etcd.
    pub target: Target,
    /// `--state-dir`: where the last good manifest and components are kept.
    pub state_dir: PathBuf,
    /// `run --listen`: the address that replaces `[listen] address`.
    pub listen: Option<SocketAddr>,
}

/// A manifest revision: what the reloader loads.
#[derive(Debug, Clone)]
struct Candidate {
    revision: Revision,
    /// Where its problems are reported and its relative paths resolve.
    path: PathBuf,
    text: String,
}

/// The fleet's revision as a manifest source: the reloader loads the
/// candidate the watch put in place.
pub struct FleetSource {
    listen: Option<SocketAddr>,
    candidate: Mutex<Candidate>,
    /// Moves each time the candidate is replaced.
    stamp: AtomicU64,
}

impl ManifestSource for FleetSource {
    fn load(&self) -> Result<Config, ConfigError> {
        let candidate = self
            .candidate
            .lock()
            .map(|candidate| candidate.clone())
            .map_err(|_| ConfigError::Read {
                path: PathBuf::from("etcd"),
                source: std::io::Error::other("the candidate revision is poisoned"),
            })?;
        config::parse(&candidate.path, &candidate.text)
            .map(|config| with_listen(config, self.listen))
    }

    fn watched_file(&self) -> Option<&std::path::Path> {
        None
    }

    /// The candidate changes only by [`FleetSource::set`]: a SIGHUP or a
    /// `POST /debug/reload` that comes while a revision is applied is
    /// answered by that apply (it builds the revision then in force), and
    /// the revision is swapped in once.
    fn stamp(&self) -> Option<u64> {
        Some(self.stamp.load(Ordering::Acquire))
    }
}

impl FleetSource {
    fn set(&self, candidate: Candidate) {
        if let Ok(mut current) = self.candidate.lock() {
            *current = candidate;
            self.stamp.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// One gateway of the fleet: its store, its state folder, what it runs.
pub struct Member {
    /// Every endpoint, balanced: the status reports.
    store: Store,
    target: Target,
    /// The endpoint the watch is on: its index in `target.endpoints`.
    on: usize,
    /// The manifest's watch and the reads of what it hands over: a client
    /// of that one member, which requires a leader.
    watcher: Store,
    state: StateDir,
    url: String,
    source: Arc<FleetSource>,
    /// The revision in force and its text (to fall back to).
    applied: Candidate,
    status: channel::Sender<GatewayStatus>,
}

impl Member {
    /// Loads the first revision: etcd's current one, or, when etcd cannot
    /// be reached or that revision is refused, the disk copy. Returns the
    /// member and the configuration to start with.
    pub async fn join(options: &Options) -> Result<(Member, Config), FleetError> {
        let state = StateDir::open(&options.state_dir)?;
        let store = Store::open(&options.target).await?;
        let url = options.target.url();
        let (on, watcher, read) = match first_answer(&options.target).await {
            Ok(FirstAnswer {
                on,
                watcher,
                manifest,
            }) => (on, watcher, Ok(manifest)),
            Err(error) => {
                let endpoint = options.target.endpoints.first().map_or("", String::as_str);
                (
                    0,
                    Store::watching(&options.target, endpoint).await?,
                    Err(error),
                )
            }
        };
        let endpoint = options
            .target
            .endpoints
            .get(on)
            .cloned()
            .unwrap_or_default();
        let current = match read {
            Ok(Some(manifest)) => match fetch(&watcher, &state, &manifest).await {
                Ok(candidate) => Ok(Some(Ok(candidate))),
                Err(Unfetched::Refused(problems)) => Ok(Some(Err(Refusal {
                    revision: manifest.revision,
                    error: problems,
                }))),
                // Not the revision's fault: it is fetched again once the
                // watch is back, as when etcd was away from the start.
                Err(Unfetched::Failed(error)) => Err(error),
            },
            Ok(None) => Ok(None),
            Err(error) => Err(error),
        };
        let (first, from, refused) = match current {
            Ok(Some(Ok(candidate))) => (candidate, AppliedFrom::Etcd, None),
            Ok(Some(Err(refusal))) => {
                tracing::error!(
                    revision = refusal.revision,
                    "the fleet's revision is refused, starting from the disk copy:\n{}",
                    refusal.error
                );
                (from_disk(&state, &url)?, AppliedFrom::Disk, Some(refusal))
            }
            Ok(None) => {
                return Err(FleetError::Missing(format!(
                    "{url}/manifest (push one with `wasmgate push --to {url}`)"
                )));
            }
            Err(error) => {
                let candidate = from_disk(&state, &url)?;
                tracing::warn!(%error, revision = candidate.revision, "etcd cannot be reached: starting from the disk copy of the last good revision");
                (candidate, AppliedFrom::Disk, None)
            }
        };
        let source = Arc::new(FleetSource {
            listen: options.listen,
            candidate: Mutex::new(first.clone()),
            stamp: AtomicU64::new(0),
        });
        let config = match source.load() {
            Ok(config) => config,
            Err(error) => return Err(FleetError::Disk(error.to_string())),
        };
        let status = GatewayStatus {
            gateway: String::new(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            started_at: super::status::unix_now(),
            listen: String::new(),
            applied: first.revision,
            applied_from: from,
            refused,
            watch: WatchStatus {
                endpoint,
                down: None,
            },
        };
        let member = Member {
            store,
            target: options.target.clone(),
            on,
            watcher,
            state,
            url,
            source,
            applied: first,
            status: channel::Sender::new(status),
        };
        Ok((member, config))
    }

    /// What the reloader loads from.
    pub fn source(&self) -> Arc<dyn ManifestSource> {
        self.source.clone()
    }

    /// `config-revision` for `/readyz?verbose`: the revision serving and
    /// where it came from, and the last one refused.
    pub fn readyz_check(&self) -> Check {
        let status = self.status.subscribe();
        let url = self.url.clone();
        Check::reporting("config-revision", move || {
            let status = status.borrow();
            let from = match status.applied_from {
                AppliedFrom::Etcd => url.clone(),
                AppliedFrom::Disk => "the disk copy (etcd was away at start)".to_owned(),
            };
            let mut detail = format!("revision {} from {from}", status.applied);
            if let Some(refused) = &status.refused {
                detail.push_str(&format!("; revision {} refused", refused.revision));
            }
            match &status.watch.down {
                None => detail.push_str(&format!("; watching {}", status.watch.endpoint)),
                Some(down) => detail.push_str(&format!("; the watch is down {down}")),
            }
            Ok(detail)
        })
    }

    /// Once the gateway listens: keeps the disk copy of the first revision,
    /// reports this gateway's status as `gateway` on `listen`, and follows
    /// the manifest until the returned task is aborted or the status
    /// reporter is told to stop (by dropping the returned sender).
    pub fn follow(self, gateway: String, listen: SocketAddr, trigger: ReloadTrigger) -> Following {
        self.status.send_modify(|status| {
            status.gateway = gateway;
            status.listen = listen.to_string();
        });
        metrics().config_revision.set(self.applied.revision);
        if self.status.borrow().applied_from == AppliedFrom::Etcd {
            self.keep_on_disk();
        }
        let reporting = tokio::spawn(super::status::report(
            self.store.clone(),
            self.status.subscribe(),
        ));
        let watching = tokio::spawn(async move { self.watch(trigger).await });
        Following {
            watching,
            reporting,
        }
    }

    fn keep_on_disk(&self) {
        if let Err(error) = self
            .state
            .keep_manifest(self.applied.revision, &self.applied.text)
        {
            tracing::warn!(%error, "cannot keep the disk copy of the revision in force");
        }
    }

    /// Watches the manifest from just after the last revision seen, again
    /// after every failure through the next endpoint, forever.
    async fn watch(mut self, trigger: ReloadTrigger) {
        let mut seen = self.applied.revision.max(
            self.status
                .borrow()
                .refused
                .as_ref()
                .map_or(0, |r| r.revision),
        );
        let mut pause = *BACKOFF.start();
        loop {
            match self.watch_from(&mut seen, &trigger).await {
                Ok(()) => pause = *BACKOFF.start(),
                Err(error) => {
                    if self.status.borrow().watch.down.is_none() {
                        // It watched until now: the pauses start over.
                        pause = *BACKOFF.start();
                    }
                    let endpoint = self.status.borrow().watch.endpoint.clone();
                    tracing::warn!(%error, endpoint, retry_in_ms = pause.as_millis() as u64, "the fleet's etcd is away: serving on the last good chain");
                    self.watch_down(format!("{endpoint}: {error}"));
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(*BACKOFF.end());
                    self.next_endpoint().await;
                }
            }
        }
    }

    /// One watch: returns when it ends (etcd compacted past `seen`: the
    /// current revision is applied first, and `seen` moves up to the
    /// compaction), fails when etcd does, or when a revision's components
    /// cannot be fetched (`seen` stays before it: the next watch brings it
    /// again).
    async fn watch_from(
        &mut self,
        seen: &mut Revision,
        trigger: &ReloadTrigger,
    ) -> Result<(), FleetError> {
        let key = self.store.manifest_key();
        let options = WatchOptions::new().with_start_revision(*seen + 1);
        let mut stream = self
            .watcher
            .client()
            .watch(key.as_str(), Some(options))
            .await?;
        if self.status.borrow().applied_from == AppliedFrom::Disk {
            // Revisions pushed since the disk copy arrive through this watch.
            tracing::info!(
                revision = *seen,
                "etcd answers again: following the fleet's manifest"
            );
            self.status
                .send_modify(|status| status.applied_from = AppliedFrom::Etcd);
        }
        while let Some(response) = stream.message().await? {
            // The member answered (its first answer says the watch is
            // created): the watch is up.
            self.watch_up();
            if response.canceled() {
                if response.compact_revision() > 0 {
                    if let Some(current) = self
                        .watcher
                        .manifest()
                        .await?
                        .filter(|m| m.revision > *seen)
                    {
                        let revision = current.revision;
                        self.apply(current, trigger).await?;
                        *seen = revision;
                    }
                    // The next watch starts where etcd's history does now:
                    // from `seen + 1` it would be cancelled again, at once,
                    // for as long as the manifest stays as it is.
                    *seen = (*seen).max(response.compact_revision() - 1);
                    return Ok(());
                }
                return Err(FleetError::Missing(format!(
                    "the watch of {key}: {}",
                    response.cancel_reason()
                )));
            }
            // A response's events are in revision order; the last put is
            // what is in force (earlier ones in the same response were
            // replaced within one etcd batch).
            let last = response
                .events()
                .iter()
                .filter(|event| event.event_type() == EventType::Put)
                .filter_map(|event| event.kv())
                .next_back();
            if response
                .events()
                .iter()
                .any(|event| event.event_type() == EventType::Delete)
            {
                tracing::warn!(
                    "the fleet's manifest was deleted from etcd: serving on the last good chain"
                );
            }
            if let Some(kv) = last {
                let manifest = StoredManifest {
                    revision: kv.mod_revision(),
                    text: String::from_utf8_lossy(kv.value()).into_owned(),
                };
                self.apply(manifest, trigger).await?;
                *seen = kv.mod_revision();
            }
        }
        Ok(())
    }

    /// Applies one revision, or refuses it and keeps the last good one;
    /// fails, keeping the last good one, when its components cannot be
    /// fetched.
    async fn apply(
        &mut self,
        manifest: StoredManifest,
        trigger: &ReloadTrigger,
    ) -> Result<(), FleetError> {
        let revision = manifest.revision;
        let candidate = match fetch(&self.watcher, &self.state, &manifest).await {
            Ok(candidate) => candidate,
            Err(Unfetched::Refused(problems)) => {
                self.refuse(revision, problems);
                return Ok(());
            }
            Err(Unfetched::Failed(error)) => {
                tracing::warn!(revision, %error, "cannot fetch the components of the fleet's revision: it is fetched again once etcd answers");
                return Err(error);
            }
        };
        self.source.set(candidate.clone());
        match trigger.reload().await {
            Some(ReloadOutcome::Swapped { .. }) => {
                tracing::info!(revision, "the fleet's revision is in force");
                self.applied = candidate;
                self.keep_on_disk();
                metrics().config_revision.set(revision);
                self.status.send_modify(|status| {
                    status.applied = revision;
                    status.applied_from = AppliedFrom::Etcd;
                    status.refused = None;
                });
            }
            Some(ReloadOutcome::Rejected(problems)) => self.refuse(revision, problems),
            None => self.refuse(revision, "the reloader is not running".to_owned()),
        }
        Ok(())
    }

    /// The watch failed: down since its first failure, with its last error
    /// (`HOST:PORT: why`).
    fn watch_down(&self, error: String) {
        self.status
            .send_if_modified(|status| match &mut status.watch.down {
                Some(down) if down.error == error => false,
                Some(down) => {
                    down.error = error;
                    true
                }
                None => {
                    let since = super::status::unix_now();
                    metrics()
                        .config_watch_down_since
                        .set(i64::try_from(since).unwrap_or(i64::MAX));
                    status.watch.down = Some(WatchDown { since, error });
                    true
                }
            });
    }

    /// The watch is established (again).
    fn watch_up(&self) {
        let endpoint = self.status.borrow().watch.endpoint.clone();
        if self
            .status
            .send_if_modified(|status| status.watch.down.take().is_some())
        {
            tracing::info!(endpoint, "the fleet's manifest is watched again");
        }
        metrics().config_watch_down_since.set(0);
    }

    /// The next watch goes through the next endpoint (the same one when the
    /// URL names one).
    async fn next_endpoint(&mut self) {
        let endpoints = &self.target.endpoints;
        if endpoints.len() < 2 {
            return;
        }
        let next = (self.on + 1) % endpoints.len();
        let Some(endpoint) = endpoints.get(next).cloned() else {
            return;
        };
        match Store::watching(&self.target, &endpoint).await {
            Ok(watcher) => {
                self.on = next;
                self.watcher = watcher;
                self.status
                    .send_modify(|status| status.watch.endpoint = endpoint);
            }
            Err(error) => {
                tracing::warn!(%error, endpoint, "cannot make a client of this etcd member");
            }
        }
    }

    fn refuse(&mut self, revision: Revision, error: String) {
        tracing::error!(
            revision,
            "the fleet's revision is refused: the last good chain serves on:\n{error}"
        );
        self.source.set(self.applied.clone());
        self.status
            .send_modify(|status| status.refused = Some(Refusal { revision, error }));
    }
}

/// The tasks a member runs once its gateway listens.
pub struct Following {
    watching: tokio::task::JoinHandle<()>,
    reporting: tokio::task::JoinHandle<()>,
}

impl Following {
    /// Stops watching, and takes this gateway's status out of the fleet
    /// (its lease revoked), waiting for that at most `limit`.
    pub async fn stop(self, limit: Duration) {
        // The watch task owns the member and with it the status's sender:
        // aborting it drops the sender, which tells the reporter to stop.
        self.watching.abort();
        let _ = self.watching.await;
        let _ = tokio::time::timeout(limit, self.reporting).await;
    }
}

/// Why a revision could not be made a candidate.
enum Unfetched {
    /// The revision itself: it does not parse or validate, or names a
    /// component etcd does not hold whole. Refused for good.
    Refused(String),
    /// etcd or the state folder failed on the way: the revision is fetched
    /// again.
    Failed(FleetError),
}

/// The first member to answer the first read, and its answer.
struct FirstAnswer {
    /// Its index in the URL's endpoints: the watch starts there.
    on: usize,
    /// A client of that member (requiring a leader, as the watch's).
    watcher: Store,
    manifest: Option<StoredManifest>,
}

/// Asks every member of the URL for the manifest at once and takes the
/// first answer; fails only when every member failed (with the last
/// failure). A member that takes the connection and never answers (frozen,
/// or cut off) is waited for only until another answers, where a read sent
/// to one member picked at random waited out its timeout and, with no disk
/// copy kept, failed the start. Each client requires a leader, so a member
/// cut off from its quorum fails at once rather than holding the read.
async fn first_answer(target: &Target) -> Result<FirstAnswer, FleetError> {
    if target.endpoints.is_empty() {
        // `select_ok` of nothing would panic; a parsed URL names one at least.
        return Err(FleetError::Url(target.url()));
    }
    let reads = target.endpoints.iter().enumerate().map(|(on, endpoint)| {
        Box::pin(async move {
            let watcher = Store::watching(target, endpoint).await?;
            let manifest = watcher.manifest().await?;
            Ok::<_, FleetError>(FirstAnswer {
                on,
                watcher,
                manifest,
            })
        })
    });
    futures_util::future::select_ok(reads)
        .await
        .map(|(answer, _still_asking)| answer)
}

/// The candidate for `manifest`, its components fetched into the state
/// folder; or why it is not.
async fn fetch(
    store: &Store,
    state: &StateDir,
    manifest: &StoredManifest,
) -> Result<Candidate, Unfetched> {
    let candidate = Candidate {
        revision: manifest.revision,
        path: state.manifest_path(manifest.revision),
        text: manifest.text.clone(),
    };
    let config = config::parse(&candidate.path, &candidate.text)
        .map_err(|error| Unfetched::Refused(error.to_string()))?;
    for filter in config.stages.all_filters() {
        let Some(digest) = filter.sha256 else {
            continue;
        };
        let file = state.component_path(&digest);
        if filter.component != file || file.is_file() {
            continue;
        }
        let bytes = store
            .component(&digest)
            .await
            .map_err(|error| match error {
                FleetError::Missing(_) | FleetError::Damaged { .. } => {
                    Unfetched::Refused(format!("filter {:?}: {error}", filter.name.as_str()))
                }
                error => Unfetched::Failed(error),
            })?;
        state
            .keep_component(&digest, &bytes)
            .map_err(Unfetched::Failed)?;
    }
    Ok(candidate)
}

/// The last good revision kept on disk.
fn from_disk(state: &StateDir, url: &str) -> Result<Candidate, FleetError> {
    let last = state.last_good().ok_or_else(|| {
        FleetError::Disk(format!(
            "{url} cannot be used and no disk copy of a good revision is kept"
        ))
    })?;
    let text = std::fs::read_to_string(&last.manifest)
        .map_err(|error| FleetError::Disk(format!("{}: {error}", last.manifest.display())))?;
    Ok(Candidate {
        revision: last.revision,
        path: last.manifest,
        text,
    })
}
