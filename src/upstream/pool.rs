//! The keep-alive pool behind `http://` upstreams: the last step of the
//! request flow (director → upstream proxy → this pool → the upstream).
//!
//! Idle HTTP/1.1 connections wait on a stack, the most recently used on top:
//! it is the one least likely to have been closed by the upstream. A
//! connection goes back on the stack when its response body has been read to
//! the end; a response dropped half-read takes its connection with it, since
//! HTTP/1.1 cannot abandon a message part-way. Connections idle longer than
//! the idle timeout are closed when the pool next sees them, and at most
//! [`MAX_IDLE_CONNECTIONS`] wait: after a burst, the surplus is closed.
//!
//! `https://` upstreams use hyper-util's pooled client instead, for TLS and
//! HTTP/2 by ALPN. For plain HTTP/1.1 that client costs about 10k
//! instructions per request (its pool is a SipHash-keyed map consulted at
//! checkout and return, and it spawns a task per response to watch the
//! connection become idle), a sixth of a proxied request: bench/README.md.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method};
use http_body::{Body as _, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::metrics::gateway::PoolMetrics;

use super::ExchangeError;
use crate::body::{Body, Request};

/// The most idle connections kept per upstream, enough for the concurrency
/// a gateway worker sustains against one upstream.
const MAX_IDLE_CONNECTIONS: usize = 1024;

/// Idle keep-alive connections to one upstream address.
pub(crate) struct Http1Pool {
    host: String,
    port: u16,
    idle_timeout: Duration,
    idle: Mutex<VecDeque<IdleConnection>>,
    /// `wasmgate_upstream_connections_opened_total` and
    /// `wasmgate_upstream_pool_idle_connections` of this upstream.
    metrics: PoolMetrics,
}

struct IdleConnection {
    sender: SendRequest<Body>,
    since: Instant,
}

impl Http1Pool {
    /// A pool for `host:port`; `host` is a name, an IPv4 address or an IPv6
    /// address with or without its brackets.
    pub(crate) fn new(
        host: &str,
        port: u16,
        idle_timeout: Duration,
        metrics: PoolMetrics,
    ) -> Arc<Self> {
        Arc::new(Http1Pool {
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port,
            idle_timeout,
            idle: Mutex::new(VecDeque::new()),
            metrics,
        })
    }

    /// Sends `request` (origin-form URI, `Host` set) on an idle connection,
    /// or on a new one when none is idle.
    #[expect(
        clippy::manual_async_fn,
        reason = "an async fn would keep the request twice in its future (bench/README.md, \"The native steps' futures\")"
    )]
    pub(crate) fn send(
        self: &Arc<Self>,
        mut request: Request,
    ) -> impl Future<Output = Result<http::Response<PooledBody>, ExchangeError>> + Send + '_ {
        // An `async` block that takes the request, not an `async fn`: the
        // latter would keep the argument and the variable it is moved to
        // side by side in the future, which every proxied request's box
        // holds.
        async move {
            while let Some(mut sender) = self.checkout() {
                // An idle connection may have been closed by the upstream since
                // its last response: a request it never started to write is sent
                // on the next one.
                if sender.ready().await.is_err() {
                    continue;
                }
                let replay = ReplayableHead::of(&request);
                match sender.try_send_request(request).await {
                    Ok(response) => return Ok(self.pooled(response, sender)),
                    Err(mut failure) => match (failure.take_message(), replay) {
                        (Some(unsent), _) => request = unsent,
                        // The upstream closed the idle connection as the request
                        // went out, before any answer: a request that may be
                        // sent twice goes again on a fresh connection, as Go's
                        // transport and nginx's `proxy_next_upstream error` do.
                        (None, Some(head)) => {
                            tracing::debug!(error = %failure.error(), "a reused upstream connection closed under a request: sending it again");
                            request = head.into_request();
                            break;
                        }
                        (None, None) => {
                            return Err(ExchangeError::Exchange(failure.into_error().into()));
                        }
                    },
                }
            }
            // Boxed: the connect and handshake futures are large, and inline
            // they would be copied into every request's box, reused
            // connection or not.
            let mut sender = Box::pin(self.connect()).await?;
            let response = sender
                .send_request(request)
                .await
                .map_err(|error| ExchangeError::Exchange(error.into()))?;
            Ok(self.pooled(response, sender))
        }
    }

    fn checkout(&self) -> Option<SendRequest<Body>> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        while let Some(connection) = idle.pop_back() {
            self.metrics.idle.dec();
            if !connection.sender.is_closed() && connection.since.elapsed() < self.idle_timeout {
                return Some(connection.sender);
            }
        }
        None
    }

    /// Takes back a connection whose response has been read. One that is
    /// still sending its request body (the upstream answered before reading
    /// it all) is not ready for another request: it waits aside until it is,
    /// so that no request queues behind a slow upload.
    fn release(self: &Arc<Self>, mut sender: SendRequest<Body>) {
        if sender.is_ready() {
            self.check_in(sender);
            return;
        }
        let pool = Arc::clone(self);
        tokio::spawn(async move {
            let ready = tokio::time::timeout(pool.idle_timeout, sender.ready()).await;
            if let Ok(Ok(())) = ready {
                pool.check_in(sender);
            }
        });
    }

    fn check_in(&self, sender: SendRequest<Body>) {
        if sender.is_closed() {
            return;
        }
        let now = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        // The oldest are at the bottom of the stack.
        while idle
            .front()
            .is_some_and(|oldest| now.duration_since(oldest.since) >= self.idle_timeout)
        {
            idle.pop_front();
            self.metrics.idle.dec();
        }
        if idle.len() < MAX_IDLE_CONNECTIONS {
            idle.push_back(IdleConnection { sender, since: now });
            self.metrics.idle.inc();
        }
    }

    async fn connect(&self) -> Result<SendRequest<Body>, ExchangeError> {
        let connect_error = |error: std::io::Error| ExchangeError::Connect(error.into());
        let stream = TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(connect_error)?;
        stream.set_nodelay(true).map_err(connect_error)?;
        self.metrics.opened.inc();
        let (sender, connection) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|error| ExchangeError::Connect(error.into()))?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "an upstream connection ended with an error");
            }
        });
        Ok(sender)
    }

    fn pooled(
        self: &Arc<Self>,
        response: http::Response<Incoming>,
        sender: SendRequest<Body>,
    ) -> http::Response<PooledBody> {
        // After a 101 the connection speaks another protocol (the proxy
        // refuses it: `UpstreamProxy::exchange`); it never goes back.
        let reusable = response.status() != http::StatusCode::SWITCHING_PROTOCOLS;
        response.map(|body| {
            let mut pooled = PooledBody {
                body,
                connection: reusable.then(|| (sender, Arc::clone(self))),
            };
            // Nobody polls a body that is empty from the start (HEAD, 204,
            // 304, `Content-Length: 0`).
            pooled.release_if_read();
            pooled
        })
    }
}

/// A copy of a request's head, to send it again if a reused connection
/// fails under it: only for a method that may be repeated (RFC 9110
/// §9.2.2: GET, HEAD, OPTIONS, TRACE) and a request without a body, which
/// the first attempt consumed. Made for every such request on a reused
/// connection and almost never used, so its headers are a plain list, one
/// allocation, rather than a `HeaderMap`'s clone (its table and its
/// entries); the map is built again only to resend.
struct ReplayableHead {
    method: Method,
    uri: http::Uri,
    version: http::Version,
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl ReplayableHead {
    fn of(request: &Request) -> Option<Self> {
        let idempotent = matches!(
            *request.method(),
            Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
        );
        if !idempotent || !request.body().is_end_stream() {
            return None;
        }
        let mut headers = Vec::with_capacity(request.headers().len());
        headers.extend(
            request
                .headers()
                .iter()
                .map(|(name, value)| (name.clone(), value.clone())),
        );
        Some(ReplayableHead {
            method: request.method().clone(),
            uri: request.uri().clone(),
            version: request.version(),
            headers,
        })
    }

    /// The request again, its headers in the order they were sent.
    fn into_request(self) -> Request {
        let mut request = Request::new(Body::empty());
        *request.method_mut() = self.method;
        *request.uri_mut() = self.uri;
        *request.version_mut() = self.version;
        let headers = request.headers_mut();
        headers.reserve(self.headers.len());
        for (name, value) in self.headers {
            headers.append(name, value);
        }
        request
    }
}

/// An upstream response body that returns its connection to the pool once it
/// has been read to the end.
pub(crate) struct PooledBody {
    body: Incoming,
    connection: Option<(SendRequest<Body>, Arc<Http1Pool>)>,
}

impl PooledBody {
    fn release_if_read(&mut self) {
        if self.body.is_end_stream() {
            self.release();
        }
    }

    fn release(&mut self) {
        if let Some((sender, pool)) = self.connection.take() {
            pool.release(sender);
        }
    }
}

impl http_body::Body for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let frame = ready!(Pin::new(&mut self.body).poll_frame(cx));
        match &frame {
            // A reader stops at `is_end_stream`, without polling for the end.
            Some(Ok(_)) => self.release_if_read(),
            None => self.release(),
            // A broken body closes its connection.
            Some(Err(_)) => self.connection = None,
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
