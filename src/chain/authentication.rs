//! The authentication stage (kube's `WithAuthentication` over a union of
//! authenticators): authenticator filters are tried in manifest order; the
//! first that answers `authenticated` sets the user (in
//! `system:authenticated`, kube's `AuthenticatedGroupAdder`, added as the
//! filter's answer is taken: `wasm::convert::authenticated_user`) and the
//! credential headers are removed; `no-opinion` and a filter's own `error` (logged) pass
//! to the next. When none recognises the request it is `system:anonymous`
//! if the manifest allows anonymous requests, else a 401 Status. As in kube
//! (anonymous is added with fail-on-error), a request that carried a bearer
//! token nobody accepted, or a client certificate that no longer verifies
//! (kube's x509 authenticator verifies it for every request), or that an
//! authenticator failed on, is a 401 even
//! when anonymous requests are allowed. With no authenticator configured at
//! all, every request is anonymous. A refused request is audited here (kube's
//! `WithFailedAuthenticationAudit`): it never reaches the audit stage.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use http::HeaderMap;
use http::header::{AUTHORIZATION, Entry};

use super::audit::FailedAuthenticationAudit;
use super::stage::{self, Failure, Watchers};
use crate::body::{Request, Response};
use crate::config::identity::{X_REMOTE_EXTRA_PREFIX, X_REMOTE_GROUP, X_REMOTE_UID, X_REMOTE_USER};
use crate::config::stages::{Reads, RequestHeaders};
use crate::context::{ClientCredentials, RequestContext, RequestReport, UserInfo};
use crate::decision_cache::Lookup;
use crate::handler::{Handler, SharedHandler};
use crate::metrics::stages::AuthnOutcome;
use crate::request_info::RequestInfo;
use crate::status::GatewayError;
use crate::wasm::bindings::types::RequestView;
use crate::wasm::filter::{Ask, Authenticator, AuthnAnswer};
use crate::wasm::{Call, LoadedFilter, Outcome, convert};

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
    User(Arc<UserInfo>),
    /// No authenticator had an opinion.
    Nobody,
    /// Credentials were presented and rejected: an authenticator's error, or
    /// a bearer token no authenticator accepted.
    Rejected,
    Failed(GatewayError),
}

impl Authentication {
    /// As far as the union gets on the answers its filters' caches hold,
    /// without waiting: a request every filter asked has a kept answer for
    /// is identified here, and its step boxes no future.
    fn identify_kept(
        &self,
        request: &http::request::Parts,
        info: &RequestInfo,
        watchers: &Watchers,
    ) -> Identifying<'_> {
        let rejected = has_bearer_token(&request.headers) || has_refused_certificate(request);
        self.weigh_kept(0, rejected, request, info, watchers)
    }

    /// Who made the request, from where [`identify_kept`](Self::identify_kept)
    /// stopped: each filter it could not answer for is called (or its
    /// answer awaited), and the kept answers after it weighed as before.
    async fn identify_rest(
        &self,
        mut asking: Asking<'_>,
        request: &http::request::Parts,
        info: &RequestInfo,
        watchers: &Watchers,
    ) -> Identified {
        // Authenticators that see the same headers and fields share one view.
        let mut views: Vec<(&RequestHeaders, Reads, RequestView)> = Vec::new();
        loop {
            let filter = asking.filter;
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
            let answer = filter.fetch_authentication(asking.ask, view).await;
            let rejected = &mut asking.rejected;
            if let Some(identified) = weigh(filter, answer, asking.started, watchers, rejected) {
                return identified;
            }
            asking = match self.weigh_kept(asking.next, asking.rejected, request, info, watchers) {
                Identifying::Identified(identified) => return identified,
                Identifying::Asking(next) => next,
            };
        }
    }

    /// From the filter at `from` on, weighs the answers the caches hold
    /// until the request is identified, or a filter has to be asked.
    /// `rejected`: credentials were presented and not yet accepted.
    fn weigh_kept(
        &self,
        from: usize,
        mut rejected: bool,
        request: &http::request::Parts,
        info: &RequestInfo,
        watchers: &Watchers,
    ) -> Identifying<'_> {
        for (index, filter) in self.filters.iter().enumerate().skip(from) {
            if !stage::selects(&filter.spec.matcher, info) {
                stage::skipped(STAGE, &filter.spec, watchers);
                continue;
            }
            let started = Instant::now();
            match filter.probe_authentication(request, started) {
                Ok(kept) => {
                    let answer = (kept, Lookup::Hit);
                    if let Some(identified) =
                        weigh(filter, answer, started, watchers, &mut rejected)
                    {
                        return Identifying::Identified(identified);
                    }
                }
                Err(ask) => {
                    return Identifying::Asking(Asking {
                        next: index + 1,
                        filter,
                        ask,
                        rejected,
                        started,
                    });
                }
            }
        }
        Identifying::Identified(if rejected {
            Identified::Rejected
        } else {
            Identified::Nobody
        })
    }
}

/// How far the union got without waiting.
enum Identifying<'a> {
    Identified(Identified),
    /// A filter has to be called, or a concurrent call for its key awaited.
    Asking(Asking<'a>),
}

/// The filter the union waits on, and what it has found so far.
struct Asking<'a> {
    /// The index of the filter after it.
    next: usize,
    filter: &'a LoadedFilter<Authenticator>,
    ask: Ask<'a, AuthnAnswer>,
    /// Credentials were presented and not yet accepted.
    rejected: bool,
    /// When the union turned to this filter: its time includes the lookup.
    started: Instant,
}

/// Weighs one filter's answer: who the request is from, or `None` to ask the
/// next filter (no opinion, the filter's error, or a failure its
/// `failure_policy` skips).
fn weigh(
    filter: &LoadedFilter<Authenticator>,
    (call, lookup): (Call<AuthnAnswer>, Lookup),
    started: Instant,
    watchers: &Watchers,
    rejected: &mut bool,
) -> Option<Identified> {
    stage::observe(
        STAGE,
        &filter.spec,
        (&call, lookup),
        describe,
        started.elapsed(),
        watchers,
    );
    let outcome = call.outcome;
    match outcome {
        Outcome::Answer(AuthnAnswer::Authenticated { user, .. }) => Some(Identified::User(user)),
        Outcome::Answer(_) => None,
        Outcome::FilterError(_) => {
            *rejected = true;
            None
        }
        Outcome::Trap(_) | Outcome::Timeout | Outcome::Exhausted(_) => {
            match stage::on_failure(STAGE, &filter.spec, &outcome) {
                Failure::Skip => None,
                Failure::Fail(error) => Some(Identified::Failed(error)),
            }
        }
    }
}

impl Identified {
    /// kube's `result` label (`recordAuthenticationMetrics`,
    /// `staging/src/k8s.io/apiserver/pkg/endpoints/filters/metrics.go`):
    /// an anonymous request is a success when anonymous requests are
    /// allowed, as kube's anonymous authenticator's is; credentials nobody
    /// accepted are an `error`, as kube's union returns its authenticators'
    /// errors (a bearer token no token authenticator accepts is
    /// `invalidToken`, `authentication/request/bearertoken/bearertoken.go`),
    /// and only a request that presented none is a `failure`.
    fn result(&self, anonymous: bool) -> AuthnOutcome {
        match self {
            Identified::User(_) => AuthnOutcome::Success,
            Identified::Nobody if anonymous => AuthnOutcome::Success,
            Identified::Nobody => AuthnOutcome::Failure,
            Identified::Rejected | Identified::Failed(_) => AuthnOutcome::Error,
        }
    }
}

/// What request info resolved of the request, which every filter's match
/// reads.
fn request_info(request: &http::request::Parts) -> Result<&RequestInfo, GatewayError> {
    (RequestContext::of(&request.extensions).info.as_ref())
        .ok_or_else(|| GatewayError::internal("request info missing"))
}

/// The request's connection presented a client certificate that no longer
/// verifies: kube's x509 authenticator fails on it.
fn has_refused_certificate(request: &http::request::Parts) -> bool {
    RequestContext::of(&request.extensions)
        .connection
        .as_ref()
        .is_some_and(|connection| connection.client_chain_refused)
}

/// The request carries a bearer token as kube's bearer token authenticator
/// reads one (`staging/src/k8s.io/apiserver/pkg/authentication/request/bearertoken/bearertoken.go`):
/// the first `Authorization`, trimmed and split on spaces, is `bearer` in
/// any case, then a token that is not empty (`Bearer  x`, with two spaces,
/// carries none).
fn has_bearer_token(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(AUTHORIZATION) else {
        return false;
    };
    let mut parts = value.as_bytes().trim_ascii().split(|byte| *byte == b' ');
    parts
        .next()
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case(b"bearer"))
        && parts.next().is_some_and(|token| !token.is_empty())
}

impl stage::Answer for AuthnAnswer {
    fn word(&self) -> &'static str {
        match self {
            AuthnAnswer::Authenticated { .. } => "authenticated",
            AuthnAnswer::NoOpinion => "no-opinion",
        }
    }
}

/// The answer as the filter gave it: its groups without the one taking it
/// added.
fn describe(answer: &AuthnAnswer) -> String {
    match answer {
        AuthnAnswer::Authenticated { user, group_added } => {
            let named = match user.groups.split_last() {
                Some((_, named)) if *group_added => named,
                _ => &user.groups[..],
            };
            format!("authenticated {:?} groups {:?}", user.name, named)
        }
        AuthnAnswer::NoOpinion => "no opinion".to_owned(),
    }
}

impl Handler for Authentication {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        let (parts, body) = request.into_parts();
        if self.filters.is_empty() {
            return self.pass_on(parts, body, UserInfo::anonymous(), None);
        }
        let started = Instant::now();
        let watchers = Watchers::of(&parts.extensions);
        let identifying = match request_info(&parts) {
            Ok(info) => self.identify_kept(&parts, info, &watchers),
            Err(error) => Identifying::Identified(Identified::Failed(error)),
        };
        match identifying {
            Identifying::Identified(identified) => self.conclude(parts, body, identified, started),
            // The parts and the body are moved in, not the request: an
            // `async` block keeps what it captures for its whole life, and
            // the request would be held twice.
            Identifying::Asking(asking) => Box::pin(async move {
                // Boxed: the filters' calls make a large future, and inline
                // it would be copied into this step's box.
                let identified = match request_info(&parts) {
                    Ok(info) => Box::pin(self.identify_rest(asking, &parts, info, &watchers)).await,
                    Err(error) => Identified::Failed(error),
                };
                self.conclude(parts, body, identified, started).await
            }),
        }
    }
}

impl Authentication {
    /// Counts the union's conclusion (reached since `started`), and hands
    /// the request on as the user it identified, or refuses it.
    fn conclude(
        &self,
        mut parts: http::request::Parts,
        body: crate::body::Body,
        identified: Identified,
        started: Instant,
    ) -> BoxFuture<'_, Response> {
        let took = started.elapsed();
        crate::metrics::metrics()
            .stages
            .authentication(identified.result(self.anonymous), took);
        let user = match identified {
            Identified::User(user) => {
                remove_credentials(&mut parts);
                user
            }
            // kube's anonymous authenticator is the union's last member: its
            // success removes the credentials too.
            Identified::Nobody if self.anonymous => {
                remove_credentials(&mut parts);
                UserInfo::anonymous()
            }
            Identified::Nobody | Identified::Rejected => {
                return Box::pin(self.refuse(parts, body, GatewayError::Unauthorized));
            }
            Identified::Failed(error) => return Box::pin(self.refuse(parts, body, error)),
        };
        self.pass_on(parts, body, user, Some(took))
    }

    /// Hands the request on as `user`'s, identified by the union in
    /// `took` (None when no filter was asked).
    fn pass_on(
        &self,
        mut parts: http::request::Parts,
        body: crate::body::Body,
        user: Arc<UserInfo>,
        took: Option<Duration>,
    ) -> BoxFuture<'_, Response> {
        if let Some(report) = parts.extensions.get::<RequestReport>() {
            report.authenticated(&user);
        }
        let learnt = RequestContext::learn(&mut parts.extensions);
        learnt.user = Some(user);
        learnt.authenticated_in = took;
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
        match &self.failure_audit {
            Some(audit) => {
                audit
                    .record(http::Request::from_parts(parts, body), response)
                    .await
            }
            None => response,
        }
    }
}

/// The credentials an authenticator consumed go no further (kube removes
/// `Authorization` and the request-header authenticator's headers).
/// The `Authorization` values removed are kept in the request's context
/// as [`ClientCredentials`], for a route that forwards them.
fn remove_credentials(parts: &mut http::request::Parts) {
    // Taken out whole, in one look-up, rather than copied and removed.
    if let Entry::Occupied(authorization) = parts.headers.entry(AUTHORIZATION) {
        let (_, values) = authorization.remove_entry_mult();
        RequestContext::learn(&mut parts.extensions).credentials =
            Some(ClientCredentials(values.collect()));
    }
    let headers = &mut parts.headers;
    // Names made once: a `&str` name would be parsed again on every request.
    headers.remove(X_REMOTE_USER);
    headers.remove(X_REMOTE_UID);
    headers.remove(X_REMOTE_GROUP);
    let extras: Vec<_> = headers
        .keys()
        .filter(|name| name.as_str().starts_with(X_REMOTE_EXTRA_PREFIX))
        .cloned()
        .collect();
    for name in extras {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kube's bearer token authenticator
    /// (`staging/src/k8s.io/apiserver/pkg/authentication/request/bearertoken/bearertoken.go`)
    /// reads the first `Authorization`, trimmed, split on spaces: a token is
    /// its second part, `bearer` in any case before it, when that part is
    /// not empty. Anything else carries no token: it is not a credential
    /// refused (a 401 even with anonymous) but none.
    #[test]
    fn a_bearer_token_is_what_kubes_authenticator_reads_as_one() {
        let carries = |value: &str| {
            let mut headers = HeaderMap::new();
            let value = http::HeaderValue::from_str(value).expect("a header value");
            headers.insert(AUTHORIZATION, value);
            has_bearer_token(&headers)
        };
        for token in ["Bearer abc", "bearer abc", "BEARER abc", "Bearer abc def"] {
            assert!(carries(token), "{token:?}");
        }
        for none in [
            "Bearer",
            "Bearer  abc",
            "Bearer\tabc",
            "Basic abc",
            "Bearerabc",
            "",
        ] {
            assert!(!carries(none), "{none:?}");
        }
    }

    /// `Authorization` moves into the extensions; kube's request-header
    /// names, every one of them, are gone; other headers stay.
    #[test]
    fn credentials_go_no_further() {
        let request = http::Request::get("/api")
            .header("authorization", "Bearer one")
            .header("authorization", "Bearer two")
            .header("x-remote-user", "admin")
            .header("x-remote-uid", "0")
            .header("x-remote-group", "system:masters")
            .header("x-remote-extra-scopes", "all")
            .header("x-remote-extra-team", "ops")
            .header("accept", "application/json")
            .body(())
            .expect("a valid request");
        let (mut parts, ()) = request.into_parts();
        remove_credentials(&mut parts);
        let names: Vec<&str> = parts.headers.keys().map(|name| name.as_str()).collect();
        assert_eq!(names, ["accept"]);
        let credentials = RequestContext::of(&parts.extensions)
            .credentials
            .as_ref()
            .expect("the Authorization values kept");
        assert_eq!(credentials.0, ["Bearer one", "Bearer two"]);
    }
}
