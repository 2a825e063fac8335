//! The upstream the gateway proxies to: a real HTTP server on 127.0.0.1:0
//! (HTTP/1.1 and HTTP/2, optionally TLS) that echoes, streams, sleeps or
//! hangs as a request header asks, and what its echo says.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;

use super::bounded;
use super::certs::CertAndKey;
use super::clients::Answer;

/// The header that tells the upstream how to answer:
/// - absent or `echo`: a JSON echo of method, path, headers and body;
/// - `slow:<ms>`: the echo, after sleeping;
/// - `hang`: never answers;
/// - `stream`: sends `first\n`, waits for [`Upstream::release`], then
///   `second\n` and `third\n`;
/// - `slow-body:<ms>`: answers at once, then sends 16 chunks of 4 KiB of `x`
///   spread over `<ms>`;
/// - `large:<MiB>`: answers at once, then sends `<MiB>` MiB of `x` as fast
///   as it is read, and stops when the reader goes away;
/// - `held-json:<KiB>`: answers at once with a JSON object whose `pad` is
///   `<KiB>` KiB of `x`, sent in 64 KiB chunks, and sends its closing `"}`
///   only after [`Upstream::release`];
/// - `cache`: the echo with its own `Cache-Control: max-age=60`;
/// - `hop`: the echo with hop-by-hop response headers;
/// - `chunks`: reads the request body chunk by chunk, reporting each to
///   [`Upstream::next_body_bytes`], then the echo;
/// - `reflect`: answers the request body itself, as `application/json`.
pub const MODE: &str = "x-upstream-mode";

pub type UpstreamBody = UnsyncBoxBody<Bytes, Infallible>;

struct UpstreamState {
    hits: AtomicUsize,
    arrivals: mpsc::UnboundedSender<String>,
    body_chunks: mpsc::UnboundedSender<Bytes>,
    release: Semaphore,
}

/// A real HTTP server on 127.0.0.1:0 (HTTP/1.1 and HTTP/2, optionally TLS).
/// Its echo reports the request-target as received (`path`) and the path a
/// normalising server would serve for it (`served`, [`served_path`]).
pub struct Upstream {
    pub addr: SocketAddr,
    pub tls: bool,
    state: Arc<UpstreamState>,
    arrivals: tokio::sync::Mutex<mpsc::UnboundedReceiver<String>>,
    body_chunks: tokio::sync::Mutex<mpsc::UnboundedReceiver<Bytes>>,
    task: JoinHandle<()>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Upstream {
    pub async fn start() -> Upstream {
        Self::start_with(None).await
    }

    /// An https upstream serving `cert` (ALPN h2 and http/1.1).
    pub async fn start_tls(cert: &CertAndKey) -> Upstream {
        Self::start_with(Some(tls_acceptor(cert))).await
    }

    async fn start_with(tls: Option<tokio_rustls::TlsAcceptor>) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the upstream");
        let addr = listener.local_addr().expect("the upstream's address");
        let (arrivals_tx, arrivals_rx) = mpsc::unbounded_channel();
        let (chunks_tx, chunks_rx) = mpsc::unbounded_channel();
        let state = Arc::new(UpstreamState {
            hits: AtomicUsize::new(0),
            arrivals: arrivals_tx,
            body_chunks: chunks_tx,
            release: Semaphore::new(0),
        });
        let serving = state.clone();
        let is_tls = tls.is_some();
        let task = spawn_server(listener, tls, move |request| {
            upstream_answer(serving.clone(), request)
        });
        Upstream {
            addr,
            tls: is_tls,
            state,
            arrivals: tokio::sync::Mutex::new(arrivals_rx),
            body_chunks: tokio::sync::Mutex::new(chunks_rx),
            task,
        }
    }

    /// `http://127.0.0.1:PORT` (or `https://localhost:PORT`).
    pub fn url(&self) -> String {
        if self.tls {
            format!("https://localhost:{}", self.addr.port())
        } else {
            format!("http://{}", self.addr)
        }
    }

    /// Requests received so far.
    pub fn hits(&self) -> usize {
        self.state.hits.load(Ordering::SeqCst)
    }

    /// `METHOD /path?query` of the next request to arrive.
    pub async fn next_arrival(&self) -> String {
        let mut arrivals = self.arrivals.lock().await;
        bounded("a request to reach the upstream", arrivals.recv())
            .await
            .expect("the upstream is running")
    }

    /// Request body bytes, as the upstream reads them, until `count` bytes
    /// have arrived.
    pub async fn next_body_bytes(&self, count: usize) -> Vec<u8> {
        let mut chunks = self.body_chunks.lock().await;
        let mut received = Vec::new();
        while received.len() < count {
            let chunk = bounded("request body bytes at the upstream", chunks.recv())
                .await
                .expect("running");
            received.extend_from_slice(&chunk);
        }
        received
    }

    /// Lets `stream` answers go on.
    pub fn release(&self, permits: usize) {
        self.state.release.add_permits(permits);
    }
}

/// A TLS acceptor serving `cert`, offering h2 and http/1.1 by ALPN.
pub fn tls_acceptor(cert: &CertAndKey) -> tokio_rustls::TlsAcceptor {
    tls_acceptor_asking(cert, None)
}

/// [`tls_acceptor`], asking clients for a certificate issued by the CA of
/// `client_ca_pem` when one is given (optional: a client without one is
/// served too, one with a certificate of another CA is refused).
pub fn tls_acceptor_asking(
    cert: &CertAndKey,
    client_ca_pem: Option<&str>,
) -> tokio_rustls::TlsAcceptor {
    use rustls_pki_types::pem::PemObject;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = rustls_pki_types::CertificateDer::pem_slice_iter(cert.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .expect("a certificate");
    let key =
        rustls_pki_types::PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes()).expect("a key");
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("TLS versions");
    let builder = match client_ca_pem {
        Some(pem) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in rustls_pki_types::CertificateDer::pem_slice_iter(pem.as_bytes()) {
                roots.add(cert.expect("a CA certificate")).expect("a root");
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .allow_unauthenticated()
            .build()
            .expect("a client verifier");
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(chain, key).expect("a TLS config");
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

/// Serves every connection `listener` accepts (over `tls` when given) with
/// `answer`, HTTP/1.1 or HTTP/2, until the task is aborted.
pub fn spawn_server<S, F>(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    answer: S,
) -> JoinHandle<()>
where
    S: Fn(http::Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: std::future::Future<Output = Result<http::Response<UpstreamBody>, Infallible>>
        + Send
        + 'static,
{
    tokio::spawn(async move {
        let mut connections = tokio::task::JoinSet::new();
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let answer = answer.clone();
            let tls = tls.clone();
            connections.spawn(async move {
                let service = service_fn(answer);
                let builder = auto::Builder::new(TokioExecutor::new());
                let _ = match tls {
                    None => {
                        builder
                            .serve_connection_with_upgrades(TokioIo::new(stream), service)
                            .await
                    }
                    Some(acceptor) => match acceptor.accept(stream).await {
                        Ok(stream) => {
                            builder
                                .serve_connection_with_upgrades(TokioIo::new(stream), service)
                                .await
                        }
                        Err(_) => Ok(()),
                    },
                };
            });
        }
    })
}

pub fn full(body: impl Into<Bytes>) -> UpstreamBody {
    Full::new(body.into()).boxed_unsync()
}

pub fn channel_body(mut chunks: mpsc::Receiver<Bytes>) -> UpstreamBody {
    let stream = futures_util::stream::poll_fn(move |cx| {
        chunks
            .poll_recv(cx)
            .map(|chunk| chunk.map(|bytes| Ok::<_, Infallible>(Frame::data(bytes))))
    });
    StreamBody::new(stream).boxed_unsync()
}

async fn upstream_answer(
    state: Arc<UpstreamState>,
    request: http::Request<Incoming>,
) -> Result<http::Response<UpstreamBody>, Infallible> {
    state.hits.fetch_add(1, Ordering::SeqCst);
    let target = request
        .uri()
        .path_and_query()
        .map_or("/".to_owned(), |pq| pq.as_str().to_owned());
    let _ = state
        .arrivals
        .send(format!("{} {target}", request.method()));
    let mode = request
        .headers()
        .get(MODE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("echo")
        .to_owned();
    let (mode, amount) = match mode.split_once(':') {
        Some((mode, amount)) => (mode.to_owned(), amount.parse::<u64>().unwrap_or(0)),
        None => (mode, 0),
    };
    let response = match mode.as_str() {
        "hang" => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            http::Response::new(full("too late"))
        }
        "stream" => {
            let (sender, receiver) = mpsc::channel(4);
            tokio::spawn(async move {
                let _ = sender.send(Bytes::from_static(b"first\n")).await;
                if let Ok(permit) = state.release.acquire().await {
                    permit.forget();
                }
                let _ = sender.send(Bytes::from_static(b"second\n")).await;
                let _ = sender.send(Bytes::from_static(b"third\n")).await;
            });
            let mut response = http::Response::new(channel_body(receiver));
            response
                .headers_mut()
                .insert("content-type", http::HeaderValue::from_static("text/plain"));
            response
        }
        "large" => {
            let (sender, receiver) = mpsc::channel(1);
            tokio::spawn(async move {
                let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
                for _ in 0..amount * 16 {
                    if sender.send(chunk.clone()).await.is_err() {
                        return;
                    }
                }
            });
            http::Response::new(channel_body(receiver))
        }
        "held-json" => {
            let (sender, receiver) = mpsc::channel(1);
            tokio::spawn(async move {
                let _ = sender.send(Bytes::from_static(b"{\"pad\":\"")).await;
                let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
                for _ in 0..amount / 64 {
                    if sender.send(chunk.clone()).await.is_err() {
                        return;
                    }
                }
                if let Ok(permit) = state.release.acquire().await {
                    permit.forget();
                }
                let _ = sender.send(Bytes::from_static(b"\"}")).await;
            });
            let mut response = http::Response::new(channel_body(receiver));
            response.headers_mut().insert(
                "content-type",
                http::HeaderValue::from_static("application/json"),
            );
            response
        }
        "slow-body" => {
            let (sender, receiver) = mpsc::channel(4);
            tokio::spawn(async move {
                for _ in 0..16 {
                    tokio::time::sleep(Duration::from_millis(amount / 16)).await;
                    if sender.send(Bytes::from(vec![b'x'; 4096])).await.is_err() {
                        return;
                    }
                }
            });
            http::Response::new(channel_body(receiver))
        }
        _ => {
            if mode == "slow" {
                tokio::time::sleep(Duration::from_millis(amount)).await;
            }
            let (parts, mut body) = request.into_parts();
            let mut received = Vec::new();
            let mut body_error = None;
            while let Some(frame) = body.frame().await {
                match frame {
                    Ok(frame) => {
                        if let Ok(data) = frame.into_data() {
                            if mode == "chunks" {
                                let _ = state.body_chunks.send(data.clone());
                            }
                            received.extend_from_slice(&data);
                        }
                    }
                    Err(error) => {
                        body_error = Some(error.to_string());
                        break;
                    }
                }
            }
            if mode == "reflect" {
                let mut response = http::Response::new(full(received));
                response.headers_mut().insert(
                    "content-type",
                    http::HeaderValue::from_static("application/json"),
                );
                return Ok(response);
            }
            let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for (name, value) in &parts.headers {
                headers
                    .entry(name.as_str().to_owned())
                    .or_default()
                    .push(String::from_utf8_lossy(value.as_bytes()).into_owned());
            }
            let echo = serde_json::json!({
                "method": parts.method.as_str(),
                "path": target,
                "served": served_path(&target),
                "version": format!("{:?}", parts.version),
                "headers": headers,
                "body": String::from_utf8_lossy(&received),
                "body_error": body_error,
            });
            let mut response = http::Response::new(full(echo.to_string()));
            let headers = response.headers_mut();
            headers.insert(
                "content-type",
                http::HeaderValue::from_static("application/json"),
            );
            headers.insert("x-upstream", http::HeaderValue::from_static("yes"));
            match mode.as_str() {
                "cache" => {
                    headers.insert(
                        "cache-control",
                        http::HeaderValue::from_static("max-age=60"),
                    );
                }
                "hop" => {
                    headers.insert(
                        "connection",
                        http::HeaderValue::from_static("x-hop-response"),
                    );
                    headers.insert("x-hop-response", http::HeaderValue::from_static("1"));
                    headers.insert("keep-alive", http::HeaderValue::from_static("timeout=5"));
                    headers.insert(
                        "proxy-authenticate",
                        http::HeaderValue::from_static("Basic"),
                    );
                    headers.insert("trailer", http::HeaderValue::from_static("x-trailer"));
                }
                _ => {}
            }
            response
        }
    };
    Ok(response)
}

/// The path a normalising server acts on for request-target `target`, as
/// the upstream's echo reports it (`served`): escapes decoded once (Go's
/// `URL.Path`, nginx), `;` parameters stripped from each segment (Tomcat,
/// Spring), `\` read as `/` (IIS), `//` merged and dot-segments resolved,
/// clamped at the root (Go's `ServeMux` and `path.Clean`, nginx), a trailing
/// slash kept (`ServeMux`). A gateway that forwards a path this changes lets
/// the upstream serve something other than what was judged.
pub fn served_path(target: &str) -> String {
    let path = target.split_once('?').map_or(target, |(path, _)| path);
    let decoded = percent_encoding::percent_decode_str(path).decode_utf8_lossy();
    let decoded = decoded.replace('\\', "/");
    let mut kept: Vec<&str> = Vec::new();
    let mut trailing_slash = false;
    let mut segments = decoded.split('/').skip(1).peekable();
    while let Some(segment) = segments.next() {
        let segment = segment.split(';').next().unwrap_or_default();
        trailing_slash = segments.peek().is_none();
        match segment {
            "" | "." => {}
            ".." => {
                kept.pop();
            }
            _ => {
                kept.push(segment);
                trailing_slash = false;
            }
        }
    }
    let mut served: String = kept.iter().map(|segment| format!("/{segment}")).collect();
    if trailing_slash || served.is_empty() {
        served.push('/');
    }
    served
}

/// The upstream's JSON echo (method, path, headers, body) of a 200.
pub fn echo(answer: &Answer) -> Value {
    assert_eq!(
        answer.status, 200,
        "the request should reach the upstream: {}",
        answer.body
    );
    assert_eq!(
        answer.header("x-upstream"),
        Some("yes"),
        "not the upstream's answer: {}",
        answer.body
    );
    answer.json()
}

/// The one value of header `name` the upstream received, if any.
pub fn echoed_header(echo: &Value, name: &str) -> Option<String> {
    let values = echo["headers"].get(name)?.as_array()?;
    assert_eq!(values.len(), 1, "{name} sent once: {values:?}");
    values[0].as_str().map(str::to_owned)
}

/// Every value of header `name` the upstream received, in order.
pub fn echoed_values(echo: &Value, name: &str) -> Vec<String> {
    echo["headers"][name]
        .as_array()
        .map(|values| {
            values
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The body the upstream received, parsed as JSON.
pub fn echoed_body(echo: &Value) -> Value {
    let body = echo["body"].as_str().expect("an echoed body");
    serde_json::from_str(body)
        .unwrap_or_else(|error| panic!("the upstream got no JSON ({error}): {body}"))
}
