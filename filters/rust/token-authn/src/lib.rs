//! `token-authn`: static bearer tokens, like the Kubernetes API server's
//! `--token-auth-file`. The logic lives in [`logic`] and is unit-tested on the
//! host target; this file only converts between WIT types and calls the host.

mod logic;

use wasmgate_filter::authenticator::{self, AuthnResult, Guest};
use wasmgate_filter::debug;
use wasmgate_filter::types::{RequestView, UserInfo};

struct Filter;

impl Guest for Filter {
    fn authenticate(request: RequestView) -> AuthnResult {
        let config = match wasmgate_filter::config::<logic::Config>() {
            Ok(config) => config,
            Err(message) => return AuthnResult::Error(message),
        };
        match logic::authenticate(config, &request.headers) {
            logic::Outcome::Authenticated(entry) => {
                debug!("token belongs to user {:?}", entry.user);
                AuthnResult::Authenticated(UserInfo {
                    name: entry.user.clone(),
                    uid: entry.uid.clone(),
                    groups: entry.groups.clone(),
                    extra: Vec::new(),
                })
            }
            logic::Outcome::NoOpinion(why) => {
                debug!("{why}");
                AuthnResult::NoOpinion
            }
        }
    }
}

authenticator::export!(Filter);
