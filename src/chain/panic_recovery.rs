//! Panic recovery (kube's `WithPanicRecovery`): a panic anywhere inside the
//! chain becomes a 500 Status for that request, is logged with the request,
//! and the gateway keeps serving every other request.

use std::any::Any;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use http::{Method, Uri};

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
        // The next steps' `call`s run now, ahead of their futures, so they
        // are caught here as well as their futures are below.
        let served = match std::panic::catch_unwind(AssertUnwindSafe(|| self.next.call(request))) {
            Ok(served) => served,
            Err(panic) => return Box::pin(std::future::ready(recovered(&*panic, &method, &uri))),
        };
        AssertUnwindSafe(served)
            .catch_unwind()
            .map(move |served| served.unwrap_or_else(|panic| recovered(&*panic, &method, &uri)))
            .boxed()
    }
}

/// The 500 a panic becomes, logged with the request it interrupted.
fn recovered(panic: &(dyn Any + Send), method: &Method, uri: &Uri) -> Response {
    let cause = panic_message(panic);
    let path = uri.path();
    tracing::error!(%method, %path, %cause, "panic while serving a request");
    GatewayError::internal(format!("the server panicked while serving {method} {path}"))
        .into_response()
}

/// A panic's message, as Go's `%v` prints what `recover` returns: the text
/// `panic!` was given, empty when it was given something else.
pub(crate) fn panic_message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}
