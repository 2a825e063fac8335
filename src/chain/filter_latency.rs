//! Filter latency (kube's `filterlatency.TrackStarted` and `TrackCompleted`,
//! `staging/src/k8s.io/apiserver/pkg/endpoints/filterlatency/filterlatency.go`):
//! the time a native step of the chain takes before it hands the request
//! on, as `apiserver_request_filter_duration_seconds{filter}`. [`Track`] is
//! put around a step by `build`; it closes the step timed before it and
//! opens its own, so one clock read times the boundary between two steps.
//! [`Close`] goes inside the last timed step. A step that answers itself
//! (a 401, a 403, a 429) is not timed, as in kube: its answer is counted in
//! `apiserver_request_total`.
//!
//! When the chain is traced, `Track` also opens the step's span for a
//! sampled request and the next `Track` (or `Close`) ends it, as kube's
//! `filterlatency` does both ([`super::tracing::StepSpan`]): whether the
//! request is sampled is read once, when its clock starts, so an unsampled
//! request pays one extension look-up for its steps' spans in all (two
//! when its `traceparent` makes its trace wait for its user: read again
//! at the step after authentication).

use std::time::Instant;

use futures_util::future::BoxFuture;
use prometheus_client::metrics::histogram::Histogram;

use super::tracing::{Sampling, StepSpan};
use crate::body::{Request, Response};
use crate::handler::{Handler, SharedHandler};

/// The timed step a request is in, kept in its extensions (one entry,
/// updated in place, so timing a step allocates nothing), and whether its
/// steps get spans.
#[derive(Clone)]
struct Clock {
    open: Option<Open>,
    /// Whether the request is traced and sampled: known from the first
    /// timed step on, which runs inside the tracing step, unless its trace
    /// waits for its user.
    sampling: Sampling,
}

#[derive(Clone)]
struct Open {
    histogram: Histogram,
    since: Instant,
    /// The step's span, when the request is traced and sampled.
    span: Option<StepSpan>,
}

impl Open {
    /// Observes the step's time and ends its span.
    fn close(self, now: Instant, request: &mut Request) {
        self.histogram
            .observe(now.duration_since(self.since).as_secs_f64());
        if let Some(span) = self.span {
            span.close(request);
        }
    }
}

/// Opens the timing of the step it wraps (`filter` is kube's name for it),
/// and its span (named `step`) when `traced`.
pub(crate) struct Track {
    histogram: Histogram,
    step: &'static str,
    traced: bool,
    next: SharedHandler,
}

impl Track {
    pub(crate) fn new(
        step: &'static str,
        filter: &'static str,
        traced: bool,
        next: SharedHandler,
    ) -> Self {
        Track {
            histogram: crate::metrics::metrics().requests.filter_duration(filter),
            step,
            traced,
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
            span: None,
        };
        let (previous, sampling) = match request.extensions_mut().get_mut::<Clock>() {
            Some(clock) => (clock.open.replace(opened), clock.sampling),
            None => {
                let clock = Clock {
                    open: Some(opened),
                    sampling: self.sampling(&request),
                };
                let sampling = clock.sampling;
                request.extensions_mut().insert(clock);
                (None, sampling)
            }
        };
        if let Some(previous) = previous {
            previous.close(now, &mut request);
        }
        let sampling = match sampling {
            Sampling::AwaitingUser => {
                let decided = self.sampling(&request);
                if let Some(clock) = request.extensions_mut().get_mut::<Clock>() {
                    clock.sampling = decided;
                }
                decided
            }
            known => known,
        };
        if sampling != Sampling::Sampled {
            return self.next.call(request);
        }
        // Opened once the step before has given back the request's span.
        let Some(span) = StepSpan::open(&mut request, self.step) else {
            return self.next.call(request);
        };
        if let Some(Clock {
            open: Some(open), ..
        }) = request.extensions_mut().get_mut::<Clock>()
        {
            open.span = Some(span.clone());
        }
        // A step that answers itself ends its span with its answer.
        Box::pin(async move {
            let response = self.next.call(request).await;
            span.end();
            response
        })
    }
}

impl Track {
    /// Whether the request's steps get spans, asked of the request when
    /// the chain is traced.
    fn sampling(&self, request: &Request) -> Sampling {
        if self.traced {
            StepSpan::sampling(request)
        } else {
            Sampling::NotSampled
        }
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
            .and_then(|clock| clock.open.take())
        {
            open.close(Instant::now(), &mut request);
        }
        self.next.call(request)
    }
}
