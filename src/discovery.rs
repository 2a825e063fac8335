//! API discovery, as kube clients expect it: `GET /apis` answers an
//! `APIGroupList`, `GET /api` an `APIVersions` (with kube's
//! `serverAddressByClientCIDRs`: the host the client asked for, for every
//! client, as kube's `ExternalAddress` is), and `GET /apis/<group>` an
//! `APIGroup`. The resource lists below each `/apis/<group>/<version>` are
//! the upstream's to answer.
//!
//! What is listed is a [`Catalog`]: the groups of every upstream that serves
//! discovery and of every API route, each group version only where the
//! delegation chain sends its path (the aggregator, which builds the
//! catalog, asks the directors), as kube's aggregator lists the APIServices
//! it proxies to. Groups keep the order they are met in (the upstreams', in
//! delegation order, keep their own, which for a kube-apiserver is kube's
//! priority order; then the API routes', in manifest order); a group's
//! versions are in kube's version priority.
//!
//! A client that asks for kube's aggregated discovery (`Accept:
//! application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList`,
//! or `v=v2beta1`, as kubectl 1.32 does first) gets one
//! `APIGroupDiscoveryList` with every resource
//! (`staging/src/k8s.io/apiserver/pkg/endpoints/discovery/aggregated/handler.go`)
//! when the resources of every listed version are known; otherwise it gets
//! the legacy document, which client-go takes as "not aggregated" and reads
//! the versions one by one. The aggregated list is serialised once per
//! publication and tagged as kube tags it (`ETag`, `304`:
//! `.../discovery/aggregated/etag.go`); the legacy documents are not.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use http::header::{CONTENT_TYPE, VARY};
use http::{HeaderMap, HeaderValue, Method};
use serde_json::{Map, Value, json};

use crate::body::{Body, Request, Response};
use crate::context::RequestContext;
use crate::handler::Handler;
use crate::published::{FIRST_PUBLICATION_WAIT, Published};
use crate::status::GatewayError;
use crate::tagged_document::TaggedDocument;

/// The path of kube's legacy `APIVersions` document.
pub(crate) const LEGACY_ROOT: &str = "/api";
/// The path of the `APIGroupList`.
pub(crate) const GROUPS_ROOT: &str = "/apis";

/// The `Accept` parameters of kube's aggregated discovery.
const AGGREGATED_GROUP: &str = "apidiscovery.k8s.io";
const AGGREGATED_KIND: &str = "APIGroupDiscoveryList";
const AGGREGATED_VERSIONS: [&str; 2] = ["v2", "v2beta1"];

/// Every API group version the gateway lists, and their resources where
/// known; the core group is the one named `""`.
#[derive(Default)]
pub(crate) struct Catalog {
    groups: Vec<Group>,
}

struct Group {
    name: String,
    /// Each version and its `APIVersionDiscovery` resources, when known.
    versions: Vec<(String, Option<Value>)>,
}

impl Catalog {
    /// Lists `version` of `group`; `resources` (aggregated discovery's
    /// `resources` array) fills in a version listed without them.
    pub(crate) fn add(&mut self, group: &str, version: &str, resources: Option<Value>) {
        let index = match self.groups.iter().position(|known| known.name == group) {
            Some(index) => index,
            None => {
                self.groups.push(Group {
                    name: group.to_owned(),
                    versions: Vec::new(),
                });
                self.groups.len() - 1
            }
        };
        let versions = &mut self.groups[index].versions;
        match versions.iter_mut().find(|(known, _)| known == version) {
            Some((_, known @ None)) => *known = resources,
            Some(_) => {}
            None => versions.push((version.to_owned(), resources)),
        }
    }

    /// Lists what an API root (`/api/<v>`, `/apis/<g>/<v>`) serves, from
    /// its `APIResourceList` when it answered one.
    pub(crate) fn add_root(&mut self, root: &str, list: Option<&Value>) {
        if let Some((group, version)) = group_version_of(root) {
            let resources = list.map(|list| resources_of(list, group, version));
            self.add(group, version, resources);
        }
    }

    /// Lists the versions of an upstream's `APIVersions` (its `/api`) that
    /// `covered` says the gateway routes to it.
    pub(crate) fn add_legacy_versions(&mut self, document: &Value, covered: impl Fn(&str) -> bool) {
        for version in strings(&document["versions"]) {
            if covered(&format!("{LEGACY_ROOT}/{version}")) {
                self.add("", version, None);
            }
        }
    }

    /// Lists the group versions of an upstream's `APIGroupList` that
    /// `covered` says the gateway routes to it.
    pub(crate) fn add_group_list(&mut self, document: &Value, covered: impl Fn(&str) -> bool) {
        for group in document["groups"].as_array().into_iter().flatten() {
            let Some(name) = group["name"].as_str() else {
                continue;
            };
            for entry in group["versions"].as_array().into_iter().flatten() {
                if let Some(version) = entry["version"].as_str()
                    && covered(&format!("{GROUPS_ROOT}/{name}/{version}"))
                {
                    self.add(name, version, None);
                }
            }
        }
    }

    /// Lists the group versions, with their resources, of an upstream's
    /// `APIGroupDiscoveryList` that `covered` says the gateway routes to it.
    pub(crate) fn add_aggregated(&mut self, document: &Value, covered: impl Fn(&str) -> bool) {
        for group in document["items"].as_array().into_iter().flatten() {
            let name = group["metadata"]["name"].as_str().unwrap_or("");
            for entry in group["versions"].as_array().into_iter().flatten() {
                let Some(version) = entry["version"].as_str() else {
                    continue;
                };
                let root = match name {
                    "" => format!("{LEGACY_ROOT}/{version}"),
                    group => format!("{GROUPS_ROOT}/{group}/{version}"),
                };
                if covered(&root) {
                    self.add(name, version, Some(entry["resources"].clone()));
                }
            }
        }
    }
}

/// The documents of one [`Catalog`], as served.
pub(crate) struct Documents {
    /// `/apis` and each `/apis/<group>`: path -> JSON body.
    legacy: BTreeMap<String, bytes::Bytes>,
    /// The versions `/api` lists; its document names the client's host, so
    /// it is written per request.
    legacy_versions: Vec<String>,
    /// `/api`'s and `/apis`' `APIGroupDiscoveryList`s, one per version of
    /// [`AGGREGATED_VERSIONS`], when every listed version's resources are
    /// known.
    aggregated_core: Option<[TaggedDocument; 2]>,
    aggregated_groups: Option<[TaggedDocument; 2]>,
}

impl Documents {
    pub(crate) fn new(catalog: &Catalog) -> Self {
        let mut legacy = BTreeMap::new();
        let mut group_list = Vec::new();
        let mut legacy_versions = Vec::new();
        let mut aggregated_core = Some(Vec::new());
        let mut aggregated_groups = Some(Vec::new());
        for group in &catalog.groups {
            let mut versions = group.versions.clone();
            versions.sort_by(|(a, _), (b, _)| compare_kube_versions(a, b));
            let names: Vec<String> = versions.iter().map(|(name, _)| name.clone()).collect();
            let items = if group.name.is_empty() {
                legacy_versions = names;
                &mut aggregated_core
            } else {
                let document = api_group(&group.name, &names);
                legacy.insert(format!("{GROUPS_ROOT}/{}", group.name), to_bytes(&document));
                group_list.push(document);
                &mut aggregated_groups
            };
            let described = aggregated_group(&group.name, &versions);
            *items = items.take().zip(described).map(|(mut items, group)| {
                items.push(group);
                items
            });
        }
        let list = json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": group_list});
        legacy.insert(GROUPS_ROOT.to_owned(), to_bytes(&list));
        Documents {
            legacy,
            legacy_versions,
            aggregated_core: aggregated_core.map(|items| aggregated_lists(&items)),
            aggregated_groups: aggregated_groups.map(|items| aggregated_lists(&items)),
        }
    }

    /// Every path served (with and without a trailing `/`).
    fn paths(&self) -> Vec<String> {
        self.legacy
            .keys()
            .map(String::as_str)
            .chain([LEGACY_ROOT])
            .flat_map(|path| [path.to_owned(), format!("{path}/")])
            .collect()
    }
}

pub(crate) struct Discovery {
    documents: Arc<Published<Documents>>,
    /// The address `/api` names when the request named no host.
    listen_address: String,
    /// Keeps the background refresh alive as long as the handler is.
    _refresh: Arc<dyn Send + Sync>,
}

impl Discovery {
    pub(crate) fn new(
        documents: Arc<Published<Documents>>,
        listen_address: String,
        refresh: Arc<dyn Send + Sync>,
    ) -> Self {
        Discovery {
            documents,
            listen_address,
            _refresh: refresh,
        }
    }

    /// Every path this handler answers: `/api`, `/apis` and the groups
    /// listed when the chain was built (an upstream that lists a group of
    /// its own answers for `/apis/<group>` through its route).
    pub(crate) fn paths(&self) -> Vec<String> {
        self.documents.load().paths()
    }

    /// kube's `APIVersions`, naming the server as `request` reached it.
    fn legacy_versions(&self, request: &Request, versions: &[String]) -> bytes::Bytes {
        let host = RequestContext::of(request.extensions())
            .origin
            .as_ref()
            .and_then(|origin| origin.host.as_ref())
            .and_then(|host| host.to_str().ok())
            .unwrap_or(&self.listen_address);
        to_bytes(&json!({
            "kind": "APIVersions",
            "versions": versions,
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}],
        }))
    }

    fn answer(&self, request: &Request) -> Result<Response, GatewayError> {
        if request.method() != Method::GET && request.method() != Method::HEAD {
            return Err(GatewayError::MethodNotAllowed);
        }
        let documents = self.documents.load();
        let path = request.uri().path();
        let path = path.strip_suffix('/').unwrap_or(path);
        let aggregated = match path {
            LEGACY_ROOT => documents.aggregated_core.as_ref(),
            GROUPS_ROOT => documents.aggregated_groups.as_ref(),
            _ => None,
        };
        let body = match (
            negotiate(request.headers(), aggregated.is_some())?,
            aggregated,
        ) {
            (Format::Aggregated(index), Some(lists)) => {
                let version = AGGREGATED_VERSIONS[index];
                let content_type = format!(
                    "application/json;g={AGGREGATED_GROUP};v={version};as={AGGREGATED_KIND}"
                );
                let content_type = HeaderValue::try_from(content_type)
                    .unwrap_or(HeaderValue::from_static("application/json"));
                // kube's aggregated discovery is the one document it tags.
                return Ok(lists[index].serve(request, content_type, "public"));
            }
            _ if path == LEGACY_ROOT => self.legacy_versions(request, &documents.legacy_versions),
            _ => documents
                .legacy
                .get(path)
                .cloned()
                .ok_or(GatewayError::NotFound)?,
        };
        let mut response = http::Response::new(Body::full(body));
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(VARY, HeaderValue::from_static("Accept"));
        Ok(response)
    }
}

impl Handler for Discovery {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        Box::pin(async move {
            self.documents.first(FIRST_PUBLICATION_WAIT).await;
            self.answer(&request)
                .unwrap_or_else(GatewayError::into_response)
        })
    }
}

/// What a client is answered in.
enum Format {
    /// kube's aggregated discovery, at this version of its API (an index
    /// into [`AGGREGATED_VERSIONS`]).
    Aggregated(usize),
    Legacy,
}

/// The first media range of `Accept` the gateway can serve, preferred
/// first as kube prefers ([`crate::accept`]; client-go lists its preference
/// first, at one `q`); no `Accept` (or none that parses) is the legacy
/// document.
fn negotiate(headers: &HeaderMap, aggregated: bool) -> Result<Format, GatewayError> {
    let ranges = crate::accept::ranges(headers);
    if ranges.is_empty() {
        return Ok(Format::Legacy);
    }
    for range in ranges {
        if !range.takes("application/json") {
            continue;
        }
        match range.param("as") {
            None => return Ok(Format::Legacy),
            Some(AGGREGATED_KIND) if aggregated && range.param("g") == Some(AGGREGATED_GROUP) => {
                if let Some(index) = AGGREGATED_VERSIONS
                    .iter()
                    .position(|version| range.param("v") == Some(*version))
                {
                    return Ok(Format::Aggregated(index));
                }
            }
            Some(_) => {}
        }
    }
    Err(GatewayError::NotAcceptable {
        message: "only the following media types are accepted: application/json, \
                  application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList, \
                  application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
            .to_owned(),
    })
}

/// `/api/<v>` is the core group's `v`; `/apis/<g>/<v>` is `g`'s.
fn group_version_of(root: &str) -> Option<(&str, &str)> {
    let segments: Vec<&str> = root.trim_start_matches('/').split('/').collect();
    match segments.as_slice() {
        ["apis", group, version] => Some((group, version)),
        ["api", version] => Some(("", version)),
        _ => None,
    }
}

/// An `APIResourceList`'s resources as aggregated discovery's
/// (`APIResourceDiscovery`): subresources (`widgets/status`) under their
/// resource, as kube's aggregator converts an APIService that does not
/// serve aggregated discovery itself.
fn resources_of(list: &Value, group: &str, version: &str) -> Value {
    let kind_of = |resource: &Value| {
        json!({
            "group": resource["group"].as_str().unwrap_or(group),
            "version": resource["version"].as_str().unwrap_or(version),
            "kind": resource["kind"],
        })
    };
    let listed = list["resources"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let mut resources: Vec<Map<String, Value>> = Vec::new();
    for resource in listed
        .iter()
        .filter(|r| !r["name"].as_str().unwrap_or("").contains('/'))
    {
        let mut entry = Map::new();
        entry.insert("resource".to_owned(), resource["name"].clone());
        entry.insert("responseKind".to_owned(), kind_of(resource));
        let scope = if resource["namespaced"].as_bool() == Some(true) {
            "Namespaced"
        } else {
            "Cluster"
        };
        entry.insert("scope".to_owned(), json!(scope));
        entry.insert(
            "singularResource".to_owned(),
            json!(resource["singularName"].as_str().unwrap_or("")),
        );
        entry.insert("verbs".to_owned(), json!(strings(&resource["verbs"])));
        for key in ["shortNames", "categories"] {
            if resource[key].is_array() {
                entry.insert(key.to_owned(), resource[key].clone());
            }
        }
        resources.push(entry);
    }
    for resource in listed {
        let Some((parent, sub)) = resource["name"]
            .as_str()
            .and_then(|name| name.split_once('/'))
        else {
            continue;
        };
        let Some(entry) = resources
            .iter_mut()
            .find(|entry| entry["resource"] == parent)
        else {
            continue;
        };
        let subresource = json!({
            "subresource": sub,
            "responseKind": kind_of(resource),
            "verbs": strings(&resource["verbs"]),
        });
        match entry.get_mut("subresources").and_then(Value::as_array_mut) {
            Some(subresources) => subresources.push(subresource),
            None => {
                entry.insert("subresources".to_owned(), json!([subresource]));
            }
        }
    }
    Value::from(resources)
}

/// One group's `APIGroupDiscovery`, when every version's resources are known.
/// One `APIGroupDiscoveryList` of `items` per version of
/// [`AGGREGATED_VERSIONS`], serialised and hashed once per publication.
fn aggregated_lists(items: &[Value]) -> [TaggedDocument; 2] {
    AGGREGATED_VERSIONS.map(|version| {
        TaggedDocument::json(&json!({
            "kind": AGGREGATED_KIND,
            "apiVersion": format!("{AGGREGATED_GROUP}/{version}"),
            "metadata": {},
            "items": items,
        }))
    })
}

fn aggregated_group(name: &str, versions: &[(String, Option<Value>)]) -> Option<Value> {
    let described: Option<Vec<Value>> = versions
        .iter()
        .map(|(version, resources)| {
            resources.as_ref().map(|resources| {
                json!({"version": version, "resources": resources, "freshness": "Current"})
            })
        })
        .collect();
    let mut metadata = json!({"creationTimestamp": null});
    if !name.is_empty() {
        metadata["name"] = json!(name);
    }
    Some(json!({"metadata": metadata, "versions": described?}))
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

fn api_group(name: &str, versions: &[String]) -> Value {
    let entry =
        |version: &String| json!({"groupVersion": format!("{name}/{version}"), "version": version});
    let listed: Vec<Value> = versions.iter().map(entry).collect();
    json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": name,
        "versions": listed,
        "preferredVersion": versions.first().map(entry),
    })
}

fn to_bytes(value: &Value) -> bytes::Bytes {
    bytes::Bytes::from(value.to_string())
}

/// kube's version priority: GA before beta before alpha, higher numbers
/// first, anything else last in lexical order (`v2 v1 v1beta2 v1beta1
/// v1alpha1 foo`).
fn compare_kube_versions(a: &str, b: &str) -> std::cmp::Ordering {
    version_rank(a).cmp(&version_rank(b)).then_with(|| a.cmp(b))
}

fn version_rank(version: &str) -> (u8, std::cmp::Reverse<u64>, std::cmp::Reverse<u64>) {
    let parsed = version.strip_prefix('v').and_then(|rest| {
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        let major: u64 = rest[..digits].parse().ok()?;
        let tail = &rest[digits..];
        let (stability, minor) = if tail.is_empty() {
            (0, "0")
        } else if let Some(n) = tail.strip_prefix("beta") {
            (1, n)
        } else if let Some(n) = tail.strip_prefix("alpha") {
            (2, n)
        } else {
            return None;
        };
        Some((stability, major, minor.parse::<u64>().ok()?))
    });
    match parsed {
        Some((stability, major, minor)) => (
            stability,
            std::cmp::Reverse(major),
            std::cmp::Reverse(minor),
        ),
        None => (3, std::cmp::Reverse(0), std::cmp::Reverse(0)),
    }
}

#[cfg(test)]
mod tests {
    use super::compare_kube_versions;

    #[test]
    fn versions_sort_by_kube_priority() {
        let mut versions = vec![
            "v1alpha1",
            "foo",
            "v1beta1",
            "v1",
            "v2",
            "v1beta2",
            "v10",
            "v11alpha2",
        ];
        versions.sort_by(|a, b| compare_kube_versions(a, b));
        assert_eq!(
            versions,
            [
                "v10",
                "v2",
                "v1",
                "v1beta2",
                "v1beta1",
                "v11alpha2",
                "v1alpha1",
                "foo"
            ]
        );
    }
}

#[cfg(test)]
mod catalog_tests {
    use serde_json::{Value, json};

    use super::{Catalog, Documents};

    fn names(documents: &Documents) -> Vec<String> {
        let list: Value =
            serde_json::from_slice(&documents.legacy["/apis"]).expect("the group list");
        list["groups"]
            .as_array()
            .expect("groups")
            .iter()
            .map(|group| group["name"].as_str().unwrap_or("").to_owned())
            .collect()
    }

    #[test]
    fn upstream_groups_keep_their_order_and_only_what_is_routed_is_listed() {
        let mut catalog = Catalog::default();
        let upstream = json!({"groups": [
            {"name": "zeta.example.io", "versions": [{"version": "v1"}]},
            {"name": "apps", "versions": [{"version": "v1"}]},
            {"name": "hidden.example.io", "versions": [{"version": "v1"}]},
        ]});
        catalog.add_group_list(&upstream, |path| !path.contains("hidden"));
        catalog.add_root("/apis/apps/v1beta1", None);
        let documents = Documents::new(&catalog);
        assert_eq!(names(&documents), ["zeta.example.io", "apps"]);
        let apps: Value = serde_json::from_slice(&documents.legacy["/apis/apps"]).expect("JSON");
        assert_eq!(apps["preferredVersion"]["version"], "v1");
        // v1 of apps has no known resources: no aggregated document.
        assert!(documents.aggregated_groups.is_none());
    }

    #[test]
    fn a_resource_list_becomes_aggregated_resources_with_subresources() {
        let mut catalog = Catalog::default();
        let list = json!({"resources": [
            {"name": "widgets", "singularName": "widget", "namespaced": true, "kind": "Widget", "verbs": ["get"]},
            {"name": "widgets/status", "namespaced": true, "kind": "Widget", "verbs": ["get", "patch"]},
        ]});
        catalog.add_root("/apis/demo.example.io/v1", Some(&list));
        let documents = Documents::new(&catalog);
        let lists = documents
            .aggregated_groups
            .expect("every version described");
        let list: Value = serde_json::from_slice(lists[0].bytes()).expect("JSON");
        let resource = &list["items"][0]["versions"][0]["resources"][0];
        assert_eq!(resource["resource"], "widgets");
        assert_eq!(resource["scope"], "Namespaced");
        assert_eq!(
            resource["responseKind"],
            json!({"group": "demo.example.io", "version": "v1", "kind": "Widget"})
        );
        assert_eq!(resource["subresources"][0]["subresource"], "status");
    }
}
