//! Pure logic of `token-authn`: no host calls, so it runs in host-target tests.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use nohash_hasher::{BuildNoHashHasher, IsEnabled};

use serde::Deserialize;
use siphasher::sip128::{Hasher128, SipHasher13};
use wasmgate_filter::FilterConfig;
use wasmgate_filter::headers::{AsHeader, bearer_token};

/// The filter's `config` table, with its tokens indexed by their keyed
/// digest (made once per instance, when the config is parsed).
///
/// kube's token file authenticator looks the token up in a map keyed by the
/// token itself (`staging/src/k8s.io/apiserver/pkg/authentication/token/tokenfile/tokenfile.go`).
/// Here the key is the token's SipHash-1-3 (128 bits) under a key drawn at
/// random for each instance: a look-up costs the same with 2 tokens or
/// 10,000, and the only comparisons whose time depends on the secret are of
/// digests a caller cannot compute, so they tell it nothing about the
/// tokens. A keyed hash gives that for a few hundred instructions, where
/// SHA-256 took thousands, and about 15 KB of compiled code a call runs
/// through. The digests are already uniform and unknown to callers, so the
/// index takes a digest's low 64 bits as its hash (`nohash-hasher`) rather
/// than hashing it again with SipHash under std's `RandomState`.
#[derive(Debug, Deserialize)]
#[serde(try_from = "RawConfig")]
pub struct Config {
    tokens: Vec<TokenEntry>,
    key: DigestKey,
    /// Index into `tokens` by digest.
    by_digest: HashMap<Digest, usize, BuildNoHashHasher<Digest>>,
}

/// The `config` table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    tokens: Vec<TokenEntry>,
}

impl TryFrom<RawConfig> for Config {
    type Error = String;

    fn try_from(RawConfig { tokens }: RawConfig) -> Result<Self, String> {
        let key = DigestKey::random()?;
        let mut by_digest =
            HashMap::with_capacity_and_hasher(tokens.len(), BuildNoHashHasher::default());
        for (index, entry) in tokens.iter().enumerate() {
            // A token listed twice: the first entry counts.
            by_digest.entry(key.digest(&entry.token)).or_insert(index);
        }
        Ok(Config {
            tokens,
            key,
            by_digest,
        })
    }
}

/// The secret key of the tokens' digests: 128 random bits.
#[derive(Debug)]
struct DigestKey([u8; 16]);

impl DigestKey {
    fn random() -> Result<Self, String> {
        let mut key = [0; 16];
        getrandom::fill(&mut key).map_err(|error| format!("no random key: {error}"))?;
        Ok(DigestKey(key))
    }

    fn digest(&self, token: &str) -> Digest {
        let mut hasher = SipHasher13::new_with_key(&self.0);
        hasher.write(token.as_bytes());
        Digest(hasher.finish128().as_u128())
    }
}

/// A token's keyed digest: compared whole, hashed by its low 64 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Digest(u128);

impl Hash for Digest {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // One `write_u64`, as `IsEnabled` requires.
        state.write_u64(self.0 as u64);
    }
}

impl IsEnabled for Digest {}

/// One line of a Kubernetes token file: `token,user,uid,"group1,group2"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenEntry {
    pub token: String,
    pub user: String,
    #[serde(default)]
    pub uid: String,
    #[serde(default)]
    pub groups: Vec<String>,
}

impl FilterConfig for Config {
    const FILTER: &'static str = "token-authn";

    fn check(&self) -> Result<(), String> {
        for (i, entry) in self.tokens.iter().enumerate() {
            if entry.token.is_empty() {
                return Err(format!("tokens[{i}].token is empty"));
            }
            if entry.token.chars().any(char::is_whitespace) {
                return Err(format!("tokens[{i}].token contains whitespace"));
            }
            if entry.user.is_empty() {
                return Err(format!("tokens[{i}].user is empty"));
            }
        }
        Ok(())
    }
}

#[derive(Debug, PartialEq)]
pub enum Outcome<'a> {
    /// The token's entry, lent: the answer copies only the user out of it.
    Authenticated(&'a TokenEntry),
    /// Why this filter has no opinion (for a debug log line).
    NoOpinion(&'static str),
}

impl PartialEq for TokenEntry {
    fn eq(&self, other: &Self) -> bool {
        self.user == other.user && self.uid == other.uid && self.groups == other.groups
    }
}

/// Authenticates one request's headers against the configured tokens (the
/// bearer token as Kubernetes reads it), looked up by its keyed digest.
pub fn authenticate<'a, H: AsHeader>(config: &'a Config, headers: &[H]) -> Outcome<'a> {
    let Some(token) = bearer_token(headers) else {
        return Outcome::NoOpinion("no bearer token in the Authorization header");
    };
    match config.by_digest.get(&config.key.digest(token)) {
        Some(&index) => Outcome::Authenticated(&config.tokens[index]),
        None => Outcome::NoOpinion("unknown bearer token"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config::parse(
            r#"{"tokens": [
                {"token": "s3cret", "user": "alice", "uid": "1", "groups": ["dev", "ops"]},
                {"token": "other", "user": "bob"}
            ]}"#,
        )
        .unwrap()
    }

    /// What `authenticate` answered, owned, to compare with a row.
    type Answer = Result<TokenEntry, &'static str>;

    fn answer(outcome: Outcome<'_>) -> Answer {
        match outcome {
            Outcome::Authenticated(entry) => Ok(entry.clone()),
            Outcome::NoOpinion(why) => Err(why),
        }
    }

    fn user(name: &str, uid: &str, groups: &[&str]) -> Answer {
        Ok(TokenEntry {
            token: String::new(),
            user: name.into(),
            uid: uid.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        })
    }

    #[test]
    fn table() {
        let c = config();
        let alice = user("alice", "1", &["dev", "ops"]);
        let rows: &[(&[(&str, &str)], Answer)] = &[
            (&[("authorization", "Bearer s3cret")], alice),
            (
                &[("authorization", "bearer s3cret")],
                user("alice", "1", &["dev", "ops"]),
            ),
            (
                &[("authorization", "BEARER s3cret")],
                user("alice", "1", &["dev", "ops"]),
            ),
            (
                &[("authorization", "  Bearer s3cret  ")],
                user("alice", "1", &["dev", "ops"]),
            ),
            // A third space-separated part is ignored, as kube does.
            (
                &[("authorization", "Bearer s3cret extra")],
                user("alice", "1", &["dev", "ops"]),
            ),
            (&[("authorization", "Bearer other")], user("bob", "", &[])),
            (
                &[("authorization", "Bearer nope")],
                Err("unknown bearer token"),
            ),
            (
                &[("authorization", "Bearer s3cre")],
                Err("unknown bearer token"),
            ),
            (
                &[("authorization", "Bearer s3cret2")],
                Err("unknown bearer token"),
            ),
            (
                &[("authorization", "Basic s3cret")],
                Err("no bearer token in the Authorization header"),
            ),
            (
                &[("authorization", "Bearer")],
                Err("no bearer token in the Authorization header"),
            ),
            (
                &[("authorization", "Bearer  s3cret")],
                Err("no bearer token in the Authorization header"),
            ),
            (
                &[("authorization", "")],
                Err("no bearer token in the Authorization header"),
            ),
            (
                &[("x-other", "Bearer s3cret")],
                Err("no bearer token in the Authorization header"),
            ),
            (&[], Err("no bearer token in the Authorization header")),
            // The first Authorization header counts, as Go's Header.Get.
            (
                &[
                    ("authorization", "Bearer nope"),
                    ("authorization", "Bearer s3cret"),
                ],
                Err("unknown bearer token"),
            ),
        ];
        for (i, (headers, want)) in rows.iter().enumerate() {
            assert_eq!(
                &answer(authenticate(&c, headers)),
                want,
                "row {i}: {headers:?}"
            );
        }
    }

    #[test]
    fn bad_configs() {
        for bad in [
            "",
            "[]",
            "{}",
            r#"{"tokens": [{"token": "", "user": "a"}]}"#,
            r#"{"tokens": [{"token": "x", "user": ""}]}"#,
            r#"{"tokens": [{"token": "a b", "user": "a"}]}"#,
            r#"{"tokens": [{"token": "x", "user": "a", "group": ["typo"]}]}"#,
            r#"{"tokens": [{"token": 1, "user": "a"}]}"#,
        ] {
            let err = Config::parse(bad).unwrap_err();
            assert!(err.starts_with("token-authn: bad config: "), "{bad}: {err}");
        }
        assert!(Config::parse(r#"{"tokens": []}"#).is_ok());
    }

    #[test]
    fn each_config_keys_its_digests_at_random() {
        let (one, other) = (config(), config());
        assert_ne!(one.key.digest("s3cret"), other.key.digest("s3cret"));
        assert_ne!(one.key.digest("s3cret"), one.key.digest("s3cret2"));
        assert_eq!(one.key.digest("s3cret"), one.key.digest("s3cret"));
    }

    #[test]
    fn a_token_listed_twice_is_the_first_entry() {
        let c = Config::parse(
            r#"{"tokens": [
                {"token": "same", "user": "first"},
                {"token": "same", "user": "second"}
            ]}"#,
        )
        .unwrap();
        let headers = [("authorization", "Bearer same")];
        assert_eq!(answer(authenticate(&c, &headers)), user("first", "", &[]));
        // With other tokens between the two.
        let between: Vec<String> = (0..50)
            .map(|i| format!(r#"{{"token": "t{i}", "user": "u{i}"}}"#))
            .collect();
        let c = Config::parse(&format!(
            r#"{{"tokens": [{{"token": "same", "user": "first"}}, {}, {{"token": "same", "user": "second"}}]}}"#,
            between.join(",")
        ))
        .unwrap();
        assert_eq!(answer(authenticate(&c, &headers)), user("first", "", &[]));
    }

    #[test]
    fn every_one_of_ten_thousand_tokens_is_found_and_no_other() {
        let entries: Vec<String> = (0..10_000)
            .map(|i| format!(r#"{{"token": "user-{i:04}-token", "user": "user-{i}"}}"#))
            .collect();
        let c = Config::parse(&format!(r#"{{"tokens": [{}]}}"#, entries.join(","))).unwrap();
        for i in (0..10_000).step_by(997).chain([9_999]) {
            let bearer = format!("Bearer user-{i:04}-token");
            let headers = [("authorization", bearer.as_str())];
            assert_eq!(
                answer(authenticate(&c, &headers)),
                user(&format!("user-{i}"), "", &[])
            );
        }
        let headers = [("authorization", "Bearer user-10000-token")];
        assert_eq!(
            answer(authenticate(&c, &headers)),
            Err("unknown bearer token")
        );
    }
}
