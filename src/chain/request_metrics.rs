//! Request metrics (kube's `MonitorRequest` and the in-flight and
//! long-running gauges, `staging/src/k8s.io/apiserver/pkg/endpoints/metrics/metrics.go`):
//! every request that request info resolved is counted once its response
//! body has been sent, with the bytes sent and the time since it arrived;
//! a request is in flight until then. An upgraded request is counted when
//! its `101` (or, over HTTP/2, its `200`) is sent, as kube counts a
//! CONNECT once its response has started; it stays in
//! `apiserver_longrunning_requests` until its tunnel closes
//! ([`crate::body::keep_until_done`]). Labels: [`crate::metrics::request`].

use std::time::Instant;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;

use super::timeout::ResponseDeadlinePassed;
use crate::body::{Request, Response, Tunnel, caused_by, keep_until_done};
use crate::context::{RequestContext, Terminated};
use crate::handler::{Handler, SharedHandler};
use crate::metrics::request::{Finished, InFlight, Labeled};

pub(crate) struct RequestMetrics {
    pub next: SharedHandler,
}

impl Handler for RequestMetrics {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        let context = RequestContext::of(request.extensions());
        let Some(info) = &context.info else {
            return self.next.call(request);
        };
        let metrics = &crate::metrics::metrics().requests;
        let labeled = metrics.request_labels(info, &request);
        let long_running = crate::context::is_long_running(&request);
        let in_flight = metrics.start(info, long_running, &labeled);
        let started = context
            .received
            .map_or_else(Instant::now, |received| received.instant);
        self.next
            .call(request)
            .map(move |mut response| {
                // A tunnel keeps the request counted until it closes; any
                // other response until its body ends, where it is recorded
                // (one wrapper of the body for both).
                let in_flight = if response.extensions().get::<Tunnel>().is_some() {
                    response = keep_until_done(response, in_flight);
                    None
                } else {
                    Some(in_flight)
                };
                let pending = Pending {
                    labeled,
                    code: response.status().as_u16(),
                    terminated: response.extensions().get::<Terminated>().is_some(),
                    started,
                    in_flight,
                };
                response.map(|body| {
                    body.on_end(move |bytes, error| {
                        let mut pending = pending;
                        // Cut at its deadline: the gateway ended it.
                        pending.terminated |= error.is_some_and(|error| {
                            caused_by::<ResponseDeadlinePassed>(error.as_ref())
                        });
                        pending.finish(bytes);
                    })
                })
            })
            .boxed()
    }
}

/// What is known of a request until its body ends.
struct Pending {
    labeled: Labeled,
    code: u16,
    terminated: bool,
    started: Instant,
    /// Dropped, so no longer counted, once recorded.
    in_flight: Option<InFlight>,
}

impl Pending {
    fn finish(self, bytes: u64) {
        crate::metrics::metrics().requests.record(Finished {
            labeled: self.labeled,
            code: self.code,
            bytes,
            elapsed_seconds: self.started.elapsed().as_secs_f64(),
            terminated: self.terminated,
        });
        drop(self.in_flight);
    }
}
