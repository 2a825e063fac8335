//! A document served with an entity tag, as kube serves its discovery and
//! OpenAPI documents: the `ETag` is the quoted upper-case hex of the
//! document's SHA-512 (kube-openapi's `computeETag` in
//! `vendor/k8s.io/kube-openapi/pkg/handler/handler.go`, and
//! `calculateETag` in
//! `staging/src/k8s.io/apiserver/pkg/endpoints/discovery/aggregated/etag.go`),
//! and a request whose `If-None-Match` names it is answered `304 Not
//! Modified` without the body. Both vary by `Accept`, which chooses the
//! document. A document served in a second form (kube-openapi's v2 as
//! protobuf) carries the first form's tag, as kube-openapi's does.

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, ETAG, IF_NONE_MATCH, VARY};
use http::{HeaderValue, StatusCode};
use serde_json::Value;
use sha2::{Digest, Sha512};

use crate::body::{Body, Request, Response};

/// One document as served: its bytes and their hash, computed once.
pub(crate) struct TaggedDocument {
    bytes: Bytes,
    /// Upper-case hex of the SHA-512 of `bytes` (or of the form it is
    /// another encoding of).
    hash: String,
}

impl TaggedDocument {
    pub(crate) fn new(bytes: Bytes) -> Self {
        let hash = hex::encode_upper(Sha512::digest(&bytes));
        TaggedDocument { bytes, hash }
    }

    pub(crate) fn json(value: &Value) -> Self {
        TaggedDocument::new(Bytes::from(value.to_string()))
    }

    /// The same document in another encoding, `bytes`, with this one's
    /// tag: kube-openapi's protobuf cache re-uses the JSON's ETag ("We can
    /// re-use the same etag as json because of the Vary header", in
    /// `vendor/k8s.io/kube-openapi/pkg/handler/handler.go`).
    pub(crate) fn other_form(&self, bytes: Bytes) -> Self {
        TaggedDocument {
            bytes,
            hash: self.hash.clone(),
        }
    }

    /// The document's hash, as kube-openapi puts it in v3's URLs.
    pub(crate) fn hash(&self) -> &str {
        &self.hash
    }

    /// The document, for tests to read what is served.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    fn etag(&self) -> String {
        format!("\"{}\"", self.hash)
    }

    /// The answer to `request`: the document as `content_type`, or a `304`
    /// when the client's copy is this one; `cache_control` says for how
    /// long a client may keep it.
    pub(crate) fn serve(
        &self,
        request: &Request,
        content_type: HeaderValue,
        cache_control: &'static str,
    ) -> Response {
        let etag = self.etag();
        let mut response = if self.matches(request, &etag) {
            let mut response = http::Response::new(Body::empty());
            *response.status_mut() = StatusCode::NOT_MODIFIED;
            response
        } else {
            let mut response = http::Response::new(Body::full(self.bytes.clone()));
            response.headers_mut().insert(CONTENT_TYPE, content_type);
            response
        };
        let headers = response.headers_mut();
        if let Ok(value) = HeaderValue::try_from(etag) {
            headers.insert(ETAG, value);
        }
        headers.insert(VARY, HeaderValue::from_static("Accept"));
        headers.insert(CACHE_CONTROL, HeaderValue::from_static(cache_control));
        response
    }

    /// Whether an `If-None-Match` of `request` names `etag` (or is `*`).
    fn matches(&self, request: &Request, etag: &str) -> bool {
        request
            .headers()
            .get_all(IF_NONE_MATCH)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .any(|tag| tag.trim() == etag || tag.trim() == "*")
    }
}
