//! API discovery, as kube clients expect it: `GET /apis` answers an
//! `APIGroupList` built from the API roots of every server, `GET /api` an
//! `APIVersions`, and `GET /apis/<group>` an `APIGroup`. The resource lists
//! below each `/apis/<group>/<version>` are the upstream's to answer.

use std::collections::BTreeMap;

use futures_util::future::BoxFuture;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Method};
use serde_json::{Value, json};

use crate::body::{Body, Request, Response};
use crate::config::{Config, RouteMatch};
use crate::handler::Handler;
use crate::status::GatewayError;

pub(crate) struct Discovery {
    /// Path -> JSON body, computed once when the chain is built.
    documents: BTreeMap<String, bytes::Bytes>,
}

impl Discovery {
    pub(crate) fn new(config: &Config) -> Self {
        let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut legacy_versions = Vec::new();
        let roots = config
            .servers
            .iter()
            .flat_map(|server| &server.routes)
            .filter_map(|route| match &route.matcher {
                RouteMatch::Api(root) => Some(root.as_str()),
                _ => None,
            });
        for root in roots {
            let segments: Vec<&str> = root.trim_start_matches('/').split('/').collect();
            match segments.as_slice() {
                ["apis", group, version] => {
                    let versions = groups.entry((*group).to_owned()).or_default();
                    if !versions.iter().any(|v| v == version) {
                        versions.push((*version).to_owned());
                    }
                }
                ["api", version] if !legacy_versions.contains(version) => {
                    legacy_versions.push(*version)
                }
                _ => {}
            }
        }
        let mut documents = BTreeMap::new();
        let mut group_list = Vec::new();
        for (name, mut versions) in groups {
            versions.sort_by(|a, b| compare_kube_versions(a, b));
            let group = api_group(&name, &versions);
            documents.insert(format!("/apis/{name}"), to_bytes(&group));
            group_list.push(group);
        }
        let list = json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": group_list});
        documents.insert("/apis".to_owned(), to_bytes(&list));
        let versions = json!({"kind": "APIVersions", "versions": legacy_versions});
        documents.insert("/api".to_owned(), to_bytes(&versions));
        Discovery { documents }
    }

    /// Every path this handler answers (with and without a trailing `/`).
    pub(crate) fn paths(&self) -> Vec<String> {
        self.documents
            .keys()
            .flat_map(|path| [path.clone(), format!("{path}/")])
            .collect()
    }
}

impl Handler for Discovery {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        let response = if request.method() != Method::GET && request.method() != Method::HEAD {
            GatewayError::MethodNotAllowed.into_response()
        } else {
            let path = request.uri().path();
            match self.documents.get(path.strip_suffix('/').unwrap_or(path)) {
                Some(document) => {
                    let mut response = http::Response::new(Body::full(document.clone()));
                    response
                        .headers_mut()
                        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                    response
                }
                None => GatewayError::NotFound.into_response(),
            }
        };
        Box::pin(async move { response })
    }
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
