//! `token-authn`: static bearer tokens, like the Kubernetes API server's
//! `--token-auth-file`. The logic lives in [`logic`] and is unit-tested on the
//! host target; this file only converts between WIT types and calls the host.

mod logic;

wit_bindgen::generate!({
    path: "../../../wit/filter-0.2.0.wit",
    world: "authenticator-filter",
});

use exports::wasmgate::filter::authenticator::{AuthnResult, Guest};
use wasmgate::filter::host;
use wasmgate::filter::types::{LogLevel, RequestView, UserInfo};

struct Filter;

impl Guest for Filter {
    fn authenticate(request: RequestView) -> AuthnResult {
        let config = match config() {
            Ok(config) => config,
            Err(message) => {
                host::log(LogLevel::Error, &message);
                return AuthnResult::Error(message);
            }
        };
        let headers: Vec<(&str, &str)> = request
            .headers
            .iter()
            .map(|h| (h.name.as_str(), h.value.as_str()))
            .collect();
        match logic::authenticate(config, &headers) {
            logic::Outcome::Authenticated(user) => {
                host::log(
                    LogLevel::Debug,
                    &format!("token belongs to user {:?}", user.user),
                );
                AuthnResult::Authenticated(UserInfo {
                    name: user.user,
                    uid: user.uid,
                    groups: user.groups,
                    extra: Vec::new(),
                })
            }
            logic::Outcome::NoOpinion(why) => {
                host::log(LogLevel::Debug, why);
                AuthnResult::NoOpinion
            }
        }
    }
}

/// The filter's config, parsed on the instance's first call: a pooled
/// instance serves many calls, all with the same config (a reload makes
/// new instances).
fn config() -> Result<&'static logic::Config, String> {
    static CONFIG: std::sync::OnceLock<Result<logic::Config, String>> = std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| logic::Config::parse(&host::config()))
        .as_ref()
        .map_err(Clone::clone)
}

export!(Filter);
