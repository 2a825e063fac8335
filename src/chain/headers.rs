//! Response headers every answer gets: HSTS (kube's `WithHSTS`, when the
//! manifest gives directives), cache-control (kube's `WithCacheControl`:
//! `no-cache, private` unless the handler set its own), and
//! `X-Content-Type-Options: nosniff`.

use futures_util::future::BoxFuture;
use http::HeaderValue;
use http::header::{CACHE_CONTROL, STRICT_TRANSPORT_SECURITY, X_CONTENT_TYPE_OPTIONS};

use crate::body::{Request, Response};
use crate::handler::{Handler, SharedHandler};

pub struct Hsts {
    pub directives: HeaderValue,
    pub next: SharedHandler,
}

impl Handler for Hsts {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        Box::pin(async move {
            let mut response = self.next.call(request).await;
            response
                .headers_mut()
                .insert(STRICT_TRANSPORT_SECURITY, self.directives.clone());
            response
        })
    }
}

pub struct CacheControl {
    pub next: SharedHandler,
}

impl Handler for CacheControl {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        Box::pin(async move {
            let mut response = self.next.call(request).await;
            response
                .headers_mut()
                .entry(CACHE_CONTROL)
                .or_insert(HeaderValue::from_static("no-cache, private"));
            response
        })
    }
}

/// `X-Content-Type-Options: nosniff` on every response, the gateway's own and
/// proxied ones alike, so no browser runs a body as something its
/// `Content-Type` does not say. kube writes it on what it serves itself (its
/// health endpoints, `staging/src/k8s.io/apiserver/pkg/server/healthz/healthz.go`,
/// and every plain-text error through Go's `http.Error`); as a gateway's
/// outermost step it covers every answer, at the cost of one header insert.
pub struct NoSniff {
    pub next: SharedHandler,
}

impl Handler for NoSniff {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        Box::pin(async move {
            let mut response = self.next.call(request).await;
            response
                .headers_mut()
                .insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
            response
        })
    }
}
