//! The process's one wasmtime `Engine`, tuned for a fresh instance per
//! request: the pooling allocator with pool memory kept resident, epoch
//! interruption driven by a ticker thread, no component-model concurrency.
//! Also the compiled-component cache: components are compiled once per
//! content hash, kept in memory for reloads and on disk for restarts, the
//! disk's share bounded by [`DISK_CACHE_BYTES`] (least recently used out).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::capacity::StoreData;
use super::epoch::EpochTicker;
use super::state::{FilterState, MAX_CORE_INSTANCES, MAX_MEMORIES, MAX_TABLE_ELEMENTS, MAX_TABLES};
use crate::config::bounds::{COMPILED_COMPONENT_FILE, COMPONENT_FILE};
use crate::config::files::read_limited;

/// Pool sizing: the most component instances alive at once, in every
/// configuration together; [`WasmHost::slots`] hands them out, so a call
/// waits for one rather than fail at wasmtime's limit. `[limits]
/// filter_instances` is at most this.
const POOL_COMPONENT_INSTANCES: u32 = crate::config::MAX_FILTER_INSTANCES as u32;
/// Freed pool slots kept warm for a module other than their last.
const MAX_UNUSED_WARM_SLOTS: u32 = 16;
const POOL_MAX_MEMORY: usize = crate::config::stages::MAX_FILTER_MEMORY as usize;

/// The most the compiled-component cache keeps on disk. Every component
/// ever loaded leaves an entry (a filter rebuilt is a new one), so past
/// this the entries used longest ago are removed as a new one is written.
const DISK_CACHE_BYTES: u64 = 2 << 30;

/// A disk cache entry ends in this many bytes: the SHA-256 of the compiled
/// code before them ([`seal`], [`unseal`]).
const SEAL_BYTES: usize = 32;

/// Why a component could not be made ready.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} has sha256 {actual}, but the manifest pins {expected}", path.display())]
    DigestMismatch {
        path: PathBuf,
        expected: String,
        actual: String,
    },
    #[error("{} is not a valid component: {message}", path.display())]
    Compile { path: PathBuf, message: String },
    #[error("{} does not fit the {world} world: {message}", path.display())]
    World {
        path: PathBuf,
        world: &'static str,
        message: String,
    },
    #[error("{} holds {count} {what}, past a filter's maximum of {max}", path.display())]
    OverAFiltersShare {
        path: PathBuf,
        count: u32,
        what: &'static str,
        max: u32,
    },
    #[error("the WebAssembly engine cannot start: {0}")]
    Engine(String),
}

/// The engine, the linker every filter is instantiated with, the engine
/// pool's instance slots, and the compiled-component cache.
pub struct WasmHost {
    /// The wasmtime engine every filter is compiled for.
    pub engine: Engine,
    /// Advances the engine's epoch while filters run.
    pub(crate) ticker: Arc<EpochTicker>,
    /// The linker with the host's imports (the filter interfaces and WASI).
    pub linker: Linker<StoreData>,
    /// One permit per component instance the pool holds, taken before an
    /// instance is made and given back after it is dropped.
    pub slots: Arc<Semaphore>,
    compiled: Mutex<HashMap<[u8; 32], Component>>,
    disk_cache: Option<PathBuf>,
    stats: Mutex<CacheStats>,
}

/// How components were obtained since start: observable proof that a reload
/// did not recompile an unchanged filter.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CacheStats {
    pub compiled: u64,
    pub from_memory: u64,
    pub from_disk: u64,
}

impl WasmHost {
    /// The process-wide host, created on first use.
    pub fn shared() -> Result<&'static WasmHost, LoadError> {
        static HOST: OnceLock<Result<WasmHost, String>> = OnceLock::new();
        HOST.get_or_init(|| WasmHost::new(default_disk_cache()).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|message| LoadError::Engine(message.clone()))
    }

    fn new(disk_cache: Option<PathBuf>) -> wasmtime::Result<WasmHost> {
        let engine = match Engine::new(&engine_config(true)) {
            Ok(engine) => engine,
            Err(error) => {
                // A host that cannot reserve the pool (a tight address-space
                // limit) still runs filters, allocating on demand.
                tracing::warn!(%error, "pooling allocator unavailable; allocating instances on demand");
                Engine::new(&engine_config(false))?
            }
        };
        let ticker = EpochTicker::start(&engine);
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        link_contract(&mut linker)?;
        Ok(WasmHost {
            engine,
            ticker,
            linker,
            slots: Arc::new(Semaphore::new(POOL_COMPONENT_INSTANCES as usize)),
            compiled: Mutex::default(),
            disk_cache,
            stats: Mutex::default(),
        })
    }

    /// How many components were compiled, read from the disk cache and found in memory, since start.
    pub fn cache_stats(&self) -> CacheStats {
        self.stats.lock().map(|s| *s).unwrap_or_default()
    }

    /// The compiled component for the file at `path`, checked against
    /// `pinned` first. Compiles only what neither cache holds.
    pub fn component(
        &self,
        path: &Path,
        pinned: Option<&[u8; 32]>,
    ) -> Result<Component, LoadError> {
        // Only a regular file, and no larger than a component may be: a FIFO
        // would hang the load, `/dev/zero` would fill the memory.
        let bytes = read_limited(path, COMPONENT_FILE).map_err(|error| LoadError::Read {
            path: path.to_owned(),
            source: error.into(),
        })?;
        let digest: [u8; 32] = Sha256::digest(&bytes).into();
        if let Some(expected) = pinned.filter(|expected| **expected != digest) {
            return Err(LoadError::DigestMismatch {
                path: path.to_owned(),
                expected: hex::encode(expected),
                actual: hex::encode(digest),
            });
        }
        if let Some(component) = self
            .compiled
            .lock()
            .ok()
            .and_then(|c| c.get(&digest).cloned())
        {
            self.count(|s| s.from_memory += 1, "memory");
            return Ok(component);
        }
        let component = match self.load_from_disk(&digest) {
            Some(component) => {
                self.count(|s| s.from_disk += 1, "disk");
                tracing::debug!(component = %path.display(), "loaded compiled component from the disk cache");
                component
            }
            None => {
                let started = std::time::Instant::now();
                let component = self.compile(path, &bytes, &digest)?;
                self.count(|s| s.compiled += 1, "compiled");
                tracing::info!(component = %path.display(), elapsed_ms = started.elapsed().as_millis() as u64, "compiled component");
                component
            }
        };
        within_a_filters_share(path, &component)?;
        if let Ok(mut compiled) = self.compiled.lock() {
            compiled.insert(digest, component.clone());
        }
        Ok(component)
    }

    fn count(&self, update: impl FnOnce(&mut CacheStats), source: &str) {
        if let Ok(mut stats) = self.stats.lock() {
            update(&mut stats);
        }
        crate::metrics::metrics()
            .components
            .get_or_create(&crate::metrics::Source {
                source: source.to_owned(),
            })
            .inc();
    }

    fn compile(
        &self,
        path: &Path,
        bytes: &[u8],
        digest: &[u8; 32],
    ) -> Result<Component, LoadError> {
        let compile_error = |error: wasmtime::Error| LoadError::Compile {
            path: path.to_owned(),
            message: format!("{error:#}"),
        };
        let serialized = self
            .engine
            .precompile_component(bytes)
            .map_err(compile_error)?;
        if let Some(file) = self.disk_path(digest) {
            // Written beside, then renamed: a concurrent reader never sees half a file.
            let partial = file.with_extension(format!("partial-{}", std::process::id()));
            let written = file
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|()| std::fs::write(&partial, seal(&serialized)));
            match written.and_then(|()| std::fs::rename(&partial, &file)) {
                Ok(()) => {
                    if let Some(dir) = file.parent() {
                        prune_disk_cache(dir, DISK_CACHE_BYTES);
                    }
                }
                Err(error) => {
                    tracing::warn!(file = %file.display(), %error, "cannot write the compiled-component cache");
                }
            }
        }
        // SAFETY: these bytes were produced by `precompile_component` of this
        // very engine a moment ago.
        unsafe { Component::deserialize(&self.engine, &serialized) }.map_err(compile_error)
    }

    /// The entry of the disk cache for `digest`, when there is one and it
    /// is whole: read into memory (a file mapped could be cut or changed
    /// under the running code) and checked against its seal first, so that
    /// an entry changed or cut short since it was written (a disk fault, a
    /// crash before the data reached the disk, another program) is compiled
    /// again rather than run. Wasmtime checks only an artifact's header: run
    /// as code, a changed artifact does whatever its bytes say.
    fn load_from_disk(&self, digest: &[u8; 32]) -> Option<Component> {
        let file = self.disk_path(digest)?;
        if !file.exists() {
            return None;
        }
        let unusable = |error: &dyn std::fmt::Display| {
            tracing::warn!(file = %file.display(), %error, "ignoring an unusable compiled-component cache entry");
            None
        };
        let entry = match read_limited(&file, COMPILED_COMPONENT_FILE) {
            Ok(entry) => entry,
            Err(error) => return unusable(&error),
        };
        let Some(artifact) = unseal(&entry) else {
            return unusable(
                &"its digest does not match: changed or cut short since it was written",
            );
        };
        // SAFETY: these bytes are what `precompile_component` of an engine
        // with this compatibility hash (the file's name) produced: their
        // SHA-256, written after them, matches. Wasmtime refuses artifacts
        // of another version or configuration.
        match unsafe { Component::deserialize(&self.engine, artifact) } {
            Ok(component) => {
                mark_used(&file);
                Some(component)
            }
            Err(error) => unusable(&error),
        }
    }

    fn disk_path(&self, digest: &[u8; 32]) -> Option<PathBuf> {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.engine
            .precompile_compatibility_hash()
            .hash(&mut hasher);
        let name = format!("{}-{:016x}.cwasm", hex::encode(digest), hasher.finish());
        self.disk_cache.as_ref().map(|dir| dir.join(name))
    }
}

/// Refuses a component that holds more linear memories or tables than a
/// filter may, on either engine, as it is loaded. The pool refuses it
/// first, as it deserializes the component (with the core-instance count,
/// which wasmtime's API does not give); the engine a host falls back to
/// without the pool would refuse it only at its first call, when its store
/// limits stop the instantiation: a manifest that `check` passes there and
/// a chain whose every call fails closed.
fn within_a_filters_share(path: &Path, component: &Component) -> Result<(), LoadError> {
    let Some(needs) = component.resources_required() else {
        // It instantiates a core module it imports: the store's limits
        // count what it makes, as it makes it.
        return Ok(());
    };
    let over = |count: u32, what: &'static str, max: u32| {
        (count > max).then(|| LoadError::OverAFiltersShare {
            path: path.to_owned(),
            count,
            what,
            max,
        })
    };
    match over(needs.num_memories, "Wasm linear memories", MAX_MEMORIES)
        .or_else(|| over(needs.num_tables, "tables", MAX_TABLES))
    {
        Some(refused) => Err(refused),
        None => Ok(()),
    }
}

fn engine_config(pooling: bool) -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    // Filters are called one call at a time; the component-model async
    // machinery would only add set-up cost to every store.
    config.concurrency_support(false);
    config.cranelift_opt_level(wasmtime::OptLevel::Speed);
    // `WASMGATE_PROFILER=perfmap`: filters' compiled code is named in
    // /tmp/perf-<pid>.map, so perf (and anything reading perf maps) shows
    // which filter function the time goes to.
    if std::env::var_os("WASMGATE_PROFILER").is_some_and(|profiler| profiler == "perfmap") {
        config.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    if pooling {
        let mut pool = PoolingAllocationConfig::default();
        // Each component instance holds at most its share of the pool's
        // memories, tables and core instances, checked when a component is
        // loaded: one that needs more is refused then, rather than take the
        // slots of other filters' instances, whose calls would find the pool
        // empty (the `429`). A memory slot reserves `max_memory_size` of
        // address space, a table slot `table_elements` pointers; a core
        // instance is only counted.
        pool.total_component_instances(POOL_COMPONENT_INSTANCES)
            .max_core_instances_per_component(MAX_CORE_INSTANCES)
            .max_memories_per_component(MAX_MEMORIES)
            .max_tables_per_component(MAX_TABLES)
            .total_memories(POOL_COMPONENT_INSTANCES * MAX_MEMORIES)
            .total_tables(POOL_COMPONENT_INSTANCES * MAX_TABLES)
            .total_core_instances(POOL_COMPONENT_INSTANCES * MAX_CORE_INSTANCES)
            .max_memory_size(POOL_MAX_MEMORY)
            // Resetting a slot by zeroing the pages a guest touched, not by
            // unmapping them, is what makes a fresh instance per request cheap.
            .linear_memory_keep_resident(4 << 20)
            // A slot freed keeps up to that much resident; the pool uses a
            // fresh slot rather than one another module used only while
            // fewer than this many such slots sit unused. So what stays
            // resident after a burst is bounded by the burst's concurrency
            // (itself bounded by `[limits] filter_memory`) plus this many
            // slots, not by every slot the pool ever handed out (the default
            // allows 100 unused, 400 MiB).
            .max_unused_warm_slots(MAX_UNUSED_WARM_SLOTS)
            .table_elements(MAX_TABLE_ELEMENTS)
            .table_keep_resident(64 << 10)
            .pagemap_scan(Enabled::Auto);
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    config
}

/// A disk cache entry: the compiled code `artifact`, then its SHA-256.
fn seal(artifact: &[u8]) -> Vec<u8> {
    let mut entry = Vec::with_capacity(artifact.len() + SEAL_BYTES);
    entry.extend_from_slice(artifact);
    entry.extend_from_slice(&Sha256::digest(artifact));
    entry
}

/// The compiled code of a disk cache `entry`, when its SHA-256 matches.
fn unseal(entry: &[u8]) -> Option<&[u8]> {
    let (artifact, digest) = entry.split_at(entry.len().checked_sub(SEAL_BYTES)?);
    (Sha256::digest(artifact).as_slice() == digest).then_some(artifact)
}

/// Marks a disk cache entry as used now (its modification time), so the
/// pruning keeps it over entries no configuration has loaded since.
fn mark_used(file: &Path) {
    let touched = std::fs::File::options()
        .write(true)
        .open(file)
        .and_then(|entry| entry.set_modified(std::time::SystemTime::now()));
    if let Err(error) = touched {
        tracing::debug!(file = %file.display(), %error, "cannot mark a compiled-component cache entry used");
    }
}

/// Removes the entries of the disk cache `dir` used longest ago until the
/// rest take at most `bound` bytes. Best effort: what cannot be read or
/// removed is left, and logged.
fn prune_disk_cache(dir: &Path, bound: u64) {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) => {
            tracing::debug!(dir = %dir.display(), %error, "cannot list the compiled-component cache");
            return;
        }
    };
    let mut kept: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter(|entry| entry.path().extension().is_some_and(|ext| ext == "cwasm"))
        .filter_map(|entry| {
            let metadata = entry.metadata().ok()?;
            Some((metadata.modified().ok()?, metadata.len(), entry.path()))
        })
        .collect();
    // Newest first: the entries that fit are the ones used last.
    kept.sort_by_key(|(modified, _, _)| std::cmp::Reverse(*modified));
    let mut total = 0u64;
    for (_, len, path) in kept {
        total = total.saturating_add(len);
        if total <= bound {
            continue;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => {
                tracing::debug!(file = %path.display(), "removed a compiled-component cache entry used longest ago")
            }
            Err(error) => {
                tracing::debug!(file = %path.display(), %error, "cannot remove a compiled-component cache entry")
            }
        }
    }
}

/// `$XDG_CACHE_HOME/wasmgate/compiled`, else `~/.cache/wasmgate/compiled`.
fn default_disk_cache() -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
        .map(|cache| cache.join("wasmgate").join("compiled"))
}

impl std::fmt::Debug for WasmHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmHost")
            .field("cache", &self.cache_stats())
            .finish_non_exhaustive()
    }
}

/// The host's imports of every contract version: 0.4.0's types, host, sink
/// and cache (the serialised auditor's world imports the same), 0.3.0's and
/// 0.2.0's (the same functions under the older names), and 0.1.0's host and
/// sink (its types are 0.2.0's).
fn link_contract(linker: &mut Linker<StoreData>) -> wasmtime::Result<()> {
    fn state(data: &mut StoreData) -> &mut FilterState {
        &mut data.state
    }
    use super::bindings::{auditor, cache, v0_1, v0_2, v0_3};
    auditor::AuditorFilter::add_to_linker::<_, HasSelf<FilterState>>(linker, state)?;
    cache::add_to_linker::<_, HasSelf<FilterState>>(linker, state)?;
    v0_3::auditor::AuditorFilter::add_to_linker::<_, HasSelf<FilterState>>(linker, state)?;
    v0_3::cache::add_to_linker::<_, HasSelf<FilterState>>(linker, state)?;
    v0_2::auditor::AuditorFilter::add_to_linker::<_, HasSelf<FilterState>>(linker, state)?;
    v0_2::cache::add_to_linker::<_, HasSelf<FilterState>>(linker, state)?;
    v0_1::auditor::AuditorFilter::add_to_linker::<_, HasSelf<FilterState>>(linker, state)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;

    /// An entry of `len` bytes last used `age` ago.
    fn entry(dir: &Path, name: &str, len: usize, age: Duration) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, vec![0u8; len]).unwrap();
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(SystemTime::now() - age).unwrap();
        path
    }

    #[test]
    fn pruning_keeps_the_entries_used_last_within_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let oldest = entry(dir.path(), "a.cwasm", 400, Duration::from_secs(300));
        let old = entry(dir.path(), "b.cwasm", 400, Duration::from_secs(200));
        let recent = entry(dir.path(), "c.cwasm", 400, Duration::from_secs(100));
        let newest = entry(dir.path(), "d.cwasm", 400, Duration::ZERO);
        let other = entry(dir.path(), "notes.txt", 4000, Duration::from_secs(900));
        prune_disk_cache(dir.path(), 1000);
        assert!(newest.exists() && recent.exists(), "the two used last fit");
        assert!(!old.exists() && !oldest.exists(), "the rest are removed");
        assert!(other.exists(), "only cache entries are touched");
    }

    #[test]
    fn an_entry_is_run_only_as_it_was_sealed() {
        let artifact = b"compiled code".to_vec();
        let entry = seal(&artifact);
        assert_eq!(unseal(&entry), Some(&artifact[..]));
        let mut changed = entry.clone();
        changed[0] ^= 1;
        assert_eq!(unseal(&changed), None, "a byte changed");
        assert_eq!(unseal(&entry[..entry.len() - 1]), None, "cut short");
        assert_eq!(
            unseal(&entry[..SEAL_BYTES - 1]),
            None,
            "shorter than a seal"
        );
        assert_eq!(unseal(&artifact), None, "never sealed");
    }

    #[test]
    fn an_entry_loaded_is_marked_used() {
        let dir = tempfile::tempdir().unwrap();
        let loaded = entry(dir.path(), "a.cwasm", 400, Duration::from_secs(300));
        let unused = entry(dir.path(), "b.cwasm", 400, Duration::from_secs(100));
        mark_used(&loaded);
        prune_disk_cache(dir.path(), 500);
        assert!(loaded.exists(), "the entry loaded last is kept");
        assert!(!unused.exists());
    }
}
