//! The request body limit (`limits.max_request_body`, kube's 3 MiB default):
//! a declared `Content-Length` over the limit is refused at once with a 413
//! Status; a body without one is counted as it streams, and the stream ends
//! with an error at the limit, which the handler reading it (the upstream
//! proxy, admission) turns into the same 413: they know the limit and its
//! error from `crate::body`, which is below both them and the chain.

use futures_util::future::BoxFuture;
use http::header::CONTENT_LENGTH;
use http_body_util::Limited;

use crate::body::{Body, MaxRequestBody, Request, Response};
use crate::context::RequestContext;
use crate::handler::{Handler, SharedHandler};
use crate::status::GatewayError;

pub(crate) struct BodyLimit {
    pub max_request_body: u64,
    pub next: SharedHandler,
}

impl Handler for BodyLimit {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        let declared = request
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse::<u64>().ok());
        if declared.is_some_and(|length| length > self.max_request_body) {
            let response = GatewayError::RequestEntityTooLarge {
                limit: self.max_request_body,
            }
            .into_response();
            return Box::pin(async move { response });
        }
        // A body over already (a GET's, most requests') has nothing to
        // count: it is handed on as it is, one box and one layer fewer.
        let limit = usize::try_from(self.max_request_body).unwrap_or(usize::MAX);
        let mut request = if http_body::Body::is_end_stream(request.body()) {
            request
        } else {
            request.map(|body| Body::wrap(Limited::new(body, limit)))
        };
        RequestContext::learn(request.extensions_mut()).max_body =
            Some(MaxRequestBody(self.max_request_body));
        self.next.call(request)
    }
}

#[cfg(test)]
mod tests {
    //! kube's request body limit (`MaxRequestBodyBytes`, 3 MiB by default,
    //! `staging/src/k8s.io/apiserver/pkg/server/config.go`, enforced as the
    //! body is read by `limitedReadBody` in
    //! `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/rest.go`),
    //! checked on the filter alone in front of a stub next handler that
    //! reads the whole body as the upstream proxy would.

    use std::convert::Infallible;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use bytes::Bytes;
    use http::StatusCode;
    use http_body::Frame;
    use http_body_util::{BodyExt, StreamBody};

    use super::*;
    use crate::body::is_body_limit_error;

    /// The next step: reads the body to its end and answers 200 with its
    /// length, or 413 when the limit ended it (500 for any other error); it
    /// reports the limit it was told in `x-limit`.
    #[derive(Default)]
    struct Reading(AtomicUsize);

    impl Handler for Reading {
        fn call(&self, request: Request) -> BoxFuture<'_, Response> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                let limit = RequestContext::of(request.extensions())
                    .max_body
                    .map(|l| l.0);
                let (status, text) = match request.into_body().collect().await {
                    Ok(body) => (StatusCode::OK, body.to_bytes().len().to_string()),
                    Err(error) if is_body_limit_error(&*error) => {
                        (StatusCode::PAYLOAD_TOO_LARGE, error.to_string())
                    }
                    Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()),
                };
                let mut response = http::Response::new(Body::full(text));
                *response.status_mut() = status;
                if let Some(limit) = limit {
                    response
                        .headers_mut()
                        .insert("x-limit", http::HeaderValue::from(limit));
                }
                response
            })
        }
    }

    const LIMIT: u64 = 1024;

    fn limit() -> (BodyLimit, Arc<Reading>) {
        let next = Arc::new(Reading::default());
        let filter = BodyLimit {
            max_request_body: LIMIT,
            next: next.clone(),
        };
        (filter, next)
    }

    /// A POST whose body arrives in `chunks` of `size` bytes, with no
    /// declared length.
    fn streamed(chunks: usize, size: usize) -> Request {
        let frames = (0..chunks)
            .map(move |_| Ok::<_, Infallible>(Frame::data(Bytes::from(vec![b'x'; size]))));
        http::Request::builder()
            .method("POST")
            .body(Body::wrap(StreamBody::new(futures_util::stream::iter(
                frames,
            ))))
            .expect("a request")
    }

    /// A declared `Content-Length` over the limit is kube's 413
    /// `RequestEntityTooLarge` Status at once: the body is never read.
    #[tokio::test]
    async fn a_declared_length_over_the_limit_is_a_413_before_the_next_handler() {
        let (filter, next) = limit();
        let request = http::Request::builder()
            .method("POST")
            .header(CONTENT_LENGTH, LIMIT + 1)
            .body(Body::full(vec![b'x'; 2048]))
            .expect("a request");
        let response = filter.call(request).await;
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(next.0.load(Ordering::SeqCst), 0);
        let body = response.into_body().collect().await.expect("a body");
        let status: serde_json::Value = serde_json::from_slice(&body.to_bytes()).expect("a Status");
        assert_eq!(status["reason"], "RequestEntityTooLarge");
        assert_eq!(status["code"], 413);
    }

    /// A body of exactly the limit passes whole, and the handler reading it
    /// is told the limit.
    #[tokio::test]
    async fn a_body_of_the_limit_passes_whole() {
        let (filter, _) = limit();
        let response = filter.call(streamed(4, 256)).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["x-limit"], "1024");
        let body = response.into_body().collect().await.expect("a body");
        assert_eq!(body.to_bytes(), "1024");
    }

    /// `limitedReadBody`: a body with no declared length is counted as it
    /// streams and ends with the limit's error one byte past it, which the
    /// reading handler recognises (and answers 413).
    #[tokio::test]
    async fn a_streamed_body_past_the_limit_ends_with_the_limit_error() {
        let (filter, next) = limit();
        let response = filter.call(streamed(5, 256)).await;
        assert_eq!(next.0.load(Ordering::SeqCst), 1);
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    }

    /// A request with no body (a GET) passes, told the limit; a whole body
    /// in one piece with no declared length is still counted: only a body
    /// already over is handed on uncounted.
    #[tokio::test]
    async fn a_body_already_over_passes_and_a_whole_one_is_still_counted() {
        let (filter, next) = limit();
        let response = filter.call(http::Request::new(Body::empty())).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["x-limit"], "1024");
        let body = response.into_body().collect().await.expect("a body");
        assert_eq!(body.to_bytes(), "0");
        let whole = http::Request::post("/").body(Body::full(vec![b'x'; 2048]));
        let response = filter.call(whole.expect("a request")).await;
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(next.0.load(Ordering::SeqCst), 2);
    }
}
