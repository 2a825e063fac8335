//! Configuration: the TOML manifest is read ([`manifest`]), then *completed*
//! (defaults filled in, paths resolved, files loaded) and *validated* into a
//! [`Config`], as kube-apiserver completes its options before anything
//! starts. Every problem is collected and reported with its place
//! ([`error`]); a half-valid manifest never reaches the server.
//!
//! `wasmgate check`, start-up and a reload all go through [`load`] (a file)
//! or [`parse`] (text fetched from the fleet's etcd), by way of a
//! [`source::ManifestSource`].

pub mod bounds;
pub mod error;
pub mod files;
mod manifest;
pub mod source;
pub mod stages;
mod validate;

pub use error::{ConfigError, Location, Problem};
pub use validate::parse_duration;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderValue, StatusCode};
use regex::Regex;
use rustls::RootCertStore;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// A manifest, completed and validated.
#[derive(Debug)]
pub struct Config {
    /// The manifest file this came from.
    pub source: PathBuf,
    pub listen: Listen,
    pub limits: Limits,
    /// HSTS directives (`max-age=31536000`, `includeSubDomains`); none means
    /// no `Strict-Transport-Security` header.
    pub hsts: Option<HeaderValue>,
    /// Allowed CORS origins; empty means CORS is off.
    pub cors_allowed_origins: Vec<Regex>,
    pub hooks: Vec<Hook>,
    /// The Wasm filters of the four stages.
    pub stages: stages::Stages,
    /// The delegation chain, in order: never empty.
    pub servers: Vec<Server>,
}

#[derive(Debug)]
pub struct Listen {
    pub address: SocketAddr,
    pub transport: Transport,
    pub trusted_proxies: TrustedProxies,
}

/// The peers whose forwarding headers (`X-Forwarded-For`, `Forwarded`,
/// `X-Real-IP`) are believed: `listen.trusted_proxies`. Empty by default:
/// no peer is trusted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<ipnet::IpNet>);

impl TrustedProxies {
    pub fn new(networks: Vec<ipnet::IpNet>) -> Self {
        TrustedProxies(networks)
    }

    /// True when `peer` is in one of the networks. An IPv4 peer that reached
    /// an IPv6 socket (`::ffff:a.b.c.d`) is matched as the IPv4 address it is.
    pub fn contains(&self, peer: IpAddr) -> bool {
        let peer = peer.to_canonical();
        self.0.iter().any(|network| network.contains(&peer))
    }
}

/// How the listener speaks.
#[derive(Debug)]
pub enum Transport {
    /// Plain HTTP/1.1 and h2c (explicit opt-out of TLS).
    Plaintext,
    /// TLS with certificates from the manifest.
    Tls(Arc<TlsMaterial>),
    /// TLS with a self-signed certificate kept in this directory, generated
    /// at start when absent, as kube-apiserver does with `--cert-dir`.
    SelfSigned { cert_dir: PathBuf },
}

/// The generated certificate and its key, in `cert_dir`.
pub const SELF_SIGNED_FILES: [&str; 2] = ["wasmgate.crt", "wasmgate.key"];

/// Loaded serving certificate, key and optional client CA.
#[derive(Debug)]
pub struct TlsMaterial {
    pub cert_chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    /// When set, client certificates are verified against these roots.
    pub client_ca: Option<Arc<RootCertStore>>,
}

/// Server-wide limits and timeouts (kube's flags of the same names:
/// `staging/src/k8s.io/apiserver/pkg/server/options/server_run_options.go`).
#[derive(Debug, Clone)]
pub struct Limits {
    /// Read-only requests in flight at once; 0 means unlimited.
    pub max_requests_in_flight: usize,
    /// Mutating requests in flight at once; 0 means unlimited.
    pub max_mutating_requests_in_flight: usize,
    pub request_timeout: Duration,
    pub max_request_body: u64,
    pub max_header_bytes: usize,
    pub read_header_timeout: Duration,
    pub idle_timeout: Duration,
    pub shutdown_delay: Duration,
    pub shutdown_timeout: Duration,
    /// Wasm instances alive at once (in calls and idle in pools), at most
    /// [`MAX_FILTER_INSTANCES`]; at least the two in-flight limits' sum
    /// when the manifest has filters, so every request max-in-flight admits
    /// can run the chain.
    pub filter_instances: usize,
    /// Total linear memory of all live instances, in bytes.
    pub filter_memory: u64,
}

/// The engine's instance pool holds this many component instances.
pub const MAX_FILTER_INSTANCES: usize = 1000;

/// The default `filter_memory`: on a machine of 24 GiB and 2 cores, room for
/// the default 600 in-flight requests each running a filter of about 1 MiB
/// (the shipped Rust filters) three times over (filters with a larger
/// runtime, JavaScript or Python, proportionally fewer at once), and a
/// bound on the memory filters keep after a burst.
pub const DEFAULT_FILTER_MEMORY: u64 = 2 << 30;

/// The largest `filter_memory`.
pub const MAX_FILTER_MEMORY_TOTAL: u64 = 1 << 40;

impl Default for Limits {
    /// kube-apiserver's defaults.
    fn default() -> Self {
        Limits {
            max_requests_in_flight: 400,
            max_mutating_requests_in_flight: 200,
            request_timeout: Duration::from_secs(60),
            max_request_body: 3 * 1024 * 1024,
            max_header_bytes: 1024 * 1024,
            read_header_timeout: Duration::from_secs(32),
            idle_timeout: Duration::from_secs(90),
            shutdown_delay: Duration::ZERO,
            shutdown_timeout: Duration::from_secs(60),
            filter_instances: MAX_FILTER_INSTANCES,
            filter_memory: DEFAULT_FILTER_MEMORY,
        }
    }
}

/// A lifecycle hook: a command run after the listener is up or when
/// shutdown begins.
#[derive(Debug, Clone)]
pub struct Hook {
    pub name: Name,
    pub phase: HookPhase,
    /// The program and its arguments; run without a shell.
    pub command: Vec<String>,
    /// The manifest's folder: hooks run there, as every path resolves there.
    pub working_dir: PathBuf,
    pub timeout: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HookPhase {
    PostStart,
    PreShutdown,
}

/// A name that is a DNS-1123 label: lower-case letters, digits and `-`,
/// 1 to 63 characters, starting and ending with a letter or digit.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Name(String);

impl Name {
    pub fn parse(text: &str) -> Result<Name, String> {
        let valid_chars = text
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        let valid_ends = !text.starts_with('-') && !text.ends_with('-');
        if text.is_empty() || text.len() > 63 || !valid_chars || !valid_ends {
            return Err(format!(
                "{text:?} is not a valid name: use 1 to 63 lower-case letters, digits and '-', \
                 starting and ending with a letter or digit"
            ));
        }
        Ok(Name(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One server of the delegation chain.
#[derive(Debug)]
pub struct Server {
    pub name: Name,
    pub routes: Vec<Route>,
}

#[derive(Debug)]
pub struct Route {
    pub matcher: RouteMatch,
    pub handler: RouteHandler,
    pub escaped_slashes: EscapedSlashes,
}

/// What a route does with a path holding an escaped `/` or `\` (`%2F`,
/// `%5C`): Envoy's `path_with_escaped_slashes_action`, per route.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EscapedSlashes {
    /// 400: the path has no single reading (kube decodes `%2F` into a
    /// separator, other servers keep it as data).
    #[default]
    Reject,
    /// Kept as data inside its segment, judged and forwarded as `%2F`
    /// (Envoy's `KEEP_UNCHANGED`), for upstreams that never decode it into
    /// a separator.
    Keep,
}

/// Where a route applies (kube's director: API roots, exact paths, prefixes).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RouteMatch {
    /// An API root (`/api`, `/apis`, `/apis/<group>`, `/apis/<group>/<version>`):
    /// the root itself and everything below `<root>/`.
    Api(String),
    /// Exactly this path.
    Exact(String),
    /// Every path that starts with this.
    Prefix(String),
}

#[derive(Debug)]
pub enum RouteHandler {
    Upstream(Upstream),
    Static(StaticResponse),
}

/// A reverse-proxy target.
#[derive(Debug)]
pub struct Upstream {
    /// `http://` or `https://`, authority and optional base path.
    pub url: http::Uri,
    /// Roots to verify an `https://` upstream with; the system's web PKI
    /// roots are not used, so an https upstream needs a CA.
    pub ca: Option<Arc<RootCertStore>>,
    /// How long to wait for the upstream's response headers.
    pub timeout: Option<Duration>,
}

/// A fixed response.
#[derive(Debug, Clone)]
pub struct StaticResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: bytes::Bytes,
}

/// Reads, completes and validates the manifest at `path`.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let read_error = |source| ConfigError::Read {
        path: path.to_owned(),
        source,
    };
    let bytes = files::read_limited(path, bounds::MANIFEST_FILE)
        .map_err(|error| read_error(error.into()))?;
    let source = String::from_utf8(bytes).map_err(|_| {
        read_error(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        ))
    })?;
    parse(path, &source)
}

/// Completes and validates manifest text that came from `path` (used to
/// resolve relative file names and to name the file in problems).
pub fn parse(path: &Path, source: &str) -> Result<Config, ConfigError> {
    let invalid = |problems| ConfigError::Invalid {
        path: path.to_owned(),
        problems,
    };
    let manifest: manifest::Manifest = toml::from_str(source).map_err(|error| {
        invalid(vec![Problem {
            location: error.span().map(|span| Location::of_span(source, &span)),
            key: error
                .span()
                .map(|span| error::key_at(source, span.start))
                .unwrap_or_default(),
            message: error.message().trim().to_owned(),
        }])
    })?;
    validate::complete(path, source, manifest).map_err(invalid)
}
