//! The audit event made from a request (kube's `NewEventFromRequest`,
//! `LogRequestObject` and `LogResponseObject`, in
//! `staging/src/k8s.io/apiserver/pkg/audit/request.go`), and the notes the
//! stages inside audit add to it (kube's audit context,
//! `staging/src/k8s.io/apiserver/pkg/audit/context.go`).

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use http_body_util::BodyExt;
use serde_json::Value;

use crate::audit_event::{
    Annotations, AuditEvent, ObjectReference, ResponseStatus, bounded_user_agent,
};
use crate::body::{Body, Request, Response};
use crate::config::stages::{AuditLevel, AuditStage, ManagedFields};
use crate::context::{RequestContext, UserInfo};
use crate::status::Status;

use super::latency::{Latencies, Layer};

/// Filled in by the stages inside audit (authorization's decision, the
/// impersonated user) and read when the later events are made.
#[derive(Clone, Default)]
pub(crate) struct AuditContext(Arc<Mutex<AuditNotes>>);

#[derive(Default)]
struct AuditNotes {
    annotations: Annotations,
    impersonated: Option<Arc<UserInfo>>,
    latencies: Latencies,
}

impl AuditContext {
    pub(crate) fn annotate(&self, key: &'static str, value: impl Into<Cow<'static, str>>) {
        if let Ok(mut notes) = self.0.lock() {
            notes.annotations.insert(key, value);
        }
    }

    pub(crate) fn impersonating(&self, user: &Arc<UserInfo>) {
        if let Ok(mut notes) = self.0.lock() {
            notes.impersonated = Some(user.clone());
        }
    }

    /// `layer` took `took` (kube's latency trackers).
    pub(crate) fn took(&self, layer: Layer, took: Duration) {
        if let Ok(mut notes) = self.0.lock() {
            notes.latencies.add(layer, took);
        }
    }

    /// The request took `total` in all: kube's latency annotations, when
    /// it was slow.
    pub(super) fn completed_in(&self, total: Duration) {
        if let Ok(mut notes) = self.0.lock() {
            let AuditNotes {
                annotations,
                latencies,
                ..
            } = &mut *notes;
            latencies.annotate(annotations, total);
        }
    }

    /// The notes as they are now, in `event`.
    fn apply(&self, event: &mut AuditEvent) {
        if let Ok(notes) = self.0.lock() {
            event.annotations.clone_from(&notes.annotations);
            event.impersonated_user.clone_from(&notes.impersonated);
        }
    }
}

/// The event of `request` at `level`, at stage RequestReceived, made from
/// the request's own values (shared, not copied).
pub(super) fn base_event(request: &Request, level: AuditLevel) -> AuditEvent {
    let context = RequestContext::of(request.extensions());
    let info = context.info.as_ref();
    let received = context.received.map_or_else(SystemTime::now, |r| r.wall);
    AuditEvent {
        audit_id: context.audit_id.clone(),
        stage: AuditStage::RequestReceived,
        level,
        verb: info.map(|info| info.verb.clone()).unwrap_or_default(),
        request_uri: request.uri().path_and_query().cloned(),
        user: context.user.clone(),
        impersonated_user: None,
        // As the request's origin believes them (only a trusted proxy's
        // `X-Forwarded-For` and `X-Real-IP` count): the same belief the
        // upstream's `X-Forwarded-For` is made from.
        source_ips: context
            .origin
            .as_ref()
            .map(|origin| origin.source_ips().clone()),
        user_agent: request
            .headers()
            .get(http::header::USER_AGENT)
            .map(bounded_user_agent),
        object_ref: info
            .filter(|info| info.is_resource_request)
            .map(ObjectReference::of),
        response_status: None,
        request_object: None,
        response_object: None,
        request_received: received,
        stage_time: received,
        annotations: Annotations::default(),
    }
}

pub(super) fn stamped(
    mut event: AuditEvent,
    stage: AuditStage,
    context: &AuditContext,
) -> AuditEvent {
    stamp(&mut event, stage, context);
    event
}

/// Makes `event` the one of `stage`, now: its stage, time, annotations and
/// impersonated user, each set whole, so an event stamped for one stage is
/// stamped again for the next with nothing left of the first. A
/// RequestReceived's time is when the request was received, as kube's
/// `ProcessEventStage` stamps it (`staging/src/k8s.io/apiserver/pkg/audit/context.go`).
pub(super) fn stamp(event: &mut AuditEvent, stage: AuditStage, context: &AuditContext) {
    event.stage = stage;
    event.stage_time = match stage {
        AuditStage::RequestReceived => event.request_received,
        _ => SystemTime::now(),
    };
    context.apply(event);
}

/// A Status audit makes itself (a panic, a request cut short, a failed
/// authentication), as kube's audit filters write it.
pub(super) fn status_record(
    code: u16,
    reason: &'static str,
    message: impl Into<Cow<'static, str>>,
) -> ResponseStatus {
    ResponseStatus {
        code,
        outcome: if code >= 400 { "Failure" } else { "Success" },
        reason: Cow::Borrowed(reason),
        message: message.into(),
        details: None,
    }
}

/// What the event records of `response`: the Status the gateway answered
/// with, when it did (kube's `LogResponseObject`, called by
/// `WriteObjectNegotiated` for every Status kube writes), else its code.
pub(super) fn response_status(response: &Response) -> ResponseStatus {
    match response.extensions().get::<Status>() {
        Some(status) => ResponseStatus::of(status),
        None => ResponseStatus::code_only(response.status().as_u16()),
    }
}

/// Reads the request body to record it (levels Request and above), and puts
/// it back. A body that is not JSON is forwarded but not recorded.
pub(super) async fn buffer_request_object(
    request: Request,
    managed_fields: ManagedFields,
) -> (Request, Option<String>) {
    let (parts, body) = request.into_parts();
    match body.collect().await {
        Ok(collected) => {
            let bytes = collected.to_bytes();
            let object = json_text(&bytes, managed_fields);
            (http::Request::from_parts(parts, Body::full(bytes)), object)
        }
        // The body failed (too large, client gone): the handler will meet
        // the same error and answer it; audit records no object.
        Err(error) => (
            http::Request::from_parts(parts, Body::wrap(FailedBody(Some(error)))),
            None,
        ),
    }
}

/// The most of a response body audit holds to record it as the
/// responseObject (level RequestResponse): 3 MiB, kube's request body limit
/// (`MaxRequestBodyBytes`, `staging/src/k8s.io/apiserver/pkg/server/config.go`),
/// so any object kube would store is recorded whole and only a larger list
/// is not. Past it the response streams on and its event is truncated, as
/// kube's truncate backend truncates an event too large
/// (`staging/src/k8s.io/apiserver/plugin/pkg/audit/truncate/truncate.go`).
pub(super) const MAX_RECORDED_RESPONSE: usize = 3 * 1024 * 1024;

/// The annotation of an event whose objects were left out, kube's truncate
/// backend's.
pub(super) const TRUNCATED_ANNOTATION: &str = "audit.k8s.io/truncated";

/// What audit makes of a response body at level RequestResponse.
pub(super) enum ResponseObject {
    /// The body ended within [`MAX_RECORDED_RESPONSE`]: this object, when it
    /// is JSON (none when it is not, or when the body failed).
    Recorded(Option<String>),
    /// The body passed [`MAX_RECORDED_RESPONSE`]: not recorded, and the
    /// response completes when its body ends.
    Truncated,
}

/// Reads the response body to record it, up to [`MAX_RECORDED_RESPONSE`],
/// and puts it back: the response sends what was read, then whatever is
/// left of the body as it comes, every byte once and in order.
pub(super) async fn buffer_response_object(
    response: Response,
    managed_fields: ManagedFields,
) -> (Response, ResponseObject) {
    let (parts, mut body) = response.into_parts();
    let mut held = VecDeque::new();
    let mut size = 0;
    let (rest, object) = loop {
        match body.frame().await {
            Some(Ok(frame)) => {
                size += frame.data_ref().map_or(0, bytes::Bytes::len);
                held.push_back(frame);
                if size > MAX_RECORDED_RESPONSE {
                    break (body, ResponseObject::Truncated);
                }
            }
            None => {
                let bytes: Vec<u8> = held
                    .iter()
                    .filter_map(http_body::Frame::data_ref)
                    .flat_map(|data| data.iter().copied())
                    .collect();
                let object = json_text(&bytes, managed_fields);
                break (Body::empty(), ResponseObject::Recorded(object));
            }
            // The body failed: the client gets what came before, then the
            // error; audit records no object.
            Some(Err(error)) => {
                break (
                    Body::wrap(FailedBody(Some(error))),
                    ResponseObject::Recorded(None),
                );
            }
        }
    };
    let body = Body::wrap(Resumed { held, rest });
    (http::Response::from_parts(parts, body), object)
}

/// The body as the event records it: its text when it is JSON, without
/// managed fields when the rule omits them.
fn json_text(bytes: &[u8], managed_fields: ManagedFields) -> Option<String> {
    let mut object = serde_json::from_slice::<Value>(bytes).ok()?;
    if managed_fields == ManagedFields::Omitted && remove_managed_fields(&mut object) {
        return serde_json::to_string(&object).ok();
    }
    String::from_utf8(bytes.to_vec()).ok()
}

/// kube's `copyWithoutManagedFields` (`staging/src/k8s.io/apiserver/pkg/audit/request.go`):
/// removes `metadata.managedFields` from the object, from each item of a
/// list and from each row's object of a Table; true when it removed any.
fn remove_managed_fields(object: &mut Value) -> bool {
    let mut removed = remove_own_managed_fields(object);
    if let Some(items) = object.get_mut("items").and_then(Value::as_array_mut) {
        for item in items {
            removed |= remove_own_managed_fields(item);
        }
    }
    if object.get("kind").and_then(Value::as_str) == Some("Table")
        && let Some(rows) = object.get_mut("rows").and_then(Value::as_array_mut)
    {
        for row in rows {
            if let Some(row_object) = row.get_mut("object") {
                removed |= remove_own_managed_fields(row_object);
            }
        }
    }
    removed
}

fn remove_own_managed_fields(object: &mut Value) -> bool {
    object
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .and_then(|metadata| metadata.shift_remove("managedFields"))
        .is_some()
}

/// A body that ends with the error its original ended with.
struct FailedBody(Option<crate::body::BodyError>);

impl http_body::Body for FailedBody {
    type Data = bytes::Bytes;
    type Error = crate::body::BodyError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        std::task::Poll::Ready(self.0.take().map(Err))
    }
}

/// The frames read already, then the rest of the body.
struct Resumed {
    held: VecDeque<http_body::Frame<bytes::Bytes>>,
    rest: Body,
}

impl http_body::Body for Resumed {
    type Data = bytes::Bytes;
    type Error = crate::body::BodyError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        match self.held.pop_front() {
            Some(frame) => std::task::Poll::Ready(Some(Ok(frame))),
            None => std::pin::Pin::new(&mut self.rest).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.held.is_empty() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        let held: u64 = self
            .held
            .iter()
            .filter_map(http_body::Frame::data_ref)
            .map(|data| data.len() as u64)
            .sum();
        let rest = self.rest.size_hint();
        let mut hint = http_body::SizeHint::new();
        hint.set_lower(rest.lower().saturating_add(held));
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper.saturating_add(held));
        }
        hint
    }
}
