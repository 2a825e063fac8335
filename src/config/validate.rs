//! Completion and validation: turns the manifest as written into a
//! [`Config`], filling defaults, resolving paths against the manifest's
//! folder and loading the files it names. Every problem is collected, so one
//! run of `wasmgate check` lists them all.

use std::collections::HashSet;
use std::ops::{Range, RangeInclusive};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http::header::{CONTENT_TYPE, HeaderName};
use http::{HeaderMap, HeaderValue, StatusCode};
use regex::Regex;
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use toml::Spanned;

use super::manifest as m;
use super::*;
use super::{bounds, files};

/// Collects problems while completing; every check adds to it and goes on.
pub(super) struct Completer<'a> {
    pub(super) source: &'a str,
    base_dir: PathBuf,
    pub(super) problems: Vec<Problem>,
}

pub(super) fn complete(
    path: &Path,
    source: &str,
    manifest: m::Manifest,
) -> Result<Config, Vec<Problem>> {
    let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut c = Completer {
        source,
        base_dir,
        problems: Vec::new(),
    };
    let listen = c.listen(manifest.listen);
    let limits = c.limits(&manifest.limits);
    let hsts = manifest.hsts.and_then(|hsts| c.hsts(&hsts.directives));
    let cors_allowed_origins = manifest
        .cors
        .map(|cors| c.cors(&cors.allowed_origins))
        .unwrap_or_default();
    let hooks = c.hooks(&manifest.hooks);
    let stages = c.stages(
        manifest.authentication,
        manifest.authorization,
        manifest.admission,
        manifest.audit,
    );
    let flow_control = manifest
        .flow_control
        .and_then(|section| c.flow_control(&section, &limits));
    let servers = c.servers(manifest.servers);
    if stages.all_filters().next().is_some() {
        c.filter_instances_cover_in_flight(&manifest.limits, &limits);
    }
    match (listen, c.problems.is_empty()) {
        (Some(listen), true) => Ok(Config {
            source: path.to_owned(),
            listen,
            limits,
            hsts,
            cors_allowed_origins,
            hooks,
            stages,
            flow_control,
            servers,
        }),
        _ => Err(c.problems),
    }
}

impl Completer<'_> {
    pub(super) fn problem(
        &mut self,
        span: Option<Range<usize>>,
        key: &str,
        message: impl Into<String>,
    ) {
        self.problems.push(Problem {
            location: span.map(|span| Location::of_span(self.source, &span)),
            key: key.to_owned(),
            message: message.into(),
        });
    }

    pub(super) fn at<T>(&mut self, value: &Spanned<T>, key: &str, message: impl Into<String>) {
        self.problem(Some(value.span()), key, message);
    }

    pub(super) fn resolve(&self, file: &str) -> PathBuf {
        self.base_dir.join(file)
    }

    fn read_file(&mut self, file: &Spanned<String>, key: &str) -> Option<Vec<u8>> {
        let path = self.resolve(file.get_ref());
        match files::read_limited(&path, bounds::PEM_FILE) {
            Ok(bytes) => Some(bytes),
            Err(error) => {
                self.at(
                    file,
                    key,
                    format!("cannot read {}: {error}", path.display()),
                );
                None
            }
        }
    }

    // ---- [listen] ----

    fn listen(&mut self, listen: Spanned<m::Listen>) -> Option<Listen> {
        let listen = listen.into_inner();
        let has_tls = listen.tls.is_some();
        let address = match listen.address.get_ref().parse() {
            Ok(address) => Some(address),
            Err(_) => {
                let message = format!("{:?} is not an ip:port address", listen.address.get_ref());
                self.at(&listen.address, "listen.address", message);
                None
            }
        };
        let plaintext = listen.plaintext.as_ref().is_some_and(|p| *p.get_ref());
        let transport = match (listen.tls, plaintext) {
            (Some(tls), true) => {
                self.at(
                    &tls,
                    "listen.tls",
                    "conflicts with listen.plaintext = true: choose one",
                );
                None
            }
            (Some(tls), false) => self.tls(tls.get_ref()).map(|m| Transport::Tls(Arc::new(m))),
            (None, true) => Some(Transport::Plaintext),
            (None, false) => {
                let cert_dir = match &listen.cert_dir {
                    Some(dir) => self.resolve(dir.get_ref()),
                    None => default_cert_dir(),
                };
                self.cert_dir(&cert_dir, listen.cert_dir.as_ref())
                    .map(|()| Transport::SelfSigned { cert_dir })
            }
        };
        if let Some(dir) = &listen.cert_dir {
            if plaintext {
                self.at(
                    dir,
                    "listen.cert_dir",
                    "has no effect with listen.plaintext = true",
                );
            } else if has_tls {
                self.at(
                    dir,
                    "listen.cert_dir",
                    "has no effect with [listen.tls]: the certificate is given",
                );
            }
        }
        let trusted_proxies = self.trusted_proxies(&listen.trusted_proxies);
        Some(Listen {
            address: address?,
            transport: transport?,
            trusted_proxies,
        })
    }

    /// `listen.trusted_proxies`: each entry a CIDR (`10.0.0.0/8`) or a single
    /// address (`10.1.2.3`, that address alone).
    fn trusted_proxies(&mut self, entries: &[Spanned<String>]) -> TrustedProxies {
        let mut networks = Vec::with_capacity(entries.len());
        for entry in entries {
            let text = entry.get_ref().trim();
            let parsed = text
                .parse::<ipnet::IpNet>()
                .or_else(|_| text.parse::<std::net::IpAddr>().map(ipnet::IpNet::from));
            match parsed {
                Ok(network) => networks.push(network.trunc()),
                Err(_) => self.at(
                    entry,
                    "listen.trusted_proxies",
                    format!(
                        "{text:?} is neither a CIDR (\"10.0.0.0/8\", \"fd00::/8\") nor an IP address"
                    ),
                ),
            }
        }
        TrustedProxies::new(networks)
    }

    /// `run` creates `cert_dir` when it is missing and keeps the generated
    /// certificate and key there: it must be a folder, or be creatable
    /// under one, and what it holds under those names must be regular files.
    fn cert_dir(&mut self, dir: &Path, given: Option<&Spanned<String>>) -> Option<()> {
        let span = given.map(Spanned::span);
        let problem = match std::fs::metadata(dir) {
            Ok(metadata) if metadata.is_dir() => SELF_SIGNED_FILES
                .iter()
                .map(|name| dir.join(name))
                .filter(|file| file.exists())
                .find_map(|file| {
                    files::check_regular(&file, bounds::PEM_FILE)
                        .err()
                        .map(|error| format!("cannot use {}: {error}", file.display()))
                }),
            Ok(_) => Some(format!("{} is not a folder", dir.display())),
            Err(_) => dir
                .ancestors()
                .skip(1)
                .find(|ancestor| ancestor.exists())
                .filter(|ancestor| !ancestor.is_dir())
                .map(|ancestor| {
                    format!(
                        "{} cannot be created: {} is not a folder",
                        dir.display(),
                        ancestor.display()
                    )
                }),
        };
        match problem {
            Some(message) => {
                self.problem(span, "listen.cert_dir", message);
                None
            }
            None => Some(()),
        }
    }

    fn tls(&mut self, tls: &m::Tls) -> Option<TlsMaterial> {
        let cert_chain = self
            .read_file(&tls.cert, "listen.tls.cert")
            .and_then(|pem| {
                let certs: Vec<_> = CertificateDer::pem_slice_iter(&pem)
                    .filter_map(Result::ok)
                    .collect();
                if certs.is_empty() {
                    self.at(&tls.cert, "listen.tls.cert", "holds no PEM certificate");
                    return None;
                }
                Some(certs)
            });
        let key = self.read_file(&tls.key, "listen.tls.key").and_then(|pem| {
            match PrivateKeyDer::from_pem_slice(&pem) {
                Ok(key) => Some(key),
                Err(error) => {
                    self.at(
                        &tls.key,
                        "listen.tls.key",
                        format!("holds no usable PEM private key: {error}"),
                    );
                    None
                }
            }
        });
        let client_ca = match &tls.client_ca {
            Some(file) => Some(Arc::new(self.roots(file, "listen.tls.client_ca")?)),
            None => None,
        };
        Some(TlsMaterial {
            cert_chain: cert_chain?,
            key: key?,
            client_ca,
        })
    }

    /// A PEM bundle of CA certificates as a root store.
    fn roots(&mut self, file: &Spanned<String>, key: &str) -> Option<RootCertStore> {
        let pem = self.read_file(file, key)?;
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&pem).filter_map(Result::ok) {
            if let Err(error) = roots.add(cert) {
                self.at(
                    file,
                    key,
                    format!("holds a CA certificate that cannot be used: {error}"),
                );
                return None;
            }
        }
        if roots.is_empty() {
            self.at(file, key, "holds no PEM certificate");
            return None;
        }
        Some(roots)
    }

    // ---- [limits] ----

    fn limits(&mut self, limits: &m::Limits) -> Limits {
        let defaults = Limits::default();
        let request_timeout = self.duration(
            &limits.request_timeout,
            "limits.request_timeout",
            defaults.request_timeout,
            bounds::REQUEST_TIMEOUT,
        );
        Limits {
            max_requests_in_flight: self.count(
                &limits.max_requests_in_flight,
                "limits.max_requests_in_flight",
                defaults.max_requests_in_flight,
                bounds::REQUESTS_IN_FLIGHT,
            ),
            max_mutating_requests_in_flight: self.count(
                &limits.max_mutating_requests_in_flight,
                "limits.max_mutating_requests_in_flight",
                defaults.max_mutating_requests_in_flight,
                bounds::REQUESTS_IN_FLIGHT,
            ),
            request_timeout,
            max_request_body: self.size(
                &limits.max_request_body,
                "limits.max_request_body",
                defaults.max_request_body,
                bounds::MAX_REQUEST_BODY,
            ),
            max_header_bytes: self
                .size(
                    &limits.max_header_bytes,
                    "limits.max_header_bytes",
                    defaults.max_header_bytes as u64,
                    bounds::MAX_HEADER_BYTES,
                )
                .try_into()
                .unwrap_or(defaults.max_header_bytes),
            read_header_timeout: self.duration(
                &limits.read_header_timeout,
                "limits.read_header_timeout",
                defaults.read_header_timeout,
                bounds::READ_HEADER_TIMEOUT,
            ),
            idle_timeout: self.duration(
                &limits.idle_timeout,
                "limits.idle_timeout",
                defaults.idle_timeout,
                bounds::IDLE_TIMEOUT,
            ),
            shutdown_delay: self.duration(
                &limits.shutdown_delay,
                "limits.shutdown_delay",
                defaults.shutdown_delay,
                bounds::SHUTDOWN_DELAY,
            ),
            // kube drains for as long as a request may take.
            shutdown_timeout: self.duration(
                &limits.shutdown_timeout,
                "limits.shutdown_timeout",
                request_timeout,
                bounds::SHUTDOWN_TIMEOUT,
            ),
            filter_instances: self.count(
                &limits.filter_instances,
                "limits.filter_instances",
                defaults.filter_instances,
                bounds::FILTER_INSTANCES,
            ),
            filter_memory: self.size(
                &limits.filter_memory,
                "limits.filter_memory",
                defaults.filter_memory,
                bounds::FILTER_MEMORY_TOTAL,
            ),
        }
    }

    /// Every request max-in-flight admits holds at most one instance at a
    /// time (a request calls its filters one after another), so the
    /// instances must cover the two limits' sum. With either limit 0
    /// (unlimited) nothing bounds the demand, and calls beyond
    /// `filter_instances` wait, then get 429.
    fn filter_instances_cover_in_flight(&mut self, written: &m::Limits, limits: &Limits) {
        let in_flight = limits.max_requests_in_flight + limits.max_mutating_requests_in_flight;
        if limits.max_requests_in_flight == 0
            || limits.max_mutating_requests_in_flight == 0
            || in_flight <= limits.filter_instances
        {
            return;
        }
        let (span, key) = match (&written.filter_instances, &written.max_requests_in_flight) {
            (Some(given), _) => (Some(given.span()), "limits.filter_instances"),
            (None, Some(given)) => (Some(given.span()), "limits.max_requests_in_flight"),
            (None, None) => (
                written
                    .max_mutating_requests_in_flight
                    .as_ref()
                    .map(Spanned::span),
                "limits.max_mutating_requests_in_flight",
            ),
        };
        self.problem(
            span,
            key,
            format!(
                "max_requests_in_flight + max_mutating_requests_in_flight ({in_flight}) is more \
                 than filter_instances ({}): every request max-in-flight admits must be able \
                 to run the filter chain",
                limits.filter_instances
            ),
        );
    }

    /// A count within `range`; `default` when absent or out of range.
    pub(super) fn count(
        &mut self,
        value: &Option<Spanned<i64>>,
        key: &str,
        default: usize,
        range: RangeInclusive<i64>,
    ) -> usize {
        let Some(value) = value else { return default };
        let count = *value.get_ref();
        let problem = match *range.start() {
            0 if count < 0 => Some("must be 0 (unlimited) or a positive number".to_owned()),
            1 if count < 1 => Some("must be a positive number".to_owned()),
            _ => bounds::outside(count, &range, |n| n.to_string()),
        };
        match (problem, usize::try_from(count)) {
            (None, Ok(count)) => count,
            (problem, _) => {
                let message = problem.unwrap_or_else(|| "is out of range".to_owned());
                self.at(value, key, message);
                default
            }
        }
    }

    /// A duration within `range`; `default` when absent or out of range.
    pub(super) fn duration(
        &mut self,
        value: &Option<Spanned<String>>,
        key: &str,
        default: Duration,
        range: RangeInclusive<Duration>,
    ) -> Duration {
        let Some(value) = value else { return default };
        let problem = match parse_duration(value.get_ref()) {
            Ok(duration) if duration.is_zero() && !range.contains(&duration) => {
                Err("must be longer than 0s".to_owned())
            }
            Ok(duration) => match bounds::outside(duration, &range, bounds::show_duration) {
                None => Ok(duration),
                Some(problem) => Err(problem),
            },
            Err(message) => Err(message),
        };
        problem.unwrap_or_else(|message| {
            self.at(value, key, message);
            default
        })
    }

    /// A size within `range`; `default` when absent or out of range.
    pub(super) fn size(
        &mut self,
        value: &Option<Spanned<String>>,
        key: &str,
        default: u64,
        range: RangeInclusive<u64>,
    ) -> u64 {
        let Some(value) = value else { return default };
        let problem = match value.get_ref().parse::<bytesize::ByteSize>() {
            Ok(size) if size.as_u64() > 0 => {
                match bounds::outside(size.as_u64(), &range, bounds::show_size) {
                    None => Ok(size.as_u64()),
                    Some(problem) => Err(problem),
                }
            }
            _ => Err(format!(
                "{:?} is not a size like \"3MiB\", \"512KiB\" or \"1024\"",
                value.get_ref()
            )),
        };
        problem.unwrap_or_else(|message| {
            self.at(value, key, message);
            default
        })
    }

    // ---- [hsts], [cors] ----

    fn hsts(&mut self, directives: &[Spanned<String>]) -> Option<HeaderValue> {
        let mut has_max_age = false;
        for directive in directives {
            let text = directive.get_ref();
            if let Some(seconds) = text.strip_prefix("max-age=") {
                has_max_age = true;
                if seconds.parse::<u64>().is_err() {
                    self.at(
                        directive,
                        "hsts.directives",
                        format!("{text:?}: max-age must be a number of seconds"),
                    );
                }
            } else if text != "includeSubDomains" && text != "preload" {
                self.at(
                    directive,
                    "hsts.directives",
                    format!("{text:?} is not one of max-age=<seconds>, includeSubDomains, preload"),
                );
            }
        }
        if !has_max_age {
            self.problem(
                directives.first().map(Spanned::span),
                "hsts.directives",
                "must include max-age=<seconds>",
            );
            return None;
        }
        let joined: Vec<&str> = directives.iter().map(|d| d.get_ref().as_str()).collect();
        HeaderValue::from_str(&joined.join("; ")).ok()
    }

    fn cors(&mut self, origins: &[Spanned<String>]) -> Vec<Regex> {
        let mut compiled = Vec::new();
        for origin in origins {
            let pattern = origin.get_ref();
            // kube refuses unanchored patterns: "example.com" would also allow
            // "example.com.attacker.io".
            let anchored_start = pattern.starts_with('^') || pattern.starts_with("//");
            let anchored_end = pattern.ends_with('$') || pattern.ends_with("(:|$)");
            if !anchored_start || !anchored_end {
                self.at(
                    origin,
                    "cors.allowed_origins",
                    format!(
                        "{pattern:?} must be anchored: start with ^ or // and end with $ or (:|$)"
                    ),
                );
                continue;
            }
            match Regex::new(pattern) {
                Ok(regex) => compiled.push(regex),
                Err(error) => self.at(
                    origin,
                    "cors.allowed_origins",
                    format!("not a valid regular expression: {}", one_line(&error)),
                ),
            }
        }
        compiled
    }

    // ---- [[hooks]] ----

    fn hooks(&mut self, hooks: &[Spanned<m::Hook>]) -> Vec<Hook> {
        let mut seen = HashSet::new();
        let mut completed = Vec::new();
        for (index, hook) in hooks.iter().enumerate() {
            let key = format!("hooks[{index}]");
            let hook = hook.get_ref();
            let name = self.name(&hook.name, &format!("{key}.name"));
            let phase = match hook.phase.get_ref().as_str() {
                "post-start" => Some(HookPhase::PostStart),
                "pre-shutdown" => Some(HookPhase::PreShutdown),
                other => {
                    let message =
                        format!("{other:?} is not one of \"post-start\", \"pre-shutdown\"");
                    self.at(&hook.phase, &format!("{key}.phase"), message);
                    None
                }
            };
            if hook.command.get_ref().is_empty() {
                self.at(
                    &hook.command,
                    &format!("{key}.command"),
                    "must name a program to run",
                );
            }
            let timeout = self.duration(
                &hook.timeout,
                &format!("{key}.timeout"),
                Duration::from_secs(30),
                bounds::HOOK_TIMEOUT,
            );
            let (Some(name), Some(phase)) = (name, phase) else {
                continue;
            };
            if !seen.insert((name.clone(), phase)) {
                self.at(
                    &hook.name,
                    &format!("{key}.name"),
                    format!(
                        "{:?} is used by another hook of the same phase",
                        name.as_str()
                    ),
                );
            }
            let working_dir = self.resolve(".");
            completed.push(Hook {
                name,
                phase,
                command: hook.command.get_ref().clone(),
                working_dir,
                timeout,
            });
        }
        completed
    }

    pub(super) fn name(&mut self, name: &Spanned<String>, key: &str) -> Option<Name> {
        Name::parse(name.get_ref())
            .map_err(|message| self.at(name, key, message))
            .ok()
    }

    // ---- [[servers]] ----

    fn servers(&mut self, servers: Vec<Spanned<m::Server>>) -> Vec<Server> {
        if servers.is_empty() {
            self.problem(None, "servers", "at least one [[servers]] table is needed");
        }
        let mut names = HashSet::new();
        let mut completed = Vec::new();
        for (index, server) in servers.into_iter().enumerate() {
            let key = format!("servers[{index}]");
            let server = server.into_inner();
            let name = self.name(&server.name, &format!("{key}.name"));
            if let Some(name) = &name
                && !names.insert(name.clone())
            {
                self.at(
                    &server.name,
                    &format!("{key}.name"),
                    format!("{:?} names another server too", name.as_str()),
                );
            }
            let routes = self.routes(server.routes, &key);
            if let Some(name) = name {
                completed.push(Server { name, routes });
            }
        }
        completed
    }

    fn routes(&mut self, routes: Vec<Spanned<m::Route>>, server_key: &str) -> Vec<Route> {
        let mut matchers = HashSet::new();
        let mut completed = Vec::new();
        for (index, route) in routes.into_iter().enumerate() {
            let key = format!("{server_key}.routes[{index}]");
            let span = route.span();
            let route = route.into_inner();
            let matcher = self.route_match(&route, &key, span.clone());
            if let Some(matcher) = &matcher
                && !matchers.insert(matcher.clone())
            {
                self.problem(
                    Some(span.clone()),
                    &key,
                    format!(
                        "{} is matched by an earlier route of this server",
                        describe(matcher)
                    ),
                );
            }
            let escaped_slashes = self.escaped_slashes(&route, &key);
            let handler = self.route_handler(route, &key, span);
            if let (Some(matcher), Some(handler)) = (matcher, handler) {
                completed.push(Route {
                    matcher,
                    handler,
                    escaped_slashes,
                });
            }
        }
        completed
    }

    fn route_match(
        &mut self,
        route: &m::Route,
        key: &str,
        span: Range<usize>,
    ) -> Option<RouteMatch> {
        let given = [&route.api, &route.path, &route.prefix];
        if given.iter().filter(|v| v.is_some()).count() != 1 {
            self.problem(Some(span), key, "needs exactly one of api, path or prefix");
            return None;
        }
        if let Some(api) = &route.api {
            let root = api.get_ref();
            return match validate_api_root(root) {
                Ok(()) => Some(RouteMatch::Api(root.clone())),
                Err(message) => {
                    self.at(api, &format!("{key}.api"), message);
                    None
                }
            };
        }
        let (value, field) = match (&route.path, &route.prefix) {
            (Some(path), _) => (path, "path"),
            (None, Some(prefix)) => (prefix, "prefix"),
            (None, None) => return None,
        };
        let text = value.get_ref();
        if !text.starts_with('/') || text.contains(['?', '#']) {
            self.at(
                value,
                &format!("{key}.{field}"),
                format!("{text:?} must start with / and have no query"),
            );
            return None;
        }
        if let Some(message) = non_canonical(text) {
            self.at(value, &format!("{key}.{field}"), message);
            return None;
        }
        if reserved_path(text) {
            let message = format!(
                "{text:?} is served by the gateway itself (health, metrics, reload and discovery)"
            );
            self.at(value, &format!("{key}.{field}"), message);
            return None;
        }
        Some(match field {
            "path" => RouteMatch::Exact(text.clone()),
            _ => RouteMatch::Prefix(text.clone()),
        })
    }

    fn escaped_slashes(&mut self, route: &m::Route, key: &str) -> EscapedSlashes {
        let Some(value) = &route.escaped_slashes else {
            return EscapedSlashes::default();
        };
        match value.get_ref().as_str() {
            "reject" => EscapedSlashes::Reject,
            "keep" => EscapedSlashes::Keep,
            other => {
                let message = format!("{other:?} must be \"reject\" or \"keep\"");
                self.at(value, &format!("{key}.escaped_slashes"), message);
                EscapedSlashes::default()
            }
        }
    }

    fn route_handler(
        &mut self,
        route: m::Route,
        key: &str,
        span: Range<usize>,
    ) -> Option<RouteHandler> {
        match (route.upstream, route.static_response) {
            (Some(upstream), None) => self
                .upstream(upstream, &format!("{key}.upstream"))
                .map(RouteHandler::Upstream),
            (None, Some(fixed)) => self
                .static_response(fixed, &format!("{key}.static"))
                .map(RouteHandler::Static),
            _ => {
                self.problem(Some(span), key, "needs exactly one of upstream or static");
                None
            }
        }
    }

    fn upstream(&mut self, upstream: Spanned<toml::Value>, key: &str) -> Option<Upstream> {
        let span = upstream.span();
        let (url, ca, timeout) = match upstream.into_inner() {
            toml::Value::String(url) => (url, None, None),
            toml::Value::Table(table) => match table.try_into::<m::UpstreamTable>() {
                Ok(table) => (table.url, table.ca, table.timeout),
                Err(error) => {
                    self.problem(Some(span), key, error.message().trim().to_owned());
                    return None;
                }
            },
            _ => {
                self.problem(
                    Some(span),
                    key,
                    "must be a URL string or a table { url, ca, timeout }",
                );
                return None;
            }
        };
        let spanned = |text: String| Spanned::new(span.clone(), text);
        let uri = match url.parse::<http::Uri>() {
            Ok(uri)
                if matches!(uri.scheme_str(), Some("http" | "https"))
                    && uri.authority().is_some() =>
            {
                if uri.query().is_some() {
                    self.problem(
                        Some(span.clone()),
                        key,
                        format!("{url:?} must not have a query"),
                    );
                }
                if let Some(message) = non_canonical(uri.path()) {
                    self.problem(Some(span.clone()), key, format!("{url:?}: {message}"));
                }
                Some(uri)
            }
            _ => {
                self.problem(
                    Some(span.clone()),
                    key,
                    format!("{url:?} is not an http:// or https:// URL"),
                );
                None
            }
        };
        let ca = match ca {
            Some(file) => Some(Arc::new(self.roots(&spanned(file), &format!("{key}.ca"))?)),
            None => None,
        };
        if let Some(uri) = &uri
            && uri.scheme_str() == Some("https")
            && ca.is_none()
        {
            self.problem(
                Some(span.clone()),
                key,
                "an https upstream needs `ca`, the CA bundle to verify it with",
            );
        }
        let timeout = timeout.map(|text| {
            self.duration(
                &Some(spanned(text)),
                &format!("{key}.timeout"),
                Duration::ZERO,
                bounds::UPSTREAM_TIMEOUT,
            )
        });
        Some(Upstream {
            url: uri?,
            ca,
            timeout,
        })
    }

    fn static_response(&mut self, fixed: Spanned<m::Static>, key: &str) -> Option<StaticResponse> {
        let span = fixed.span();
        let fixed = fixed.into_inner();
        let status = match StatusCode::from_u16(fixed.status.unwrap_or(200)) {
            Ok(status) => status,
            Err(_) => {
                self.problem(
                    Some(span.clone()),
                    &format!("{key}.status"),
                    "must be an HTTP status from 100 to 999",
                );
                StatusCode::OK
            }
        };
        let mut headers = HeaderMap::new();
        let content_type = fixed
            .content_type
            .unwrap_or_else(|| "text/plain; charset=utf-8".to_owned());
        match HeaderValue::from_str(&content_type) {
            Ok(value) => {
                headers.insert(CONTENT_TYPE, value);
            }
            Err(_) => self.problem(
                Some(span.clone()),
                &format!("{key}.content_type"),
                "is not a valid header value",
            ),
        }
        for (name, value) in &fixed.headers {
            match (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                (Ok(name), Ok(value)) => {
                    headers.insert(name, value);
                }
                _ => self.problem(
                    Some(span.clone()),
                    &format!("{key}.headers"),
                    format!("{name:?} = {value:?} is not a valid header"),
                ),
            }
        }
        Some(StaticResponse {
            status,
            headers,
            body: fixed.body.unwrap_or_default().into(),
        })
    }
}

/// A route's matcher as the manifest writes it: `path "/version"`.
fn describe(matcher: &RouteMatch) -> String {
    match matcher {
        RouteMatch::Api(root) => format!("api {root:?}"),
        RouteMatch::Exact(path) => format!("path {path:?}"),
        RouteMatch::Prefix(prefix) => format!("prefix {prefix:?}"),
    }
}

/// A regex syntax error on one line: its last line (`unclosed group`),
/// without the pattern drawn above it.
fn one_line(error: &regex::Error) -> String {
    let text = error.to_string();
    let last = text.lines().last().unwrap_or_default();
    last.strip_prefix("error: ").unwrap_or(last).to_owned()
}

/// `60s`, `1m30s`, `500ms`, `1h`: Go-style durations, as kube's flags take.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|_| format!("{text:?} is not a duration like \"60s\", \"1m30s\" or \"500ms\""))
}

/// The API roots kube's director recognises: `/api`, `/api/<version>`,
/// `/apis`, `/apis/<group>`, `/apis/<group>/<version>`.
fn validate_api_root(root: &str) -> Result<(), String> {
    let segments: Vec<&str> = root.strip_prefix('/').unwrap_or("").split('/').collect();
    let well_formed = segments.iter().all(|s| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
    });
    let shape_ok = matches!(
        segments.as_slice(),
        ["api"] | ["apis"] | ["api", _] | ["apis", _] | ["apis", _, _]
    );
    if root.starts_with('/') && well_formed && shape_ok {
        Ok(())
    } else {
        Err(format!(
            "{root:?} is not an API root: use /api, /api/<version>, /apis, /apis/<group> or /apis/<group>/<version>"
        ))
    }
}

/// Why `path` (a route's, or an upstream's base path) is not in the
/// canonical form requests are matched and forwarded in, if it is not.
fn non_canonical(path: &str) -> Option<String> {
    match crate::request_target::canonicalize(path) {
        Err(error) => Some(format!("{path:?}: {error}")),
        Ok(canonical) if canonical.escaped_slashes => {
            Some(format!("{path:?} holds an escaped \"/\" or \"\\\""))
        }
        Ok(canonical) if canonical.path != path => Some(format!(
            "{path:?} is not a canonical path (requests are matched and forwarded as {:?})",
            canonical.path
        )),
        Ok(_) => None,
    }
}

/// Paths the gateway serves itself; a route may not take them.
fn reserved_path(path: &str) -> bool {
    path == "/metrics"
        || path == "/debug/reload"
        || path.starts_with(crate::flow_control::DEBUG_PREFIX)
        || ["/healthz", "/livez", "/readyz"]
            .iter()
            .any(|endpoint| path == *endpoint || path.starts_with(&format!("{endpoint}/")))
}

/// Where a generated serving certificate is kept when the manifest does not
/// say: `$XDG_CACHE_HOME/wasmgate/certs`, else `~/.cache/wasmgate/certs`.
fn default_cert_dir() -> PathBuf {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    cache.join("wasmgate").join("certs")
}
