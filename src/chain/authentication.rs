//! The authentication stage (kube's `WithAuthentication` over a union of
//! authenticators): authenticator filters are tried in manifest order; the
//! first that answers `authenticated` sets the user and the credential
//! headers are removed; `no-opinion` and a filter's own `error` (logged) pass
//! to the next. When none recognises the request it is `system:anonymous`
//! if the manifest allows anonymous requests, else a 401 Status. As in kube
//! (anonymous is added with fail-on-error), a request that carried a bearer
//! token nobody accepted, or that an authenticator failed on, is a 401 even
//! when anonymous requests are allowed. With no authenticator configured at
//! all, every request is anonymous. A refused request is audited here (kube's
//! `WithFailedAuthenticationAudit`): it never reaches the audit stage.

use std::time::Instant;

use futures_util::future::BoxFuture;
use http::HeaderMap;
use http::header::AUTHORIZATION;

use super::audit::FailedAuthenticationAudit;
use super::stage::{self, Failure, Watchers};
use crate::body::{Request, Response};
use crate::config::stages::{Reads, RequestHeaders};
use crate::context::{ClientCredentials, UserInfo, UserReport};
use crate::handler::{Handler, SharedHandler};
use crate::metrics::stages::AuthnOutcome;
use crate::request_info::RequestInfo;
use crate::status::GatewayError;
use crate::wasm::bindings::types::RequestView;
use crate::wasm::filter::{Authenticator, AuthnResult};
use crate::wasm::{LoadedFilter, Outcome, convert};

const STAGE: &str = "authentication";

pub(crate) struct Authentication {
    pub filters: Vec<LoadedFilter<Authenticator>>,
    /// Unrecognised requests go on as `system:anonymous` rather than 401.
    pub anonymous: bool,
    /// Audits the requests refused here, when audit is configured.
    pub failure_audit: Option<FailedAuthenticationAudit>,
    pub next: SharedHandler,
}

/// What the union concluded.
enum Identified {
    User(UserInfo),
    /// No authenticator had an opinion.
    Nobody,
    /// Credentials were presented and rejected: an authenticator's error, or
    /// a bearer token no authenticator accepted.
    Rejected,
    Failed(GatewayError),
}

impl Authentication {
    async fn identify(&self, request: &http::request::Parts) -> Identified {
        let Some(info) = request.extensions.get::<RequestInfo>() else {
            return Identified::Failed(GatewayError::internal("request info missing"));
        };
        let watchers = Watchers::of(&request.extensions);
        // Authenticators that see the same headers and fields share one view.
        let mut views: Vec<(&RequestHeaders, Reads, RequestView)> = Vec::new();
        let mut rejected = has_bearer_token(&request.headers);
        for filter in &self.filters {
            if !stage::selects(&filter.spec.matcher, info) {
                stage::skipped(STAGE, &filter.spec, &watchers);
                continue;
            }
            let (selected, reads) = (&filter.spec.headers, filter.spec.reads);
            // Made on a cache miss only: a hit needs no view.
            let shared = &mut views;
            let view = move || {
                // Moved in, so the closure is called once and may lend out
                // what it holds.
                let views = shared;
                let index = match views
                    .iter()
                    .position(|(headers, shared, _)| *headers == selected && *shared == reads)
                {
                    Some(index) => index,
                    None => {
                        let view = convert::request_view(request, selected, reads);
                        views.push((selected, reads, view));
                        views.len() - 1
                    }
                };
                &views[index].2
            };
            let started = Instant::now();
            let (call, lookup) = filter.authenticate(request, view).await;
            stage::observe(
                STAGE,
                &filter.spec,
                (&call, lookup),
                describe,
                started.elapsed(),
                &watchers,
            );
            let outcome = call.outcome;
            match outcome {
                Outcome::Answer(AuthnResult::Authenticated(user)) => {
                    return Identified::User(with_authenticated_group(convert::user_from_wit(
                        user,
                    )));
                }
                Outcome::Answer(_) => {}
                Outcome::FilterError(_) => rejected = true,
                Outcome::Trap(_) | Outcome::Timeout | Outcome::Exhausted(_) => {
                    match stage::on_failure(STAGE, &filter.spec, &outcome) {
                        Failure::Skip => {}
                        Failure::Fail(error) => return Identified::Failed(error),
                    }
                }
            }
        }
        if rejected {
            Identified::Rejected
        } else {
            Identified::Nobody
        }
    }
}

impl Identified {
    /// kube's `result` label: an anonymous request is a success when
    /// anonymous requests are allowed, as kube's anonymous authenticator's is.
    fn result(&self, anonymous: bool) -> AuthnOutcome {
        match self {
            Identified::User(_) => AuthnOutcome::Success,
            Identified::Nobody if anonymous => AuthnOutcome::Success,
            Identified::Nobody | Identified::Rejected => AuthnOutcome::Failure,
            Identified::Failed(_) => AuthnOutcome::Error,
        }
    }
}

/// kube's `AuthenticatedGroupAdder`: every authenticated user is in
/// `system:authenticated`.
fn with_authenticated_group(mut user: UserInfo) -> UserInfo {
    const AUTHENTICATED: &str = "system:authenticated";
    if user.name != "system:anonymous" && !user.groups.iter().any(|group| group == AUTHENTICATED) {
        user.groups.push(AUTHENTICATED.to_owned());
    }
    user
}

fn has_bearer_token(headers: &HeaderMap) -> bool {
    headers
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.get(..7))
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("bearer "))
}

impl stage::Answer for AuthnResult {
    fn word(&self) -> &'static str {
        match self {
            AuthnResult::Authenticated(_) => "authenticated",
            AuthnResult::NoOpinion => "no-opinion",
            AuthnResult::Error(_) => "error",
        }
    }
}

fn describe(answer: &AuthnResult) -> String {
    match answer {
        AuthnResult::Authenticated(user) => {
            format!("authenticated {:?} groups {:?}", user.name, user.groups)
        }
        AuthnResult::NoOpinion => "no opinion".to_owned(),
        AuthnResult::Error(message) => message.clone(),
    }
}

impl Handler for Authentication {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        let (mut parts, body) = request.into_parts();
        if self.filters.is_empty() {
            return self.pass_on(parts, body, UserInfo::anonymous());
        }
        // The parts and the body are moved in, not the request: an `async`
        // block keeps what it captures for its whole life, and the request
        // would be held twice.
        Box::pin(async move {
            let started = Instant::now();
            // Boxed, as the refusals below: the filters' calls make a
            // large future, and inline it would be copied into this
            // step's box on every request.
            let identified = Box::pin(self.identify(&parts)).await;
            crate::metrics::metrics()
                .stages
                .authentication(identified.result(self.anonymous), started.elapsed());
            let user = match identified {
                Identified::User(user) => {
                    remove_credentials(&mut parts);
                    user
                }
                // kube's anonymous authenticator is the union's last
                // member: its success removes the credentials too.
                Identified::Nobody if self.anonymous => {
                    remove_credentials(&mut parts);
                    UserInfo::anonymous()
                }
                Identified::Nobody | Identified::Rejected => {
                    return Box::pin(self.refuse(parts, body, GatewayError::Unauthorized)).await;
                }
                Identified::Failed(error) => {
                    return Box::pin(self.refuse(parts, body, error)).await;
                }
            };
            self.pass_on(parts, body, user).await
        })
    }
}

impl Authentication {
    /// Hands the request on as `user`'s.
    fn pass_on(
        &self,
        mut parts: http::request::Parts,
        body: crate::body::Body,
        user: UserInfo,
    ) -> BoxFuture<'_, Response> {
        if let Some(report) = parts.extensions.get::<UserReport>() {
            report.report(&user);
        }
        parts.extensions.insert(user);
        self.next.call(http::Request::from_parts(parts, body))
    }

    /// kube's failed handler: the refusal, audited.
    async fn refuse(
        &self,
        parts: http::request::Parts,
        body: crate::body::Body,
        error: GatewayError,
    ) -> Response {
        let response = error.into_response();
        if let Some(audit) = &self.failure_audit {
            audit
                .record(http::Request::from_parts(parts, body), response.status())
                .await;
        }
        response
    }
}

/// The credentials an authenticator consumed go no further (kube removes
/// `Authorization` and the request-header authenticator's headers).
/// The `Authorization` values removed are kept in the request's extensions
/// as [`ClientCredentials`], for a route that forwards them.
fn remove_credentials(parts: &mut http::request::Parts) {
    let authorization: Vec<_> = parts
        .headers
        .get_all(AUTHORIZATION)
        .iter()
        .cloned()
        .collect();
    if !authorization.is_empty() {
        parts.extensions.insert(ClientCredentials(authorization));
    }
    let headers = &mut parts.headers;
    headers.remove(AUTHORIZATION);
    headers.remove("x-remote-user");
    headers.remove("x-remote-group");
    let extras: Vec<_> = headers
        .keys()
        .filter(|name| name.as_str().starts_with("x-remote-extra-"))
        .cloned()
        .collect();
    for name in extras {
        headers.remove(name);
    }
}
