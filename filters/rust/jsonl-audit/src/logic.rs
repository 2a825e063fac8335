//! Pure logic of `jsonl-audit`: renders a WIT audit event as a Kubernetes
//! `audit.k8s.io/v1` `Event` (field names, order and `omitempty` as
//! `staging/src/k8s.io/apiserver/pkg/apis/audit/v1/types.go`). No host calls,
//! so it runs in host-target tests.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::collections::BTreeMap;
use wasmgate_filter::FilterConfig;
use wasmgate_filter::auditor::{Event, Level, Stage};
use wasmgate_filter::types::{Status, UserInfo};

/// The filter's `config` table; every key is optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Stages not to write, by their Kubernetes names (`RequestReceived`, ...),
    /// like the audit policy's `omitStages`.
    #[serde(default)]
    pub omit_stages: Vec<String>,
}

const STAGES: [&str; 4] = [
    "RequestReceived",
    "ResponseStarted",
    "ResponseComplete",
    "Panic",
];

impl FilterConfig for Config {
    const FILTER: &'static str = "jsonl-audit";

    fn check(&self) -> Result<(), String> {
        for stage in &self.omit_stages {
            if !STAGES.contains(&stage.as_str()) {
                return Err(format!(
                    "unknown stage {stage:?} in omit_stages (expected one of {STAGES:?})"
                ));
            }
        }
        Ok(())
    }
}

pub fn level_name(level: Level) -> &'static str {
    match level {
        Level::None => "None",
        Level::Metadata => "Metadata",
        Level::Request => "Request",
        Level::RequestResponse => "RequestResponse",
    }
}

pub fn stage_name(stage: Stage) -> &'static str {
    match stage {
        Stage::RequestReceived => STAGES[0],
        Stage::ResponseStarted => STAGES[1],
        Stage::ResponseComplete => STAGES[2],
        Stage::Panic => STAGES[3],
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
    fn from(u: &'a UserInfo) -> Self {
        let mut extra: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for e in &u.extra {
            extra
                .entry(e.key.as_str())
                .or_default()
                .extend(e.values.iter().map(String::as_str));
        }
        KubeUserInfo {
            username: &u.name,
            uid: &u.uid,
            groups: &u.groups,
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
    fn from(s: &'a Status) -> Self {
        let status = if s.code >= 400 {
            Some("Failure")
        } else if !s.message.is_empty() || !s.reason.is_empty() {
            Some("Success")
        } else {
            None
        };
        KubeStatus {
            metadata: EmptyMeta {},
            status,
            message: &s.message,
            reason: &s.reason,
            code: s.code,
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
    request_object: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_object: Option<&'a RawValue>,
    request_received_timestamp: &'a str,
    stage_timestamp: &'a str,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    annotations: BTreeMap<&'a str, &'a str>,
}

/// One rendered event.
#[derive(Debug, PartialEq)]
pub struct Rendered {
    /// The JSON line to write, or None when the event is not to be written.
    pub line: Option<String>,
    /// Problems worth a warning in the log (a body that is not JSON).
    pub warnings: Vec<String>,
}

/// Parses a body for embedding as raw JSON; None (and a warning) when it is
/// not JSON.
fn raw<'a>(
    body: Option<&'a str>,
    what: &str,
    audit_id: &str,
    warnings: &mut Vec<String>,
) -> Option<&'a RawValue> {
    let body = body?;
    match serde_json::from_str::<&RawValue>(body) {
        Ok(raw) => Some(raw),
        Err(e) => {
            warnings.push(format!(
                "jsonl-audit: event {audit_id}: the {what} is not JSON ({e}); left out"
            ));
            None
        }
    }
}

pub fn render(config: &Config, event: &Event) -> Result<Rendered, String> {
    let stage = stage_name(event.stage);
    if matches!(event.level, Level::None) || config.omit_stages.iter().any(|s| s == stage) {
        return Ok(Rendered {
            line: None,
            warnings: Vec::new(),
        });
    }
    let mut warnings = Vec::new();
    let at_least_request = matches!(event.level, Level::Request | Level::RequestResponse);
    let request_object = if at_least_request {
        raw(
            event.request_object.as_deref(),
            "request object",
            &event.audit_id,
            &mut warnings,
        )
    } else {
        None
    };
    let response_object = if matches!(event.level, Level::RequestResponse) {
        raw(
            event.response_object.as_deref(),
            "response object",
            &event.audit_id,
            &mut warnings,
        )
    } else {
        None
    };
    let kube = KubeEvent {
        kind: "Event",
        api_version: "audit.k8s.io/v1",
        level: level_name(event.level),
        audit_id: &event.audit_id,
        stage,
        request_uri: &event.request_uri,
        verb: &event.verb,
        user: (&event.user).into(),
        impersonated_user: event.impersonated_user.as_ref().map(Into::into),
        source_ips: &event.source_ips,
        user_agent: &event.user_agent,
        object_ref: event.object_ref.as_ref().map(|o| KubeObjectReference {
            resource: &o.resource,
            namespace: &o.namespace,
            name: &o.name,
            api_group: &o.api_group,
            api_version: &o.api_version,
            subresource: &o.subresource,
        }),
        response_status: event.response_status.as_ref().map(Into::into),
        request_object,
        response_object,
        request_received_timestamp: &event.request_received_timestamp,
        stage_timestamp: &event.stage_timestamp,
        annotations: event
            .annotations
            .iter()
            .map(|a| (a.key.as_str(), a.value.as_str()))
            .collect(),
    };
    let line = serde_json::to_string(&kube)
        .map_err(|e| format!("jsonl-audit: cannot encode event {}: {e}", event.audit_id))?;
    Ok(Rendered {
        line: Some(line),
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};
    use wasmgate_filter::auditor::{Annotation, ObjectReference};
    use wasmgate_filter::types::ExtraValue;

    fn user(name: &str) -> UserInfo {
        UserInfo {
            name: name.into(),
            uid: String::new(),
            groups: vec![],
            extra: vec![],
        }
    }

    fn event() -> Event {
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

    fn line(config: &Config, event: &Event) -> String {
        render(config, event).unwrap().line.unwrap()
    }

    #[test]
    fn full_event_shape_and_order() {
        let got = line(&Config::default(), &event());
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
        assert_eq!(got, want);
        assert!(!got.contains('\n'));
    }

    #[test]
    fn minimal_event_omits_empties() {
        let e = Event {
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
        let v: Value = serde_json::from_str(&line(&Config::default(), &e)).unwrap();
        assert_eq!(
            v,
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
        let metadata = Event {
            level: Level::Metadata,
            ..event()
        };
        let v: Value = serde_json::from_str(&line(&Config::default(), &metadata)).unwrap();
        assert!(v.get("requestObject").is_none() && v.get("responseObject").is_none());
        let request = Event {
            level: Level::Request,
            ..event()
        };
        let v: Value = serde_json::from_str(&line(&Config::default(), &request)).unwrap();
        assert_eq!(v["requestObject"]["kind"], "Pod");
        assert!(v.get("responseObject").is_none());
        assert_eq!(v["level"], "Request");
        let none = Event {
            level: Level::None,
            ..event()
        };
        assert_eq!(
            render(&Config::default(), &none).unwrap(),
            Rendered {
                line: None,
                warnings: vec![]
            }
        );
    }

    #[test]
    fn failure_status_impersonation_and_stages() {
        let e = Event {
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
        };
        let v: Value = serde_json::from_str(&line(&Config::default(), &e)).unwrap();
        assert_eq!(v["stage"], "Panic");
        assert_eq!(
            v["impersonatedUser"],
            json!({"username": "bob", "groups": ["ops"]})
        );
        assert_eq!(
            v["responseStatus"],
            json!({"metadata": {}, "status": "Failure", "message": "pods is forbidden", "reason": "Forbidden", "code": 403})
        );
        let started = Event {
            stage: Stage::ResponseStarted,
            ..event()
        };
        let v: Value = serde_json::from_str(&line(&Config::default(), &started)).unwrap();
        assert_eq!(v["stage"], "ResponseStarted");
    }

    #[test]
    fn bad_bodies_are_left_out_with_a_warning() {
        let e = Event {
            request_object: Some("not json".into()),
            ..event()
        };
        let r = render(&Config::default(), &e).unwrap();
        let v: Value = serde_json::from_str(r.line.as_deref().unwrap()).unwrap();
        assert!(v.get("requestObject").is_none());
        assert_eq!(v["responseObject"]["metadata"]["uid"], "u");
        assert_eq!(r.warnings.len(), 1);
    }

    #[test]
    fn omit_stages() {
        let c = Config::parse(r#"{"omit_stages": ["RequestReceived"]}"#).unwrap();
        let received = Event {
            stage: Stage::RequestReceived,
            ..event()
        };
        assert_eq!(render(&c, &received).unwrap().line, None);
        assert!(render(&c, &event()).unwrap().line.is_some());
        for bad in [
            "[]",
            r#"{"omit_stages": ["Done"]}"#,
            r#"{"omitStages": []}"#,
        ] {
            assert!(
                Config::parse(bad)
                    .unwrap_err()
                    .starts_with("jsonl-audit: bad config: "),
                "{bad}"
            );
        }
        assert!(Config::parse("{}").is_ok());
    }
}
