//! The `static` route handler: a fixed response from the manifest, for
//! version endpoints, placeholders and the quickstart.

use futures_util::future::BoxFuture;

use crate::body::{Body, Request, Response};
use crate::config::StaticResponse;
use crate::handler::Handler;

pub(crate) struct Static(pub StaticResponse);

impl Handler for Static {
    fn call(&self, _request: Request) -> BoxFuture<'_, Response> {
        let mut response = http::Response::new(Body::full(self.0.body.clone()));
        *response.status_mut() = self.0.status;
        *response.headers_mut() = self.0.headers.clone();
        Box::pin(async move { response })
    }
}
