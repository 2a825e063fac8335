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
use crate::handler::{Handler, SharedHandler};
use crate::status::GatewayError;

pub struct BodyLimit {
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
        let limit = usize::try_from(self.max_request_body).unwrap_or(usize::MAX);
        let mut request = request.map(|body| Body::wrap(Limited::new(body, limit)));
        request
            .extensions_mut()
            .insert(MaxRequestBody(self.max_request_body));
        self.next.call(request)
    }
}
