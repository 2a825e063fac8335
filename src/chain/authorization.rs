//! The authorization stage (kube's `WithAuthorization` over a union of
//! authorizers): authorizer filters are asked in manifest order; the first
//! `allow` or `deny` wins; when every one has no opinion the request is
//! denied. A denial is a 403 Status in kube's words. Filters in `monitor`
//! mode are asked and logged, never obeyed. The same union answers the
//! impersonation filter's `impersonate` checks.

use std::sync::Arc;
use std::time::Instant;

use futures_util::future::BoxFuture;

use super::audit::AuditContext;
use super::stage::{self, Failure, Watchers};
use crate::body::{Request, Response};
use crate::config::stages::{Mode, Reads};
use crate::context::UserInfo;
use crate::handler::{Handler, SharedHandler};
use crate::metrics::stages::Decisions;
use crate::request_info::RequestInfo;
use crate::status::{Details, GatewayError};
use crate::wasm::filter::{Attributes, Authorizer, Decision};
use crate::wasm::{LoadedFilter, Outcome, convert};

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

    pub(crate) async fn decide(
        &self,
        user: &UserInfo,
        info: &RequestInfo,
        watchers: &Watchers,
    ) -> Verdict {
        // Authorizers that read the same fields share one record.
        let mut attributes: Option<(Reads, Attributes)> = None;
        let mut reasons = Vec::new();
        for (filter, decisions) in self.filters.iter().zip(&self.decisions) {
            if !stage::selects(&filter.spec.matcher, info) {
                stage::skipped(STAGE, &filter.spec, watchers);
                continue;
            }
            let reads = filter.spec.reads;
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
            let started = Instant::now();
            let (call, lookup) = filter.authorize(user, info, records).await;
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
                failed => match stage::on_failure(STAGE, &filter.spec, &failed) {
                    Failure::Skip => continue,
                    Failure::Fail(error) => return Verdict::Failed(error),
                },
            };
            if filter.spec.mode == Mode::Monitor {
                tracing::info!(filter = filter.name(), decision = %describe(&decision), "monitor mode: decision not enforced");
                continue;
            }
            match decision {
                Decision::Allow => {
                    decisions.record(true);
                    return Verdict::Allow;
                }
                Decision::Deny(reason) => {
                    decisions.record(false);
                    return Verdict::Deny(reason);
                }
                Decision::NoOpinion(reason) if !reason.is_empty() => reasons.push(reason),
                Decision::NoOpinion(_) => {}
            }
        }
        Verdict::Deny(reasons.join("; "))
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
    fn call(&self, mut request: Request) -> BoxFuture<'_, Response> {
        Box::pin(async move {
            let extensions = request.extensions();
            let (Some(user), Some(info)) = (
                extensions.get::<UserInfo>(),
                extensions.get::<RequestInfo>(),
            ) else {
                return GatewayError::internal("the request reached authorization without a user")
                    .into_response();
            };
            let watchers = Watchers::of(extensions);
            let audit = extensions.get::<AuditContext>().cloned();
            let verdict = self.authorizers.decide(user, info, &watchers).await;
            match verdict {
                Verdict::Allow => {
                    if let Some(audit) = &audit {
                        audit.annotate("authorization.k8s.io/decision", "allow");
                    }
                    // The self-subject reviews ask the same union.
                    request.extensions_mut().insert(self.authorizers.clone());
                    self.next.call(request).await
                }
                Verdict::Deny(reason) => {
                    if let Some(audit) = audit {
                        audit.annotate("authorization.k8s.io/decision", "forbid");
                        audit.annotate("authorization.k8s.io/reason", reason.clone());
                    }
                    forbidden(user, info, &reason).into_response()
                }
                Verdict::Failed(error) => error.into_response(),
            }
        })
    }
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
    let details = (!qualified.is_empty()).then(|| Details {
        name: info.name.to_string(),
        group: info.api_group.to_string(),
        kind: info.resource.to_string(),
        retry_after_seconds: None,
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
