//! The manifest as written: the TOML shape, one struct per table, unknown
//! keys rejected. Values that need checking keep their source span
//! (`Spanned`) so [`super::complete`] can point at them. Nothing here is
//! validated; nothing outside `config` uses these types.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Manifest {
    pub listen: Spanned<Listen>,
    #[serde(default)]
    pub limits: Limits,
    pub hsts: Option<Hsts>,
    pub cors: Option<Cors>,
    pub access_log: Option<AccessLog>,
    #[serde(default)]
    pub hooks: Vec<Spanned<Hook>>,
    pub authentication: Option<Authentication>,
    pub authorization: Option<Authorization>,
    pub admission: Option<Admission>,
    pub audit: Option<Audit>,
    pub flow_control: Option<Spanned<super::flow_control::written::FlowControl>>,
    pub tracing: Option<Tracing>,
    #[serde(default)]
    pub servers: Vec<Spanned<Server>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Authentication {
    #[serde(default)]
    pub anonymous: bool,
    #[serde(default)]
    pub filters: Vec<Spanned<Filter>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Authorization {
    pub always_allow: Option<Spanned<bool>>,
    #[serde(default)]
    pub filters: Vec<Spanned<Filter>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Admission {
    #[serde(default)]
    pub mutating: Vec<Spanned<Filter>>,
    #[serde(default)]
    pub validating: Vec<Spanned<Filter>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Audit {
    pub mode: Option<Spanned<String>>,
    pub queue_size: Option<Spanned<i64>>,
    /// Batch mode: the most events one call to an audit filter carries.
    pub max_batch_size: Option<Spanned<i64>>,
    /// Batch mode: how long a batch waits for more events after its first.
    pub max_batch_wait: Option<Spanned<String>>,
    /// The policy's `omitStages`: stages no request emits, whatever its rule.
    #[serde(default)]
    pub omit_stages: Vec<Spanned<String>>,
    /// The policy's `omitManagedFields`, for rules that do not say.
    pub omit_managed_fields: Option<bool>,
    #[serde(default)]
    pub policy: Vec<Spanned<AuditRule>>,
    #[serde(default)]
    pub filters: Vec<Spanned<Filter>>,
}

/// One kube audit policy rule.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuditRule {
    pub level: Spanned<String>,
    #[serde(default)]
    pub users: Vec<String>,
    #[serde(default)]
    pub groups: Vec<String>,
    #[serde(default)]
    pub verbs: Vec<String>,
    #[serde(default)]
    pub resources: Vec<AuditResources>,
    #[serde(default)]
    pub namespaces: Vec<String>,
    #[serde(default)]
    pub non_resource_urls: Vec<String>,
    #[serde(default)]
    pub omit_stages: Vec<Spanned<String>>,
    pub omit_managed_fields: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuditResources {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub resources: Vec<String>,
    #[serde(default)]
    pub resource_names: Vec<String>,
}

/// One Wasm filter of any stage.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Filter {
    pub name: Spanned<String>,
    pub component: Spanned<String>,
    pub sha256: Option<Spanned<String>>,
    pub isolation: Option<Spanned<String>>,
    pub timeout: Option<Spanned<String>>,
    pub memory: Option<Spanned<String>>,
    pub failure_policy: Option<Spanned<String>>,
    pub mode: Option<Spanned<String>>,
    #[serde(rename = "match")]
    pub matcher: Option<FilterMatch>,
    /// Audit filters only: `"stdout"` or a file path.
    pub sink: Option<Spanned<String>>,
    /// Authentication filters only: the request headers the filter sees.
    pub headers: Option<Spanned<Vec<String>>>,
    /// The optional fields of its records the filter reads; all when absent.
    pub reads: Option<Spanned<Vec<String>>>,
    /// What of WASI the filter may use; nothing when absent.
    pub wasi: Option<Spanned<WasiGrant>>,
    /// Authentication and authorization filters only: the decision cache.
    pub cache: Option<Spanned<FilterCache>>,
    pub config: Option<toml::Table>,
    /// Keys of `config` whose values are files: the gateway reads each and
    /// hands the filter its text in place of the path.
    pub config_files: Option<Spanned<Vec<String>>>,
}

/// `cache = true` (kube's TTLs), `cache = false`, or a table of them.
#[derive(Debug)]
pub(crate) enum FilterCache {
    Enabled(bool),
    Tuned(CacheTable),
}

/// By hand rather than `untagged`: an untagged enum buffers its input, and
/// the table's values would lose the spans their errors point at.
impl<'de> Deserialize<'de> for FilterCache {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Choice;
        impl<'de> serde::de::Visitor<'de> for Choice {
            type Value = FilterCache;
            fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
                formatter.write_str("true, false or a table of ttl, negative_ttl and max_entries")
            }
            fn visit_bool<E: serde::de::Error>(self, enabled: bool) -> Result<FilterCache, E> {
                Ok(FilterCache::Enabled(enabled))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                table: A,
            ) -> Result<FilterCache, A::Error> {
                CacheTable::deserialize(serde::de::value::MapAccessDeserializer::new(table))
                    .map(FilterCache::Tuned)
            }
        }
        deserializer.deserialize_any(Choice)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CacheTable {
    pub ttl: Option<Spanned<String>>,
    pub negative_ttl: Option<Spanned<String>>,
    pub max_entries: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WasiGrant {
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub dirs: Vec<WasiDir>,
    #[serde(default)]
    pub stdio: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WasiDir {
    pub host: String,
    pub guest: String,
    #[serde(default)]
    pub writable: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FilterMatch {
    #[serde(default)]
    pub path_prefixes: Vec<String>,
    #[serde(default)]
    pub api_groups: Vec<String>,
    #[serde(default)]
    pub resources: Vec<String>,
    #[serde(default)]
    pub verbs: Vec<String>,
    #[serde(default)]
    pub namespaces: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Listen {
    pub address: Spanned<String>,
    pub tls: Option<Spanned<Tls>>,
    pub plaintext: Option<Spanned<bool>>,
    pub cert_dir: Option<Spanned<String>>,
    /// CIDRs (or single addresses) of the proxies whose forwarding headers
    /// are believed.
    #[serde(default)]
    pub trusted_proxies: Vec<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Tls {
    pub cert: Spanned<String>,
    pub key: Spanned<String>,
    pub client_ca: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Limits {
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
    pub filter_instances: Option<Spanned<i64>>,
    pub filter_memory: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AccessLog {
    pub mode: Option<Spanned<String>>,
    pub sample_rate_per_million: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Hsts {
    pub directives: Vec<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Tracing {
    pub endpoint: Option<Spanned<String>>,
    pub sampling_rate_per_million: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Cors {
    pub allowed_origins: Vec<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Hook {
    pub name: Spanned<String>,
    pub phase: Spanned<String>,
    pub command: Spanned<Vec<String>>,
    pub timeout: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Server {
    pub name: Spanned<String>,
    #[serde(default)]
    pub routes: Vec<Spanned<Route>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Route {
    pub api: Option<Spanned<String>>,
    pub path: Option<Spanned<String>>,
    pub prefix: Option<Spanned<String>>,
    /// `upstream = "http://..."` or `upstream = { url = "...", ca = "...", timeout = "..." }`,
    /// told apart in validation so that a wrong key in the table is named.
    pub upstream: Option<Spanned<toml::Value>>,
    #[serde(rename = "static")]
    pub static_response: Option<Spanned<Static>>,
    /// `"reject"` (the default) or `"keep"`.
    pub escaped_slashes: Option<Spanned<String>>,
    /// The client's credentials reach the upstream (default false).
    pub forward_credentials: Option<Spanned<bool>>,
    /// The upstream's discovery and OpenAPI are merged (default false).
    pub aggregate: Option<Spanned<bool>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpstreamTable {
    pub url: String,
    pub ca: Option<String>,
    pub timeout: Option<String>,
    /// `"none"` (the default), `"request-header"` or `"impersonate"`.
    pub identity: Option<String>,
    /// request-header mode's header names.
    pub identity_headers: Option<IdentityHeadersTable>,
    pub client_cert: Option<String>,
    pub client_key: Option<String>,
    pub bearer_token_file: Option<String>,
}

impl UpstreamTable {
    /// `upstream = "<url>"`: the URL and every default.
    pub(crate) fn of_url(url: String) -> Self {
        UpstreamTable {
            url,
            ca: None,
            timeout: None,
            identity: None,
            identity_headers: None,
            client_cert: None,
            client_key: None,
            bearer_token_file: None,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct IdentityHeadersTable {
    pub user: Option<String>,
    pub uid: Option<String>,
    pub group: Option<String>,
    pub extra_prefix: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Static {
    pub status: Option<u16>,
    pub content_type: Option<String>,
    pub body: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}
