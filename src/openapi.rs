//! `/openapi/v2` and `/openapi/v3`: the OpenAPI documents of the upstreams
//! behind the gateway, merged as kube's aggregator merges its APIServices'
//! specs (`staging/src/k8s.io/kube-aggregator/pkg/controllers/openapi/aggregator/aggregator.go`,
//! `.../openapiv3/aggregator/aggregator.go`) and served as kube-openapi's
//! handlers serve them (`vendor/k8s.io/kube-openapi/pkg/handler/handler.go`,
//! `.../handler3/handler.go`): an `ETag` (the document's SHA-512, upper-case
//! hex), `304` on a matching `If-None-Match`, and v3's root listing each
//! group version at a `serverRelativeURL` that carries that hash; a request
//! with the current hash may be cached for good, one with an old hash is
//! sent (301) to the current one.
//!
//! v2 is merged: the union of `paths`, `definitions`, `parameters` and
//! `responses`, the first upstream (in delegation order) winning a name
//! they share. v3 is one document per group version, so a group version is
//! the first upstream's that lists it, as it is one APIService's in kube.
//!
//! v3 is served as JSON (kubectl 1.32 reads it so for `create`, `apply`
//! and `explain`). v2 is served as JSON or, to a client that asks for it
//! (client-go's `OpenAPISchema()`, kubectl's `explain --output
//! plaintext-openapiv2`), as gnostic's protobuf `Document`
//! ([`v2_proto`]), chosen from `Accept` as kube-openapi's handler chooses:
//! the first media range (by `q`, then the more specific) that one of its
//! three media types matches, `406` when none does. Both forms are made once per
//! publication and carry the JSON's `ETag`, as kube-openapi's do (its
//! protobuf cache re-uses the JSON's ETag, the answer varying by
//! `Accept`). A document gnostic's parser would refuse is served as JSON
//! only: its protobuf is answered `503`, as kube-openapi answers when
//! `ToProtoBinary` fails.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::header::{ACCEPT, LOCATION};
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use prost::Message;
use serde_json::{Map, Value, json};

use crate::body::{Body, Request, Response};
use crate::handler::Handler;
use crate::published::{FIRST_PUBLICATION_WAIT, Published};
use crate::status::GatewayError;
use crate::tagged_document::TaggedDocument;

mod v2_proto;

/// The prefix every OpenAPI path of the gateway is under.
pub(crate) const PREFIX: &str = "/openapi/";
const V2: &str = "/openapi/v2";
const V3: &str = "/openapi/v3";

/// kube-openapi's protobuf media types for v2 (`subTypeProtobufDeprecated`,
/// the one client-go asks for, and `subTypeProtobuf` in
/// `vendor/k8s.io/kube-openapi/pkg/handler/handler.go`); both are
/// answered as the second.
const V2_PROTOBUF_ASKED: [&str; 2] = [
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
];
const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// The sections of a v2 document whose entries are merged by name.
const V2_SECTIONS: [&str; 4] = ["paths", "definitions", "parameters", "responses"];

/// Every OpenAPI document the gateway serves, made again at each refresh.
pub(crate) struct Specs {
    /// `None` when no upstream serves v2.
    v2: Option<V2Document>,
    v3_root: TaggedDocument,
    /// Group version path (`api/v1`, `apis/<group>/<version>`) to document.
    v3: BTreeMap<String, TaggedDocument>,
}

impl Specs {
    /// The served documents of the merged v2 document and the v3 group
    /// versions.
    pub(crate) fn new(v2: Option<Value>, v3: BTreeMap<String, Bytes>) -> Self {
        let v3: BTreeMap<String, TaggedDocument> = v3
            .into_iter()
            .map(|(path, bytes)| (path, TaggedDocument::new(bytes)))
            .collect();
        let paths: Map<String, Value> = v3
            .iter()
            .map(|(path, document)| {
                let url = format!("{V3}/{path}?hash={}", document.hash());
                (path.clone(), json!({"serverRelativeURL": url}))
            })
            .collect();
        Specs {
            v2: v2.as_ref().map(V2Document::new),
            v3_root: TaggedDocument::json(&json!({"paths": paths})),
            v3,
        }
    }

    /// Nothing served yet: no upstream has been asked.
    pub(crate) fn empty() -> Self {
        Specs::new(None, BTreeMap::new())
    }

    /// Whether any upstream serves OpenAPI at all.
    pub(crate) fn is_empty(&self) -> bool {
        self.v2.is_none() && self.v3.is_empty()
    }
}

/// The merged v2 document in both its forms.
struct V2Document {
    json: TaggedDocument,
    /// gnostic's `Document`, tagged as the JSON; why not, for a document
    /// gnostic's parser would refuse.
    protobuf: Result<TaggedDocument, v2_proto::ConversionError>,
}

impl V2Document {
    fn new(document: &Value) -> Self {
        let json = TaggedDocument::json(document);
        let protobuf = v2_proto::document(document)
            .map(|converted| json.other_form(Bytes::from(converted.encode_to_vec())));
        if let Err(error) = &protobuf {
            tracing::warn!(
                %error,
                "the merged OpenAPI v2 document is not one gnostic's parser takes; \
                 it is served as JSON only"
            );
        }
        V2Document { json, protobuf }
    }

    fn serve(&self, request: &Request) -> Result<Response, GatewayError> {
        match negotiate_v2(request.headers())? {
            V2Form::Json => Ok(serve(request, &self.json, Caching::Revalidate)),
            V2Form::Protobuf => {
                let protobuf =
                    self.protobuf
                        .as_ref()
                        .map_err(|error| GatewayError::ServiceUnavailable {
                            message: format!(
                                "the OpenAPI v2 document cannot be served as protobuf: {error}"
                            ),
                        })?;
                Ok(protobuf.serve(
                    request,
                    HeaderValue::from_static(V2_PROTOBUF),
                    "no-cache, private",
                ))
            }
        }
    }
}

/// kube's aggregated v2 document: the union of every upstream's, the first
/// one's entry winning a name; `None` when there are none.
pub(crate) fn merge_v2(specs: &[Value]) -> Option<Value> {
    if specs.is_empty() {
        return None;
    }
    let mut merged = Map::new();
    merged.insert("swagger".to_owned(), json!("2.0"));
    merged.insert(
        "info".to_owned(),
        json!({"title": "Kubernetes", "version": format!("v{}", env!("CARGO_PKG_VERSION"))}),
    );
    for section in V2_SECTIONS {
        let mut entries = Map::new();
        for spec in specs {
            let Some(listed) = spec.get(section).and_then(Value::as_object) else {
                continue;
            };
            for (name, entry) in listed {
                if !entries.contains_key(name) {
                    entries.insert(name.clone(), entry.clone());
                }
            }
        }
        if !entries.is_empty() || section == "paths" {
            merged.insert(section.to_owned(), Value::Object(entries));
        }
    }
    for section in ["securityDefinitions", "security"] {
        if let Some(value) = specs.iter().find_map(|spec| spec.get(section)) {
            merged.insert(section.to_owned(), value.clone());
        }
    }
    Some(Value::Object(merged))
}

/// The handler of everything under `/openapi/`, reading the latest specs.
pub(crate) struct OpenApi {
    specs: Arc<Published<Specs>>,
    /// Keeps the background refresh alive as long as the handler is.
    _refresh: Arc<dyn Send + Sync>,
}

impl OpenApi {
    pub(crate) fn new(specs: Arc<Published<Specs>>, refresh: Arc<dyn Send + Sync>) -> Self {
        OpenApi {
            specs,
            _refresh: refresh,
        }
    }

    fn answer(&self, request: &Request) -> Result<Response, GatewayError> {
        if request.method() != Method::GET && request.method() != Method::HEAD {
            return Err(GatewayError::MethodNotAllowed);
        }
        let specs = self.specs.load();
        let path = request.uri().path();
        if path == V2 {
            let document = specs.v2.as_ref().ok_or(GatewayError::NotFound)?;
            return document.serve(request);
        }
        if specs.is_empty() {
            return Err(GatewayError::NotFound);
        }
        if path == V3 || path == "/openapi/v3/" {
            accept_json(request.headers())?;
            return Ok(serve(request, &specs.v3_root, Caching::Revalidate));
        }
        let group_version = path
            .strip_prefix("/openapi/v3/")
            .ok_or(GatewayError::NotFound)?;
        let document = specs.v3.get(group_version).ok_or(GatewayError::NotFound)?;
        accept_json(request.headers())?;
        match asked_hash(request) {
            None => Ok(serve(request, document, Caching::Revalidate)),
            Some(hash) if hash == document.hash() => Ok(serve(request, document, Caching::Forever)),
            // kube-openapi sends a stale hash to the current one.
            Some(_) => Ok(redirect(&format!(
                "{V3}/{group_version}?hash={}",
                document.hash()
            ))),
        }
    }
}

impl Handler for OpenApi {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        Box::pin(async move {
            self.specs.first(FIRST_PUBLICATION_WAIT).await;
            self.answer(&request)
                .unwrap_or_else(GatewayError::into_response)
        })
    }
}

/// How a client may cache a document: kube-openapi's two headers.
enum Caching {
    /// Asked for without a hash: check again each time.
    Revalidate,
    /// Asked for by its current hash: that URL never changes.
    Forever,
}

fn serve(request: &Request, document: &TaggedDocument, caching: Caching) -> Response {
    let cache_control = match caching {
        Caching::Revalidate => "no-cache, private",
        Caching::Forever => "public, immutable",
    };
    document.serve(
        request,
        HeaderValue::from_static("application/json"),
        cache_control,
    )
}

fn redirect(location: &str) -> Response {
    let mut response = http::Response::new(Body::empty());
    *response.status_mut() = StatusCode::MOVED_PERMANENTLY;
    if let Ok(value) = HeaderValue::try_from(location) {
        response.headers_mut().insert(LOCATION, value);
    }
    response
}

fn asked_hash(request: &Request) -> Option<String> {
    let query = request.uri().query()?;
    url::form_urlencoded::parse(query.as_bytes())
        .find(|(key, _)| key == "hash")
        .map(|(_, value)| value.into_owned())
}

/// The forms `/openapi/v2` is served in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum V2Form {
    Json,
    Protobuf,
}

/// v2's media types in kube-openapi's order, each with its form.
const V2_FORMS: [(&str, V2Form); 3] = [
    ("application/json", V2Form::Json),
    (V2_PROTOBUF_ASKED[0], V2Form::Protobuf),
    (V2_PROTOBUF_ASKED[1], V2Form::Protobuf),
];

fn negotiate_v2(headers: &HeaderMap) -> Result<V2Form, GatewayError> {
    negotiate(headers, &V2_FORMS)
}

/// v3 is served as JSON only: `406` unless the client accepts it.
fn accept_json(headers: &HeaderMap) -> Result<(), GatewayError> {
    negotiate(headers, &[("application/json", ())])
}

/// kube-openapi's choice among `forms` (`vendor/k8s.io/kube-openapi/pkg/handler/handler.go`):
/// the first of `Accept`'s ranges, preferred first ([`crate::accept`]),
/// that takes one of `forms`, in their order, wins; `406` when none does.
/// No `Accept` is `*/*`.
fn negotiate<T: Copy>(headers: &HeaderMap, forms: &[(&str, T)]) -> Result<T, GatewayError> {
    let ranges = crate::accept::ranges(headers);
    let chosen = if headers.get(ACCEPT).is_none() {
        forms.first().map(|(_, form)| *form)
    } else {
        ranges.iter().find_map(|range| {
            forms
                .iter()
                .find(|(media, _)| range.takes(media))
                .map(|(_, form)| *form)
        })
    };
    chosen.ok_or_else(|| {
        let served: Vec<&str> = forms.iter().map(|(media, _)| *media).collect();
        GatewayError::NotAcceptable {
            message: format!(
                "only the following media types are accepted: {}",
                served.join(", ")
            ),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha512};

    #[test]
    fn v2_sections_merge_with_the_first_upstream_winning() {
        let first = json!({"swagger": "2.0", "paths": {"/a": {"get": 1}}, "definitions": {"X": {"type": "string"}}});
        let second = json!({"swagger": "2.0", "paths": {"/a": {"get": 2}, "/b": {}}, "definitions": {"X": {"type": "integer"}, "Y": {}}, "parameters": {"p": {}}});
        let merged = merge_v2(&[first, second]).expect("a merged document");
        assert_eq!(merged["paths"]["/a"]["get"], 1);
        assert!(merged["paths"]["/b"].is_object());
        assert_eq!(merged["definitions"]["X"]["type"], "string");
        assert!(merged["definitions"]["Y"].is_object());
        assert!(merged["parameters"]["p"].is_object());
        assert!(merge_v2(&[]).is_none());
    }

    #[test]
    fn v2_is_served_in_the_form_accept_prefers_as_kube_openapi_chooses() {
        let form = |accept: &str| {
            let mut headers = HeaderMap::new();
            if !accept.is_empty() {
                headers.insert(ACCEPT, HeaderValue::from_str(accept).expect("a header"));
            }
            negotiate_v2(&headers).ok()
        };
        let protobuf = Some(V2Form::Protobuf);
        assert_eq!(form(""), Some(V2Form::Json));
        assert_eq!(form("*/*"), Some(V2Form::Json));
        assert_eq!(form("application/*"), Some(V2Form::Json));
        // What client-go's OpenAPISchema() sends, and the newer name.
        assert_eq!(form(V2_PROTOBUF_ASKED[0]), protobuf);
        assert_eq!(form(V2_PROTOBUF_ASKED[1]), protobuf);
        assert_eq!(
            form(
                "application/json;q=0.5, application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
            ),
            protobuf
        );
        assert_eq!(
            form("*/*, application/com.github.proto-openapi.spec.v2.v1.0+protobuf"),
            protobuf
        );
        assert_eq!(form("application/json, */*"), Some(V2Form::Json));
        assert_eq!(form("application/json;q=0, text/plain"), None);
        // v3 is JSON only, chosen the same way.
        let v3 = |accept: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(ACCEPT, HeaderValue::from_str(accept).expect("a header"));
            accept_json(&headers).is_ok()
        };
        assert!(v3("application/*;q=0.1, text/plain"));
        assert!(!v3(V2_PROTOBUF_ASKED[0]));
    }

    #[test]
    fn the_v2_protobuf_is_gnostics_document_tagged_as_the_json() {
        let merged = json!({
            "swagger": "2.0",
            "info": {"title": "Kubernetes", "version": "v1"},
            "paths": {"/api/v1": {"get": {"responses": {"200": {"description": "OK"}}}}},
        });
        let document = V2Document::new(&merged);
        let protobuf = document.protobuf.as_ref().expect("gnostic takes it");
        assert_eq!(protobuf.hash(), document.json.hash());
        let decoded =
            v2_proto::gnostic::Document::decode(protobuf.bytes().clone()).expect("protobuf");
        assert_eq!(decoded.swagger, "2.0");
        assert_eq!(decoded.paths.expect("paths").path[0].name, "/api/v1");
        let refused = V2Document::new(&json!({"swagger": "2.0", "paths": {}}));
        assert!(refused.protobuf.is_err());
    }

    #[test]
    fn the_v3_root_names_each_document_by_its_hash() {
        let specs = Specs::new(
            None,
            BTreeMap::from([("api/v1".to_owned(), Bytes::from_static(b"{}"))]),
        );
        let root: Value = serde_json::from_slice(specs.v3_root.bytes()).expect("JSON");
        let url = root["paths"]["api/v1"]["serverRelativeURL"]
            .as_str()
            .expect("a URL");
        assert_eq!(
            url,
            format!(
                "/openapi/v3/api/v1?hash={}",
                hex::encode_upper(Sha512::digest(b"{}"))
            )
        );
    }
}
