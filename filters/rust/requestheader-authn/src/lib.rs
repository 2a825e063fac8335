//! `requestheader-authn`: the user a front proxy names in `X-Remote-User`,
//! `X-Remote-Uid`, `X-Remote-Group` and `X-Remote-Extra-<key>`, trusted only
//! on a connection whose verified client certificate is the front proxy's
//! (issued by `client_ca`, and with a CN in `allowed_names` when that is
//! set), as Kubernetes' `--requestheader-client-ca-file` authenticator.
//! Any other request gets no opinion. The logic lives in [`logic`],
//! unit-tested on the host.

mod logic;

use wasmgate_filter::authenticator::{self, AuthnResult, Guest};
use wasmgate_filter::debug;
use wasmgate_filter::types::{ExtraValue, RequestView, UserInfo};

struct Filter;

impl Guest for Filter {
    fn authenticate(request: RequestView) -> AuthnResult {
        let config = match wasmgate_filter::config::<logic::Config>() {
            Ok(config) => config,
            Err(message) => return AuthnResult::Error(message),
        };
        let chain = request
            .client_certificate
            .as_ref()
            .map(|cert| cert.chain_der.as_slice());
        match logic::authenticate(config, chain, &request.headers) {
            logic::Outcome::Authenticated {
                user,
                uid,
                groups,
                extra,
            } => {
                debug!("the front proxy names user {user:?}");
                AuthnResult::Authenticated(UserInfo {
                    name: user,
                    uid,
                    groups,
                    extra: extra
                        .into_iter()
                        .map(|(key, values)| ExtraValue { key, values })
                        .collect(),
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
