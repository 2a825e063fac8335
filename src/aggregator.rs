//! What the servers behind the gateway say of themselves, asked in the
//! background as kube's aggregator asks its APIServices
//! (`staging/src/k8s.io/kube-aggregator/pkg/controllers/openapi/controller.go`,
//! `.../controllers/openapiv3/controller.go`,
//! `.../pkg/apiserver/handler_discovery.go`): each upstream whose routes
//! reach `/api` or `/apis` is asked for its discovery (legacy and
//! aggregated) and its OpenAPI v2 and v3 documents, and every API route for
//! its `APIResourceList`; what they answer, kept to the paths the gateway
//! routes to them, is merged into the documents [`crate::discovery`] and
//! [`crate::openapi`] serve.
//!
//! The gateway asks as kube's aggregator does, as user `system:aggregator`
//! (the upstream's `identity` mode says how it is told), every
//! [`REFRESH_INTERVAL`], each answer bounded by [`FETCH_TIMEOUT`] and
//! [`MAX_DOCUMENT`]. An answer of 404, 405 or 406 means the upstream serves
//! no such document; any other failure keeps the last good copy and is
//! logged (a warning naming the upstream and the document). The refresh
//! ends when the handlers that serve its documents are dropped (a reload).
//! Until its first round has published, those handlers wait for it, for at
//! most [`crate::published::FIRST_PUBLICATION_WAIT`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{Method, StatusCode};
use http_body_util::{BodyExt, Limited};
use serde_json::Value;

use crate::body::Body;
use crate::config::RouteMatch;
use crate::context::{RequestContext, UserInfo};
use crate::director::{RouteTable, Routes};
use crate::discovery::{Catalog, Documents, GROUPS_ROOT, LEGACY_ROOT};
use crate::handler::SharedHandler;
use crate::openapi::{Specs, merge_v2};
use crate::published::Published;

/// How often the upstreams are asked again (kube's OpenAPI controllers
/// re-download every minute).
pub(crate) const REFRESH_INTERVAL: Duration = Duration::from_secs(60);
/// How long one document may take to arrive.
pub(crate) const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest document taken from an upstream (kube-apiserver's own v2
/// document is about 4 MiB).
pub(crate) const MAX_DOCUMENT: usize = 32 * 1024 * 1024;

/// The user the gateway asks as: kube's aggregator's.
const AGGREGATOR_USER: &str = "system:aggregator";
const JSON: &str = "application/json";
/// kube's aggregated discovery, both versions client-go asks for.
const AGGREGATED_DISCOVERY: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";

/// Who is asked, gathered while the routes are built.
#[derive(Default)]
pub(crate) struct Sources {
    upstreams: Vec<UpstreamSource>,
    /// Each API route's root and the handler its resources are asked of
    /// (none for an upstream that is not aggregated), in manifest order.
    roots: Vec<(String, Option<SharedHandler>)>,
}

struct UpstreamSource {
    url: String,
    handler: SharedHandler,
    /// The routes that lead to it, to keep what it lists to what the
    /// gateway sends it.
    routes: Routes<()>,
}

impl Sources {
    /// An upstream reached by `matcher`; asked only when the route reaches
    /// some of `/api` or `/apis`. Routes to one URL are one upstream.
    pub(crate) fn add_upstream(
        &mut self,
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
        let index = match self.upstreams.iter().position(|known| known.url == url) {
            Some(index) => index,
            None => {
                self.upstreams.push(UpstreamSource {
                    url: url.to_owned(),
                    handler: Arc::clone(handler),
                    routes: Routes::default(),
                });
                self.upstreams.len() - 1
            }
        };
        let routes = &mut self.upstreams[index].routes;
        match matcher {
            RouteMatch::Api(root) => routes.api.push((root.clone(), ())),
            RouteMatch::Exact(path) => routes.exact.push((path.clone(), ())),
            RouteMatch::Prefix(prefix) => routes.prefixes.push((prefix.clone(), ())),
        }
    }

    /// Adds `later`'s sources after these (a server further down the
    /// delegation chain).
    pub(crate) fn append(&mut self, later: Sources) {
        for upstream in later.upstreams {
            match self
                .upstreams
                .iter_mut()
                .find(|known| known.url == upstream.url)
            {
                Some(known) => {
                    known.routes.api.extend(upstream.routes.api);
                    known.routes.exact.extend(upstream.routes.exact);
                    known.routes.prefixes.extend(upstream.routes.prefixes);
                }
                None => self.upstreams.push(upstream),
            }
        }
        self.roots.extend(later.roots);
    }

    /// An API route: listed in discovery, its resources asked of `handler`.
    pub(crate) fn add_root(&mut self, root: &str, handler: Option<SharedHandler>) {
        self.roots.push((root.to_owned(), handler));
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
pub(crate) fn start(mut sources: Sources, refresh: Refresh) -> Aggregated {
    // The gateway's own groups in name order, after the upstreams'.
    sources.roots.sort_by(|(a, _), (b, _)| a.cmp(b));
    let mut catalog = Catalog::default();
    for (root, _) in &sources.roots {
        catalog.add_root(root, None);
    }
    let discovery = Arc::new(Published::new(Documents::new(&catalog)));
    let openapi = Arc::new(Published::new(Specs::empty()));
    let task = match tokio::runtime::Handle::try_current() {
        Ok(runtime) if refresh == Refresh::Background => {
            let refresher = Refresher::new(sources, Arc::clone(&discovery), Arc::clone(&openapi));
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

struct Upstream {
    source: UpstreamSource,
    routes: RouteTable<()>,
    kept: Kept,
}

impl Upstream {
    fn covers(&self, path: &str) -> bool {
        self.routes.route(path).is_some()
    }
}

struct Refresher {
    upstreams: Vec<Upstream>,
    roots: Vec<(String, Option<SharedHandler>, Option<Value>)>,
    discovery: Arc<Published<Documents>>,
    openapi: Arc<Published<Specs>>,
}

impl Refresher {
    fn new(
        sources: Sources,
        discovery: Arc<Published<Documents>>,
        openapi: Arc<Published<Specs>>,
    ) -> Self {
        let upstreams = sources
            .upstreams
            .into_iter()
            .map(|mut source| {
                let routes = RouteTable::new(std::mem::take(&mut source.routes));
                Upstream {
                    source,
                    routes,
                    kept: Kept::default(),
                }
            })
            .collect();
        let roots = sources
            .roots
            .into_iter()
            .map(|(root, handler)| (root, handler, None))
            .collect();
        Refresher {
            upstreams,
            roots,
            discovery,
            openapi,
        }
    }

    async fn run(mut self) {
        loop {
            self.refresh().await;
            tokio::time::sleep(REFRESH_INTERVAL).await;
        }
    }

    /// Asks everyone once, then publishes the merged documents.
    async fn refresh(&mut self) {
        let upstreams = self.upstreams.iter_mut().map(Upstream::refresh);
        futures_util::future::join_all(upstreams).await;
        for (root, handler, kept) in &mut self.roots {
            if let Some(handler) = handler {
                let fetched = fetch(handler, root, JSON).await.json();
                keep(kept, fetched, "API route", root);
            }
        }
        self.discovery.publish(Documents::new(&self.catalog()));
        self.openapi.publish(self.specs());
    }

    fn catalog(&self) -> Catalog {
        let mut catalog = Catalog::default();
        for upstream in &self.upstreams {
            let covers = |path: &str| upstream.covers(path);
            let kept = &upstream.kept;
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
        for (root, _, list) in &self.roots {
            catalog.add_root(root, list.as_ref());
        }
        catalog
    }

    fn specs(&self) -> Specs {
        let v2: Vec<Value> = self
            .upstreams
            .iter()
            .filter_map(|upstream| {
                let mut spec = upstream.kept.openapi_v2.clone()?;
                if let Some(paths) = spec.get_mut("paths").and_then(Value::as_object_mut) {
                    paths.retain(|path, _| upstream.covers(path));
                }
                Some(spec)
            })
            .collect();
        let mut v3 = BTreeMap::new();
        for upstream in &self.upstreams {
            for (path, document) in &upstream.kept.openapi_v3 {
                v3.entry(path.clone()).or_insert_with(|| document.clone());
            }
        }
        Specs::new(merge_v2(&v2), v3)
    }
}

impl Upstream {
    async fn refresh(&mut self) {
        let handler = &self.source.handler;
        let url = &self.source.url;
        let kept = &mut self.kept;
        keep(
            &mut kept.versions,
            fetch(handler, LEGACY_ROOT, JSON).await.json(),
            url,
            LEGACY_ROOT,
        );
        keep(
            &mut kept.groups,
            fetch(handler, GROUPS_ROOT, JSON).await.json(),
            url,
            GROUPS_ROOT,
        );
        let core = fetch(handler, LEGACY_ROOT, AGGREGATED_DISCOVERY).await;
        keep(
            &mut kept.aggregated_core,
            core.aggregated().json(),
            url,
            LEGACY_ROOT,
        );
        let groups = fetch(handler, GROUPS_ROOT, AGGREGATED_DISCOVERY).await;
        keep(
            &mut kept.aggregated_groups,
            groups.aggregated().json(),
            url,
            GROUPS_ROOT,
        );
        let v2 = fetch(handler, "/openapi/v2", JSON).await.json();
        keep(&mut kept.openapi_v2, v2, url, "/openapi/v2");
        self.refresh_v3().await;
    }

    /// v3's root, then each group version it lists that the gateway routes
    /// here.
    async fn refresh_v3(&mut self) {
        let url = self.source.url.clone();
        let root = match fetch(&self.source.handler, "/openapi/v3", JSON)
            .await
            .json()
        {
            Fetched::Served(root) => root,
            Fetched::Absent => {
                self.kept.openapi_v3.clear();
                return;
            }
            Fetched::Failed(error) => {
                warn_kept(&url, "/openapi/v3", &error);
                return;
            }
        };
        let listed: Vec<(String, String)> = root["paths"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(path, _)| self.covers(&format!("/{path}")))
            .filter_map(|(path, entry)| {
                let url = entry["serverRelativeURL"].as_str()?;
                Some((path.clone(), url.to_owned()))
            })
            .collect();
        self.kept
            .openapi_v3
            .retain(|path, _| listed.iter().any(|(listed, _)| listed == path));
        for (path, relative) in listed {
            match fetch(&self.source.handler, &relative, JSON).await {
                Fetched::Served((bytes, _)) => {
                    self.kept.openapi_v3.insert(path, bytes);
                }
                Fetched::Absent => {
                    self.kept.openapi_v3.remove(&path);
                }
                Fetched::Failed(error) => warn_kept(&url, &relative, &error),
            }
        }
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
/// copy on a failure.
fn keep(kept: &mut Option<Value>, fetched: Fetched<Value>, source: &str, document: &str) {
    match fetched {
        Fetched::Served(value) => *kept = Some(value),
        Fetched::Absent => *kept = None,
        Fetched::Failed(error) => warn_kept(source, document, &error),
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
        keep(&mut kept, Fetched::Served(json!({"a": 1})), "up", "/apis");
        assert_eq!(kept, Some(json!({"a": 1})));
        keep(
            &mut kept,
            Fetched::Failed("answered 500".to_owned()),
            "up",
            "/apis",
        );
        assert_eq!(kept, Some(json!({"a": 1})));
        keep(&mut kept, Fetched::Absent, "up", "/apis");
        assert_eq!(kept, None);
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
