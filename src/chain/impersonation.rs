//! Impersonation (kube's `WithImpersonation`,
//! `staging/src/k8s.io/apiserver/pkg/endpoints/filters/impersonation/impersonation.go`):
//! a request may act as another user with `Impersonate-User`,
//! `Impersonate-Group`, `Impersonate-Uid` and `Impersonate-Extra-<key>`
//! headers. Each requested attribute is checked through the authorization
//! union with verb `impersonate` (on `users` or `serviceaccounts`, then
//! `groups`, `userextras/<key>` and `uids`, kube's order), as the requesting
//! user (the union's caches key by that user); the first not allowed, denied
//! or failed, is kube's 403. When all are allowed the request goes on as the
//! impersonated user and the headers are removed. The audit event records
//! both users.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use http::HeaderMap;

use super::audit::AuditContext;
use super::authorization::{Authorizers, Verdict, forbidden};
use super::stage::Watchers;
use crate::body::{Request, Response};
use crate::context::{RequestContext, RequestReport, UserInfo};
use crate::handler::{Handler, SharedHandler};
use crate::request_info::{
    RequestInfo, is_dns1123_label, is_dns1123_subdomain, percent_decode_strict,
};
use crate::status::GatewayError;

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";
const UID: &str = "impersonate-uid";
const EXTRA_PREFIX: &str = "impersonate-extra-";
const IMPERSONATE_PREFIX: &str = "impersonate-";

pub(crate) struct Impersonation {
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
            let Some(requester) = RequestContext::of(request.extensions()).user.clone() else {
                return GatewayError::internal("the request reached impersonation without a user")
                    .into_response();
            };
            let watchers = Watchers::of(request.extensions());
            for check in checks(&requested) {
                if let Err(error) = self.permit(&requester, &check, &watchers).await {
                    return error.into_response();
                }
            }
            let impersonated = Arc::new(impersonated_user(requested));
            tracing::debug!(requester = %requester.name, as_user = %impersonated.name, "impersonating");
            if let Some(audit) = request.extensions().get::<AuditContext>() {
                audit.impersonating(&impersonated);
            }
            if let Some(report) = request.extensions().get::<RequestReport>() {
                report.impersonating(&impersonated);
            }
            remove_impersonation_headers(request.headers_mut());
            RequestContext::learn(request.extensions_mut()).user = Some(impersonated);
            self.next.call(request).await
        })
    }
}

impl Impersonation {
    async fn permit(
        &self,
        requester: &UserInfo,
        check: &RequestInfo,
        watchers: &Watchers,
    ) -> Result<(), GatewayError> {
        let Some(authorizers) = &self.authorizers else {
            return Ok(());
        };
        match authorizers.decide(requester, check, watchers).await {
            Verdict::Allow => Ok(()),
            Verdict::Deny(reason) => Err(forbidden(requester, check, &reason)),
            Verdict::Failed(error) => Err(refused_on_failure(requester, check, error)),
        }
    }
}

/// kube's `WithImpersonation` answers an authorizer's error as it answers a
/// denial, with its 403 (`if err != nil || decision != authorizer.DecisionAllow`):
/// a fail-closed filter's error, trap or timeout is that 403, what failed
/// (the words of the stage's 500 or 503) its reason. A stage at capacity
/// stays a 429: the gateway had no room to ask, and the client is to try
/// again.
fn refused_on_failure(
    requester: &UserInfo,
    check: &RequestInfo,
    error: GatewayError,
) -> GatewayError {
    match error {
        GatewayError::TooManyRequests { .. } => error,
        GatewayError::Internal { message } | GatewayError::ServiceUnavailable { message } => {
            forbidden(requester, check, &message)
        }
        other => forbidden(requester, check, &other.to_string()),
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
    // Every value, as Go's header keeps its bytes: one outside visible
    // ASCII is read as the authenticators' headers are (UTF-8, an invalid
    // byte replaced), not left out.
    let values = |name: &str| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
            .collect()
    };
    // As kube's `headers.Get(...)` with `len(...) > 0`: an empty user or
    // uid is none.
    let first = |name: &str| values(name).into_iter().next().filter(|v| !v.is_empty());
    let user = first(USER);
    let groups = values(GROUP);
    let uid = first(UID);
    let mut extra: Vec<(String, Vec<String>)> = Vec::new();
    for name in headers
        .keys()
        .filter(|name| name.as_str().starts_with(EXTRA_PREFIX))
    {
        let key = unescape_extra_key(&name.as_str()[EXTRA_PREFIX.len()..]);
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
        None => Err(without_a_user(&groups, &extra, uid.as_deref())),
    }
}

/// kube's 400 for groups, extras or a uid asked for without a user:
/// `requested [...] without impersonating a user`, the list of what was
/// asked as Go's `%v` prints kube's object references
/// (`{Kind Namespace Name UID APIVersion ResourceVersion FieldPath}`), in
/// kube's order: groups, extras, the uid.
fn without_a_user(
    groups: &[String],
    extra: &[(String, Vec<String>)],
    uid: Option<&str>,
) -> GatewayError {
    const VERSION: &str = "authentication.k8s.io/v1";
    let mut asked: Vec<String> = groups
        .iter()
        .map(|group| format!("{{Group  {group}    }}"))
        .collect();
    for (key, values) in extra {
        asked.extend(
            values
                .iter()
                .map(|value| format!("{{UserExtra  {value}  {VERSION}  {key}}}")),
        );
    }
    asked.extend(uid.map(|uid| format!("{{UID  {uid}  {VERSION}  }}")));
    GatewayError::BadRequest {
        message: format!(
            "requested [{}] without impersonating a user",
            asked.join(" ")
        ),
    }
}

/// kube's `unescapeExtraKey`: the key `url.PathUnescape`d (they may hold
/// `/`), every other byte as sent (`+`, `&`, `=`); a malformed escape leaves
/// the key as sent.
fn unescape_extra_key(key: &str) -> String {
    match percent_decode_strict(key) {
        Some(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        None => key.to_owned(),
    }
}

/// The authorization questions an impersonation asks, one per attribute, in
/// kube's order (`buildImpersonationRequests`): the user or service account,
/// the groups, each extra's values, the uid. The first not allowed decides
/// the 403, and no question after it is asked. The version is the one
/// kube's object reference names (`APIVersion: gvk.Version`): `v1` for
/// `userextras` and `uids`, whose references say `authentication.k8s.io/v1`,
/// none for `users`, `serviceaccounts` and `groups`, whose references name
/// a kind alone.
fn checks(requested: &Requested) -> Vec<RequestInfo> {
    let check =
        |group: &str, resource: &str, subresource: &str, namespace: &str, name: &str| RequestInfo {
            is_resource_request: true,
            verb: "impersonate".into(),
            api_group: group.into(),
            api_version: if group.is_empty() { "" } else { "v1" }.into(),
            resource: resource.into(),
            subresource: subresource.into(),
            namespace: namespace.into(),
            name: name.into(),
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
    for (key, values) in &requested.extra {
        for value in values {
            checks.push(check("authentication.k8s.io", "userextras", key, "", value));
        }
    }
    if let Some(uid) = &requested.uid {
        checks.push(check("authentication.k8s.io", "uids", "", "", uid));
    }
    checks
}

/// A service account's namespace and name, as kube's `SplitUsername`
/// (`staging/src/k8s.io/apiserver/pkg/authentication/serviceaccount/util.go`)
/// reads them: `system:serviceaccount:<namespace>:<name>`, the namespace a
/// DNS label, the name a DNS subdomain. Any other name is a user's.
fn service_account(user: &str) -> Option<(&str, &str)> {
    let (namespace, name) = user
        .strip_prefix("system:serviceaccount:")?
        .split_once(':')?;
    (is_dns1123_label(namespace) && is_dns1123_subdomain(name)).then_some((namespace, name))
}

/// The user the request goes on as, as kube makes it: a service account
/// is in its groups when no group is named; then `system:authenticated` or,
/// for `system:anonymous`, `system:unauthenticated` is added as
/// [`UserInfo::add_authenticated_group`] and
/// [`UserInfo::add_unauthenticated_group`] say.
fn impersonated_user(requested: Requested) -> UserInfo {
    let mut groups = requested.groups;
    if groups.is_empty()
        && let Some((namespace, _)) = service_account(&requested.user)
    {
        groups = vec![
            "system:serviceaccounts".to_owned(),
            format!("system:serviceaccounts:{namespace}"),
        ];
    }
    let mut user = UserInfo {
        name: requested.user,
        uid: requested.uid.unwrap_or_default(),
        groups,
        extra: requested.extra,
    };
    user.add_authenticated_group();
    user.add_unauthenticated_group();
    user
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

#[cfg(test)]
mod tests {
    //! kube's `WithImpersonation` (`staging/src/k8s.io/apiserver/pkg/endpoints/filters/impersonation/impersonation.go`),
    //! checked on the filter alone with authorization allowing everything
    //! (the checks through real authorizers run in the integration tests),
    //! in front of a stub next handler that records the user it ran as and
    //! the headers it got.

    use std::sync::Mutex;

    use http::StatusCode;

    use super::*;

    /// The next step: records the request's user and header names.
    #[derive(Default)]
    struct Recording(Mutex<Option<(Option<UserInfo>, Vec<String>)>>);

    impl Recording {
        fn seen(&self) -> (Option<UserInfo>, Vec<String>) {
            self.0
                .lock()
                .expect("the record")
                .clone()
                .expect("the request reached the next handler")
        }
    }

    impl Handler for Recording {
        fn call(&self, request: Request) -> BoxFuture<'_, Response> {
            let user = RequestContext::of(request.extensions())
                .user
                .as_deref()
                .cloned();
            let names = request
                .headers()
                .keys()
                .map(|name| name.as_str().to_owned())
                .collect();
            *self.0.lock().expect("the record") = Some((user, names));
            Box::pin(async { http::Response::new(crate::body::Body::empty()) })
        }
    }

    fn impersonation() -> (Impersonation, Arc<Recording>) {
        let next = Arc::new(Recording::default());
        let filter = Impersonation {
            authorizers: None,
            next: next.clone(),
        };
        (filter, next)
    }

    fn alice() -> UserInfo {
        UserInfo {
            name: "alice".to_owned(),
            groups: vec!["dev".to_owned(), "system:authenticated".to_owned()],
            ..UserInfo::default()
        }
    }

    /// A request by alice with `headers`.
    fn request(headers: &[(&str, &str)]) -> Request {
        let mut builder = http::Request::builder().uri("/api/v1/pods");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let mut request = builder.body(crate::body::Body::empty()).expect("a request");
        RequestContext::learn(request.extensions_mut()).user = Some(Arc::new(alice()));
        request
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|item| (*item).to_owned()).collect()
    }

    /// impersonation.go: without `Impersonate-*` headers the request goes on
    /// as its own user.
    #[tokio::test]
    async fn without_impersonation_headers_the_request_runs_as_its_user() {
        let (filter, next) = impersonation();
        let response = filter.call(request(&[("accept", "*/*")])).await;
        assert_eq!(response.status(), StatusCode::OK);
        let (user, names) = next.seen();
        assert_eq!(user, Some(alice()));
        assert_eq!(names, ["accept"]);
    }

    /// impersonation.go: an allowed impersonation goes on as the requested
    /// user, uid, groups and extras (extra keys percent-decoded, `+` kept),
    /// with `system:authenticated` added, and the headers removed.
    #[tokio::test]
    async fn the_request_goes_on_as_the_impersonated_user_without_the_headers() {
        let (filter, next) = impersonation();
        let response = filter
            .call(request(&[
                ("impersonate-user", "bob"),
                ("impersonate-group", "viewers"),
                ("impersonate-uid", "1002"),
                ("impersonate-extra-reason%2fwhy", "on+call"),
                ("accept", "*/*"),
            ]))
            .await;
        assert_eq!(response.status(), StatusCode::OK);
        let (user, names) = next.seen();
        assert_eq!(
            user,
            Some(UserInfo {
                name: "bob".to_owned(),
                uid: "1002".to_owned(),
                groups: strings(&["viewers", "system:authenticated"]),
                extra: vec![("reason/why".to_owned(), strings(&["on+call"]))],
            })
        );
        assert_eq!(names, ["accept"]);
    }

    /// impersonation.go: a service account gets `system:serviceaccounts` and
    /// `system:serviceaccounts:<namespace>`; the anonymous user gets
    /// `system:unauthenticated`, not `system:authenticated`.
    #[tokio::test]
    async fn service_accounts_get_their_groups_and_anonymous_is_unauthenticated() {
        let (filter, next) = impersonation();
        filter
            .call(request(&[(
                "impersonate-user",
                "system:serviceaccount:kube-system:builder",
            )]))
            .await;
        let (user, _) = next.seen();
        assert_eq!(
            user.map(|user| user.groups),
            Some(strings(&[
                "system:serviceaccounts",
                "system:serviceaccounts:kube-system",
                "system:authenticated",
            ]))
        );
        filter
            .call(request(&[("impersonate-user", "system:anonymous")]))
            .await;
        let (user, _) = next.seen();
        assert_eq!(
            user.map(|user| user.groups),
            Some(strings(&["system:unauthenticated"]))
        );
    }

    /// impersonation.go: each attribute is asked about with verb
    /// `impersonate`, on its resource (an extra's key as the subresource),
    /// in its group and at its reference's version (`APIVersion:
    /// gvk.Version`: `v1` of `authentication.k8s.io/v1`, none for a
    /// reference that names a kind alone), in `buildImpersonationRequests`'
    /// order: the user, the groups, the extras, the uid last.
    #[test]
    fn each_attribute_is_asked_about_as_kube_asks() {
        let requested = Requested {
            user: "system:serviceaccount:ci:robot".to_owned(),
            groups: strings(&["dev"]),
            uid: Some("1002".to_owned()),
            extra: vec![("acme.io/team".to_owned(), strings(&["red"]))],
        };
        let asked: Vec<_> = checks(&requested)
            .iter()
            .map(|check| {
                let fields = [
                    &check.verb,
                    &check.api_group,
                    &check.api_version,
                    &check.namespace,
                    &check.resource,
                    &check.subresource,
                    &check.name,
                ];
                fields.map(|field| field.as_str()).join(" ")
            })
            .collect();
        assert_eq!(
            asked,
            [
                "impersonate   ci serviceaccounts  robot",
                "impersonate    groups  dev",
                "impersonate authentication.k8s.io v1  userextras acme.io/team red",
                "impersonate authentication.k8s.io v1  uids  1002",
            ]
        );
    }

    /// impersonation.go's `unescapeExtraKey`: `url.PathUnescape`, which
    /// keeps every byte but `%XX`, and leaves a malformed key as sent.
    #[test]
    fn extra_keys_are_unescaped_as_url_path_unescape_does() {
        assert_eq!(unescape_extra_key("acme.io%2fteam"), "acme.io/team");
        assert_eq!(unescape_extra_key("a+b&c=d"), "a+b&c=d");
        assert_eq!(unescape_extra_key("a%2fb%zz"), "a%2fb%zz");
    }

    /// impersonation.go: groups, a uid or extras without `Impersonate-User`
    /// are a 400, and the request goes no further.
    #[tokio::test]
    async fn impersonating_without_a_user_is_a_400() {
        let (filter, next) = impersonation();
        for header in [
            "impersonate-group",
            "impersonate-uid",
            "impersonate-extra-scope",
        ] {
            let response = filter.call(request(&[(header, "x")])).await;
            assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{header}");
        }
        assert!(next.0.lock().expect("the record").is_none());
    }

    /// impersonation.go's 400 in kube's words: what was asked, as Go prints
    /// its object references, groups first, then extras, the uid last.
    #[tokio::test]
    async fn the_400_names_what_was_asked_as_kube_does() {
        let (filter, _) = impersonation();
        let response = filter
            .call(request(&[
                ("impersonate-uid", "1002"),
                ("impersonate-extra-acme.io%2fteam", "red"),
                ("impersonate-group", "dev"),
                ("impersonate-group", "ops"),
            ]))
            .await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let body = http_body_util::BodyExt::collect(response.into_body())
            .await
            .expect("the body")
            .to_bytes();
        let status: serde_json::Value = serde_json::from_slice(&body).expect("a Status");
        assert_eq!(
            status["message"],
            "requested [{Group  dev    } {Group  ops    } \
             {UserExtra  red  authentication.k8s.io/v1  acme.io/team} \
             {UID  1002  authentication.k8s.io/v1  }] without impersonating a user"
        );
    }

    /// impersonation.go takes each header's value as Go's header holds it,
    /// bytes and all: a name outside visible ASCII is impersonated (and
    /// checked), not left out, which ran the request as its own user.
    #[tokio::test]
    async fn a_name_outside_ascii_is_impersonated() {
        let (filter, next) = impersonation();
        let mut request = request(&[]);
        let bob = http::HeaderValue::from_bytes("b\u{f6}b".as_bytes()).expect("obs-text");
        request
            .headers_mut()
            .insert("impersonate-user", bob.clone());
        request.headers_mut().insert("impersonate-group", bob);
        filter.call(request).await;
        let (user, names) = next.seen();
        let user = user.expect("a user");
        assert_eq!(user.name, "b\u{f6}b");
        assert_eq!(user.groups, strings(&["b\u{f6}b", "system:authenticated"]));
        assert!(names.is_empty(), "{names:?}");
    }

    /// kube's `SplitUsername` (`authentication/serviceaccount/util.go`): a
    /// service account's name is `system:serviceaccount:<ns>:<name>` with a
    /// DNS-label namespace and a DNS-subdomain name; any other name under
    /// the prefix is a user's, asked about as `users` and given no service
    /// account groups.
    #[test]
    fn only_a_valid_service_account_name_is_a_service_account() {
        let asked = |user: &str| {
            let requested = Requested {
                user: user.to_owned(),
                groups: Vec::new(),
                uid: None,
                extra: Vec::new(),
            };
            let check = checks(&requested).remove(0);
            let user = impersonated_user(requested);
            (
                check.resource.to_string(),
                check.namespace.to_string(),
                user.groups,
            )
        };
        let authenticated = strings(&["system:authenticated"]);
        for user in [
            "system:serviceaccount::robot",
            "system:serviceaccount:ci:",
            "system:serviceaccount:ci:a:b",
            "system:serviceaccount:CI:robot",
            "system:serviceaccount:ci:Robot",
            "system:serviceaccount:c.i:robot",
        ] {
            assert_eq!(
                asked(user),
                ("users".to_owned(), String::new(), authenticated.clone()),
                "{user}"
            );
        }
        assert_eq!(
            asked("system:serviceaccount:ci:robot.v2"),
            (
                "serviceaccounts".to_owned(),
                "ci".to_owned(),
                strings(&[
                    "system:serviceaccounts",
                    "system:serviceaccounts:ci",
                    "system:authenticated"
                ])
            )
        );
    }
}
