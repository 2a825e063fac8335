//! What a filter's decision-cache key is made of (`crate::decision_cache`).
//!
//! Each key holds all a filter is given, as kube's caches key by all they
//! send their webhook (the token and its audiences, the whole
//! SubjectAccessReview spec): two requests the filter could answer apart
//! never share one.
//!
//! * An authenticator: the request headers it sees (those its `headers`
//!   lists, or every header when it lists none), the fingerprint of the
//!   verified client certificate chain when there is one, and the method,
//!   path, query and client address when its `reads` gives them to it (a
//!   filter without `reads` is given every one: `reads = []` is what lets a
//!   credential's answer serve every path and every connection).
//! * An authorizer: the user (name, uid, groups, extra) and every request
//!   attribute it is given (those its `reads` leaves out are not).

use sha2::{Digest, Sha256};

use rustls::pki_types::CertificateDer;

use super::convert;
use crate::config::stages::{ReadField, Reads, RequestHeaders};
use crate::context::RequestContext;
use crate::decision_cache::{Key, KeyBuilder};
use crate::{context, request_info};

/// An authenticator's key; None when the headers are over the 10 KB of
/// key material a cache takes. Made from the request itself, before (and, on
/// a hit, instead of) the view the filter would be given: the fields `reads`
/// gives it, the headers `selected` lets through, as sent, and the verified
/// chain's fingerprint.
pub fn authentication(
    request: &http::request::Parts,
    selected: &RequestHeaders,
    reads: Reads,
) -> Option<Key> {
    let mut key = KeyBuilder::new(b"authentication");
    options(&mut key, reads, convert::view_options(request));
    let headers = || {
        request
            .headers
            .iter()
            .filter(|(name, _)| selected.includes(name))
    };
    key.count(headers().count());
    for (name, value) in headers() {
        key.bytes(name.as_str().as_bytes());
        key.bytes(value.as_bytes());
    }
    let chain = RequestContext::of(&request.extensions)
        .connection
        .as_ref()
        .and_then(|connection| connection.client_chain.as_deref());
    match chain {
        Some(chain) => key.bytes(&fingerprint(chain)),
        None => key.bytes(b""),
    }
    key.finish()
}

/// The chain's SHA-256, so that a long chain counts as 32 bytes of key
/// material: the listener verified it, it is no attacker's bulk.
fn fingerprint(chain: &[CertificateDer<'_>]) -> [u8; 32] {
    let mut digest = Sha256::new();
    for der in chain {
        digest.update((der.len() as u64).to_le_bytes());
        digest.update(der);
    }
    digest.finalize().into()
}

/// An authorizer's key; None when the attributes are over 10 KB. It is made
/// from the gateway's own user and request info, before (and, on a hit,
/// instead of) the records the filter would be given: `reads` leaves out of
/// the key exactly what [`super::convert::request_info`] leaves out of the record.
pub fn authorization(
    user: &context::UserInfo,
    request: &request_info::RequestInfo,
    reads: Reads,
) -> Option<Key> {
    let mut key = KeyBuilder::new(b"authorization");
    key.bytes(user.name.as_bytes());
    key.bytes(user.uid.as_bytes());
    key.strings(&user.groups);
    key.count(user.extra.len());
    for (extra, values) in &user.extra {
        key.bytes(extra.as_bytes());
        key.strings(values);
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
    options(&mut key, reads, convert::info_options(request));
    key.finish()
}

/// The optional fields the filter reads, as it is given them. A filter is
/// given the same ones on every call, so an absent one and an empty one
/// never meet in one cache.
fn options(key: &mut KeyBuilder, reads: Reads, options: [(ReadField, &str); 4]) {
    for (field, value) in options {
        key.bytes(if reads.includes(field) {
            value.as_bytes()
        } else {
            b""
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::ConnectionInfo;
    use crate::decision_cache::key::MAX_KEY_MATERIAL;

    fn request(token: &str, path: &str, remote: &str) -> http::request::Parts {
        let mut request = http::Request::get(path)
            .header("authorization", format!("Bearer {token}"))
            .header("user-agent", "test")
            .body(())
            .expect("a valid request");
        let remote = remote.parse().expect("an address");
        RequestContext::learn(request.extensions_mut()).connection =
            Some(ConnectionInfo::new(remote, false, None).into());
        request.into_parts().0
    }

    #[test]
    fn authentication_keys_are_what_the_filter_is_given() {
        let only = RequestHeaders::Only(vec![http::header::AUTHORIZATION]);
        let nothing: Reads = std::iter::empty().collect();
        let key = |token: &str, path: &str, remote: &str| {
            authentication(&request(token, path, remote), &only, nothing)
        };
        assert_eq!(key("a", "/", "127.0.0.1:1"), key("a", "/", "127.0.0.1:1"));
        assert_ne!(key("a", "/", "127.0.0.1:1"), key("b", "/", "127.0.0.1:1"));
        assert_eq!(
            key("a", "/elsewhere", "127.0.0.1:2"),
            key("a", "/", "127.0.0.1:1")
        );
        assert!(key(&"x".repeat(MAX_KEY_MATERIAL), "/", "127.0.0.1:1").is_none());
        // With every header seen, another header is another key.
        let all = authentication(
            &request("a", "/", "127.0.0.1:1"),
            &RequestHeaders::All,
            nothing,
        );
        assert_ne!(all, key("a", "/", "127.0.0.1:1"));
        // A field the filter reads is in its key; one it does not is not.
        let path: Reads = [ReadField::Path].into_iter().collect();
        let reading = |reads, path: &str, remote: &str| {
            authentication(&request("a", path, remote), &only, reads)
        };
        assert_ne!(
            reading(path, "/elsewhere", "127.0.0.1:1"),
            reading(path, "/", "127.0.0.1:1")
        );
        assert_eq!(
            reading(path, "/", "127.0.0.1:2"),
            reading(path, "/", "127.0.0.1:1")
        );
        assert_ne!(
            reading(Reads::ALL, "/", "127.0.0.1:2"),
            reading(Reads::ALL, "/", "127.0.0.1:1")
        );
    }

    #[test]
    fn authorization_keys_keep_groups_apart() {
        let request = request_info::RequestInfo::resolve(
            &http::Method::GET,
            "/api/v1/namespaces/default/pods",
            None,
        );
        let user = |groups: &[&str]| context::UserInfo {
            name: "alice".into(),
            uid: String::new(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            extra: Vec::new(),
        };
        assert_ne!(
            authorization(&user(&["ab"]), &request, Reads::ALL),
            authorization(&user(&["a", "b"]), &request, Reads::ALL)
        );
        assert_eq!(
            authorization(&user(&["a"]), &request, Reads::ALL),
            authorization(&user(&["a"]), &request, Reads::ALL)
        );
    }

    #[test]
    fn authorization_keys_hold_the_options_the_filter_reads_and_no_other() {
        let list = |query| {
            request_info::RequestInfo::resolve(&http::Method::GET, "/api/v1/pods", Some(query))
        };
        let (app, db) = (list("labelSelector=app"), list("labelSelector=db"));
        let user = context::UserInfo::anonymous();
        let versions_only: Reads = [ReadField::ApiVersion].into_iter().collect();
        assert_ne!(
            authorization(&user, &app, Reads::ALL),
            authorization(&user, &db, Reads::ALL)
        );
        assert_eq!(
            authorization(&user, &app, versions_only),
            authorization(&user, &db, versions_only)
        );
    }
}
