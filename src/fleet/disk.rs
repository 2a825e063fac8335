//! The gateway's copy of the last good revision on local disk, so that a
//! gateway (re)started while etcd is away starts on what it served:
//!
//! ```text
//! STATE/components/sha256-<hex>.wasm   every component fetched, by digest
//! STATE/manifest-<revision>.toml       the last good manifest
//! STATE/last-good                      that revision's number
//! ```
//!
//! A pushed manifest names its components `components/sha256-<hex>.wasm`
//! (relative paths resolve against the manifest's folder), so the copy is
//! a manifest a gateway, `check` and `try` load like any other; its other
//! relative paths (an audit sink file, TLS files) are this gateway's own,
//! in the state folder. Every file is written beside and renamed into
//! place: a crash leaves the old copy or the new one, never half of one.

use std::path::{Path, PathBuf};

use super::{FleetError, Revision};

/// A gateway's state folder.
#[derive(Debug, Clone)]
pub struct StateDir {
    root: PathBuf,
}

/// The last good revision on disk.
#[derive(Debug, Clone)]
pub struct LastGood {
    /// The revision the copy is of.
    pub revision: Revision,
    /// The manifest file kept for it, its components beside it.
    pub manifest: PathBuf,
}

impl StateDir {
    /// The folder, created when absent; relative paths made absolute, since
    /// the manifest's own relative paths resolve against it.
    pub fn open(root: &Path) -> Result<StateDir, FleetError> {
        let root = std::path::absolute(root).map_err(|error| disk(root, error))?;
        std::fs::create_dir_all(root.join("components")).map_err(|error| disk(&root, error))?;
        Ok(StateDir { root })
    }

    /// Where a revision's manifest is (or would be) kept: the path its
    /// problems are reported at, and its relative paths resolve against.
    pub fn manifest_path(&self, revision: Revision) -> PathBuf {
        self.root.join(format!("manifest-{revision}.toml"))
    }

    /// The file a component of this digest is kept in.
    pub fn component_path(&self, digest: &[u8; 32]) -> PathBuf {
        self.root.join(component_file(digest))
    }

    /// The last good revision kept, if any.
    pub fn last_good(&self) -> Option<LastGood> {
        let text = std::fs::read_to_string(self.root.join("last-good")).ok()?;
        let revision: Revision = text.trim().parse().ok()?;
        let manifest = self.manifest_path(revision);
        manifest
            .is_file()
            .then_some(LastGood { revision, manifest })
    }

    /// Keeps a fetched component.
    pub fn keep_component(&self, digest: &[u8; 32], bytes: &[u8]) -> Result<(), FleetError> {
        write_atomically(&self.component_path(digest), bytes)
    }

    /// Makes `revision` (with `text`) the last good one, and drops the
    /// manifest it replaces.
    pub fn keep_manifest(&self, revision: Revision, text: &str) -> Result<(), FleetError> {
        let previous = self.last_good();
        write_atomically(&self.manifest_path(revision), text.as_bytes())?;
        write_atomically(
            &self.root.join("last-good"),
            revision.to_string().as_bytes(),
        )?;
        if let Some(previous) = previous.filter(|previous| previous.revision != revision) {
            let _ = std::fs::remove_file(previous.manifest);
        }
        Ok(())
    }
}

/// A component's path in a pushed manifest, relative to the state folder.
pub fn component_file(digest: &[u8; 32]) -> String {
    format!("components/sha256-{}.wasm", hex::encode(digest))
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), FleetError> {
    let partial = path.with_extension(format!("partial-{}", std::process::id()));
    std::fs::write(&partial, bytes)
        .and_then(|()| std::fs::rename(&partial, path))
        .map_err(|error| disk(path, error))
}

fn disk(path: &Path, error: std::io::Error) -> FleetError {
    FleetError::Disk(format!("{}: {error}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_good_manifest_replaces_the_one_before() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let state = StateDir::open(dir.path()).expect("a state folder");
        assert!(state.last_good().is_none());
        state.keep_manifest(7, "a = 1\n").expect("kept");
        state.keep_manifest(9, "a = 2\n").expect("kept");
        let last = state.last_good().expect("a last good revision");
        assert_eq!(last.revision, 9);
        assert_eq!(
            std::fs::read_to_string(&last.manifest).expect("read"),
            "a = 2\n"
        );
        assert!(
            !state.manifest_path(7).exists(),
            "the older copy is dropped"
        );
    }
}
