//! `jwt-authn`: verifies RS256/ES256 JWT bearer tokens against configured
//! public keys and maps their claims to a user, like the Kubernetes API
//! server's OIDC authenticator (`--oidc-*` flags). The logic lives in
//! [`logic`], unit-tested on the host target.

mod logic;

wit_bindgen::generate!({
    path: "../../../wit/filter-0.2.0.wit",
    world: "authenticator-filter",
});

use exports::wasmgate::filter::authenticator::{AuthnResult, Guest};
use std::time::{SystemTime, UNIX_EPOCH};
use wasmgate::filter::types::{LogLevel, RequestView, UserInfo};
use wasmgate::filter::{cache, host};

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
        let now = match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => d.as_secs_f64(),
            Err(e) => return AuthnResult::Error(format!("jwt-authn: clock before 1970: {e}")),
        };
        let headers: Vec<(&str, &str)> = request
            .headers
            .iter()
            .map(|h| (h.name.as_str(), h.value.as_str()))
            .collect();
        match logic::authenticate(config, &headers, now) {
            logic::Outcome::Authenticated(user) => {
                // A cached answer must not outlive the token.
                let remaining = (user.accepted_until - now).max(0.0);
                cache::limit_ttl((remaining * 1000.0) as u64);
                if host::log_enabled(LogLevel::Debug) {
                    host::log(
                        LogLevel::Debug,
                        &format!("JWT belongs to user {:?}", user.name),
                    );
                }
                AuthnResult::Authenticated(UserInfo {
                    name: user.name,
                    uid: user.uid,
                    groups: user.groups,
                    extra: Vec::new(),
                })
            }
            logic::Outcome::NoOpinion(why) => {
                if host::log_enabled(LogLevel::Debug) {
                    host::log(LogLevel::Debug, &why);
                }
                AuthnResult::NoOpinion
            }
            logic::Outcome::Error(message) => {
                host::log(LogLevel::Info, &message);
                AuthnResult::Error(message)
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
