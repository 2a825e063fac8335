//! CORS (kube's `WithCORS`, `staging/src/k8s.io/apiserver/pkg/server/filters/cors.go`):
//! a request whose `Origin` matches one of the manifest's patterns gets the
//! CORS response headers, and a pre-flight `OPTIONS` is answered here with
//! 204, before authentication, because browsers send pre-flights without
//! credentials.
//!
//! Two things are the gateway's own. A request from an origin that matches
//! no pattern is refused with 403, where kube passes it on without CORS
//! headers and leaves the browser to withhold the answer: a simple request
//! (a form `POST`, a `GET`) from another site needs no pre-flight, and would
//! still act with the browser's credentials (a client certificate, a
//! cookie). And the answer says `Vary: Origin`, which kube's does not: it
//! depends on the `Origin`, so a cache must not hand it to another origin.

use futures_util::future::BoxFuture;
use http::header::{
    ACCESS_CONTROL_ALLOW_CREDENTIALS, ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS,
    ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_EXPOSE_HEADERS, ORIGIN, VARY,
};
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use regex::Regex;

use crate::body::{Body, Request, Response};
use crate::handler::{Handler, SharedHandler};
use crate::status::GatewayError;

const ALLOWED_METHODS: &str = "POST, GET, OPTIONS, PUT, DELETE, PATCH";
const ALLOWED_HEADERS: &str = "Content-Type, Content-Length, Accept-Encoding, X-CSRF-Token, Authorization, X-Requested-With, If-Modified-Since";
const EXPOSED_HEADERS: &str = "Date";

pub(crate) struct Cors {
    pub allowed_origins: Vec<Regex>,
    pub next: SharedHandler,
}

impl Handler for Cors {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        let Some(origin) = request.headers().get(ORIGIN).cloned() else {
            return self.next.call(request);
        };
        Box::pin(async move {
            let allowed = origin
                .to_str()
                .is_ok_and(|origin| self.allowed_origins.iter().any(|re| re.is_match(origin)));
            if !allowed {
                return GatewayError::Forbidden {
                    message: "origin not allowed".to_owned(),
                    details: None,
                }
                .into_response();
            }
            let mut response = if request.method() == Method::OPTIONS {
                let mut preflight = http::Response::new(Body::empty());
                *preflight.status_mut() = StatusCode::NO_CONTENT;
                preflight
            } else {
                self.next.call(request).await
            };
            add_cors_headers(response.headers_mut(), origin);
            response
        })
    }
}

fn add_cors_headers(headers: &mut HeaderMap, origin: HeaderValue) {
    headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    headers.insert(
        ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static(ALLOWED_METHODS),
    );
    headers.insert(
        ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static(ALLOWED_HEADERS),
    );
    headers.insert(
        ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static(EXPOSED_HEADERS),
    );
    headers.insert(
        ACCESS_CONTROL_ALLOW_CREDENTIALS,
        HeaderValue::from_static("true"),
    );
    // The answer depends on the Origin: caches must not share it.
    headers.append(VARY, HeaderValue::from_static("Origin"));
}

#[cfg(test)]
mod tests {
    //! kube's `WithCORS` (`staging/src/k8s.io/apiserver/pkg/server/filters/cors.go`),
    //! checked on the filter alone: the next handler is a stub that counts its
    //! calls and answers 200 with a `Vary` of its own.

    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// The next step: counts the requests that reach it.
    #[derive(Default)]
    struct Counting(AtomicUsize);

    impl Handler for Counting {
        fn call(&self, _request: Request) -> BoxFuture<'_, Response> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Box::pin(async {
                let mut response = http::Response::new(Body::full("next"));
                response
                    .headers_mut()
                    .insert(VARY, HeaderValue::from_static("Accept-Encoding"));
                response
            })
        }
    }

    fn cors() -> (Cors, Arc<Counting>) {
        let next = Arc::new(Counting::default());
        let cors = Cors {
            allowed_origins: vec![Regex::new(r"^https://good\.example$").expect("a pattern")],
            next: next.clone(),
        };
        (cors, next)
    }

    fn request(method: Method, origin: Option<&str>) -> Request {
        let mut builder = http::Request::builder().method(method).uri("/api");
        if let Some(origin) = origin {
            builder = builder.header(ORIGIN, origin);
        }
        builder.body(Body::empty()).expect("a request")
    }

    fn header<'a>(response: &'a Response, name: &http::HeaderName) -> Option<&'a str> {
        response
            .headers()
            .get(name)
            .map(|value| value.to_str().expect("a text header"))
    }

    /// cors.go: a request without `Origin` is not a CORS request; it passes
    /// untouched.
    #[tokio::test]
    async fn without_origin_the_request_passes_without_cors_headers() {
        let (cors, next) = cors();
        let response = cors.call(request(Method::GET, None)).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(next.0.load(Ordering::SeqCst), 1);
        assert_eq!(header(&response, &ACCESS_CONTROL_ALLOW_ORIGIN), None);
    }

    /// cors.go: an allowed origin is echoed in `Access-Control-Allow-Origin`
    /// with kube's allowed methods, headers, exposed headers and credentials;
    /// the gateway adds `Vary: Origin` beside the handler's own `Vary`.
    #[tokio::test]
    async fn an_allowed_origin_gets_kubes_cors_headers() {
        let (cors, next) = cors();
        let response = cors
            .call(request(Method::GET, Some("https://good.example")))
            .await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(next.0.load(Ordering::SeqCst), 1);
        assert_eq!(
            header(&response, &ACCESS_CONTROL_ALLOW_ORIGIN),
            Some("https://good.example")
        );
        assert_eq!(
            header(&response, &ACCESS_CONTROL_ALLOW_METHODS),
            Some("POST, GET, OPTIONS, PUT, DELETE, PATCH")
        );
        assert_eq!(
            header(&response, &ACCESS_CONTROL_ALLOW_HEADERS),
            Some(ALLOWED_HEADERS)
        );
        assert_eq!(
            header(&response, &ACCESS_CONTROL_EXPOSE_HEADERS),
            Some("Date")
        );
        assert_eq!(
            header(&response, &ACCESS_CONTROL_ALLOW_CREDENTIALS),
            Some("true")
        );
        let vary: Vec<_> = response.headers().get_all(VARY).iter().collect();
        assert_eq!(vary, ["Accept-Encoding", "Origin"]);
    }

    /// cors.go: a pre-flight `OPTIONS` from an allowed origin is answered
    /// 204 by the filter itself, with the CORS headers; the request goes no
    /// further (browsers send pre-flights without credentials).
    #[tokio::test]
    async fn a_preflight_is_answered_204_without_reaching_the_next_handler() {
        let (cors, next) = cors();
        let response = cors
            .call(request(Method::OPTIONS, Some("https://good.example")))
            .await;
        assert_eq!(response.status(), StatusCode::NO_CONTENT);
        assert_eq!(next.0.load(Ordering::SeqCst), 0);
        assert_eq!(
            header(&response, &ACCESS_CONTROL_ALLOW_ORIGIN),
            Some("https://good.example")
        );
    }

    /// The gateway's rule (kube's cors.go passes the request on without CORS
    /// headers): an `Origin` no pattern matches is refused with 403, whatever
    /// the method, and gets no CORS headers.
    #[tokio::test]
    async fn an_origin_no_pattern_matches_is_a_403() {
        let (cors, next) = cors();
        for method in [Method::GET, Method::OPTIONS] {
            let response = cors
                .call(request(method, Some("https://good.example.evil")))
                .await;
            assert_eq!(response.status(), StatusCode::FORBIDDEN);
            assert_eq!(header(&response, &ACCESS_CONTROL_ALLOW_ORIGIN), None);
        }
        assert_eq!(next.0.load(Ordering::SeqCst), 0);
    }
}
