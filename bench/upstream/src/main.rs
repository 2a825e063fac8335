//! The benchmark's upstream: HTTP/1.1, keep-alive, one thread (a tokio
//! current-thread runtime), every request answered `200` with the same small
//! JSON body. The request body is read and dropped, except on a request with
//! an `X-Bench-Echo` header: that one is answered with the body it carried,
//! so bench/run.sh can see what a target forwards (its admission's edit).
//!
//!     bench-upstream 127.0.0.1:9000
//!
//! Prints `listening on ADDR` on standard output once bound; stops on SIGTERM
//! or SIGINT.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

mod serve;

const BODY: &[u8] =
    br#"{"kind":"WidgetList","apiVersion":"demo.example.io/v1","metadata":{},"items":[]}"#;

async fn answer(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let echo = request.headers().contains_key("x-bench-echo");
    let mut body = request.into_body();
    let answer = if echo {
        match body.collect().await {
            Ok(received) => received.to_bytes(),
            Err(_) => Bytes::new(),
        }
    } else {
        // Drain the request body (POSTs carry one) so the connection stays reusable.
        while let Some(frame) = body.frame().await {
            if frame.is_err() {
                break;
            }
        }
        Bytes::from_static(BODY)
    };
    let mut response = Response::new(Full::new(answer));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(response)
}

fn main() {
    let address: SocketAddr = match std::env::args().nth(1).map(|arg| arg.parse()) {
        Some(Ok(address)) => address,
        _ => {
            eprintln!("usage: bench-upstream IP:PORT");
            std::process::exit(2);
        }
    };
    serve::serve("bench-upstream", address, |stream, _| async move {
        let _ = http1::Builder::new()
            .keep_alive(true)
            .serve_connection(TokioIo::new(stream), service_fn(answer))
            .await;
    });
}
