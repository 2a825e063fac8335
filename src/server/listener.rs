//! The listener: accepts TCP connections, does the TLS handshake when the
//! transport is TLS, and serves HTTP/1.1 and HTTP/2 on each connection
//! (ALPN over TLS, prior-knowledge h2c on plaintext) through the handler of
//! the current [`Snapshot`]: taken per connection
//! for TLS and limits, per request for the chain. It enforces the
//! connection-level limits: header bytes (431), read-header timeout
//! ([`super::header_deadline`]), idle timeout; it verifies a connection's
//! client certificate again for each request ([`ClientChain`]); it closes
//! an HTTP/1.x connection whose response passed its deadline (the timeout
//! filter asks, through [`ConnectionControl`]); and it drains: once
//! shutdown began every response tells its client to go (`Connection:
//! close`, or HTTP/2's GOAWAY); when asked to stop it stops accepting, lets
//! every connection finish its in-flight requests, and reports when the last
//! one closed; past the shutdown timeout it closes what is left.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rustls_pki_types::{CertificateDer, UnixTime};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TaskTrackerToken;

use super::header_deadline::{HeaderClock, HeaderDeadlineIo};
use super::snapshot::{HYPER_MIN_HEADER_BUFFER, Live, Snapshot};
use crate::body::Body;
use crate::context::{ConnectionControl, ConnectionInfo, RequestContext};
use crate::health::Flag;

/// What the listener needs to serve.
pub(crate) struct Listener {
    pub tcp: TcpListener,
    pub live: Live,
}

/// Handles to stop a running listener.
#[derive(Clone)]
pub(crate) struct Drain {
    /// Set when shutdown begins: from then on every response asks its
    /// client to close the connection.
    pub shutting_down: Flag,
    /// Cancelled to stop accepting new connections.
    pub stop_accepting: CancellationToken,
    /// Cancelled to ask every open connection to finish and close.
    pub close_connections: CancellationToken,
    /// Cancelled to close every open connection at once, whatever it is doing.
    pub cut_connections: CancellationToken,
    pub connections: TaskTracker,
    /// Every request until its response is done or dropped (an HTTP/2
    /// stream runs in a task of its own, outside its connection's).
    pub requests: TaskTracker,
}

impl Drain {
    /// Once both trackers are closed: waits until every connection has
    /// closed and every request has ended.
    pub(crate) async fn wait(&self) {
        self.connections.wait().await;
        self.requests.wait().await;
    }
}

impl Listener {
    /// Accepts until `drain.stop_accepting` is cancelled.
    pub(crate) async fn run(self, drain: Drain) {
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
            let limits = &snapshot.config.limits;
            let connection = Connection {
                builder: snapshot.http.clone(),
                live: self.live.clone(),
                idle_timeout: limits.idle_timeout,
                read_header_timeout: limits.read_header_timeout,
                drain: drain.clone(),
            };
            let tls = snapshot.tls.clone();
            let generation = snapshot.generation;
            let handshake_timeout = limits.read_header_timeout;
            let closing = drain.close_connections.clone();
            drain.connections.spawn(async move {
                match tls {
                    None => {
                        let info = ConnectionInfo::new(remote_addr, false, None);
                        connection.serve(stream, info, None).await
                    }
                    Some(tls) => {
                        let handshake = handshake(
                            tls.acceptor,
                            stream,
                            remote_addr,
                            handshake_timeout,
                            &closing,
                        );
                        if let Some(stream) = handshake.await {
                            let client_chain: Option<Arc<Vec<_>>> =
                                stream.get_ref().1.peer_certificates().map(|chain| {
                                    Arc::new(
                                        chain
                                            .iter()
                                            .map(|cert| cert.clone().into_owned())
                                            .collect(),
                                    )
                                });
                            let check = client_chain
                                .as_ref()
                                .map(|chain| ClientChain::verified(chain, generation));
                            let info = ConnectionInfo::new(remote_addr, true, client_chain);
                            connection.serve(stream, info, check).await;
                        }
                    }
                }
            });
        }
    }
}

/// The TLS handshake of an accepted connection, within `timeout`, counted by
/// its result; None when it failed, timed out, or the shutdown began closing
/// connections first: a connection still in its handshake carries no
/// request, and is closed as an idle one is (Go's `Shutdown` closes its new
/// connections too).
async fn handshake(
    acceptor: TlsAcceptor,
    stream: TcpStream,
    remote_addr: SocketAddr,
    timeout: Duration,
    closing: &CancellationToken,
) -> Option<TlsStream<TcpStream>> {
    let handshaken = tokio::select! {
        handshaken = tokio::time::timeout(timeout, acceptor.accept(stream)) => handshaken,
        () = closing.cancelled() => {
            crate::metrics::metrics().gateway.tls_handshake("shutdown");
            tracing::debug!(%remote_addr, "TLS handshake abandoned: the gateway is shutting down");
            return None;
        }
    };
    match handshaken {
        Ok(Ok(stream)) => {
            crate::metrics::metrics().gateway.tls_handshake("success");
            Some(stream)
        }
        Ok(Err(error)) => {
            crate::metrics::metrics().gateway.tls_handshake("failure");
            tracing::debug!(%remote_addr, %error, "TLS handshake failed");
            None
        }
        Err(_) => {
            crate::metrics::metrics().gateway.tls_handshake("timeout");
            tracing::debug!(%remote_addr, "TLS handshake timed out");
            None
        }
    }
}

struct Connection {
    builder: Arc<auto::Builder<TokioExecutor>>,
    live: Live,
    idle_timeout: Duration,
    read_header_timeout: Duration,
    drain: Drain,
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

/// Counts a request as in flight until its response body is done; the
/// last one to end starts the wait for the next request's first byte.
struct ActiveRequest {
    activity: Arc<Activity>,
    clock: Arc<HeaderClock>,
    _tracked: TaskTrackerToken,
}

impl ActiveRequest {
    fn start(requests: &Requests, version: http::Version) -> Self {
        requests.activity.in_flight.fetch_add(1, Ordering::AcqRel);
        requests.clock.request_started(version);
        ActiveRequest {
            activity: requests.activity.clone(),
            clock: requests.clock.clone(),
            _tracked: requests.drain.requests.token(),
        }
    }
}

impl Drop for ActiveRequest {
    fn drop(&mut self) {
        let activity = &self.activity;
        let nanos = u64::try_from(activity.opened.elapsed().as_nanos()).unwrap_or(u64::MAX);
        activity.last_done.fetch_max(nanos, Ordering::AcqRel);
        if activity.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.clock.requests_done();
        }
    }
}

/// The client certificate chain a connection's handshake verified, verified
/// again for its requests as kube's x509 authenticator verifies the chain of
/// each request (`AuthenticateRequest` in
/// `staging/src/k8s.io/apiserver/pkg/authentication/request/x509/x509.go`,
/// by `dynamiccertificates.WithChainsVerification`): at the request's time,
/// against the client CAs of the snapshot it is served on. A connection
/// outlives its certificate (HTTP/2 clients keep theirs for hours) and the
/// configuration it was made under. The chain is verified again only when
/// the snapshot changed or the first of its certificates ends.
struct ClientChain {
    state: Mutex<ChainState>,
}

#[derive(Clone, Copy)]
enum ChainState {
    /// Verified with the client CAs of the snapshot of this generation, and
    /// good until the earliest end of validity in the chain.
    Good { generation: u64, until: SystemTime },
    /// Refused by that snapshot's client CAs, until another snapshot is in
    /// force (time does not make a chain good again).
    Refused { generation: u64 },
    /// That snapshot verifies no client certificates: the chain is ignored,
    /// as kube's authenticator ignores it with an empty CA bundle.
    Ignored { generation: u64 },
}

impl ClientChain {
    /// The chain the handshake of a connection accepted under the snapshot
    /// of `generation` just verified.
    fn verified(chain: &[CertificateDer<'static>], generation: u64) -> Self {
        ClientChain {
            state: Mutex::new(ChainState::Good {
                generation,
                until: valid_until(chain),
            }),
        }
    }

    /// What the connection's requests served on `snapshot` say of the client.
    fn info(&self, connection: &Arc<ConnectionInfo>, snapshot: &Snapshot) -> Arc<ConnectionInfo> {
        let Some(chain) = connection.client_chain.as_deref() else {
            return connection.clone();
        };
        let now = SystemTime::now();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let current = match *state {
            ChainState::Good { generation, until }
                if generation == snapshot.generation && now < until =>
            {
                *state
            }
            ChainState::Refused { generation } | ChainState::Ignored { generation }
                if generation == snapshot.generation =>
            {
                *state
            }
            _ => {
                *state = verify_again(chain, snapshot, now);
                *state
            }
        };
        drop(state);
        match current {
            ChainState::Good { .. } => connection.clone(),
            ChainState::Refused { .. } => Arc::new(ConnectionInfo {
                client_chain: None,
                client_chain_refused: true,
                ..ConnectionInfo::clone(connection)
            }),
            ChainState::Ignored { .. } => Arc::new(ConnectionInfo {
                client_chain: None,
                ..ConnectionInfo::clone(connection)
            }),
        }
    }
}

/// `chain` verified at `now` by the client CAs of `snapshot`.
fn verify_again(chain: &[CertificateDer<'_>], snapshot: &Snapshot, now: SystemTime) -> ChainState {
    let generation = snapshot.generation;
    let verifier = snapshot
        .tls
        .as_ref()
        .and_then(|tls| tls.client_verifier.as_ref());
    let (Some(verifier), Some((leaf, intermediates))) = (verifier, chain.split_first()) else {
        return ChainState::Ignored { generation };
    };
    let at = UnixTime::since_unix_epoch(now.duration_since(UNIX_EPOCH).unwrap_or_default());
    match verifier.verify_client_cert(leaf, intermediates, at) {
        Ok(_) => ChainState::Good {
            generation,
            until: valid_until(chain),
        },
        Err(error) => {
            tracing::debug!(%error, "the connection's client certificate no longer verifies");
            ChainState::Refused { generation }
        }
    }
}

/// The earliest end of validity of the certificates of `chain`; one that
/// cannot be read is checked again at once.
fn valid_until(chain: &[CertificateDer<'_>]) -> SystemTime {
    chain
        .iter()
        .map(|cert| super::tls::not_after(cert).unwrap_or(UNIX_EPOCH))
        .min()
        .unwrap_or(UNIX_EPOCH)
}

impl Connection {
    async fn serve<IO>(self, io: IO, info: ConnectionInfo, client_chain: Option<ClientChain>)
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        // Children of the shutdown's tokens, so that the loop below waits on
        // two tokens rather than four.
        let cut = self.drain.cut_connections.child_token();
        let control = |cut| {
            ConnectionControl::new(
                cut,
                self.drain.cut_connections.clone(),
                self.drain.close_connections.clone(),
            )
        };
        let requests = Arc::new(Requests {
            live: self.live.clone(),
            info: Arc::new(info),
            client_chain,
            activity: Arc::new(Activity::new()),
            clock: Arc::new(HeaderClock::new(self.read_header_timeout)),
            http1_control: control(Some(cut.clone())),
            http2_control: control(None),
            cut,
            retire: self.drain.close_connections.child_token(),
            drain: self.drain.clone(),
        });
        let service = {
            let requests = requests.clone();
            service_fn(move |request| requests.serve(request))
        };
        let io = HeaderDeadlineIo::new(io, requests.clock.clone());
        let connection = self
            .builder
            .serve_connection_with_upgrades(TokioIo::new(io), service);
        tokio::pin!(connection);
        // What else ends or retires the connection. A `select!` polls every
        // branch each time the connection wakes its task, several times a
        // request (two locks per token each time); in a `FuturesUnordered`
        // each is polled only when it was itself woken.
        let mut signals: FuturesUnordered<BoxFuture<'_, Signal>> = FuturesUnordered::new();
        signals.push(Box::pin(async {
            requests.cut.cancelled().await;
            Signal::Cut
        }));
        signals.push(Box::pin(async {
            requests.retire.cancelled().await;
            Signal::Retire
        }));
        signals.push(Box::pin(async {
            idle(&requests.activity, self.idle_timeout).await;
            Signal::Idle
        }));
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
                Some(signal) = signals.next() => match signal {
                    // Dropping the connection closes it, and drops what its
                    // requests were doing.
                    Signal::Cut => return,
                    Signal::Retire | Signal::Idle => {
                        if !closing {
                            closing = true;
                            connection.as_mut().graceful_shutdown();
                        }
                    }
                },
            }
        }
    }
}

/// What, besides the connection itself, ends a connection's loop.
enum Signal {
    /// Close it now: [`Requests::cut`].
    Cut,
    /// Let it finish its requests and close: [`Requests::retire`].
    Retire,
    /// It has had no request for the idle timeout: retire it.
    Idle,
}

/// What a connection's requests share with it.
struct Requests {
    live: Live,
    info: Arc<ConnectionInfo>,
    /// The client certificate of a TLS connection that presented one.
    client_chain: Option<ClientChain>,
    activity: Arc<Activity>,
    clock: Arc<HeaderClock>,
    /// Cancelled by a request to close the connection now (HTTP/1.x: the
    /// connection is the request's stream), or by the shutdown cutting
    /// every connection.
    cut: CancellationToken,
    /// Cancelled by a request to retire the connection once the responses
    /// under way are done (HTTP/2's GOAWAY during shutdown), or by the
    /// shutdown asking every connection to finish.
    retire: CancellationToken,
    /// What an HTTP/1.x request may do to the connection (cut it), and
    /// what an HTTP/2 one may, made once for all of them.
    http1_control: ConnectionControl,
    http2_control: ConnectionControl,
    drain: Drain,
}

impl Requests {
    /// Serves one request on the snapshot current now, to its end. It
    /// counts as in flight from this call.
    fn serve(
        self: &Arc<Self>,
        request: hyper::Request<Incoming>,
    ) -> impl Future<Output = Result<http::Response<Body>, Infallible>> + Send + use<> {
        let active = ActiveRequest::start(self, request.version());
        let requests = self.clone();
        async move {
            let response = requests.respond(request).await;
            Ok(crate::body::keep_until_done(response, active))
        }
    }

    async fn respond(&self, request: hyper::Request<Incoming>) -> http::Response<Body> {
        let snapshot = self.live.load_full();
        let version = request.version();
        let http1 = version < http::Version::HTTP_2;
        // hyper enforces the limit itself from its minimum buffer up; a
        // smaller limit is counted here, for every protocol.
        let limit = snapshot.config.limits.max_header_bytes;
        let mut response = if limit < HYPER_MIN_HEADER_BUFFER && header_bytes(&request) > limit {
            headers_too_large(version)
        } else {
            let mut request = request.map(Body::wrap);
            let control = if http1 {
                &self.http1_control
            } else {
                &self.http2_control
            };
            let connection = match &self.client_chain {
                Some(client_chain) => client_chain.info(&self.info, &snapshot),
                None => self.info.clone(),
            };
            request.extensions_mut().insert(RequestContext {
                connection: Some(connection),
                control: Some(control.clone()),
                ..RequestContext::default()
            });
            snapshot.handler.call(request).await
        };
        if response.status() == http::StatusCode::SWITCHING_PROTOCOLS {
            // The connection is no longer HTTP: no more heads to time.
            self.clock.stop();
        }
        if self.drain.shutting_down.is_set() {
            send_clients_away(&mut response, http1, &self.retire);
        }
        response
    }
}

/// Once shutdown began, a response tells its client to take its next
/// requests elsewhere, so that clients and load balancers move off before
/// the listener closes: `Connection: close` on HTTP/1.x (hyper then closes
/// the connection after it), a GOAWAY on HTTP/2 once the streams under way
/// are done (what Go's server does for a handler's `Connection: close`).
fn send_clients_away(response: &mut http::Response<Body>, http1: bool, retire: &CancellationToken) {
    if http1 {
        response.headers_mut().insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        );
    } else {
        retire.cancel();
    }
}

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
