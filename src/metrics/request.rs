//! kube's request metrics, under kube's names, labels and buckets
//! (`staging/src/k8s.io/apiserver/pkg/endpoints/metrics/metrics.go`):
//! `apiserver_request_total`, `apiserver_request_duration_seconds`,
//! `apiserver_response_sizes`, `apiserver_current_inflight_requests`,
//! `apiserver_longrunning_requests` and `apiserver_request_terminations_total`,
//! and `apiserver_request_filter_duration_seconds` of kube's `filterlatency`
//! (`staging/src/k8s.io/apiserver/pkg/endpoints/filterlatency/filterlatency.go`).
//!
//! Label values are bounded as kube bounds them: a verb outside kube's
//! `validRequestMethods` is `other`, the scope is one of four values, and the
//! code is an HTTP status. kube has a series only for the resources it
//! serves; a gateway forwards whatever paths its routes match, so here a
//! resource (its group, version, resource and subresource, or a
//! non-resource path) gets its own series once something answered it with
//! another code than 404, for at most [`MAX_RESOURCES`] of them; every other
//! request is counted under [`OTHER`].

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

use http::Method;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::body::Request;
use crate::request_info::RequestInfo;

/// How many resources (or non-resource paths) get series of their own.
pub(crate) const MAX_RESOURCES: usize = 500;

/// The label value of everything folded: unknown verbs, and the resources
/// past [`MAX_RESOURCES`] or never answered with anything but a 404.
pub(crate) const OTHER: &str = "other";

/// kube's `APIServerComponent`.
const COMPONENT: &str = "apiserver";

/// kube's `requestLatencies` buckets.
const DURATION_BUCKETS: [f64; 23] = [
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
    10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];

/// kube's `requestFilterDuration` buckets.
const FILTER_DURATION_BUCKETS: [f64; 13] = [
    0.0001, 0.0003, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 5.0, 10.0, 15.0, 30.0,
];

/// What a resource is called in the labels, shared by its series.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct Resource {
    pub group: Arc<str>,
    pub version: Arc<str>,
    pub resource: Arc<str>,
    /// The subresource, or a non-resource request's path (kube's `Record`).
    pub subresource: Arc<str>,
}

/// The labels of `apiserver_request_duration_seconds` (and, without
/// `dry_run`, of the response sizes and long-running requests).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RequestLabels {
    pub verb: &'static str,
    pub dry_run: &'static str,
    pub group: Arc<str>,
    pub version: Arc<str>,
    pub resource: Arc<str>,
    pub subresource: Arc<str>,
    pub scope: &'static str,
    pub component: &'static str,
}

/// The labels of `apiserver_request_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CodeLabels {
    #[prometheus(flatten)]
    pub request: RequestLabels,
    pub code: u16,
}

/// The labels of `apiserver_request_terminations_total`: kube's have no
/// `dry_run`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct TerminationLabels {
    #[prometheus(flatten)]
    pub request: SizeLabels,
    pub code: u16,
}

/// The labels of the response sizes and the long-running requests: the
/// request's without `dry_run`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct SizeLabels {
    pub verb: &'static str,
    pub group: Arc<str>,
    pub version: Arc<str>,
    pub resource: Arc<str>,
    pub subresource: Arc<str>,
    pub scope: &'static str,
    pub component: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RequestKind {
    /// `readOnly` or `mutating` (kube's `ReadOnlyKind`, `MutatingKind`).
    pub request_kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct FilterLabel {
    pub filter: &'static str,
}

type HistogramFamily<S> = Family<S, Histogram, fn() -> Histogram>;

pub(crate) struct RequestMetrics {
    total: Family<CodeLabels, Counter>,
    duration: HistogramFamily<RequestLabels>,
    sizes: HistogramFamily<SizeLabels>,
    terminations: Family<TerminationLabels, Counter>,
    longrunning: Family<SizeLabels, Gauge>,
    /// Indexed by [`RequestMetrics::kind_index`].
    inflight: [Gauge; 2],
    inflight_family: Family<RequestKind, Gauge>,
    filter_duration: HistogramFamily<FilterLabel>,
    resources: ResourceNames,
    /// Each label set's series, found with one lookup a request.
    series: RwLock<HashMap<RequestLabels, Arc<Series>>>,
}

/// The series of one label set, fetched from the families once.
struct Series {
    duration: Histogram,
    /// Read requests only.
    sizes: Option<Histogram>,
    /// `apiserver_request_total` by code: the few this label set is
    /// answered with.
    codes: RwLock<Vec<(u16, Counter)>>,
}

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

fn size_histogram() -> Histogram {
    // kube's: 1 kB to 10^9 bytes.
    Histogram::new(exponential_buckets(1000.0, 10.0, 7))
}

fn filter_histogram() -> Histogram {
    Histogram::new(FILTER_DURATION_BUCKETS)
}

impl RequestMetrics {
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let metrics = RequestMetrics {
            total: Family::default(),
            duration: Family::new_with_constructor(duration_histogram),
            sizes: Family::new_with_constructor(size_histogram),
            terminations: Family::default(),
            longrunning: Family::default(),
            inflight: [Gauge::default(), Gauge::default()],
            inflight_family: Family::default(),
            filter_duration: Family::new_with_constructor(filter_histogram),
            resources: ResourceNames::default(),
            series: RwLock::default(),
        };
        let mut metrics = metrics;
        // The family holds the gauges requests move, fetched once here so
        // a request touches no labels.
        metrics.inflight = ["readOnly", "mutating"].map(|request_kind| {
            metrics
                .inflight_family
                .get_or_create(&RequestKind { request_kind })
                .clone()
        });
        registry.register(
            "apiserver_request",
            "Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code",
            metrics.total.clone(),
        );
        registry.register(
            "apiserver_request_duration_seconds",
            "Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component",
            metrics.duration.clone(),
        );
        registry.register(
            "apiserver_response_sizes",
            "Response size distribution in bytes for each group, version, verb, resource, subresource, scope and component",
            metrics.sizes.clone(),
        );
        registry.register(
            "apiserver_request_terminations",
            "Number of requests which apiserver terminated in self-defense",
            metrics.terminations.clone(),
        );
        registry.register(
            "apiserver_longrunning_requests",
            "Gauge of all active long-running apiserver requests broken out by verb, group, version, resource, scope and component. Not all requests are tracked this way",
            metrics.longrunning.clone(),
        );
        registry.register(
            "apiserver_current_inflight_requests",
            "Number of requests currently in flight in this apiserver, per request kind (long-running requests are not counted)",
            metrics.inflight_family.clone(),
        );
        registry.register(
            "apiserver_request_filter_duration_seconds",
            "Request filter latency distribution in seconds, for each filter type",
            metrics.filter_duration.clone(),
        );
        metrics
    }

    /// The histogram of one native step of the chain (kube's filter names).
    pub(crate) fn filter_duration(&self, filter: &'static str) -> Histogram {
        self.filter_duration
            .get_or_create(&FilterLabel { filter })
            .clone()
    }

    /// Starts counting a request in flight, or as long-running when
    /// `long_running` ([`crate::request_info::is_long_running`]: watches,
    /// upgrades, ...); the guard stops when dropped.
    pub(crate) fn start(
        &self,
        info: &RequestInfo,
        long_running: bool,
        labels: &RequestLabels,
    ) -> InFlight {
        let long_running = long_running.then(|| {
            let labels = self.size_labels(labels);
            let gauge = self.longrunning.get_or_create(&labels).clone();
            gauge.inc();
            gauge
        });
        let inflight = match long_running {
            Some(_) => None,
            None => {
                let gauge = &self.inflight[usize::from(!info.is_read_only())];
                gauge.inc();
                Some(gauge.clone())
            }
        };
        InFlight {
            inflight,
            long_running,
        }
    }

    /// The labels a request is counted under; its content type tells an
    /// apply patch from the others.
    pub(crate) fn request_labels(&self, info: &RequestInfo, request: &Request) -> Labeled {
        let (resource, unknown) = match self.resources.known(info) {
            Ok(resource) => (resource, None),
            Err(unknown) => (ResourceNames::folded(), Some(unknown)),
        };
        let content_type = request
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("");
        let labels = RequestLabels {
            verb: reported_verb(info, request.method(), content_type),
            dry_run: dry_run(request.uri().query()),
            group: resource.group,
            version: resource.version,
            resource: resource.resource,
            subresource: resource.subresource,
            scope: scope(info),
            component: COMPONENT,
        };
        Labeled { labels, unknown }
    }

    /// Records a finished request (kube's `MonitorRequest`). A resource
    /// answered with another code than 404 gets series of its own from then
    /// on; this request, if it was the first, is already counted under them.
    pub(crate) fn record(&self, record: Finished) {
        let mut labels = record.labeled.labels;
        let admitted = match &record.labeled.unknown {
            Some(unknown) if record.code != 404 => self.resources.admit(unknown),
            _ => None,
        };
        if let Some(resource) = admitted {
            labels.group = resource.group;
            labels.version = resource.version;
            labels.resource = resource.resource;
            labels.subresource = resource.subresource;
        }
        let series = self.series_of(&labels);
        series.duration.observe(record.elapsed_seconds);
        if let Some(sizes) = &series.sizes {
            sizes.observe(record.bytes as f64);
        }
        let counted = series.codes.read().ok().and_then(|codes| {
            let found = codes.iter().find(|(code, _)| *code == record.code);
            found.map(|(_, counter)| counter.inc())
        });
        let coded = CodeLabels {
            request: labels,
            code: record.code,
        };
        if counted.is_none() {
            let counter = self.total.get_or_create(&coded).clone();
            counter.inc();
            if let Ok(mut codes) = series.codes.write() {
                codes.push((record.code, counter));
            }
        }
        if record.terminated {
            let terminated = TerminationLabels {
                request: self.size_labels(&coded.request),
                code: record.code,
            };
            self.terminations.get_or_create(&terminated).inc();
        }
    }

    fn series_of(&self, labels: &RequestLabels) -> Arc<Series> {
        if let Some(series) = self
            .series
            .read()
            .ok()
            .and_then(|all| all.get(labels).cloned())
        {
            return series;
        }
        let series = Arc::new(Series {
            duration: self.duration.get_or_create(labels).clone(),
            // kube: "We are only interested in response sizes of read requests."
            sizes: matches!(labels.verb, "GET" | "LIST")
                .then(|| self.sizes.get_or_create(&self.size_labels(labels)).clone()),
            codes: RwLock::default(),
        });
        if let Ok(mut all) = self.series.write() {
            all.insert(labels.clone(), series.clone());
        }
        series
    }

    fn size_labels(&self, labels: &RequestLabels) -> SizeLabels {
        SizeLabels {
            verb: labels.verb,
            group: labels.group.clone(),
            version: labels.version.clone(),
            resource: labels.resource.clone(),
            subresource: labels.subresource.clone(),
            scope: labels.scope,
            component: labels.component,
        }
    }
}

/// A request's labels, and its resource's names while that has no series.
pub(crate) struct Labeled {
    pub labels: RequestLabels,
    unknown: Option<Resource>,
}

/// One finished request, as [`RequestMetrics::record`] counts it.
pub(crate) struct Finished {
    pub labeled: Labeled,
    pub code: u16,
    pub bytes: u64,
    pub elapsed_seconds: f64,
    /// Ended by the gateway in self-defense: its timeout.
    pub terminated: bool,
}

/// A request counted in flight (or as long-running) until dropped.
pub(crate) struct InFlight {
    inflight: Option<Gauge>,
    long_running: Option<Gauge>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(gauge) = &self.inflight {
            gauge.dec();
        }
        if let Some(gauge) = &self.long_running {
            gauge.dec();
        }
    }
}

/// kube's `cleanVerb`: upper case; a list with `watch` set is a `WATCH`, a
/// patch of `application/apply-patch+yaml` an `APPLY`; anything outside
/// kube's `validRequestMethods` is `other`.
pub(crate) fn reported_verb(
    info: &RequestInfo,
    method: &Method,
    content_type: &str,
) -> &'static str {
    match info.verb.as_str() {
        "patch" if content_type.starts_with("application/apply-patch") => "APPLY",
        "watch" => "WATCH",
        "watchlist" => "WATCHLIST",
        "get" => "GET",
        "list" => "LIST",
        "create" => "CREATE",
        "update" => "UPDATE",
        "patch" => "PATCH",
        "delete" => "DELETE",
        "deletecollection" => "DELETECOLLECTION",
        "proxy" => "PROXY",
        "post" => "POST",
        "put" => "PUT",
        "connect" => "CONNECT",
        _ if method == Method::CONNECT => "CONNECT",
        _ => OTHER,
    }
}

/// kube's `cleanDryRun`: `All` when the request asked for a dry run (the
/// only value kube accepts; anything else is refused before it counts).
fn dry_run(query: Option<&str>) -> &'static str {
    let asked = query.is_some_and(|query| {
        url::form_urlencoded::parse(query.as_bytes())
            .any(|(key, value)| key == "dryRun" && value == "All")
    });
    if asked { "All" } else { "" }
}

/// kube's `CleanScope`.
pub(crate) fn scope(info: &RequestInfo) -> &'static str {
    if !info.namespace.is_empty() {
        "namespace"
    } else if !info.name.is_empty() {
        "resource"
    } else if info.is_resource_request {
        "cluster"
    } else {
        ""
    }
}

/// The resources that have series of their own, interned so a request's
/// labels share their strings; found by a hash of the request's names, so
/// a lookup allocates nothing.
#[derive(Default)]
struct ResourceNames(RwLock<HashMap<u64, Resource>>);

impl ResourceNames {
    fn folded() -> Resource {
        static FOLDED: OnceLock<Resource> = OnceLock::new();
        FOLDED
            .get_or_init(|| {
                let other: Arc<str> = Arc::from(OTHER);
                Resource {
                    group: other.clone(),
                    version: other.clone(),
                    resource: other.clone(),
                    subresource: other,
                }
            })
            .clone()
    }

    /// The request's resource if it has series; else its names, to
    /// [`admit`](Self::admit) once its code is known.
    fn known(&self, info: &RequestInfo) -> Result<Resource, Resource> {
        let names = Names::of(info);
        self.0
            .read()
            .ok()
            .and_then(|known| known.get(&names.hash()).filter(|r| names.is(r)).cloned())
            .ok_or_else(|| names.interned())
    }

    /// Gives `resource` series of its own, while there is room.
    fn admit(&self, resource: &Resource) -> Option<Resource> {
        let names = Names([
            &resource.group,
            &resource.version,
            &resource.resource,
            &resource.subresource,
        ]);
        let mut known = self.0.write().ok()?;
        if let Some(existing) = known.get(&names.hash()) {
            // Another resource with the same hash keeps the series.
            return names.is(existing).then(|| existing.clone());
        }
        if known.len() >= MAX_RESOURCES {
            return None;
        }
        known.insert(names.hash(), resource.clone());
        Some(resource.clone())
    }
}

/// A request's resource names, borrowed from its request info.
#[derive(Hash)]
struct Names<'a>([&'a str; 4]);

impl<'a> Names<'a> {
    fn of(info: &'a RequestInfo) -> Self {
        if info.is_resource_request {
            Names([
                &info.api_group,
                &info.api_version,
                &info.resource,
                &info.subresource,
            ])
        } else {
            // kube's `Record` puts a non-resource request's path in the
            // subresource label.
            Names(["", "", "", &info.path])
        }
    }

    fn hash(&self) -> u64 {
        use std::hash::{BuildHasher, BuildHasherDefault};
        BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().hash_one(self)
    }

    fn is(&self, resource: &Resource) -> bool {
        let [group, version, name, subresource] = self.0;
        *resource.group == *group
            && *resource.version == *version
            && *resource.resource == *name
            && *resource.subresource == *subresource
    }

    fn interned(&self) -> Resource {
        let [group, version, resource, subresource] = self.0.map(Arc::<str>::from);
        Resource {
            group,
            version,
            resource,
            subresource,
        }
    }
}
