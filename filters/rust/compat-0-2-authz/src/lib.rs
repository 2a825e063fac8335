//! `compat-0-2-authz`: a test fixture authorizer built against
//! `wasmgate:filter@0.2.0` (`wit/filter-0.2.0.wit`) with wit-bindgen
//! directly, not the SDK (which targets the current contract): the gateway's
//! tests load it to prove a 0.2.0 component still loads and decides, on
//! 0.2.0's `request-info` (every field a plain string, and `parts`), which
//! the gateway fills from 0.3.0's. It answers as the last segment of the
//! request path says: `allow`, `deny`, `attributes` (a denial whose reason
//! spells out every attribute it was given), anything else no opinion.

wit_bindgen::generate!({
    path: "../../../wit/filter-0.2.0.wit",
    world: "authorizer-filter",
});

use exports::wasmgate::filter::authorizer::{Attributes, Decision, Guest};

const NAME: &str = "compat-0-2-authz";

/// Every attribute, `key=value` separated by spaces.
fn spelled_out(attributes: &Attributes) -> String {
    let request = &attributes.request;
    let user = &attributes.user;
    [
        ("user", user.name.clone()),
        ("groups", user.groups.join(",")),
        ("resource-request", request.is_resource_request.to_string()),
        ("verb", request.verb.clone()),
        ("api-prefix", request.api_prefix.clone()),
        ("api-group", request.api_group.clone()),
        ("api-version", request.api_version.clone()),
        ("namespace", request.namespace.clone()),
        ("resource", request.resource.clone()),
        ("name", request.name.clone()),
        ("parts", request.parts.join("/")),
        ("label-selector", request.label_selector.clone()),
        ("field-selector", request.field_selector.clone()),
    ]
    .map(|(key, value)| format!("{key}={value}"))
    .join(" ")
}

struct Filter;

impl Guest for Filter {
    fn authorize(attributes: Attributes) -> Result<Decision, String> {
        let word = attributes.request.path.rsplit('/').next().unwrap_or("");
        Ok(match word {
            "allow" => Decision::Allow,
            "deny" => Decision::Deny(format!("{NAME}: deny requested")),
            "attributes" => Decision::Deny(spelled_out(&attributes)),
            _ => Decision::NoOpinion(format!("{NAME}: no opinion on {word:?}")),
        })
    }
}

export!(Filter);
