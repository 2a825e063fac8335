//! `rbac-authz`: Kubernetes RBAC from the filter's config. The rule matching
//! lives in [`logic`], unit-tested on the host target.

mod logic;

use wasmgate_filter::authorizer::{self, Attributes, Decision, Guest};
use wasmgate_filter::debug;

struct Filter;

impl Guest for Filter {
    fn authorize(attributes: Attributes) -> Result<Decision, String> {
        let config = wasmgate_filter::config::<logic::Config>()?;
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
                debug!("{grant}");
                Decision::Allow
            }
            logic::Verdict::NoOpinion(reason) => {
                debug!("{reason}");
                Decision::NoOpinion(reason)
            }
        })
    }
}

authorizer::export!(Filter);
