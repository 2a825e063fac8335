//! Request info (kube's `WithRequestInfo`, preceded by
//! `WithRequestReceivedTimestamp`): resolves the Kubernetes view of the
//! request once, natively, before any filter runs, and stamps its arrival.

use std::time::{Instant, SystemTime};

use futures_util::future::BoxFuture;

use crate::body::{Request, Response};
use crate::context::{ReceivedAt, RequestContext};
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
        // A WebSocket over HTTP/2 is the GET it stands for (RFC 8441 §5).
        let method = if crate::request_info::is_websocket_over_h2(&request) {
            &http::Method::GET
        } else {
            request.method()
        };
        let info = RequestInfo::resolve(method, request.uri().path(), request.uri().query());
        let context = RequestContext::learn(request.extensions_mut());
        context.received = Some(received);
        context.info = Some(info);
        self.next.call(request)
    }
}
