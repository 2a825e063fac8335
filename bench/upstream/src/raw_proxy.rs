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
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use head::{
    BAD_GATEWAY, BAD_REQUEST, Frame, HeaderIndices, MAX_HEADERS, Parsed, ResponseIndices, fill,
    header_map, is_hop_by_hop, parse_length, range_in, read_head, read_response_head,
    record_headers, typed_response,
};

mod head;
mod serve;

/// Where a request head's parts lie (typed mode): its method, its
/// target, and its headers.
#[derive(Default)]
struct RequestIndices {
    method: Range<usize>,
    target: Range<usize>,
    headers: HeaderIndices,
}

const NOT_IMPLEMENTED: &[u8] =
    b"HTTP/1.1 501 Not Implemented\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

/// The request head of `input`, written to `out` as the upstream gets it,
/// its parts' places kept in `indices` when given.
fn forward_request_head(
    input: &[u8],
    out: &mut Vec<u8>,
    upstream: &[u8],
    client: &[u8],
    indices: Option<&mut RequestIndices>,
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
        record_headers(&mut indices.headers, input, request.headers);
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

/// What hyper's decoder builds from a request head: the method, the URI,
/// and the headers, their values sharing `head`.
fn typed_request(head: &Bytes, indices: &RequestIndices) -> Option<http::Request<()>> {
    let mut request = http::Request::new(());
    *request.method_mut() = http::Method::from_bytes(&head[indices.method.clone()]).ok()?;
    *request.uri_mut() = http::Uri::from_maybe_shared(head.slice(indices.target.clone())).ok()?;
    *request.headers_mut() = header_map(head, &indices.headers)?;
    Some(request)
}

/// Takes the head of `length` bytes off `buffer`; in typed mode, builds
/// from it first what hyper's decoder would, kept from the optimiser.
fn take_head<I, T>(
    buffer: &mut BytesMut,
    length: usize,
    indices: Option<&I>,
    typed: fn(&Bytes, &I) -> Option<T>,
) {
    match indices {
        Some(indices) => {
            black_box(typed(&buffer.split_to(length).freeze(), indices));
        }
        None => buffer.advance(length),
    }
}

fn is_forwarded(name: &str) -> bool {
    ["x-forwarded-for", "x-forwarded-proto", "x-forwarded-host"]
        .iter()
        .any(|own| name.eq_ignore_ascii_case(own))
}

/// Appends the message's `body` bytes from `buffer` (reading the rest from
/// `from`) to `out`, leaving in `buffer` what follows the message.
async fn take_body(
    from: &mut TcpStream,
    buffer: &mut BytesMut,
    body: usize,
    out: &mut Vec<u8>,
) -> io::Result<()> {
    fill(from, buffer, body).await?;
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
    let mut request_indices = typed.then(RequestIndices::default);
    let mut response_indices = typed.then(ResponseIndices::default);
    loop {
        let head = read_head(&mut client, &mut requests, |input| {
            out.clear();
            forward_request_head(
                input,
                &mut out,
                &upstream_host,
                &client_ip,
                request_indices.as_mut(),
            )
        });
        let request = match head.await? {
            None => return Ok(()),
            Some(Ok(frame)) => frame,
            Some(Err(answer)) => return client.write_all(answer).await,
        };
        take_head(
            &mut requests,
            request.head,
            request_indices.as_ref(),
            typed_request,
        );
        take_body(&mut client, &mut requests, request.body, &mut out).await?;
        upstream.write_all(&out).await?;

        out.clear();
        let head = read_head(&mut upstream, &mut responses, |input| {
            read_response_head(input, response_indices.as_mut())
        });
        let Some(Ok(response)) = head.await? else {
            return client.write_all(BAD_GATEWAY).await;
        };
        out.extend_from_slice(&responses[..response.head]);
        take_head(
            &mut responses,
            response.head,
            response_indices.as_ref(),
            typed_response,
        );
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
