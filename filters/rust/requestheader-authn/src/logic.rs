//! Pure logic of `requestheader-authn`: no host calls, so it runs in
//! host-target tests. Kube's requestheader authenticator
//! (`staging/src/k8s.io/apiserver/pkg/authentication/request/headerrequest/requestheader.go`),
//! behind its client-certificate check.

use serde::Deserialize;
use wasmgate_filter::FilterConfig;
use wasmgate_filter::headers::{AsHeader, first};
use x509_parser::pem::Pem;
use x509_parser::prelude::{FromDer, X509Certificate};

/// The filter's config: `client_ca` is the PEM text of the front proxy's
/// CA bundle (the manifest names a file in `config_files`, the gateway puts
/// its content here); the header names default to kube's
/// `--requestheader-*` defaults.
#[derive(Debug, Deserialize)]
#[serde(try_from = "Raw")]
pub struct Config {
    /// Each CA's subject, DER-encoded.
    ca_subjects: Vec<Vec<u8>>,
    /// Each CA certificate, DER-encoded.
    ca_certs: Vec<Vec<u8>>,
    allowed_names: Vec<String>,
    username_headers: Vec<String>,
    uid_headers: Vec<String>,
    group_headers: Vec<String>,
    extra_headers_prefixes: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    client_ca: String,
    #[serde(default)]
    allowed_names: Vec<String>,
    #[serde(default = "default_username")]
    username_headers: Vec<String>,
    #[serde(default = "default_uid")]
    uid_headers: Vec<String>,
    #[serde(default = "default_group")]
    group_headers: Vec<String>,
    #[serde(default = "default_extra")]
    extra_headers_prefixes: Vec<String>,
}

fn default_username() -> Vec<String> {
    vec!["x-remote-user".into()]
}
fn default_uid() -> Vec<String> {
    vec!["x-remote-uid".into()]
}
fn default_group() -> Vec<String> {
    vec!["x-remote-group".into()]
}
fn default_extra() -> Vec<String> {
    vec!["x-remote-extra-".into()]
}

impl TryFrom<Raw> for Config {
    type Error = String;

    fn try_from(raw: Raw) -> Result<Self, String> {
        let mut ca_subjects = Vec::new();
        let mut ca_certs = Vec::new();
        for pem in Pem::iter_from_buffer(raw.client_ca.as_bytes()) {
            let pem = pem.map_err(|e| format!("client_ca is not PEM: {e}"))?;
            if pem.label != "CERTIFICATE" {
                continue;
            }
            let (_, cert) = X509Certificate::from_der(&pem.contents)
                .map_err(|e| format!("client_ca holds a certificate that does not parse: {e}"))?;
            ca_subjects.push(cert.subject().as_raw().to_vec());
            ca_certs.push(pem.contents.clone());
        }
        if ca_certs.is_empty() {
            return Err(
                "client_ca holds no PEM certificate (list it in the filter's config_files, \
                 so the gateway reads the file)"
                    .into(),
            );
        }
        if raw.username_headers.is_empty() {
            return Err("username_headers is empty".into());
        }
        let lower =
            |names: Vec<String>| names.into_iter().map(|n| n.to_ascii_lowercase()).collect();
        Ok(Config {
            ca_subjects,
            ca_certs,
            allowed_names: raw.allowed_names,
            username_headers: lower(raw.username_headers),
            uid_headers: lower(raw.uid_headers),
            group_headers: lower(raw.group_headers),
            extra_headers_prefixes: lower(raw.extra_headers_prefixes),
        })
    }
}

impl FilterConfig for Config {
    const FILTER: &'static str = "requestheader-authn";
}

#[derive(Debug, PartialEq)]
pub enum Outcome {
    Authenticated {
        user: String,
        uid: String,
        groups: Vec<String>,
        extra: Vec<(String, Vec<String>)>,
    },
    NoOpinion(String),
}

/// Who the identity headers say the user is, when the connection's
/// verified client certificate (`chain_der`, leaf first) is the front
/// proxy's. The listener verified the chain's signatures up to one of its
/// `client_ca` roots; the chain is the front proxy's when its last
/// certificate is one of this filter's CAs or is issued by one (by subject
/// name, bound by that verification).
pub fn authenticate<H: AsHeader>(
    config: &Config,
    chain_der: Option<&[Vec<u8>]>,
    headers: &[H],
) -> Outcome {
    let Some(chain) = chain_der.filter(|chain| !chain.is_empty()) else {
        return Outcome::NoOpinion("no verified client certificate".into());
    };
    if let Err(why) = check_proxy_certificate(config, chain) {
        return Outcome::NoOpinion(why);
    }
    let Some(user) = config
        .username_headers
        .iter()
        .find_map(|name| first(headers, name).filter(|value| !value.is_empty()))
    else {
        return Outcome::NoOpinion("the front proxy sent no user name".into());
    };
    let uid = config
        .uid_headers
        .iter()
        .find_map(|name| first(headers, name).filter(|value| !value.is_empty()))
        .unwrap_or_default();
    Outcome::Authenticated {
        user: user.to_string(),
        uid: uid.to_string(),
        groups: groups(config, headers),
        extra: extra(config, headers),
    }
}

/// kube's `allHeaderValues`: the values of each group header in the order
/// the names are configured, an empty value no group.
fn groups<H: AsHeader>(config: &Config, headers: &[H]) -> Vec<String> {
    config
        .group_headers
        .iter()
        .flat_map(|name| {
            headers
                .iter()
                .filter(move |header| header.name().eq_ignore_ascii_case(name))
        })
        .map(AsHeader::value)
        .filter(|value| !value.is_empty())
        .map(str::to_string)
        .collect()
}

fn check_proxy_certificate(config: &Config, chain: &[Vec<u8>]) -> Result<(), String> {
    let leaf = parse(&chain[0])?;
    let top_der = &chain[chain.len() - 1];
    let is_ca = config.ca_certs.iter().any(|ca| ca == top_der);
    let issued_by_ca = is_ca || {
        let top = parse(top_der)?;
        config
            .ca_subjects
            .iter()
            .any(|subject| subject == top.issuer().as_raw())
    };
    if !issued_by_ca {
        return Err(format!(
            "the client certificate {} is not issued by client_ca",
            leaf.subject()
        ));
    }
    if config.allowed_names.is_empty() {
        return Ok(());
    }
    let common_name = leaf
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .unwrap_or_default();
    if config.allowed_names.iter().any(|name| name == common_name) {
        Ok(())
    } else {
        Err(format!(
            "the client certificate's CN {common_name:?} is not in allowed_names"
        ))
    }
}

fn parse(der: &[u8]) -> Result<X509Certificate<'_>, String> {
    X509Certificate::from_der(der)
        .map(|(_, cert)| cert)
        .map_err(|e| format!("the client certificate does not parse: {e}"))
}

/// kube's `newExtra`: every header under each prefix in turn, its key the
/// rest of the name lower-cased and then percent-decoded
/// (`url.PathUnescape`; kept as sent when that fails). What the escapes
/// spell keeps its case: `%D0%9A` is `К`, the key client-go escaped.
fn extra<H: AsHeader>(config: &Config, headers: &[H]) -> Vec<(String, Vec<String>)> {
    let mut extra: Vec<(String, Vec<String>)> = Vec::new();
    for prefix in &config.extra_headers_prefixes {
        for header in headers {
            let name = header.name().to_ascii_lowercase();
            let Some(encoded) = name.strip_prefix(prefix.as_str()) else {
                continue;
            };
            let key = path_unescape(encoded).unwrap_or_else(|| encoded.to_string());
            match extra.iter_mut().find(|(k, _)| *k == key) {
                Some((_, values)) => values.push(header.value().to_string()),
                None => extra.push((key, vec![header.value().to_string()])),
            }
        }
    }
    extra
}

/// Go's `url.PathUnescape`: `%XX` decoded, `+` kept; None when a `%` is
/// not followed by two hex digits or the result is not UTF-8.
fn path_unescape(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_unescape_is_gos() {
        assert_eq!(
            path_unescape("example.com%2Fscopes").as_deref(),
            Some("example.com/scopes")
        );
        assert_eq!(path_unescape("100%25").as_deref(), Some("100%"));
        assert_eq!(path_unescape("bad%2"), None);
        assert_eq!(path_unescape("a+b").as_deref(), Some("a+b"));
    }

    #[test]
    fn a_config_without_a_ca_certificate_is_refused() {
        let error = Config::parse(r#"{"client_ca": "front-proxy-ca.crt"}"#).unwrap_err();
        assert!(error.contains("config_files"), "{error}");
    }

    #[test]
    fn without_a_client_certificate_there_is_no_opinion() {
        // Checked before the config is looked at: any config will do.
        let config = Config {
            ca_subjects: Vec::new(),
            ca_certs: Vec::new(),
            allowed_names: Vec::new(),
            username_headers: default_username(),
            uid_headers: default_uid(),
            group_headers: default_group(),
            extra_headers_prefixes: default_extra(),
        };
        let headers = [("x-remote-user", "admin")];
        assert!(matches!(
            authenticate(&config, None, &headers),
            Outcome::NoOpinion(_)
        ));
        assert!(matches!(
            authenticate(&config, Some(&[]), &headers),
            Outcome::NoOpinion(_)
        ));
    }
}
