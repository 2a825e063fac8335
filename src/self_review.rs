//! What a client may ask the server about itself: kube's
//! `SelfSubjectAccessReview` and `SelfSubjectRulesReview`
//! (`pkg/registry/authorization/selfsubjectaccessreview/rest.go`,
//! `selfsubjectrulesreview/rest.go`) and `SelfSubjectReview`
//! (`pkg/registry/authentication/selfsubjectreview/rest.go`), answered by
//! the gateway from the user authentication settled on and the authorizer
//! union of the authorization stage. `kubectl auth can-i` and `kubectl auth
//! whoami` ask these.
//!
//! The authorization stage hands its union down in the request's extensions;
//! without the stage every request is allowed, so every review is too (kube's
//! `AlwaysAllow`). Wasm authorizers cannot list their rules, so a rules review
//! is kube's `incomplete: true` answer unless there are none.
//!
//! The delegation chain installs this handler only when no route of any
//! server claims these paths: a real API server behind the gateway then
//! answers for itself.

use std::sync::Arc;

use compact_str::CompactString;
use futures_util::future::BoxFuture;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Method, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};

use crate::body::{Body, Request, Response};
use crate::chain::authorization::{Authorizers, Verdict};
use crate::chain::stage::Watchers;
use crate::context::{RequestContext, UserInfo};
use crate::handler::Handler;
use crate::request_info::RequestInfo;
use crate::status::GatewayError;

pub(crate) const AUTHORIZATION_VERSION: &str = "/apis/authorization.k8s.io/v1";
pub(crate) const AUTHENTICATION_VERSION: &str = "/apis/authentication.k8s.io/v1";
const ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
const RULES_REVIEWS: &str = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews";
const SELF_REVIEWS: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";

/// A resource's plural name and kind.
type Resource = (&'static str, &'static str);

/// Each API group version this module serves, with its review resources,
/// for discovery.
pub(crate) const GROUP_VERSIONS: [(&str, &str, &[Resource]); 2] = [
    (
        "authorization.k8s.io",
        "v1",
        &[
            ("selfsubjectaccessreviews", "SelfSubjectAccessReview"),
            ("selfsubjectrulesreviews", "SelfSubjectRulesReview"),
        ],
    ),
    (
        "authentication.k8s.io",
        "v1",
        &[("selfsubjectreviews", "SelfSubjectReview")],
    ),
];

/// The three reviews, and the resource lists of their group versions.
pub(crate) struct SelfReviews;

/// What a request to this handler asks for.
enum Asked {
    ResourceList(
        &'static str,
        &'static str,
        &'static [(&'static str, &'static str)],
    ),
    AccessReview,
    RulesReview,
    SelfReview,
}

impl Handler for SelfReviews {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        Box::pin(async move {
            match answer(request).await {
                Ok(response) => response,
                Err(error) => error.into_response(),
            }
        })
    }
}

async fn answer(request: Request) -> Result<Response, GatewayError> {
    let asked = asked(request.method(), request.uri().path())?;
    let document = match asked {
        Asked::ResourceList(group, version, resources) => {
            let list = resource_list(&format!("{group}/{version}"), resources);
            return Ok(json_response(StatusCode::OK, &list));
        }
        Asked::SelfReview => self_review(user_of(&request)?),
        Asked::AccessReview => {
            let user = user_of(&request)?.clone();
            let authorizers = request.extensions().get::<Arc<Authorizers>>().cloned();
            // The review's authorizer calls are in the request's trace.
            let watchers = Watchers::of(request.extensions());
            let review = read_review(request, "SelfSubjectAccessReview").await?;
            access_review(review, &user, authorizers.as_deref(), &watchers).await?
        }
        Asked::RulesReview => {
            let unlisted = request.extensions().get::<Arc<Authorizers>>().is_some();
            let review = read_review(request, "SelfSubjectRulesReview").await?;
            rules_review(review, unlisted)
        }
    };
    Ok(json_response(StatusCode::CREATED, &document))
}

fn asked(method: &Method, path: &str) -> Result<Asked, GatewayError> {
    let path = path.strip_suffix('/').unwrap_or(path);
    let post = |asked| {
        if method == Method::POST {
            Ok(asked)
        } else {
            Err(GatewayError::MethodNotAllowed)
        }
    };
    match path {
        ACCESS_REVIEWS => post(Asked::AccessReview),
        RULES_REVIEWS => post(Asked::RulesReview),
        SELF_REVIEWS => post(Asked::SelfReview),
        AUTHORIZATION_VERSION | AUTHENTICATION_VERSION
            if method == Method::GET || method == Method::HEAD =>
        {
            GROUP_VERSIONS
                .iter()
                .find(|(group, version, _)| path == format!("/apis/{group}/{version}"))
                .map(|(group, version, resources)| Asked::ResourceList(group, version, resources))
                .ok_or(GatewayError::NotFound)
        }
        AUTHORIZATION_VERSION | AUTHENTICATION_VERSION => Err(GatewayError::MethodNotAllowed),
        _ => Err(GatewayError::NotFound),
    }
}

fn user_of(request: &Request) -> Result<&UserInfo, GatewayError> {
    RequestContext::of(request.extensions())
        .user
        .as_deref()
        .ok_or_else(|| GatewayError::internal("the review reached its handler without a user"))
}

/// The review object the client posted, checked to be of `kind`.
async fn read_review(request: Request, kind: &str) -> Result<Value, GatewayError> {
    let limit = RequestContext::of(request.extensions())
        .max_body
        .map_or(0, |limit| limit.0);
    let protobuf = request
        .headers()
        .get(CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(wire::CONTENT_TYPE.as_bytes()));
    let bytes = request
        .into_body()
        .collect()
        .await
        .map_err(|error| GatewayError::body_unreadable(&*error, limit))?
        .to_bytes();
    let review: Value = if protobuf && kind == "SelfSubjectRulesReview" {
        // Nothing of its spec (a namespace) changes the answer.
        json!({"spec": {}})
    } else if protobuf {
        wire::review(&bytes).ok_or_else(|| GatewayError::BadRequest {
            message: format!("the {kind} is not valid protobuf"),
        })?
    } else {
        serde_json::from_slice(&bytes).map_err(|error| GatewayError::BadRequest {
            message: format!("the {kind} is not valid JSON: {error}"),
        })?
    };
    match review.get("kind").and_then(Value::as_str) {
        Some(sent) if sent == kind => Ok(review),
        None => Ok(review),
        Some(sent) => Err(GatewayError::BadRequest {
            message: format!("expected a {kind}, got a {sent}"),
        }),
    }
}

/// kube's `SelfSubjectAccessReview`: the attributes of the spec, asked of the
/// union for the requesting user.
async fn access_review(
    mut review: Value,
    user: &UserInfo,
    authorizers: Option<&Authorizers>,
    watchers: &Watchers,
) -> Result<Value, GatewayError> {
    let info = attributes(&review["spec"])?;
    let status = match authorizers {
        None => json!({"allowed": true}),
        Some(authorizers) => match authorizers.decide(user, &info, watchers).await {
            Verdict::Allow => json!({"allowed": true}),
            Verdict::Deny(reason) => json!({"allowed": false, "reason": reason}),
            Verdict::Failed(error) => {
                json!({"allowed": false, "evaluationError": error.to_string()})
            }
        },
    };
    review["status"] = status;
    Ok(complete_object(
        review,
        "authorization.k8s.io/v1",
        "SelfSubjectAccessReview",
    ))
}

/// The request a review's `spec` describes, as the authorization stage would
/// see it (kube's `ResourceAttributesFrom` / `NonResourceAttributesFrom`).
fn attributes(spec: &Value) -> Result<RequestInfo, GatewayError> {
    let text =
        |value: &Value, key: &str| CompactString::from(value[key].as_str().unwrap_or_default());
    if let Some(resource) = spec.get("resourceAttributes").filter(|v| v.is_object()) {
        let (name, subresource) = (text(resource, "name"), text(resource, "subresource"));
        let mut parts = vec![text(resource, "resource")];
        if !name.is_empty() {
            parts.push(name.clone());
        }
        if !subresource.is_empty() {
            parts.push(subresource.clone());
        }
        return Ok(RequestInfo {
            is_resource_request: true,
            verb: text(resource, "verb"),
            api_prefix: "apis".into(),
            api_group: text(resource, "group"),
            api_version: text(resource, "version"),
            namespace: text(resource, "namespace"),
            resource: text(resource, "resource"),
            subresource,
            name,
            parts,
            ..RequestInfo::default()
        });
    }
    if let Some(non_resource) = spec.get("nonResourceAttributes").filter(|v| v.is_object()) {
        return Ok(RequestInfo {
            is_resource_request: false,
            path: text(non_resource, "path"),
            verb: text(non_resource, "verb"),
            ..RequestInfo::default()
        });
    }
    Err(GatewayError::Invalid {
        message: "SelfSubjectAccessReview.authorization.k8s.io \"\" is invalid: spec: Invalid value: exactly one of nonResourceAttributes or resourceAttributes must be specified".to_owned(),
    })
}

/// kube's `SelfSubjectRulesReview`. Without authorizers everything is
/// allowed, which the rules say in full; Wasm authorizers cannot enumerate
/// what they allow, so the answer is empty and `incomplete`.
fn rules_review(mut review: Value, unlisted: bool) -> Value {
    review["status"] = if unlisted {
        json!({
            "resourceRules": [],
            "nonResourceRules": [],
            "incomplete": true,
            "evaluationError": "the gateway's authorizers are filters that cannot list their rules",
        })
    } else {
        json!({
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": false,
        })
    };
    complete_object(review, "authorization.k8s.io/v1", "SelfSubjectRulesReview")
}

/// kube's `SelfSubjectReview`: the user as authentication settled on it.
fn self_review(user: &UserInfo) -> Value {
    let extra: serde_json::Map<String, Value> = user
        .extra
        .iter()
        .map(|(key, values)| (key.clone(), json!(values)))
        .collect();
    let mut user_info = json!({"username": user.name, "groups": user.groups});
    if !user.uid.is_empty() {
        user_info["uid"] = json!(user.uid);
    }
    if !extra.is_empty() {
        user_info["extra"] = Value::Object(extra);
    }
    json!({
        "kind": "SelfSubjectReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": now()},
        "status": {"userInfo": user_info},
    })
}

/// The posted object as kube returns it: its type set, a creation time.
fn complete_object(mut review: Value, api_version: &str, kind: &str) -> Value {
    review["apiVersion"] = json!(api_version);
    review["kind"] = json!(kind);
    if !review["metadata"].is_object() {
        review["metadata"] = json!({});
    }
    review["metadata"]["creationTimestamp"] = json!(now());
    review
}

/// Now, to the second; a clock set before 1970 gives the epoch (humantime
/// would panic).
fn now() -> String {
    let now = std::time::SystemTime::now().max(std::time::SystemTime::UNIX_EPOCH);
    humantime::format_rfc3339_seconds(now).to_string()
}

/// kube's `APIResourceList` for one of the review group versions.
fn resource_list(group_version: &str, resources: &[Resource]) -> Value {
    let resources: Vec<Value> = resources
        .iter()
        .map(|(name, kind)| {
            json!({
                "name": name,
                "singularName": name.strip_suffix('s').unwrap_or(name),
                "namespaced": false,
                "kind": kind,
                "verbs": ["create"],
            })
        })
        .collect();
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources})
}

fn json_response(status: StatusCode, document: &Value) -> Response {
    let mut response = http::Response::new(Body::full(document.to_string()));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// kube's protobuf encoding of the reviews kubectl posts (it sends its own
/// types as `application/vnd.kubernetes.protobuf`): the `k8s\0` envelope
/// around a `runtime.Unknown`, the review inside
/// (`staging/src/k8s.io/api/authorization/v1/generated.proto`). The answer
/// is JSON, which client-go decodes by the response's content type.
mod wire {
    use serde_json::{Value, json};

    pub(crate) const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";
    const MAGIC: &[u8] = b"k8s\0";

    #[derive(prost::Message)]
    struct Unknown {
        #[prost(bytes = "vec", tag = "2")]
        raw: Vec<u8>,
    }

    /// A `SelfSubjectAccessReview` or `SelfSubjectRulesReview`: the spec is
    /// field 2 of both.
    #[derive(prost::Message)]
    struct Review {
        #[prost(message, optional, tag = "2")]
        spec: Option<Spec>,
    }

    #[derive(prost::Message)]
    struct Spec {
        #[prost(message, optional, tag = "1")]
        resource_attributes: Option<ResourceAttributes>,
        #[prost(message, optional, tag = "2")]
        non_resource_attributes: Option<NonResourceAttributes>,
    }

    #[derive(prost::Message)]
    struct ResourceAttributes {
        #[prost(string, tag = "1")]
        namespace: String,
        #[prost(string, tag = "2")]
        verb: String,
        #[prost(string, tag = "3")]
        group: String,
        #[prost(string, tag = "4")]
        version: String,
        #[prost(string, tag = "5")]
        resource: String,
        #[prost(string, tag = "6")]
        subresource: String,
        #[prost(string, tag = "7")]
        name: String,
    }

    #[derive(prost::Message)]
    struct NonResourceAttributes {
        #[prost(string, tag = "1")]
        path: String,
        #[prost(string, tag = "2")]
        verb: String,
    }

    /// The review as its JSON form, or `None` when the bytes are not one.
    pub(crate) fn review(bytes: &[u8]) -> Option<Value> {
        use prost::Message;
        let unknown = Unknown::decode(bytes.strip_prefix(MAGIC)?).ok()?;
        let spec = Review::decode(unknown.raw.as_slice())
            .ok()?
            .spec
            .unwrap_or_default();
        let mut json_spec = json!({});
        if let Some(r) = spec.resource_attributes {
            json_spec["resourceAttributes"] = json!({
                "namespace": r.namespace, "verb": r.verb, "group": r.group,
                "version": r.version, "resource": r.resource,
                "subresource": r.subresource, "name": r.name,
            });
        }
        if let Some(n) = spec.non_resource_attributes {
            json_spec["nonResourceAttributes"] = json!({"path": n.path, "verb": n.verb});
        }
        Some(json!({"spec": json_spec}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resource_spec_becomes_resource_attributes() {
        let spec = json!({"resourceAttributes": {"namespace": "ns", "verb": "get", "group": "apps", "resource": "deployments", "name": "web", "subresource": "scale"}});
        let info = attributes(&spec).expect("attributes");
        assert!(info.is_resource_request);
        assert_eq!(info.parts, ["deployments", "web", "scale"]);
        assert_eq!(
            (info.verb.as_str(), info.api_group.as_str()),
            ("get", "apps")
        );
    }

    #[test]
    fn a_spec_with_neither_attribute_is_invalid() {
        assert!(matches!(
            attributes(&json!({})),
            Err(GatewayError::Invalid { .. })
        ));
    }

    #[test]
    fn reviews_take_only_post() {
        assert!(matches!(
            asked(&Method::GET, ACCESS_REVIEWS),
            Err(GatewayError::MethodNotAllowed)
        ));
        assert!(matches!(
            asked(&Method::GET, AUTHENTICATION_VERSION),
            Ok(Asked::ResourceList("authentication.k8s.io", "v1", _))
        ));
    }
}
