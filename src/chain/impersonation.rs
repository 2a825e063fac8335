//! Impersonation (kube's `WithImpersonation`): a request may act as another
//! user with `Impersonate-User`, `Impersonate-Group`, `Impersonate-Uid` and
//! `Impersonate-Extra-<key>` headers. Each requested attribute is checked
//! through the authorization union with verb `impersonate` (on `users`,
//! `groups`, `serviceaccounts`, `uids`, `userextras/<key>`); when all are
//! allowed the request goes on as the impersonated user and the headers are
//! removed. The audit event records both users.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use http::HeaderMap;

use super::audit::AuditContext;
use super::authorization::{Authorizers, Verdict, forbidden};
use super::stage::FilterTrace;
use crate::body::{Request, Response};
use crate::context::UserInfo;
use crate::handler::{Handler, SharedHandler};
use crate::request_info::RequestInfo;
use crate::status::GatewayError;

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";
const UID: &str = "impersonate-uid";
const EXTRA_PREFIX: &str = "impersonate-extra-";
const IMPERSONATE_PREFIX: &str = "impersonate-";

pub struct Impersonation {
    /// None when authorization allows everything.
    pub authorizers: Option<Arc<Authorizers>>,
    pub next: SharedHandler,
}

/// What the headers ask for.
struct Requested {
    user: String,
    groups: Vec<String>,
    uid: Option<String>,
    extra: Vec<(String, Vec<String>)>,
}

impl Handler for Impersonation {
    fn call(&self, mut request: Request) -> BoxFuture<'_, Response> {
        // Most requests impersonate no one: they go straight on.
        let requested = match requested(request.headers()) {
            Ok(Some(requested)) => requested,
            Ok(None) => return self.next.call(request),
            Err(error) => return Box::pin(std::future::ready(error.into_response())),
        };
        Box::pin(async move {
            let Some(requester) = request.extensions().get::<UserInfo>().cloned() else {
                return GatewayError::internal("the request reached impersonation without a user")
                    .into_response();
            };
            let trace = request.extensions().get::<FilterTrace>().cloned();
            for check in checks(&requested) {
                if let Err(error) = self.permit(&requester, &check, trace.as_ref()).await {
                    return error.into_response();
                }
            }
            let impersonated = impersonated_user(requested);
            tracing::debug!(requester = %requester.name, as_user = %impersonated.name, "impersonating");
            if let Some(audit) = request.extensions().get::<AuditContext>() {
                audit.impersonating(&impersonated);
            }
            remove_impersonation_headers(request.headers_mut());
            request.extensions_mut().insert(impersonated);
            self.next.call(request).await
        })
    }
}

impl Impersonation {
    async fn permit(
        &self,
        requester: &UserInfo,
        check: &RequestInfo,
        trace: Option<&FilterTrace>,
    ) -> Result<(), GatewayError> {
        let Some(authorizers) = &self.authorizers else {
            return Ok(());
        };
        match authorizers.decide(requester, check, trace).await {
            Verdict::Allow => Ok(()),
            Verdict::Deny(reason) => Err(forbidden(requester, check, &reason)),
            Verdict::Failed(error) => Err(error),
        }
    }
}

fn requested(headers: &HeaderMap) -> Result<Option<Requested>, GatewayError> {
    // Most requests carry no Impersonate-* header: one pass over the names
    // tells, before any lookup by name.
    if !headers
        .keys()
        .any(|name| name.as_str().starts_with(IMPERSONATE_PREFIX))
    {
        return Ok(None);
    }
    let values = |name: &str| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_owned)
            .collect()
    };
    let user = values(USER).into_iter().next();
    let groups = values(GROUP);
    let uid = values(UID).into_iter().next();
    let mut extra: Vec<(String, Vec<String>)> = Vec::new();
    for name in headers
        .keys()
        .filter(|name| name.as_str().starts_with(EXTRA_PREFIX))
    {
        let key = name.as_str()[EXTRA_PREFIX.len()..].to_owned();
        // kube percent-decodes extra keys (they may hold '/').
        let key = percent_decode(&key);
        extra.push((key, values(name.as_str())));
    }
    match user {
        Some(user) => Ok(Some(Requested {
            user,
            groups,
            uid,
            extra,
        })),
        None if groups.is_empty() && uid.is_none() && extra.is_empty() => Ok(None),
        None => Err(GatewayError::BadRequest {
            message: "impersonating groups, a uid or extra attributes requires Impersonate-User"
                .to_owned(),
        }),
    }
}

/// kube's `url.PathUnescape`: `%XX` decoded, `+` kept (form decoding would
/// make it a space, so it is escaped first).
fn percent_decode(text: &str) -> String {
    let text = text.replace('+', "%2B");
    url::form_urlencoded::parse(format!("k={text}").as_bytes())
        .next()
        .map_or_else(|| text.to_owned(), |(_, value)| value.into_owned())
}

/// The authorization questions an impersonation asks, one per attribute.
fn checks(requested: &Requested) -> Vec<RequestInfo> {
    let check =
        |group: &str, resource: &str, subresource: &str, namespace: &str, name: &str| RequestInfo {
            is_resource_request: true,
            verb: "impersonate".to_owned(),
            api_group: group.to_owned(),
            resource: resource.to_owned(),
            subresource: subresource.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            ..RequestInfo::default()
        };
    let mut checks = Vec::new();
    match service_account(&requested.user) {
        Some((namespace, name)) => checks.push(check("", "serviceaccounts", "", namespace, name)),
        None => checks.push(check("", "users", "", "", &requested.user)),
    }
    for group in &requested.groups {
        checks.push(check("", "groups", "", "", group));
    }
    if let Some(uid) = &requested.uid {
        checks.push(check("authentication.k8s.io", "uids", "", "", uid));
    }
    for (key, values) in &requested.extra {
        for value in values {
            checks.push(check("authentication.k8s.io", "userextras", key, "", value));
        }
    }
    checks
}

fn service_account(user: &str) -> Option<(&str, &str)> {
    user.strip_prefix("system:serviceaccount:")?.split_once(':')
}

/// The user the request goes on as: kube adds `system:authenticated` to a
/// non-anonymous impersonated user, and a service account's groups.
fn impersonated_user(requested: Requested) -> UserInfo {
    let mut groups = requested.groups;
    if let Some((namespace, _)) = service_account(&requested.user) {
        for group in [
            "system:serviceaccounts".to_owned(),
            format!("system:serviceaccounts:{namespace}"),
        ] {
            if !groups.contains(&group) {
                groups.push(group);
            }
        }
    }
    if requested.user != "system:anonymous" && !groups.iter().any(|g| g == "system:authenticated") {
        groups.push("system:authenticated".to_owned());
    }
    UserInfo {
        name: requested.user,
        uid: requested.uid.unwrap_or_default(),
        groups,
        extra: requested.extra,
    }
}

fn remove_impersonation_headers(headers: &mut HeaderMap) {
    let names: Vec<_> = headers
        .keys()
        .filter(|name| name.as_str().starts_with(IMPERSONATE_PREFIX))
        .cloned()
        .collect();
    for name in names {
        headers.remove(name);
    }
}
