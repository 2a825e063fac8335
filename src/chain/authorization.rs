//! The authorization stage (kube's `WithAuthorization` over a union of
//! authorizers): authorizer filters are asked in manifest order; the first
//! `allow` or `deny` wins; when every one has no opinion the request is
//! denied. A denial is a 403 Status in kube's words. Filters in `monitor`
//! mode are asked and logged, never obeyed. The same union answers the
//! impersonation filter's `impersonate` checks.

use std::sync::Arc;
use std::time::Instant;

use futures_util::future::BoxFuture;

use super::audit::{AuditContext, Layer};
use super::stage::{self, Failure, Watchers};
use crate::body::{Request, Response};
use crate::config::stages::{Mode, Reads};
use crate::context::{RequestContext, UserInfo};
use crate::decision_cache::Lookup;
use crate::handler::{Handler, SharedHandler};
use crate::metrics::stages::Decisions;
use crate::request_info::RequestInfo;
use crate::status::{Details, GatewayError};
use crate::wasm::filter::{Ask, Attributes, Authorizer, Decision};
use crate::wasm::{Call, LoadedFilter, Outcome, convert};

const STAGE: &str = "authorization";

/// The union of authorizer filters.
pub(crate) struct Authorizers {
    filters: Vec<LoadedFilter<Authorizer>>,
    /// Each filter's decision counters, in the filters' order.
    decisions: Vec<Decisions>,
}

/// The union's conclusion.
pub(crate) enum Verdict {
    Allow,
    /// Denied, with the reason of the filter that denied (or of all that had
    /// no opinion).
    Deny(String),
    Failed(GatewayError),
}

impl Authorizers {
    /// The union of `filters`, in order.
    pub(crate) fn new(filters: Vec<LoadedFilter<Authorizer>>) -> Self {
        let stages = &crate::metrics::metrics().stages;
        let decisions = filters
            .iter()
            .map(|filter| stages.authorization_decisions(filter.name()))
            .collect();
        Authorizers { filters, decisions }
    }

    /// The union's verdict on `user` doing what `info` says, calling the
    /// filters whose caches do not hold their answer.
    pub(crate) async fn decide(
        &self,
        user: &UserInfo,
        info: &RequestInfo,
        watchers: &Watchers,
    ) -> Verdict {
        match self.decide_kept(user, info, watchers) {
            Deciding::Decided(verdict) => verdict,
            Deciding::Asking(asking) => self.decide_rest(asking, user, info, watchers).await,
        }
    }

    /// As far as the union gets on the answers its filters' caches hold,
    /// without waiting: a request every selected filter's cache answers for
    /// is decided here, and its step boxes no future.
    fn decide_kept(
        &self,
        user: &UserInfo,
        info: &RequestInfo,
        watchers: &Watchers,
    ) -> Deciding<'_> {
        self.weigh_kept(0, Vec::new(), user, info, watchers)
    }

    /// The verdict, from where [`decide_kept`](Self::decide_kept) stopped:
    /// each filter it could not answer for is called (or its answer
    /// awaited), and the kept answers after it weighed as before.
    async fn decide_rest(
        &self,
        mut asking: Asking<'_>,
        user: &UserInfo,
        info: &RequestInfo,
        watchers: &Watchers,
    ) -> Verdict {
        // Authorizers that read the same fields share one record.
        let mut attributes: Option<(Reads, Attributes)> = None;
        loop {
            let reads = asking.filter.spec.reads;
            // Made on a cache miss only: a hit needs no records.
            let slot = &mut attributes;
            let records = move || {
                // Moved in, so the closure is called once and may lend out
                // what it holds.
                let slot = slot;
                if slot.as_ref().is_some_and(|(shared, _)| *shared != reads) {
                    *slot = None;
                }
                let (_, attributes) = slot.get_or_insert_with(|| {
                    let built = Attributes {
                        user: convert::user_to_wit(user),
                        request: convert::request_info(info, reads),
                    };
                    (reads, built)
                });
                &*attributes
            };
            let answer = asking.filter.fetch_authorization(asking.ask, records).await;
            if let Some(verdict) = weigh(
                asking.filter,
                asking.decisions,
                answer,
                asking.started,
                watchers,
                &mut asking.reasons,
            ) {
                return verdict;
            }
            asking = match self.weigh_kept(asking.next, asking.reasons, user, info, watchers) {
                Deciding::Decided(verdict) => return verdict,
                Deciding::Asking(next) => next,
            };
        }
    }

    /// From the filter at `from` on, weighs the answers the caches hold
    /// until a verdict, or a filter that has to be asked.
    fn weigh_kept(
        &self,
        from: usize,
        mut reasons: Vec<String>,
        user: &UserInfo,
        info: &RequestInfo,
        watchers: &Watchers,
    ) -> Deciding<'_> {
        let filters = self.filters.iter().zip(&self.decisions);
        for (index, (filter, decisions)) in filters.enumerate().skip(from) {
            if !stage::selects(&filter.spec.matcher, info) {
                stage::skipped(STAGE, &filter.spec, watchers);
                continue;
            }
            let started = Instant::now();
            match filter.probe_authorization(user, info, started) {
                Ok(kept) => {
                    let answer = (kept, Lookup::Hit);
                    if let Some(verdict) =
                        weigh(filter, decisions, answer, started, watchers, &mut reasons)
                    {
                        return Deciding::Decided(verdict);
                    }
                }
                Err(ask) => {
                    return Deciding::Asking(Asking {
                        next: index + 1,
                        filter,
                        decisions,
                        ask,
                        reasons,
                        started,
                    });
                }
            }
        }
        Deciding::Decided(Verdict::Deny(reasons.join("; ")))
    }
}

/// How far the union got without waiting.
enum Deciding<'a> {
    Decided(Verdict),
    /// A filter has to be called, or a concurrent call for its key awaited.
    Asking(Asking<'a>),
}

/// The filter the union waits on, and what it has weighed so far.
struct Asking<'a> {
    /// The index of the filter after it.
    next: usize,
    filter: &'a LoadedFilter<Authorizer>,
    decisions: &'a Decisions,
    ask: Ask<'a, Decision>,
    /// The reasons of the filters that had no opinion.
    reasons: Vec<String>,
    /// When the union turned to this filter: its time includes the lookup.
    started: Instant,
}

/// Weighs one filter's answer: the verdict it gives, or `None` to ask the
/// next filter (no opinion, monitor mode, or a failure the filter's
/// `failure_policy` skips).
fn weigh(
    filter: &LoadedFilter<Authorizer>,
    decisions: &Decisions,
    (call, lookup): (Call<Decision>, Lookup),
    started: Instant,
    watchers: &Watchers,
    reasons: &mut Vec<String>,
) -> Option<Verdict> {
    stage::observe(
        STAGE,
        &filter.spec,
        (&call, lookup),
        describe,
        started.elapsed(),
        watchers,
    );
    let decision = match call.outcome {
        Outcome::Answer(decision) => decision,
        failed => {
            return match stage::on_failure(STAGE, &filter.spec, &failed) {
                Failure::Skip => None,
                Failure::Fail(error) => Some(Verdict::Failed(error)),
            };
        }
    };
    if filter.spec.mode == Mode::Monitor {
        tracing::info!(filter = filter.name(), decision = %describe(&decision), "monitor mode: decision not enforced");
        return None;
    }
    match decision {
        Decision::Allow => {
            decisions.record(true);
            Some(Verdict::Allow)
        }
        Decision::Deny(reason) => {
            decisions.record(false);
            Some(Verdict::Deny(reason))
        }
        Decision::NoOpinion(reason) => {
            if !reason.is_empty() {
                reasons.push(reason);
            }
            None
        }
    }
}

impl stage::Answer for Decision {
    fn word(&self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Deny(_) => "deny",
            Decision::NoOpinion(_) => "no-opinion",
        }
    }
}

fn describe(decision: &Decision) -> String {
    match decision {
        Decision::Allow => "allow".to_owned(),
        Decision::Deny(reason) => format!("deny: {reason}"),
        Decision::NoOpinion(reason) => format!("no opinion: {reason}"),
    }
}

pub(crate) struct Authorization {
    pub authorizers: Arc<Authorizers>,
    pub next: SharedHandler,
}

impl Handler for Authorization {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        let watchers = Watchers::of(request.extensions());
        // Timed for audit's latency annotations, when the request is audited.
        let started = request
            .extensions()
            .get::<AuditContext>()
            .map(|_| Instant::now());
        let deciding = match requester(&request) {
            Ok((user, info)) => self.authorizers.decide_kept(user, info, &watchers),
            Err(error) => Deciding::Decided(Verdict::Failed(error)),
        };
        match deciding {
            Deciding::Decided(verdict) => self.conclude(request, verdict, started),
            Deciding::Asking(asking) => Box::pin(async move {
                let verdict = match requester(&request) {
                    Ok((user, info)) => {
                        (self.authorizers)
                            .decide_rest(asking, user, info, &watchers)
                            .await
                    }
                    Err(error) => Verdict::Failed(error),
                };
                self.conclude(request, verdict, started).await
            }),
        }
    }
}

impl Authorization {
    /// Hands an allowed request on, or answers it with the verdict; an
    /// audited request's union was `started` then.
    fn conclude(
        &self,
        mut request: Request,
        verdict: Verdict,
        started: Option<Instant>,
    ) -> BoxFuture<'_, Response> {
        let audit = request.extensions().get::<AuditContext>();
        if let (Some(audit), Some(started)) = (audit, started) {
            audit.took(Layer::Authorization, started.elapsed());
        }
        let response = match verdict {
            Verdict::Allow => {
                // kube adds the allowing authorizer's reason beside its
                // decision, empty or not (`withAuthorization`,
                // endpoints/filters/authorization.go); a filter's `allow`
                // carries none, so it is kube's empty one.
                if let Some(audit) = audit {
                    audit.annotate("authorization.k8s.io/decision", "allow");
                    audit.annotate("authorization.k8s.io/reason", "");
                }
                // The self-subject reviews ask the same union.
                request.extensions_mut().insert(self.authorizers.clone());
                return self.next.call(request);
            }
            Verdict::Deny(reason) => {
                if let Some(audit) = audit {
                    audit.annotate("authorization.k8s.io/decision", "forbid");
                    audit.annotate("authorization.k8s.io/reason", reason.clone());
                }
                match requester(&request) {
                    Ok((user, info)) => forbidden(user, info, &reason).into_response(),
                    Err(error) => error.into_response(),
                }
            }
            Verdict::Failed(error) => {
                // kube notes an authorizer's error so, with no decision
                // (`reasonError`, endpoints/filters/authorization.go).
                if let Some(audit) = audit {
                    audit.annotate("authorization.k8s.io/reason", "internal error");
                }
                error.into_response()
            }
        };
        Box::pin(std::future::ready(response))
    }
}

/// The user authentication found, and what the request is.
fn requester(request: &Request) -> Result<(&UserInfo, &RequestInfo), GatewayError> {
    RequestContext::of(request.extensions()).requester("authorization")
}

/// kube's 403: `<resource>.<group> "<name>" is forbidden: User "alice" cannot
/// <verb> resource "<resource>" in API group "<group>" in the namespace
/// "<ns>"[: <reason>]`, or `forbidden: User "alice" cannot get path "/x"`.
pub(crate) fn forbidden(user: &UserInfo, info: &RequestInfo, reason: &str) -> GatewayError {
    let mut cause = if info.is_resource_request {
        let resource = if info.subresource.is_empty() {
            info.resource.to_string()
        } else {
            format!("{}/{}", info.resource, info.subresource)
        };
        let scope = if info.namespace.is_empty() {
            "at the cluster scope".to_owned()
        } else {
            format!("in the namespace {:?}", info.namespace)
        };
        format!(
            "User {:?} cannot {} resource {:?} in API group {:?} {scope}",
            user.name, info.verb, resource, info.api_group
        )
    } else {
        format!(
            "User {:?} cannot {} path {:?}",
            user.name, info.verb, info.path
        )
    };
    if !reason.is_empty() {
        cause = format!("{cause}: {reason}");
    }
    let qualified = match (info.resource.as_str(), info.api_group.as_str()) {
        ("", _) => String::new(),
        (resource, "") => resource.to_owned(),
        (resource, group) => format!("{resource}.{group}"),
    };
    let message = match (qualified.is_empty(), info.name.is_empty()) {
        (true, _) => format!("forbidden: {cause}"),
        (false, true) => format!("{qualified} is forbidden: {cause}"),
        (false, false) => format!("{qualified} {:?} is forbidden: {cause}", info.name),
    };
    let details = (!qualified.is_empty()).then(|| {
        Box::new(Details {
            name: info.name.to_string(),
            group: info.api_group.to_string(),
            kind: info.resource.to_string(),
            ..Details::default()
        })
    });
    GatewayError::Forbidden { message, details }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> UserInfo {
        UserInfo {
            name: "alice".to_owned(),
            ..UserInfo::default()
        }
    }

    fn message(info: &RequestInfo, reason: &str) -> String {
        forbidden(&alice(), info, reason).to_string()
    }

    #[test]
    fn forbidden_messages_read_as_kube_writes_them() {
        let namespaced = RequestInfo::resolve(
            &http::Method::DELETE,
            "/apis/demo.example.io/v1/namespaces/default/widgets/w1",
            None,
        );
        assert_eq!(
            message(&namespaced, ""),
            r#"widgets.demo.example.io "w1" is forbidden: User "alice" cannot delete resource "widgets" in API group "demo.example.io" in the namespace "default""#
        );
        let cluster = RequestInfo::resolve(&http::Method::GET, "/api/v1/nodes", None);
        assert_eq!(
            message(&cluster, "no rule"),
            r#"nodes is forbidden: User "alice" cannot list resource "nodes" in API group "" at the cluster scope: no rule"#
        );
        let path = RequestInfo::resolve(&http::Method::GET, "/metrics", None);
        assert_eq!(
            message(&path, ""),
            r#"forbidden: User "alice" cannot get path "/metrics""#
        );
    }
}
