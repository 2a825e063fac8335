//! `wasmgate push` and `wasmgate rollback`: a manifest into the fleet.
//!
//! A push loads, completes, validates and builds the manifest exactly as
//! `check` does (components compiled), reads each component and names it
//! by its SHA-256, uploads the ones etcd does not hold yet, rewrites the
//! manifest's `component` paths to `components/sha256-<hex>.wasm` pinned by
//! `sha256` (the gateway's disk layout, [`super::disk`]), and commits it
//! with [`Store::commit`]: the transaction holds only if nobody pushed since
//! this push read the revision it started from. Everything but the
//! component paths is kept as written (comments, layout).
//!
//! A rollback commits a kept history entry again, as a new revision, once
//! its components are known to be stored still.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use toml_edit::{DocumentMut, Item, TableLike, Value};

use super::store::{HistoryEntry, MANIFEST_LIMIT, Store};
use super::{FleetError, Revision, disk};
use crate::config::{self, ConfigError, bounds, files};
use crate::server::{Gateway, StartError};

/// Why a push or a rollback wrote nothing.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is what it means"
)]
pub enum PushError {
    /// The manifest is invalid: the problems `check` reports.
    #[error("{0}")]
    Invalid(#[from] ConfigError),
    /// It is valid but does not build (a component does not compile).
    #[error("{0}")]
    Build(#[from] StartError),
    #[error("{}: {source}", path.display())]
    Component {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the manifest's component paths cannot be rewritten: {0}")]
    Rewrite(String),
    #[error("the pushed manifest is {size} bytes, more than the {MANIFEST_LIMIT} etcd takes")]
    TooLarge { size: usize },
    #[error("revision {revision} is not in the kept history (kept: {kept})")]
    NotInHistory { revision: Revision, kept: String },
    #[error(transparent)]
    Fleet(#[from] FleetError),
}

/// What a push wrote.
#[derive(Debug, Clone)]
pub struct Pushed {
    /// The manifest's new revision in etcd.
    pub revision: Revision,
    /// Components uploaded now, and those etcd already held.
    pub uploaded: usize,
    /// Components already stored under their digest, not sent again.
    pub reused: usize,
}

/// A validated manifest, rewritten and ready to commit on the revision it
/// was prepared against.
pub struct Prepared {
    was: Revision,
    push: u64,
    text: String,
    components: Vec<Component>,
}

/// A component's digest and bytes.
type Component = ([u8; 32], Vec<u8>);

impl Prepared {
    /// The manifest as it will be written to etcd.
    pub fn text(&self) -> &str {
        &self.text
    }
}

/// Validates and rewrites the manifest at `path` against the fleet's
/// current revision.
pub async fn prepare(path: &Path, store: &Store) -> Result<Prepared, PushError> {
    // Read first: a push that lands while this one validates wins, and
    // this one is told to retry.
    let was = store
        .manifest()
        .await?
        .map_or(0, |current| current.revision);
    let push = store.last_push().await? + 1;
    let path = path.to_owned();
    let built = tokio::task::spawn_blocking(move || validated(&path));
    let (text, components) = built
        .await
        .map_err(|error| PushError::Rewrite(format!("the validation task failed: {error}")))??;
    Ok(Prepared {
        was,
        push,
        text,
        components,
    })
}

/// Uploads the components etcd lacks, then commits the manifest.
pub async fn commit(prepared: Prepared, store: &Store) -> Result<Pushed, PushError> {
    let (mut uploaded, mut reused) = (0, 0);
    for (digest, bytes) in &prepared.components {
        if store.has_component(digest).await? {
            reused += 1;
        } else {
            store.put_component(digest, bytes).await?;
            uploaded += 1;
        }
    }
    let revision = store
        .commit(prepared.was, prepared.push, &prepared.text)
        .await?;
    Ok(Pushed {
        revision,
        uploaded,
        reused,
    })
}

/// `wasmgate push`: [`prepare`], then [`commit`].
pub async fn push(path: &Path, store: &Store) -> Result<Pushed, PushError> {
    let prepared = prepare(path, store).await?;
    commit(prepared, store).await
}

/// `wasmgate rollback --to REVISION`: that pushed manifest, again, as a new
/// revision.
pub async fn rollback(revision: Revision, store: &Store) -> Result<Pushed, PushError> {
    let was = store
        .manifest()
        .await?
        .map_or(0, |current| current.revision);
    let history = store.history().await?;
    let entry = history
        .iter()
        .find(|entry| entry.revision == revision)
        .ok_or_else(|| PushError::NotInHistory {
            revision,
            kept: kept(&history),
        })?;
    let mut document: DocumentMut = entry
        .text
        .parse()
        .map_err(|error| PushError::Rewrite(format!("revision {revision}: {error}")))?;
    let mut reused = 0;
    for filter in filters(&mut document) {
        let Some(digest) = filter
            .get("sha256")
            .and_then(Item::as_str)
            .and_then(parse_digest)
        else {
            continue;
        };
        if !store.has_component(&digest).await? {
            return Err(
                FleetError::Missing(format!("component sha256-{}", hex::encode(digest))).into(),
            );
        }
        reused += 1;
    }
    let push = store.last_push().await? + 1;
    let revision = store.commit(was, push, &entry.text).await?;
    Ok(Pushed {
        revision,
        uploaded: 0,
        reused,
    })
}

/// The kept history's revisions, for messages.
fn kept(history: &[HistoryEntry]) -> String {
    match (history.first(), history.last()) {
        (Some(first), Some(last)) => format!(
            "{} revisions, {} to {}",
            history.len(),
            first.revision,
            last.revision
        ),
        _ => "none".to_owned(),
    }
}

/// The steps `check` takes, then the manifest rewritten and its components
/// read (blocking: reads and compiles).
fn validated(path: &Path) -> Result<(String, Vec<Component>), PushError> {
    let config = config::load(path)?;
    let mut digests = HashMap::new();
    let mut components = Vec::new();
    for filter in config.stages.all_filters() {
        if digests.contains_key(&filter.component) {
            continue;
        }
        let bytes =
            files::read_limited(&filter.component, bounds::COMPONENT_FILE).map_err(|error| {
                PushError::Component {
                    path: filter.component.clone(),
                    source: error.into(),
                }
            })?;
        let digest: [u8; 32] = Sha256::digest(&bytes).into();
        digests.insert(filter.component.clone(), digest);
        components.push((digest, bytes));
    }
    let filters = config.stages.all_filters().count();
    let base = path.parent().unwrap_or(Path::new("")).to_owned();
    Gateway::check(config)?;
    let source =
        files::read_limited(path, bounds::MANIFEST_FILE).map_err(|error| ConfigError::Read {
            path: path.to_owned(),
            source: error.into(),
        })?;
    let text = String::from_utf8_lossy(&source);
    let text = rewrite(&text, &base, &digests, filters)?;
    if text.len() > MANIFEST_LIMIT {
        return Err(PushError::TooLarge { size: text.len() });
    }
    Ok((text, components))
}

/// The manifest with each filter's `component` replaced by its digest's
/// file and pinned by `sha256`; `expected` filters must have been found.
fn rewrite(
    text: &str,
    base: &Path,
    digests: &HashMap<PathBuf, [u8; 32]>,
    expected: usize,
) -> Result<String, PushError> {
    let mut document: DocumentMut = text
        .parse()
        .map_err(|error| PushError::Rewrite(format!("{error}")))?;
    let mut rewritten = 0;
    for filter in filters(&mut document) {
        let Some(component) = filter.get("component").and_then(Item::as_str) else {
            continue;
        };
        let Some(digest) = digests.get(&base.join(component)) else {
            return Err(PushError::Rewrite(format!("{component:?} was not loaded")));
        };
        let (file, hex) = (disk::component_file(digest), hex::encode(digest));
        filter.insert("component", Item::Value(Value::from(file)));
        filter.insert("sha256", Item::Value(Value::from(hex)));
        rewritten += 1;
    }
    if rewritten != expected {
        return Err(PushError::Rewrite(format!(
            "{rewritten} of {expected} filters found"
        )));
    }
    Ok(document.to_string())
}

/// The filter tables of the five filter lists, whether written as arrays
/// of tables or as inline tables.
fn filters(document: &mut DocumentMut) -> Vec<&mut dyn TableLike> {
    let mut found: Vec<&mut dyn TableLike> = Vec::new();
    for (section, table) in document.iter_mut() {
        let lists: &[&str] = match section.get() {
            "authentication" | "authorization" | "audit" => &["filters"],
            "admission" => &["mutating", "validating"],
            _ => continue,
        };
        let Some(table) = table.as_table_like_mut() else {
            continue;
        };
        for (name, list) in table.iter_mut() {
            if !lists.contains(&name.get()) {
                continue;
            }
            match list {
                Item::ArrayOfTables(tables) => {
                    found.extend(tables.iter_mut().map(|t| t as &mut dyn TableLike));
                }
                Item::Value(Value::Array(values)) => found.extend(
                    values
                        .iter_mut()
                        .filter_map(Value::as_inline_table_mut)
                        .map(|t| t as &mut dyn TableLike),
                ),
                _ => {}
            }
        }
    }
    found
}

fn parse_digest(text: &str) -> Option<[u8; 32]> {
    hex::decode(text.trim_start_matches("sha256:"))
        .ok()
        .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_component_paths_change_and_comments_stay() {
        let text = "# the fleet's chain\n[listen]\naddress = \"127.0.0.1:0\"\n\n\
                    [[authentication.filters]]\nname = \"a\" # first\ncomponent = \"f/a.wasm\"\n\n\
                    [admission]\nvalidating = [{ name = \"v\", component = \"f/v.wasm\" }]\n";
        let digests = HashMap::from([
            (PathBuf::from("/m/f/a.wasm"), [1u8; 32]),
            (PathBuf::from("/m/f/v.wasm"), [2u8; 32]),
        ]);
        let rewritten = rewrite(text, Path::new("/m"), &digests, 2).expect("rewritten");
        assert!(
            rewritten.starts_with("# the fleet's chain\n"),
            "{rewritten}"
        );
        assert!(rewritten.contains("name = \"a\" # first"), "{rewritten}");
        let a = format!(
            "component = \"components/sha256-{}.wasm\"",
            hex::encode([1u8; 32])
        );
        let v = format!("sha256 = \"{}\"", hex::encode([2u8; 32]));
        assert!(
            rewritten.contains(&a) && rewritten.contains(&v),
            "{rewritten}"
        );
        assert!(
            rewrite(text, Path::new("/m"), &digests, 3).is_err(),
            "a filter missed"
        );
    }
}
