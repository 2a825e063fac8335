//! The records a filter receives, built from the request: the request view
//! for authenticators, request info and user info for everyone after them,
//! each optional field filled only for a filter that reads it
//! ([`Reads`]); the audit event for auditors that take records.
//! Conversions only; no decisions are made here.

use std::sync::Arc;

use super::bindings::auditor::exports::wasmgate::filter::auditor;
use super::bindings::types;
use crate::audit_event::{AuditEvent, micro_time};
use crate::config::stages::{AuditLevel, AuditStage, ReadField, Reads, RequestHeaders};
use crate::context::{ConnectionInfo, RequestContext, UserInfo};
use crate::request_info::RequestInfo;

/// `value`, for a filter that reads `field`.
fn read(reads: Reads, field: ReadField, value: &str) -> Option<String> {
    reads.includes(field).then(|| value.to_owned())
}

/// What an authenticator sees of the request: every header, or those the
/// manifest lists for it, and the fields it reads.
pub fn request_view(
    parts: &http::request::Parts,
    selected: &RequestHeaders,
    reads: Reads,
) -> types::RequestView {
    let connection = RequestContext::of(&parts.extensions).connection.as_deref();
    let [method, path, query, remote_addr] =
        view_options(parts).map(|(field, value)| read(reads, field, value));
    types::RequestView {
        method,
        path,
        query,
        headers: parts
            .headers
            .iter()
            .filter(|(name, _)| selected.includes(name))
            .map(|(name, value)| types::Header {
                name: name.as_str().to_owned(),
                value: String::from_utf8_lossy(value.as_bytes()).into_owned(),
            })
            .collect(),
        remote_addr,
        client_certificate: connection.and_then(client_certificate),
    }
}

/// The request view's optional fields, each with its name in `reads`: what
/// an authenticator is given of them, and what its cache key holds
/// (`super::cache_key`).
pub(crate) fn view_options(parts: &http::request::Parts) -> [(ReadField, &str); 4] {
    let connection = RequestContext::of(&parts.extensions).connection.as_deref();
    [
        (ReadField::Method, parts.method.as_str()),
        (ReadField::Path, parts.uri.path()),
        (ReadField::Query, parts.uri.query().unwrap_or("")),
        (
            ReadField::RemoteAddr,
            connection.map_or("", |c| &c.remote_text),
        ),
    ]
}

fn client_certificate(connection: &ConnectionInfo) -> Option<types::ClientCertificate> {
    let chain = connection.client_chain.as_ref()?;
    let leaf = chain.first()?;
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    let subject = parsed.subject();
    let text =
        |attr: &x509_parser::x509::AttributeTypeAndValue| attr.as_str().ok().map(str::to_owned);
    Some(types::ClientCertificate {
        common_name: subject.iter_common_name().next().and_then(text),
        organizations: subject.iter_organization().filter_map(text).collect(),
        subject: subject.to_string(),
        chain_der: chain.iter().map(|cert| cert.as_ref().to_vec()).collect(),
    })
}

/// The request info as the WIT record a filter that reads `reads` receives.
/// Each field is copied as a `str` (`to_owned`), not through `Display` as
/// `CompactString::to_string` would: the formatter's padding logic on every
/// field was 60% of this function's instructions (callgrind, bench/README.md).
pub fn request_info(info: &RequestInfo, reads: Reads) -> types::RequestInfo {
    let [api_prefix, api_version, label_selector, field_selector] =
        info_options(info).map(|(field, value)| read(reads, field, value));
    types::RequestInfo {
        is_resource_request: info.is_resource_request,
        path: info.path.as_str().to_owned(),
        verb: info.verb.as_str().to_owned(),
        api_prefix,
        api_group: info.api_group.as_str().to_owned(),
        api_version,
        namespace: info.namespace.as_str().to_owned(),
        resource: info.resource.as_str().to_owned(),
        subresource: info.subresource.as_str().to_owned(),
        name: info.name.as_str().to_owned(),
        label_selector,
        field_selector,
    }
}

/// The request info's optional fields, each with its name in `reads`: what
/// a filter is given of them, and what an authorizer's cache key holds
/// (`super::cache_key`).
pub(crate) fn info_options(info: &RequestInfo) -> [(ReadField, &str); 4] {
    [
        (ReadField::ApiPrefix, &info.api_prefix),
        (ReadField::ApiVersion, &info.api_version),
        (ReadField::LabelSelector, &info.label_selector),
        (ReadField::FieldSelector, &info.field_selector),
    ]
}

/// The user as the WIT record filters receive.
pub fn user_to_wit(user: &UserInfo) -> types::UserInfo {
    types::UserInfo {
        name: user.name.clone(),
        uid: user.uid.clone(),
        groups: user.groups.clone(),
        extra: user
            .extra
            .iter()
            .map(|(key, values)| types::ExtraValue {
                key: key.clone(),
                values: values.clone(),
            })
            .collect(),
    }
}

/// The user an authenticator named, as the request goes on as it: in
/// `system:authenticated`, where kube's `AuthenticatedGroupAdder` puts every
/// authenticated user ([`UserInfo::add_authenticated_group`]: not
/// `system:anonymous`, nor a user the filter calls unauthenticated, who is
/// not to be granted what authenticated users are), and whether the group
/// was added (last) here. Made once per answer, so the answer an
/// authenticator's cache keeps is the user, shared.
pub(crate) fn authenticated_user(user: types::UserInfo) -> (Arc<UserInfo>, bool) {
    let mut user = user_from_wit(user);
    let added = user.add_authenticated_group();
    (Arc::new(user), added)
}

fn user_from_wit(user: types::UserInfo) -> UserInfo {
    UserInfo {
        name: user.name,
        uid: user.uid,
        groups: user.groups,
        extra: user
            .extra
            .into_iter()
            .map(|extra| (extra.key, extra.values))
            .collect(),
    }
}

/// The audit event as the WIT record an `auditor` receives: every value
/// copied, as the JSON line has it.
pub fn audit_event(event: &AuditEvent) -> auditor::Event {
    let text = |value: &str| value.to_owned();
    auditor::Event {
        audit_id: text(event.audit_id()),
        stage: match event.stage {
            AuditStage::RequestReceived => auditor::Stage::RequestReceived,
            AuditStage::ResponseStarted => auditor::Stage::ResponseStarted,
            AuditStage::ResponseComplete => auditor::Stage::ResponseComplete,
            AuditStage::Panic => auditor::Stage::Panic,
        },
        level: match event.level {
            AuditLevel::None => auditor::Level::None,
            AuditLevel::Metadata => auditor::Level::Metadata,
            AuditLevel::Request => auditor::Level::Request,
            AuditLevel::RequestResponse => auditor::Level::RequestResponse,
        },
        verb: text(&event.verb),
        request_uri: text(event.request_uri()),
        user: event
            .user
            .as_deref()
            .map_or_else(|| user_to_wit(&UserInfo::default()), user_to_wit),
        impersonated_user: event.impersonated_user.as_deref().map(user_to_wit),
        source_ips: event
            .source_ips
            .iter()
            .flat_map(|ips| ips.iter().map(text))
            .collect(),
        user_agent: text(event.user_agent()),
        object_ref: event
            .object_ref
            .as_ref()
            .map(|object| auditor::ObjectReference {
                resource: text(&object.resource),
                namespace: text(&object.namespace),
                name: text(&object.name),
                api_group: text(&object.api_group),
                api_version: text(&object.api_version),
                subresource: text(&object.subresource),
            }),
        response_status: event.response_status.as_ref().map(|status| types::Status {
            code: status.code,
            reason: text(&status.reason),
            message: text(&status.message),
        }),
        request_received_timestamp: text(micro_time(event.request_received).as_str()),
        stage_timestamp: text(micro_time(event.stage_time).as_str()),
        annotations: event
            .annotations
            .iter()
            .map(|(key, value)| auditor::Annotation {
                key: text(key),
                value: text(value),
            })
            .collect(),
        request_object: event.request_object.clone(),
        response_object: event.response_object.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts() -> http::request::Parts {
        let request = http::Request::get("/apis/g/v1/widgets?labelSelector=a")
            .header("authorization", "Bearer t")
            .header("accept", "application/json")
            .body(())
            .expect("a request");
        request.into_parts().0
    }

    #[test]
    fn a_view_carries_the_fields_the_filter_reads() {
        let headers = RequestHeaders::Only(vec![http::header::AUTHORIZATION]);
        let every = request_view(&parts(), &headers, Reads::ALL);
        assert_eq!(every.method.as_deref(), Some("GET"));
        assert_eq!(every.path.as_deref(), Some("/apis/g/v1/widgets"));
        assert_eq!(every.query.as_deref(), Some("labelSelector=a"));
        assert_eq!(every.remote_addr.as_deref(), Some(""));
        assert_eq!(every.headers.len(), 1);

        let path_only = request_view(&parts(), &headers, [ReadField::Path].into_iter().collect());
        assert_eq!(path_only.path.as_deref(), Some("/apis/g/v1/widgets"));
        assert_eq!(
            (path_only.method, path_only.query, path_only.remote_addr),
            (None, None, None)
        );
        assert_eq!(path_only.headers.len(), 1, "headers follow `headers` alone");
    }

    #[test]
    fn request_info_carries_the_options_the_filter_reads() {
        let info = RequestInfo::resolve(
            &http::Method::GET,
            "/apis/g/v1/widgets",
            Some("labelSelector=a"),
        );
        let every = request_info(&info, Reads::ALL);
        assert_eq!(every.api_prefix.as_deref(), Some("apis"));
        assert_eq!(every.api_version.as_deref(), Some("v1"));
        assert_eq!(every.label_selector.as_deref(), Some("a"));
        assert_eq!(every.field_selector.as_deref(), Some(""));
        let none = request_info(&info, std::iter::empty().collect());
        assert_eq!(
            (
                none.api_prefix,
                none.api_version,
                none.label_selector,
                none.field_selector
            ),
            (None, None, None, None)
        );
        assert_eq!(
            (none.verb.as_str(), none.resource.as_str()),
            ("list", "widgets")
        );
    }

    /// kube's AuthenticatedGroupAdder: every authenticated user is in
    /// `system:authenticated`, added once (last), never to the anonymous
    /// user nor to one in `system:unauthenticated`, and the answer says
    /// whether it was added.
    #[test]
    fn an_authenticated_user_is_in_system_authenticated_once() {
        let named = |name: &str, groups: &[&str]| types::UserInfo {
            name: name.to_owned(),
            uid: String::new(),
            groups: groups.iter().map(|group| (*group).to_owned()).collect(),
            extra: Vec::new(),
        };
        let (alice, added) = authenticated_user(named("alice", &["dev"]));
        assert_eq!(alice.groups, ["dev", "system:authenticated"]);
        assert!(added);
        let (bob, added) = authenticated_user(named("bob", &["system:authenticated", "ops"]));
        assert_eq!(bob.groups, ["system:authenticated", "ops"]);
        assert!(!added);
        let (anonymous, added) = authenticated_user(named("system:anonymous", &[]));
        assert!(anonymous.groups.is_empty());
        assert!(!added);
        // A user the filter put in system:unauthenticated is not made one
        // of the authenticated users too (and given what they are granted).
        let (guest, added) = authenticated_user(named("guest", &["system:unauthenticated"]));
        assert_eq!(guest.groups, ["system:unauthenticated"]);
        assert!(!added);
    }

    /// An auditor's record says what the event's JSON line says, field by
    /// field.
    #[test]
    fn an_audit_record_carries_what_the_line_says() {
        let event = crate::audit_event::tests::event();
        let line: serde_json::Value =
            serde_json::from_str(&crate::audit_event::tests::line(&event)).unwrap();
        let record = audit_event(&event);
        assert_eq!(record.audit_id, line["auditID"]);
        assert_eq!(record.stage, auditor::Stage::ResponseComplete);
        assert_eq!(record.level, auditor::Level::RequestResponse);
        assert_eq!(record.verb, line["verb"]);
        assert_eq!(record.request_uri, line["requestURI"]);
        assert_eq!(record.user.name, line["user"]["username"]);
        assert_eq!(record.user.groups, ["dev", "system:authenticated"]);
        assert_eq!(record.user.extra.len(), 3);
        assert!(record.impersonated_user.is_none());
        assert_eq!(record.source_ips, ["10.0.0.1"]);
        assert_eq!(record.user_agent, line["userAgent"]);
        let object = record.object_ref.unwrap();
        assert_eq!(
            (
                object.resource.as_str(),
                object.namespace.as_str(),
                object.api_version.as_str()
            ),
            ("pods", "default", "v1")
        );
        assert!(object.name.is_empty() && object.api_group.is_empty());
        assert_eq!(record.response_status.map(|status| status.code), Some(201));
        assert_eq!(
            record.request_received_timestamp,
            line["requestReceivedTimestamp"]
        );
        assert_eq!(record.stage_timestamp, line["stageTimestamp"]);
        let annotations: Vec<(&str, &str)> = record
            .annotations
            .iter()
            .map(|annotation| (annotation.key.as_str(), annotation.value.as_str()))
            .collect();
        assert_eq!(
            annotations,
            [
                ("authorization.k8s.io/decision", "allow"),
                ("authorization.k8s.io/reason", "RBAC: allowed")
            ]
        );
        assert_eq!(record.request_object, event.request_object);
        assert_eq!(record.response_object, event.response_object);
    }
}
