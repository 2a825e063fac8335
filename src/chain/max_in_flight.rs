//! Max-in-flight (kube's `WithMaxInFlightLimit`, in
//! `staging/src/k8s.io/apiserver/pkg/server/filters/maxinflight.go`): separate
//! limits for read-only (get, list, watch) and mutating requests; long-running
//! requests are not counted. Over the limit the client gets kube's plain-text
//! 429 with `Retry-After: 1`. A slot is held until the response body has been
//! sent, not just until the headers are ready, so a streaming response counts
//! for as long as it runs. A member of `system:masters` over the limit is
//! served anyway, without a slot, as in kube.

use std::sync::Arc;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderValue, StatusCode};
use tokio::sync::Semaphore;

use crate::body::{Body, Request, Response};
use crate::context::{RequestContext, Terminated, UserInfo};
use crate::handler::{Handler, SharedHandler};
use crate::request_info::RequestInfo;

pub(crate) struct MaxInFlight {
    /// None when the limit is 0 (unlimited).
    pub read_only: Option<Arc<Semaphore>>,
    pub mutating: Option<Arc<Semaphore>>,
    pub next: SharedHandler,
}

impl MaxInFlight {
    pub(crate) fn new(read_only: usize, mutating: usize, next: SharedHandler) -> Self {
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
        if crate::context::is_long_running(&request) {
            return self.next.call(request);
        }
        let read_only = RequestContext::of(request.extensions())
            .info
            .as_ref()
            .is_some_and(RequestInfo::is_read_only);
        let semaphore = if read_only {
            &self.read_only
        } else {
            &self.mutating
        };
        let Some(semaphore) = semaphore else {
            return self.next.call(request);
        };
        let Ok(permit) = semaphore.clone().try_acquire_owned() else {
            if is_privileged(&request) {
                return self.next.call(request);
            }
            return Box::pin(async { too_many_requests() });
        };
        self.next
            .call(request)
            .map(|response| response.map(|body| body.with_guard(permit)))
            .boxed()
    }
}

/// Whether the request's user is in `system:masters`: over the limit, kube
/// serves them anyway, untracked ("A system:master is so powerful that they
/// should always get an answer", `WithMaxInFlightLimit` in maxinflight.go).
fn is_privileged(request: &Request) -> bool {
    RequestContext::of(request.extensions())
        .user
        .as_deref()
        .is_some_and(UserInfo::is_privileged)
}

/// kube's answer when the server is over its in-flight limit, a
/// termination in self-defense (kube's `RecordRequestTermination` with
/// 429 in `WithMaxInFlightLimit`).
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
    response.extensions_mut().insert(Terminated);
    response
}

#[cfg(test)]
mod tests {
    //! kube's `WithMaxInFlightLimit` (`staging/src/k8s.io/apiserver/pkg/server/filters/maxinflight.go`),
    //! checked on the filter alone in front of a stub next handler that
    //! answers 200 at once. A slot is taken when the filter is called and
    //! held by the response's body, so a response kept unread holds it.

    use http_body_util::BodyExt;

    use super::*;

    struct Ok200;

    impl Handler for Ok200 {
        fn call(&self, _request: Request) -> BoxFuture<'_, Response> {
            Box::pin(async { http::Response::new(Body::full("served")) })
        }
    }

    fn limiter(read_only: usize, mutating: usize) -> MaxInFlight {
        MaxInFlight::new(read_only, mutating, Arc::new(Ok200))
    }

    /// A request that request info resolved to `verb`.
    fn request(verb: &str) -> Request {
        let mut request = http::Request::new(Body::empty());
        RequestContext::learn(request.extensions_mut()).info = Some(RequestInfo {
            is_resource_request: true,
            verb: verb.into(),
            resource: "widgets".into(),
            ..RequestInfo::default()
        });
        request
    }

    async fn assert_too_many(response: Response) {
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            response.headers().get(RETRY_AFTER),
            Some(&HeaderValue::from_static("1"))
        );
        assert_eq!(
            response.headers().get(CONTENT_TYPE),
            Some(&HeaderValue::from_static("text/plain; charset=utf-8"))
        );
        let body = response.into_body().collect().await.expect("a body");
        assert_eq!(
            body.to_bytes(),
            "Too many requests, please try again later.\n"
        );
    }

    /// maxinflight.go: a mutating request over the mutating limit gets
    /// kube's plain-text 429 with `Retry-After: 1`; the slot comes back when
    /// the response holding it is gone.
    #[tokio::test]
    async fn a_mutating_request_over_the_limit_gets_kubes_429() {
        let limiter = limiter(0, 1);
        let held = limiter.call(request("create")).await;
        assert_eq!(held.status(), StatusCode::OK);
        assert_too_many(limiter.call(request("delete")).await).await;
        drop(held);
        assert_eq!(
            limiter.call(request("delete")).await.status(),
            StatusCode::OK
        );
    }

    /// maxinflight.go: get, list and watch count against the read-only
    /// limit, everything else against the mutating one, each on its own.
    #[tokio::test]
    async fn read_only_and_mutating_requests_have_separate_limits() {
        let limiter = limiter(1, 1);
        let _get = limiter.call(request("get")).await;
        assert_too_many(limiter.call(request("list")).await).await;
        let _update = limiter.call(request("update")).await;
        assert_too_many(limiter.call(request("patch")).await).await;
    }

    /// maxinflight.go: long-running requests (watch, and subresources such
    /// as exec and proxy) are not counted.
    #[tokio::test]
    async fn long_running_requests_are_not_counted() {
        let limiter = limiter(1, 1);
        let _get = limiter.call(request("get")).await;
        let _create = limiter.call(request("create")).await;
        let watches: Vec<_> =
            futures_util::future::join_all((0..3).map(|_| limiter.call(request("watch")))).await;
        assert!(watches.iter().all(|w| w.status() == StatusCode::OK));
        let mut exec = request("create");
        if let Some(info) = &mut RequestContext::learn(exec.extensions_mut()).info {
            info.resource = "pods".into();
            info.subresource = "exec".into();
        }
        assert_eq!(limiter.call(exec).await.status(), StatusCode::OK);
    }

    /// maxinflight.go: "A system:master is so powerful that they should
    /// always get an answer": over the limit, a member of `system:masters`
    /// is served anyway instead of getting a 429, without taking a slot;
    /// anyone else still gets the 429.
    #[tokio::test]
    async fn a_system_master_over_the_limit_is_served() {
        let limiter = limiter(0, 1);
        let held = limiter.call(request("create")).await;
        assert_eq!(held.status(), StatusCode::OK);
        let mut admin = request("delete");
        RequestContext::learn(admin.extensions_mut()).user = Some(Arc::new(UserInfo {
            name: "admin".to_owned(),
            groups: vec![
                "system:masters".to_owned(),
                "system:authenticated".to_owned(),
            ],
            ..UserInfo::default()
        }));
        let served = limiter.call(admin).await;
        assert_eq!(served.status(), StatusCode::OK);
        assert_too_many(limiter.call(request("delete")).await).await;
        // The master's response, still unread, holds no slot.
        drop(held);
        assert_eq!(
            limiter.call(request("delete")).await.status(),
            StatusCode::OK
        );
        drop(served);
    }

    /// A slot is held until the response body has been sent: reading the
    /// body to its end and dropping it frees the slot, and a limit of 0
    /// means no limit (kube's `nonMutatingLimit == 0 && mutatingLimit == 0`).
    #[tokio::test]
    async fn the_body_holds_the_slot_and_zero_is_unlimited() {
        let limiter = limiter(1, 0);
        let streaming = limiter.call(request("get")).await;
        assert_too_many(limiter.call(request("get")).await).await;
        let body = streaming.into_body().collect().await.expect("a body");
        assert_eq!(body.to_bytes(), "served");
        assert_eq!(limiter.call(request("get")).await.status(), StatusCode::OK);
        let held: Vec<_> =
            futures_util::future::join_all((0..5).map(|_| limiter.call(request("create")))).await;
        assert!(held.iter().all(|r| r.status() == StatusCode::OK));
    }
}
