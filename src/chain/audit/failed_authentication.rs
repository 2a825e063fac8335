//! kube's `WithFailedAuthenticationAudit`
//! (`staging/src/k8s.io/apiserver/pkg/endpoints/filters/authn_audit.go`): the
//! one event written for a request that authentication refused.

use std::sync::Arc;

use crate::body::{Request, Response};
use crate::config::stages::{AuditRule, AuditStage};
use crate::context::RequestContext;

use super::backend::AuditBackend;
use super::event::{AuditContext, base_event, response_status, stamped};
use super::policy::matching_rule;

/// kube's `WithFailedAuthenticationAudit`: a request that authentication
/// refused never reaches the audit stage, and is audited here, at the level
/// the policy gives an unknown user (rules naming users or groups do not
/// match it), in one event at stage ResponseStarted (kube's stage for it)
/// with the Status the refusal answered. kube first notes the credentials
/// tried (`getAuthMethods`), but its failed handler answers with a Status
/// (`Unauthorized`, `endpoints/filters/authentication.go`), and the
/// `WriteObjectNegotiated` that writes it hands that Status to
/// `audit.LogResponseObject` (`endpoints/handlers/responsewriters/writers.go`,
/// `audit/request.go`) before the head is written: the event records the
/// Status, the note replaced.
pub(crate) struct FailedAuthenticationAudit {
    pub policy: Vec<AuditRule>,
    pub backend: Arc<AuditBackend>,
}

impl FailedAuthenticationAudit {
    /// Audits `request`, refused with `response`, and hands the response
    /// back.
    pub(crate) async fn record(&self, request: Request, response: Response) -> Response {
        let Some(info) = &RequestContext::of(request.extensions()).info else {
            return response;
        };
        let Some(rule) = matching_rule(&self.policy, None, info) else {
            return response;
        };
        if rule.omit_stages.contains(&AuditStage::ResponseStarted) {
            return response;
        }
        let mut event = base_event(&request, rule.level);
        event.response_status = Some(response_status(&response));
        let context = AuditContext::default();
        self.backend
            .emit_owned(stamped(event, AuditStage::ResponseStarted, &context))
            .await;
        response
    }
}
