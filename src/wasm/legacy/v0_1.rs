//! Components built against `wasmgate:filter@0.1.0`: the records each 0.1.0
//! world defines for itself, converted to and from 0.2.0's (the shared
//! `types` are the same Rust types in both, so they move across as they
//! are). 0.1.0 has no `cache` import, so its answers carry no TTL limit, and
//! its auditors take one event a call.

use super::v0_2::{admit as admit_0_2, audit as audit_0_2, authn as authn_0_2, authz as authz_0_2};

mod authn {
    pub(crate) use crate::wasm::bindings::v0_1::authenticator::exports::wasmgate::filter::authenticator::AuthnResult;
}
mod authz {
    pub(crate) use crate::wasm::bindings::v0_1::authorizer::exports::wasmgate::filter::authorizer::{
        Attributes, Decision,
    };
}
mod admit {
    pub(crate) use crate::wasm::bindings::v0_1::admission::exports::wasmgate::filter::admission::{
        AdmissionRequest, AdmissionResponse, Operation,
    };
}
mod audit {
    pub(crate) use crate::wasm::bindings::v0_1::auditor::exports::wasmgate::filter::auditor::{
        Annotation, Event, Level, ObjectReference, Stage,
    };
}

pub(crate) fn authn_result(result: authn::AuthnResult) -> authn_0_2::AuthnResult {
    match result {
        authn::AuthnResult::Authenticated(user) => authn_0_2::AuthnResult::Authenticated(user),
        authn::AuthnResult::NoOpinion => authn_0_2::AuthnResult::NoOpinion,
        authn::AuthnResult::Error(message) => authn_0_2::AuthnResult::Error(message),
    }
}

pub(crate) fn attributes(attributes: authz_0_2::Attributes) -> authz::Attributes {
    authz::Attributes {
        user: attributes.user,
        request: attributes.request,
    }
}

pub(crate) fn decision(decision: authz::Decision) -> authz_0_2::Decision {
    match decision {
        authz::Decision::Allow => authz_0_2::Decision::Allow,
        authz::Decision::Deny(reason) => authz_0_2::Decision::Deny(reason),
        authz::Decision::NoOpinion(reason) => authz_0_2::Decision::NoOpinion(reason),
    }
}

pub(crate) fn admission_request(request: admit_0_2::AdmissionRequest) -> admit::AdmissionRequest {
    admit::AdmissionRequest {
        uid: request.uid,
        operation: match request.operation {
            admit_0_2::Operation::Create => admit::Operation::Create,
            admit_0_2::Operation::Update => admit::Operation::Update,
            admit_0_2::Operation::Delete => admit::Operation::Delete,
            admit_0_2::Operation::Connect => admit::Operation::Connect,
        },
        request: request.request,
        user: request.user,
        object: request.object,
        content_type: request.content_type,
        dry_run: request.dry_run,
    }
}

pub(crate) fn admission_response(
    response: admit::AdmissionResponse,
) -> admit_0_2::AdmissionResponse {
    match response {
        admit::AdmissionResponse::Allowed => admit_0_2::AdmissionResponse::Allowed,
        admit::AdmissionResponse::Mutated(object) => admit_0_2::AdmissionResponse::Mutated(object),
        admit::AdmissionResponse::Patched(patch) => admit_0_2::AdmissionResponse::Patched(patch),
        admit::AdmissionResponse::Denied(status) => admit_0_2::AdmissionResponse::Denied(status),
    }
}

pub(crate) fn event(event: audit_0_2::Event) -> audit::Event {
    audit::Event {
        audit_id: event.audit_id,
        stage: match event.stage {
            audit_0_2::Stage::RequestReceived => audit::Stage::RequestReceived,
            audit_0_2::Stage::ResponseStarted => audit::Stage::ResponseStarted,
            audit_0_2::Stage::ResponseComplete => audit::Stage::ResponseComplete,
            audit_0_2::Stage::Panic => audit::Stage::Panic,
        },
        level: match event.level {
            audit_0_2::Level::None => audit::Level::None,
            audit_0_2::Level::Metadata => audit::Level::Metadata,
            audit_0_2::Level::Request => audit::Level::Request,
            audit_0_2::Level::RequestResponse => audit::Level::RequestResponse,
        },
        verb: event.verb,
        request_uri: event.request_uri,
        user: event.user,
        impersonated_user: event.impersonated_user,
        source_ips: event.source_ips,
        user_agent: event.user_agent,
        object_ref: event.object_ref.map(object_reference),
        response_status: event.response_status,
        request_received_timestamp: event.request_received_timestamp,
        stage_timestamp: event.stage_timestamp,
        annotations: event.annotations.into_iter().map(annotation).collect(),
        request_object: event.request_object,
        response_object: event.response_object,
    }
}

fn object_reference(object: audit_0_2::ObjectReference) -> audit::ObjectReference {
    audit::ObjectReference {
        resource: object.resource,
        namespace: object.namespace,
        name: object.name,
        api_group: object.api_group,
        api_version: object.api_version,
        subresource: object.subresource,
    }
}

fn annotation(annotation: audit_0_2::Annotation) -> audit::Annotation {
    audit::Annotation {
        key: annotation.key,
        value: annotation.value,
    }
}
