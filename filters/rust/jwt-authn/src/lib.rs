//! `jwt-authn`: verifies RS256/ES256 JWT bearer tokens against configured
//! public keys and maps their claims to a user, like the Kubernetes API
//! server's OIDC authenticator (`--oidc-*` flags). The logic lives in
//! [`logic`], unit-tested on the host target.

mod logic;

use std::time::{SystemTime, UNIX_EPOCH};
use wasmgate_filter::authenticator::{self, AuthnResult, Guest};
use wasmgate_filter::types::{RequestView, UserInfo};
use wasmgate_filter::{cache, debug, info};

struct Filter;

impl Guest for Filter {
    fn authenticate(request: RequestView) -> AuthnResult {
        let config = match wasmgate_filter::config::<logic::Config>() {
            Ok(config) => config,
            Err(message) => return AuthnResult::Error(message),
        };
        let now = match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => d.as_secs_f64(),
            Err(e) => return AuthnResult::Error(format!("jwt-authn: clock before 1970: {e}")),
        };
        match logic::authenticate(config, &request.headers, now) {
            logic::Outcome::Authenticated(user) => {
                // A cached answer must not outlive the token.
                let remaining = (user.accepted_until - now).max(0.0);
                cache::limit_ttl((remaining * 1000.0) as u64);
                debug!("JWT belongs to user {:?}", user.name);
                AuthnResult::Authenticated(UserInfo {
                    name: user.name,
                    uid: user.uid,
                    groups: user.groups,
                    extra: Vec::new(),
                })
            }
            logic::Outcome::NoOpinion(why) => {
                debug!("{why}");
                AuthnResult::NoOpinion
            }
            logic::Outcome::Error(message) => {
                info!("{message}");
                AuthnResult::Error(message)
            }
        }
    }
}

authenticator::export!(Filter);
