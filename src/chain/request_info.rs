//! Request info (kube's `WithRequestInfo`, preceded by
//! `WithRequestReceivedTimestamp`): resolves the Kubernetes view of the
//! request once, natively, before any filter runs, and stamps its arrival.

use std::time::{Instant, SystemTime};

use futures_util::future::BoxFuture;

use crate::body::{Request, Response};
use crate::context::ReceivedAt;
use crate::handler::{Handler, SharedHandler};
use crate::request_info::RequestInfo;

pub(crate) struct RequestInfoFilter {
    pub next: SharedHandler,
}

impl Handler for RequestInfoFilter {
    fn call(&self, mut request: Request) -> BoxFuture<'_, Response> {
        let received = ReceivedAt {
            instant: Instant::now(),
            wall: SystemTime::now(),
        };
        let info = RequestInfo::resolve(
            request.method(),
            request.uri().path(),
            request.uri().query(),
        );
        request.extensions_mut().insert(received);
        request.extensions_mut().insert(info);
        self.next.call(request)
    }
}
