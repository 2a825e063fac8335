//! `compat-0-2-admission`: a test fixture admission filter built against
//! `wasmgate:filter@0.2.0` (`wit/filter-0.2.0.wit`) with wit-bindgen
//! directly, not the SDK (which targets the current contract): the gateway's
//! tests load it to prove a 0.2.0 admission filter still loads and decides,
//! on 0.2.0's `admission-request` (`request` and `user` always there, the
//! request info's fields plain strings, and `parts`), which the gateway
//! fills from 0.3.0's. It answers as the object's `metadata.name` says:
//! `deny`, `attributes` (a denial whose message spells out the request info
//! and the user it was given), `error` (its error outcome), anything else
//! allowed.

wit_bindgen::generate!({
    path: "../../../wit/filter-0.2.0.wit",
    world: "admission-filter",
});

use exports::wasmgate::filter::admission::{AdmissionRequest, AdmissionResponse, Guest};
use wasmgate::filter::types::Status;

const NAME: &str = "compat-0-2-admission";

/// The object's `metadata.name`, told without a JSON parser: the fixture's
/// objects are `{"metadata":{"name":"<word>"}}`, so the word is what
/// follows `"name":"` up to the next quote.
fn word(object: Option<&str>) -> &str {
    object
        .and_then(|object| object.split_once("\"name\":\""))
        .and_then(|(_, rest)| rest.split_once('"'))
        .map_or("", |(word, _)| word)
}

/// The request info and the user, `key=value` separated by spaces.
fn spelled_out(request: &AdmissionRequest) -> String {
    let info = &request.request;
    let user = &request.user;
    [
        ("verb", info.verb.clone()),
        ("api-prefix", info.api_prefix.clone()),
        ("api-group", info.api_group.clone()),
        ("api-version", info.api_version.clone()),
        ("namespace", info.namespace.clone()),
        ("resource", info.resource.clone()),
        ("parts", info.parts.join("/")),
        ("label-selector", info.label_selector.clone()),
        ("user", user.name.clone()),
        ("groups", user.groups.join(",")),
    ]
    .map(|(key, value)| format!("{key}={value}"))
    .join(" ")
}

fn denied(message: String) -> AdmissionResponse {
    AdmissionResponse::Denied(Status {
        code: 403,
        reason: "Forbidden".into(),
        message,
    })
}

struct Filter;

impl Guest for Filter {
    fn admit(request: AdmissionRequest) -> Result<AdmissionResponse, String> {
        match word(request.object.as_deref()) {
            "deny" => Ok(denied(format!("{NAME}: deny requested"))),
            "attributes" => Ok(denied(spelled_out(&request))),
            "error" => Err(format!("{NAME}: error requested")),
            _ => Ok(AdmissionResponse::Allowed),
        }
    }
}

export!(Filter);
