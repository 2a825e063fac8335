//! A batch of audit events as the auditors are given it: the event records
//! (`auditor`), or serialised (`json-auditor`) as kube's log backend writes
//! them with `--audit-log-format=json`
//! (`staging/src/k8s.io/apiserver/plugin/pkg/audit/log/backend.go`): one
//! `audit.k8s.io/v1` `Event` JSON object per line, field names, order and
//! `omitempty` as `staging/src/k8s.io/apiserver/pkg/apis/audit/v1/types.go`,
//! with each line's stage beside it. The serialised form is rendered
//! natively, at most once per batch, and only when an auditor takes it; when
//! every auditor does, each event is rendered as it is queued
//! ([`push_line`]), and the batch holds no records.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde::Serialize;
use sonic_rs::LazyValue;

use crate::wasm::bindings::types::{Status, UserInfo};
use crate::wasm::filter::{Event, JsonBatch, JsonStage, Level, Stage};

/// One batch of events, in the order they happened.
pub struct AuditBatch<'a> {
    form: Form<'a>,
}

/// What a batch was made from.
enum Form<'a> {
    /// The event records, serialised when an auditor first asks.
    Records {
        events: &'a [Event],
        serialised: OnceLock<JsonBatch>,
    },
    /// Events serialised as they were queued, when every auditor takes them
    /// so (`chain/audit/backend.rs`): the records are gone.
    Serialised(&'a JsonBatch),
}

impl<'a> AuditBatch<'a> {
    /// The batch of `events`, not serialised yet.
    pub fn new(events: &'a [Event]) -> Self {
        AuditBatch {
            form: Form::Records {
                events,
                serialised: OnceLock::new(),
            },
        }
    }

    /// A batch already serialised, for auditors that take it so.
    pub(crate) fn serialised_already(batch: &'a JsonBatch) -> Self {
        AuditBatch {
            form: Form::Serialised(batch),
        }
    }

    /// The events, as records; None for a batch made serialised.
    pub(crate) fn events(&self) -> Option<&'a [Event]> {
        match &self.form {
            Form::Records { events, .. } => Some(events),
            Form::Serialised(_) => None,
        }
    }

    /// The events serialised, rendered on the first call.
    pub(crate) fn serialised(&self) -> &JsonBatch {
        match &self.form {
            Form::Records { events, serialised } => serialised.get_or_init(|| render(events)),
            Form::Serialised(batch) => batch,
        }
    }

    /// How many events it holds.
    pub(crate) fn len(&self) -> usize {
        match &self.form {
            Form::Records { events, .. } => events.len(),
            Form::Serialised(batch) => batch.stages.len(),
        }
    }
}

/// Room made for the first line: a Metadata event is 450 to 700 bytes.
const LINE_BYTES: usize = 640;

/// The lines of `events`, in order, and their stages. Once the first line
/// is written, room is made for the others at its length and an eighth
/// more: a batch of events like its first grows (and is copied) once,
/// while it holds one line.
fn render(events: &[Event]) -> JsonBatch {
    let mut batch = JsonBatch {
        lines: Vec::with_capacity(LINE_BYTES),
        stages: Vec::with_capacity(events.len()),
    };
    for (index, event) in events.iter().enumerate() {
        let start = batch.lines.len();
        if push_line(&mut batch, event) && batch.stages.len() == 1 {
            let line = batch.lines.len() - start;
            let rest = events.len() - index - 1;
            batch.lines.reserve(rest * (line + line / 8));
        }
    }
    batch
}

/// Appends `event`'s line and stage to `batch`; false when it has none. An
/// event at level `None` has no line; a body that is not JSON is left out
/// of its line, with a warning.
pub(crate) fn push_line(batch: &mut JsonBatch, event: &Event) -> bool {
    if matches!(event.level, Level::None) {
        return false;
    }
    let start = batch.lines.len();
    match sonic_rs::to_writer(&mut batch.lines, &KubeEvent::from(event)) {
        Ok(()) => {
            batch.lines.push(b'\n');
            batch.stages.push(json_stage(event.stage));
            true
        }
        // Not reached with these types (string keys, raw JSON checked
        // already); a failure leaves no half line.
        Err(error) => {
            batch.lines.truncate(start);
            tracing::error!(audit_id = %event.audit_id, %error, "cannot encode the audit event: left out of the audit lines");
            false
        }
    }
}

fn json_stage(stage: Stage) -> JsonStage {
    match stage {
        Stage::RequestReceived => JsonStage::RequestReceived,
        Stage::ResponseStarted => JsonStage::ResponseStarted,
        Stage::ResponseComplete => JsonStage::ResponseComplete,
        Stage::Panic => JsonStage::Panic,
    }
}

fn level_name(level: Level) -> &'static str {
    match level {
        Level::None => "None",
        Level::Metadata => "Metadata",
        Level::Request => "Request",
        Level::RequestResponse => "RequestResponse",
    }
}

fn stage_name(stage: Stage) -> &'static str {
    match stage {
        Stage::RequestReceived => "RequestReceived",
        Stage::ResponseStarted => "ResponseStarted",
        Stage::ResponseComplete => "ResponseComplete",
        Stage::Panic => "Panic",
    }
}

/// authentication.k8s.io/v1 `UserInfo`.
#[derive(Serialize)]
struct KubeUserInfo<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    username: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    uid: &'a str,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    groups: &'a [String],
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    extra: BTreeMap<&'a str, Vec<&'a str>>,
}

impl<'a> From<&'a UserInfo> for KubeUserInfo<'a> {
    fn from(user: &'a UserInfo) -> Self {
        let mut extra: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for entry in &user.extra {
            extra
                .entry(entry.key.as_str())
                .or_default()
                .extend(entry.values.iter().map(String::as_str));
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

/// The empty `ListMeta` every metav1 `Status` carries.
#[derive(Serialize)]
struct EmptyMeta {}

/// meta/v1 `Status`, as audit records it: code only for a plain success,
/// `Failure` with the reason and message for an error.
#[derive(Serialize)]
struct KubeStatus<'a> {
    metadata: EmptyMeta,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'static str>,
    #[serde(skip_serializing_if = "str::is_empty")]
    message: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    reason: &'a str,
    #[serde(skip_serializing_if = "is_zero")]
    code: u16,
}

fn is_zero(code: &u16) -> bool {
    *code == 0
}

impl<'a> From<&'a Status> for KubeStatus<'a> {
    fn from(status: &'a Status) -> Self {
        let outcome = if status.code >= 400 {
            Some("Failure")
        } else if !status.message.is_empty() || !status.reason.is_empty() {
            Some("Success")
        } else {
            None
        };
        KubeStatus {
            metadata: EmptyMeta {},
            status: outcome,
            message: &status.message,
            reason: &status.reason,
            code: status.code,
        }
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
    #[serde(rename = "sourceIPs", skip_serializing_if = "<[String]>::is_empty")]
    source_ips: &'a [String],
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
    request_received_timestamp: &'a str,
    stage_timestamp: &'a str,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    annotations: BTreeMap<&'a str, &'a str>,
}

impl<'a> From<&'a Event> for KubeEvent<'a> {
    fn from(event: &'a Event) -> Self {
        let at_least_request = matches!(event.level, Level::Request | Level::RequestResponse);
        let request_object = at_least_request
            .then(|| raw(event.request_object.as_deref(), "request object", event))
            .flatten();
        let response_object = matches!(event.level, Level::RequestResponse)
            .then(|| raw(event.response_object.as_deref(), "response object", event))
            .flatten();
        KubeEvent {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level: level_name(event.level),
            audit_id: &event.audit_id,
            stage: stage_name(event.stage),
            request_uri: &event.request_uri,
            verb: &event.verb,
            user: (&event.user).into(),
            impersonated_user: event.impersonated_user.as_ref().map(Into::into),
            source_ips: &event.source_ips,
            user_agent: &event.user_agent,
            object_ref: event.object_ref.as_ref().map(|object| KubeObjectReference {
                resource: &object.resource,
                namespace: &object.namespace,
                name: &object.name,
                api_group: &object.api_group,
                api_version: &object.api_version,
                subresource: &object.subresource,
            }),
            response_status: event.response_status.as_ref().map(Into::into),
            request_object,
            response_object,
            request_received_timestamp: &event.request_received_timestamp,
            stage_timestamp: &event.stage_timestamp,
            annotations: event
                .annotations
                .iter()
                .map(|annotation| (annotation.key.as_str(), annotation.value.as_str()))
                .collect(),
        }
    }
}

/// A body for embedding as raw JSON, byte for byte (what surrounds it
/// trimmed); None (and a warning) when it is not JSON. The warning names
/// where, never what: a body is the client's data.
fn raw<'a>(body: Option<&'a str>, what: &str, event: &Event) -> Option<LazyValue<'a>> {
    let body = body?;
    match sonic_rs::from_str::<LazyValue<'a>>(body) {
        Ok(raw) => Some(raw),
        Err(error) => {
            let (line, column) = (error.line(), error.column());
            tracing::warn!(audit_id = %event.audit_id, line, column, "the audit event's {what} is not JSON: left out of its line");
            None
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::wasm::bindings::types::ExtraValue;
    use crate::wasm::filter::{Annotation, ObjectReference};
    use serde_json::{Value, json};

    fn user(name: &str) -> UserInfo {
        UserInfo {
            name: name.into(),
            uid: String::new(),
            groups: vec![],
            extra: vec![],
        }
    }

    /// An event with every field set.
    pub(crate) fn event() -> Event {
        Event {
            audit_id: "0b1c7a4e-1d2f-4c55-9a51-0d5b7c1e2f3a".into(),
            stage: Stage::ResponseComplete,
            level: Level::RequestResponse,
            verb: "create".into(),
            request_uri: "/api/v1/namespaces/default/pods?dryRun=All".into(),
            user: UserInfo {
                name: "alice".into(),
                uid: "1".into(),
                groups: vec!["dev".into(), "system:authenticated".into()],
                extra: vec![
                    ExtraValue {
                        key: "scopes".into(),
                        values: vec!["a".into()],
                    },
                    ExtraValue {
                        key: "b".into(),
                        values: vec![],
                    },
                    ExtraValue {
                        key: "scopes".into(),
                        values: vec!["b".into()],
                    },
                ],
            },
            impersonated_user: None,
            source_ips: vec!["10.0.0.1".into()],
            user_agent: "kubectl/v1.31.0".into(),
            object_ref: Some(ObjectReference {
                resource: "pods".into(),
                namespace: "default".into(),
                name: String::new(),
                api_group: String::new(),
                api_version: "v1".into(),
                subresource: String::new(),
            }),
            response_status: Some(Status {
                code: 201,
                reason: String::new(),
                message: String::new(),
            }),
            request_received_timestamp: "2026-01-02T03:04:05.123456Z".into(),
            stage_timestamp: "2026-01-02T03:04:05.234567Z".into(),
            annotations: vec![
                Annotation {
                    key: "authorization.k8s.io/decision".into(),
                    value: "allow".into(),
                },
                Annotation {
                    key: "authorization.k8s.io/reason".into(),
                    value: "RBAC: allowed".into(),
                },
            ],
            request_object: Some(
                r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p"}}"#.into(),
            ),
            response_object: Some(
                r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","uid":"u"}}"#.into(),
            ),
        }
    }

    /// The one line `event` renders to, without its newline.
    fn line(event: Event) -> String {
        let batch = render(&[event]);
        assert_eq!(batch.stages.len(), 1);
        let text = String::from_utf8(batch.lines).unwrap();
        text.strip_suffix('\n').unwrap().to_owned()
    }

    fn value(event: Event) -> Value {
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
        let got = line(event());
        assert_eq!(got, want);
        assert!(!got.contains('\n'));
    }

    #[test]
    fn minimal_event_omits_empties() {
        let minimal = Event {
            stage: Stage::RequestReceived,
            level: Level::Metadata,
            verb: "get".into(),
            request_uri: "/healthz".into(),
            user: user("system:anonymous"),
            source_ips: vec![],
            user_agent: String::new(),
            object_ref: None,
            response_status: None,
            annotations: vec![],
            ..event()
        };
        assert_eq!(
            value(minimal),
            json!({
                "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata",
                "auditID": "0b1c7a4e-1d2f-4c55-9a51-0d5b7c1e2f3a", "stage": "RequestReceived",
                "requestURI": "/healthz", "verb": "get", "user": {"username": "system:anonymous"},
                "requestReceivedTimestamp": "2026-01-02T03:04:05.123456Z",
                "stageTimestamp": "2026-01-02T03:04:05.234567Z"
            })
        );
    }

    #[test]
    fn levels_bound_the_bodies() {
        let metadata = value(Event {
            level: Level::Metadata,
            ..event()
        });
        assert!(
            metadata.get("requestObject").is_none() && metadata.get("responseObject").is_none()
        );
        let request = value(Event {
            level: Level::Request,
            ..event()
        });
        assert_eq!(request["requestObject"]["kind"], "Pod");
        assert!(request.get("responseObject").is_none());
        assert_eq!(request["level"], "Request");
        let none = render(&[Event {
            level: Level::None,
            ..event()
        }]);
        assert!(none.lines.is_empty() && none.stages.is_empty());
    }

    #[test]
    fn failure_status_impersonation_and_stages() {
        let panicked = value(Event {
            stage: Stage::Panic,
            impersonated_user: Some(UserInfo {
                groups: vec!["ops".into()],
                ..user("bob")
            }),
            response_status: Some(Status {
                code: 403,
                reason: "Forbidden".into(),
                message: "pods is forbidden".into(),
            }),
            ..event()
        });
        assert_eq!(panicked["stage"], "Panic");
        assert_eq!(
            panicked["impersonatedUser"],
            json!({"username": "bob", "groups": ["ops"]})
        );
        assert_eq!(
            panicked["responseStatus"],
            json!({"metadata": {}, "status": "Failure", "message": "pods is forbidden", "reason": "Forbidden", "code": 403})
        );
        let started = value(Event {
            stage: Stage::ResponseStarted,
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
        let mut event = Event {
            level: Level::Metadata,
            user_agent: every.clone(),
            request_uri: every.clone(),
            ..event()
        };
        event.user.name = every.clone();
        event.annotations.push(Annotation {
            key: every.clone(),
            value: every,
        });
        let want = serde_json::to_string(&KubeEvent::from(&event)).unwrap();
        assert_eq!(line(event), want);
    }

    #[test]
    fn bodies_are_kept_as_they_came_without_what_surrounds_them() {
        let body = " {\"kind\": \"Pod\" ,\"a\":[1, 2]}\n";
        let event = Event {
            level: Level::Request,
            request_object: Some(body.into()),
            ..event()
        };
        assert!(line(event).contains(r#""requestObject":{"kind": "Pod" ,"a":[1, 2]},"#));
    }

    #[test]
    fn bad_bodies_are_left_out() {
        let bad = value(Event {
            request_object: Some("not json".into()),
            ..event()
        });
        assert!(bad.get("requestObject").is_none());
        assert_eq!(bad["responseObject"]["metadata"]["uid"], "u");
    }

    #[test]
    fn a_batch_is_one_line_per_event_in_order_with_its_stage() {
        let events = [
            Event {
                stage: Stage::RequestReceived,
                ..event()
            },
            Event {
                level: Level::None,
                ..event()
            },
            event(),
        ];
        let batch = render(&events);
        assert_eq!(
            batch.stages,
            [JsonStage::RequestReceived, JsonStage::ResponseComplete]
        );
        let text = String::from_utf8(batch.lines).unwrap();
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        assert_eq!(lines.len(), 2);
        assert!(lines.iter().all(|line| line.ends_with("}\n")));
        assert_eq!(lines[1].trim_end(), line(event()));
    }
}
