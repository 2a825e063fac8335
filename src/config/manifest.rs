//! The manifest as written: the TOML shape, one struct per table, unknown
//! keys rejected. Values that need checking keep their source span
//! (`Spanned`) so [`super::complete`] can point at them. Nothing here is
//! validated; nothing outside `config` uses these types.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub listen: Spanned<Listen>,
    #[serde(default)]
    pub limits: Limits,
    pub hsts: Option<Hsts>,
    pub cors: Option<Cors>,
    #[serde(default)]
    pub hooks: Vec<Spanned<Hook>>,
    #[serde(default)]
    pub servers: Vec<Spanned<Server>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Listen {
    pub address: Spanned<String>,
    pub tls: Option<Spanned<Tls>>,
    pub plaintext: Option<Spanned<bool>>,
    pub cert_dir: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tls {
    pub cert: Spanned<String>,
    pub key: Spanned<String>,
    pub client_ca: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub max_requests_in_flight: Option<Spanned<i64>>,
    pub max_mutating_requests_in_flight: Option<Spanned<i64>>,
    pub request_timeout: Option<Spanned<String>>,
    pub min_request_timeout: Option<Spanned<String>>,
    pub max_request_body: Option<Spanned<String>>,
    pub max_header_bytes: Option<Spanned<String>>,
    pub read_header_timeout: Option<Spanned<String>>,
    pub idle_timeout: Option<Spanned<String>>,
    pub shutdown_delay: Option<Spanned<String>>,
    pub shutdown_timeout: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hsts {
    pub directives: Vec<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cors {
    pub allowed_origins: Vec<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hook {
    pub name: Spanned<String>,
    pub phase: Spanned<String>,
    pub command: Spanned<Vec<String>>,
    pub timeout: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Server {
    pub name: Spanned<String>,
    #[serde(default)]
    pub routes: Vec<Spanned<Route>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    pub api: Option<Spanned<String>>,
    pub path: Option<Spanned<String>>,
    pub prefix: Option<Spanned<String>>,
    pub upstream: Option<Spanned<Upstream>>,
    #[serde(rename = "static")]
    pub static_response: Option<Spanned<Static>>,
}

/// `upstream = "http://..."` or `upstream = { url = "...", ca = "...", ... }`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Upstream {
    Url(String),
    Table(UpstreamTable),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamTable {
    pub url: String,
    pub ca: Option<String>,
    pub timeout: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Static {
    pub status: Option<u16>,
    pub content_type: Option<String>,
    pub body: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}
