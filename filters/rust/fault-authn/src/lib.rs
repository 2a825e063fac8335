//! `fault-authn`: a test fixture authenticator that answers, fails or
//! misbehaves as the request's `x-fault` header says. See the README.

use faults::Fault;
use serde::Deserialize;
use wasmgate_filter::authenticator::{self, AuthnResult, Guest};
use wasmgate_filter::types::{ExtraValue, RequestView, UserInfo};
use wasmgate_filter::{FilterConfig, headers};

const NAME: &str = "fault-authn";
const HEADER: &str = "x-fault";

/// The filter's `config` table; every key is optional.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default = "default_user")]
    user: String,
    #[serde(default)]
    groups: Vec<String>,
}

fn default_user() -> String {
    NAME.to_owned()
}

impl FilterConfig for Config {
    const FILTER: &'static str = NAME;
}

struct Filter;

/// The word a request carries: its first `x-fault` header, or none.
fn word(request: &RequestView) -> &str {
    headers::first(&request.headers, HEADER).map_or("", str::trim)
}

fn answer(config: &Config, word: &str) -> AuthnResult {
    let user = |groups, extra| {
        AuthnResult::Authenticated(UserInfo {
            name: config.user.clone(),
            uid: String::new(),
            groups,
            extra,
        })
    };
    let count = |prefix: &str| word.strip_prefix(prefix).and_then(|n| n.parse().ok());
    if matches!(word, "allow" | "authenticated") {
        user(config.groups.clone(), Vec::new())
    } else if let Some(count) = count("aliased-groups-") {
        user(aliased_groups(count), Vec::new())
    } else if let Some(count) = count("groups-") {
        user(
            (0..count).map(|n| format!("group-{n}")).collect(),
            Vec::new(),
        )
    } else if let Some(kib) = count("extra-") {
        let blob = ExtraValue {
            key: EXTRA_KEY.to_owned(),
            values: vec!["x".repeat(1024); kib],
        };
        user(config.groups.clone(), vec![blob])
    } else {
        AuthnResult::NoOpinion
    }
}

/// The extra key `extra-<kib>` answers with.
const EXTRA_KEY: &str = "fault.example.io/blob";

/// The most groups `aliased-groups-<n>` answers with.
const MOST_ALIASED_GROUPS: usize = 1024;

/// `aliased-groups-<n>`: `n` groups (at most [`MOST_ALIASED_GROUPS`]) that
/// are all the same 1 MiB of the guest's memory. The component ABI lets
/// list entries share bytes, so a host that copied every entry would copy
/// `n` MiB out of a guest holding one: the gateway must refuse the answer.
///
/// Hostile by design, and so not sound Rust: the strings alias one
/// allocation, and the guest's post-return would free it once per group.
/// The gateway refuses the answer before running the post-return, as
/// wasmtime does when an answer cannot be lifted.
fn aliased_groups(count: usize) -> Vec<String> {
    let shared: &'static mut str = Box::leak("g".repeat(faults::CHUNK).into_boxed_str());
    let (bytes, len) = (shared.as_mut_ptr(), shared.len());
    (0..count.min(MOST_ALIASED_GROUPS))
        // SAFETY: none, on purpose (above); `bytes` holds `len` initialised
        // bytes of UTF-8 for as long as the instance lives.
        .map(|_| unsafe { String::from_raw_parts(bytes, len, len) })
        .collect()
}

impl Guest for Filter {
    fn authenticate(request: RequestView) -> AuthnResult {
        // Parsed on the instance's first call, as the other shipped filters
        // do: a pooled instance then costs little more than the host's own
        // share of a call (bench/filters.rs measures that with it).
        let config = match wasmgate_filter::config::<Config>() {
            Ok(config) => config,
            Err(message) => return AuthnResult::Error(message),
        };
        // No log line on the way: as near to nothing as a filter can do,
        // so that bench/filters.rs measures the host's share of a call.
        match faults::parse(word(&request)) {
            Fault::Answer(word) => answer(config, word),
            Fault::Error => AuthnResult::Error(format!("{NAME}: error requested")),
            Fault::Trap => faults::trap(NAME),
            Fault::Loop => faults::spin_forever(),
            Fault::Alloc => faults::exhaust_memory(),
            Fault::Burden(burden) => {
                faults::bear(burden);
                answer(config, "authenticated")
            }
        }
    }
}

authenticator::export!(Filter);

#[cfg(test)]
mod tests {
    use super::*;
    use wasmgate_filter::types::Header;

    fn view(headers: &[(&str, &str)]) -> RequestView {
        RequestView {
            method: None,
            path: None,
            query: None,
            headers: headers
                .iter()
                .map(|(name, value)| Header {
                    name: (*name).into(),
                    value: (*value).into(),
                })
                .collect(),
            remote_addr: None,
            client_certificate: None,
        }
    }

    #[test]
    fn the_header_is_the_word() {
        assert_eq!(word(&view(&[("x-fault", " trap ")])), "trap");
        assert_eq!(word(&view(&[("authorization", "Bearer x")])), "");
    }

    #[test]
    fn config_and_answers() {
        let config = Config::parse(r#"{"user":"mallory","groups":["g"]}"#).unwrap();
        match answer(&config, "authenticated") {
            AuthnResult::Authenticated(user) => {
                assert_eq!(
                    (user.name.as_str(), user.groups.as_slice()),
                    ("mallory", &["g".to_owned()][..])
                )
            }
            other => panic!("{other:?}"),
        }
        let default = Config::parse("{}").unwrap();
        assert_eq!(default.user, "fault-authn");
        assert!(matches!(
            answer(&default, "no-opinion"),
            AuthnResult::NoOpinion
        ));
        match answer(&config, "groups-3") {
            AuthnResult::Authenticated(user) => {
                assert_eq!(user.groups, ["group-0", "group-1", "group-2"])
            }
            other => panic!("{other:?}"),
        }
        match answer(&config, "extra-2") {
            AuthnResult::Authenticated(user) => {
                assert_eq!(user.extra[0].key, EXTRA_KEY);
                assert_eq!(user.extra[0].values, ["x".repeat(1024), "x".repeat(1024)]);
            }
            other => panic!("{other:?}"),
        }
        assert!(Config::parse(r#"{"usr":"x"}"#).is_err());
        assert!(Config::parse("[]").is_err());
    }
}
