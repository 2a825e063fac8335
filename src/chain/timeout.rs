//! Request deadline and timeout (kube's `WithRequestDeadline` and
//! `WithTimeoutForNonLongRunningRequests`): a request that is not
//! long-running must be over within the request timeout, or within its own
//! `?timeout=` when that is shorter. The deadline covers the whole exchange:
//! a response whose head is not ready by then is a 504 Status (the work
//! inside is cancelled); a response whose body is still going then is cut
//! (kube's `panic(http.ErrAbortHandler)`: HTTP/1.x closes the connection,
//! HTTP/2 resets the stream). At the deadline the body being sent is
//! dropped, and with it the max-in-flight slot and the upstream connection
//! it holds, whether or not the client is reading. Long-running requests
//! (watch, proxy, exec, ...) are exempt.

use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http_body::{Frame, SizeHint};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::body::{Body, BodyError, Request, Response};
use crate::context::{ConnectionControl, Deadline};
use crate::handler::{Handler, SharedHandler};
use crate::request_info::RequestInfo;
use crate::status::GatewayError;

/// What the client is told, and what audit records, when the deadline
/// passes before the response head.
pub const TIMEOUT_MESSAGE: &str = "request did not complete within the allotted timeout";

pub struct Timeout {
    pub request_timeout: Duration,
    pub next: SharedHandler,
}

impl Handler for Timeout {
    fn call(&self, mut request: Request) -> BoxFuture<'_, Response> {
        Box::pin(async move {
            let long_running = request
                .extensions()
                .get::<RequestInfo>()
                .is_some_and(RequestInfo::is_long_running);
            if long_running {
                return self.next.call(request).await;
            }
            let timeout = match requested_timeout(request.uri().query()) {
                Ok(Some(asked)) => asked.min(self.request_timeout),
                Ok(None) => self.request_timeout,
                Err(message) => return GatewayError::BadRequest { message }.into_response(),
            };
            let deadline = Instant::now() + timeout;
            request.extensions_mut().insert(Deadline(deadline));
            let cut = request
                .extensions()
                .get::<ConnectionControl>()
                .and_then(|control| control.cut.clone());
            match tokio::time::timeout_at(deadline.into(), self.next.call(request)).await {
                Ok(response) => {
                    response.map(|body| Body::wrap(DeadlineBody::new(body, deadline, cut)))
                }
                Err(_) => GatewayError::Timeout {
                    message: TIMEOUT_MESSAGE.to_owned(),
                }
                .into_response(),
            }
        })
    }
}

/// The client's `?timeout=` (a Go duration such as `30s`), if it sent one.
/// As in kube, a timeout of 0 or less means the client set none.
fn requested_timeout(query: Option<&str>) -> Result<Option<Duration>, String> {
    let Some(query) = query else { return Ok(None) };
    let Some((_, value)) =
        url::form_urlencoded::parse(query.as_bytes()).find(|(key, _)| key == "timeout")
    else {
        return Ok(None);
    };
    let (negative, magnitude) = match value.strip_prefix('-') {
        Some(magnitude) => (true, magnitude),
        None => (false, value.strip_prefix('+').unwrap_or(&value)),
    };
    // Go's durations allow a bare "0".
    let parsed = if magnitude == "0" {
        Ok(Duration::ZERO)
    } else {
        crate::config::parse_duration(magnitude)
    };
    match parsed {
        Ok(timeout) if negative || timeout.is_zero() => Ok(None),
        Ok(timeout) => Ok(Some(timeout)),
        Err(message) => Err(format!(
            "invalid timeout specified in the request URL: {message}"
        )),
    }
}

/// How a response cut at its deadline ends, for hyper and the logs.
#[derive(Debug, thiserror::Error)]
#[error("the response did not complete within the request timeout")]
pub struct ResponseDeadlinePassed;

/// A response body that ends at the request's deadline. Most bodies are
/// over at their first poll (a Status, a small JSON object) and cost one
/// lock per poll; a body with more to send after a poll gets an enforcer,
/// a task that sleeps until the deadline and then drops the inner body,
/// cuts an HTTP/1.x connection and wakes whoever waits on the body. hyper
/// stops polling a body while the client is not reading, so only a task of
/// its own can end it on time.
struct DeadlineBody {
    shared: Arc<Mutex<Streaming>>,
    deadline: Instant,
    /// Taken when the enforcer starts.
    cut: Option<CancellationToken>,
    enforcer: Option<JoinHandle<()>>,
}

/// What the response and its enforcer share.
struct Streaming {
    /// None once the deadline has passed.
    body: Option<Body>,
    /// The task last waiting on the body, woken at the deadline.
    waker: Option<Waker>,
}

impl DeadlineBody {
    fn new(body: Body, deadline: Instant, cut: Option<CancellationToken>) -> Self {
        DeadlineBody {
            shared: Arc::new(Mutex::new(Streaming {
                body: Some(body),
                waker: None,
            })),
            deadline,
            cut,
            enforcer: None,
        }
    }

    fn streaming(&self) -> MutexGuard<'_, Streaming> {
        // A panic while holding the lock leaves nothing half-done here.
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn start_enforcer(&mut self) {
        let shared = self.shared.clone();
        let cut = self.cut.take();
        let deadline = self.deadline;
        self.enforcer = Some(tokio::spawn(async move {
            tokio::time::sleep_until(deadline.into()).await;
            let (body, waker) = {
                let mut streaming = shared.lock().unwrap_or_else(PoisonError::into_inner);
                (streaming.body.take(), streaming.waker.take())
            };
            if body.is_none() {
                return;
            }
            tracing::debug!("response cut at the request deadline");
            // The slot, the upstream connection: released now.
            drop(body);
            if let Some(cut) = cut {
                cut.cancel();
            }
            if let Some(waker) = waker {
                waker.wake();
            }
        }));
    }

    fn stop_enforcer(&mut self) {
        if let Some(enforcer) = self.enforcer.take() {
            enforcer.abort();
        }
    }
}

impl Drop for DeadlineBody {
    fn drop(&mut self) {
        self.stop_enforcer();
    }
}

impl http_body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        let (polled, more) = {
            let mut streaming = this.streaming();
            let Some(body) = streaming.body.as_mut() else {
                return Poll::Ready(Some(Err(ResponseDeadlinePassed.into())));
            };
            let polled = Pin::new(&mut *body).poll_frame(cx);
            let more = !matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_))))
                && !body.is_end_stream();
            if more
                && !streaming
                    .waker
                    .as_ref()
                    .is_some_and(|w| w.will_wake(cx.waker()))
            {
                streaming.waker = Some(cx.waker().clone());
            }
            (polled, more)
        };
        match (more, this.enforcer.is_some()) {
            (true, false) => this.start_enforcer(),
            (false, true) => this.stop_enforcer(),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        // Past the deadline the body is not over: its next poll is the error.
        self.streaming()
            .body
            .as_ref()
            .is_some_and(http_body::Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.streaming()
            .body
            .as_ref()
            .map_or_else(SizeHint::default, http_body::Body::size_hint)
    }
}
