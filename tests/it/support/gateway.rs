//! Shared helpers of the integration tests: a gateway started from a manifest
//! in a temp dir, an upstream server that echoes, streams and sleeps on
//! request, an rcgen PKI, reqwest clients, raw TCP exchanges, and the
//! `wasmgate` binary run as a child process that is killed by PID on drop.
//!
//! Every wait here is bounded: a test that would hang fails instead.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::io::BufRead;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;
use wasmgate::config::Transport;
use wasmgate::server::{Drained, Gateway, RunningGateway};

/// The longest any single wait of a test may take before the test fails.
pub const BOUND: Duration = Duration::from_secs(20);

/// kube's 404 body, byte for byte.
pub const NOT_FOUND_BODY: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","details":{},"code":404}"#;

/// Awaits `future`, failing the test with `what` if it takes longer than
/// [`BOUND`].
pub async fn bounded<T>(what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(BOUND, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out after {BOUND:?} waiting for {what}"),
    }
}

/// Polls `probe` every 50 ms until it returns `Some`, failing the test after
/// [`BOUND`].
pub async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            start.elapsed() < BOUND,
            "timed out after {BOUND:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------------
// The gateway, in process
// ---------------------------------------------------------------------------

/// `[listen]` on 127.0.0.1 port 0 in plaintext, followed by `rest`.
pub fn plaintext(rest: &str) -> String {
    format!("[listen]\naddress = \"127.0.0.1:0\"\nplaintext = true\n\n{rest}")
}

/// A gateway running in this process, with the temp dir its manifest (and
/// any files the manifest names) live in.
pub struct TestGateway {
    pub addr: SocketAddr,
    pub https: bool,
    pub dir: tempfile::TempDir,
    running: Option<RunningGateway>,
}

impl TestGateway {
    /// Writes `manifest` to `gateway.toml` in a new temp dir and starts it.
    pub async fn start(manifest: &str) -> TestGateway {
        Self::start_in(new_dir(), manifest).await
    }

    /// Writes `manifest` to `gateway.toml` in `dir` and starts it.
    pub async fn start_in(dir: tempfile::TempDir, manifest: &str) -> TestGateway {
        Self::start_with_center(dir, manifest, |servers| servers).await
    }

    /// Like [`TestGateway::start_in`], with `center` replacing what the
    /// handler chain wraps.
    pub async fn start_with_center(
        dir: tempfile::TempDir,
        manifest: &str,
        center: impl FnOnce(wasmgate::handler::SharedHandler) -> wasmgate::handler::SharedHandler,
    ) -> TestGateway {
        let path = dir.path().join("gateway.toml");
        std::fs::write(&path, manifest).expect("write the manifest");
        let config = match wasmgate::config::parse(&path, manifest) {
            Ok(config) => config,
            Err(error) => panic!("the test manifest is invalid:\n{error}\n---\n{manifest}"),
        };
        let https = !matches!(config.listen.transport, Transport::Plaintext);
        let gateway = Gateway::with_center(config, center).expect("build the gateway");
        let running = gateway.start().await.expect("start the gateway");
        TestGateway {
            addr: running.local_addr,
            https,
            dir,
            running: Some(running),
        }
    }

    /// The gateway's URL for `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}{path}", self.addr)
    }

    /// Begins kube's shutdown sequence in the background.
    pub fn begin_shutdown(&mut self) -> JoinHandle<Drained> {
        let running = self.running.take().expect("the gateway is running");
        tokio::spawn(running.shutdown())
    }

    pub async fn shutdown(mut self) -> Drained {
        let running = self.running.take().expect("the gateway is running");
        bounded("the gateway to shut down", running.shutdown()).await
    }
}

pub fn new_dir() -> tempfile::TempDir {
    tempfile::tempdir().expect("create a temp dir")
}

// ---------------------------------------------------------------------------
// Clients
// ---------------------------------------------------------------------------

fn client_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(BOUND)
        .tls_built_in_root_certs(false)
}

/// A plaintext HTTP/1.1 client.
pub fn http_client() -> reqwest::Client {
    client_builder()
        .http1_only()
        .build()
        .expect("build a client")
}

/// A plaintext HTTP/2 client with prior knowledge (h2c).
pub fn h2c_client() -> reqwest::Client {
    client_builder()
        .http2_prior_knowledge()
        .build()
        .expect("build a client")
}

/// A TLS client trusting `ca_pem` only (HTTP/2 offered via ALPN).
pub fn tls_client(ca_pem: &str) -> reqwest::Client {
    tls_builder(ca_pem).build().expect("build a client")
}

/// A TLS client trusting `ca_pem`, speaking HTTP/1.1 only.
pub fn tls_client_http1(ca_pem: &str) -> reqwest::Client {
    tls_builder(ca_pem)
        .http1_only()
        .build()
        .expect("build a client")
}

/// A TLS client trusting `ca_pem` that presents a client certificate.
pub fn tls_client_with_identity(ca_pem: &str, cert: &CertAndKey) -> reqwest::Client {
    let identity =
        reqwest::Identity::from_pem(format!("{}{}", cert.cert_pem, cert.key_pem).as_bytes())
            .expect("a client identity");
    tls_builder(ca_pem)
        .identity(identity)
        .build()
        .expect("build a client")
}

/// A TLS client that accepts any certificate (curl's `-k`).
pub fn insecure_client() -> reqwest::Client {
    client_builder()
        .danger_accept_invalid_certs(true)
        .build()
        .expect("build a client")
}

fn tls_builder(ca_pem: &str) -> reqwest::ClientBuilder {
    let ca = reqwest::Certificate::from_pem(ca_pem.as_bytes()).expect("a CA certificate");
    client_builder().add_root_certificate(ca)
}

/// A response read whole: status, headers, body text.
pub struct Answer {
    pub status: u16,
    pub version: http::Version,
    pub headers: http::HeaderMap,
    pub body: String,
}

impl Answer {
    pub async fn of(response: reqwest::Response) -> Answer {
        let status = response.status().as_u16();
        let version = response.version();
        let headers = response.headers().clone();
        let body = bounded("a response body", response.text())
            .await
            .expect("read a response body");
        Answer {
            status,
            version,
            headers,
            body,
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(name)
            .map(|value| value.to_str().expect("a text header"))
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|error| panic!("not JSON ({error}): {}", self.body))
    }

    /// Asserts the body is a kube Status with this code and reason.
    pub fn assert_status(&self, code: u16, reason: &str) -> serde_json::Value {
        assert_eq!(self.status, code, "body: {}", self.body);
        let status = self.json();
        assert_eq!(status["kind"], "Status", "body: {}", self.body);
        assert_eq!(status["apiVersion"], "v1", "body: {}", self.body);
        assert_eq!(status["status"], "Failure", "body: {}", self.body);
        assert_eq!(status["code"], code, "body: {}", self.body);
        assert_eq!(status["reason"], reason, "body: {}", self.body);
        assert_eq!(
            self.header("content-type"),
            Some("application/json"),
            "a Status is JSON: {:?}",
            self.headers
        );
        status
    }
}

/// GET `url` and read the whole answer.
pub async fn get(client: &reqwest::Client, url: &str) -> Answer {
    let response = bounded("a response", client.get(url).send())
        .await
        .expect("send a request");
    Answer::of(response).await
}

/// Sends `request` and reads the whole answer.
pub async fn send(request: reqwest::RequestBuilder) -> Answer {
    let response = bounded("a response", request.send())
        .await
        .expect("send a request");
    Answer::of(response).await
}

// ---------------------------------------------------------------------------
// Raw TCP
// ---------------------------------------------------------------------------

/// Writes `request` on a new connection and reads until the server closes it.
pub async fn raw_exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut stream = raw_request(addr, request).await;
    read_to_close(&mut stream).await
}

/// Writes `request` (whole, or the start of one) on a new connection and
/// hands the connection back.
pub async fn raw_request(addr: SocketAddr, request: &[u8]) -> TcpStream {
    let mut stream = bounded("a connection", TcpStream::connect(addr))
        .await
        .expect("connect");
    stream.write_all(request).await.expect("write the request");
    stream
}

/// Reads until the peer closes (or resets) the connection.
pub async fn read_to_close(stream: &mut TcpStream) -> String {
    let mut received = Vec::new();
    let mut buffer = [0u8; 16 * 1024];
    loop {
        match bounded(
            "the server to close the connection",
            stream.read(&mut buffer),
        )
        .await
        {
            Ok(0) => break,
            Ok(n) => received.extend_from_slice(&buffer[..n]),
            // A reset after the response still leaves the response read.
            Err(_) => break,
        }
    }
    String::from_utf8_lossy(&received).into_owned()
}

/// Reads one HTTP/1.1 response with a `Content-Length` body from `stream`
/// and returns its head and body.
pub async fn read_one_response(stream: &mut TcpStream) -> (String, String) {
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        if let Some(end) = find(&received, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&received[..end]).into_owned();
            let length = head
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            let body_start = end + 4;
            if received.len() >= body_start + length {
                let body = String::from_utf8_lossy(&received[body_start..body_start + length])
                    .into_owned();
                return (head, body);
            }
        }
        let n = bounded("a response", stream.read(&mut buffer))
            .await
            .expect("read a response");
        assert!(
            n > 0,
            "the connection closed before a whole response: {}",
            String::from_utf8_lossy(&received)
        );
        received.extend_from_slice(&buffer[..n]);
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

// ---------------------------------------------------------------------------
// PKI
// ---------------------------------------------------------------------------

/// A certificate and its private key, PEM.
#[derive(Clone)]
pub struct CertAndKey {
    pub cert_pem: String,
    pub key_pem: String,
}

/// A certificate authority made for one test.
pub struct Ca {
    pub cert_pem: String,
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("a CA key");
        let issuer = CertifiedIssuer::self_signed(params, key).expect("a CA certificate");
        Ca {
            cert_pem: issuer.pem(),
            issuer,
        }
    }

    /// A serving certificate for localhost and the loopback addresses.
    pub fn server_cert(&self) -> CertAndKey {
        let names = vec![
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
            "::1".to_owned(),
        ];
        self.sign(
            names,
            "wasmgate-test-server",
            &[],
            ExtendedKeyUsagePurpose::ServerAuth,
        )
    }

    /// A client certificate for user `name`.
    pub fn client_cert(&self, name: &str) -> CertAndKey {
        self.sign(Vec::new(), name, &[], ExtendedKeyUsagePurpose::ClientAuth)
    }

    /// A client certificate `CN=<name>, O=<each organization>`.
    pub fn client_cert_in(&self, name: &str, organizations: &[&str]) -> CertAndKey {
        self.sign(
            Vec::new(),
            name,
            organizations,
            ExtendedKeyUsagePurpose::ClientAuth,
        )
    }

    fn sign(
        &self,
        names: Vec<String>,
        common_name: &str,
        organizations: &[&str],
        usage: ExtendedKeyUsagePurpose,
    ) -> CertAndKey {
        let mut params = CertificateParams::new(names).expect("certificate params");
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        for organization in organizations {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *organization);
        }
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate().expect("a key");
        let cert = params
            .signed_by(&key, &*self.issuer)
            .expect("a signed certificate");
        CertAndKey {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

/// Writes `ca.crt`, `server.crt` and `server.key` into `dir` and returns the
/// CA; a manifest in `dir` then says `cert = "server.crt"`, `key =
/// "server.key"`.
pub fn write_server_pki(dir: &Path) -> Ca {
    let ca = Ca::new("wasmgate test CA");
    let server = ca.server_cert();
    std::fs::write(dir.join("ca.crt"), &ca.cert_pem).expect("write ca.crt");
    std::fs::write(dir.join("server.crt"), &server.cert_pem).expect("write server.crt");
    std::fs::write(dir.join("server.key"), &server.key_pem).expect("write server.key");
    ca
}

// ---------------------------------------------------------------------------
// The upstream server
// ---------------------------------------------------------------------------

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
/// - `cache`: the echo with its own `Cache-Control: max-age=60`;
/// - `hop`: the echo with hop-by-hop response headers;
/// - `chunks`: reads the request body chunk by chunk, reporting each to
///   [`Upstream::next_body_bytes`], then the echo.
pub const MODE: &str = "x-upstream-mode";

type UpstreamBody = UnsyncBoxBody<Bytes, Infallible>;

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
        use rustls_pki_types::pem::PemObject;
        let chain = rustls_pki_types::CertificateDer::pem_slice_iter(cert.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .expect("a certificate");
        let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes())
            .expect("a key");
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("a TLS config");
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Self::start_with(Some(tokio_rustls::TlsAcceptor::from(Arc::new(config)))).await
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
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let state = serving.clone();
                let tls = tls.clone();
                connections.spawn(async move {
                    let service =
                        service_fn(move |request| upstream_answer(state.clone(), request));
                    let builder = auto::Builder::new(TokioExecutor::new());
                    let _ = match tls {
                        None => {
                            builder
                                .serve_connection(TokioIo::new(stream), service)
                                .await
                        }
                        Some(acceptor) => match acceptor.accept(stream).await {
                            Ok(stream) => {
                                builder
                                    .serve_connection(TokioIo::new(stream), service)
                                    .await
                            }
                            Err(_) => Ok(()),
                        },
                    };
                });
            }
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

fn full(body: impl Into<Bytes>) -> UpstreamBody {
    Full::new(body.into()).boxed_unsync()
}

fn channel_body(mut chunks: mpsc::Receiver<Bytes>) -> UpstreamBody {
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

// ---------------------------------------------------------------------------
// The binary, as a child process
// ---------------------------------------------------------------------------

/// The `wasmgate` binary built for these tests.
pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_wasmgate"))
}

/// An external program the tests need; fails with a clear message when it is
/// not installed (nothing is skipped).
pub fn require_program(path: &str) -> PathBuf {
    let program = PathBuf::from(path);
    assert!(
        program.exists(),
        "{path} is needed by this test and is not installed: install it (apt-get install curl / kubectl) and rerun"
    );
    program
}

/// A child process killed by PID (SIGKILL) and reaped when dropped.
pub struct ChildGuard {
    child: Child,
}

impl ChildGuard {
    pub fn new(child: Child) -> ChildGuard {
        ChildGuard { child }
    }

    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).expect("a PID fits an i32")
    }

    /// Sends `signal` to the child, by PID.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on the PID of a child we own and have not reaped.
        let result = unsafe { libc::kill(self.pid(), signal) };
        assert_eq!(result, 0, "kill({}, {signal}) failed", self.pid());
    }

    /// Waits for the child to exit, at most `bound`.
    pub fn wait_exit(&mut self, bound: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("poll the child") {
                return status;
            }
            assert!(
                start.elapsed() < bound,
                "the child {} did not exit within {bound:?}",
                self.pid()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: kill(2) on the PID of a child we own and have not reaped.
            unsafe {
                libc::kill(self.pid(), libc::SIGKILL);
            }
            let _ = self.child.wait();
        }
    }
}

/// `wasmgate run --config <manifest>` as a child process.
pub struct GatewayProcess {
    pub child: ChildGuard,
    pub addr: SocketAddr,
    pub https: bool,
    /// Every stderr line so far.
    pub log: Arc<Mutex<Vec<String>>>,
}

impl GatewayProcess {
    /// Starts the binary and waits for its `listening on` line.
    pub fn spawn(manifest: &Path) -> GatewayProcess {
        GatewayProcess::spawn_with_args(manifest, &[])
    }

    /// The same, with more arguments for `wasmgate run`.
    pub fn spawn_with_args(manifest: &Path, args: &[&str]) -> GatewayProcess {
        let child = Command::new(binary())
            .args(["run", "--config"])
            .arg(manifest)
            .args(args)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the wasmgate binary");
        let mut child = ChildGuard::new(child);
        let stderr = child.child_mut().stderr.take().expect("the child's stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (listening_tx, listening_rx) = std::sync::mpsc::channel();
        let lines = log.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(at) = line.find("listening on ") {
                    let url = line[at + "listening on ".len()..]
                        .split_whitespace()
                        .next()
                        .unwrap_or("")
                        .to_owned();
                    let _ = listening_tx.send(url);
                }
                lines.lock().expect("the log lock").push(line);
            }
        });
        let url = match listening_rx.recv_timeout(BOUND) {
            Ok(url) => url,
            Err(_) => panic!(
                "the gateway did not log `listening on` within {BOUND:?}; its log:\n{}",
                log.lock().expect("the log lock").join("\n")
            ),
        };
        let (scheme, addr) = url.split_once("://").expect("a URL in the listening line");
        GatewayProcess {
            child,
            addr: addr.parse().expect("an address in the listening line"),
            https: scheme == "https",
            log,
        }
    }

    pub fn url(&self, path: &str) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}{path}", self.addr)
    }

    pub fn log_text(&self) -> String {
        self.log.lock().expect("the log lock").join("\n")
    }

    /// Waits until the process catches SIGTERM and SIGINT (read from
    /// `SigCgt` in `/proc/<pid>/status`): the binary logs `listening on`
    /// before it installs its signal handlers, so a signal sent at once
    /// could still kill it outright.
    pub fn wait_for_signal_handlers(&self) {
        let status_file = format!("/proc/{}/status", self.child.pid());
        let wanted = (1u64 << (libc::SIGTERM - 1)) | (1u64 << (libc::SIGINT - 1));
        let start = Instant::now();
        loop {
            let status = std::fs::read_to_string(&status_file).unwrap_or_default();
            let caught = status
                .lines()
                .find_map(|line| line.strip_prefix("SigCgt:"))
                .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
                .unwrap_or(0);
            if caught & wanted == wanted {
                return;
            }
            assert!(
                start.elapsed() < BOUND,
                "the gateway did not install its SIGTERM/SIGINT handlers within {BOUND:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
