//! `compat-0-1-authn`: a test fixture authenticator built against
//! `wasmgate:filter@0.1.0` (`wit/filter.wit`) with wit-bindgen directly, not
//! the SDK (which targets the current contract): the gateway's tests load it
//! to prove a 0.1.0 component still loads, answers, and is cached without a
//! TTL of its own (0.1.0 has no `cache.limit-ttl`). It answers as the
//! request's `x-fault` header says, with `fault-authn`'s words.

wit_bindgen::generate!({
    path: "../../../wit/filter.wit",
    world: "authenticator-filter",
});

use exports::wasmgate::filter::authenticator::{AuthnResult, Guest};
use faults::Fault;
use wasmgate::filter::types::{RequestView, UserInfo};

const NAME: &str = "compat-0-1-authn";

/// The word a request carries: its first `x-fault` header, or none.
fn word(request: &RequestView) -> &str {
    request
        .headers
        .iter()
        .find(|h| h.name == "x-fault")
        .map_or("", |h| h.value.trim())
}

fn authenticated() -> AuthnResult {
    AuthnResult::Authenticated(UserInfo {
        name: NAME.to_owned(),
        uid: String::new(),
        groups: Vec::new(),
        extra: Vec::new(),
    })
}

struct Filter;

impl Guest for Filter {
    fn authenticate(request: RequestView) -> AuthnResult {
        match faults::parse(word(&request)) {
            Fault::Answer("allow" | "authenticated") => authenticated(),
            Fault::Answer(_) => AuthnResult::NoOpinion,
            Fault::Error => AuthnResult::Error(format!("{NAME}: error requested")),
            Fault::Trap => faults::trap(NAME),
            Fault::Loop => faults::spin_forever(),
            Fault::Alloc => faults::exhaust_memory(),
            Fault::Burden(burden) => {
                faults::bear(burden);
                authenticated()
            }
        }
    }
}

export!(Filter);
