//! What the servers behind the gateway say of themselves, asked in the
//! background as kube's aggregator asks its APIServices
//! (`staging/src/k8s.io/kube-aggregator/pkg/controllers/openapi/controller.go`,
//! `.../controllers/openapiv3/controller.go`,
//! `.../pkg/apiserver/handler_discovery.go`): each upstream whose routes
//! reach `/api` or `/apis` is asked for its discovery (legacy and
//! aggregated) and its OpenAPI v2 and v3 documents, and every API route for
//! its `APIResourceList`; what they answer, kept to the paths the
//! delegation chain sends them (the directors' own routing,
//! [`ChainTable`], asked for each path: what is listed is what is served,
//! as kube's aggregator lists the APIServices it proxies to,
//! `.../pkg/apiserver/handler_apis.go`), is merged into the documents
//! [`crate::discovery`] and [`crate::openapi`] serve. The chain's routes are
//! the manifest's and the gateway's own API routes (the self-subject
//! reviews); its other endpoints take no group version's path.
//!
//! The gateway asks as user `system:aggregator`, in no group, the user
//! kube's aggregator asks OpenAPI documents as
//! (`staging/src/k8s.io/kube-aggregator/pkg/controllers/openapi/aggregator/aggregator.go`).
//! kube asks discovery as `system:kube-aggregator`, in `system:masters` for
//! the aggregated `/apis`
//! (`staging/src/k8s.io/kube-aggregator/pkg/apiserver/handler_discovery.go`); the
//! gateway asks discovery as the same `system:aggregator`, so that no
//! upstream has to grant its background reads a super-user's group (nor,
//! in `impersonate` mode, the gateway's credentials the right to
//! impersonate it). The upstream's `identity` mode says how it is told,
//! every
//! [`REFRESH_INTERVAL`], each answer bounded by [`FETCH_TIMEOUT`] and
//! [`MAX_DOCUMENT`]. An answer of 404, 405 or 406 means the upstream serves
//! no such document; any other failure keeps the last good copy and is
//! logged (a warning naming the upstream and the document). Every upstream
//! and API route is asked at once and on its own, as kube's aggregator asks
//! each APIService, and the merged documents are made again as each one
//! answers something new: one that is slow, or never answers, holds back
//! only its own documents. The refresh ends when the handlers that serve
//! its documents are dropped (a reload). Until its first round has
//! published (once everyone answered, or after [`FIRST_ROUND_WAIT`]), those
//! handlers wait for it, for at most [`FIRST_PUBLICATION_WAIT`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{Method, StatusCode};
use http_body_util::{BodyExt, Limited};
use serde_json::Value;

use crate::body::Body;
use crate::config::RouteMatch;
use crate::context::{RequestContext, UserInfo};
use crate::director::{ChainTable, Routes};
use crate::discovery::{Catalog, Documents, GROUPS_ROOT, LEGACY_ROOT};
use crate::handler::SharedHandler;
use crate::metrics::gateway::V3DroppedSeries;
use crate::openapi::{Specs, merge_v2};
use crate::published::{FIRST_PUBLICATION_WAIT, Published};

/// How often the upstreams are asked again (kube's OpenAPI controllers
/// re-download every minute).
pub(crate) const REFRESH_INTERVAL: Duration = Duration::from_secs(60);
/// How long one document may take to arrive.
pub(crate) const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest document taken from an upstream (kube-apiserver's own v2
/// document is about 4 MiB).
pub(crate) const MAX_DOCUMENT: usize = 32 * 1024 * 1024;
/// The most group versions taken from one upstream's `/openapi/v3` index
/// (of those the chain sends it), each a document of up to
/// [`MAX_DOCUMENT`] fetched every round and held: kube-apiserver lists
/// about 30 of its own, and a cluster with large CRD sets a few hundred,
/// so a thousand leaves room for any real cluster while an index that
/// lists 100,000 (broken or hostile) cannot have the gateway fetch and hold
/// them all. The first ones listed are taken, the rest dropped with a
/// warning and counted (`wasmgate_openapi_v3_group_versions_dropped`, and
/// the upstream's routes on the status page; the series goes when the
/// last refresh that asks the upstream ends).
pub(crate) const MAX_V3_GROUP_VERSIONS: usize = 1000;
/// How long the first round waits for every upstream before it publishes
/// what it has: less than [`FIRST_PUBLICATION_WAIT`], so a request waiting
/// for the first publication is answered from the upstreams that answered,
/// not from the placeholder, when one of them does not answer.
const FIRST_ROUND_WAIT: Duration = Duration::from_secs(3);
const _: () = assert!(FIRST_ROUND_WAIT.as_millis() < FIRST_PUBLICATION_WAIT.as_millis());

/// The user the gateway asks as: kube's aggregator's for OpenAPI.
const AGGREGATOR_USER: &str = "system:aggregator";
const JSON: &str = "application/json";
/// kube's aggregated discovery, both versions client-go asks for.
const AGGREGATED_DISCOVERY: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";

/// A route of the delegation chain: its server's place in the chain, and
/// its own among that server's routes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct RouteId {
    server: usize,
    route: usize,
}

/// Who is asked, and where the chain sends each path, gathered while the
/// routes are built: one server's, then (appended) those after it.
pub(crate) struct Sources {
    server: usize,
    /// This server's routes, each leading to its [`RouteId`].
    routes: Routes<RouteId>,
    added: usize,
    /// The routes of the servers after it, in delegation order.
    later: Vec<Routes<RouteId>>,
    upstreams: Vec<UpstreamSource>,
    /// Each API route's root, the route, and the handler its resources are
    /// asked of (none for an upstream that is not aggregated).
    roots: Vec<Root>,
}

struct Root {
    path: String,
    route: RouteId,
    handler: Option<SharedHandler>,
}

struct UpstreamSource {
    url: String,
    handler: SharedHandler,
    /// The routes that lead to it: what it lists is kept to the paths the
    /// chain sends to one of them.
    routes: Vec<RouteId>,
}

impl Sources {
    /// The sources of server `server` of the delegation chain.
    pub(crate) fn new(server: usize) -> Self {
        Sources {
            server,
            routes: Routes::default(),
            added: 0,
            later: Vec::new(),
            upstreams: Vec::new(),
            roots: Vec::new(),
        }
    }

    /// A route of this server, in the order the server tries them or not
    /// (every route, whatever it leads to: it may take a path from another
    /// server's upstream); its id.
    pub(crate) fn add_route(&mut self, matcher: &RouteMatch) -> RouteId {
        let id = RouteId {
            server: self.server,
            route: self.added,
        };
        self.added += 1;
        self.routes.add(matcher, id);
        id
    }

    /// An upstream reached by `route`, whose matcher is `matcher`; asked
    /// only when the route reaches some of `/api` or `/apis`. Routes to one
    /// URL are one upstream.
    pub(crate) fn add_upstream(
        &mut self,
        route: RouteId,
        url: &str,
        handler: &SharedHandler,
        matcher: &RouteMatch,
    ) {
        let reaches_apis = match matcher {
            RouteMatch::Api(_) => true,
            RouteMatch::Prefix(prefix) => [LEGACY_ROOT, GROUPS_ROOT].iter().any(|root| {
                format!("{root}/").starts_with(prefix.as_str())
                    || prefix.starts_with(&format!("{root}/"))
            }),
            RouteMatch::Exact(_) => false,
        };
        if !reaches_apis {
            return;
        }
        match self.upstreams.iter_mut().find(|known| known.url == url) {
            Some(known) => known.routes.push(route),
            None => self.upstreams.push(UpstreamSource {
                url: url.to_owned(),
                handler: Arc::clone(handler),
                routes: vec![route],
            }),
        }
    }

    /// Adds `later`'s sources after these (a server further down the
    /// delegation chain).
    pub(crate) fn append(&mut self, later: Sources) {
        self.later.push(later.routes);
        self.later.extend(later.later);
        for upstream in later.upstreams {
            match self
                .upstreams
                .iter_mut()
                .find(|known| known.url == upstream.url)
            {
                Some(known) => known.routes.extend(upstream.routes),
                None => self.upstreams.push(upstream),
            }
        }
        self.roots.extend(later.roots);
    }

    /// An API route, `route`: listed in discovery when the chain sends its
    /// root to it, its resources asked of `handler`.
    pub(crate) fn add_root(&mut self, route: RouteId, root: &str, handler: Option<SharedHandler>) {
        self.roots.push(Root {
            path: root.to_owned(),
            route,
            handler,
        });
    }
}

/// Whether the upstreams are asked at all.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refresh {
    /// In the background, for a configuration that serves.
    Background,
    /// Never: a configuration only checked, or whose routes report
    /// themselves (`wasmgate check`, `wasmgate try`).
    Never,
}

/// The merged documents, and what keeps them current.
pub(crate) struct Aggregated {
    pub(crate) discovery: Arc<Published<Documents>>,
    pub(crate) openapi: Arc<Published<Specs>>,
    /// Held by the handlers: the refresh stops when the last one is dropped.
    pub(crate) refresh: Arc<dyn Send + Sync>,
}

/// Ends the refresh task when dropped.
struct RefreshTask(Option<tokio::task::AbortHandle>);

impl Drop for RefreshTask {
    fn drop(&mut self) {
        if let Some(task) = &self.0 {
            task.abort();
        }
    }
}

/// The documents as the API routes alone describe them, then, with
/// [`Refresh::Background`], kept current by a task on the current runtime.
pub(crate) fn start(sources: Sources, refresh: Refresh) -> Aggregated {
    let asked = Asked::new(sources);
    let known = Known::new(&asked);
    let discovery = Arc::new(Published::new(Documents::new(&asked.catalog(&known))));
    let openapi = Arc::new(Published::new(Specs::empty()));
    let task = match tokio::runtime::Handle::try_current() {
        Ok(runtime) if refresh == Refresh::Background => {
            let series = asked
                .upstreams
                .iter()
                .map(|upstream| {
                    crate::metrics::metrics()
                        .gateway
                        .openapi_v3_series(&upstream.url)
                })
                .collect();
            let refresher = Refresher {
                asked,
                known,
                series,
                discovery: Arc::clone(&discovery),
                openapi: Arc::clone(&openapi),
            };
            Some(runtime.spawn(refresher.run()).abort_handle())
        }
        _ => {
            discovery.settle();
            openapi.settle();
            None
        }
    };
    Aggregated {
        discovery,
        openapi,
        refresh: Arc::new(RefreshTask(task)),
    }
}

/// The last good copy of each document of one upstream.
#[derive(Default)]
struct Kept {
    versions: Option<Value>,
    groups: Option<Value>,
    aggregated_core: Option<Value>,
    aggregated_groups: Option<Value>,
    openapi_v2: Option<Value>,
    /// Group version path (`api/v1`) to its v3 document.
    openapi_v3: BTreeMap<String, Bytes>,
}

/// What asking an upstream for its discovery gave, document by document.
struct DiscoveryRound {
    versions: Fetched<Value>,
    groups: Fetched<Value>,
    aggregated_core: Fetched<Value>,
    aggregated_groups: Fetched<Value>,
}

/// What asking an upstream for its OpenAPI documents gave.
struct OpenApiRound {
    v2: Fetched<Value>,
    /// v3's root, as each group version it lists that the gateway routes
    /// here (its path, its URL and what asking for it gave).
    v3: Fetched<Vec<(String, String, Fetched<Bytes>)>>,
}

/// Which merged documents an answer changed.
#[derive(Clone, Copy)]
struct Changed {
    discovery: bool,
    openapi: bool,
}

impl Changed {
    const BOTH: Changed = Changed {
        discovery: true,
        openapi: true,
    };
}

impl Kept {
    /// Keeps what `round` served, forgets what it found absent, and keeps
    /// the last good copy of what failed (with a warning naming `url`);
    /// whether anything changed.
    fn apply_discovery(&mut self, round: DiscoveryRound, url: &str) -> bool {
        // `|`, not `||`: every document is kept.
        keep(&mut self.versions, round.versions, url, LEGACY_ROOT)
            | keep(&mut self.groups, round.groups, url, GROUPS_ROOT)
            | keep(
                &mut self.aggregated_core,
                round.aggregated_core,
                url,
                LEGACY_ROOT,
            )
            | keep(
                &mut self.aggregated_groups,
                round.aggregated_groups,
                url,
                GROUPS_ROOT,
            )
    }

    /// [`Kept::apply_discovery`], for the OpenAPI documents.
    fn apply_openapi(&mut self, round: OpenApiRound, url: &str) -> bool {
        keep(&mut self.openapi_v2, round.v2, url, "/openapi/v2") | self.apply_v3(round.v3, url)
    }

    fn apply_v3(
        &mut self,
        root: Fetched<Vec<(String, String, Fetched<Bytes>)>>,
        url: &str,
    ) -> bool {
        let kept = &mut self.openapi_v3;
        let listed = match root {
            Fetched::Served(listed) => listed,
            Fetched::Absent => {
                let changed = !kept.is_empty();
                kept.clear();
                return changed;
            }
            Fetched::Failed(error) => {
                warn_kept(url, "/openapi/v3", &error);
                return false;
            }
        };
        let before = kept.len();
        kept.retain(|path, _| listed.iter().any(|(listed, _, _)| listed == path));
        let mut changed = kept.len() != before;
        for (path, relative, fetched) in listed {
            match fetched {
                Fetched::Served(bytes) => {
                    changed |= kept.get(&path) != Some(&bytes);
                    kept.insert(path, bytes);
                }
                Fetched::Absent => changed |= kept.remove(&path).is_some(),
                Fetched::Failed(error) => warn_kept(url, &relative, &error),
            }
        }
        changed
    }
}

/// Who is asked, and where the chain sends each path: never changes once
/// the refresh runs.
struct Asked {
    chain: ChainTable<RouteId>,
    upstreams: Vec<UpstreamSource>,
    /// Each API route's root, in name order (after the upstreams' groups).
    roots: Vec<Root>,
}

impl Asked {
    fn new(sources: Sources) -> Self {
        let Sources {
            routes,
            later,
            upstreams,
            mut roots,
            ..
        } = sources;
        roots.sort_by(|a, b| a.path.cmp(&b.path));
        Asked {
            chain: ChainTable::new(std::iter::once(routes).chain(later)),
            upstreams,
            roots,
        }
    }
}

impl UpstreamSource {
    /// Whether the chain sends `path` here: what the upstream lists of
    /// other paths is served by someone else, or by no one.
    fn serves(&self, chain: &ChainTable<RouteId>, path: &str) -> bool {
        chain
            .route(path)
            .is_some_and(|route| self.routes.contains(route))
    }
}

/// What they answered, each in the place of its [`Asked`] entry.
struct Known {
    upstreams: Vec<Kept>,
    /// Each API route's `APIResourceList`.
    roots: Vec<Option<Value>>,
}

/// One answer of a round: an upstream's discovery or OpenAPI documents,
/// or an API route's resources, with the index of who answered.
enum Answer {
    /// Boxed, as the next: the larger variants by far.
    Discovery(usize, Box<DiscoveryRound>),
    OpenApi(usize, Box<OpenApiRound>),
    Root(usize, Fetched<Value>),
}

struct Refresher {
    asked: Asked,
    known: Known,
    /// Each upstream's series of dropped v3 group versions, held while
    /// the refresh runs.
    series: Vec<V3DroppedSeries>,
    discovery: Arc<Published<Documents>>,
    openapi: Arc<Published<Specs>>,
}

impl Refresher {
    async fn run(mut self) {
        self.refresh(Publication::First).await;
        loop {
            tokio::time::sleep(REFRESH_INTERVAL).await;
            self.refresh(Publication::Changes).await;
        }
    }

    /// Asks every upstream (for its discovery, and apart from it for its
    /// OpenAPI documents, which take longer) and every API route at once,
    /// each on its own as kube's aggregator asks each APIService, and
    /// publishes what changed as each answers: one that is slow, or never
    /// answers, holds back only its own documents. The first round
    /// publishes once, when all have answered or [`FIRST_ROUND_WAIT`] has
    /// passed, so a request waiting for the first publication sees every
    /// upstream that answered in time; then what answers later as it comes.
    async fn refresh(&mut self, publication: Publication) {
        let Refresher {
            asked,
            known,
            series,
            discovery,
            openapi,
        } = self;
        let asked = &*asked;
        let mut answers: FuturesUnordered<BoxFuture<'_, Answer>> = FuturesUnordered::new();
        for (index, (upstream, series)) in asked.upstreams.iter().zip(&*series).enumerate() {
            answers.push(Box::pin(async move {
                Answer::Discovery(index, Box::new(upstream.ask_discovery().await))
            }));
            answers.push(Box::pin(async move {
                let round = upstream.ask_openapi(&asked.chain, series).await;
                Answer::OpenApi(index, Box::new(round))
            }));
        }
        for (index, root) in asked.roots.iter().enumerate() {
            if let Some(handler) = &root.handler {
                answers.push(Box::pin(async move {
                    Answer::Root(index, fetch(handler, &root.path, JSON).await.json())
                }));
            }
        }
        let publish = |known: &Known, changed: Changed| {
            if changed.discovery {
                discovery.publish(Documents::new(&asked.catalog(known)));
            }
            if changed.openapi {
                openapi.publish(asked.specs(known));
            }
        };
        if publication == Publication::First {
            let everyone = async {
                while let Some(answer) = answers.next().await {
                    known.take(asked, answer);
                }
            };
            // Those that have not answered by then are published as they do.
            let _ = tokio::time::timeout(FIRST_ROUND_WAIT, everyone).await;
            publish(known, Changed::BOTH);
        }
        while let Some(answer) = answers.next().await {
            let changed = known.take(asked, answer);
            publish(known, changed);
        }
    }
}

/// What a round publishes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Publication {
    /// Everything, once (the placeholder is replaced).
    First,
    /// What each answer changed.
    Changes,
}

impl Known {
    /// Nothing known yet.
    fn new(asked: &Asked) -> Self {
        Known {
            upstreams: asked.upstreams.iter().map(|_| Kept::default()).collect(),
            roots: asked.roots.iter().map(|_| None).collect(),
        }
    }

    /// Keeps `answer`; what it changed.
    fn take(&mut self, asked: &Asked, answer: Answer) -> Changed {
        let url = |index: usize| asked.upstreams[index].url.as_str();
        let (discovery, openapi) = match answer {
            Answer::Discovery(index, round) => {
                let changed = self.upstreams[index].apply_discovery(*round, url(index));
                (changed, false)
            }
            Answer::OpenApi(index, round) => {
                let changed = self.upstreams[index].apply_openapi(*round, url(index));
                (false, changed)
            }
            Answer::Root(index, fetched) => {
                let root = &asked.roots[index].path;
                (
                    keep(&mut self.roots[index], fetched, "API route", root),
                    false,
                )
            }
        };
        Changed { discovery, openapi }
    }
}

impl Asked {
    fn catalog(&self, known: &Known) -> Catalog {
        let mut catalog = Catalog::default();
        for (upstream, kept) in self.upstreams.iter().zip(&known.upstreams) {
            let covers = |path: &str| upstream.serves(&self.chain, path);
            for aggregated in [&kept.aggregated_core, &kept.aggregated_groups]
                .into_iter()
                .flatten()
            {
                catalog.add_aggregated(aggregated, covers);
            }
            if let Some(versions) = &kept.versions {
                catalog.add_legacy_versions(versions, covers);
            }
            if let Some(groups) = &kept.groups {
                catalog.add_group_list(groups, covers);
            }
        }
        for (root, list) in self.roots.iter().zip(&known.roots) {
            // An API route another takes the root from serves nothing.
            if self.chain.route(&root.path) == Some(&root.route) {
                catalog.add_root(&root.path, list.as_ref());
            }
        }
        catalog
    }

    fn specs(&self, known: &Known) -> Specs {
        let v2: Vec<Value> = self
            .upstreams
            .iter()
            .zip(&known.upstreams)
            .filter_map(|(upstream, kept)| {
                let mut spec = kept.openapi_v2.clone()?;
                if let Some(paths) = spec.get_mut("paths").and_then(Value::as_object_mut) {
                    paths.retain(|path, _| upstream.serves(&self.chain, path));
                }
                Some(spec)
            })
            .collect();
        let mut v3 = BTreeMap::new();
        for kept in &known.upstreams {
            for (path, document) in &kept.openapi_v3 {
                v3.entry(path.clone()).or_insert_with(|| document.clone());
            }
        }
        Specs::new(merge_v2(&v2), v3)
    }
}

impl UpstreamSource {
    /// Asks for the discovery documents, one after the other.
    async fn ask_discovery(&self) -> DiscoveryRound {
        let handler = &self.handler;
        DiscoveryRound {
            versions: fetch(handler, LEGACY_ROOT, JSON).await.json(),
            groups: fetch(handler, GROUPS_ROOT, JSON).await.json(),
            aggregated_core: fetch(handler, LEGACY_ROOT, AGGREGATED_DISCOVERY)
                .await
                .aggregated()
                .json(),
            aggregated_groups: fetch(handler, GROUPS_ROOT, AGGREGATED_DISCOVERY)
                .await
                .aggregated()
                .json(),
        }
    }

    /// Asks for the OpenAPI documents, one after the other.
    async fn ask_openapi(
        &self,
        chain: &ChainTable<RouteId>,
        series: &V3DroppedSeries,
    ) -> OpenApiRound {
        OpenApiRound {
            v2: fetch(&self.handler, "/openapi/v2", JSON).await.json(),
            v3: self.ask_v3(chain, series).await,
        }
    }

    /// v3's root, then each group version it lists that the chain sends
    /// here (how many past the bound counted in `series`).
    async fn ask_v3(
        &self,
        chain: &ChainTable<RouteId>,
        series: &V3DroppedSeries,
    ) -> Fetched<Vec<(String, String, Fetched<Bytes>)>> {
        let handler = &self.handler;
        let root = match fetch(handler, "/openapi/v3", JSON).await.json() {
            Fetched::Served(root) => root,
            Fetched::Absent => return Fetched::Absent,
            Fetched::Failed(error) => return Fetched::Failed(error),
        };
        let mut listed: Vec<(String, String)> = root["paths"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(path, _)| self.serves(chain, &format!("/{path}")))
            .filter_map(|(path, entry)| {
                let url = entry["serverRelativeURL"].as_str()?;
                Some((path.clone(), url.to_owned()))
            })
            .collect();
        let dropped = listed.len().saturating_sub(MAX_V3_GROUP_VERSIONS);
        if dropped > 0 {
            tracing::warn!(
                upstream = self.url,
                listed = listed.len(),
                taken = MAX_V3_GROUP_VERSIONS,
                "the upstream's /openapi/v3 lists more group versions than the gateway takes; the first are served, the rest dropped"
            );
            listed.truncate(MAX_V3_GROUP_VERSIONS);
        }
        series.set(dropped);
        let mut documents = Vec::with_capacity(listed.len());
        for (path, relative) in listed {
            let fetched = match fetch(handler, &relative, JSON).await {
                Fetched::Served((bytes, _)) => Fetched::Served(bytes),
                Fetched::Absent => Fetched::Absent,
                Fetched::Failed(error) => Fetched::Failed(error),
            };
            documents.push((path, relative, fetched));
        }
        Fetched::Served(documents)
    }
}

/// What asking for one document gave.
enum Fetched<T> {
    Served(T),
    /// The upstream serves no such document (404, 405, 406).
    Absent,
    Failed(String),
}

impl Fetched<(Bytes, Option<String>)> {
    fn json(self) -> Fetched<Value> {
        match self {
            Fetched::Served((bytes, _)) => match serde_json::from_slice(&bytes) {
                Ok(value) => Fetched::Served(value),
                Err(error) => Fetched::Failed(format!("not JSON: {error}")),
            },
            Fetched::Absent => Fetched::Absent,
            Fetched::Failed(error) => Fetched::Failed(error),
        }
    }

    /// An answer in another form than aggregated discovery (a server that
    /// does not serve it answers the legacy document) is no answer.
    fn aggregated(self) -> Self {
        let aggregated = matches!(&self, Fetched::Served((_, Some(content_type)))
            if content_type.contains("as=APIGroupDiscoveryList"));
        match self {
            Fetched::Served(_) if !aggregated => Fetched::Absent,
            other => other,
        }
    }
}

/// Stores a served document, forgets an absent one, keeps the last good
/// copy on a failure; whether what is kept changed.
fn keep(kept: &mut Option<Value>, fetched: Fetched<Value>, source: &str, document: &str) -> bool {
    match fetched {
        Fetched::Served(value) => {
            let changed = kept.as_ref() != Some(&value);
            *kept = Some(value);
            changed
        }
        Fetched::Absent => kept.take().is_some(),
        Fetched::Failed(error) => {
            warn_kept(source, document, &error);
            false
        }
    }
}

fn warn_kept(source: &str, document: &str, error: &str) {
    tracing::warn!(
        upstream = source,
        document,
        error,
        "fetching a discovery or OpenAPI document failed; the last good copy is kept"
    );
}

/// `GET path` of `handler` as the aggregator's user: the body (at most
/// [`MAX_DOCUMENT`]) and content type of a 200.
async fn fetch(
    handler: &SharedHandler,
    path: &str,
    accept: &str,
) -> Fetched<(Bytes, Option<String>)> {
    let request = http::Request::builder()
        .method(Method::GET)
        .uri(path)
        .header(ACCEPT, accept)
        .body(Body::empty());
    let mut request = match request {
        Ok(request) => request,
        Err(error) => return Fetched::Failed(format!("cannot ask for {path:?}: {error}")),
    };
    let aggregator = UserInfo {
        name: AGGREGATOR_USER.to_owned(),
        ..UserInfo::default()
    };
    RequestContext::learn(request.extensions_mut()).user = Some(Arc::new(aggregator));
    let exchange = async {
        let response = handler.call(request).await;
        match response.status() {
            StatusCode::OK => {}
            StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED | StatusCode::NOT_ACCEPTABLE => {
                return Fetched::Absent;
            }
            status => return Fetched::Failed(format!("answered {status}")),
        }
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        match Limited::new(response.into_body(), MAX_DOCUMENT)
            .collect()
            .await
        {
            Ok(body) => Fetched::Served((body.to_bytes(), content_type)),
            Err(error) => Fetched::Failed(format!("reading the document: {error}")),
        }
    };
    tokio::time::timeout(FETCH_TIMEOUT, exchange)
        .await
        .unwrap_or_else(|_| Fetched::Failed(format!("no answer within {FETCH_TIMEOUT:?}")))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{Fetched, keep};

    #[test]
    fn a_failed_fetch_keeps_the_last_good_copy_and_an_absent_one_forgets_it() {
        let mut kept = None;
        let served = || Fetched::Served(json!({"a": 1}));
        assert!(keep(&mut kept, served(), "up", "/apis"), "a change");
        assert_eq!(kept, Some(json!({"a": 1})));
        assert!(!keep(&mut kept, served(), "up", "/apis"), "the same");
        let failed = Fetched::Failed("answered 500".to_owned());
        assert!(!keep(&mut kept, failed, "up", "/apis"));
        assert_eq!(kept, Some(json!({"a": 1})));
        assert!(keep(&mut kept, Fetched::Absent, "up", "/apis"));
        assert_eq!(kept, None);
        assert!(!keep(&mut kept, Fetched::Absent, "up", "/apis"));
    }

    #[test]
    fn only_an_aggregated_content_type_is_aggregated_discovery() {
        let answered = |content_type: &str| {
            Fetched::Served((bytes::Bytes::new(), Some(content_type.to_owned()))).aggregated()
        };
        assert!(matches!(
            answered("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"),
            Fetched::Served(_)
        ));
        assert!(matches!(answered("application/json"), Fetched::Absent));
    }
}
