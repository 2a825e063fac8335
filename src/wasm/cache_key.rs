//! What a filter's decision-cache key is made of (`crate::decision_cache`).
//!
//! * An authenticator: the request headers it sees (those its `headers`
//!   lists, or every header when it lists none) and the fingerprint of the
//!   verified client certificate chain when there is one. Enabling `cache`
//!   for an authenticator says its answer depends on nothing else (kube's
//!   cached token authenticator keys by the token alone): not the method,
//!   path, query or client address its view also carries.
//! * An authorizer: the user (name, uid, groups, extra) and every request
//!   attribute it is given (those its `reads` leaves out are not), as kube's
//!   webhook authorizer keys by the whole SubjectAccessReview spec.

use sha2::{Digest, Sha256};

use super::bindings::types::{ClientCertificate, RequestInfo, RequestView, UserInfo};
use crate::decision_cache::{Key, KeyBuilder};

/// An authenticator's key; None when the headers are over the 10 KB of
/// key material a cache takes.
pub fn authentication(view: &RequestView) -> Option<Key> {
    let mut key = KeyBuilder::new(b"authentication");
    key.count(view.headers.len());
    for header in &view.headers {
        key.bytes(header.name.as_bytes());
        key.bytes(header.value.as_bytes());
    }
    match &view.client_certificate {
        Some(certificate) => key.bytes(&fingerprint(certificate)),
        None => key.bytes(b""),
    }
    key.finish()
}

/// The chain's SHA-256, so that a long chain counts as 32 bytes of key
/// material: the listener verified it, it is no attacker's bulk.
fn fingerprint(certificate: &ClientCertificate) -> [u8; 32] {
    let mut digest = Sha256::new();
    for der in &certificate.chain_der {
        digest.update((der.len() as u64).to_le_bytes());
        digest.update(der);
    }
    digest.finalize().into()
}

/// An authorizer's key; None when the attributes are over 10 KB.
pub fn authorization(user: &UserInfo, request: &RequestInfo) -> Option<Key> {
    let mut key = KeyBuilder::new(b"authorization");
    key.bytes(user.name.as_bytes());
    key.bytes(user.uid.as_bytes());
    key.strings(&user.groups);
    key.count(user.extra.len());
    for extra in &user.extra {
        key.bytes(extra.key.as_bytes());
        key.strings(&extra.values);
    }
    key.bytes(&[u8::from(request.is_resource_request)]);
    for field in [
        &request.path,
        &request.verb,
        &request.api_group,
        &request.namespace,
        &request.resource,
        &request.subresource,
        &request.name,
    ] {
        key.bytes(field.as_bytes());
    }
    // The options the filter reads (a filter is given the same ones on every
    // call, so an absent one and an empty one never meet in one cache).
    for field in [
        &request.api_prefix,
        &request.api_version,
        &request.label_selector,
        &request.field_selector,
    ] {
        key.bytes(field.as_deref().unwrap_or("").as_bytes());
    }
    key.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision_cache::key::MAX_KEY_MATERIAL;
    use crate::wasm::bindings::types::Header;

    fn view(token: &str) -> RequestView {
        RequestView {
            method: Some("GET".into()),
            path: Some("/".into()),
            query: Some(String::new()),
            headers: vec![Header {
                name: "authorization".into(),
                value: format!("Bearer {token}"),
            }],
            remote_addr: Some("127.0.0.1:1".into()),
            client_certificate: None,
        }
    }

    #[test]
    fn authentication_keys_are_the_credential_alone() {
        assert_eq!(authentication(&view("a")), authentication(&view("a")));
        assert_ne!(authentication(&view("a")), authentication(&view("b")));
        let mut elsewhere = view("a");
        elsewhere.path = Some("/elsewhere".into());
        elsewhere.remote_addr = Some("127.0.0.1:2".into());
        assert_eq!(authentication(&elsewhere), authentication(&view("a")));
        assert!(authentication(&view(&"x".repeat(MAX_KEY_MATERIAL))).is_none());
    }

    #[test]
    fn authorization_keys_keep_groups_apart() {
        let request = crate::wasm::convert::request_info(
            &crate::request_info::RequestInfo::resolve(
                &http::Method::GET,
                "/api/v1/namespaces/default/pods",
                None,
            ),
            crate::config::stages::Reads::ALL,
        );
        let user = |groups: &[&str]| UserInfo {
            name: "alice".into(),
            uid: String::new(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            extra: Vec::new(),
        };
        assert_ne!(
            authorization(&user(&["ab"]), &request),
            authorization(&user(&["a", "b"]), &request)
        );
        assert_eq!(
            authorization(&user(&["a"]), &request),
            authorization(&user(&["a"]), &request)
        );
    }
}
