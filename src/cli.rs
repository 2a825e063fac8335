//! What the `wasmgate` commands print and read beyond their flags: `check`'s
//! summary of a manifest, and the request `try` builds from its arguments.
//! `main.rs` keeps the flags (clap), logging, the runtime and the signals;
//! `scaffold` and `try_request` are the `new-filter` and `try` commands' own
//! work.

use std::path::{Path, PathBuf};

use crate::config::stages::{
    AuditMode, FailurePolicy, FilterSpec, Isolation, Mode, ReadField, RequestHeaders,
};
use crate::config::{Config, HookPhase, Route, RouteHandler, RouteMatch, Transport, describe};
use crate::director::{ChainTable, Routes};
use crate::try_request::Trial;

/// `wasmgate check`'s one-screen picture of what a manifest builds, with
/// the steps of the chain `chain::build` installed for it.
pub fn summary(config: &Config, steps: &[&str]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let transport = match &config.listen.transport {
        Transport::Plaintext => "plaintext".to_owned(),
        Transport::Tls(material) if material.client_ca.is_some() => {
            "TLS, client certificates verified".to_owned()
        }
        Transport::Tls(_) => "TLS".to_owned(),
        Transport::SelfSigned { cert_dir } => {
            format!("TLS, self-signed certificate in {}", cert_dir.display())
        }
    };
    let _ = writeln!(out, "{}: valid", config.source.display());
    let _ = writeln!(out, "listen: {} ({transport})", config.listen.address);
    let stages = &config.stages;
    let _ = writeln!(out, "chain: {}", steps.join(", "));
    if let Some(tracing) = &config.tracing {
        let _ = writeln!(
            out,
            "tracing: OTLP/gRPC to {}, {} per million sampled (a client's traceparent followed for system:masters and system:monitoring, else linked)",
            tracing.endpoint, tracing.sampling_rate_per_million
        );
    }
    let anonymous = if stages.authentication.anonymous {
        "unrecognised -> system:anonymous"
    } else {
        "unrecognised -> 401"
    };
    stage_summary(
        &mut out,
        "authentication",
        &stages.authentication.filters,
        if stages.authentication.filters.is_empty() {
            "everyone is system:anonymous"
        } else {
            anonymous
        },
    );
    for filter in &stages.authentication.filters {
        if keys_cache_on_every_header(filter) {
            let _ = writeln!(
                out,
                "    note: {:?} caches by every request header (it lists no `headers`): \
                 a header that changes per request (traceparent, X-Request-Id) makes every lookup a miss",
                filter.name.as_str()
            );
        }
        if keys_cache_on_the_client_address(filter) {
            let _ = writeln!(
                out,
                "    note: {:?} caches by the client's address (its `reads` gives it `remote-addr`): \
                 each connection's first request calls the filter; `reads = []` keys by the headers alone",
                filter.name.as_str()
            );
        }
    }
    let audit_mode = match stages.audit.mode {
        AuditMode::Blocking => "blocking",
        AuditMode::Batch => "batch",
    };
    stage_summary(
        &mut out,
        "audit",
        &stages.audit.filters,
        &format!(
            "{audit_mode} mode, {} policy rules",
            stages.audit.policy.len()
        ),
    );
    let authz_default = if stages.authorization.filters.is_empty() {
        "everything allowed"
    } else {
        "all no-opinion -> 403"
    };
    stage_summary(
        &mut out,
        "authorization",
        &stages.authorization.filters,
        authz_default,
    );
    stage_summary(
        &mut out,
        "admission (mutating)",
        &stages.admission.mutating,
        "",
    );
    stage_summary(
        &mut out,
        "admission (validating)",
        &stages.admission.validating,
        "",
    );
    let chain = ChainTable::new(config.servers.iter().enumerate().map(|(server, s)| {
        let mut routes = Routes::default();
        for (index, route) in s.routes.iter().enumerate() {
            routes.add(&route.matcher, (server, index));
        }
        routes
    }));
    for (index, server) in config.servers.iter().enumerate() {
        let _ = writeln!(
            out,
            "server {} {:?}{}",
            index + 1,
            server.name.as_str(),
            if index == 0 {
                " (wrapped by the chain)"
            } else {
                ""
            }
        );
        for route in &server.routes {
            let matcher = match &route.matcher {
                RouteMatch::Api(root) => format!("api    {root}"),
                RouteMatch::Exact(path) => format!("path   {path}"),
                RouteMatch::Prefix(prefix) => format!("prefix {prefix}"),
            };
            let target = match &route.handler {
                RouteHandler::Upstream(upstream) => format!("upstream {}", upstream.url),
                RouteHandler::Static(fixed) => format!("static {}", fixed.status.as_u16()),
            };
            let _ = writeln!(out, "  {matcher:<40} -> {target}");
            if let Some(note) = taken_by_an_earlier_server(config, &chain, index, route) {
                let _ = writeln!(out, "    note: {note}");
            }
        }
    }
    let _ = writeln!(out, "then: 404 NotFound");
    for hook in &config.hooks {
        let phase = match hook.phase {
            HookPhase::PostStart => "post-start",
            HookPhase::PreShutdown => "pre-shutdown",
        };
        let _ = writeln!(
            out,
            "hook {:?} ({phase}): {}",
            hook.name.as_str(),
            hook.command.join(" ")
        );
    }
    out
}

/// Why an `api` route of server `server` is not listed in discovery, when
/// the delegation chain sends its root to a route of an earlier server
/// ([`ChainTable`], which discovery asks too): that route takes the root
/// and, unless it is an exact path, every path below it, so the group
/// version's requests never reach this one.
fn taken_by_an_earlier_server(
    config: &Config,
    chain: &ChainTable<(usize, usize)>,
    server: usize,
    route: &Route,
) -> Option<String> {
    let RouteMatch::Api(root) = &route.matcher else {
        return None;
    };
    let &(earlier, taker) = chain.route(root)?;
    if earlier >= server {
        return None;
    }
    let taking = &config.servers[earlier];
    let taker = &taking.routes.get(taker)?.matcher;
    let (what, takes) = match taker {
        RouteMatch::Exact(_) => ("is not listed in discovery", "takes its root"),
        RouteMatch::Api(_) | RouteMatch::Prefix(_) => (
            "is never reached nor listed in discovery",
            "takes every path of it",
        ),
    };
    Some(format!(
        "{} {what}: server {} {:?}'s {} {takes} first (the delegation chain tries server {} before server {})",
        describe(&route.matcher),
        earlier + 1,
        taking.name.as_str(),
        describe(taker),
        earlier + 1,
        server + 1,
    ))
}

fn stage_summary(out: &mut String, stage: &str, filters: &[FilterSpec], note: &str) {
    use std::fmt::Write as _;
    let names: Vec<String> = filters.iter().map(describe_filter).collect();
    let listed = if names.is_empty() {
        "-".to_owned()
    } else {
        names.join(", ")
    };
    let note = if note.is_empty() {
        String::new()
    } else {
        format!("  [{note}]")
    };
    let _ = writeln!(out, "  {stage:<24} {listed}{note}");
}

/// An authenticator's decision cache keys by the headers it is given
/// (`wasm::cache_key`): with no `headers` list, every one of them.
fn keys_cache_on_every_header(filter: &FilterSpec) -> bool {
    filter.cache.is_some() && matches!(filter.headers, RequestHeaders::All)
}

/// An authenticator's decision cache keys by the fields it is given
/// (`wasm::cache_key`): with `remote-addr` (with no `reads`, too), by the
/// client's address and port.
fn keys_cache_on_the_client_address(filter: &FilterSpec) -> bool {
    filter.cache.is_some() && filter.reads.includes(ReadField::RemoteAddr)
}

/// A filter as the manifest would spell it.
fn describe_filter(filter: &FilterSpec) -> String {
    let isolation = match filter.isolation {
        Isolation::PerRequest => "per-request",
        Isolation::Pooled => "pooled",
    };
    let policy = match filter.failure_policy {
        FailurePolicy::FailClosed => "fail-closed",
        FailurePolicy::FailOpen => "fail-open",
    };
    let monitor = if filter.mode == Mode::Monitor {
        ", monitor"
    } else {
        ""
    };
    format!(
        "{} ({isolation}, {policy}{monitor}, timeout {})",
        filter.name,
        humantime::format_duration(filter.timeout)
    )
}

/// Why `wasmgate try`'s arguments do not make a request.
#[derive(Debug, thiserror::Error)]
pub enum TrialArgumentError {
    /// `--method` is not an HTTP method.
    #[error("{0:?} is not an HTTP method")]
    Method(String),
    /// A `--header` has no `:` between name and value.
    #[error("{0:?} is not a `Name: value` header")]
    Header(String),
    /// A `--header`'s name is not a valid header name.
    #[error("{0:?} is not a header name")]
    HeaderName(String),
    /// A `--header`'s value is not a valid header value.
    #[error("{0:?} is not a header value")]
    HeaderValue(String),
    /// The `--body` file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Body {
        /// The file named by `--body`.
        path: PathBuf,
        /// Why it could not be read.
        #[source]
        source: std::io::Error,
    },
}

/// The request `wasmgate try` runs, from its arguments: the method (any
/// case), `Name: value` headers, and the body read from a file.
pub fn trial(
    method: &str,
    path: String,
    headers: &[String],
    body: Option<&Path>,
) -> Result<Trial, TrialArgumentError> {
    let method = http::Method::from_bytes(method.to_ascii_uppercase().as_bytes())
        .map_err(|_| TrialArgumentError::Method(method.to_owned()))?;
    let headers = headers
        .iter()
        .map(|header| {
            let (name, value) = header
                .split_once(':')
                .ok_or_else(|| TrialArgumentError::Header(header.clone()))?;
            let name = http::HeaderName::from_bytes(name.trim().as_bytes())
                .map_err(|_| TrialArgumentError::HeaderName(name.to_owned()))?;
            let value = http::HeaderValue::from_str(value.trim())
                .map_err(|_| TrialArgumentError::HeaderValue(value.to_owned()))?;
            Ok((name, value))
        })
        .collect::<Result<Vec<_>, TrialArgumentError>>()?;
    let body = match body {
        Some(file) => std::fs::read(file).map_err(|source| TrialArgumentError::Body {
            path: file.to_owned(),
            source,
        })?,
        None => Vec::new(),
    };
    Ok(Trial {
        method,
        path,
        headers,
        body,
    })
}
