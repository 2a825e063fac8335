//! Filter latency (kube's `filterlatency.TrackStarted` and `TrackCompleted`,
//! `staging/src/k8s.io/apiserver/pkg/endpoints/filterlatency/filterlatency.go`):
//! the time a native step of the chain takes before it hands the request
//! on, as `apiserver_request_filter_duration_seconds{filter}`. [`Track`] is
//! put around a step by `build`; it closes the step timed before it and
//! opens its own, so one clock read times the boundary between two steps.
//! [`Close`] goes inside the last timed step. A step that answers itself
//! (a 401, a 403, a 429) is not timed, as in kube: its answer is counted in
//! `apiserver_request_total`.

use std::time::Instant;

use futures_util::future::BoxFuture;
use prometheus_client::metrics::histogram::Histogram;

use crate::body::{Request, Response};
use crate::handler::{Handler, SharedHandler};

/// The timed step a request is in, kept in its extensions (one entry,
/// updated in place, so timing a step allocates nothing).
#[derive(Clone)]
struct Clock(Option<Open>);

#[derive(Clone)]
struct Open {
    histogram: Histogram,
    since: Instant,
}

impl Open {
    fn close(self, now: Instant) {
        self.histogram
            .observe(now.duration_since(self.since).as_secs_f64());
    }
}

/// Opens the timing of the step it wraps (`filter` is kube's name for it).
pub(crate) struct Track {
    histogram: Histogram,
    next: SharedHandler,
}

impl Track {
    pub(crate) fn new(filter: &'static str, next: SharedHandler) -> Self {
        Track {
            histogram: crate::metrics::metrics().requests.filter_duration(filter),
            next,
        }
    }
}

impl Handler for Track {
    fn call(&self, mut request: Request) -> BoxFuture<'_, Response> {
        let now = Instant::now();
        let opened = Open {
            histogram: self.histogram.clone(),
            since: now,
        };
        match request.extensions_mut().get_mut::<Clock>() {
            Some(Clock(open)) => {
                if let Some(previous) = open.replace(opened) {
                    previous.close(now);
                }
            }
            None => {
                request.extensions_mut().insert(Clock(Some(opened)));
            }
        }
        self.next.call(request)
    }
}

/// Closes the timing of the last timed step, when the request leaves it.
pub(crate) struct Close {
    pub next: SharedHandler,
}

impl Handler for Close {
    fn call(&self, mut request: Request) -> BoxFuture<'_, Response> {
        if let Some(open) = request
            .extensions_mut()
            .get_mut::<Clock>()
            .and_then(|Clock(open)| open.take())
        {
            open.close(Instant::now());
        }
        self.next.call(request)
    }
}
