//! `rbac-authz`: Kubernetes RBAC from the filter's config. The rule matching
//! lives in [`logic`], unit-tested on the host target.

mod logic;

wit_bindgen::generate!({
    path: "../../../wit/filter-0.2.0.wit",
    world: "authorizer-filter",
});

use exports::wasmgate::filter::authorizer::{Attributes, Decision, Guest};
use wasmgate::filter::host;
use wasmgate::filter::types::LogLevel;

struct Filter;

impl Guest for Filter {
    fn authorize(attributes: Attributes) -> Result<Decision, String> {
        let config = match config() {
            Ok(config) => config,
            Err(message) => {
                host::log(LogLevel::Error, &message);
                return Err(message);
            }
        };
        let user = &attributes.user;
        let req = &attributes.request;
        let attrs = logic::Request {
            user: &user.name,
            groups: &user.groups,
            is_resource_request: req.is_resource_request,
            verb: &req.verb,
            api_group: &req.api_group,
            namespace: &req.namespace,
            resource: &req.resource,
            subresource: &req.subresource,
            name: &req.name,
            path: &req.path,
        };
        Ok(match config.authorize(&attrs) {
            logic::Verdict::Allow(grant) => {
                // The decision carries no reason: write it only for a log
                // that keeps it.
                if host::log_enabled(LogLevel::Debug) {
                    host::log(LogLevel::Debug, &grant.to_string());
                }
                Decision::Allow
            }
            logic::Verdict::NoOpinion(reason) => {
                if host::log_enabled(LogLevel::Debug) {
                    host::log(LogLevel::Debug, &reason);
                }
                Decision::NoOpinion(reason)
            }
        })
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
