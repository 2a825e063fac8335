//! The audit stage (kube's `WithAudit`): the manifest's policy picks a level
//! for each request (first matching rule; none means not audited), and
//! events at RequestReceived, ResponseStarted (long-running requests only),
//! ResponseComplete and Panic go to every audit filter. In `blocking` mode
//! the request waits for its events to be written; in `batch` mode they go
//! through a bounded queue, and what does not fit is dropped, counted and
//! logged, never silently. Audit never fails a request.
//!
//! Its parts, each beside the kube source it follows:
//!
//! * this module: the chain filter (`WithAudit`, in
//!   `staging/src/k8s.io/apiserver/pkg/endpoints/filters/audit.go`), and the
//!   ResponseComplete a request owes however it ends;
//! * `policy`: which rule, hence which level, a request gets (kube's
//!   `policyRuleEvaluator`, `staging/src/k8s.io/apiserver/pkg/audit/policy/checker.go`);
//! * `event`: the event made from a request and the notes later stages add
//!   to it (`staging/src/k8s.io/apiserver/pkg/audit/request.go` and `context.go`);
//! * `backend`: where events go, blocking or through the batch queue (kube's
//!   `staging/src/k8s.io/apiserver/plugin/pkg/audit/buffered/buffered.go`);
//! * `buffer`: that queue, its events grouped in batches as they come, as
//!   events or as the JSON lines every auditor takes;
//! * `failed_authentication`: the event for a request authentication refused
//!   (`staging/src/k8s.io/apiserver/pkg/endpoints/filters/authn_audit.go`);
//! * `latency`: the time each layer took, in a slow request's
//!   ResponseComplete (kube's `writeLatencyToAnnotation`, in audit.go).

mod backend;
mod buffer;
mod event;
mod failed_authentication;
mod latency;
mod policy;

use backend::Writing;
pub(crate) use backend::{AuditBackend, AuditWriters};
pub(crate) use event::AuditContext;
pub(crate) use failed_authentication::FailedAuthenticationAudit;
pub(crate) use latency::Layer;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;

use crate::audit_event::{AuditEvent, ResponseStatus};
use crate::body::{Request, Response};
use crate::config::stages::{AuditLevel, AuditRule, AuditStage};
use crate::context::{ConnectionControl, RequestContext};
use crate::handler::{Handler, SharedHandler};

use event::{
    ResponseObject, TRUNCATED_ANNOTATION, base_event, buffer_request_object,
    buffer_response_object, response_status, stamp, stamped, status_record,
};
use policy::matching_rule;

pub(crate) struct Audit {
    pub policy: Vec<AuditRule>,
    pub backend: Arc<AuditBackend>,
    pub next: SharedHandler,
}

impl Handler for Audit {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        Box::pin(async move {
            let rule = {
                let context = RequestContext::of(request.extensions());
                context
                    .info
                    .as_ref()
                    .and_then(|info| matching_rule(&self.policy, context.user.as_deref(), info))
            };
            let Some(rule) = rule else {
                return self.next.call(request).await;
            };
            let (level, omitted) = (rule.level, rule.omit_stages.as_slice());
            let mut request = request;
            let context = AuditContext::default();
            let received = {
                let learnt = RequestContext::of(request.extensions());
                if let Some(took) = learnt.authenticated_in {
                    context.took(Layer::Authentication, took);
                }
                learnt.received.map_or_else(Instant::now, |r| r.instant)
            };
            request.extensions_mut().insert(context.clone());
            let long_running = crate::context::is_long_running(&request);
            let emits = |stage: AuditStage| !omitted.contains(&stage);

            // From here on the request is completed in the log whatever
            // happens to it: answered, cut at its deadline, abandoned by its
            // client, closed by the shutdown (kube writes ResponseComplete
            // when its handler returns, however it returns).
            let mut completion = Completion {
                // Made in place: a local would keep its own copy of the event in
                // the future, moved or not.
                event: Some(base_event(&request, level)),
                omitted: !emits(AuditStage::ResponseComplete),
                interruption: Interruption::of(&request),
                received,
                context: context.clone(),
                backend: self.backend.clone(),
                writing: None,
            };
            if emits(AuditStage::RequestReceived) {
                completion.emit_stage(AuditStage::RequestReceived).await;
            }
            // Levels Request and above record the body, read after
            // RequestReceived, as kube logs the object when its handler
            // decodes it: a body that never comes leaves its request
            // completed all the same (504, 499). Boxed: inline its state
            // would be in every audited request's future.
            if level >= AuditLevel::Request {
                let object;
                (request, object) =
                    Box::pin(buffer_request_object(request, rule.managed_fields)).await;
                completion.recorded(object);
            }
            // The next steps' `call` runs inside the future caught, so a
            // panic in it, before any future of theirs, is caught too.
            let served = async { self.next.call(request).await };
            let response = match AssertUnwindSafe(served).catch_unwind().await {
                Ok(response) => response,
                Err(panic) => {
                    // kube writes Panic instead of ResponseComplete.
                    if let Some(event) = completion.event.take()
                        && emits(AuditStage::Panic)
                    {
                        let message = super::panic_recovery::panic_message(&*panic);
                        completion.emit(panicked(event, &context, &message)).await;
                    }
                    // Panic recovery, outside, turns it into a 500.
                    std::panic::resume_unwind(panic);
                }
            };
            let status = response_status(&response);
            if long_running {
                completion.answered(status, None);
                if emits(AuditStage::ResponseStarted) {
                    completion.emit_stage(AuditStage::ResponseStarted).await;
                }
                // The response completes when its body ends, after this returns.
                return crate::body::keep_until_done(response, completion);
            }
            let (response, response_object) = if level == AuditLevel::RequestResponse {
                Box::pin(buffer_response_object(response, rule.managed_fields)).await
            } else {
                (response, ResponseObject::Recorded(None))
            };
            match response_object {
                ResponseObject::Recorded(object) => {
                    completion.answered(status, object);
                    completion.write().await;
                    response
                }
                // Too large to record: the rest streams, and the response
                // completes when its body ends, as a long-running one.
                ResponseObject::Truncated => {
                    completion.answered(status, None);
                    completion.truncated();
                    crate::body::keep_until_done(response, completion)
                }
            }
        })
    }
}

/// The Panic event kube writes in place of ResponseComplete, its message
/// naming the panic's (`APIServer panic'd: %v`, `WithAudit` in
/// `staging/src/k8s.io/apiserver/pkg/endpoints/filters/audit.go`).
fn panicked(event: AuditEvent, context: &AuditContext, message: &str) -> AuditEvent {
    let mut event = stamped(event, AuditStage::Panic, context);
    event.response_status = Some(status_record(
        500,
        "InternalError",
        format!("APIServer panic'd: {message}"),
    ));
    event
}

/// A request's events: its ResponseComplete, written once, by
/// [`Completion::write`] when the response is ready (a long-running one's
/// when its body is done), or when the request is dropped before that,
/// recording why; and the stages before it. In blocking mode each write
/// runs in a task of its own, after the one before, which the request
/// waits for: a request dropped while it waits loses no event, and its
/// events keep their order.
struct Completion {
    /// None once written (or replaced by a Panic event).
    event: Option<AuditEvent>,
    /// True when the policy omits the stage.
    omitted: bool,
    interruption: Interruption,
    /// When the request arrived: a slow one's ResponseComplete says where
    /// its time went.
    received: Instant,
    context: AuditContext,
    backend: Arc<AuditBackend>,
    /// The request's blocking-mode write still going.
    writing: Option<Writing>,
}

impl Completion {
    /// The request's body, recorded (levels Request and above).
    fn recorded(&mut self, object: Option<String>) {
        if let Some(event) = &mut self.event {
            event.request_object = object;
        }
    }

    /// The response is ready: its status (and object) go in the event.
    fn answered(&mut self, status: ResponseStatus, object: Option<String>) {
        if let Some(event) = &mut self.event {
            event.response_status = Some(status);
            event.response_object = object;
        }
    }

    /// The response was too large to record: the event keeps neither
    /// object and says so, as kube's truncate backend truncates an event
    /// (`staging/src/k8s.io/apiserver/plugin/pkg/audit/truncate/truncate.go`).
    fn truncated(&mut self) {
        if let Some(event) = &mut self.event {
            event.request_object = None;
            event.response_object = None;
        }
        self.context.annotate(TRUNCATED_ANNOTATION, "true");
    }

    /// Emits the event as it stands at `stage` (RequestReceived,
    /// ResponseStarted), lent: it goes on to be the ResponseComplete.
    async fn emit_stage(&mut self, stage: AuditStage) {
        if let Some(event) = &mut self.event {
            stamp(event, stage, &self.context);
            self.writing = self.backend.emit_lent(event, self.writing.take());
            self.written().await;
        }
    }

    /// Emits `event`, made from the request's: a Panic.
    async fn emit(&mut self, event: AuditEvent) {
        self.writing = self.backend.emit_detached(event, self.writing.take());
        self.written().await;
    }

    /// Hands the ResponseComplete on now; in blocking mode it is written
    /// before this returns, hence before the response is sent.
    async fn write(&mut self) {
        if let Some(event) = self.event.take()
            && !self.omitted
        {
            self.context.completed_in(self.received.elapsed());
            let event = stamped(event, AuditStage::ResponseComplete, &self.context);
            self.emit(event).await;
        }
    }

    /// Waits for the write going (blocking mode).
    async fn written(&mut self) {
        if let Some(writing) = &mut self.writing {
            // Its failure (a panic in a filter's host code) is the write's;
            // the request goes on.
            let _ = writing.await;
            self.writing = None;
        }
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        // A write still going goes on in its task (the handle dropped).
        let after = self.writing.take();
        if let Some(mut event) = self.event.take()
            && !self.omitted
        {
            if event.response_status.is_none() {
                event.response_status = Some(self.interruption.status());
            }
            self.context.completed_in(self.received.elapsed());
            let event = stamped(event, AuditStage::ResponseComplete, &self.context);
            self.backend.emit_detached(event, after);
        }
    }
}

/// What tells why a request was dropped before its response: its deadline
/// passed (the timeout filter answered 504), the shutdown closed its
/// connection, or else its client went away.
struct Interruption {
    deadline: Option<Instant>,
    connection: Option<ConnectionControl>,
}

impl Interruption {
    fn of(request: &Request) -> Self {
        let context = RequestContext::of(request.extensions());
        Interruption {
            deadline: context.deadline,
            connection: context.control.clone(),
        }
    }

    /// The status the event records. Of the three, only the 504 reached the
    /// client; the others have no HTTP status of their own and take the
    /// nearest: 503 (the server went away) and nginx's 499 (Client Closed
    /// Request).
    fn status(&self) -> ResponseStatus {
        if self
            .deadline
            .is_some_and(|deadline| Instant::now() >= deadline)
        {
            status_record(
                504,
                "Timeout",
                format!("Timeout: {}", super::timeout::TIMEOUT_MESSAGE),
            )
        } else if self
            .connection
            .as_ref()
            .is_some_and(|control| control.shutdown_cut().is_cancelled())
        {
            status_record(
                503,
                "ServiceUnavailable",
                "the gateway shut down before the response was complete",
            )
        } else {
            status_record(
                499,
                "",
                "the client closed the connection before the response was complete",
            )
        }
    }
}
