//! CORS (kube's `WithCORS`): a request whose `Origin` matches one of the
//! manifest's patterns gets the CORS response headers, and a pre-flight
//! `OPTIONS` is answered here with 204, before authentication, because
//! browsers send pre-flights without credentials. A request from an origin
//! that matches no pattern is refused with 403, as kube does.

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

pub struct Cors {
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
