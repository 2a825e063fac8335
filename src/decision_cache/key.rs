//! Cache keys: an HMAC-SHA256, under a key drawn at random once per process,
//! of exactly what decides the answer (what that is, for each kind of
//! filter, is said where its keys are made: `wasm/cache_key.rs`). As kube's cached token
//! authenticator does, the credential itself is never kept, only its HMAC,
//! which nobody without the process's key can compute or invert. Every
//! field is framed by its length, so no two inputs share a key.

use std::sync::OnceLock;

use hmac::digest::KeyInit;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Key material beyond this is not cached (kube's guard: an attacker must not
/// make the gateway hash and hold arbitrarily large credentials). The
/// material is what is hashed: the fields with their two-byte lengths.
pub(crate) const MAX_KEY_MATERIAL: usize = 10 * 1024;

/// A cache key.
pub(crate) type Key = [u8; 32];

/// SHA-256's block size: an HMAC key of this length is used as it is.
const PROCESS_KEY_BYTES: usize = 64;

/// The process's HMAC key: random, never written anywhere.
fn process_key() -> &'static [u8; PROCESS_KEY_BYTES] {
    static KEY: OnceLock<[u8; PROCESS_KEY_BYTES]> = OnceLock::new();
    KEY.get_or_init(|| {
        let mut key = [0u8; PROCESS_KEY_BYTES];
        if let Err(error) = getrandom::fill(&mut key) {
            // Linux's getrandom(2) does not fail once booted; should it, the
            // keys are still unguessable from outside, only not secret to
            // someone who can read this process's memory.
            tracing::error!(%error, "no OS randomness for the decision caches' HMAC key");
            let seed = std::collections::hash_map::RandomState::new();
            for (chunk, index) in key.chunks_mut(8).zip(0u64..) {
                use std::hash::BuildHasher;
                chunk.copy_from_slice(&seed.hash_one(index).to_le_bytes());
            }
        }
        key
    })
}

/// The HMAC under the process's key, its key already absorbed: each cache key
/// starts from a copy, so the two SHA-256 blocks of HMAC's inner and outer
/// key pads are hashed once per process, not twice a key.
fn keyed_mac() -> &'static Hmac<Sha256> {
    static MAC: OnceLock<Hmac<Sha256>> = OnceLock::new();
    MAC.get_or_init(|| <Hmac<Sha256> as KeyInit>::new(&(*process_key()).into()))
}

/// Feeds length-framed fields into an HMAC, counting the material. Lengths
/// and counts take two bytes, which keeps the keys of ordinary requests
/// within a few SHA-256 blocks (a bearer token's in one); a length or count
/// too large for them is counted as more key material than any cache takes.
pub(crate) struct KeyBuilder {
    mac: Hmac<Sha256>,
    /// The bytes fed in so far, lengths included.
    material: usize,
}

impl KeyBuilder {
    pub(crate) fn new(domain: &[u8]) -> Self {
        let mut builder = KeyBuilder {
            mac: keyed_mac().clone(),
            material: 0,
        };
        // What the key is for: not the caller's material.
        builder.mac.update(domain);
        builder
    }

    pub(crate) fn bytes(&mut self, bytes: &[u8]) {
        self.frame(bytes.len());
        self.feed(bytes);
    }

    /// Frames a count of the fields that follow.
    pub(crate) fn count(&mut self, count: usize) {
        self.frame(count);
    }

    pub(crate) fn strings(&mut self, strings: &[String]) {
        self.count(strings.len());
        for string in strings {
            self.bytes(string.as_bytes());
        }
    }

    fn frame(&mut self, length: usize) {
        match u16::try_from(length) {
            Ok(length) => self.feed(&length.to_le_bytes()),
            Err(_) => self.material = usize::MAX,
        }
    }

    /// Hashes `bytes` while the material is within the limit: past it the
    /// key is refused, and the rest need not be hashed.
    fn feed(&mut self, bytes: &[u8]) {
        self.material = self.material.saturating_add(bytes.len());
        if self.material <= MAX_KEY_MATERIAL {
            self.mac.update(bytes);
        }
    }

    /// The key, or None when the material was over [`MAX_KEY_MATERIAL`].
    pub(crate) fn finish(self) -> Option<Key> {
        (self.material <= MAX_KEY_MATERIAL).then(|| self.mac.finalize().into_bytes().into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(fields: &[&str]) -> Option<Key> {
        let mut key = KeyBuilder::new(b"test");
        for field in fields {
            key.bytes(field.as_bytes());
        }
        key.finish()
    }

    #[test]
    fn a_key_is_the_hmac_of_its_framed_fields_under_the_process_key() {
        let mut fresh = <Hmac<Sha256> as KeyInit>::new(&(*process_key()).into());
        fresh.update(b"test");
        fresh.update(&1u16.to_le_bytes());
        fresh.update(b"a");
        let expected: Key = fresh.finalize().into_bytes().into();
        assert_eq!(key(&["a"]), Some(expected));
        assert_eq!(
            key(&["a"]),
            Some(expected),
            "the shared keyed state is copied, not used up"
        );
    }

    #[test]
    fn framing_keeps_fields_apart_and_bulk_is_refused() {
        assert_eq!(key(&["a", "b"]), key(&["a", "b"]));
        assert_ne!(key(&["ab"]), key(&["a", "b"]));
        assert_ne!(key(&["a", ""]), key(&["a"]));
        // The material is the framed fields: each with its two-byte length.
        let most = "x".repeat(MAX_KEY_MATERIAL - 2);
        assert!(key(&[&most]).is_some());
        assert!(key(&[&format!("{most}x")]).is_none());
        assert!(key(&[&"x".repeat(usize::from(u16::MAX) + 1)]).is_none());
    }

    #[test]
    fn counts_and_empty_fields_are_bounded_too() {
        let mut key = KeyBuilder::new(b"test");
        key.count(usize::from(u16::MAX) + 1);
        assert!(key.finish().is_none(), "a count over two bytes");
        // Empty fields are material too: their lengths are hashed.
        let mut key = KeyBuilder::new(b"test");
        key.strings(&vec![String::new(); MAX_KEY_MATERIAL / 2]);
        assert!(key.finish().is_none());
    }
}
