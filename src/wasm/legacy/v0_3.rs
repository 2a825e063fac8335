//! Components built against `wasmgate:filter@0.3.0`: the records each 0.3.0
//! world defines for itself, converted to and from 0.4.0's (the shared
//! `types` are the same Rust types in both, so they move across as they
//! are). 0.4.0 added the serialised auditor and the sink's `write-lines`
//! and changed no record, so every field crosses unchanged.

use crate::wasm::filter::{
    AdmissionRequest, AdmissionResponse, Annotation, Attributes, AuthnResult, Decision, Event,
    Level, ObjectReference, Operation, Stage,
};

pub(crate) mod authn {
    pub(crate) use crate::wasm::bindings::v0_3::authenticator::exports::wasmgate::filter::authenticator::AuthnResult;
}
pub(crate) mod authz {
    pub(crate) use crate::wasm::bindings::v0_3::authorizer::exports::wasmgate::filter::authorizer::{
        Attributes, Decision,
    };
}
pub(crate) mod admit {
    pub(crate) use crate::wasm::bindings::v0_3::admission::exports::wasmgate::filter::admission::{
        AdmissionRequest, AdmissionResponse, Operation,
    };
}
pub(crate) mod audit {
    pub(crate) use crate::wasm::bindings::v0_3::auditor::exports::wasmgate::filter::auditor::{
        Annotation, Event, Level, ObjectReference, Stage,
    };
}

pub(crate) fn authn_result(result: authn::AuthnResult) -> AuthnResult {
    match result {
        authn::AuthnResult::Authenticated(user) => AuthnResult::Authenticated(user),
        authn::AuthnResult::NoOpinion => AuthnResult::NoOpinion,
        authn::AuthnResult::Error(message) => AuthnResult::Error(message),
    }
}

pub(crate) fn attributes(attributes: &Attributes) -> authz::Attributes {
    authz::Attributes {
        user: attributes.user.clone(),
        request: attributes.request.clone(),
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
        request: request.request.clone(),
        user: request.user.clone(),
        object: request.object.clone(),
        content_type: request.content_type.clone(),
        dry_run: request.dry_run,
    }
}

pub(crate) fn admission_response(response: admit::AdmissionResponse) -> AdmissionResponse {
    match response {
        admit::AdmissionResponse::Allowed => AdmissionResponse::Allowed,
        admit::AdmissionResponse::Mutated(object) => AdmissionResponse::Mutated(object),
        admit::AdmissionResponse::Patched(patch) => AdmissionResponse::Patched(patch),
        admit::AdmissionResponse::Denied(status) => AdmissionResponse::Denied(status),
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
        user: event.user.clone(),
        impersonated_user: event.impersonated_user.clone(),
        source_ips: event.source_ips.clone(),
        user_agent: event.user_agent.clone(),
        object_ref: event.object_ref.as_ref().map(object_reference),
        response_status: event.response_status.clone(),
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
