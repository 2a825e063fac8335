//! The fleet's layout in etcd, under one prefix `P`:
//!
//! ```text
//! P/manifest                      the manifest in force (TOML text)
//! P/history/<push number>         every pushed manifest, the last HISTORY_KEPT;
//!                                 its mod_revision is the manifest's revision
//! P/components/sha256-<hex>       a component: {"size": bytes, "chunks": n},
//!                                 written after its chunks
//! P/components/sha256-<hex>/<i>   its bytes, CHUNK bytes at a time
//! P/status/<gateway id>           what a gateway runs, under its lease
//! P/seen/<gateway id>             the same, kept when the lease is gone
//! ```
//!
//! Components are chunked because etcd refuses a request over 1.5 MiB
//! (`--max-request-bytes`) and the Python and JavaScript components are
//! larger; the chunks are read back one request each, concatenated and
//! checked against the digest that names them.

use etcd_client::{
    Client, Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{FleetError, Revision, Target};

/// The bytes of one component chunk: well under etcd's 1.5 MiB request
/// limit, with room for the key and the request's framing.
pub const CHUNK: usize = 1024 * 1024;

/// Pushed manifests kept in `history/`: rollback reaches this far back.
pub const HISTORY_KEPT: u64 = 100;

/// The largest manifest `push` writes: it goes into one transaction twice
/// (the manifest and its history entry), under etcd's request limit.
pub const MANIFEST_LIMIT: usize = 512 * 1024;

/// What one listing under the prefix may decode: the kept history at its
/// largest, every manifest at the limit with room for its key and framing
/// (a gRPC client decodes 4 MiB by default: the history passed it after a
/// dozen pushes of a 400 KiB manifest, and every push failed from then on).
const LISTING_LIMIT: usize = HISTORY_KEPT as usize * (MANIFEST_LIMIT + 4096);

/// A manifest as etcd holds it.
#[derive(Debug, Clone)]
pub struct StoredManifest {
    /// Its etcd revision.
    pub revision: Revision,
    /// The manifest's text, component paths rewritten to digests.
    /// The manifest as pushed.
    pub text: String,
}

/// One pushed manifest in `history/`.
#[derive(Debug, Clone)]
pub struct HistoryEntry {
    /// The push's sequence number under `history/`.
    pub push: u64,
    /// The etcd revision the push made.
    pub revision: Revision,
    /// The manifest as pushed.
    pub text: String,
}

/// The record that says a component is complete.
#[derive(Debug, Serialize, Deserialize)]
struct ComponentRecord {
    size: usize,
    chunks: usize,
}

/// The fleet's keys, read and written through one client.
#[derive(Clone)]
pub struct Store {
    client: Client,
    prefix: String,
}

impl Store {
    /// Connects to the fleet's etcd.
    pub async fn open(target: &Target) -> Result<Store, FleetError> {
        Ok(Store {
            client: target.connect().await?,
            prefix: target.prefix.clone(),
        })
    }

    /// Connects to the one member at `endpoint`, every call requiring that
    /// it has a leader: the manifest's watch, and the reads of the
    /// revisions it hands over, go through the member it is on.
    pub async fn watching(target: &Target, endpoint: &str) -> Result<Store, FleetError> {
        Ok(Store {
            client: target.connect_requiring_leader(endpoint).await?,
            prefix: target.prefix.clone(),
        })
    }

    /// `PREFIX/manifest`: the fleet's manifest.
    pub fn manifest_key(&self) -> String {
        format!("{}/manifest", self.prefix)
    }

    fn component_key(&self, digest: &[u8; 32]) -> String {
        format!("{}/components/sha256-{}", self.prefix, hex::encode(digest))
    }

    fn history_key(&self, push: u64) -> String {
        format!("{}/history/{push:010}", self.prefix)
    }

    /// `PREFIX/status/<gateway>`: a gateway's status, under its lease.
    pub fn status_key(&self, gateway: &str) -> String {
        format!("{}/status/{gateway}", self.prefix)
    }

    /// `PREFIX/seen/<gateway>`: its last status, kept after the lease ends.
    pub fn seen_key(&self, gateway: &str) -> String {
        format!("{}/seen/{gateway}", self.prefix)
    }

    /// The client, for the status lease and the manifest's watch.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The manifest in force, or `None` before the first push.
    pub async fn manifest(&self) -> Result<Option<StoredManifest>, FleetError> {
        let key = self.manifest_key();
        let response = self.client.clone().get(key.as_str(), None).await?;
        response
            .kvs()
            .first()
            .map(|kv| {
                Ok(StoredManifest {
                    revision: kv.mod_revision(),
                    text: utf8(&key, kv.value())?,
                })
            })
            .transpose()
    }

    /// True when the component is stored whole.
    pub async fn has_component(&self, digest: &[u8; 32]) -> Result<bool, FleetError> {
        let response = self
            .client
            .clone()
            .get(
                self.component_key(digest),
                Some(GetOptions::new().with_count_only()),
            )
            .await?;
        Ok(response.count() > 0)
    }

    /// Stores a component: its chunks, then the record that says it is whole.
    pub async fn put_component(&self, digest: &[u8; 32], bytes: &[u8]) -> Result<(), FleetError> {
        let key = self.component_key(digest);
        let mut client = self.client.clone();
        let chunks = bytes.chunks(CHUNK).collect::<Vec<_>>();
        for (index, chunk) in chunks.iter().enumerate() {
            client.put(format!("{key}/{index}"), *chunk, None).await?;
        }
        let record = ComponentRecord {
            size: bytes.len(),
            chunks: chunks.len(),
        };
        client.put(key, json(&record), None).await?;
        Ok(())
    }

    /// A component's bytes, checked against its digest.
    pub async fn component(&self, digest: &[u8; 32]) -> Result<Vec<u8>, FleetError> {
        let key = self.component_key(digest);
        let mut client = self.client.clone();
        let response = client.get(key.as_str(), None).await?;
        let record = response
            .kvs()
            .first()
            .ok_or_else(|| FleetError::Missing(key.clone()))?;
        let record: ComponentRecord =
            serde_json::from_slice(record.value()).map_err(|error| damaged(&key, error))?;
        if record.size > crate::config::bounds::COMPONENT_FILE as usize
            || record.chunks != record.size.div_ceil(CHUNK)
        {
            return Err(damaged(&key, "its size and chunk count disagree"));
        }
        let mut bytes = Vec::with_capacity(record.size);
        for index in 0..record.chunks {
            let chunk_key = format!("{key}/{index}");
            let response = client.get(chunk_key.as_str(), None).await?;
            let chunk = response
                .kvs()
                .first()
                .ok_or_else(|| FleetError::Missing(chunk_key.clone()))?;
            bytes.extend_from_slice(chunk.value());
        }
        let actual: [u8; 32] = Sha256::digest(&bytes).into();
        if bytes.len() != record.size || &actual != digest {
            return Err(damaged(
                &key,
                format!("its bytes hash to sha256-{}", hex::encode(actual)),
            ));
        }
        Ok(bytes)
    }

    /// Every kept pushed manifest, oldest first.
    pub async fn history(&self) -> Result<Vec<HistoryEntry>, FleetError> {
        self.listed("history")
            .await?
            .into_iter()
            .map(|(name, revision, text)| {
                let push = name.parse().map_err(|_| {
                    damaged(
                        &format!("{}/history/{name}", self.prefix),
                        "not a push number",
                    )
                })?;
                Ok(HistoryEntry {
                    push,
                    revision,
                    text,
                })
            })
            .collect()
    }

    /// The number of the last push, 0 before the first: read from the
    /// newest history key alone.
    pub async fn last_push(&self) -> Result<u64, FleetError> {
        let prefix = format!("{}/history/", self.prefix);
        let options = GetOptions::new()
            .with_prefix()
            .with_keys_only()
            .with_sort(SortTarget::Key, SortOrder::Descend)
            .with_limit(1);
        let response = self
            .client
            .clone()
            .get(prefix.as_str(), Some(options))
            .await?;
        let Some(newest) = response.kvs().first() else {
            return Ok(0);
        };
        let key = String::from_utf8_lossy(newest.key());
        key.strip_prefix(&prefix)
            .and_then(|number| number.parse().ok())
            .ok_or_else(|| damaged(&key, "not a push number"))
    }

    /// Writes `text` as the manifest and as push number `push` of the
    /// history, dropping the entry that falls out of the kept window, in one
    /// transaction that holds only if the manifest is still at revision
    /// `was` (0: there is none yet). Returns the new revision.
    pub async fn commit(
        &self,
        was: Revision,
        push: u64,
        text: &str,
    ) -> Result<Revision, FleetError> {
        let manifest = self.manifest_key();
        let mut operations = vec![
            TxnOp::put(manifest.as_str(), text, None),
            TxnOp::put(self.history_key(push), text, None),
        ];
        if let Some(evicted) = push.checked_sub(HISTORY_KEPT) {
            operations.push(TxnOp::delete(self.history_key(evicted), None));
        }
        let txn = Txn::new()
            .when([Compare::mod_revision(
                manifest.as_str(),
                CompareOp::Equal,
                was,
            )])
            .and_then(operations)
            .or_else([TxnOp::get(manifest.as_str(), None)]);
        let response = self.client.clone().txn(txn).await?;
        if !response.succeeded() {
            let now = self.manifest().await?.map_or(0, |current| current.revision);
            return Err(FleetError::Conflict { was, now });
        }
        Ok(response.header().map_or(0, |header| header.revision()))
    }

    /// Writes a gateway's status: under `lease` at `status/`, and at `seen/`.
    pub async fn put_status(
        &self,
        gateway: &str,
        status: &str,
        lease: i64,
    ) -> Result<(), FleetError> {
        let txn = Txn::new().and_then([
            TxnOp::put(
                self.status_key(gateway),
                status,
                Some(PutOptions::new().with_lease(lease)),
            ),
            TxnOp::put(self.seen_key(gateway), status, None),
        ]);
        self.client.clone().txn(txn).await?;
        Ok(())
    }

    /// The values under `P/<folder>/`, by the key's last part.
    pub async fn folder(&self, folder: &str) -> Result<Vec<(String, String)>, FleetError> {
        let listed = self.listed(folder).await?;
        Ok(listed
            .into_iter()
            .map(|(name, _, text)| (name, text))
            .collect())
    }

    /// The keys under `P/<folder>/` in key order: the last part, the
    /// revision that wrote it, the text.
    async fn listed(&self, folder: &str) -> Result<Vec<(String, Revision, String)>, FleetError> {
        let prefix = format!("{}/{folder}/", self.prefix);
        let options = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Key, SortOrder::Ascend);
        let response = self
            .client
            .kv_client()
            .max_decoding_message_size(LISTING_LIMIT)
            .get(prefix.as_str(), Some(options))
            .await?;
        response
            .kvs()
            .iter()
            .map(|kv| {
                let key = String::from_utf8_lossy(kv.key()).into_owned();
                let name = key.strip_prefix(&prefix).unwrap_or(&key).to_owned();
                Ok((name, kv.mod_revision(), utf8(&key, kv.value())?))
            })
            .collect()
    }
}

fn utf8(key: &str, value: &[u8]) -> Result<String, FleetError> {
    String::from_utf8(value.to_vec()).map_err(|_| damaged(key, "not UTF-8 text"))
}

fn damaged(key: &str, problem: impl std::fmt::Display) -> FleetError {
    FleetError::Damaged {
        key: key.to_owned(),
        problem: problem.to_string(),
    }
}

fn json(value: &impl Serialize) -> String {
    serde_json::to_string(value).unwrap_or_default()
}
