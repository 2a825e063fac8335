//! An upstream's `identity` (`upstream = { identity = "...", ... }`): what of
//! the authenticated user the gateway tells the upstream, and the gateway's
//! own credentials towards it. The modes are the ways kube-apiserver's
//! aggregator and the proxies in front of kube pass a user on:
//!
//! - `"request-header"`: `X-Remote-User`, `X-Remote-Uid`, `X-Remote-Group`,
//!   `X-Remote-Extra-<key>`, as the aggregator sends them to the API servers
//!   behind it (`staging/src/k8s.io/kube-aggregator/pkg/apiserver/handler_proxy.go`),
//!   presenting the proxy client certificate (`--proxy-client-cert-file`);
//! - `"impersonate"`: `Impersonate-User`, `-Uid`, `-Group`, `-Extra-<key>`
//!   with the gateway's own credentials, as client-go's impersonating
//!   transport does (`staging/src/k8s.io/client-go/transport/round_trippers.go`);
//! - `"none"`: nothing.
//!
//! The credential files are checked here, and re-read by the upstream proxy
//! when they change ([`load_client_cert`], [`load_bearer_token`]).

use std::ops::Range;
use std::path::{Path, PathBuf};

use http::HeaderName;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::bounds;
use super::complete::Completer;
use super::files::read_limited;
use super::manifest as m;

/// What of the user an upstream is told.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum Identity {
    /// Nothing.
    #[default]
    None,
    /// kube's front-proxy headers, under these names.
    RequestHeader(RequestHeaderNames),
    /// kube's impersonation headers.
    Impersonate,
}

/// The request-header names, lower-case (kube's `--requestheader-*` flags;
/// the defaults are the aggregator's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RequestHeaderNames {
    pub user: HeaderName,
    pub uid: HeaderName,
    pub group: HeaderName,
    /// Followed by the extra key, percent-encoded.
    pub extra_prefix: String,
}

/// kube's default request-header names (the aggregator's), which the
/// authentication stage also removes from every request.
pub(crate) const X_REMOTE_USER: HeaderName = HeaderName::from_static("x-remote-user");
pub(crate) const X_REMOTE_UID: HeaderName = HeaderName::from_static("x-remote-uid");
pub(crate) const X_REMOTE_GROUP: HeaderName = HeaderName::from_static("x-remote-group");
pub(crate) const X_REMOTE_EXTRA_PREFIX: &str = "x-remote-extra-";

impl Default for RequestHeaderNames {
    fn default() -> Self {
        RequestHeaderNames {
            user: X_REMOTE_USER,
            uid: X_REMOTE_UID,
            group: X_REMOTE_GROUP,
            extra_prefix: X_REMOTE_EXTRA_PREFIX.to_owned(),
        }
    }
}

/// The gateway's own credentials towards an upstream; both files are read
/// again when they change.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct GatewayCredentials {
    /// Presented to an `https://` upstream.
    pub client_cert: Option<ClientCertFiles>,
    /// Sent as `Authorization: Bearer <token>` (impersonate mode).
    pub bearer_token_file: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClientCertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A client certificate chain and its key, as rustls takes them.
pub(crate) type ClientCert = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

/// The certificate chain and key in `files`, or why they cannot be used.
pub(crate) fn load_client_cert(files: &ClientCertFiles) -> Result<ClientCert, String> {
    let read = |path: &Path| {
        read_limited(path, bounds::PEM_FILE)
            .map_err(|error| format!("cannot read {}: {error}", path.display()))
    };
    let cert_pem = read(&files.cert)?;
    let chain: Vec<_> = CertificateDer::pem_slice_iter(&cert_pem)
        .filter_map(Result::ok)
        .collect();
    if chain.is_empty() {
        return Err(format!("{} holds no PEM certificate", files.cert.display()));
    }
    let key = PrivateKeyDer::from_pem_slice(&read(&files.key)?).map_err(|error| {
        format!(
            "{} holds no usable PEM private key: {error}",
            files.key.display()
        )
    })?;
    Ok((chain, key))
}

/// The token in the file at `path` (surrounding whitespace trimmed, as
/// client-go reads a token file), or why it cannot be sent.
pub(crate) fn load_bearer_token(path: &Path) -> Result<String, String> {
    let bytes = read_limited(path, bounds::TOKEN_FILE)
        .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    let token = String::from_utf8(bytes)
        .map_err(|_| format!("{} is not UTF-8 text", path.display()))?
        .trim()
        .to_owned();
    if token.is_empty() || !token.bytes().all(|byte| byte.is_ascii_graphic()) {
        return Err(format!(
            "{} must hold one token of visible ASCII characters",
            path.display()
        ));
    }
    Ok(token)
}

impl Completer<'_> {
    /// The upstream table's `identity`, `identity_headers`, `client_cert`,
    /// `client_key` and `bearer_token_file`.
    pub(super) fn identity(
        &mut self,
        table: &m::UpstreamTable,
        https: bool,
        span: &Range<usize>,
        key: &str,
    ) -> (Identity, GatewayCredentials) {
        let problem = |c: &mut Self, message: String| c.problem(Some(span.clone()), key, message);
        let identity = match table.identity.as_deref() {
            None | Some("none") => Identity::None,
            Some("request-header") => {
                Identity::RequestHeader(self.request_header_names(table, span, key))
            }
            Some("impersonate") => Identity::Impersonate,
            Some(other) => {
                problem(
                    self,
                    format!(
                        "identity {other:?} is not one of \"none\", \"request-header\", \"impersonate\""
                    ),
                );
                Identity::None
            }
        };
        if table.identity_headers.is_some() && !matches!(identity, Identity::RequestHeader(_)) {
            problem(
                self,
                "identity_headers needs identity = \"request-header\"".to_owned(),
            );
        }
        let client_cert = match (&table.client_cert, &table.client_key) {
            (Some(cert), Some(key_file)) => Some(ClientCertFiles {
                cert: self.resolve(cert),
                key: self.resolve(key_file),
            }),
            (None, None) => None,
            _ => {
                problem(self, "client_cert and client_key go together".to_owned());
                None
            }
        };
        if let Some(files) = &client_cert {
            if !https {
                problem(
                    self,
                    "client_cert is presented over TLS: it needs an https:// upstream".to_owned(),
                );
            }
            if let Err(message) = load_client_cert(files) {
                problem(self, message);
            }
        }
        let bearer_token_file = table
            .bearer_token_file
            .as_deref()
            .map(|file| self.resolve(file));
        if let Some(path) = &bearer_token_file {
            if identity != Identity::Impersonate {
                problem(
                    self,
                    "bearer_token_file is the gateway's credential in identity = \"impersonate\""
                        .to_owned(),
                );
            }
            if let Err(message) = load_bearer_token(path) {
                problem(self, message);
            }
        }
        if identity == Identity::Impersonate && client_cert.is_none() && bearer_token_file.is_none()
        {
            problem(
                self,
                "identity = \"impersonate\" needs the gateway's credentials: client_cert and \
                 client_key, or bearer_token_file"
                    .to_owned(),
            );
        }
        let credentials = GatewayCredentials {
            client_cert,
            bearer_token_file,
        };
        (identity, credentials)
    }

    fn request_header_names(
        &mut self,
        table: &m::UpstreamTable,
        span: &Range<usize>,
        key: &str,
    ) -> RequestHeaderNames {
        let defaults = RequestHeaderNames::default();
        let Some(given) = &table.identity_headers else {
            return defaults;
        };
        let key = format!("{key}.identity_headers");
        let name = |c: &mut Self, field: &str, value: &Option<String>, default: &str| {
            let text = value.as_deref().unwrap_or(default).to_ascii_lowercase();
            let valid = text.len() <= bounds::IDENTITY_HEADER_NAME
                && HeaderName::from_bytes(text.as_bytes()).is_ok();
            if !valid {
                c.problem(
                    Some(span.clone()),
                    &format!("{key}.{field}"),
                    format!(
                        "{text:?} is not a header name of at most {} characters",
                        bounds::IDENTITY_HEADER_NAME
                    ),
                );
                return default.to_owned();
            }
            text
        };
        let user = name(self, "user", &given.user, defaults.user.as_str());
        let uid = name(self, "uid", &given.uid, defaults.uid.as_str());
        let group = name(self, "group", &given.group, defaults.group.as_str());
        let extra_prefix = name(
            self,
            "extra_prefix",
            &given.extra_prefix,
            &defaults.extra_prefix,
        );
        let header = |text: String, default: HeaderName| {
            HeaderName::from_bytes(text.as_bytes()).unwrap_or(default)
        };
        RequestHeaderNames {
            user: header(user, defaults.user),
            uid: header(uid, defaults.uid),
            group: header(group, defaults.group),
            extra_prefix,
        }
    }
}
