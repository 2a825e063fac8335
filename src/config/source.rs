//! Where a manifest comes from: the seam between the reloader and the
//! manifest's home. A start and every reload call [`ManifestSource::load`];
//! a file (the default, [`FileSource`]) is read anew each time, the fleet's
//! etcd (the fleet module) hands over the revision it is applying. Either way
//! the manifest is completed and validated by [`super::parse`], and
//! `run --listen` overrides its `[listen] address` here, so that a reload
//! never sees the override as a change of address. A source that can tell
//! when what it holds changes ([`ManifestSource::stamp`], the fleet's) has
//! a request that comes during a reload answered by that reload.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::{Config, ConfigError};

/// A place a manifest is loaded from, on start and on every reload.
pub trait ManifestSource: Send + Sync {
    /// Reads, completes and validates the manifest (blocking: reads files).
    fn load(&self) -> Result<Config, ConfigError>;

    /// The manifest file the reloader watches for changes, when there is one.
    fn watched_file(&self) -> Option<&Path>;

    /// What the source holds, when it can tell: a number that changes
    /// whenever what [`ManifestSource::load`] would load does. A reload
    /// whose source still has the stamp it had when the reload loaded it
    /// built what the source holds, and answers the requests that came
    /// while it ran. `None` (a file, which may change under a reload): each
    /// request gets a reload that starts after it.
    fn stamp(&self) -> Option<u64> {
        None
    }
}

/// A manifest file, with `run --listen`'s override of its address.
pub struct FileSource {
    /// The manifest file, read anew at every load.
    pub path: PathBuf,
    /// `run --listen`: the address that replaces `[listen] address`.
    pub listen: Option<SocketAddr>,
}

impl ManifestSource for FileSource {
    fn load(&self) -> Result<Config, ConfigError> {
        super::load(&self.path).map(|config| with_listen(config, self.listen))
    }

    fn watched_file(&self) -> Option<&Path> {
        Some(&self.path)
    }
}

/// `config` listening on `listen` instead of its manifest's address, when set.
pub fn with_listen(mut config: Config, listen: Option<SocketAddr>) -> Config {
    if let Some(address) = listen {
        config.listen.address = address;
    }
    config
}
