//! A bare hyper reverse proxy, the floor of wasmgate's own stack: hyper's
//! HTTP/1.1 server, hyper-util's pooled client, one thread (a tokio
//! current-thread runtime), and only what every proxy of the benchmark does to
//! a request: the path forwarded as is, `Host` set by the client from the
//! upstream's address, `X-Forwarded-For/Proto/Host` added. No routing, no
//! limits, no timeouts, no error pages: what is left between it and wasmgate
//! is what wasmgate does.
//!
//!     bench-hyper-proxy 127.0.0.1:9001 127.0.0.1:9000
//!
//! Prints `listening on ADDR` once bound; stops on SIGTERM or SIGINT.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::{BodyExt, Full, combinators::UnsyncBoxBody};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HOST, HeaderName, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};

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
    async fn forward(&self, client: SocketAddr, request: Request<Incoming>) -> Result<Response<ProxyBody>, Infallible> {
        let (mut parts, body) = request.into_parts();
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let uri: Result<Uri, _> = format!("http://{}{}", self.upstream, path).parse();
        let Ok(uri) = uri else { return Ok(status(StatusCode::BAD_REQUEST)) };
        parts.uri = uri;
        if let Some(host) = parts.headers.remove(HOST) {
            parts.headers.insert(X_FORWARDED_HOST, host);
        }
        if let Ok(value) = HeaderValue::from_str(&client.ip().to_string()) {
            parts.headers.insert(X_FORWARDED_FOR, value);
        }
        parts.headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static("http"));
        match self.client.request(Request::from_parts(parts, body)).await {
            Ok(response) => Ok(response.map(|body| body.boxed_unsync())),
            Err(_) => Ok(status(StatusCode::BAD_GATEWAY)),
        }
    }
}

fn status(code: StatusCode) -> Response<ProxyBody> {
    let mut response = Response::new(Full::new(Bytes::new()).map_err(|never| match never {}).boxed_unsync());
    *response.status_mut() = code;
    response
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(Ok(address)), Some(upstream)) = (args.next().map(|a| a.parse::<SocketAddr>()), args.next()) else {
        eprintln!("usage: bench-hyper-proxy LISTEN_IP:PORT UPSTREAM_IP:PORT");
        std::process::exit(2);
    };
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
            let _ = http1::Builder::new().keep_alive(true).serve_connection(TokioIo::new(stream), service).await;
        }
    });
}
