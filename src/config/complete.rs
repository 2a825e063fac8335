//! Completion: turns the manifest as written into a [`Config`], section by
//! section (each section's file completes its own table), then checks what
//! spans sections. The [`Completer`] collects every problem and goes on, so
//! one run of `wasmgate check` lists them all; it also holds what every
//! section reads values with: paths resolved against the manifest's folder,
//! files read within bounds, counts, durations, sizes and names.

use std::ops::{Range, RangeInclusive};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustls::RootCertStore;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use toml::Spanned;

use super::manifest as m;
use super::{Config, Limits, Location, Name, Problem};
use super::{bounds, files};

/// Collects problems while completing; every check adds to it and goes on.
pub(super) struct Completer<'a> {
    pub(super) source: &'a str,
    base_dir: PathBuf,
    pub(super) problems: Vec<Problem>,
    /// Every file read while completing ([`Completer::read_file`]).
    read: Vec<PathBuf>,
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
        read: Vec::new(),
    };
    let listen = c.listen(manifest.listen);
    let limits = c.limits(&manifest.limits);
    let hsts = manifest.hsts.and_then(|hsts| c.hsts(&hsts.directives));
    let cors_allowed_origins = manifest
        .cors
        .map(|cors| c.cors(&cors.allowed_origins))
        .unwrap_or_default();
    let hooks = c.hooks(&manifest.hooks);
    let access_log = c.access_log(manifest.access_log);
    let stages = c.stages(
        manifest.authentication,
        manifest.authorization,
        manifest.admission,
        manifest.audit,
    );
    let flow_control = manifest
        .flow_control
        .and_then(|section| c.flow_control(&section, &limits));
    let tracing = manifest.tracing.and_then(|section| c.tracing(&section));
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
            access_log,
            hooks,
            stages,
            flow_control,
            tracing,
            servers,
            files_read: c.read,
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

    pub(super) fn read_file(&mut self, file: &Spanned<String>, key: &str) -> Option<Vec<u8>> {
        let path = self.resolve(file.get_ref());
        match files::read_limited(&path, bounds::PEM_FILE) {
            Ok(bytes) => {
                self.read.push(path);
                Some(bytes)
            }
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

    /// A PEM bundle of CA certificates as a root store.
    pub(super) fn roots(&mut self, file: &Spanned<String>, key: &str) -> Option<RootCertStore> {
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

    pub(super) fn name(&mut self, name: &Spanned<String>, key: &str) -> Option<Name> {
        Name::parse(name.get_ref())
            .map_err(|message| self.at(name, key, message))
            .ok()
    }
}

/// `60s`, `1m30s`, `500ms`, `1h`: Go-style durations, as kube's flags take.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|_| format!("{text:?} is not a duration like \"60s\", \"1m30s\" or \"500ms\""))
}
