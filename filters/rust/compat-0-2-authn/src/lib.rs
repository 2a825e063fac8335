//! `compat-0-2-authn`: a test fixture authenticator built against
//! `wasmgate:filter@0.2.0` (`wit/filter-0.2.0.wit`) with wit-bindgen
//! directly, not the SDK (which targets the current contract): the gateway's
//! tests load it to prove a 0.2.0 authenticator still loads and decides, on
//! 0.2.0's `request-view` (`method`, `path`, `query`, `remote-addr` plain
//! strings), which the gateway fills from 0.3.0's options. It answers as
//! header `x-compat` says: `user` authenticates `compat-0-2-authn`,
//! `attributes` a user named after every field it was given, `error` is its
//! error outcome, anything else (or no header) no opinion.

wit_bindgen::generate!({
    path: "../../../wit/filter-0.2.0.wit",
    world: "authenticator-filter",
});

use exports::wasmgate::filter::authenticator::{AuthnResult, Guest, RequestView, UserInfo};

const NAME: &str = "compat-0-2-authn";

/// The first value of header `name` (the host gives names lower-case).
fn header<'a>(request: &'a RequestView, name: &str) -> Option<&'a str> {
    request
        .headers
        .iter()
        .find(|header| header.name == name)
        .map(|header| header.value.as_str())
}

/// Every field of the request view but the headers, `key=value` separated
/// by spaces.
fn spelled_out(request: &RequestView) -> String {
    [
        ("method", request.method.as_str()),
        ("path", request.path.as_str()),
        ("query", request.query.as_str()),
        ("remote-addr", request.remote_addr.as_str()),
    ]
    .map(|(key, value)| format!("{key}={value}"))
    .join(" ")
}

fn user(name: String) -> AuthnResult {
    AuthnResult::Authenticated(UserInfo {
        name,
        uid: String::new(),
        groups: Vec::new(),
        extra: Vec::new(),
    })
}

struct Filter;

impl Guest for Filter {
    fn authenticate(request: RequestView) -> AuthnResult {
        match header(&request, "x-compat") {
            Some("user") => user(NAME.to_owned()),
            Some("attributes") => user(spelled_out(&request)),
            Some("error") => AuthnResult::Error(format!("{NAME}: error requested")),
            _ => AuthnResult::NoOpinion,
        }
    }
}

export!(Filter);
