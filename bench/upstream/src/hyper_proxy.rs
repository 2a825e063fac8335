//! A bare hyper reverse proxy, the floor of wasmgate's own stack: hyper's
//! HTTP/1.1 server, hyper-util's pooled client, one thread (a tokio
//! current-thread runtime), and only what every proxy of the benchmark does to
//! a request: the path forwarded as is, `Host` set by the client from the
//! upstream's address, `X-Forwarded-For/Proto/Host` added. No routing, no
//! limits, no timeouts, no error pages: what is left between it and wasmgate
//! is what wasmgate does.
//!
//! With `raw-client` after the addresses, hyper serves the client as
//! before, but the upstream is spoken to without an HTTP library (target
//! "hyper-raw-client"): one upstream connection per client connection, the
//! request head written out from the `http` types, the response head parsed
//! by httparse into them, bodies framed by `Content-Length` alone. What it
//! saves against the default is what hyper-util's pooled client and hyper's
//! client connection cost beyond such a client.
//!
//!     bench-hyper-proxy 127.0.0.1:9001 127.0.0.1:9000 [raw-client]
//!
//! Prints `listening on ADDR` once bound; stops on SIGTERM or SIGINT.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::BytesMut;
use head::ResponseIndices;
use http_body_util::{BodyExt, Full, combinators::UnsyncBoxBody};
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONTENT_LENGTH, HOST, HeaderMap, HeaderName, HeaderValue, TRANSFER_ENCODING};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::Mutex;

mod head;
mod serve;

type ProxyBody = UnsyncBoxBody<Bytes, hyper::Error>;

struct Proxy {
    client: Client<HttpConnector, Incoming>,
    upstream: String,
}

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

impl Proxy {
    async fn forward(
        &self,
        client: SocketAddr,
        request: Request<Incoming>,
    ) -> Result<Response<ProxyBody>, Infallible> {
        let (mut parts, body) = request.into_parts();
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let uri: Result<Uri, _> = format!("http://{}{}", self.upstream, path).parse();
        let Ok(uri) = uri else {
            return Ok(status(StatusCode::BAD_REQUEST));
        };
        parts.uri = uri;
        forwarded_headers(&mut parts.headers, client);
        match self.client.request(Request::from_parts(parts, body)).await {
            Ok(response) => Ok(response.map(|body| body.boxed_unsync())),
            Err(_) => Ok(status(StatusCode::BAD_GATEWAY)),
        }
    }
}

/// A client connection's own upstream connection (mode `raw-client`).
struct RawUpstream {
    stream: TcpStream,
    host: HeaderValue,
    buffer: BytesMut,
    out: Vec<u8>,
    indices: ResponseIndices,
}

impl RawUpstream {
    async fn connect(upstream: &str) -> io::Result<Self> {
        let stream = TcpStream::connect(upstream).await?;
        stream.set_nodelay(true)?;
        let host = HeaderValue::from_str(upstream).map_err(io::Error::other)?;
        Ok(Self {
            stream,
            host,
            buffer: BytesMut::with_capacity(8 << 10),
            out: Vec::with_capacity(8 << 10),
            indices: ResponseIndices::default(),
        })
    }

    async fn forward(
        &mut self,
        client: SocketAddr,
        request: Request<Incoming>,
    ) -> Response<ProxyBody> {
        let (mut parts, body) = request.into_parts();
        let Ok(body) = body.collect().await.map(|collected| collected.to_bytes()) else {
            return status(StatusCode::BAD_REQUEST);
        };
        forwarded_headers(&mut parts.headers, client);
        parts.headers.insert(HOST, self.host.clone());
        // The body is read whole: it goes out framed by its length.
        parts.headers.remove(TRANSFER_ENCODING);
        if !body.is_empty() {
            parts
                .headers
                .insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
        }
        match self.exchange(&parts, &body).await {
            Ok(Some(response)) => response,
            // The upstream connection may be left mid-message: the client
            // connection, which owns it, is closed after this answer.
            _ => {
                let mut response = status(StatusCode::BAD_GATEWAY);
                response
                    .headers_mut()
                    .insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
                response
            }
        }
    }

    /// Writes the request, reads the response; None when the response is
    /// not one this mode reads (a hop-by-hop header, a malformed head).
    async fn exchange(
        &mut self,
        parts: &hyper::http::request::Parts,
        body: &[u8],
    ) -> io::Result<Option<Response<ProxyBody>>> {
        self.out.clear();
        self.out.extend_from_slice(parts.method.as_str().as_bytes());
        self.out.push(b' ');
        self.out.extend_from_slice(
            parts
                .uri
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .as_bytes(),
        );
        self.out.extend_from_slice(b" HTTP/1.1\r\n");
        for (name, value) in &parts.headers {
            self.out.extend_from_slice(name.as_str().as_bytes());
            self.out.extend_from_slice(b": ");
            self.out.extend_from_slice(value.as_bytes());
            self.out.extend_from_slice(b"\r\n");
        }
        self.out.extend_from_slice(b"\r\n");
        self.out.extend_from_slice(body);
        let Self {
            stream,
            buffer,
            out,
            indices,
            ..
        } = self;
        stream.write_all(out).await?;
        let head = head::read_head(stream, buffer, |input| {
            head::read_response_head(input, Some(indices))
        });
        let Some(Ok(frame)) = head.await? else {
            return Ok(None);
        };
        let head = buffer.split_to(frame.head).freeze();
        head::fill(stream, buffer, frame.body).await?;
        let body = buffer.split_to(frame.body).freeze();
        let response = head::typed_response(&head, indices);
        Ok(response.map(|response| {
            response.map(|()| {
                Full::new(body)
                    .map_err(|never| match never {})
                    .boxed_unsync()
            })
        }))
    }
}

fn forwarded_headers(headers: &mut HeaderMap, client: SocketAddr) {
    if let Some(host) = headers.remove(HOST) {
        headers.insert(X_FORWARDED_HOST, host);
    }
    if let Ok(value) = HeaderValue::from_str(&client.ip().to_string()) {
        headers.insert(X_FORWARDED_FOR, value);
    }
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static("http"));
}

fn status(code: StatusCode) -> Response<ProxyBody> {
    let mut response = Response::new(
        Full::new(Bytes::new())
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() = code;
    response
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(Ok(address)), Some(upstream)) =
        (args.next().map(|a| a.parse::<SocketAddr>()), args.next())
    else {
        eprintln!("usage: bench-hyper-proxy LISTEN_IP:PORT UPSTREAM_IP:PORT [raw-client]");
        std::process::exit(2);
    };
    match args.next().as_deref() {
        None => serve_pooled(address, upstream),
        Some("raw-client") => serve_raw_client(address, upstream),
        Some(other) => {
            eprintln!("bench-hyper-proxy: unknown mode {other:?} (raw-client, or nothing)");
            std::process::exit(2);
        }
    }
}

fn serve_pooled(address: SocketAddr, upstream: String) {
    let proxy = Arc::new(Proxy {
        client: Client::builder(TokioExecutor::new()).build_http(),
        upstream,
    });
    serve::serve("bench-hyper-proxy", address, move |stream, client| {
        let proxy = proxy.clone();
        async move {
            let service = service_fn(move |request| {
                let proxy = proxy.clone();
                async move { proxy.forward(client, request).await }
            });
            let _ = http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        }
    });
}

fn serve_raw_client(address: SocketAddr, upstream: String) {
    let upstream = Arc::new(upstream);
    serve::serve("bench-hyper-proxy", address, move |stream, client| {
        let upstream = upstream.clone();
        async move {
            let Ok(connection) = RawUpstream::connect(&upstream).await else {
                return;
            };
            // One request at a time on an HTTP/1.1 connection: the lock is
            // never contended.
            let connection = Arc::new(Mutex::new(connection));
            let service = service_fn(move |request| {
                let connection = connection.clone();
                async move {
                    Ok::<_, Infallible>(connection.lock().await.forward(client, request).await)
                }
            });
            let _ = http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        }
    });
}
