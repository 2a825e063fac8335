//! Pure logic of `token-authn`: no host calls, so it runs in host-target tests.

use serde::Deserialize;
use wasmgate_filter::FilterConfig;
use wasmgate_filter::headers::{AsHeader, bearer_token};

/// The filter's `config` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub tokens: Vec<TokenEntry>,
}

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
pub enum Outcome {
    Authenticated(TokenEntry),
    /// Why this filter has no opinion (for a debug log line).
    NoOpinion(&'static str),
}

impl PartialEq for TokenEntry {
    fn eq(&self, other: &Self) -> bool {
        self.user == other.user && self.uid == other.uid && self.groups == other.groups
    }
}

/// Compares two byte strings in time that depends only on their lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= core::hint::black_box(x ^ y);
    }
    diff == 0
}

/// Authenticates one request's headers against the configured tokens (the
/// bearer token as Kubernetes reads it). Every configured token is compared,
/// whether or not an earlier one matched.
pub fn authenticate<H: AsHeader>(config: &Config, headers: &[H]) -> Outcome {
    let Some(token) = bearer_token(headers) else {
        return Outcome::NoOpinion("no bearer token in the Authorization header");
    };
    let mut found: Option<&TokenEntry> = None;
    for entry in &config.tokens {
        if constant_time_eq(entry.token.as_bytes(), token.as_bytes()) && found.is_none() {
            found = Some(entry);
        }
    }
    match found {
        Some(entry) => Outcome::Authenticated(entry.clone()),
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

    fn user(name: &str, uid: &str, groups: &[&str]) -> Outcome {
        Outcome::Authenticated(TokenEntry {
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
        let rows: &[(&[(&str, &str)], Outcome)] = &[
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
                Outcome::NoOpinion("unknown bearer token"),
            ),
            (
                &[("authorization", "Bearer s3cre")],
                Outcome::NoOpinion("unknown bearer token"),
            ),
            (
                &[("authorization", "Bearer s3cret2")],
                Outcome::NoOpinion("unknown bearer token"),
            ),
            (
                &[("authorization", "Basic s3cret")],
                Outcome::NoOpinion("no bearer token in the Authorization header"),
            ),
            (
                &[("authorization", "Bearer")],
                Outcome::NoOpinion("no bearer token in the Authorization header"),
            ),
            (
                &[("authorization", "Bearer  s3cret")],
                Outcome::NoOpinion("no bearer token in the Authorization header"),
            ),
            (
                &[("authorization", "")],
                Outcome::NoOpinion("no bearer token in the Authorization header"),
            ),
            (
                &[("x-other", "Bearer s3cret")],
                Outcome::NoOpinion("no bearer token in the Authorization header"),
            ),
            (
                &[],
                Outcome::NoOpinion("no bearer token in the Authorization header"),
            ),
            // The first Authorization header counts, as Go's Header.Get.
            (
                &[
                    ("authorization", "Bearer nope"),
                    ("authorization", "Bearer s3cret"),
                ],
                Outcome::NoOpinion("unknown bearer token"),
            ),
        ];
        for (i, (headers, want)) in rows.iter().enumerate() {
            assert_eq!(&authenticate(&c, headers), want, "row {i}: {headers:?}");
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
    fn constant_time_eq_works() {
        assert!(constant_time_eq(b"", b""));
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
