//! `fault-authn`: a test fixture authenticator that answers, fails or
//! misbehaves as the request's `x-fault` header says. See the README.

#[path = "../../fault-authz/src/faults.rs"]
mod faults;

wit_bindgen::generate!({
    path: "../../../wit/filter.wit",
    world: "authenticator-filter",
});

use exports::wasmgate::filter::authenticator::{AuthnResult, Guest};
use faults::Fault;
use serde::Deserialize;
use wasmgate::filter::host;
use wasmgate::filter::types::{LogLevel, RequestView, UserInfo};

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

impl Config {
    fn parse(json: &str) -> Result<Config, String> {
        let value: serde_json::Value =
            serde_json::from_str(json).map_err(|e| format!("{NAME}: bad config: {e}"))?;
        if !value.is_object() {
            return Err(format!(
                "{NAME}: bad config: the config is not a JSON object"
            ));
        }
        serde_json::from_value(value).map_err(|e| format!("{NAME}: bad config: {e}"))
    }
}

struct Filter;

/// The filter's config, parsed on the instance's first call, as the other
/// shipped filters do: a pooled instance then costs little more than the
/// host's own share of a call (bench/filters.rs measures that with it).
fn config() -> Result<&'static Config, String> {
    static CONFIG: std::sync::OnceLock<Result<Config, String>> = std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| Config::parse(&host::config()))
        .as_ref()
        .map_err(Clone::clone)
}

/// The word a request carries: its first `x-fault` header, or none.
fn word(request: &RequestView) -> &str {
    request
        .headers
        .iter()
        .find(|h| h.name == HEADER)
        .map_or("", |h| h.value.trim())
}

fn answer(config: &Config, word: &str) -> AuthnResult {
    match word {
        "allow" | "authenticated" => AuthnResult::Authenticated(UserInfo {
            name: config.user.clone(),
            uid: String::new(),
            groups: config.groups.clone(),
            extra: Vec::new(),
        }),
        _ => AuthnResult::NoOpinion,
    }
}

impl Guest for Filter {
    fn authenticate(request: RequestView) -> AuthnResult {
        let config = match config() {
            Ok(config) => config,
            Err(message) => {
                host::log(LogLevel::Error, &message);
                return AuthnResult::Error(message);
            }
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

export!(Filter);

#[cfg(test)]
mod tests {
    use super::*;
    use wasmgate::filter::types::Header;

    fn view(headers: &[(&str, &str)]) -> RequestView {
        RequestView {
            method: "GET".into(),
            path: "/".into(),
            query: String::new(),
            headers: headers
                .iter()
                .map(|(name, value)| Header {
                    name: (*name).into(),
                    value: (*value).into(),
                })
                .collect(),
            remote_addr: "127.0.0.1:1".into(),
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
        assert!(Config::parse(r#"{"usr":"x"}"#).is_err());
        assert!(Config::parse("[]").is_err());
    }
}
