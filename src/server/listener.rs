//! The listener: accepts TCP connections, does the TLS handshake when the
//! transport is TLS, and serves HTTP/1.1 and HTTP/2 on each connection
//! (ALPN over TLS, prior-knowledge h2c on plaintext) through the handler of
//! the current [`Snapshot`]: taken per connection for TLS and limits, per
//! request for the chain. It enforces the connection-level limits: header bytes (431),
//! read-header timeout, idle timeout; and it drains: when asked to stop it
//! stops accepting, lets every connection finish its in-flight requests, and
//! reports when the last one closed.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::snapshot::Live;
use crate::body::Body;
use crate::context::ConnectionInfo;

/// What the listener needs to serve.
pub struct Listener {
    pub tcp: TcpListener,
    pub live: Live,
}

/// Handles to stop a running listener.
#[derive(Clone)]
pub struct Drain {
    /// Cancelled to stop accepting new connections.
    pub stop_accepting: CancellationToken,
    /// Cancelled to ask every open connection to finish and close.
    pub close_connections: CancellationToken,
    pub connections: TaskTracker,
}

impl Listener {
    /// Accepts until `drain.stop_accepting` is cancelled.
    pub async fn run(self, drain: Drain) {
        loop {
            let accepted = tokio::select! {
                accepted = self.tcp.accept() => accepted,
                () = drain.stop_accepting.cancelled() => break,
            };
            let (stream, remote_addr) = match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: back off, go on.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let snapshot = self.live.load();
            let connection = Connection {
                builder: snapshot.http.clone(),
                live: self.live.clone(),
                idle_timeout: snapshot.config.limits.idle_timeout,
                close: drain.close_connections.clone(),
            };
            let tls = snapshot.tls.clone();
            let handshake_timeout = snapshot.config.limits.read_header_timeout;
            drain.connections.spawn(async move {
                match tls {
                    None => {
                        connection
                            .serve(stream, ConnectionInfo::new(remote_addr, false, None))
                            .await
                    }
                    Some(acceptor) => {
                        match tokio::time::timeout(handshake_timeout, acceptor.accept(stream)).await
                        {
                            Ok(Ok(stream)) => {
                                let client_chain =
                                    stream.get_ref().1.peer_certificates().map(|chain| {
                                        Arc::new(
                                            chain
                                                .iter()
                                                .map(|cert| cert.clone().into_owned())
                                                .collect(),
                                        )
                                    });
                                connection
                                    .serve(
                                        stream,
                                        ConnectionInfo::new(remote_addr, true, client_chain),
                                    )
                                    .await;
                            }
                            Ok(Err(error)) => {
                                tracing::debug!(%remote_addr, %error, "TLS handshake failed")
                            }
                            Err(_) => tracing::debug!(%remote_addr, "TLS handshake timed out"),
                        }
                    }
                }
            });
        }
    }
}

struct Connection {
    builder: Arc<auto::Builder<TokioExecutor>>,
    live: Live,
    idle_timeout: Duration,
    close: CancellationToken,
}

/// How many requests of one connection are being served (headers or body
/// still going), and when the last one ended: what the idle timer checks when
/// it fires. Requests only touch two atomics; nothing wakes the connection.
struct Activity {
    in_flight: AtomicUsize,
    /// Nanoseconds from `opened` to the end of the last request.
    last_done: AtomicU64,
    opened: Instant,
}

impl Activity {
    fn new() -> Self {
        Activity {
            in_flight: AtomicUsize::new(0),
            last_done: AtomicU64::new(0),
            opened: Instant::now(),
        }
    }

    /// When the connection became idle, or `None` while a request is served.
    fn idle_since(&self) -> Option<Instant> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let nanos = self.last_done.load(Ordering::Acquire);
        Some(self.opened + Duration::from_nanos(nanos))
    }
}

/// Decrements the activity count when the response body is done.
struct ActiveRequest(Arc<Activity>);

impl Drop for ActiveRequest {
    fn drop(&mut self) {
        let nanos = u64::try_from(self.0.opened.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.0.last_done.fetch_max(nanos, Ordering::AcqRel);
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Connection {
    async fn serve<IO>(self, io: IO, info: ConnectionInfo)
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let activity = Arc::new(Activity::new());
        let live = self.live.clone();
        let service_activity = activity.clone();
        let service = service_fn(move |request: hyper::Request<Incoming>| {
            // The request runs on the snapshot current now, to its end.
            let snapshot = live.load_full();
            let info = info.clone();
            service_activity.in_flight.fetch_add(1, Ordering::AcqRel);
            let active = ActiveRequest(service_activity.clone());
            async move {
                // hyper enforces the limit itself from its minimum buffer up;
                // a smaller limit is counted here, for every protocol.
                let limit = snapshot.config.limits.max_header_bytes;
                if limit < HYPER_MIN_HEADER_BUFFER && header_bytes(&request) > limit {
                    let response = headers_too_large(request.version());
                    return Ok::<_, Infallible>(response.map(|body| body.with_guard(active)));
                }
                let mut request = request.map(Body::wrap);
                request.extensions_mut().insert(info);
                let response = snapshot.handler.call(request).await;
                Ok::<_, Infallible>(response.map(|body| body.with_guard(active)))
            }
        });
        let connection = self
            .builder
            .serve_connection_with_upgrades(TokioIo::new(io), service);
        tokio::pin!(connection);
        let mut closing = false;
        loop {
            tokio::select! {
                // The connection first: it is what wakes this task nearly always.
                biased;
                result = connection.as_mut() => {
                    if let Err(error) = result {
                        tracing::debug!(%error, "connection ended with an error");
                    }
                    return;
                }
                () = self.close.cancelled(), if !closing => {
                    closing = true;
                    connection.as_mut().graceful_shutdown();
                }
                () = idle(&activity, self.idle_timeout), if !closing => {
                    closing = true;
                    connection.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// hyper's smallest HTTP/1.1 read buffer: header limits below it are ours to count.
pub const HYPER_MIN_HEADER_BUFFER: usize = 8192;

/// The size of a request's head as Go's `MaxHeaderBytes` counts it: the
/// request line and every `name: value` line.
fn header_bytes<B>(request: &hyper::Request<B>) -> usize {
    let target = request
        .uri()
        .path_and_query()
        .map_or(1, |target| target.as_str().len());
    let request_line = request.method().as_str().len() + 1 + target + " HTTP/1.1\r\n".len();
    let headers: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    request_line + headers
}

/// Go's answer to a request head over the limit, with the HTTP/1.x
/// connection closed after it.
fn headers_too_large(version: http::Version) -> http::Response<Body> {
    const TEXT: &str = "431 Request Header Fields Too Large";
    let mut response = http::Response::new(Body::full(TEXT));
    *response.status_mut() = http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE;
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    // Answered before the chain, whose outermost step sets it on the rest.
    headers.insert(
        http::header::X_CONTENT_TYPE_OPTIONS,
        http::HeaderValue::from_static("nosniff"),
    );
    if version < http::Version::HTTP_2 {
        headers.insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        );
    }
    response
}

/// Completes once the connection has had no request for `timeout`. One timer
/// per connection, re-armed only when it fires: a busy connection costs
/// nothing per request.
async fn idle(activity: &Activity, timeout: Duration) {
    let mut deadline = activity.opened + timeout;
    loop {
        tokio::time::sleep_until(deadline.into()).await;
        match activity.idle_since() {
            Some(since) if since.elapsed() >= timeout => return,
            Some(since) => deadline = since + timeout,
            None => deadline = Instant::now() + timeout,
        }
    }
}
