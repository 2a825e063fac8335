//! `x509-authn`: the user is the verified client certificate's common name,
//! the groups its organizations, as Kubernetes' `--client-ca-file`
//! authenticator. The logic lives in [`logic`], unit-tested on the host.

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
        let cert = request
            .client_certificate
            .as_ref()
            .map(|c| logic::Certificate {
                common_name: c.common_name.as_deref(),
                organizations: &c.organizations,
            });
        match logic::authenticate(config, cert) {
            logic::Outcome::Authenticated { user, groups } => {
                debug!("client certificate belongs to user {user:?}");
                AuthnResult::Authenticated(UserInfo {
                    name: user,
                    uid: String::new(),
                    groups,
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
