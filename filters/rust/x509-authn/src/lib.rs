//! `x509-authn`: the user is the verified client certificate's common name,
//! the groups its organizations, as Kubernetes' `--client-ca-file`
//! authenticator. The logic lives in [`logic`], unit-tested on the host.

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
        let cert = request
            .client_certificate
            .as_ref()
            .map(|c| logic::Certificate {
                common_name: c.common_name.as_deref(),
                organizations: &c.organizations,
            });
        match logic::authenticate(config, cert) {
            logic::Outcome::Authenticated { user, groups } => {
                host::log(
                    LogLevel::Debug,
                    &format!("client certificate belongs to user {user:?}"),
                );
                AuthnResult::Authenticated(UserInfo {
                    name: user,
                    uid: String::new(),
                    groups,
                    extra: Vec::new(),
                })
            }
            logic::Outcome::NoOpinion(why) => {
                host::log(LogLevel::Debug, &why);
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
