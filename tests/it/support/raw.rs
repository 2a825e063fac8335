//! HTTP/1.1 on raw TCP sockets: requests written byte for byte, answers read
//! as they come, for what a well-behaved client cannot send; and h2c
//! connections through hyper's client, for HTTP/2 requests sent as built.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::bounded;

/// Writes `request` on a new connection and reads until the server closes it.
pub async fn raw_exchange(addr: SocketAddr, request: &[u8]) -> String {
    String::from_utf8_lossy(&raw_exchange_bytes(addr, request).await).into_owned()
}

/// Like [`raw_exchange`], keeping the bytes as they came.
pub async fn raw_exchange_bytes(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut stream = raw_request(addr, request).await;
    read_bytes_to_close(&mut stream).await
}

/// A new TCP connection to `addr`.
pub async fn connect(addr: SocketAddr) -> TcpStream {
    bounded("a connection", TcpStream::connect(addr))
        .await
        .expect("connect")
}

/// Writes `request` (whole, or the start of one) on a new connection and
/// hands the connection back.
pub async fn raw_request(addr: SocketAddr, request: &[u8]) -> TcpStream {
    let mut stream = connect(addr).await;
    stream.write_all(request).await.expect("write the request");
    stream
}

/// Reads until the peer closes (or resets) the connection.
pub async fn read_to_close(stream: &mut TcpStream) -> String {
    String::from_utf8_lossy(&read_bytes_to_close(stream).await).into_owned()
}

/// Like [`read_to_close`], keeping the bytes as they came.
pub async fn read_bytes_to_close(stream: &mut TcpStream) -> Vec<u8> {
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
    received
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

/// A new HTTP/2 connection with prior knowledge (h2c) to `addr` through
/// hyper's client, for requests reqwest would not send as they are: the
/// sender, and the connection, which the caller spawns (its end says how
/// the server closed it).
pub async fn h2c_handshake(
    addr: SocketAddr,
) -> (
    http2::SendRequest<Empty<Bytes>>,
    http2::Connection<TokioIo<TcpStream>, Empty<Bytes>, TokioExecutor>,
) {
    http2::handshake(TokioExecutor::new(), TokioIo::new(connect(addr).await))
        .await
        .expect("an h2c handshake")
}

/// One `GET /static` on a kept-alive HTTP/1.1 connection, answered `static`
/// (the static route the tests' manifests have); returns the response's
/// head, lowercased.
pub async fn get_static_on(stream: &mut TcpStream) -> String {
    stream
        .write_all(b"GET /static HTTP/1.1\r\nHost: gateway\r\n\r\n")
        .await
        .expect("the connection is open");
    let (head, body) = read_one_response(stream).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body, "static");
    head.to_ascii_lowercase()
}

/// One `GET /static` on an HTTP/2 connection to `addr`, answered `static`.
pub async fn get_static_over_h2(sender: &mut http2::SendRequest<Empty<Bytes>>, addr: SocketAddr) {
    let request = http::Request::get(format!("http://{addr}/static"))
        .body(Empty::new())
        .expect("a request");
    let response = bounded("a response", sender.send_request(request))
        .await
        .expect("the connection is open");
    assert_eq!(response.status(), 200);
    let body = bounded("a body", response.into_body().collect())
        .await
        .expect("a body")
        .to_bytes();
    assert_eq!(&body[..], b"static");
}
