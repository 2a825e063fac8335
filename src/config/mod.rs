//! Configuration: the TOML manifest is read ([`manifest`]), then *completed*
//! (defaults filled in, paths resolved, files loaded) and *validated* into a
//! [`Config`], as kube-apiserver completes its options before anything
//! starts. Every problem is collected and reported with its place
//! ([`error`]); a half-valid manifest never reaches the server.
//!
//! `wasmgate check`, start-up and a reload all go through [`load`] (a file)
//! or [`parse`] (text fetched from the fleet's etcd), by way of a
//! [`source::ManifestSource`].
//!
//! # Layout
//!
//! One file per table of the manifest, in docs/manifest.md's order:
//! `listen` (`[listen]`, `[listen.tls]`), `limits`, `hsts`, `cors`, `access_log`, `hooks`,
//! `tracing`, `servers` (`[[servers]]`, `[[servers.routes]]`) and [`stages`] (the four
//! stages' tables). Each holds the completed types of its table and how they
//! are completed from what was written, as kube keeps an option group's
//! struct, `Validate` and `ApplyTo` together in one file of
//! `staging/src/k8s.io/apiserver/pkg/server/options/`. [`complete`]
//! drives the sections, checks what spans them, and holds the `Completer`
//! every section reads values with; [`bounds`] holds every value's limits.
//!
//! The manifest as written (serde's types) stays whole in [`manifest`],
//! unlike kube's flags: it is one TOML document, read in one piece, and
//! reading it in one file of 250 lines shows a newcomer every key the
//! gateway accepts beside docs/manifest.md; a section's file names its
//! input as `m::Listen`, one step away.

mod access_log;
pub(crate) mod bounds;
mod complete;
mod cors;
pub(crate) mod error;
pub(crate) mod files;
pub(crate) mod flow_control;
mod hooks;
mod hsts;
pub(crate) mod identity;
mod limits;
mod listen;
mod manifest;
mod servers;
pub mod source;
pub mod stages;
mod tracing;

pub(crate) use access_log::AccessLog;
pub(crate) use complete::parse_duration;
pub use error::{ConfigError, Location, Problem};
pub(crate) use hooks::{Hook, HookPhase};
pub use limits::Limits;
pub(crate) use limits::{DEFAULT_MAX_REQUEST_BODY, MAX_FILTER_INSTANCES, MAX_FILTER_MEMORY_TOTAL};
pub use listen::Transport;
pub(crate) use listen::{Listen, SELF_SIGNED_FILES, TlsMaterial, TrustedProxies};
pub(crate) use servers::{
    EscapedSlashes, Route, RouteHandler, RouteMatch, Server, StaticResponse, Upstream,
    api_root_matches, describe,
};
pub(crate) use tracing::Tracing;

use std::path::{Path, PathBuf};

use http::HeaderValue;
use regex::Regex;

/// A manifest, completed and validated.
#[derive(Debug)]
pub struct Config {
    /// The manifest file this came from.
    pub source: PathBuf,
    /// The listener: address, transport and the proxies trusted for client addresses.
    pub listen: Listen,
    pub(crate) limits: Limits,
    /// HSTS directives (`max-age=31536000`, `includeSubDomains`); none means
    /// no `Strict-Transport-Security` header.
    pub hsts: Option<HeaderValue>,
    /// Allowed CORS origins; empty means CORS is off.
    pub cors_allowed_origins: Vec<Regex>,
    /// Which requests get a line in the access log.
    pub(crate) access_log: AccessLog,
    pub(crate) hooks: Vec<Hook>,
    /// The Wasm filters of the four stages.
    pub stages: stages::Stages,
    /// API Priority and Fairness; `None` means max-in-flight limits instead.
    pub flow_control: Option<flow_control::FlowControl>,
    /// OpenTelemetry tracing; `None` (no `[tracing]` table) means none.
    pub(crate) tracing: Option<Tracing>,
    /// The delegation chain, in order: never empty.
    pub(crate) servers: Vec<Server>,
    /// The files the manifest names that were read into it: the listener's
    /// certificate, key and client CA, upstreams' CAs, filters'
    /// `config_files`. A change to one is a change of the configuration
    /// (the reloader watches them).
    pub(crate) files_read: Vec<PathBuf>,
}

/// A name that is a DNS-1123 label: lower-case letters, digits and `-`,
/// 1 to 63 characters, starting and ending with a letter or digit.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Name(String);

impl Name {
    /// Checks `text` as a name (a DNS label), or says why it is not one.
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

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
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
    complete::complete(path, source, manifest).map_err(invalid)
}
