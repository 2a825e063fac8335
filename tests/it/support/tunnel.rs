//! An https upstream for upgrades and watches: it switches to WebSocket and
//! echoes every message, switches to kubectl's `SPDY/3.1` (answering the
//! first `X-Stream-Protocol-Version` offered) and echoes every byte, and
//! answers any other request with a watch stream of one event every
//! `interval`. It asks clients for a certificate of the CA it is given, and
//! records the head of each request it got, whether its connection
//! presented a (verified) client certificate, and when it wrote each watch
//! event.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::StreamBody;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

use super::certs::{Ca, CertAndKey};
use super::upstream::tls_acceptor_asking;

/// What the upstream saw of a request: method, target, HTTP version, its
/// `Upgrade` header, all its headers, and whether its connection presented
/// a client certificate.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub target: String,
    pub version: http::Version,
    pub upgrade: Option<String>,
    pub headers: http::HeaderMap,
    pub client_cert: bool,
}

pub struct TunnelUpstream {
    pub addr: SocketAddr,
    seen: tokio::sync::Mutex<mpsc::UnboundedReceiver<Seen>>,
    written: tokio::sync::Mutex<mpsc::UnboundedReceiver<Instant>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TunnelUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type WatchBody = UnsyncBoxBody<Bytes, std::convert::Infallible>;

impl TunnelUpstream {
    /// Serves `cert` over TLS (ALPN h2 and http/1.1), verifying client
    /// certificates of `client_ca` when presented; watch events every
    /// `interval`.
    pub async fn start(cert: &CertAndKey, client_ca: &Ca, interval: Duration) -> TunnelUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("an address");
        let acceptor = tls_acceptor_asking(cert, Some(&client_ca.cert_pem));
        let (seen_tx, seen_rx) = mpsc::unbounded_channel();
        let (written_tx, written_rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let acceptor = acceptor.clone();
                let seen = seen_tx.clone();
                let written = written_tx.clone();
                tokio::spawn(async move {
                    let Ok(stream) = acceptor.accept(stream).await else {
                        return;
                    };
                    let client_cert = stream.get_ref().1.peer_certificates().is_some();
                    let service = service_fn(move |request| {
                        let (seen, written) = (seen.clone(), written.clone());
                        async move {
                            Ok::<_, std::convert::Infallible>(answer(
                                request,
                                client_cert,
                                &seen,
                                written,
                                interval,
                            ))
                        }
                    });
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection_with_upgrades(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        TunnelUpstream {
            addr,
            seen: tokio::sync::Mutex::new(seen_rx),
            written: tokio::sync::Mutex::new(written_rx),
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// The next request the upstream got (bounded wait).
    pub async fn next_seen(&self) -> Seen {
        next_of("a request at the tunnel upstream", &self.seen).await
    }

    /// When the upstream wrote its next watch event (bounded wait).
    pub async fn next_written(&self) -> Instant {
        next_of("a watch event written", &self.written).await
    }

    /// The request the upstream got, if one came.
    pub async fn try_seen(&self) -> Option<Seen> {
        self.seen.lock().await.try_recv().ok()
    }
}

/// The next value `receiver` gets, waited for at most [`super::BOUND`].
async fn next_of<T>(what: &str, receiver: &tokio::sync::Mutex<mpsc::UnboundedReceiver<T>>) -> T {
    super::bounded(what, async {
        receiver
            .lock()
            .await
            .recv()
            .await
            .expect("the upstream runs")
    })
    .await
}

fn answer(
    mut request: hyper::Request<Incoming>,
    client_cert: bool,
    seen: &mpsc::UnboundedSender<Seen>,
    written: mpsc::UnboundedSender<Instant>,
    interval: Duration,
) -> hyper::Response<WatchBody> {
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    };
    let upgrade = header("upgrade");
    let _ = seen.send(Seen {
        method: request.method().to_string(),
        target: request.uri().to_string(),
        version: request.version(),
        upgrade: upgrade.clone(),
        headers: request.headers().clone(),
        client_cert,
    });
    let empty = || UnsyncBoxBody::new(http_body_util::Empty::new());
    match upgrade.as_deref() {
        Some("websocket") => {
            let key = header("sec-websocket-key").unwrap_or_default();
            let upgraded = hyper::upgrade::on(&mut request);
            tokio::spawn(async move {
                let Ok(upgraded) = upgraded.await else { return };
                let mut socket =
                    WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None)
                        .await;
                while let Some(Ok(message)) = socket.next().await {
                    if message.is_close() {
                        break;
                    }
                    if socket.send(message).await.is_err() {
                        break;
                    }
                }
            });
            hyper::Response::builder()
                .status(101)
                .header("connection", "upgrade")
                .header("upgrade", "websocket")
                .header("sec-websocket-accept", derive_accept_key(key.as_bytes()))
                .body(empty())
                .expect("a 101")
        }
        Some("SPDY/3.1") => {
            let protocol = header("x-stream-protocol-version").unwrap_or_default();
            let upgraded = hyper::upgrade::on(&mut request);
            tokio::spawn(async move {
                let Ok(upgraded) = upgraded.await else { return };
                let mut io = TokioIo::new(upgraded);
                let mut buffer = [0u8; 4096];
                while let Ok(read) = io.read(&mut buffer).await {
                    if read == 0 || io.write_all(&buffer[..read]).await.is_err() {
                        break;
                    }
                }
            });
            hyper::Response::builder()
                .status(101)
                .header("connection", "Upgrade")
                .header("upgrade", "SPDY/3.1")
                .header("x-stream-protocol-version", protocol)
                .body(empty())
                .expect("a 101")
        }
        _ => {
            let events = futures_util::stream::unfold(0u64, move |n| {
                let written = written.clone();
                async move {
                    if n > 0 {
                        tokio::time::sleep(interval).await;
                    }
                    let _ = written.send(Instant::now());
                    let event = format!(
                        "{{\"type\":\"ADDED\",\"object\":{{\"kind\":\"Widget\",\"metadata\":{{\"name\":\"w{n}\"}}}}}}\n"
                    );
                    Some((Ok(Frame::data(Bytes::from(event))), n + 1))
                }
            });
            hyper::Response::builder()
                .header("content-type", "application/json")
                .body(UnsyncBoxBody::new(StreamBody::new(events)))
                .expect("a watch")
        }
    }
}
