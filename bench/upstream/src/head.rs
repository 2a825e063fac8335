//! What the two instruments that speak HTTP/1.1 without a library share
//! (`raw_proxy.rs`, and `hyper_proxy.rs` told `raw-client`): reading a head
//! with httparse, a response head's frame, where its parts lie, and the
//! `http` crate's typed values built over those places, as hyper's decoder
//! builds them.

use std::io;
use std::ops::Range;

use bytes::{Bytes, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// The longest head read; a longer one is refused.
pub const MAX_HEAD: usize = 64 << 10;
pub const MAX_HEADERS: usize = 64;

pub const BAD_REQUEST: &[u8] =
    b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
pub const BAD_GATEWAY: &[u8] =
    b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

/// A whole head's length and its body's.
pub struct Frame {
    pub head: usize,
    pub body: usize,
}

/// A parse of what has arrived: None while the head is incomplete, else
/// its frame or the answer that refuses it.
pub type Parsed = Option<Result<Frame, &'static [u8]>>;

/// Where each header's name and value lie in a head's bytes.
pub type HeaderIndices = Vec<(Range<usize>, Range<usize>)>;

/// Where a response head's parts lie: its status, and its headers.
#[derive(Default)]
pub struct ResponseIndices {
    pub status: u16,
    pub headers: HeaderIndices,
}

/// Keeps in `indices` where `headers`, parsed from `input`, lie in it.
pub fn record_headers(indices: &mut HeaderIndices, input: &[u8], headers: &[httparse::Header<'_>]) {
    indices.clear();
    indices.extend(headers.iter().map(|header| {
        (
            range_in(input, header.name.as_bytes()),
            range_in(input, header.value),
        )
    }));
}

/// Where `part`, a slice of `input`, lies in it.
pub fn range_in(input: &[u8], part: &[u8]) -> Range<usize> {
    let start = part.as_ptr() as usize - input.as_ptr() as usize;
    start..start + part.len()
}

/// The response head of `input`: its length and its body's, its parts'
/// places kept in `indices` when given. It is passed on as received, so
/// only what would make that wrong is refused.
pub fn read_response_head(input: &[u8], indices: Option<&mut ResponseIndices>) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let head = match response.parse(input) {
        Ok(httparse::Status::Complete(head)) => head,
        Ok(httparse::Status::Partial) => return None,
        Err(_) => return Some(Err(BAD_GATEWAY)),
    };
    if let Some(indices) = indices {
        indices.status = response.code.unwrap_or_default();
        record_headers(&mut indices.headers, input, response.headers);
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

/// What hyper's decoder builds from a response head.
pub fn typed_response(head: &Bytes, indices: &ResponseIndices) -> Option<http::Response<()>> {
    let mut response = http::Response::new(());
    *response.status_mut() = http::StatusCode::from_u16(indices.status).ok()?;
    *response.headers_mut() = header_map(head, &indices.headers)?;
    Some(response)
}

/// The headers at `indices` in `head`, their values sharing its bytes.
pub fn header_map(head: &Bytes, indices: &HeaderIndices) -> Option<HeaderMap> {
    let mut map = HeaderMap::with_capacity(indices.len());
    for (name, value) in indices {
        let name = HeaderName::from_bytes(&head[name.clone()]).ok()?;
        map.append(
            name,
            HeaderValue::from_maybe_shared(head.slice(value.clone())).ok()?,
        );
    }
    Some(map)
}

pub fn parse_length(value: &[u8]) -> Option<usize> {
    std::str::from_utf8(value).ok()?.trim().parse().ok()
}

pub fn is_hop_by_hop(name: &str) -> bool {
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

/// Reads from `from` into `buffer` until `parse` finds a whole head or
/// refuses it; None when the peer closed between messages.
pub async fn read_head(
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

/// Reads from `from` until `buffer` holds at least `length` bytes (a body
/// whose head was taken off it).
pub async fn fill(from: &mut TcpStream, buffer: &mut BytesMut, length: usize) -> io::Result<()> {
    while buffer.len() < length {
        buffer.reserve(length - buffer.len());
        if from.read_buf(buffer).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(())
}
