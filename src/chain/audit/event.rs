//! The audit event made from a request (kube's `NewEventFromRequest`,
//! `LogRequestObject` and `LogResponseObject`, in
//! `staging/src/k8s.io/apiserver/pkg/audit/request.go`), and the notes the
//! stages inside audit add to it (kube's audit context,
//! `staging/src/k8s.io/apiserver/pkg/audit/context.go`).

use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use http_body_util::BodyExt;

use crate::body::{Body, Request, Response};
use crate::config::stages::AuditLevel;
use crate::context::{AuditId, ClientOrigin, ReceivedAt, UserInfo};
use crate::request_info::RequestInfo;
use crate::wasm::bindings::types::Status;
use crate::wasm::convert;
use crate::wasm::filter::{Annotation, Event, Level, ObjectReference, Stage};

/// Filled in by the stages inside audit (authorization's decision, the
/// impersonated user) and read when the later events are made.
#[derive(Clone, Default)]
pub(crate) struct AuditContext(Arc<Mutex<AuditNotes>>);

#[derive(Default)]
struct AuditNotes {
    /// The keys are the gateway's own; the values mostly so (authorization's
    /// `allow`), kept without a copy until an event is made.
    annotations: Vec<(&'static str, Cow<'static, str>)>,
    impersonated: Option<UserInfo>,
}

impl AuditContext {
    pub(crate) fn annotate(&self, key: &'static str, value: impl Into<Cow<'static, str>>) {
        if let Ok(mut notes) = self.0.lock() {
            notes.annotations.push((key, value.into()));
        }
    }

    pub(crate) fn impersonating(&self, user: &UserInfo) {
        if let Ok(mut notes) = self.0.lock() {
            notes.impersonated = Some(user.clone());
        }
    }

    fn apply(&self, event: &mut Event) {
        if let Ok(notes) = self.0.lock() {
            event.annotations = notes
                .annotations
                .iter()
                .map(|(key, value)| Annotation {
                    key: (*key).to_owned(),
                    value: value.clone().into_owned(),
                })
                .collect();
            event.impersonated_user = notes.impersonated.as_ref().map(convert::user_to_wit);
        }
    }
}

pub(super) fn base_event(request: &Request, level: AuditLevel) -> Event {
    let extensions = request.extensions();
    let info = extensions.get::<RequestInfo>();
    let received = extensions
        .get::<ReceivedAt>()
        .map_or_else(SystemTime::now, |r| r.wall);
    Event {
        audit_id: extensions
            .get::<AuditId>()
            .map(|id| id.0.clone())
            .unwrap_or_default(),
        stage: Stage::RequestReceived,
        level: match level {
            AuditLevel::None | AuditLevel::Metadata => Level::Metadata,
            AuditLevel::Request => Level::Request,
            AuditLevel::RequestResponse => Level::RequestResponse,
        },
        verb: info.map(|i| i.verb.as_str().to_owned()).unwrap_or_default(),
        request_uri: request
            .uri()
            .path_and_query()
            .map(|pq| pq.as_str().to_owned())
            .unwrap_or_default(),
        user: UserInfo::authenticated(extensions).map_or_else(
            || convert::user_to_wit(&UserInfo::default()),
            convert::user_to_wit,
        ),
        impersonated_user: None,
        source_ips: source_ips(request),
        user_agent: request
            .headers()
            .get(http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned(),
        // Copied as `str`s, not by `CompactString`'s `Display` (see
        // `convert::request_info`).
        object_ref: info
            .filter(|i| i.is_resource_request)
            .map(|i| ObjectReference {
                resource: i.resource.as_str().to_owned(),
                namespace: i.namespace.as_str().to_owned(),
                name: i.name.as_str().to_owned(),
                api_group: i.api_group.as_str().to_owned(),
                api_version: i.api_version.as_str().to_owned(),
                subresource: i.subresource.as_str().to_owned(),
            }),
        response_status: None,
        request_received_timestamp: micro_time(received),
        stage_timestamp: String::new(),
        annotations: Vec::new(),
        request_object: None,
        response_object: None,
    }
}

/// kube's source IPs, as the request's origin believes them (only a trusted
/// proxy's `X-Forwarded-For` and `X-Real-IP` count): the same belief the
/// upstream's `X-Forwarded-For` is made from.
fn source_ips(request: &Request) -> Vec<String> {
    request
        .extensions()
        .get::<ClientOrigin>()
        .map(ClientOrigin::source_ips)
        .unwrap_or_default()
}

pub(super) fn stamped(mut event: Event, stage: Stage, context: &AuditContext) -> Event {
    stamp(&mut event, stage, context);
    event
}

/// Makes `event` the one of `stage`, now: its stage, time, annotations and
/// impersonated user, each set whole, so a record stamped for one stage is
/// stamped again for the next with nothing left of the first.
pub(super) fn stamp(event: &mut Event, stage: Stage, context: &AuditContext) {
    event.stage = stage;
    event.stage_timestamp = micro_time(SystemTime::now());
    context.apply(event);
}

/// `time` as kube's `metav1.MicroTime` writes it, RFC 3339 in UTC with six
/// digits of microseconds (`2026-12-05T02:43:40.123456Z`). An audited
/// request takes two, so each thread keeps its current second's date and
/// time formatted (by humantime) and writes only the microseconds, as
/// nginx keeps its log's time formatted (`ngx_time_update`,
/// `src/core/ngx_times.c`). A clock set before 1970 gives the epoch
/// (humantime would panic).
fn micro_time(time: SystemTime) -> String {
    thread_local! {
        /// A second since the epoch, and its date and time without the `Z`.
        static SECOND: RefCell<(u64, String)> = const { RefCell::new((0, String::new())) };
    }
    let since_epoch = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let (seconds, micros) = (since_epoch.as_secs(), since_epoch.subsec_micros());
    SECOND.with_borrow_mut(|(second, formatted)| {
        if *second != seconds || formatted.is_empty() {
            let whole = SystemTime::UNIX_EPOCH + Duration::from_secs(seconds);
            *formatted = humantime::format_rfc3339_seconds(whole).to_string();
            formatted.pop();
            *second = seconds;
        }
        let mut digits = [b'0'; 6];
        let mut rest = micros;
        for digit in digits.iter_mut().rev() {
            *digit = b'0' + (rest % 10) as u8;
            rest /= 10;
        }
        let mut text = String::with_capacity(formatted.len() + 8);
        text.push_str(formatted);
        text.push('.');
        text.extend(digits.map(char::from));
        text.push('Z');
        text
    })
}

pub(super) fn status_record(code: u16, reason: &str, message: &str) -> Status {
    Status {
        code,
        reason: reason.to_owned(),
        message: message.to_owned(),
    }
}

/// Reads the request body to record it (levels Request and above), and puts
/// it back. A body that is not JSON is forwarded but not recorded.
pub(super) async fn buffer_request_object(request: Request) -> (Request, Option<String>) {
    let (parts, body) = request.into_parts();
    match body.collect().await {
        Ok(collected) => {
            let bytes = collected.to_bytes();
            let object = json_text(&bytes);
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

pub(super) async fn buffer_response_object(response: Response) -> (Response, Option<String>) {
    let (parts, body) = response.into_parts();
    match body.collect().await {
        Ok(collected) => {
            let bytes = collected.to_bytes();
            let object = json_text(&bytes);
            (http::Response::from_parts(parts, Body::full(bytes)), object)
        }
        Err(error) => (
            http::Response::from_parts(parts, Body::wrap(FailedBody(Some(error)))),
            None,
        ),
    }
}

fn json_text(bytes: &[u8]) -> Option<String> {
    serde_json::from_slice::<serde_json::Value>(bytes).ok()?;
    String::from_utf8(bytes.to_vec()).ok()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The same text as humantime's own microsecond format, for times in
    /// one second (the cached date reused), across seconds, days and years.
    #[test]
    fn micro_times_are_humantimes() {
        let epoch = SystemTime::UNIX_EPOCH;
        let times = [
            epoch + Duration::new(1_796_438_620, 0),
            epoch + Duration::new(1_796_438_620, 1_000),
            epoch + Duration::new(1_796_438_620, 999_999_999),
            epoch + Duration::new(1_796_438_621, 123_456_789),
            epoch + Duration::new(1_796_438_620, 500_000_000),
            epoch + Duration::new(1_798_761_599, 999_999_000),
            epoch + Duration::new(1_798_761_600, 7_000),
            epoch,
            SystemTime::now(),
        ];
        for time in times {
            assert_eq!(
                micro_time(time),
                humantime::format_rfc3339_micros(time).to_string(),
                "{time:?}"
            );
        }
        let before = epoch - Duration::new(1, 250_000_000);
        assert_eq!(micro_time(before), "1970-01-01T00:00:00.000000Z");
    }
}
