//! Response headers every answer gets: HSTS (kube's `WithHSTS`, when the
//! manifest gives directives) and cache-control (kube's `WithCacheControl`:
//! `no-cache, private` unless the handler set its own).

use futures_util::future::BoxFuture;
use http::HeaderValue;
use http::header::{CACHE_CONTROL, STRICT_TRANSPORT_SECURITY};

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
