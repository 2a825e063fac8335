//! Decision caches, one per authentication or authorization filter whose
//! manifest entry sets `cache`: kube's cached token authenticator
//! (`staging/src/k8s.io/apiserver/pkg/authentication/token/cache/cached_token_authenticator.go`)
//! and webhook authorizer cache (`staging/src/k8s.io/apiserver/plugin/pkg/authorizer/webhook/webhook.go`).
//!
//! * An answer is kept for the filter's `ttl` when it is positive and
//!   `negative_ttl` otherwise, shortened by what the filter asked for during
//!   the call (`cache.limit-ttl`); the most recently used `max_entries` stay.
//! * Only answers are kept: a filter's error, a trap, a timeout or no room
//!   to run it never are, so the next request asks the filter again.
//! * Concurrent misses for one key make one call: the first request calls
//!   the filter and the others wait for its outcome (kube's singleflight).
//!   Should the calling request go away first (its client gone, its
//!   deadline passed), the first of the others to look again calls for
//!   the rest, as kube's shared lookup outlives the request that began it.
//! * A lookup never waits: [`DecisionCache::lookup`] finds the answer kept,
//!   or a [`Pending`] (wait for a concurrent call, make this one, or call
//!   without keeping) that [`DecisionCache::fetch`] resolves; a stage whose
//!   filters' answers are all kept decides without a future of its own.
//! * [`key`] makes the keys: an HMAC with a key random per process, so a
//!   key says nothing about the credential it was made from, and none is
//!   made from more than [`key::MAX_KEY_MATERIAL`] bytes.
//!
//! The cache knows nothing of filters: what is cached, for how long, is
//! decided by its caller (`wasm/filter.rs`, which owns one cache per
//! loaded filter, so that a reload starts with empty caches).

pub(crate) mod key;

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lru::LruCache;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::watch;

pub(crate) use key::{Key, KeyBuilder};

use crate::config::stages::CacheSpec;
use crate::metrics::gateway::FilterLabel;

/// Where an answer came from, for `wasmgate try` and the debug log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// The filter has no cache.
    Uncached,
    /// The cache held no answer: the filter was called.
    Miss,
    /// The cache held the answer: the filter was not called.
    Hit,
    /// Another request was calling the filter for the same key: its
    /// outcome was shared.
    Merged,
    /// The key material was too large to cache (kube's DoS guard).
    TooLarge,
}

impl Lookup {
    /// A word for traces; None when there is no cache to speak of.
    pub fn word(self) -> Option<&'static str> {
        match self {
            Lookup::Uncached => None,
            Lookup::Miss => Some("miss"),
            Lookup::Hit => Some("hit"),
            Lookup::Merged => Some("merged"),
            Lookup::TooLarge => Some("too-large"),
        }
    }
}

/// What a call gave (shared with the requests that waited for it), and
/// whether to keep it.
pub(crate) struct Fetched<T> {
    pub value: T,
    /// None for what is never kept (a filter's error, a trap, ...).
    pub keep: Option<Keep>,
}

/// How long to keep a value: the TTL of its polarity, shortened by the
/// filter's own limit (`cache.limit-ttl`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Keep {
    /// Positive answers (authenticated, allow) are kept `ttl`; the others
    /// `negative_ttl`.
    pub positive: bool,
    pub limit: Option<Duration>,
}

struct Entry<T> {
    value: T,
    expires: Instant,
}

struct Entries<T> {
    kept: LruCache<Key, Entry<T>>,
    /// Keys a request is calling the filter for; the others wait on these.
    calling: HashMap<Key, watch::Receiver<Option<T>>>,
}

/// One filter's cache of values `T`.
pub(crate) struct DecisionCache<T> {
    spec: CacheSpec,
    entries: Mutex<Entries<T>>,
    metrics: CacheMetrics,
}

struct CacheMetrics {
    hits: Counter,
    misses: Counter,
    evictions: Counter,
    entries: Gauge,
}

impl CacheMetrics {
    fn new(filter: &str) -> Self {
        let metrics = &crate::metrics::metrics().gateway;
        let label = FilterLabel {
            filter: filter.to_owned(),
        };
        let entries = metrics.cache_entries.get_or_create(&label).clone();
        // A reload's cache starts empty.
        entries.set(0);
        CacheMetrics {
            hits: metrics.cache_hits.get_or_create(&label).clone(),
            misses: metrics.cache_misses.get_or_create(&label).clone(),
            evictions: metrics.cache_evictions.get_or_create(&label).clone(),
            entries,
        }
    }
}

/// What a [`lookup`](DecisionCache::lookup) did not find kept: how the
/// value is to be got.
pub(crate) enum Pending<'a, T> {
    /// Another request is calling the filter for the key: its outcome is
    /// awaited.
    Wait(Key, watch::Receiver<Option<T>>),
    /// This request calls the filter, holding the key until it answers.
    Call(Calling<'a, T>),
    /// Nothing can be kept for this request (`TooLarge`, or `Miss` when the
    /// cache's lock is poisoned): the filter is called.
    Unkept(Lookup),
}

impl<T: Clone> DecisionCache<T> {
    pub(crate) fn new(filter: &str, spec: CacheSpec) -> Self {
        let capacity = NonZeroUsize::new(spec.max_entries).unwrap_or(NonZeroUsize::MIN);
        DecisionCache {
            spec,
            entries: Mutex::new(Entries {
                kept: LruCache::new(capacity),
                calling: HashMap::new(),
            }),
            metrics: CacheMetrics::new(filter),
        }
    }

    /// What the cache has for `key`, found without waiting: the value kept,
    /// or how [`fetch`](Self::fetch) is to get one. The hit or miss is
    /// counted here, except a wait's, which its outcome decides.
    /// A caller that finds the value needs no future at all; one that does
    /// not may hold the probe across a wait, as it holds the key while this
    /// request calls the filter. Without a key (too much key material) the
    /// filter is simply called. An entry is alive if it expires after `now`,
    /// the moment the caller's turn began (one clock read serves both).
    pub(crate) fn lookup(&self, key: Option<Key>, now: Instant) -> Result<T, Pending<'_, T>> {
        let Some(key) = key else {
            self.metrics.misses.inc();
            return Err(Pending::Unkept(Lookup::TooLarge));
        };
        let Ok(mut entries) = self.entries.lock() else {
            // A poisoned lock: serve uncached rather than fail.
            return Err(Pending::Unkept(Lookup::Miss));
        };
        match entries.kept.get(&key) {
            Some(entry) if entry.expires > now => {
                self.metrics.hits.inc();
                return Ok(entry.value.clone());
            }
            Some(_) => {
                entries.kept.pop(&key);
                self.metrics.entries.set(gauge(entries.kept.len()));
            }
            None => {}
        }
        // A caller that went away has taken its key out; should its entry
        // be left (its drop found the lock poisoned), it is called anew.
        if let Some(receiver) = entries.calling.get(&key)
            && receiver.has_changed().is_ok()
        {
            return Err(Pending::Wait(key, receiver.clone()));
        }
        self.metrics.misses.inc();
        let (sender, receiver) = watch::channel(None);
        entries.calling.insert(key, receiver);
        Err(Pending::Call(Calling {
            cache: self,
            key,
            sender,
        }))
    }

    /// The value `pending` leads to: one shared from a concurrent call for
    /// the same key, or got from `call` (and then kept if it says so). A
    /// wait whose calling request went away before its answer looks again:
    /// the first waiter to do so calls, the others wait for it.
    pub(crate) async fn fetch(
        &self,
        mut pending: Pending<'_, T>,
        call: impl Future<Output = Fetched<T>>,
    ) -> (T, Lookup) {
        loop {
            match pending {
                Pending::Wait(key, mut receiver) => {
                    let shared = receiver
                        .wait_for(Option::is_some)
                        .await
                        .ok()
                        .and_then(|value| value.clone());
                    if let Some(value) = shared {
                        self.metrics.hits.inc();
                        return (value, Lookup::Merged);
                    }
                    pending = match self.lookup(Some(key), Instant::now()) {
                        Ok(value) => return (value, Lookup::Hit),
                        Err(pending) => pending,
                    };
                }
                Pending::Call(calling) => {
                    let Fetched { value, keep } = call.await;
                    if let Some(keep) = keep {
                        self.keep(calling.key, value.clone(), keep);
                    }
                    calling.answer(value.clone());
                    return (value, Lookup::Miss);
                }
                Pending::Unkept(lookup) => return (call.await.value, lookup),
            }
        }
    }

    /// Keeps a value for its TTL, shortened by the filter's limit.
    fn keep(&self, key: Key, value: T, keep: Keep) {
        let ttl = if keep.positive {
            self.spec.ttl
        } else {
            self.spec.negative_ttl
        };
        let ttl = keep.limit.map_or(ttl, |limit| ttl.min(limit));
        if ttl.is_zero() {
            return;
        }
        let Ok(mut entries) = self.entries.lock() else {
            return;
        };
        let expires = Instant::now() + ttl;
        if let Some((evicted, entry)) = entries.kept.push(key, Entry { value, expires })
            && evicted != key
            && entry.expires > Instant::now()
        {
            self.metrics.evictions.inc();
        }
        self.metrics.entries.set(gauge(entries.kept.len()));
    }
}

fn gauge(len: usize) -> i64 {
    i64::try_from(len).unwrap_or(i64::MAX)
}

/// Held while a request calls the filter for `key`: however the call ends
/// (answered, or the request dropped), the key stops being "being called",
/// and the waiters see either the outcome or the sender gone.
pub(crate) struct Calling<'a, T> {
    cache: &'a DecisionCache<T>,
    key: Key,
    sender: watch::Sender<Option<T>>,
}

impl<T> Calling<'_, T> {
    /// Gives the waiters the outcome, and lets the key go.
    fn answer(self, value: T) {
        self.sender.send_replace(Some(value));
    }
}

impl<T> Drop for Calling<'_, T> {
    fn drop(&mut self) {
        if let Ok(mut entries) = self.cache.entries.lock() {
            entries.calling.remove(&self.key);
        }
    }
}
