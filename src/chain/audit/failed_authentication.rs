//! kube's `WithFailedAuthenticationAudit`
//! (`staging/src/k8s.io/apiserver/pkg/endpoints/filters/authn_audit.go`): the
//! one event written for a request that authentication refused.

use std::sync::Arc;

use crate::body::Request;
use crate::config::stages::{AuditRule, AuditStage};
use crate::context::RequestContext;

use super::backend::AuditBackend;
use super::event::{AuditContext, base_event, stamped, status_record};
use super::policy::matching_rule;

/// kube's `WithFailedAuthenticationAudit`: a request that authentication
/// refused never reaches the audit stage, and is audited here, at the level
/// the policy gives an unknown user (rules naming users or groups do not
/// match it), in one event at stage ResponseStarted (kube's stage for it)
/// with the response's status and the kinds of credentials tried.
pub(crate) struct FailedAuthenticationAudit {
    pub policy: Vec<AuditRule>,
    pub backend: Arc<AuditBackend>,
}

impl FailedAuthenticationAudit {
    /// Audits `request`, refused with `status`.
    pub(crate) async fn record(&self, request: Request, status: http::StatusCode) {
        let Some(info) = &RequestContext::of(request.extensions()).info else {
            return;
        };
        let Some(rule) = matching_rule(&self.policy, None, info) else {
            return;
        };
        if rule.omit_stages.contains(&AuditStage::ResponseStarted) {
            return;
        }
        let mut event = base_event(&request, rule.level);
        event.response_status = Some(status_record(
            status.as_u16(),
            "",
            attempted_credentials(&request),
        ));
        let context = AuditContext::default();
        self.backend
            .emit_owned(stamped(event, AuditStage::ResponseStarted, &context))
            .await;
    }
}

/// kube's `getAuthMethods`: the kinds of credentials the request carried.
fn attempted_credentials(request: &Request) -> String {
    let scheme = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().split_once(' '))
        .map(|(scheme, _)| scheme.to_ascii_lowercase());
    let access_token = request.uri().query().is_some_and(|query| {
        url::form_urlencoded::parse(query.as_bytes())
            .any(|(key, value)| key == "access_token" && !value.trim().is_empty())
    });
    let x509 = RequestContext::of(request.extensions())
        .connection
        .as_ref()
        .is_some_and(|connection| {
            connection.client_chain.is_some() || connection.client_chain_refused
        });
    let methods: Vec<&str> = [
        (scheme.as_deref() == Some("basic"), "basic"),
        (scheme.as_deref() == Some("bearer"), "bearer"),
        (access_token, "access_token"),
        (x509, "x509"),
    ]
    .into_iter()
    .filter_map(|(present, name)| present.then_some(name))
    .collect();
    if methods.is_empty() {
        "Authentication failed, no credentials provided".to_owned()
    } else {
        format!("Authentication failed, attempted: {}", methods.join(", "))
    }
}
