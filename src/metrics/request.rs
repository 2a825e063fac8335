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
//! a success (a 1xx, 2xx or 3xx: an error such as the 401 of a client
//! without credentials says nothing of what is served), for at most
//! [`MAX_RESOURCES`] of them; every other request is counted under
//! [`OTHER`].
//!
//! A request finds its series with two lookups, hashed with foldhash: its
//! resource's names among the known resources, then its verb, dry run and
//! scope among that resource's series; kube's label sets are built only
//! when a series is made.

use std::collections::HashMap;
use std::hash::BuildHasher;
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
/// past [`MAX_RESOURCES`] or never answered with a success.
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

/// foldhash, seeded once per process.
type Hashing = foldhash::fast::RandomState;

pub(crate) struct RequestMetrics {
    total: Family<CodeLabels, Counter>,
    duration: HistogramFamily<RequestLabels>,
    sizes: HistogramFamily<SizeLabels>,
    terminations: Family<TerminationLabels, Counter>,
    longrunning: Family<SizeLabels, Gauge>,
    /// `readOnly`'s, then `mutating`'s.
    inflight: [Gauge; 2],
    inflight_family: Family<RequestKind, Gauge>,
    filter_duration: HistogramFamily<FilterLabel>,
    resources: ResourceNames,
}

/// The labels of a request but its resource's: what picks its series
/// among its resource's.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
struct Words {
    verb: &'static str,
    dry_run: &'static str,
    scope: &'static str,
}

impl Words {
    /// A request's words as kube's `MonitorRequest` has them (the request
    /// total, duration and sizes), then as its `RecordLongRunning` and
    /// `RecordRequestTermination` have them: the first take the scope of
    /// the route the request reaches (`installer.go`), whose name is the
    /// path's, and the deprecated `/watch/` path's verb from that route;
    /// the others take `CleanScope` of the request info, whose name may be
    /// a `metadata.name` field selector's, and no route's verb.
    fn of(
        info: &RequestInfo,
        method: &Method,
        query: Option<&str>,
        content_type: &str,
    ) -> (Words, Words) {
        let dry_run = dry_run(query);
        let route = route_scope(info);
        // kube routes only a GET of a `/watch/` path, as a WATCH or WATCHLIST.
        let watch_route = *method == Method::GET && info.verb == "watch";
        let request = scope(info);
        (
            Words {
                verb: reported_verb(info, method, query, content_type, route, watch_route),
                dry_run,
                scope: route,
            },
            Words {
                verb: reported_verb(info, method, query, content_type, request, false),
                dry_run,
                scope: request,
            },
        )
    }
}

/// A resource with series of its own (or the one every folded request
/// shares), and its series by label set.
#[derive(Debug)]
struct Known {
    names: Resource,
    series: RwLock<HashMap<Words, Arc<Series>, Hashing>>,
}

impl Known {
    fn new(names: Resource) -> Self {
        Known {
            names,
            series: RwLock::default(),
        }
    }

    /// The series of `words` for this resource, made by `make` the first
    /// time.
    fn series(&self, words: Words, make: impl FnOnce() -> Series) -> Arc<Series> {
        if let Some(series) = self
            .series
            .read()
            .ok()
            .and_then(|all| all.get(&words).cloned())
        {
            return series;
        }
        let series = Arc::new(make());
        if let Ok(mut all) = self.series.write() {
            all.insert(words, series.clone());
        }
        series
    }
}

/// The series of one label set, fetched from the families once.
#[derive(Debug)]
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
    /// `long_running` ([`crate::context::is_long_running`]: watches,
    /// upgrades, ...); the guard stops when dropped.
    pub(crate) fn start(
        &'static self,
        info: &RequestInfo,
        long_running: bool,
        labeled: &Labeled,
    ) -> InFlight {
        let gauge = if long_running {
            let labels = size_labels(&labeled.labels(labeled.recorded));
            let gauge = self.longrunning.get_or_create(&labels).clone();
            Counted::LongRunning(gauge)
        } else {
            Counted::InFlight(&self.inflight[usize::from(!info.is_read_only())])
        };
        gauge.gauge().inc();
        InFlight(gauge)
    }

    /// The labels a request is counted under; its content type tells an
    /// apply patch from the others.
    pub(crate) fn request_labels(&self, info: &RequestInfo, request: &Request) -> Labeled {
        let content_type = request
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("");
        let (words, recorded) =
            Words::of(info, request.method(), request.uri().query(), content_type);
        Labeled {
            words,
            recorded,
            resource: self.resources.known(info),
        }
    }

    /// Records a finished request (kube's `MonitorRequest`). A resource
    /// [`served`] gets series of its own from then on; this request, if it
    /// was the first, is already counted under them.
    pub(crate) fn record(&self, record: Finished) {
        let words = record.labeled.words;
        let known = match record.labeled.resource {
            Ok(known) => known,
            Err(unknown) if served(record.code) => self
                .resources
                .admit(unknown)
                .unwrap_or_else(ResourceNames::folded),
            Err(_) => ResourceNames::folded(),
        };
        let series = known.series(words, || self.new_series(&labels(words, &known.names)));
        series.duration.observe(record.elapsed_seconds);
        if let Some(sizes) = &series.sizes {
            sizes.observe(record.bytes as f64);
        }
        let counted = series.codes.read().ok().and_then(|codes| {
            let found = codes.iter().find(|(code, _)| *code == record.code);
            found.map(|(_, counter)| counter.inc())
        });
        if counted.is_none() {
            let coded = CodeLabels {
                request: labels(words, &known.names),
                code: record.code,
            };
            let counter = self.total.get_or_create(&coded).clone();
            counter.inc();
            if let Ok(mut codes) = series.codes.write() {
                codes.push((record.code, counter));
            }
        }
        if record.terminated {
            let terminated = TerminationLabels {
                request: size_labels(&labels(record.labeled.recorded, &known.names)),
                code: record.code,
            };
            self.terminations.get_or_create(&terminated).inc();
        }
    }

    fn new_series(&self, labels: &RequestLabels) -> Series {
        Series {
            duration: self.duration.get_or_create(labels).clone(),
            // kube: "We are only interested in response sizes of read requests."
            sizes: matches!(labels.verb, "GET" | "LIST")
                .then(|| self.sizes.get_or_create(&size_labels(labels)).clone()),
            codes: RwLock::default(),
        }
    }
}

/// Whether an answer with `code` shows that its resource is served: a
/// success (1xx, 2xx or 3xx). An error says nothing of it: a 404 is a path
/// nothing serves, and a 401, 403, 429 or 503 the gateway (or a failing
/// upstream) answers for any path, so a client that sends random paths
/// would otherwise give each one series of its own until none are left
/// for the resources served later.
fn served(code: u16) -> bool {
    code < 400
}

/// kube's label set of a request with `words` to `resource`.
fn labels(words: Words, resource: &Resource) -> RequestLabels {
    RequestLabels {
        verb: words.verb,
        dry_run: words.dry_run,
        group: resource.group.clone(),
        version: resource.version.clone(),
        resource: resource.resource.clone(),
        subresource: resource.subresource.clone(),
        scope: words.scope,
        component: COMPONENT,
    }
}

fn size_labels(labels: &RequestLabels) -> SizeLabels {
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

/// A request's labels: its words ([`Words::of`]), and its resource with
/// series of its own, or, while it has none, its names.
pub(crate) struct Labeled {
    /// `MonitorRequest`'s.
    words: Words,
    /// `RecordLongRunning`'s and `RecordRequestTermination`'s.
    recorded: Words,
    resource: Result<Arc<Known>, Resource>,
}

impl Labeled {
    /// The label set of `words` while the request is under way: a
    /// resource without series yet is folded.
    fn labels(&self, words: Words) -> RequestLabels {
        match &self.resource {
            Ok(known) => labels(words, &known.names),
            Err(_) => labels(words, &ResourceNames::folded().names),
        }
    }
}

/// One finished request, as [`RequestMetrics::record`] counts it.
pub(crate) struct Finished {
    pub labeled: Labeled,
    pub code: u16,
    pub bytes: u64,
    pub elapsed_seconds: f64,
    /// Ended by the gateway in self-defense: its timeout, or a 429 of
    /// max-in-flight or priority and fairness.
    pub terminated: bool,
}

/// A request counted in flight (or as long-running) until dropped.
pub(crate) struct InFlight(Counted);

/// The gauge a request moves.
enum Counted {
    /// kube's in-flight gauge of its kind, fetched at registration.
    InFlight(&'static Gauge),
    /// Its label set's long-running gauge.
    LongRunning(Gauge),
}

impl Counted {
    fn gauge(&self) -> &Gauge {
        match self {
            Counted::InFlight(gauge) => gauge,
            Counted::LongRunning(gauge) => gauge,
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.gauge().dec();
    }
}

/// The subresources kube reports as `CONNECT` (`validConnectRequests`).
const CONNECT_SUBRESOURCES: [&str; 5] = ["log", "exec", "portforward", "attach", "proxy"];

/// kube's verb label, `cleanVerb(CanonicalVerb(method, scope),
/// suggestedVerb, request, requestInfo)`: a `CONNECT` for a request to a
/// connect subresource; else a GET's `WATCH` when its `?watch=` is other
/// than `0` or `false` (`getVerbIfWatch`), or when `watch_route` (the route
/// of a deprecated `/watch/` path, kube's suggested `WATCH` or `WATCHLIST`);
/// a GET or HEAD outside the `resource` scope a `LIST`, else the HTTP
/// method, a patch of `application/apply-patch+yaml` an `APPLY`; a method
/// outside kube's `validRequestMethods` is `other`.
fn reported_verb(
    info: &RequestInfo,
    method: &Method,
    query: Option<&str>,
    content_type: &str,
    scope: &str,
    watch_route: bool,
) -> &'static str {
    if watch_route {
        return "WATCH";
    }
    if info.is_resource_request && CONNECT_SUBRESOURCES.contains(&info.subresource.as_str()) {
        return "CONNECT";
    }
    let watched = || {
        query.is_some_and(|query| {
            url::form_urlencoded::parse(query.as_bytes())
                .find(|(key, _)| key == "watch")
                .is_some_and(|(_, value)| !matches!(value.to_lowercase().as_str(), "0" | "false"))
        })
    };
    match *method {
        Method::GET if watched() => "WATCH",
        Method::GET | Method::HEAD if !matches!(scope, "resource" | "") => "LIST",
        Method::GET | Method::HEAD => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH if content_type == "application/apply-patch+yaml" => "APPLY",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::CONNECT => "CONNECT",
        _ => OTHER,
    }
}

/// kube's `cleanDryRun`: empty when the query has no `dryRun`, `All` when
/// every `dryRun` value is `All` (the only value kube's `ValidateDryRun`
/// accepts), and `invalid` when any other value is asked for: kube refuses
/// such a request and counts it under `invalid`.
fn dry_run(query: Option<&str>) -> &'static str {
    // kube reads the query only when its raw text names `dryRun`.
    let Some(query) = query.filter(|query| query.contains("dryRun")) else {
        return "";
    };
    let mut asked = false;
    for (key, value) in url::form_urlencoded::parse(query.as_bytes()) {
        if key == "dryRun" {
            if value != "All" {
                return "invalid";
            }
            asked = true;
        }
    }
    if asked { "All" } else { "" }
}

/// The scope kube's API installer gives the route a request reaches
/// (`requestScope` in `staging/src/k8s.io/apiserver/pkg/endpoints/installer.go`):
/// a path naming one object (`{resource}/{name}...`), or a create, is
/// `resource`; a collection is `namespace` or `cluster`, whatever object
/// a `metadata.name` field selector names (the route is the list's);
/// empty for a non-resource request.
fn route_scope(info: &RequestInfo) -> &'static str {
    if info.parts.len() >= 2 || info.verb == "create" {
        "resource"
    } else if !info.namespace.is_empty() {
        "namespace"
    } else if info.is_resource_request {
        "cluster"
    } else {
        ""
    }
}

/// kube's `CleanScope`: a request info's name (the path's, or a
/// `metadata.name` field selector's) is `resource`; else the route's scope.
fn scope(info: &RequestInfo) -> &'static str {
    if info.name.is_empty() {
        route_scope(info)
    } else {
        "resource"
    }
}

/// The resources that have series of their own, interned so a request's
/// labels share their strings; found by a hash of the request's names, so
/// a lookup allocates nothing.
#[derive(Default)]
struct ResourceNames {
    known: RwLock<HashMap<u64, Arc<Known>, Hashing>>,
    hashing: Hashing,
}

impl ResourceNames {
    /// The resource every folded request is counted under.
    fn folded() -> Arc<Known> {
        static FOLDED: OnceLock<Arc<Known>> = OnceLock::new();
        FOLDED
            .get_or_init(|| {
                let other: Arc<str> = Arc::from(OTHER);
                Arc::new(Known::new(Resource {
                    group: other.clone(),
                    version: other.clone(),
                    resource: other.clone(),
                    subresource: other,
                }))
            })
            .clone()
    }

    /// The request's resource if it has series; else its names, to
    /// [`admit`](Self::admit) once its code is known.
    fn known(&self, info: &RequestInfo) -> Result<Arc<Known>, Resource> {
        let names = Names::of(info);
        let hash = self.hashing.hash_one(&names);
        self.known
            .read()
            .ok()
            .and_then(|known| {
                known
                    .get(&hash)
                    .filter(|known| names.is(&known.names))
                    .cloned()
            })
            .ok_or_else(|| names.interned())
    }

    /// Gives `resource` series of its own, while there is room.
    fn admit(&self, resource: Resource) -> Option<Arc<Known>> {
        let names = Names([
            &resource.group,
            &resource.version,
            &resource.resource,
            &resource.subresource,
        ]);
        let hash = self.hashing.hash_one(&names);
        let mut known = self.known.write().ok()?;
        if let Some(existing) = known.get(&hash) {
            // Another resource with the same hash keeps the series.
            return names.is(&existing.names).then(|| existing.clone());
        }
        if known.len() >= MAX_RESOURCES {
            return None;
        }
        let admitted = Arc::new(Known::new(resource));
        known.insert(hash, admitted.clone());
        Some(admitted)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// method, URL, content type; then `MonitorRequest`'s verb and scope,
    /// and `RecordLongRunning`'s.
    type WordsRow = (
        &'static str,
        &'static str,
        &'static str,
        (&'static str, &'static str),
        (&'static str, &'static str),
    );

    #[rustfmt::skip]
    const WORDS: &[WordsRow] = &[
        ("GET", "/api/v1/pods", "", ("LIST", "cluster"), ("LIST", "cluster")),
        ("GET", "/api/v1/namespaces/ns/pods", "", ("LIST", "namespace"), ("LIST", "namespace")),
        ("HEAD", "/api/v1/namespaces/ns/pods", "", ("LIST", "namespace"), ("LIST", "namespace")),
        ("GET", "/api/v1/namespaces/ns/pods/p", "", ("GET", "resource"), ("GET", "resource")),
        ("GET", "/api/v1/nodes/n", "", ("GET", "resource"), ("GET", "resource")),
        ("GET", "/api/v1/namespaces/ns", "", ("GET", "resource"), ("GET", "resource")),
        ("PUT", "/api/v1/namespaces/ns/finalize", "", ("PUT", "resource"), ("PUT", "resource")),
        ("POST", "/api/v1/namespaces/ns/pods", "", ("POST", "resource"), ("POST", "resource")),
        ("DELETE", "/api/v1/namespaces/ns/pods", "", ("DELETE", "namespace"), ("DELETE", "namespace")),
        ("PATCH", "/api/v1/namespaces/ns/pods/p", "application/apply-patch+yaml", ("APPLY", "resource"), ("APPLY", "resource")),
        ("PATCH", "/api/v1/namespaces/ns/pods/p", "application/apply-patch+yaml; charset=utf-8", ("PATCH", "resource"), ("PATCH", "resource")),
        ("PATCH", "/api/v1/namespaces/ns/pods/p", "application/merge-patch+json", ("PATCH", "resource"), ("PATCH", "resource")),
        // A watch is a GET's (getVerbIfWatch), of a collection or of one object.
        ("GET", "/api/v1/namespaces/ns/pods?watch=1", "", ("WATCH", "namespace"), ("WATCH", "namespace")),
        ("GET", "/api/v1/namespaces/ns/pods/p?watch=true", "", ("WATCH", "resource"), ("WATCH", "resource")),
        ("GET", "/api/v1/namespaces/ns/pods?watch=false", "", ("LIST", "namespace"), ("LIST", "namespace")),
        ("HEAD", "/api/v1/namespaces/ns/pods?watch=1", "", ("LIST", "namespace"), ("LIST", "namespace")),
        // strings.ToLower, not EqualFold: request info's list, kube's WATCH label.
        ("GET", "/api/v1/namespaces/ns/pods?watch=fal%C5%BFe", "", ("WATCH", "namespace"), ("WATCH", "namespace")),
        // A `metadata.name` field selector names the object of a list or
        // watch (request info's name): its route is still the list's.
        ("GET", "/api/v1/namespaces/ns/pods?fieldSelector=metadata.name%3Dp", "", ("LIST", "namespace"), ("GET", "resource")),
        ("GET", "/api/v1/nodes?fieldSelector=metadata.name%3Dn&watch=1", "", ("WATCH", "cluster"), ("WATCH", "resource")),
        ("DELETE", "/api/v1/namespaces/ns/pods?fieldSelector=metadata.name%3Dp", "", ("DELETE", "namespace"), ("DELETE", "namespace")),
        // The deprecated watch paths: the route's WATCH and WATCHLIST, and
        // no suggested verb outside MonitorRequest.
        ("GET", "/api/v1/watch/namespaces/ns/pods", "", ("WATCH", "namespace"), ("LIST", "namespace")),
        ("GET", "/api/v1/watch/namespaces/ns/pods/p", "", ("WATCH", "resource"), ("GET", "resource")),
        // Connect subresources are CONNECT, whatever the method.
        ("GET", "/api/v1/namespaces/ns/pods/p/log", "", ("CONNECT", "resource"), ("CONNECT", "resource")),
        ("POST", "/api/v1/namespaces/ns/pods/p/exec", "", ("CONNECT", "resource"), ("CONNECT", "resource")),
        ("OPTIONS", "/api/v1/namespaces/ns/pods/p/portforward", "", ("CONNECT", "resource"), ("CONNECT", "resource")),
        ("GET", "/api/v1/namespaces/ns/services/s/proxy/x", "", ("CONNECT", "resource"), ("CONNECT", "resource")),
        ("GET", "/api/v1/namespaces/ns/pods/p/status", "", ("GET", "resource"), ("GET", "resource")),
        // Methods kube does not report.
        ("OPTIONS", "/api/v1/namespaces/ns/pods", "", ("other", "namespace"), ("other", "namespace")),
        ("FROB", "/api/v1/pods", "", ("other", "cluster"), ("other", "cluster")),
        // Non-resource requests have the empty scope.
        ("GET", "/healthz", "", ("GET", ""), ("GET", "")),
        ("GET", "/healthz?watch=1", "", ("WATCH", ""), ("WATCH", "")),
        ("HEAD", "/version", "", ("GET", ""), ("GET", "")),
        ("POST", "/logs/exec", "", ("POST", ""), ("POST", "")),
    ];

    #[test]
    fn verbs_and_scopes_are_kubes() {
        for &(method, url, content_type, monitored, recorded) in WORDS {
            let method = Method::from_bytes(method.as_bytes()).expect("a method");
            let (path, query) = match url.split_once('?') {
                Some((path, query)) => (path, Some(query)),
                None => (url, None),
            };
            let info = RequestInfo::resolve(&method, path, query);
            let (words, long) = Words::of(&info, &method, query, content_type);
            assert_eq!((words.verb, words.scope), monitored, "{method} {url}");
            assert_eq!(
                (long.verb, long.scope),
                recorded,
                "{method} {url}: recorded"
            );
        }
    }
}
