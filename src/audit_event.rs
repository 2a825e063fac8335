//! kube's audit `Event` (`staging/src/k8s.io/apiserver/pkg/apis/audit/types.go`)
//! as the gateway keeps it, and its JSON line.
//!
//! An event is made from the request's own values, shared rather than
//! copied: its user (an `Arc`), its URI, user agent and audit ID (the bytes
//! the request holds them in), its source IPs, its request info's names
//! (inline strings); its times are kept as the clock gave them. Every
//! auditor that takes events serialised gets the line
//! [`AuditEvent::write_line`] writes from these, as kube's log backend
//! writes it with `--audit-log-format=json`
//! (`staging/src/k8s.io/apiserver/plugin/pkg/audit/log/backend.go`): one
//! `audit.k8s.io/v1` `Event` JSON object a line, its field names, order and
//! `omitempty` as `staging/src/k8s.io/apiserver/pkg/apis/audit/v1/types.go`.
//! Only an auditor that takes records has an event copied, into the WIT's
//! record (`wasm::convert::audit_event`).

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use compact_str::CompactString;
use http::HeaderValue;
use http::uri::PathAndQuery;
use serde::{Serialize, Serializer};
use sonic_rs::LazyValue;

use crate::config::stages::{AuditLevel, AuditStage};
use crate::context::{AuditId, SourceIps, UserInfo};
use crate::request_info::RequestInfo;
use crate::status::{Details, Status};

/// One audit event of a request, at one stage.
#[derive(Debug, Clone)]
pub struct AuditEvent {
    /// None only for a request that reached audit without one (none does:
    /// the audit ID is the chain's first steps').
    pub audit_id: Option<AuditId>,
    /// The stage it tells of.
    pub stage: AuditStage,
    /// An event at level None has no line; the policy gives none that level.
    pub level: AuditLevel,
    /// kube's verb (request info's).
    pub verb: CompactString,
    /// The path and query, canonical: what the upstream receives.
    pub request_uri: Option<PathAndQuery>,
    /// None for a request no authenticator accepted: kube records an empty
    /// user then.
    pub user: Option<Arc<UserInfo>>,
    /// The user the request acts as, once impersonation allowed it.
    pub impersonated_user: Option<Arc<UserInfo>>,
    /// kube's `sourceIPs`, as the request's origin believes them.
    pub source_ips: Option<SourceIps>,
    /// Recorded when it is visible ASCII, as kube's `userAgent` reads it,
    /// and bounded ([`bounded_user_agent`]).
    pub user_agent: Option<HeaderValue>,
    /// The object of a resource request.
    pub object_ref: Option<ObjectReference>,
    /// The response's status, once there is one.
    pub response_status: Option<ResponseStatus>,
    /// The bodies, for levels Request and RequestResponse, when they are
    /// JSON.
    pub request_object: Option<String>,
    /// See `request_object`.
    pub response_object: Option<String>,
    /// When the request arrived.
    pub request_received: SystemTime,
    /// When the event's stage was reached.
    pub stage_time: SystemTime,
    /// What the stages inside audit noted (authorization's decision).
    pub annotations: Annotations,
}

/// audit/v1 `ObjectReference`: the resource a request is about.
#[derive(Debug, Clone, Default)]
pub struct ObjectReference {
    /// `pods`.
    pub resource: CompactString,
    /// Empty for a cluster-scoped resource.
    pub namespace: CompactString,
    /// Empty for a collection.
    pub name: CompactString,
    /// Empty for the core group.
    pub api_group: CompactString,
    /// `v1`.
    pub api_version: CompactString,
    /// `status` in `/pods/foo/status`.
    pub subresource: CompactString,
}

impl ObjectReference {
    /// The object a resource request names.
    pub(crate) fn of(info: &RequestInfo) -> Self {
        ObjectReference {
            resource: info.resource.clone(),
            namespace: info.namespace.clone(),
            name: info.name.clone(),
            api_group: info.api_group.clone(),
            api_version: info.api_version.clone(),
            subresource: info.subresource.clone(),
        }
    }
}

/// The `responseStatus` audit records: the code of a response that is not
/// a Status (an upstream's), or the bounded fields of the Status the
/// gateway answered with, as kube's `LogResponseObject` copies them from
/// the Status it writes (`staging/src/k8s.io/apiserver/pkg/audit/request.go`,
/// `context.go`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseStatus {
    /// The HTTP status code.
    pub code: u16,
    /// kube's `status`, `Failure` or `Success`; empty for a response that
    /// is not a Status.
    pub outcome: &'static str,
    /// kube's reason (`Forbidden`), empty for a plain success.
    pub reason: Cow<'static, str>,
    /// What went wrong, empty for a plain success.
    pub message: Cow<'static, str>,
    /// The Status's details, when it has them.
    pub details: Option<Box<Details>>,
}

impl ResponseStatus {
    /// A response that is not a Status: its code only, as kube's audit
    /// response writer records it.
    pub fn code_only(code: u16) -> Self {
        ResponseStatus {
            code,
            outcome: "",
            reason: Cow::Borrowed(""),
            message: Cow::Borrowed(""),
            details: None,
        }
    }

    /// The Status the gateway answered with.
    pub fn of(status: &Status) -> Self {
        ResponseStatus {
            code: status.code,
            outcome: status.status,
            reason: Cow::Owned(status.reason.clone()),
            message: Cow::Owned(status.message.clone()),
            details: status.details.clone().map(Box::new),
        }
    }
}

/// An event's annotations as kube's audit context keeps them
/// (`staging/src/k8s.io/apiserver/pkg/audit/context.go`): one value a key,
/// the first one given, in key order (the order of their JSON object). The
/// keys are the gateway's own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Annotations(Vec<(&'static str, Cow<'static, str>)>);

impl Annotations {
    /// Adds `key`, unless it has a value already (kube logs that and keeps
    /// the first).
    pub fn insert(&mut self, key: &'static str, value: impl Into<Cow<'static, str>>) {
        match self.0.binary_search_by(|(known, _)| known.cmp(&key)) {
            Ok(_) => tracing::warn!(key, "an audit annotation is set already: kept as it was"),
            Err(place) => self.0.insert(place, (key, value.into())),
        }
    }

    /// The keys and values, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &str)> {
        self.0.iter().map(|(key, value)| (*key, value.as_ref()))
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for Annotations {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

impl AuditEvent {
    /// Appends the event's JSON line, with its newline, to `out`; false,
    /// with nothing appended, for an event at level None. A body that is
    /// not JSON is left out of the line, with a warning.
    pub fn write_line(&self, out: &mut Vec<u8>) -> bool {
        if self.level == AuditLevel::None {
            return false;
        }
        let start = out.len();
        match sonic_rs::to_writer(&mut *out, &KubeEvent::from(self)) {
            Ok(()) => {
                out.push(b'\n');
                true
            }
            // Not reached with these types (string keys, raw JSON checked
            // already); a failure leaves no half line.
            Err(error) => {
                out.truncate(start);
                tracing::error!(audit_id = self.audit_id(), %error, "cannot encode the audit event: left out of the audit lines");
                false
            }
        }
    }

    /// The audit ID as text, empty when there is none.
    pub fn audit_id(&self) -> &str {
        self.audit_id.as_ref().map_or("", AuditId::as_str)
    }

    /// The user agent, empty when there is none or it is not visible ASCII.
    pub fn user_agent(&self) -> &str {
        self.user_agent
            .as_ref()
            .and_then(|agent| agent.to_str().ok())
            .unwrap_or("")
    }

    /// The path and query the client asked for, as the gateway serves it.
    pub fn request_uri(&self) -> &str {
        self.request_uri.as_ref().map_or("", PathAndQuery::as_str)
    }
}

/// kube's `maxUserAgentLength`, in bytes.
const MAX_USER_AGENT: usize = 1024;

/// The user agent an event records: kube's `maybeTruncateUserAgent`
/// (`staging/src/k8s.io/apiserver/pkg/audit/request.go`) keeps its first
/// 1024 bytes and adds `...TRUNCATED`; a shorter one is shared, not copied.
pub(crate) fn bounded_user_agent(agent: &HeaderValue) -> HeaderValue {
    let bytes = agent.as_bytes();
    if bytes.len() <= MAX_USER_AGENT {
        return agent.clone();
    }
    let mut truncated = Vec::with_capacity(MAX_USER_AGENT + 12);
    truncated.extend_from_slice(&bytes[..MAX_USER_AGENT]);
    truncated.extend_from_slice(b"...TRUNCATED");
    // A header value's prefix and ASCII are a header value; were it not,
    // the value would be left out rather than recorded whole.
    HeaderValue::from_bytes(&truncated).unwrap_or(HeaderValue::from_static(""))
}

/// kube's level names.
fn level_name(level: AuditLevel) -> &'static str {
    match level {
        AuditLevel::None => "None",
        AuditLevel::Metadata => "Metadata",
        AuditLevel::Request => "Request",
        AuditLevel::RequestResponse => "RequestResponse",
    }
}

fn stage_name(stage: AuditStage) -> &'static str {
    match stage {
        AuditStage::RequestReceived => "RequestReceived",
        AuditStage::ResponseStarted => "ResponseStarted",
        AuditStage::ResponseComplete => "ResponseComplete",
        AuditStage::Panic => "Panic",
    }
}

/// A time as kube's `metav1.MicroTime` writes it: RFC 3339 in UTC with six
/// digits of microseconds (`2026-12-05T02:43:40.123456Z`), kept inline.
#[derive(Clone, Copy)]
pub struct MicroTime {
    text: [u8; MICRO_TIME_BYTES],
    len: usize,
}

/// `2026-12-05T02:43:40.123456Z`'s length: years have four digits.
const MICRO_TIME_BYTES: usize = 27;

/// The last second of the year 9999, humantime's last.
const LAST_SECOND: u64 = 253_402_300_799;

impl MicroTime {
    /// The text.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.text[..self.len]).unwrap_or("")
    }
}

impl Serialize for MicroTime {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// `time` as a [`MicroTime`]. An event takes two, so each thread keeps its
/// current second's date and time formatted (by humantime) and writes only
/// the microseconds, as nginx keeps its log's time formatted
/// (`ngx_time_update`, `src/core/ngx_times.c`). A clock set before 1970
/// gives the epoch, one set past 9999 that year's last second (humantime
/// would panic).
pub fn micro_time(time: SystemTime) -> MicroTime {
    thread_local! {
        /// A second since the epoch, and its date and time without the `Z`.
        static SECOND: RefCell<(u64, String)> = const { RefCell::new((0, String::new())) };
    }
    let since_epoch = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let (seconds, micros) = (
        since_epoch.as_secs().min(LAST_SECOND),
        since_epoch.subsec_micros(),
    );
    SECOND.with_borrow_mut(|(second, formatted)| {
        if *second != seconds || formatted.is_empty() {
            let whole = SystemTime::UNIX_EPOCH + Duration::from_secs(seconds);
            *formatted = humantime::format_rfc3339_seconds(whole).to_string();
            formatted.pop();
            *second = seconds;
        }
        let mut time = MicroTime {
            text: [0; MICRO_TIME_BYTES],
            len: 0,
        };
        let mut push = |bytes: &[u8]| {
            let end = (time.len + bytes.len()).min(MICRO_TIME_BYTES);
            time.text[time.len..end].copy_from_slice(&bytes[..end - time.len]);
            time.len = end;
        };
        push(formatted.as_bytes());
        let mut digits = *b".000000Z";
        let mut rest = micros;
        for digit in digits[1..7].iter_mut().rev() {
            *digit = b'0' + (rest % 10) as u8;
            rest /= 10;
        }
        push(&digits);
        time
    })
}

/// authentication.k8s.io/v1 `UserInfo`.
#[derive(Serialize, Default)]
struct KubeUserInfo<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    username: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    uid: &'a str,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    groups: &'a [String],
    /// kube's map: a key given twice has its values together.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    extra: BTreeMap<&'a str, Vec<&'a str>>,
}

impl<'a> From<&'a UserInfo> for KubeUserInfo<'a> {
    fn from(user: &'a UserInfo) -> Self {
        let mut extra: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (key, values) in &user.extra {
            extra
                .entry(key.as_str())
                .or_default()
                .extend(values.iter().map(String::as_str));
        }
        KubeUserInfo {
            username: &user.name,
            uid: &user.uid,
            groups: &user.groups,
            extra,
        }
    }
}

/// audit/v1 `ObjectReference`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct KubeObjectReference<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    resource: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    namespace: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    api_group: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    api_version: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    subresource: &'a str,
}

impl<'a> From<&'a ObjectReference> for KubeObjectReference<'a> {
    fn from(object: &'a ObjectReference) -> Self {
        KubeObjectReference {
            resource: &object.resource,
            namespace: &object.namespace,
            name: &object.name,
            api_group: &object.api_group,
            api_version: &object.api_version,
            subresource: &object.subresource,
        }
    }
}

/// The empty `ListMeta` every metav1 `Status` carries.
#[derive(Serialize)]
struct EmptyMeta {}

/// meta/v1 `Status`, as audit records it: the code only for a response
/// that was not a Status, the Status's bounded fields for one that was.
#[derive(Serialize)]
struct KubeStatus<'a> {
    metadata: EmptyMeta,
    #[serde(skip_serializing_if = "str::is_empty")]
    status: &'static str,
    #[serde(skip_serializing_if = "str::is_empty")]
    message: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    reason: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<&'a Details>,
    #[serde(skip_serializing_if = "is_zero")]
    code: u16,
}

fn is_zero(code: &u16) -> bool {
    *code == 0
}

impl<'a> From<&'a ResponseStatus> for KubeStatus<'a> {
    fn from(status: &'a ResponseStatus) -> Self {
        KubeStatus {
            metadata: EmptyMeta {},
            status: status.outcome,
            message: &status.message,
            reason: &status.reason,
            details: status.details.as_deref(),
            code: status.code,
        }
    }
}

/// The source IPs as a JSON list.
struct SourceIpList<'a>(&'a SourceIps);

impl Serialize for SourceIpList<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter())
    }
}

/// audit/v1 `Event`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct KubeEvent<'a> {
    kind: &'static str,
    api_version: &'static str,
    level: &'static str,
    #[serde(rename = "auditID")]
    audit_id: &'a str,
    stage: &'static str,
    #[serde(rename = "requestURI")]
    request_uri: &'a str,
    verb: &'a str,
    user: KubeUserInfo<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    impersonated_user: Option<KubeUserInfo<'a>>,
    #[serde(rename = "sourceIPs", skip_serializing_if = "Option::is_none")]
    source_ips: Option<SourceIpList<'a>>,
    #[serde(skip_serializing_if = "str::is_empty")]
    user_agent: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    object_ref: Option<KubeObjectReference<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_status: Option<KubeStatus<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    request_object: Option<LazyValue<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_object: Option<LazyValue<'a>>,
    request_received_timestamp: MicroTime,
    stage_timestamp: MicroTime,
    #[serde(skip_serializing_if = "Annotations::is_empty")]
    annotations: &'a Annotations,
}

impl<'a> From<&'a AuditEvent> for KubeEvent<'a> {
    fn from(event: &'a AuditEvent) -> Self {
        let at_least_request = event.level >= AuditLevel::Request;
        let request_object = at_least_request
            .then(|| raw(event.request_object.as_deref(), "request object", event))
            .flatten();
        let response_object = (event.level == AuditLevel::RequestResponse)
            .then(|| raw(event.response_object.as_deref(), "response object", event))
            .flatten();
        KubeEvent {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level: level_name(event.level),
            audit_id: event.audit_id(),
            stage: stage_name(event.stage),
            request_uri: event.request_uri(),
            verb: &event.verb,
            user: event
                .user
                .as_deref()
                .map_or_else(KubeUserInfo::default, Into::into),
            impersonated_user: event.impersonated_user.as_deref().map(Into::into),
            source_ips: event.source_ips.as_ref().map(SourceIpList),
            user_agent: event.user_agent(),
            object_ref: event.object_ref.as_ref().map(Into::into),
            response_status: event.response_status.as_ref().map(Into::into),
            request_object,
            response_object,
            request_received_timestamp: micro_time(event.request_received),
            stage_timestamp: micro_time(event.stage_time),
            annotations: &event.annotations,
        }
    }
}

/// A body for embedding as raw JSON, byte for byte (what surrounds it
/// trimmed); None (and a warning) when it is not JSON. The warning names
/// where, never what: a body is the client's data.
fn raw<'a>(body: Option<&'a str>, what: &str, event: &AuditEvent) -> Option<LazyValue<'a>> {
    let body = body?;
    match sonic_rs::from_str::<LazyValue<'a>>(body) {
        Ok(raw) => Some(raw),
        Err(error) => {
            let (line, column) = (error.line(), error.column());
            tracing::warn!(
                audit_id = event.audit_id(),
                line,
                column,
                "the audit event's {what} is not JSON: left out of its line"
            );
            None
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// 2026-01-02T03:04:05Z plus `micros`.
    fn at(micros: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_323_045) + Duration::from_micros(micros)
    }

    fn user(name: &str) -> UserInfo {
        UserInfo {
            name: name.into(),
            ..UserInfo::default()
        }
    }

    /// An event with every field set.
    pub(crate) fn event() -> AuditEvent {
        let mut annotations = Annotations::default();
        annotations.insert("authorization.k8s.io/reason", "RBAC: allowed");
        annotations.insert("authorization.k8s.io/decision", "allow");
        AuditEvent {
            audit_id: Some(AuditId::from(HeaderValue::from_static(
                "0b1c7a4e-1d2f-4c55-9a51-0d5b7c1e2f3a",
            ))),
            stage: AuditStage::ResponseComplete,
            level: AuditLevel::RequestResponse,
            verb: "create".into(),
            request_uri: Some(PathAndQuery::from_static(
                "/api/v1/namespaces/default/pods?dryRun=All",
            )),
            user: Some(Arc::new(UserInfo {
                name: "alice".into(),
                uid: "1".into(),
                groups: vec!["dev".into(), "system:authenticated".into()],
                extra: vec![
                    ("scopes".into(), vec!["a".into()]),
                    ("b".into(), vec![]),
                    ("scopes".into(), vec!["b".into()]),
                ],
            })),
            impersonated_user: None,
            source_ips: Some(SourceIps::Peer(HeaderValue::from_static("10.0.0.1"))),
            user_agent: Some(HeaderValue::from_static("kubectl/v1.31.0")),
            object_ref: Some(ObjectReference {
                resource: "pods".into(),
                namespace: "default".into(),
                api_version: "v1".into(),
                ..ObjectReference::default()
            }),
            response_status: Some(ResponseStatus::code_only(201)),
            request_object: Some(
                r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p"}}"#.into(),
            ),
            response_object: Some(
                r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","uid":"u"}}"#.into(),
            ),
            request_received: at(123_456),
            stage_time: at(234_567),
            annotations,
        }
    }

    /// The one line `event` writes, without its newline.
    pub(crate) fn line(event: &AuditEvent) -> String {
        let mut out = Vec::new();
        assert!(event.write_line(&mut out));
        let text = String::from_utf8(out).unwrap();
        let line = text.strip_suffix('\n').unwrap();
        assert!(!line.contains('\n'));
        line.to_owned()
    }

    fn value(event: &AuditEvent) -> Value {
        serde_json::from_str(&line(event)).unwrap()
    }

    #[test]
    fn full_event_shape_and_order() {
        let want = concat!(
            r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"RequestResponse","#,
            r#""auditID":"0b1c7a4e-1d2f-4c55-9a51-0d5b7c1e2f3a","stage":"ResponseComplete","#,
            r#""requestURI":"/api/v1/namespaces/default/pods?dryRun=All","verb":"create","#,
            r#""user":{"username":"alice","uid":"1","groups":["dev","system:authenticated"],"extra":{"b":[],"scopes":["a","b"]}},"#,
            r#""sourceIPs":["10.0.0.1"],"userAgent":"kubectl/v1.31.0","#,
            r#""objectRef":{"resource":"pods","namespace":"default","apiVersion":"v1"},"#,
            r#""responseStatus":{"metadata":{},"code":201},"#,
            r#""requestObject":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p"}},"#,
            r#""responseObject":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","uid":"u"}},"#,
            r#""requestReceivedTimestamp":"2026-01-02T03:04:05.123456Z","stageTimestamp":"2026-01-02T03:04:05.234567Z","#,
            r#""annotations":{"authorization.k8s.io/decision":"allow","authorization.k8s.io/reason":"RBAC: allowed"}}"#,
        );
        assert_eq!(line(&event()), want);
    }

    #[test]
    fn minimal_event_omits_empties() {
        let minimal = AuditEvent {
            stage: AuditStage::RequestReceived,
            level: AuditLevel::Metadata,
            verb: "get".into(),
            request_uri: Some(PathAndQuery::from_static("/healthz")),
            user: Some(Arc::new(user("system:anonymous"))),
            source_ips: None,
            user_agent: None,
            object_ref: None,
            response_status: None,
            annotations: Annotations::default(),
            ..event()
        };
        assert_eq!(
            value(&minimal),
            json!({
                "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata",
                "auditID": "0b1c7a4e-1d2f-4c55-9a51-0d5b7c1e2f3a", "stage": "RequestReceived",
                "requestURI": "/healthz", "verb": "get", "user": {"username": "system:anonymous"},
                "requestReceivedTimestamp": "2026-01-02T03:04:05.123456Z",
                "stageTimestamp": "2026-01-02T03:04:05.234567Z"
            })
        );
        // No user (authentication refused the request): kube's empty one.
        let unknown = value(&AuditEvent {
            user: None,
            ..event()
        });
        assert_eq!(unknown["user"], json!({}));
    }

    #[test]
    fn levels_bound_the_bodies() {
        let metadata = value(&AuditEvent {
            level: AuditLevel::Metadata,
            ..event()
        });
        assert!(
            metadata.get("requestObject").is_none() && metadata.get("responseObject").is_none()
        );
        let request = value(&AuditEvent {
            level: AuditLevel::Request,
            ..event()
        });
        assert_eq!(request["requestObject"]["kind"], "Pod");
        assert!(request.get("responseObject").is_none());
        assert_eq!(request["level"], "Request");
        let mut none = Vec::new();
        let at_none = AuditEvent {
            level: AuditLevel::None,
            ..event()
        };
        assert!(!at_none.write_line(&mut none));
        assert!(none.is_empty());
    }

    #[test]
    fn failure_status_impersonation_stages_and_believed_sources() {
        let panicked = value(&AuditEvent {
            stage: AuditStage::Panic,
            impersonated_user: Some(Arc::new(UserInfo {
                groups: vec!["ops".into()],
                ..user("bob")
            })),
            response_status: Some(ResponseStatus::of(
                &Status::failure(
                    http::StatusCode::FORBIDDEN,
                    "Forbidden",
                    "pods is forbidden",
                )
                .with_details(Details {
                    kind: "pods".into(),
                    ..Details::default()
                }),
            )),
            source_ips: Some(SourceIps::Believed(Arc::from(vec![
                "1.1.1.1".to_owned(),
                "10.0.0.1".to_owned(),
            ]))),
            ..event()
        });
        assert_eq!(panicked["stage"], "Panic");
        assert_eq!(
            panicked["impersonatedUser"],
            json!({"username": "bob", "groups": ["ops"]})
        );
        assert_eq!(
            panicked["responseStatus"],
            json!({"metadata": {}, "status": "Failure", "message": "pods is forbidden", "reason": "Forbidden", "details": {"kind": "pods"}, "code": 403})
        );
        assert_eq!(panicked["sourceIPs"], json!(["1.1.1.1", "10.0.0.1"]));
        let started = value(&AuditEvent {
            stage: AuditStage::ResponseStarted,
            ..event()
        });
        assert_eq!(started["stage"], "ResponseStarted");
    }

    /// sonic-rs writes the lines; what kube's log gets is serde_json's
    /// output, to the byte, every character below 0x80 and beyond escaped
    /// (or not) alike.
    #[test]
    fn lines_are_serde_jsons_byte_for_byte() {
        let every: String = (0u8..0x80)
            .map(char::from)
            .chain("é✓😀\u{2028}\u{fffd}".chars())
            .collect();
        let every: &'static str = every.leak();
        let mut event = AuditEvent {
            level: AuditLevel::Metadata,
            verb: every.into(),
            ..event()
        };
        event.user = Some(Arc::new(user(every)));
        event.annotations.insert(every, every);
        let want = serde_json::to_string(&KubeEvent::from(&event)).unwrap();
        assert_eq!(line(&event), want);
        assert!(want.contains(r#"\u0000"#));
    }

    /// A user agent that is not visible ASCII is not recorded, as before.
    #[test]
    fn an_opaque_user_agent_is_left_out() {
        let event = AuditEvent {
            user_agent: Some(HeaderValue::from_bytes(b"agent \xff").unwrap()),
            ..event()
        };
        assert!(value(&event).get("userAgent").is_none());
    }

    #[test]
    fn bodies_are_kept_as_they_came_without_what_surrounds_them() {
        let body = " {\"kind\": \"Pod\" ,\"a\":[1, 2]}\n";
        let event = AuditEvent {
            level: AuditLevel::Request,
            request_object: Some(body.into()),
            ..event()
        };
        assert!(line(&event).contains(r#""requestObject":{"kind": "Pod" ,"a":[1, 2]},"#));
    }

    #[test]
    fn bad_bodies_are_left_out() {
        let bad = value(&AuditEvent {
            request_object: Some("not json".into()),
            ..event()
        });
        assert!(bad.get("requestObject").is_none());
        assert_eq!(bad["responseObject"]["metadata"]["uid"], "u");
    }

    /// Kept in key order, the first value of a key kept (kube's audit
    /// context).
    #[test]
    fn annotations_keep_key_order_and_their_first_value() {
        let mut annotations = Annotations::default();
        annotations.insert("b", "1");
        annotations.insert("a", "2");
        annotations.insert("b", "3");
        assert_eq!(
            annotations.iter().collect::<Vec<_>>(),
            [("a", "2"), ("b", "1")]
        );
    }

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
            epoch + Duration::new(253_402_300_799, 999_999_000),
            epoch,
            SystemTime::now(),
        ];
        for time in times {
            assert_eq!(
                micro_time(time).as_str(),
                humantime::format_rfc3339_micros(time).to_string(),
                "{time:?}"
            );
        }
        let before = epoch - Duration::new(1, 250_000_000);
        assert_eq!(micro_time(before).as_str(), "1970-01-01T00:00:00.000000Z");
        let after = epoch + Duration::new(LAST_SECOND + 86_400, 5_000);
        assert_eq!(micro_time(after).as_str(), "9999-12-31T23:59:59.000005Z");
    }
}
