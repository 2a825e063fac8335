//! Components built against `wasmgate:filter@0.2.0`: its records, converted
//! to and from 0.3.0's (`super::v0_3`, whose shared `types` are 0.4.0's
//! Rust types). 0.2.0's types are its own Rust types (0.3.0 changed the
//! `types` interface), so every record crosses here, the unchanged ones
//! too. 0.3.0's options are 0.2.0's strings (an absent one empty), its
//! optional `request` and `user` of an admission review 0.2.0's empty
//! records, and 0.2.0's `parts` are the path's, resolved again.

use super::v0_3::admit::{AdmissionRequest, AdmissionResponse, Operation};
use super::v0_3::audit::{Annotation, Event, Level, ObjectReference, Stage};
use super::v0_3::authn::AuthnResult;
use super::v0_3::authz::{Attributes, Decision};
use crate::config::stages::Reads;
use crate::wasm::bindings::types;
use crate::wasm::bindings::v0_2::types as old;
use crate::wasm::convert;

pub(crate) mod authn {
    pub(crate) use crate::wasm::bindings::v0_2::authenticator::exports::wasmgate::filter::authenticator::AuthnResult;
}
pub(crate) mod authz {
    pub(crate) use crate::wasm::bindings::v0_2::authorizer::exports::wasmgate::filter::authorizer::{
        Attributes, Decision,
    };
}
pub(crate) mod admit {
    pub(crate) use crate::wasm::bindings::v0_2::admission::exports::wasmgate::filter::admission::{
        AdmissionRequest, AdmissionResponse, Operation,
    };
}
pub(crate) mod audit {
    pub(crate) use crate::wasm::bindings::v0_2::auditor::exports::wasmgate::filter::auditor::{
        Annotation, Event, Level, ObjectReference, Stage,
    };
}

/// 0.2.0's log level, for the current host functions.
pub(crate) fn log_level(level: old::LogLevel) -> types::LogLevel {
    match level {
        old::LogLevel::Trace => types::LogLevel::Trace,
        old::LogLevel::Debug => types::LogLevel::Debug,
        old::LogLevel::Info => types::LogLevel::Info,
        old::LogLevel::Warn => types::LogLevel::Warn,
        old::LogLevel::Error => types::LogLevel::Error,
    }
}

/// An absent option as 0.2.0 had it: empty.
fn text(value: &Option<String>) -> String {
    value.clone().unwrap_or_default()
}

pub(crate) fn request_view(view: &types::RequestView) -> old::RequestView {
    old::RequestView {
        method: text(&view.method),
        path: text(&view.path),
        query: text(&view.query),
        headers: view
            .headers
            .iter()
            .map(|header| old::Header {
                name: header.name.clone(),
                value: header.value.clone(),
            })
            .collect(),
        remote_addr: text(&view.remote_addr),
        client_certificate: view.client_certificate.as_ref().map(|certificate| {
            old::ClientCertificate {
                common_name: certificate.common_name.clone(),
                organizations: certificate.organizations.clone(),
                subject: certificate.subject.clone(),
                chain_der: certificate.chain_der.clone(),
            }
        }),
    }
}

/// 0.2.0's request info; its `parts` (dropped in 0.3.0) are the path's
/// segments after the API version, as the resolver splits them.
fn request_info(info: &types::RequestInfo) -> old::RequestInfo {
    let parts = if info.is_resource_request {
        crate::request_info::RequestInfo::resolve(&http::Method::GET, &info.path, None)
            .parts
            .into_iter()
            .map(String::from)
            .collect()
    } else {
        Vec::new()
    };
    old::RequestInfo {
        is_resource_request: info.is_resource_request,
        path: info.path.clone(),
        verb: info.verb.clone(),
        api_prefix: text(&info.api_prefix),
        api_group: info.api_group.clone(),
        api_version: text(&info.api_version),
        namespace: info.namespace.clone(),
        resource: info.resource.clone(),
        subresource: info.subresource.clone(),
        name: info.name.clone(),
        parts,
        label_selector: text(&info.label_selector),
        field_selector: text(&info.field_selector),
    }
}

fn user_info(user: &types::UserInfo) -> old::UserInfo {
    old::UserInfo {
        name: user.name.clone(),
        uid: user.uid.clone(),
        groups: user.groups.clone(),
        extra: user
            .extra
            .iter()
            .map(|extra| old::ExtraValue {
                key: extra.key.clone(),
                values: extra.values.clone(),
            })
            .collect(),
    }
}

fn user_from_old(user: old::UserInfo) -> types::UserInfo {
    types::UserInfo {
        name: user.name,
        uid: user.uid,
        groups: user.groups,
        extra: user
            .extra
            .into_iter()
            .map(|extra| types::ExtraValue {
                key: extra.key,
                values: extra.values,
            })
            .collect(),
    }
}

fn status(status: &types::Status) -> old::Status {
    old::Status {
        code: status.code,
        reason: status.reason.clone(),
        message: status.message.clone(),
    }
}

fn status_from_old(status: old::Status) -> types::Status {
    types::Status {
        code: status.code,
        reason: status.reason,
        message: status.message,
    }
}

pub(crate) fn authn_result(result: authn::AuthnResult) -> AuthnResult {
    match result {
        authn::AuthnResult::Authenticated(user) => AuthnResult::Authenticated(user_from_old(user)),
        authn::AuthnResult::NoOpinion => AuthnResult::NoOpinion,
        authn::AuthnResult::Error(message) => AuthnResult::Error(message),
    }
}

pub(crate) fn attributes(attributes: &Attributes) -> authz::Attributes {
    authz::Attributes {
        user: user_info(&attributes.user),
        request: request_info(&attributes.request),
    }
}

pub(crate) fn decision(decision: authz::Decision) -> Decision {
    match decision {
        authz::Decision::Allow => Decision::Allow,
        authz::Decision::Deny(reason) => Decision::Deny(reason),
        authz::Decision::NoOpinion(reason) => Decision::NoOpinion(reason),
    }
}

pub(crate) fn admission_request(request: &AdmissionRequest) -> admit::AdmissionRequest {
    admit::AdmissionRequest {
        uid: request.uid.clone(),
        operation: match request.operation {
            Operation::Create => admit::Operation::Create,
            Operation::Update => admit::Operation::Update,
            Operation::Delete => admit::Operation::Delete,
            Operation::Connect => admit::Operation::Connect,
        },
        request: request
            .request
            .as_ref()
            .map_or_else(empty_request_info, request_info),
        user: request
            .user
            .as_ref()
            .map_or_else(empty_user_info, user_info),
        object: request.object.clone(),
        content_type: request.content_type.clone(),
        dry_run: request.dry_run,
    }
}

/// What 0.2.0's review carries when `reads` leaves `request` out.
fn empty_request_info() -> old::RequestInfo {
    let empty = crate::request_info::RequestInfo::default();
    request_info(&convert::request_info(&empty, Reads::ALL))
}

/// What 0.2.0's review carries when `reads` leaves `user` out.
fn empty_user_info() -> old::UserInfo {
    user_info(&convert::user_to_wit(&crate::context::UserInfo::default()))
}

pub(crate) fn admission_response(response: admit::AdmissionResponse) -> AdmissionResponse {
    match response {
        admit::AdmissionResponse::Allowed => AdmissionResponse::Allowed,
        admit::AdmissionResponse::Mutated(object) => AdmissionResponse::Mutated(object),
        admit::AdmissionResponse::Patched(patch) => AdmissionResponse::Patched(patch),
        admit::AdmissionResponse::Denied(denial) => {
            AdmissionResponse::Denied(status_from_old(denial))
        }
    }
}

pub(crate) fn event(event: &Event) -> audit::Event {
    audit::Event {
        audit_id: event.audit_id.clone(),
        stage: match event.stage {
            Stage::RequestReceived => audit::Stage::RequestReceived,
            Stage::ResponseStarted => audit::Stage::ResponseStarted,
            Stage::ResponseComplete => audit::Stage::ResponseComplete,
            Stage::Panic => audit::Stage::Panic,
        },
        level: match event.level {
            Level::None => audit::Level::None,
            Level::Metadata => audit::Level::Metadata,
            Level::Request => audit::Level::Request,
            Level::RequestResponse => audit::Level::RequestResponse,
        },
        verb: event.verb.clone(),
        request_uri: event.request_uri.clone(),
        user: user_info(&event.user),
        impersonated_user: event.impersonated_user.as_ref().map(user_info),
        source_ips: event.source_ips.clone(),
        user_agent: event.user_agent.clone(),
        object_ref: event.object_ref.as_ref().map(object_reference),
        response_status: event.response_status.as_ref().map(status),
        request_received_timestamp: event.request_received_timestamp.clone(),
        stage_timestamp: event.stage_timestamp.clone(),
        annotations: event.annotations.iter().map(annotation).collect(),
        request_object: event.request_object.clone(),
        response_object: event.response_object.clone(),
    }
}

fn object_reference(object: &ObjectReference) -> audit::ObjectReference {
    audit::ObjectReference {
        resource: object.resource.clone(),
        namespace: object.namespace.clone(),
        name: object.name.clone(),
        api_group: object.api_group.clone(),
        api_version: object.api_version.clone(),
        subresource: object.subresource.clone(),
    }
}

fn annotation(annotation: &Annotation) -> audit::Annotation {
    audit::Annotation {
        key: annotation.key.clone(),
        value: annotation.value.clone(),
    }
}
