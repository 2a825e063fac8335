//! Request headers, read as the Kubernetes API server reads them. Names are
//! lower-case in the contract; they are compared without regard to case
//! anyway, as Go's `http.Header` does.
//!
//! The functions take the WIT's [`Header`] records, or `(name, value)` pairs
//! (what a unit test writes most easily).

use crate::types::Header;

/// A request header's name and value.
pub trait AsHeader {
    fn name(&self) -> &str;
    fn value(&self) -> &str;
}

impl AsHeader for Header {
    fn name(&self) -> &str {
        &self.name
    }
    fn value(&self) -> &str {
        &self.value
    }
}

impl<N: AsRef<str>, V: AsRef<str>> AsHeader for (N, V) {
    fn name(&self) -> &str {
        self.0.as_ref()
    }
    fn value(&self) -> &str {
        self.1.as_ref()
    }
}

/// The value of the first header named `name`, as Go's `Header.Get`.
pub fn first<'a, H: AsHeader>(headers: &'a [H], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|header| header.name().eq_ignore_ascii_case(name))
        .map(AsHeader::value)
}

/// The bearer token of a request, as Kubernetes' bearer-token authenticator
/// reads it (`staging/src/k8s.io/apiserver/pkg/authentication/request/bearertoken/bearertoken.go`):
/// the first `Authorization` header, trimmed, split on spaces into at most
/// three parts; the first must be `bearer` (any case) and the second, the
/// token, non-empty.
pub fn bearer_token<H: AsHeader>(headers: &[H]) -> Option<&str> {
    let value = first(headers, "authorization")?.trim();
    let mut parts = value.splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return None;
    }
    Some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_header_of_a_name_counts() {
        let headers = [("x-a", "1"), ("X-B", "2"), ("x-a", "3")];
        assert_eq!(first(&headers, "x-a"), Some("1"));
        assert_eq!(first(&headers, "x-b"), Some("2"));
        assert_eq!(first(&headers, "x-c"), None);
        let records = [Header {
            name: "x-fault".into(),
            value: " trap ".into(),
        }];
        assert_eq!(first(&records, "x-fault"), Some(" trap "));
    }

    #[test]
    fn bearer_tokens_as_kube_reads_them() {
        for (value, token) in [
            ("Bearer s3cret", Some("s3cret")),
            ("bearer s3cret", Some("s3cret")),
            ("  BEARER s3cret  ", Some("s3cret")),
            ("Bearer s3cret extra", Some("s3cret")),
            ("Bearer  s3cret", None),
            ("Bearer", None),
            ("Basic s3cret", None),
            ("", None),
        ] {
            assert_eq!(
                bearer_token(&[("authorization", value)]),
                token,
                "{value:?}"
            );
        }
        assert_eq!(bearer_token::<(&str, &str)>(&[]), None);
    }
}
