//! The audit ID (kube's `WithAuditInit`): every request gets one, the
//! client's `Audit-ID` header when it sent one, else a new UUID. The ID is
//! the request's `Audit-ID` from here on, so the one the audit log records is
//! the one the upstream receives, and every response carries it back.
//!
//! kube's `withAuditInit`
//! (`staging/src/k8s.io/apiserver/pkg/endpoints/filters/audit_init.go`)
//! records a client's ID as sent, so a client writes what it likes into the
//! audit log and every system that reads it. Here a client's ID is checked:
//! at most 256 characters, letters and digits separated by hyphens, else a
//! 400 Status. The rule and its words are those of the validating filter
//! kube has drafted (`WithValidatingAuditInit`), which no kube release has
//! yet. kube reads the first of several `Audit-ID` headers; here two are a
//! 400 too, since the gateway cannot tell which one the client meant.

use bytes::Bytes;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use http::{HeaderMap, HeaderValue};

use crate::body::{Request, Response};
use crate::context::{AUDIT_ID_HEADER, AuditId, RequestContext};
use crate::handler::{Handler, SharedHandler};
use crate::status::GatewayError;

/// The longest ID a client may give (the drafted `maxAuditIDLength`).
const MAX_AUDIT_ID_LENGTH: usize = 256;

pub(crate) struct AuditIdFilter {
    pub next: SharedHandler,
}

impl Handler for AuditIdFilter {
    fn call(&self, mut request: Request) -> BoxFuture<'_, Response> {
        let header = match client_audit_id(request.headers()) {
            Ok(Some(header)) => header,
            Ok(None) => match new_audit_id() {
                Ok(new) => new,
                Err(error) => return Box::pin(std::future::ready(error.into_response())),
            },
            Err(error) => return Box::pin(std::future::ready(error.into_response())),
        };
        // Exactly one Audit-ID goes on: the one the audit log records.
        request
            .headers_mut()
            .insert(AUDIT_ID_HEADER, header.clone());
        RequestContext::learn(request.extensions_mut()).audit_id =
            Some(AuditId::from(header.clone()));
        self.next
            .call(request)
            .map(|mut response| {
                response.headers_mut().insert(AUDIT_ID_HEADER, header);
                response
            })
            .boxed()
    }
}

/// The client's valid `Audit-ID`, `None` when it sent none (or an empty one,
/// which kube also replaces).
fn client_audit_id(headers: &HeaderMap) -> Result<Option<HeaderValue>, GatewayError> {
    let mut given = headers.get_all(AUDIT_ID_HEADER).iter();
    let first = given.next().filter(|value| !value.is_empty());
    if given.next().is_some() {
        return Err(GatewayError::BadRequest {
            message: "Audit-ID is given more than once: give one".to_owned(),
        });
    }
    match first {
        Some(value) if !is_valid_audit_id(value.as_bytes()) => Err(GatewayError::BadRequest {
            // The drafted kube filter's message, word for word.
            message: "provided Audit-ID is invalid. Must be less than 256 characters in length \
                      and only contain alphanumeric characters separated by hyphens ('-')."
                .to_owned(),
        }),
        first => Ok(first.cloned()),
    }
}

/// The drafted kube `validateAuditID`: at most 256 bytes matching
/// `^([A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9]+)$` (so two characters at least,
/// starting and ending with a letter or digit).
fn is_valid_audit_id(id: &[u8]) -> bool {
    let (Some(first), Some(last)) = (id.first(), id.last()) else {
        return false;
    };
    (2..=MAX_AUDIT_ID_LENGTH).contains(&id.len())
        && first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && id.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'-')
}

/// A new UUID as a header, written without the formatting machinery (this
/// runs on every request that brings no `Audit-ID`). Its bytes are owned by
/// the value and shared by its copies (the upstream's header, the
/// response's, the audit event's): one allocation, where a copied slice
/// takes a second at its first copy.
fn new_audit_id() -> Result<HeaderValue, GatewayError> {
    let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
    uuid::Uuid::new_v4().hyphenated().encode_lower(&mut text);
    // A UUID is always a valid header value.
    HeaderValue::from_maybe_shared(Bytes::from_owner(text))
        .map_err(|_| GatewayError::internal("a new audit ID is not a header value"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_ids_follow_the_drafted_kube_rule() {
        let longest = "a".repeat(MAX_AUDIT_ID_LENGTH);
        for valid in ["ab", "a1", "foo-bar-baz", "4d1b4e0c-my-own-id", &longest] {
            assert!(is_valid_audit_id(valid.as_bytes()), "{valid:?}");
        }
        let too_long = "a".repeat(MAX_AUDIT_ID_LENGTH + 1);
        for invalid in [
            "a", "-ab", "ab-", "a b", "a_b", "a.b", "été", "a\tb", &too_long,
        ] {
            assert!(!is_valid_audit_id(invalid.as_bytes()), "{invalid:?}");
        }
    }

    #[test]
    fn one_audit_id_at_most() {
        let mut headers = HeaderMap::new();
        assert!(matches!(client_audit_id(&headers), Ok(None)));
        headers.append(AUDIT_ID_HEADER, HeaderValue::from_static(""));
        assert!(matches!(client_audit_id(&headers), Ok(None)));
        headers.insert(AUDIT_ID_HEADER, HeaderValue::from_static("abc-123"));
        assert_eq!(
            client_audit_id(&headers).ok().flatten(),
            Some(HeaderValue::from_static("abc-123"))
        );
        headers.append(AUDIT_ID_HEADER, HeaderValue::from_static("abc-123"));
        assert!(matches!(
            client_audit_id(&headers),
            Err(GatewayError::BadRequest { .. })
        ));
    }

    /// A new ID is a lower-case UUID that the rule accepts, new each time.
    #[test]
    fn new_audit_ids_are_valid_uuids() {
        let first = new_audit_id().unwrap();
        let second = new_audit_id().unwrap();
        assert_ne!(first, second);
        let text = first.to_str().unwrap();
        assert!(is_valid_audit_id(first.as_bytes()));
        assert_eq!(
            uuid::Uuid::parse_str(text)
                .unwrap()
                .hyphenated()
                .to_string(),
            text
        );
    }
}
