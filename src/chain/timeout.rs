//! Request deadline and timeout (kube's `WithRequestDeadline` and
//! `WithTimeoutForNonLongRunningRequests`): a request that is not
//! long-running must be over within the request timeout of its arrival (the
//! received timestamp request info stamps), or within its own `?timeout=`
//! when that is shorter. The deadline covers the whole exchange:
//! a response whose head is not ready by then is a 504 Status (the work
//! inside is cancelled); a response whose body is still going then is cut
//! (kube's `panic(http.ErrAbortHandler)`: HTTP/1.x closes the connection,
//! HTTP/2 resets the stream). At the deadline the body being sent is
//! dropped, and with it the max-in-flight slot and the upstream connection
//! it holds, whether or not the client is reading.
//!
//! Long-running requests (`crate::context::is_long_running`: watch,
//! proxy, exec, ..., and upgrades) are exempt. A watch instead lasts the
//! `timeoutSeconds` its client asked for or, without one, a random time in
//! [`min_request_timeout`, 2 × `min_request_timeout`), as kube's watch handler
//! (`staging/src/k8s.io/apiserver/pkg/endpoints/handlers/get.go`) spreads
//! its watches' ends; then its body ends, cleanly, as kube's does. Every
//! long-running body also ends when the shutdown, `shutdown_delay` after it
//! began, closes the connections ([`ConnectionControl::closing`]), and so
//! does the wait for a long-running response's head (a 503): a stream does
//! not hold the drain until `shutdown_timeout`.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use http_body::{Body as _, Frame, SizeHint};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::body::{Body, BodyError, Request, Response};
use crate::context::{ConnectionControl, RequestContext, Terminated};
use crate::handler::{Handler, SharedHandler};
use crate::status::GatewayError;

/// What the client is told (after kube's "Timeout: "), and what audit records, when the deadline
/// passes before the response head.
pub(crate) const TIMEOUT_MESSAGE: &str = "request did not complete within the allotted timeout";

pub(crate) struct Timeout {
    pub request_timeout: Duration,
    pub min_request_timeout: Duration,
    pub next: SharedHandler,
}

impl Handler for Timeout {
    fn call(&self, mut request: Request) -> BoxFuture<'_, Response> {
        if crate::context::is_long_running(&request) {
            return Box::pin(self.long_running(request));
        }
        let timeout = match requested_timeout(request.uri().query()) {
            Ok(Some(asked)) => asked.min(self.request_timeout),
            Ok(None) => self.request_timeout,
            Err(message) => {
                return Box::pin(std::future::ready(
                    GatewayError::BadRequest { message }.into_response(),
                ));
            }
        };
        // As kube's `withRequestDeadline`: the timeout counts from the
        // request's arrival, from now only for a request that has none.
        let context = RequestContext::learn(request.extensions_mut());
        let started = context
            .received
            .map_or_else(Instant::now, |received| received.instant);
        let deadline = started + timeout;
        context.deadline = Some(deadline);
        let connection = context.control.clone();
        // The next steps are called now, the request handed on, so that the
        // box holds only their future and the deadline.
        tokio::time::timeout_at(deadline.into(), self.next.call(request))
            .map(move |answered| match answered {
                Ok(response) => {
                    response.map(|body| Body::wrap(DeadlineBody::new(body, deadline, connection)))
                }
                Err(_) => {
                    let mut response = GatewayError::Timeout {
                        message: TIMEOUT_MESSAGE.to_owned(),
                    }
                    .into_response();
                    response.extensions_mut().insert(Terminated);
                    response
                }
            })
            .boxed()
    }
}

impl Timeout {
    async fn long_running(&self, request: Request) -> Response {
        // A `timeoutSeconds` past the clock's range (any int64 is a valid
        // one) gives the watch no end of its own: it ends with its
        // connection or at the shutdown, as its client asked.
        let watch_ends = self
            .watch_timeout(&request)
            .and_then(|timeout| Instant::now().checked_add(timeout));
        let closing = RequestContext::of(request.extensions())
            .control
            .as_ref()
            .map(|control| control.closing().clone());
        // No deadline bounds the wait for a long-running request's head (an
        // upstream that took a watch or an upgrade and never answers): the
        // shutdown's closing, which ends their bodies and tunnels, ends
        // this wait too, or it would hold the drain until `shutdown_timeout`.
        let response = match &closing {
            Some(closing) => tokio::select! {
                response = self.next.call(request) => response,
                () = closing.cancelled() => return shut_down_before_the_answer(),
            },
            None => self.next.call(request).await,
        };
        if watch_ends.is_none() && closing.is_none() {
            return response;
        }
        response.map(|body| Body::wrap(LongRunningBody::new(body, watch_ends, closing)))
    }

    /// How long a watch lasts (kube's `ListResource` in handlers/get.go,
    /// which hands it to `serveWatch` in handlers/watch.go): the
    /// client's `timeoutSeconds`, or a random time in [min, 2 × min) when it
    /// sent none or 0. None for every other long-running request.
    fn watch_timeout(&self, request: &Request) -> Option<Duration> {
        let info = RequestContext::of(request.extensions()).info.as_ref()?;
        if info.verb != "watch" {
            return None;
        }
        let asked = request.uri().query().and_then(|query| {
            url::form_urlencoded::parse(query.as_bytes())
                .find(|(key, _)| key == "timeoutSeconds")
                .and_then(|(_, value)| value.parse::<u64>().ok())
        });
        match asked {
            Some(seconds) if seconds > 0 => Some(Duration::from_secs(seconds)),
            _ => Some(
                self.min_request_timeout
                    .mul_f64(1.0 + rand::random::<f64>()),
            ),
        }
    }
}

/// The answer to a long-running request whose head had not come when the
/// shutdown closed the connections, or that came after: kube's shutdown
/// refusal, 503 with `Retry-After: 1`.
fn shut_down_before_the_answer() -> Response {
    GatewayError::ShuttingDown {
        message: "the gateway shut down before the response began".to_owned(),
    }
    .into_response()
}

/// A long-running response's body: ends, cleanly, when its watch's time is
/// up or when the shutdown closes the connections; otherwise it is the
/// upstream's body, each frame passed on as it comes.
struct LongRunningBody {
    /// None once ended.
    body: Option<Body>,
    ends: Option<Pin<Box<tokio::time::Sleep>>>,
    closing: Option<Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>>,
}

impl LongRunningBody {
    fn new(body: Body, ends: Option<Instant>, closing: Option<CancellationToken>) -> Self {
        LongRunningBody {
            body: Some(body),
            ends: ends.map(|at| Box::pin(tokio::time::sleep_until(at.into()))),
            closing: closing.map(|token| Box::pin(token.cancelled_owned())),
        }
    }
}

impl http_body::Body for LongRunningBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        let over = this
            .ends
            .as_mut()
            .is_some_and(|ends| ends.as_mut().poll(cx).is_ready())
            || this
                .closing
                .as_mut()
                .is_some_and(|closing| closing.as_mut().poll(cx).is_ready());
        if over {
            this.body = None;
        }
        match this.body.as_mut() {
            Some(body) => Pin::new(body).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body
            .as_ref()
            .is_none_or(http_body::Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.body
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), http_body::Body::size_hint)
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
pub(crate) struct ResponseDeadlinePassed;

/// A response body that ends at the request's deadline. Most bodies are
/// over at their first poll (a Status, a small JSON object): the response
/// holds them and polls them directly. A body with more to send after a
/// poll moves into a lock shared with an enforcer, a task that sleeps until
/// the deadline and then drops the inner body, cuts an HTTP/1.x connection
/// and wakes whoever waits on the body. hyper stops polling a body while the
/// client is not reading, so only a task of its own can end it on time.
struct DeadlineBody {
    held: Held,
    deadline: Instant,
    /// The connection the enforcer cuts (an HTTP/1.x one); taken when the
    /// enforcer starts.
    connection: Option<ConnectionControl>,
    enforcer: Option<JoinHandle<()>>,
}

/// Where the inner body is.
enum Held {
    /// With the response alone: no enforcer has started.
    Here(Body),
    /// Shared with the enforcer, from the first poll that left more to send.
    Shared(Arc<Mutex<Streaming>>),
}

/// What the response and its enforcer share.
struct Streaming {
    /// None once the deadline has passed.
    body: Option<Body>,
    /// The task last waiting on the body, woken at the deadline.
    waker: Option<Waker>,
}

impl DeadlineBody {
    fn new(body: Body, deadline: Instant, connection: Option<ConnectionControl>) -> Self {
        DeadlineBody {
            held: Held::Here(body),
            deadline,
            connection,
            enforcer: None,
        }
    }

    fn start_enforcer(&mut self, shared: Arc<Mutex<Streaming>>) {
        let connection = self.connection.take();
        let deadline = self.deadline;
        self.enforcer = Some(tokio::spawn(async move {
            tokio::time::sleep_until(deadline.into()).await;
            let (body, waker) = {
                let mut streaming = lock(&shared);
                (streaming.body.take(), streaming.waker.take())
            };
            if body.is_none() {
                return;
            }
            tracing::debug!("response cut at the request deadline");
            // The slot, the upstream connection: released now.
            drop(body);
            if let Some(cut) = connection.as_ref().and_then(ConnectionControl::cut) {
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

    /// A poll of the body once it is shared: under the lock, the waker kept
    /// for the enforcer while there is more to send.
    fn poll_shared(
        &mut self,
        shared: &Arc<Mutex<Streaming>>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let (polled, more) = {
            let mut streaming = lock(shared);
            let Some(body) = streaming.body.as_mut() else {
                return Poll::Ready(Some(Err(ResponseDeadlinePassed.into())));
            };
            let polled = Pin::new(&mut *body).poll_frame(cx);
            let more = has_more(&polled, body);
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
        match (more, self.enforcer.is_some()) {
            (true, false) => self.start_enforcer(shared.clone()),
            (false, true) => self.stop_enforcer(),
            _ => {}
        }
        polled
    }
}

/// Whether `body` has more to send after it answered a poll with `polled`.
fn has_more(polled: &Poll<Option<Result<Frame<Bytes>, BodyError>>>, body: &Body) -> bool {
    !matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) && !body.is_end_stream()
}

fn lock(shared: &Mutex<Streaming>) -> MutexGuard<'_, Streaming> {
    // A panic while holding the lock leaves nothing half-done here.
    shared.lock().unwrap_or_else(PoisonError::into_inner)
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
        let body = match &mut this.held {
            Held::Shared(shared) => {
                let shared = shared.clone();
                return this.poll_shared(&shared, cx);
            }
            Held::Here(body) => body,
        };
        let polled = Pin::new(&mut *body).poll_frame(cx);
        if has_more(&polled, body) {
            // From now on the enforcer may take the body at the deadline.
            let shared = Arc::new(Mutex::new(Streaming {
                body: Some(std::mem::take(body)),
                waker: Some(cx.waker().clone()),
            }));
            this.held = Held::Shared(shared.clone());
            this.start_enforcer(shared);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        match &self.held {
            Held::Here(body) => body.is_end_stream(),
            // Past the deadline the body is not over: its next poll is the error.
            Held::Shared(shared) => lock(shared)
                .body
                .as_ref()
                .is_some_and(http_body::Body::is_end_stream),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.held {
            Held::Here(body) => body.size_hint(),
            Held::Shared(shared) => lock(shared)
                .body
                .as_ref()
                .map_or_else(SizeHint::default, http_body::Body::size_hint),
        }
    }
}

#[cfg(test)]
mod tests {
    //! kube's `WithTimeoutForNonLongRunningRequests`
    //! (`staging/src/k8s.io/apiserver/pkg/server/filters/timeout.go`) and
    //! `WithRequestDeadline` (`staging/src/k8s.io/apiserver/pkg/endpoints/filters/request_deadline.go`),
    //! checked on the filter alone in front of a stub next handler that
    //! waits as long as the test says, then answers with a body that may
    //! never end.

    use std::convert::Infallible;

    use http::StatusCode;
    use http_body_util::{BodyExt, StreamBody};

    use super::*;
    use crate::context::ReceivedAt;
    use crate::request_info::RequestInfo;

    /// The next step: waits `delay`, then answers 200; its body never ends
    /// when `endless`. It reports the deadline it was given in `x-deadline-ms`.
    struct Slow {
        delay: Duration,
        endless: bool,
    }

    impl Handler for Slow {
        fn call(&self, request: Request) -> BoxFuture<'_, Response> {
            let deadline = RequestContext::of(request.extensions()).deadline;
            Box::pin(async move {
                tokio::time::sleep(self.delay).await;
                let body = if self.endless {
                    Body::wrap(StreamBody::new(futures_util::stream::pending::<
                        Result<Frame<Bytes>, Infallible>,
                    >()))
                } else {
                    Body::full("done")
                };
                let mut response = http::Response::new(body);
                if let Some(deadline) = deadline {
                    let left = deadline.saturating_duration_since(Instant::now());
                    response.headers_mut().insert(
                        "x-deadline-ms",
                        http::HeaderValue::from(
                            u64::try_from(left.as_millis()).unwrap_or(u64::MAX),
                        ),
                    );
                }
                response
            })
        }
    }

    fn timeout(request_timeout: Duration, delay: Duration, endless: bool) -> Timeout {
        Timeout {
            request_timeout,
            min_request_timeout: Duration::from_secs(1800),
            next: Arc::new(Slow { delay, endless }),
        }
    }

    fn request(target: &str, verb: &str) -> Request {
        let mut request = http::Request::builder()
            .uri(target)
            .body(Body::empty())
            .expect("a request");
        RequestContext::learn(request.extensions_mut()).info = Some(RequestInfo {
            is_resource_request: true,
            verb: verb.into(),
            resource: "widgets".into(),
            ..RequestInfo::default()
        });
        request
    }

    /// The deadline [`Slow`] was given, in ms from when it answered.
    fn deadline_left_ms(response: &Response) -> u64 {
        response.headers()["x-deadline-ms"]
            .to_str()
            .expect("a number")
            .parse()
            .expect("a number")
    }

    async fn status_json(response: Response) -> serde_json::Value {
        let body = response.into_body().collect().await.expect("a body");
        serde_json::from_slice(&body.to_bytes()).expect("a Status")
    }

    const LONG: Duration = Duration::from_secs(30);

    /// timeout.go: a response whose head is not ready within the request
    /// timeout is kube's 504 Status, "request did not complete within the
    /// allotted timeout", as soon as the timeout passes.
    #[tokio::test]
    async fn a_response_not_ready_by_the_deadline_is_kubes_504() {
        let filter = timeout(Duration::from_millis(50), LONG, false);
        let started = Instant::now();
        let response = filter.call(request("/apis/g/v1/widgets", "list")).await;
        assert!(started.elapsed() < LONG / 2);
        assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
        let status = status_json(response).await;
        assert_eq!(status["reason"], "Timeout");
        assert_eq!(status["message"], format!("Timeout: {TIMEOUT_MESSAGE}"));
        assert_eq!(status["details"], serde_json::json!({}));
    }

    /// request_deadline.go: the client's `?timeout=` is the deadline when it
    /// is shorter than the server's; the next handler is given it.
    #[tokio::test]
    async fn a_shorter_client_timeout_wins() {
        let filter = timeout(LONG, LONG, false);
        let started = Instant::now();
        let response = filter
            .call(request("/apis/g/v1/widgets?timeout=50ms", "list"))
            .await;
        assert!(started.elapsed() < LONG / 2);
        assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);

        let quick = timeout(LONG, Duration::ZERO, false);
        let response = quick
            .call(request("/apis/g/v1/widgets?timeout=10s", "list"))
            .await;
        assert_eq!(response.status(), StatusCode::OK);
        let left = deadline_left_ms(&response);
        assert!(left <= 10_000, "{left} ms left of a 10 s timeout");
    }

    /// request_deadline.go: the deadline is the request's arrival (its
    /// received timestamp) plus the timeout, not the moment this step
    /// runs.
    #[tokio::test]
    async fn the_deadline_counts_from_the_requests_arrival() {
        let filter = timeout(LONG, Duration::ZERO, false);
        let mut arrived_earlier = request("/apis/g/v1/widgets", "list");
        let waited = Duration::from_secs(10);
        RequestContext::learn(arrived_earlier.extensions_mut()).received = Some(ReceivedAt {
            instant: Instant::now()
                .checked_sub(waited)
                .expect("the clock has run 10 s"),
            wall: std::time::SystemTime::now(),
        });
        let response = filter.call(arrived_earlier).await;
        assert_eq!(response.status(), StatusCode::OK);
        let left = deadline_left_ms(&response);
        let most = (LONG - waited).as_millis();
        assert!(u128::from(left) <= most, "{left} ms left, at most {most}");
    }

    /// request_deadline.go: a `timeout` that is not a Go duration is a 400;
    /// 0 or a negative one means the client set none.
    #[tokio::test]
    async fn a_bad_client_timeout_is_a_400_and_zero_or_negative_is_none() {
        let filter = timeout(LONG, Duration::from_millis(20), false);
        let response = filter
            .call(request("/apis/g/v1/widgets?timeout=soon", "list"))
            .await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let status = status_json(response).await;
        assert!(
            status["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("invalid timeout specified in the request URL")),
            "{status}"
        );
        for none in ["0", "-1s"] {
            let response = filter
                .call(request(
                    &format!("/apis/g/v1/widgets?timeout={none}"),
                    "list",
                ))
                .await;
            assert_eq!(response.status(), StatusCode::OK, "timeout={none}");
        }
    }

    /// timeout.go: long-running requests (a watch) are not timed out.
    #[tokio::test]
    async fn long_running_requests_are_exempt() {
        let filter = timeout(Duration::from_millis(20), Duration::from_millis(200), false);
        let response = filter.call(request("/apis/g/v1/widgets", "watch")).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert!(response.headers().get("x-deadline-ms").is_none());
    }

    /// A watch's `timeoutSeconds` is any int64 (request info takes it as
    /// kube's `ListOptions` does): the largest one, past the clock's range,
    /// is a watch without an end of its own, not an overflow (a panic, a
    /// 500, before authentication).
    #[tokio::test]
    async fn a_watch_asking_for_the_largest_timeout_seconds_is_served() {
        let filter = timeout(LONG, Duration::ZERO, false);
        let target = format!("/apis/g/v1/widgets?watch=1&timeoutSeconds={}", i64::MAX);
        let response = filter.call(request(&target, "watch")).await;
        assert_eq!(response.status(), StatusCode::OK);
    }

    /// timeout.go's `panic(http.ErrAbortHandler)` for a response already
    /// under way: a body still going at the deadline ends there with an
    /// error, so the connection or stream is cut.
    #[tokio::test]
    async fn a_body_still_going_at_the_deadline_is_cut() {
        let filter = timeout(Duration::from_millis(100), Duration::ZERO, true);
        let started = Instant::now();
        let response = filter.call(request("/apis/g/v1/widgets", "get")).await;
        assert_eq!(response.status(), StatusCode::OK);
        let error = response
            .into_body()
            .collect()
            .await
            .expect_err("the body is cut");
        assert!(crate::body::caused_by::<ResponseDeadlinePassed>(&*error));
        assert!(started.elapsed() >= Duration::from_millis(100));
        assert!(started.elapsed() < LONG / 2);
    }
}
