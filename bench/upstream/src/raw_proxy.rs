//! A reverse proxy with no HTTP library between the sockets, to measure what
//! a leaner HTTP/1 engine than hyper could save (target "raw-proxy" of
//! bench/run.sh). It does what nginx's proxy module does with a request of
//! the benchmark: parse the head (httparse, as hyper does), write the
//! request line and the headers back out as the parsed byte slices, `Host`
//! set to the upstream and `X-Forwarded-For/Proto/Host` added, then copy
//! the body; parse the response head and pass it on as received. No
//! `HeaderMap` is built and nothing is re-encoded.
//!
//! It is a measuring instrument, not a proxy to deploy: one upstream
//! connection per client connection, bodies framed by `Content-Length`
//! alone, as the benchmark's are (a chunked request is answered 501, a
//! chunked response 502; no rules for HEAD, 1xx, 204 or 304), no limits
//! beyond a 64 KiB head, no timeouts.
//!
//!     bench-raw-proxy 127.0.0.1:9001 127.0.0.1:9000
//!
//! Prints `listening on ADDR` once bound; stops on SIGTERM or SIGINT.

use std::io;
use std::net::SocketAddr;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod serve;

const MAX_HEAD: usize = 64 << 10;
const MAX_HEADERS: usize = 64;

/// A whole head's length and its body's.
struct Frame {
    head: usize,
    body: usize,
}

/// A parse of what has arrived: None while the head is incomplete, else
/// its frame or the answer that refuses it.
type Parsed = Option<Result<Frame, &'static [u8]>>;

const BAD_REQUEST: &[u8] =
    b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
const NOT_IMPLEMENTED: &[u8] =
    b"HTTP/1.1 501 Not Implemented\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
const BAD_GATEWAY: &[u8] =
    b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

/// The request head of `input`, written to `out` as the upstream gets it.
fn forward_request_head(input: &[u8], out: &mut Vec<u8>, upstream: &[u8], client: &[u8]) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let head = match request.parse(input) {
        Ok(httparse::Status::Complete(head)) => head,
        Ok(httparse::Status::Partial) => return None,
        Err(_) => return Some(Err(BAD_REQUEST)),
    };
    let (Some(method), Some(path)) = (request.method, request.path) else {
        return Some(Err(BAD_REQUEST));
    };
    out.extend_from_slice(method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    out.extend_from_slice(upstream);
    let mut body = 0;
    for header in request.headers.iter() {
        let name = header.name;
        if name.eq_ignore_ascii_case("transfer-encoding") {
            return Some(Err(NOT_IMPLEMENTED));
        }
        if name.eq_ignore_ascii_case("content-length") {
            match parse_length(header.value) {
                Some(length) => body = length,
                None => return Some(Err(BAD_REQUEST)),
            }
        }
        if name.eq_ignore_ascii_case("host") {
            out.extend_from_slice(b"\r\nx-forwarded-host: ");
        } else if is_hop_by_hop(name) || is_forwarded(name) {
            continue;
        } else {
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
        }
        out.extend_from_slice(header.value);
    }
    out.extend_from_slice(b"\r\nx-forwarded-for: ");
    out.extend_from_slice(client);
    out.extend_from_slice(b"\r\nx-forwarded-proto: http\r\n\r\n");
    Some(Ok(Frame { head, body }))
}

/// The response head of `input`: its length and its body's. It is passed on
/// as received, so only what would make that wrong is refused.
fn read_response_head(input: &[u8]) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let head = match response.parse(input) {
        Ok(httparse::Status::Complete(head)) => head,
        Ok(httparse::Status::Partial) => return None,
        Err(_) => return Some(Err(BAD_GATEWAY)),
    };
    let mut body = 0;
    for header in response.headers.iter() {
        if header.name.eq_ignore_ascii_case("content-length") {
            match parse_length(header.value) {
                Some(length) => body = length,
                None => return Some(Err(BAD_GATEWAY)),
            }
        } else if is_hop_by_hop(header.name) {
            return Some(Err(BAD_GATEWAY));
        }
    }
    Some(Ok(Frame { head, body }))
}

fn parse_length(value: &[u8]) -> Option<usize> {
    std::str::from_utf8(value).ok()?.trim().parse().ok()
}

fn is_hop_by_hop(name: &str) -> bool {
    [
        "connection",
        "keep-alive",
        "transfer-encoding",
        "upgrade",
        "te",
        "trailer",
        "proxy-connection",
    ]
    .iter()
    .any(|hop| name.eq_ignore_ascii_case(hop))
}

fn is_forwarded(name: &str) -> bool {
    ["x-forwarded-for", "x-forwarded-proto", "x-forwarded-host"]
        .iter()
        .any(|own| name.eq_ignore_ascii_case(own))
}

/// Reads from `from` into `buffer` until `parse` finds a whole head or
/// refuses it; None when the peer closed between messages.
async fn read_head(
    from: &mut TcpStream,
    buffer: &mut BytesMut,
    mut parse: impl FnMut(&[u8]) -> Parsed,
) -> io::Result<Option<Result<Frame, &'static [u8]>>> {
    loop {
        if !buffer.is_empty() {
            match parse(buffer) {
                Some(parsed) => return Ok(Some(parsed)),
                None if buffer.len() >= MAX_HEAD => return Ok(Some(Err(BAD_REQUEST))),
                None => {}
            }
        }
        buffer.reserve(8 << 10);
        if from.read_buf(buffer).await? == 0 {
            return if buffer.is_empty() {
                Ok(None)
            } else {
                Err(io::ErrorKind::UnexpectedEof.into())
            };
        }
    }
}

/// Appends the message's `body` bytes from `buffer` (reading the rest from
/// `from`) to `out`, leaving in `buffer` what follows the message.
async fn take_body(
    from: &mut TcpStream,
    buffer: &mut BytesMut,
    body: usize,
    out: &mut Vec<u8>,
) -> io::Result<()> {
    while buffer.len() < body {
        buffer.reserve(body - buffer.len());
        if from.read_buf(buffer).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
    out.extend_from_slice(&buffer[..body]);
    buffer.advance(body);
    Ok(())
}

async fn connection(
    mut client: TcpStream,
    peer: SocketAddr,
    upstream_address: SocketAddr,
) -> io::Result<()> {
    let mut upstream = TcpStream::connect(upstream_address).await?;
    upstream.set_nodelay(true)?;
    let upstream_host = upstream_address.to_string().into_bytes();
    let client_ip = peer.ip().to_string().into_bytes();
    let (mut requests, mut responses) = (
        BytesMut::with_capacity(8 << 10),
        BytesMut::with_capacity(8 << 10),
    );
    let mut out = Vec::with_capacity(8 << 10);
    loop {
        let head = read_head(&mut client, &mut requests, |input| {
            out.clear();
            forward_request_head(input, &mut out, &upstream_host, &client_ip)
        });
        let request = match head.await? {
            None => return Ok(()),
            Some(Ok(frame)) => frame,
            Some(Err(answer)) => return client.write_all(answer).await,
        };
        requests.advance(request.head);
        take_body(&mut client, &mut requests, request.body, &mut out).await?;
        upstream.write_all(&out).await?;

        out.clear();
        let Some(Ok(response)) =
            read_head(&mut upstream, &mut responses, read_response_head).await?
        else {
            return client.write_all(BAD_GATEWAY).await;
        };
        out.extend_from_slice(&responses[..response.head]);
        responses.advance(response.head);
        take_body(&mut upstream, &mut responses, response.body, &mut out).await?;
        client.write_all(&out).await?;
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(Ok(address)), Some(Ok(upstream))) = (
        args.next().map(|a| a.parse::<SocketAddr>()),
        args.next().map(|a| a.parse::<SocketAddr>()),
    ) else {
        eprintln!("usage: bench-raw-proxy LISTEN_IP:PORT UPSTREAM_IP:PORT");
        std::process::exit(2);
    };
    serve::serve("bench-raw-proxy", address, move |stream, peer| async move {
        let _ = connection(stream, peer, upstream).await;
    });
}
