//! Max-in-flight (kube's `WithMaxInFlightLimit`, in
//! `staging/src/k8s.io/apiserver/pkg/server/filters/maxinflight.go`): separate
//! limits for read-only (get, list, watch) and mutating requests; long-running
//! requests are not counted. Over the limit the client gets kube's plain-text
//! 429 with `Retry-After: 1`. A slot is held until the response body has been
//! sent, not just until the headers are ready, so a streaming response counts
//! for as long as it runs.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderValue, StatusCode};
use tokio::sync::Semaphore;

use crate::body::{Body, Request, Response};
use crate::handler::{Handler, SharedHandler};
use crate::request_info::RequestInfo;

pub struct MaxInFlight {
    /// None when the limit is 0 (unlimited).
    pub read_only: Option<Arc<Semaphore>>,
    pub mutating: Option<Arc<Semaphore>>,
    pub next: SharedHandler,
}

impl MaxInFlight {
    pub fn new(read_only: usize, mutating: usize, next: SharedHandler) -> Self {
        let semaphore = |limit: usize| (limit > 0).then(|| Arc::new(Semaphore::new(limit)));
        MaxInFlight {
            read_only: semaphore(read_only),
            mutating: semaphore(mutating),
            next,
        }
    }
}

impl Handler for MaxInFlight {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        let info = request.extensions().get::<RequestInfo>();
        if info.is_some_and(RequestInfo::is_long_running) {
            return self.next.call(request);
        }
        let read_only = info.is_some_and(RequestInfo::is_read_only);
        let semaphore = if read_only {
            &self.read_only
        } else {
            &self.mutating
        };
        let Some(semaphore) = semaphore else {
            return self.next.call(request);
        };
        let Ok(permit) = semaphore.clone().try_acquire_owned() else {
            return Box::pin(async { too_many_requests() });
        };
        Box::pin(async move {
            let response = self.next.call(request).await;
            response.map(|body| body.with_guard(permit))
        })
    }
}

/// kube's answer when the server is over its in-flight limit.
fn too_many_requests() -> Response {
    let mut response =
        http::Response::new(Body::full("Too many requests, please try again later.\n"));
    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    let headers = response.headers_mut();
    headers.insert(RETRY_AFTER, HeaderValue::from_static("1"));
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
