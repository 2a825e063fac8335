//! Where the user's identity is attached to a proxied request, and where the
//! client's own credentials are taken off it: the last headers written
//! before a request leaves for its upstream.
//!
//! Whatever the upstream's `identity` mode, no credential or identity
//! header the client sent reaches the upstream: `Authorization` (the
//! authentication stage has already taken it off a request it
//! authenticated, as kube does), every header an authenticator reads (its
//! `headers` list: an API key in `X-Api-Key`), and the upstream's own
//! request-header names; the `X-Remote-*` and `Impersonate-*` prefixes are
//! removed with the hop-by-hop headers (`super::headers`). Each name is
//! matched with `_` read as `-`, as `super::headers` matches them. A route with
//! `forward_credentials = true` passes the credentials (never the identity
//! headers): `Authorization` as the client sent it, and the authenticators'
//! headers.
//!
//! Then the mode's headers are set from the request's user: kube's
//! aggregator's front-proxy headers
//! (`staging/src/k8s.io/kube-aggregator/pkg/apiserver/handler_proxy.go`,
//! which sends `system:anonymous` in `system:unauthenticated` for an
//! anonymous request) or client-go's impersonation headers
//! (`staging/src/k8s.io/client-go/transport/round_trippers.go`), extra keys
//! escaped as client-go escapes them.

use std::path::PathBuf;

use http::header::AUTHORIZATION;
use http::{Extensions, HeaderMap, HeaderName, HeaderValue};

use super::credentials::Watched;
use super::headers::{dashed, remove_dashed};
use crate::config::Upstream;
use crate::config::identity::{Identity, RequestHeaderNames, load_bearer_token};
use crate::context::{ClientCredentials, RequestContext, UserInfo};
use crate::status::GatewayError;

const IMPERSONATE_USER: HeaderName = HeaderName::from_static("impersonate-user");
const IMPERSONATE_UID: HeaderName = HeaderName::from_static("impersonate-uid");
const IMPERSONATE_GROUP: HeaderName = HeaderName::from_static("impersonate-group");
const IMPERSONATE_EXTRA_PREFIX: &str = "impersonate-extra-";

/// One upstream's identity headers and the credentials it is sent.
pub(super) struct IdentityHeaders {
    identity: Identity,
    /// The headers every authenticator reads (their `headers` lists),
    /// `_` read as `-`.
    credential_headers: Vec<String>,
    forward_credentials: bool,
    bearer_token: Option<Watched<String>>,
}

impl IdentityHeaders {
    pub(super) fn new(
        upstream: &Upstream,
        credential_headers: &[HeaderName],
    ) -> Result<Self, String> {
        let bearer_token = match &upstream.credentials.bearer_token_file {
            Some(path) => Some(Watched::new(vec![path.clone()], read_token)?),
            None => None,
        };
        Ok(IdentityHeaders {
            identity: upstream.identity.clone(),
            credential_headers: credential_headers
                .iter()
                .map(|name| dashed(name.as_str()).into_owned())
                .collect(),
            forward_credentials: upstream.forward_credentials,
            bearer_token,
        })
    }

    /// Takes the client's credentials off `headers` (unless forwarded) and
    /// sets the mode's identity headers and the gateway's token.
    pub(super) fn apply(
        &self,
        headers: &mut HeaderMap,
        extensions: &Extensions,
    ) -> Result<(), GatewayError> {
        if let Identity::RequestHeader(names) = &self.identity {
            remove_request_headers(headers, names);
        }
        if self.forward_credentials {
            restore_authorization(headers, extensions);
        } else {
            headers.remove(AUTHORIZATION);
            if !self.credential_headers.is_empty() {
                remove_dashed(headers, |name| {
                    self.credential_headers.iter().any(|listed| listed == name)
                });
            }
        }
        let user = || RequestContext::of(extensions).user_or_anonymous();
        match &self.identity {
            Identity::None => {}
            Identity::RequestHeader(names) => set_request_headers(headers, names, user())?,
            Identity::Impersonate => set_impersonation(headers, user())?,
        }
        if let Some(token) = &self.bearer_token {
            let (token, _) = token.current();
            let value = HeaderValue::try_from(format!("Bearer {token}")).map_err(|_| {
                GatewayError::internal("the upstream's bearer token is not a header value")
            })?;
            headers.insert(AUTHORIZATION, value);
        }
        Ok(())
    }
}

fn read_token(paths: &[PathBuf]) -> Result<String, String> {
    match paths {
        [path] => load_bearer_token(path),
        _ => Err("a bearer token is read from one file".to_owned()),
    }
}

/// The upstream's own request-header names, which may lie outside the
/// `X-Remote-` prefix the hop-by-hop pass removes.
fn remove_request_headers(headers: &mut HeaderMap, names: &RequestHeaderNames) {
    let own = [&names.user, &names.uid, &names.group].map(|name| dashed(name.as_str()));
    let extra_prefix = dashed(&names.extra_prefix);
    remove_dashed(headers, |name| {
        own.iter().any(|own| own == name) || name.starts_with(&*extra_prefix)
    });
}

/// The `Authorization` values the authentication stage took off the request.
fn restore_authorization(headers: &mut HeaderMap, extensions: &Extensions) {
    if let Some(ClientCredentials(values)) = &RequestContext::of(extensions).credentials {
        for value in values {
            headers.append(AUTHORIZATION, value.clone());
        }
    }
}

fn set_request_headers(
    headers: &mut HeaderMap,
    names: &RequestHeaderNames,
    user: &UserInfo,
) -> Result<(), GatewayError> {
    headers.insert(names.user.clone(), value(&user.name)?);
    if !user.uid.is_empty() {
        headers.insert(names.uid.clone(), value(&user.uid)?);
    }
    for group in &user.groups {
        headers.append(names.group.clone(), value(group)?);
    }
    set_extra(headers, &names.extra_prefix, user)
}

/// client-go's `ImpersonatingRoundTripper`.
fn set_impersonation(headers: &mut HeaderMap, user: &UserInfo) -> Result<(), GatewayError> {
    headers.insert(IMPERSONATE_USER, value(&user.name)?);
    if !user.uid.is_empty() {
        headers.insert(IMPERSONATE_UID, value(&user.uid)?);
    }
    for group in &user.groups {
        headers.append(IMPERSONATE_GROUP, value(group)?);
    }
    set_extra(headers, IMPERSONATE_EXTRA_PREFIX, user)
}

fn set_extra(headers: &mut HeaderMap, prefix: &str, user: &UserInfo) -> Result<(), GatewayError> {
    for (key, values) in &user.extra {
        let name = HeaderName::from_bytes(format!("{prefix}{}", escape_extra_key(key)).as_bytes())
            .map_err(|_| {
                GatewayError::internal("an extra key of the user cannot be sent as a header")
            })?;
        for extra in values {
            headers.append(name.clone(), value(extra)?);
        }
    }
    Ok(())
}

/// A user attribute as a header value: bytes as they are, as Go's `net/http`
/// sends them; only control characters cannot be sent.
fn value(text: &str) -> Result<HeaderValue, GatewayError> {
    HeaderValue::from_bytes(text.as_bytes()).map_err(|_| {
        GatewayError::internal("the user's identity cannot be sent to the upstream as headers")
    })
}

/// client-go's `headerKeyEscape`: every byte that is not an RFC 7230 token
/// character, and `%` itself, as `%XX` (upper-case hex), so that the
/// receiver's `url.PathUnescape` gives the key back (`example.com/scopes`
/// becomes `example.com%2Fscopes`).
pub(super) fn escape_extra_key(key: &str) -> String {
    let mut escaped = String::with_capacity(key.len());
    for byte in key.bytes() {
        if is_token_byte(byte) && byte != b'%' {
            escaped.push(char::from(byte));
        } else {
            escaped.push_str(&format!("%{byte:02X}"));
        }
    }
    escaped
}

/// RFC 7230 `tchar` (client-go's `legalHeaderKeyBytes`).
fn is_token_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_keys_are_escaped_as_client_go_escapes_them() {
        assert_eq!(escape_extra_key("scopes"), "scopes");
        assert_eq!(
            escape_extra_key("example.com/scopes"),
            "example.com%2Fscopes"
        );
        assert_eq!(escape_extra_key("100%"), "100%25");
        assert_eq!(escape_extra_key("a b:c"), "a%20b%3Ac");
        assert_eq!(escape_extra_key("ключ"), "%D0%BA%D0%BB%D1%8E%D1%87");
    }
}
