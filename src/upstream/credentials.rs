//! The gateway's own credentials towards an upstream (a client certificate,
//! a bearer token), kept current as their files change: kube reloads its
//! proxy client certificate and client-go its token file the same way
//! (`staging/src/k8s.io/client-go/transport/cert_rotation.go`,
//! `staging/src/k8s.io/client-go/transport/token_source.go`).
//!
//! A [`Watched`] value looks at its files' metadata (modification time,
//! size, inode: a Kubernetes Secret volume swaps a symlink) at most once per
//! [`CHECK_INTERVAL`], on the request path, and reads them again when that
//! changed. A file that cannot be read or parsed any more keeps the last
//! good value in use, and the failure is logged.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

/// How often the files' metadata is looked at. The stat is a blocking call
/// made on the request path, so it is rate-limited; a change is picked up
/// within this time.
pub(super) const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// A value loaded from files, loaded again when they change.
pub(super) struct Watched<T> {
    paths: Vec<PathBuf>,
    load: fn(&[PathBuf]) -> Result<T, String>,
    state: Mutex<State<T>>,
}

struct State<T> {
    value: Arc<T>,
    stamps: Vec<Option<Stamp>>,
    checked: Instant,
    /// Counts the loads, so a user of the value knows when it changed.
    generation: u64,
}

/// What tells a file changed without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

fn stamp(path: &PathBuf) -> Option<Stamp> {
    let metadata = std::fs::metadata(path).ok()?;
    Some(Stamp {
        modified: metadata.modified().ok(),
        len: metadata.len(),
        inode: metadata.ino(),
    })
}

impl<T> Watched<T> {
    /// Loads the value from `paths` now.
    pub(super) fn new(
        paths: Vec<PathBuf>,
        load: fn(&[PathBuf]) -> Result<T, String>,
    ) -> Result<Self, String> {
        let stamps = paths.iter().map(stamp).collect();
        let value = Arc::new(load(&paths)?);
        Ok(Watched {
            paths,
            load,
            state: Mutex::new(State {
                value,
                stamps,
                checked: Instant::now(),
                generation: 0,
            }),
        })
    }

    /// The current value and its generation, re-read first when the files
    /// changed since the last look (at most one look per [`CHECK_INTERVAL`]).
    pub(super) fn current(&self) -> (Arc<T>, u64) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.checked.elapsed() >= CHECK_INTERVAL {
            state.checked = Instant::now();
            let stamps: Vec<Option<Stamp>> = self.paths.iter().map(stamp).collect();
            if stamps != state.stamps {
                match (self.load)(&self.paths) {
                    Ok(value) => {
                        state.value = Arc::new(value);
                        state.stamps = stamps;
                        state.generation += 1;
                        tracing::info!(files = ?self.paths, "upstream credentials re-read");
                    }
                    // Kept unchanged: the next look tries again.
                    Err(message) => {
                        tracing::warn!(%message, "upstream credentials not re-read; the last ones stay in use");
                    }
                }
            }
        }
        (Arc::clone(&state.value), state.generation)
    }
}
