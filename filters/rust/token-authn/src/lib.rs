//! `token-authn`: static bearer tokens, like the Kubernetes API server's
//! `--token-auth-file`. The logic lives in [`logic`] and is unit-tested on the
//! host target; this file only converts between WIT types and calls the host.

mod logic;

wit_bindgen::generate!({
    path: "../../../wit",
    world: "authenticator-filter",
});

use exports::wasmgate::filter::authenticator::{AuthnResult, Guest};
use wasmgate::filter::host;
use wasmgate::filter::types::{LogLevel, RequestView, UserInfo};

struct Filter;

impl Guest for Filter {
    fn authenticate(request: RequestView) -> AuthnResult {
        let config = match logic::Config::parse(&host::config()) {
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
        match logic::authenticate(&config, &headers) {
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

export!(Filter);
