//! The canonical request target: the one spelling of a request's path that
//! authorization, admission, audit, the director and the upstream all see.
//!
//! Servers behind a gateway clean paths before they route them (Go's
//! `ServeMux` and nginx resolve `..`, merge `//` and decode escapes; Tomcat
//! and Spring strip `;` parameters), so a gateway that judges the path as
//! sent and forwards it unchanged lets a client be judged for one resource
//! and served another (`/public/../apis/...`). The gateway therefore
//! rewrites the path to its canonical form *before* request info, and
//! forwards that form byte for byte:
//!
//! * escapes of unreserved characters are decoded (RFC 3986 §2.3), other
//!   escapes are kept with upper-case hex digits (§6.2.2.1), and characters
//!   that a path may not hold raw (`"`, `{`, non-ASCII, ...) are escaped;
//! * empty segments are merged (`//` is `/`, as Go's `path.Clean` and nginx's
//!   `merge_slashes` read it), then dot-segments are resolved (§5.2.4), also
//!   when spelled `%2e`, once decoded;
//! * what has no single reading is refused ([`TargetError`], a 400): an
//!   invalid escape, an escaped NUL, a literal `\`, a `;` in the path, a `..`
//!   above the root, escapes that decode to invalid UTF-8, and an escaped `/`
//!   or `\` ([`CanonicalPath::escaped_slashes`]) unless the route it reaches
//!   keeps them opaque (`escaped_slashes = "keep"`).
//!
//! The query is forwarded as sent, but a parameter that request info or the
//! timeout filter reads may appear only once ([`check_query`]).
//!
//! A path that is already canonical costs one scan and no allocation.
//! docs/security.md states the rules and why each one is so.

use std::borrow::Cow;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

use crate::status::GatewayError;

/// Why a request target has no canonical form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// The path does not start with `/`.
    #[error("the request path must start with \"/\"")]
    NotOriginForm,
    /// A `%` not followed by two hex digits.
    #[error("the request path contains an invalid percent-encoding")]
    InvalidEscape,
    /// A NUL byte, encoded or not.
    #[error("the request path contains a NUL (%00)")]
    Nul,
    /// A backslash, encoded or not.
    #[error("the request path contains a backslash")]
    Backslash,
    /// A `;` (path parameters).
    #[error("the request path contains \";\": path parameters are not accepted")]
    PathParameter,
    /// Escapes that decode to bytes that are not UTF-8.
    #[error("the request path contains escapes that do not decode to UTF-8")]
    InvalidUtf8,
    /// A `..` segment that would climb above `/`.
    #[error("the request path goes above the root with \"..\"")]
    AboveRoot,
    #[error(
        "the request path contains an encoded \"/\" or \"\\\" (%2F, %5C), which this route does not accept"
    )]
    /// An encoded `/` or `\\` where the route does not accept one.
    EscapedSlash,
    /// A query parameter the gateway reads, given twice.
    #[error("the query parameter {0:?} is given more than once")]
    RepeatedParameter(&'static str),
    /// A query parameter the gateway reads, whose pair cannot be read one way only.
    #[error("the query parameter {0:?} is ambiguous: its pair holds \";\" or an invalid escape")]
    AmbiguousParameter(&'static str),
}

impl From<TargetError> for GatewayError {
    fn from(error: TargetError) -> Self {
        GatewayError::BadRequest {
            message: error.to_string(),
        }
    }
}

/// A path in canonical form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanonicalPath<'a> {
    /// Borrowed when the path was already canonical.
    pub path: Cow<'a, str>,
    /// Whether a segment of the path as sent holds an escaped `/` or `\`
    /// (kept opaque, `%2F` or `%5C`), also one in a segment a `..` removed:
    /// a server that decodes it into a separator resolves that `..`
    /// differently (`/x/a%2Fb/..` is `/x/a` to it, `/x/` here). Only a route
    /// that keeps them may receive such a path.
    pub escaped_slashes: bool,
}

/// Characters a path segment may hold raw (RFC 3986 `pchar` without `%`):
/// everything else is escaped.
const NOT_PCHAR: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'!')
    .remove(b'$')
    .remove(b'&')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')')
    .remove(b'*')
    .remove(b'+')
    .remove(b',')
    .remove(b';')
    .remove(b'=')
    .remove(b':')
    .remove(b'@');

/// The canonical form of `path` (the path of a request target, without its
/// query), or why it has none.
pub fn canonicalize(path: &str) -> Result<CanonicalPath<'_>, TargetError> {
    let rest = path.strip_prefix('/').ok_or(TargetError::NotOriginForm)?;
    if is_plain_path(rest.as_bytes()) {
        return Ok(CanonicalPath {
            path: Cow::Borrowed(path),
            escaped_slashes: false,
        });
    }
    canonicalize_segments(path, rest)
}

/// Whether `rest` (the path after its leading `/`) is canonical as sent
/// and holds nothing to refuse, seen in one pass over its bytes: plain
/// bytes ([`is_plain`]) and separators, no dot-segment, no empty segment
/// but the last (a trailing `/`). Most paths are; the others go through
/// [`canonicalize_segments`], which says the same of these.
fn is_plain_path(rest: &[u8]) -> bool {
    let mut segment_start = 0;
    for (at, &byte) in rest.iter().enumerate() {
        if byte == b'/' {
            if matches!(&rest[segment_start..at], b"" | b"." | b"..") {
                return false;
            }
            segment_start = at + 1;
        } else if !is_plain(byte) {
            return false;
        }
    }
    !matches!(&rest[segment_start..], b"." | b"..")
}

/// [`canonicalize`] segment by segment: each one checked and, where its
/// spelling or its kind (empty, a dot-segment) is not canonical, the path
/// rebuilt.
fn canonicalize_segments<'a>(path: &'a str, rest: &str) -> Result<CanonicalPath<'a>, TargetError> {
    let mut escaped_slashes = false;
    let mut canonical = true;
    let mut segments = rest.split('/').peekable();
    while let Some(segment) = segments.next() {
        let scan = scan_segment(segment)?;
        escaped_slashes |= scan.escaped_slash;
        let is_last = segments.peek().is_none();
        canonical &=
            !scan.rewrite && segment != "." && segment != ".." && (is_last || !segment.is_empty());
    }
    let path = if canonical {
        Cow::Borrowed(path)
    } else {
        Cow::Owned(rebuild(rest)?)
    };
    Ok(CanonicalPath {
        path,
        escaped_slashes,
    })
}

/// What one scan of a segment found.
struct SegmentScan {
    /// Its spelling changes in canonical form (escapes or raw characters).
    rewrite: bool,
    escaped_slash: bool,
}

/// Checks a segment and says whether its spelling is canonical.
fn scan_segment(segment: &str) -> Result<SegmentScan, TargetError> {
    let mut scan = SegmentScan {
        rewrite: false,
        escaped_slash: false,
    };
    if segment.bytes().all(is_plain) {
        return Ok(scan);
    }
    let mut non_ascii_escape = false;
    for piece in Pieces(segment) {
        match piece? {
            // Not whether `utf8_percent_encode` gave an owned Cow: a piece
            // that is one character to escape comes back borrowed, as the
            // escape's static text.
            Piece::Raw(text) => scan.rewrite |= !text.bytes().all(is_plain),
            Piece::Escape { byte, lower_case } => {
                scan.escaped_slash |= matches!(byte, b'/' | b'\\');
                non_ascii_escape |= !byte.is_ascii();
                scan.rewrite |= lower_case || is_unreserved(byte);
            }
        }
    }
    if non_ascii_escape && percent_decode_str(segment).decode_utf8().is_err() {
        return Err(TargetError::InvalidUtf8);
    }
    Ok(scan)
}

/// The canonical path of `rest` (the path after its leading `/`), which
/// [`scan_segment`] has accepted: segments respelled, empty segments merged,
/// dot-segments resolved (RFC 3986 §5.2.4).
fn rebuild(rest: &str) -> Result<String, TargetError> {
    let mut kept: Vec<String> = Vec::new();
    let mut trailing_slash = false;
    let mut segments = rest.split('/').peekable();
    while let Some(segment) = segments.next() {
        let segment = respell(segment)?;
        // A path that ends in a dot-segment or an empty one names a folder.
        trailing_slash = segments.peek().is_none();
        match segment.as_str() {
            "" | "." => {}
            ".." => {
                kept.pop().ok_or(TargetError::AboveRoot)?;
            }
            _ => {
                kept.push(segment);
                trailing_slash = false;
            }
        }
    }
    let mut path = String::with_capacity(rest.len() + 1);
    for segment in &kept {
        path.push('/');
        path.push_str(segment);
    }
    if trailing_slash || kept.is_empty() {
        path.push('/');
    }
    Ok(path)
}

/// A segment in canonical spelling: unreserved escapes decoded, other
/// escapes upper-case, raw characters outside `pchar` escaped.
fn respell(segment: &str) -> Result<String, TargetError> {
    let mut out = String::with_capacity(segment.len());
    for piece in Pieces(segment) {
        match piece? {
            Piece::Raw(text) => out.extend(utf8_percent_encode(text, NOT_PCHAR)),
            Piece::Escape { byte, .. } if is_unreserved(byte) => out.push(char::from(byte)),
            Piece::Escape { byte, .. } => out.push_str(percent_encoding::percent_encode_byte(byte)),
        }
    }
    Ok(out)
}

/// Whether a path may hold `byte` raw and the gateway accepts it there: a
/// `pchar` that is neither an escape's `%` nor the refused `;` (the bytes
/// [`NOT_PCHAR`] leaves raw, less `;`). A segment of these alone is
/// canonical as sent, which most are: [`scan_segment`] then skips its
/// pieces. A table, since it is asked of every byte of every path.
fn is_plain(byte: u8) -> bool {
    PLAIN[usize::from(byte)]
}

/// [`is_plain`] of each byte.
const PLAIN: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte: u8 = 0;
    loop {
        table[byte as usize] = is_unreserved(byte)
            || matches!(
                byte,
                b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b'=' | b':' | b'@'
            );
        if byte == u8::MAX {
            break table;
        }
        byte += 1;
    }
};

/// RFC 3986 §2.3: ALPHA / DIGIT / `-` / `.` / `_` / `~`.
const fn is_unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~')
}

/// A segment's pieces: runs of raw text and single escapes.
enum Piece<'a> {
    Raw(&'a str),
    Escape { byte: u8, lower_case: bool },
}

/// Splits a segment into [`Piece`]s, refusing invalid escapes, NUL (raw or
/// escaped) and the characters refused raw: `\` (a separator to some
/// servers) and `;` (path parameters to others, which strip them: `/..;/` is
/// `..` to Tomcat).
struct Pieces<'a>(&'a str);

impl<'a> Iterator for Pieces<'a> {
    type Item = Result<Piece<'a>, TargetError>;

    fn next(&mut self) -> Option<Self::Item> {
        let text = self.0;
        if text.is_empty() {
            return None;
        }
        let Some(escape) = text.strip_prefix('%') else {
            let end = text.find(['%', ';', '\\', '\0']).unwrap_or(text.len());
            let refused = match text.as_bytes().get(end) {
                Some(b';') => Some(TargetError::PathParameter),
                Some(b'\\') => Some(TargetError::Backslash),
                Some(0) => Some(TargetError::Nul),
                _ => None,
            };
            if let Some(error) = refused {
                self.0 = "";
                return Some(Err(error));
            }
            self.0 = &text[end..];
            return Some(Ok(Piece::Raw(&text[..end])));
        };
        let Some(hex) = escape
            .get(..2)
            .filter(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()))
        else {
            self.0 = "";
            return Some(Err(TargetError::InvalidEscape));
        };
        self.0 = &escape[2..];
        Some(match u8::from_str_radix(hex, 16) {
            Ok(0) => Err(TargetError::Nul),
            Ok(byte) => Ok(Piece::Escape {
                byte,
                lower_case: hex.bytes().any(|b| b.is_ascii_lowercase()),
            }),
            Err(_) => Err(TargetError::InvalidEscape),
        })
    }
}

/// The query parameters request info reads (kube's `RequestInfoFactory`
/// and the `ListOptions` it decodes), those admission and audit depend on,
/// and `timeout`, read by the timeout filter.
pub(crate) const SINGLE_VALUED_PARAMETERS: [&str; 10] = [
    "watch",
    "labelSelector",
    "fieldSelector",
    "timeoutSeconds",
    "resourceVersion",
    "limit",
    "continue",
    "dryRun",
    "fieldManager",
    "timeout",
];

/// Refuses a query in which a parameter of [`SINGLE_VALUED_PARAMETERS`] is
/// given twice, or in a pair that parsers read differently: one holding `;`
/// (a separator to some, and dropped whole by Go's `url.ParseQuery`) or an
/// invalid escape (dropped by Go, kept literally by others).
pub fn check_query(query: &str) -> Result<(), TargetError> {
    let mut seen = 0u16;
    for pair in query.split('&') {
        let ambiguous = pair.contains(';') || has_invalid_escape(pair);
        for piece in pair.split(';') {
            let Some((key, _)) = url::form_urlencoded::parse(piece.as_bytes()).next() else {
                continue;
            };
            let Some(index) = SINGLE_VALUED_PARAMETERS
                .iter()
                .position(|name| *name == key)
            else {
                continue;
            };
            let name = SINGLE_VALUED_PARAMETERS[index];
            if ambiguous {
                return Err(TargetError::AmbiguousParameter(name));
            }
            let bit = 1u16 << index;
            if seen & bit != 0 {
                return Err(TargetError::RepeatedParameter(name));
            }
            seen |= bit;
        }
    }
    Ok(())
}

/// Whether a `%` of `text` is not followed by two hex digits.
fn has_invalid_escape(text: &str) -> bool {
    text.match_indices('%').any(|(at, _)| {
        text.get(at + 1..at + 3)
            .is_none_or(|hex| !hex.bytes().all(|b| b.is_ascii_hexdigit()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canonical(path: &str) -> Result<String, TargetError> {
        canonicalize(path).map(|c| c.path.into_owned())
    }

    #[test]
    fn plain_bytes_are_those_pchar_leaves_raw_but_semicolon() {
        for byte in 0..=u8::MAX {
            let raw = [byte];
            let left_raw = std::str::from_utf8(&raw)
                .is_ok_and(|text| utf8_percent_encode(text, NOT_PCHAR).to_string() == text);
            assert_eq!(is_plain(byte), left_raw && byte != b';', "byte {byte:#04x}");
        }
    }

    #[test]
    fn canonical_paths_are_borrowed() {
        for path in [
            "/",
            "/api/v1/namespaces/default/pods",
            "/apis/",
            "/a/b/",
            "/a%20b/%C3%A9/%3F/%25",
            "/a:b@c!$&'()*+,=~",
        ] {
            let got = canonicalize(path).expect("canonical");
            assert!(matches!(got.path, Cow::Borrowed(_)), "{path}");
            assert_eq!(got.path, path);
            assert!(!got.escaped_slashes);
        }
    }

    #[test]
    fn one_pass_takes_plain_paths_only() {
        for path in [
            "/",
            "/api/v1/namespaces/default/pods",
            "/apis/",
            "/.well-known/openid-configuration",
            "/a/.b/..c/.../b.",
            "/a:b@c!$&'()*+,=~",
        ] {
            assert!(is_plain_path(&path.as_bytes()[1..]), "{path}");
            assert_eq!(
                canonicalize(path),
                canonicalize_segments(path, &path[1..]),
                "{path}"
            );
        }
        // Each has something the segments must see: a dot-segment, an empty
        // segment, an escape (of a slash, of a non-UTF-8 byte, one before a
        // raw character to escape), a raw character to escape or to refuse.
        for path in [
            "/.",
            "/..",
            "/a/.",
            "/a/..",
            "/./a",
            "/a/../b",
            "//",
            "//a",
            "/a//b",
            "/a%2Fb",
            "/a%2fb/..",
            "/%FF",
            "/public/%3F\"",
            "/a\"",
            "/\"",
            "/a;b",
            "/a\\b",
            "/a\0",
            "/é",
            "/a b",
        ] {
            assert!(!is_plain_path(&path.as_bytes()[1..]), "{path:?}");
        }
    }

    #[test]
    fn paths_are_made_canonical() {
        let cases = [
            ("/a/./b", "/a/b"),
            ("/a/b/..", "/a/"),
            ("/a/b/.", "/a/b/"),
            ("/a/..", "/"),
            ("//a//b//", "/a/b/"),
            ("/a//../b", "/b"),
            ("/%61pi/v1", "/api/v1"),
            ("/a/%2e%2e/b", "/b"),
            ("/a/%2E./b", "/b"),
            ("/a/.%2e", "/"),
            ("/a/\"", "/a/%22"),
            ("/a/%3F\"", "/a/%3F%22"),
            ("/public/%3F\"", "/public/%3F%22"),
            ("/a/.b/./..c/", "/a/.b/..c/"),
            ("/a/%7e\"b", "/a/~%22b"),
            ("/a%2db%7e", "/a-b~"),
            ("/%c3%a9", "/%C3%A9"),
            ("/%3f", "/%3F"),
            ("/é", "/%C3%A9"),
            ("/a\"b{c}|^", "/a%22b%7Bc%7D%7C%5E"),
            (
                "/apis/demo.example.io/v1/namespaces/default/widgets/../../kube-system/widgets",
                "/apis/demo.example.io/v1/namespaces/kube-system/widgets",
            ),
            ("/public/x%3F/../../apis/v1", "/apis/v1"),
        ];
        for (path, want) in cases {
            assert_eq!(canonical(path).as_deref(), Ok(want), "{path}");
        }
    }

    #[test]
    fn ambiguous_paths_are_refused() {
        let cases = [
            ("", TargetError::NotOriginForm),
            ("*", TargetError::NotOriginForm),
            ("/..", TargetError::AboveRoot),
            ("/a/../..", TargetError::AboveRoot),
            ("/%2e%2e/x", TargetError::AboveRoot),
            ("/a%zz", TargetError::InvalidEscape),
            ("/a%", TargetError::InvalidEscape),
            ("/a%4", TargetError::InvalidEscape),
            ("/a%+4", TargetError::InvalidEscape),
            ("/a%00b", TargetError::Nul),
            ("/a\0b", TargetError::Nul),
            ("/a\\..\\b", TargetError::Backslash),
            ("/public/..;/apis", TargetError::PathParameter),
            ("/a;x=1/b", TargetError::PathParameter),
            ("/%FF", TargetError::InvalidUtf8),
            ("/%C0%AE", TargetError::InvalidUtf8),
        ];
        for (path, want) in cases {
            assert_eq!(canonical(path), Err(want), "{path:?}");
        }
    }

    #[test]
    fn escaped_slashes_are_kept_opaque_and_reported() {
        for (path, want) in [
            ("/files/a%2Fb", "/files/a%2Fb"),
            ("/files/a%2fb", "/files/a%2Fb"),
            ("/files/..%2F..%2Fsecret", "/files/..%2F..%2Fsecret"),
            ("/files/a%5cb/../c", "/files/c"),
            ("/x/a%2Fb/..", "/x/"),
        ] {
            let got = canonicalize(path).expect("a canonical form");
            assert_eq!(got.path, want, "{path}");
            assert!(got.escaped_slashes, "{path}");
        }
    }

    #[test]
    fn single_valued_parameters_are_refused_twice() {
        for query in [
            "watch=0&watch=1",
            "limit=1&x=2&limit=1",
            "wat%63h=0&watch=1",
            "timeout=1s&timeout=2s",
        ] {
            assert!(
                matches!(check_query(query), Err(TargetError::RepeatedParameter(_))),
                "{query}"
            );
        }
        for query in ["watch=1;x", "x=1;watch=1", "watch=%zz", "labelSelector=a%"] {
            assert!(
                matches!(check_query(query), Err(TargetError::AmbiguousParameter(_))),
                "{query}"
            );
        }
        for query in [
            "",
            "watch=1",
            "a=1&a=2",
            "watch=1&labelSelector=a%3Db&limit=5",
            "x=%zz",
            "a;b",
        ] {
            assert_eq!(check_query(query), Ok(()), "{query}");
        }
    }

    /// Pieces paths are made of in the properties below: plain names, every
    /// spelling of a dot, escapes of each class, and the refused characters.
    const PIECES: &[&str] = &[
        "a",
        "b",
        "kube-system",
        ".",
        "..",
        "...",
        ".b",
        "b.",
        "%2e",
        "%2E",
        "%2e%2e",
        ".%2E",
        "%2E.",
        "",
        "%61",
        "%7e",
        "%2F",
        "%2f",
        "%5C",
        "%3F",
        "%3f",
        "%23",
        "%25",
        "%252e",
        "%20",
        "%C3%A9",
        "%c3%a9",
        "%FF",
        "%zz",
        "%",
        "%00",
        ";",
        "..;",
        "\\",
        "é",
        "\"",
        "{",
        ":",
        "@",
        "~",
    ];

    /// Paths of [`PIECES`], and any printable text after a `/`.
    fn any_path() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let segment = prop::collection::vec(prop::sample::select(PIECES), 0..3)
            .prop_map(|pieces| pieces.concat());
        let pieces = prop::collection::vec(segment, 0..7)
            .prop_map(|segments| format!("/{}", segments.join("/")));
        prop_oneof![3 => pieces, 1 => "/[ -~é\u{0}]{0,40}"]
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(2000))]

        /// The one pass over plain paths answers what the segment-by-segment
        /// reading answers, to the byte and to the borrow.
        #[test]
        fn the_one_pass_agrees_with_the_segments(path in any_path()) {
            let whole = canonicalize(&path);
            let by_segments = canonicalize_segments(&path, &path[1..]);
            proptest::prop_assert_eq!(&whole, &by_segments, "{:?}", path);
            if let (Ok(whole), Ok(by_segments)) = (whole, by_segments) {
                proptest::prop_assert_eq!(
                    matches!(whole.path, Cow::Borrowed(_)),
                    matches!(by_segments.path, Cow::Borrowed(_))
                );
            }
        }

        #[test]
        fn canonicalizing_twice_changes_nothing(path in any_path()) {
            if let Ok(once) = canonicalize(&path) {
                let twice = canonicalize(&once.path).expect("a canonical path is accepted");
                proptest::prop_assert!(matches!(twice.path, Cow::Borrowed(_)), "{path:?} -> {:?}", once.path);
                proptest::prop_assert_eq!(&twice.path, &once.path);
                // An escaped slash a `..` removed still counts for the path
                // as sent (`/x/a%2Fb/..`: a decoding server removes `b` only).
                proptest::prop_assert!(!twice.escaped_slashes || once.escaped_slashes);
            }
        }

        #[test]
        fn canonical_paths_hold_no_dot_segment_nor_unreserved_escape(path in any_path()) {
            if let Ok(canonical) = canonicalize(&path) {
                let canonical = canonical.path;
                proptest::prop_assert!(canonical.starts_with('/'));
                proptest::prop_assert!(canonical.is_ascii(), "{canonical:?}");
                let segments: Vec<&str> = canonical[1..].split('/').collect();
                for (index, segment) in segments.iter().enumerate() {
                    proptest::prop_assert!(*segment != "." && *segment != "..", "{canonical:?}");
                    proptest::prop_assert!(!segment.is_empty() || index + 1 == segments.len(), "{canonical:?}");
                }
                for (at, _) in canonical.match_indices('%') {
                    let hex = &canonical[at + 1..at + 3];
                    let byte = u8::from_str_radix(hex, 16).expect("a valid escape");
                    proptest::prop_assert!(!is_unreserved(byte), "{canonical:?}");
                    proptest::prop_assert_eq!(hex, hex.to_ascii_uppercase());
                }
            }
        }
    }
}
