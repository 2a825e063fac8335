//! How a request's path is read: Go's percent-decoding of `URL.Path`
//! (`unescape` in Go's `net/url/url.go`), kube's split of it into segments
//! (`splitPath` in `staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`)
//! and `IsValidPathSegmentName` (`staging/src/k8s.io/apimachinery/pkg/api/validation/path/name.go`).
//!
//! Kube splits `req.URL.Path`, which Go has already percent-decoded. So does this
//! port: `%XX` escapes are decoded before splitting (so `%2F` becomes a separator,
//! exactly as in kube, and the upstream API server will see the same segments), and
//! [`RequestInfo::path`](super::RequestInfo::path) holds the decoded path. Two cases Go never lets reach the
//! resolver are handled without panicking:
//!
//! * a malformed escape (`%zz`, a trailing `%`): Go's server rejects the request
//!   with 400 before any handler runs; here the path is used literally, undecoded;
//! * decoded bytes that are not UTF-8: they become U+FFFD (lossy conversion), since
//!   Rust strings cannot hold them. `/` bytes are unaffected, so the segment
//!   structure is the same as kube's.
//!
//! No path cleaning is done (`..`, `.` and empty segments are kept), as in kube:
//! the gateway's handler chain makes the path canonical before it resolves it
//! (`crate::request_target`), so in the chain none of these reach the resolver.
//!
//! One departure from kube: a path holding an escaped `/` or `\` (`%2F`, `%5C`)
//! is not decoded at all. The chain lets one through only to a route that keeps
//! escaped slashes as data (`escaped_slashes = "keep"`), which forwards it as
//! sent; decoding it here would split the path where the upstream does not.

use std::borrow::Cow;

use smallvec::SmallVec;

/// Go's `strings.Trim(path, "/")` followed by `strings.Split(path, "/")`, with an
/// empty result for an empty path. The segments are kept on the stack up to
/// eight (a grouped, namespaced resource's subresource path has eight), on
/// the heap beyond (a proxy's sub-path).
pub(super) fn split_path(path: &str) -> SmallVec<[&str; 8]> {
    let trimmed = path.trim_matches('/');
    let mut segments = SmallVec::new();
    if trimmed.is_empty() {
        return segments;
    }
    // The slashes are found by memchr, a vector at a time: `str::split`
    // decodes the path a character at a time, or, with a `char` pattern,
    // sets up a search for every segment. A `/` is one byte in UTF-8, so
    // every cut falls between two characters.
    let mut start = 0;
    for slash in memchr::memchr_iter(b'/', trimmed.as_bytes()) {
        segments.push(&trimmed[start..slash]);
        start = slash + 1;
    }
    segments.push(&trimmed[start..]);
    segments
}

/// Percent-decodes a path as Go's URL parser does for `URL.Path` (`+` stays `+`).
/// A malformed escape leaves the whole path undecoded (Go would have answered 400),
/// and so does an escaped slash (see the module's documentation).
pub(super) fn decode_path(path: &str) -> Cow<'_, str> {
    if !path.contains('%') || has_escaped_slash(path) {
        return Cow::Borrowed(path);
    }
    match percent_decode_strict(path) {
        Some(bytes) => Cow::Owned(String::from_utf8_lossy(&bytes).into_owned()),
        None => Cow::Borrowed(path),
    }
}

/// Decodes `%XX` escapes; `None` if any `%` is not followed by two hex digits
/// (Go's `url.PathUnescape`, which fails there).
pub(crate) fn percent_decode_strict(s: &str) -> Option<Vec<u8>> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hi = bytes.get(i + 1).copied().and_then(hex_value)?;
            let lo = bytes.get(i + 2).copied().and_then(hex_value)?;
            out.push((hi << 4) | lo);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    Some(out)
}

/// Whether `path` holds `%2F` or `%5C`, in either case.
fn has_escaped_slash(path: &str) -> bool {
    path.match_indices('%').any(|(at, _)| {
        path.get(at + 1..at + 3)
            .is_some_and(|hex| hex.eq_ignore_ascii_case("2f") || hex.eq_ignore_ascii_case("5c"))
    })
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

pub(super) fn has_malformed_escape(s: &str) -> bool {
    let bytes = s.as_bytes();
    bytes.iter().enumerate().any(|(i, &b)| {
        b == b'%'
            && !(bytes.get(i + 1).copied().and_then(hex_value).is_some()
                && bytes.get(i + 2).copied().and_then(hex_value).is_some())
    })
}

/// `path.IsValidPathSegmentName`.
pub(super) fn is_valid_path_segment_name(name: &str) -> bool {
    name != "." && name != ".." && !name.contains('/') && !name.contains('%')
}
