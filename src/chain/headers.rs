//! Response headers every answer gets: HSTS (kube's `WithHSTS`, when the
//! manifest gives directives), cache-control (kube's `WithCacheControl`:
//! `no-cache, private` unless the handler set its own), and
//! `X-Content-Type-Options: nosniff`.
//!
//! Each sets its header on the next step's answer with a `map` of that
//! step's future, not in an `async` block that would also keep the request
//! it handed on: every request boxes these futures, and a small box is
//! cheap to fill and stays in cache.

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use http::HeaderValue;
use http::header::{CACHE_CONTROL, STRICT_TRANSPORT_SECURITY, X_CONTENT_TYPE_OPTIONS};

use crate::body::{Request, Response};
use crate::handler::{Handler, SharedHandler};

pub(crate) struct Hsts {
    pub directives: HeaderValue,
    pub next: SharedHandler,
}

impl Handler for Hsts {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        self.next
            .call(request)
            .map(|mut response| {
                response
                    .headers_mut()
                    .insert(STRICT_TRANSPORT_SECURITY, self.directives.clone());
                response
            })
            .boxed()
    }
}

pub(crate) struct CacheControl {
    pub next: SharedHandler,
}

impl Handler for CacheControl {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        self.next
            .call(request)
            .map(|mut response| {
                response
                    .headers_mut()
                    .entry(CACHE_CONTROL)
                    .or_insert(HeaderValue::from_static("no-cache, private"));
                response
            })
            .boxed()
    }
}

/// `X-Content-Type-Options: nosniff` on every response, the gateway's own and
/// proxied ones alike, so no browser runs a body as something its
/// `Content-Type` does not say. kube writes it on what it serves itself (its
/// health endpoints, `staging/src/k8s.io/apiserver/pkg/server/healthz/healthz.go`,
/// and every plain-text error through Go's `http.Error`); as a gateway's
/// outermost step it covers every answer, at the cost of one header insert.
pub(crate) struct NoSniff {
    pub next: SharedHandler,
}

impl Handler for NoSniff {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        self.next
            .call(request)
            .map(|mut response| {
                response
                    .headers_mut()
                    .insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
                response
            })
            .boxed()
    }
}

#[cfg(test)]
mod tests {
    //! The response-header filters on their own, each in front of a stub
    //! next handler that answers with the headers a test gives it.

    use std::sync::Arc;

    use http::{HeaderMap, HeaderName, StatusCode};

    use super::*;
    use crate::body::Body;

    /// The next step: answers `status` with `headers`.
    struct Answering {
        status: StatusCode,
        headers: HeaderMap,
    }

    impl Handler for Answering {
        fn call(&self, _request: Request) -> BoxFuture<'_, Response> {
            Box::pin(async {
                let mut response = http::Response::new(Body::empty());
                *response.status_mut() = self.status;
                *response.headers_mut() = self.headers.clone();
                response
            })
        }
    }

    fn answering(status: StatusCode, headers: &[(HeaderName, &'static str)]) -> SharedHandler {
        let headers = headers
            .iter()
            .map(|(name, value)| (name.clone(), HeaderValue::from_static(value)))
            .collect();
        Arc::new(Answering { status, headers })
    }

    async fn answer(handler: &dyn Handler) -> Response {
        let request = http::Request::builder()
            .uri("/")
            .body(Body::empty())
            .expect("a request");
        handler.call(request).await
    }

    fn values(response: &Response, name: &HeaderName) -> Vec<String> {
        response
            .headers()
            .get_all(name)
            .iter()
            .map(|value| value.to_str().expect("a text header").to_owned())
            .collect()
    }

    /// kube's `WithHSTS` (`staging/src/k8s.io/apiserver/pkg/server/filters/hsts.go`):
    /// every response carries `Strict-Transport-Security` with the
    /// configured directives.
    #[tokio::test]
    async fn hsts_sets_the_configured_directives() {
        let hsts = Hsts {
            directives: HeaderValue::from_static("max-age=31536000; includeSubDomains"),
            next: answering(StatusCode::NOT_FOUND, &[]),
        };
        let response = answer(&hsts).await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        assert_eq!(
            values(&response, &STRICT_TRANSPORT_SECURITY),
            ["max-age=31536000; includeSubDomains"]
        );
    }

    /// kube's `WithCacheControl` (`staging/src/k8s.io/apiserver/pkg/endpoints/filters/cachecontrol.go`):
    /// `Cache-Control: no-cache, private` unless the handler set one.
    #[tokio::test]
    async fn cache_control_is_no_cache_private_unless_the_handler_set_one() {
        let defaulted = CacheControl {
            next: answering(StatusCode::OK, &[]),
        };
        assert_eq!(
            values(&answer(&defaulted).await, &CACHE_CONTROL),
            ["no-cache, private"]
        );
        let own = CacheControl {
            next: answering(StatusCode::OK, &[(CACHE_CONTROL, "max-age=60")]),
        };
        assert_eq!(values(&answer(&own).await, &CACHE_CONTROL), ["max-age=60"]);
    }

    /// `X-Content-Type-Options: nosniff` as kube writes it on what it serves
    /// (`staging/src/k8s.io/apiserver/pkg/server/healthz/healthz.go`): on
    /// every answer, exactly once, whatever the handler set.
    #[tokio::test]
    async fn nosniff_is_on_every_answer_exactly_once() {
        for next in [
            answering(StatusCode::OK, &[]),
            answering(StatusCode::INTERNAL_SERVER_ERROR, &[]),
            answering(StatusCode::OK, &[(X_CONTENT_TYPE_OPTIONS, "sniff-away")]),
        ] {
            let response = answer(&NoSniff { next }).await;
            assert_eq!(values(&response, &X_CONTENT_TYPE_OPTIONS), ["nosniff"]);
        }
    }
}
