//! Panic recovery (kube's `WithPanicRecovery`): a panic anywhere inside the
//! chain becomes a 500 Status for that request, is logged with the request,
//! and the gateway keeps serving every other request.

use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;

use crate::body::{Request, Response};
use crate::handler::{Handler, SharedHandler};
use crate::status::GatewayError;

pub(crate) struct PanicRecovery {
    pub next: SharedHandler,
}

impl Handler for PanicRecovery {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        // For the log line of a panic: the URI is shared, not copied, as
        // nearly every request never panics.
        let method = request.method().clone();
        let uri = request.uri().clone();
        Box::pin(async move {
            // `call` itself runs inside catch_unwind too: a filter that
            // panics before returning its future is caught as well.
            let served = async move { self.next.call(request).await };
            match AssertUnwindSafe(served).catch_unwind().await {
                Ok(response) => response,
                Err(panic) => {
                    let cause = panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_default();
                    let path = uri.path();
                    tracing::error!(%method, %path, %cause, "panic while serving a request");
                    GatewayError::internal(format!(
                        "the server panicked while serving {method} {path}"
                    ))
                    .into_response()
                }
            }
        })
    }
}
