//! A reverse proxy with no HTTP library between the sockets, to measure what
//! a leaner HTTP/1 engine than hyper could save (target "raw-proxy" of
//! bench/run.sh). It does what nginx's proxy module does with a request of
//! the benchmark: parse the head (httparse, as hyper does), write the
//! request line and the headers back out as the parsed byte slices, `Host`
//! set to the upstream and `X-Forwarded-For/Proto/Host` added, then copy
//! the body; parse the response head and pass it on as received. No
//! `HeaderMap` is built and nothing is re-encoded.
//!
//! With `typed` after the addresses it also builds, from each head, what
//! hyper's decoder builds and wasmgate's chain reads: an `http::Request` or
//! `http::Response` whose `HeaderMap` shares the head's bytes. The bytes
//! forwarded are the same; the difference in cost is that of a typed view
//! kept beside a byte-forwarding engine.
//!
//! It is a measuring instrument, not a proxy to deploy: one upstream
//! connection per client connection, bodies framed by `Content-Length`
//! alone, as the benchmark's are (a chunked request is answered 501, a
//! chunked response 502; no rules for HEAD, 1xx, 204 or 304), no limits
//! beyond a 64 KiB head, no timeouts.
//!
//!     bench-raw-proxy 127.0.0.1:9001 127.0.0.1:9000 [typed]
//!
//! Prints `listening on ADDR` once bound; stops on SIGTERM or SIGINT.

use std::hint::black_box;
use std::io;
use std::net::SocketAddr;
use std::ops::Range;

use bytes::{Buf, Bytes, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};
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

/// Where a head's parts lie in its bytes (typed mode): a request's method
/// and target or a response's status, and each header's name and value.
#[derive(Default)]
struct Indices {
    method: Range<usize>,
    target: Range<usize>,
    status: u16,
    headers: Vec<(Range<usize>, Range<usize>)>,
}

impl Indices {
    fn record_headers(&mut self, input: &[u8], headers: &[httparse::Header<'_>]) {
        self.headers.clear();
        self.headers.extend(headers.iter().map(|header| {
            (
                range_in(input, header.name.as_bytes()),
                range_in(input, header.value),
            )
        }));
    }
}

/// Where `part`, a slice of `input`, lies in it.
fn range_in(input: &[u8], part: &[u8]) -> Range<usize> {
    let start = part.as_ptr() as usize - input.as_ptr() as usize;
    start..start + part.len()
}

const BAD_REQUEST: &[u8] =
    b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
const NOT_IMPLEMENTED: &[u8] =
    b"HTTP/1.1 501 Not Implemented\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
const BAD_GATEWAY: &[u8] =
    b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

/// The request head of `input`, written to `out` as the upstream gets it,
/// its parts' places kept in `indices` when given.
fn forward_request_head(
    input: &[u8],
    out: &mut Vec<u8>,
    upstream: &[u8],
    client: &[u8],
    indices: Option<&mut Indices>,
) -> Parsed {
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
    if let Some(indices) = indices {
        indices.method = range_in(input, method.as_bytes());
        indices.target = range_in(input, path.as_bytes());
        indices.record_headers(input, request.headers);
    }
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

/// The response head of `input`: its length and its body's, its parts'
/// places kept in `indices` when given. It is passed on as received, so
/// only what would make that wrong is refused.
fn read_response_head(input: &[u8], indices: Option<&mut Indices>) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let head = match response.parse(input) {
        Ok(httparse::Status::Complete(head)) => head,
        Ok(httparse::Status::Partial) => return None,
        Err(_) => return Some(Err(BAD_GATEWAY)),
    };
    if let Some(indices) = indices {
        indices.status = response.code.unwrap_or_default();
        indices.record_headers(input, response.headers);
    }
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

/// What hyper's decoder builds from a request head: the method, the URI,
/// and the headers, their values sharing `head`.
fn typed_request(head: &Bytes, indices: &Indices) -> Option<http::Request<()>> {
    let mut request = http::Request::new(());
    *request.method_mut() = http::Method::from_bytes(&head[indices.method.clone()]).ok()?;
    *request.uri_mut() = http::Uri::from_maybe_shared(head.slice(indices.target.clone())).ok()?;
    *request.headers_mut() = header_map(head, &indices.headers)?;
    Some(request)
}

/// What hyper's decoder builds from a response head.
fn typed_response(head: &Bytes, indices: &Indices) -> Option<http::Response<()>> {
    let mut response = http::Response::new(());
    *response.status_mut() = http::StatusCode::from_u16(indices.status).ok()?;
    *response.headers_mut() = header_map(head, &indices.headers)?;
    Some(response)
}

fn header_map(head: &Bytes, headers: &[(Range<usize>, Range<usize>)]) -> Option<HeaderMap> {
    let mut map = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let name = HeaderName::from_bytes(&head[name.clone()]).ok()?;
        map.append(
            name,
            HeaderValue::from_maybe_shared(head.slice(value.clone())).ok()?,
        );
    }
    Some(map)
}

/// Takes the head of `length` bytes off `buffer`, as a `Bytes` its typed
/// view can share when there is one.
fn take_head(buffer: &mut BytesMut, length: usize, typed: bool) -> Option<Bytes> {
    if typed {
        Some(buffer.split_to(length).freeze())
    } else {
        buffer.advance(length);
        None
    }
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
    typed: bool,
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
    let mut indices = typed.then(Indices::default);
    loop {
        let head = read_head(&mut client, &mut requests, |input| {
            out.clear();
            forward_request_head(
                input,
                &mut out,
                &upstream_host,
                &client_ip,
                indices.as_mut(),
            )
        });
        let request = match head.await? {
            None => return Ok(()),
            Some(Ok(frame)) => frame,
            Some(Err(answer)) => return client.write_all(answer).await,
        };
        let head = take_head(&mut requests, request.head, typed);
        if let (Some(head), Some(indices)) = (&head, &indices) {
            black_box(typed_request(head, indices));
        }
        take_body(&mut client, &mut requests, request.body, &mut out).await?;
        upstream.write_all(&out).await?;

        out.clear();
        let head = read_head(&mut upstream, &mut responses, |input| {
            read_response_head(input, indices.as_mut())
        });
        let Some(Ok(response)) = head.await? else {
            return client.write_all(BAD_GATEWAY).await;
        };
        out.extend_from_slice(&responses[..response.head]);
        let head = take_head(&mut responses, response.head, typed);
        if let (Some(head), Some(indices)) = (&head, &indices) {
            black_box(typed_response(head, indices));
        }
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
        eprintln!("usage: bench-raw-proxy LISTEN_IP:PORT UPSTREAM_IP:PORT [typed]");
        std::process::exit(2);
    };
    let typed = match args.next().as_deref() {
        None => false,
        Some("typed") => true,
        Some(other) => {
            eprintln!("bench-raw-proxy: unknown mode {other:?} (typed, or nothing)");
            std::process::exit(2);
        }
    };
    serve::serve("bench-raw-proxy", address, move |stream, peer| async move {
        let _ = connection(stream, peer, upstream, typed).await;
    });
}
