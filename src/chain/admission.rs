//! The admission stage (kube's admission chain, after authorization): for
//! requests that carry an object (create, update, patch; delete with its
//! options; connect with the options of its query, `connect_options`),
//! every mutating filter runs first, in order, each seeing the previous
//! one's output (a JSON Patch is applied here, natively), then every
//! validating filter. The first denial ends the request with the filter's
//! status. A mutated object goes upstream with a correct `Content-Length`;
//! a connect request's options are its query, which goes upstream as sent,
//! so no filter may change them. Requests without an object pass untouched.

mod connect_options;

use std::time::Instant;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderValue, StatusCode};
use http_body_util::BodyExt;

use super::stage::{self, Failure, Watchers};
use crate::body::{Body, MaxRequestBody, Request, Response};
use crate::config::stages::{Mode, ReadField};
use crate::context::{AuditId, UserInfo};
use crate::decision_cache::Lookup;
use crate::handler::{Handler, SharedHandler};
use crate::metrics::stages::{AdmissionTimer, AdmissionType};
use crate::request_info::RequestInfo;
use crate::status::GatewayError;
use crate::wasm::filter::{
    Admission as AdmissionKind, AdmissionRequest, AdmissionResponse, Operation,
};
use crate::wasm::{LoadedFilter, Outcome, convert};

const STAGE: &str = "admission";

pub(crate) struct Admission {
    mutating: Phase,
    validating: Phase,
    next: SharedHandler,
}

/// The filters of one phase, and its timers (kube's step metric, and each
/// filter's controller metric), made with the chain.
struct Phase {
    filters: Vec<Controller>,
    timer: AdmissionTimer,
}

/// One admission filter, and the timer of its calls.
struct Controller {
    filter: LoadedFilter<AdmissionKind>,
    timer: AdmissionTimer,
}

impl Phase {
    fn new(phase: AdmissionType, filters: Vec<LoadedFilter<AdmissionKind>>) -> Self {
        let metrics = &crate::metrics::metrics().stages;
        let filters = filters
            .into_iter()
            .map(|filter| Controller {
                timer: metrics.admission_controller(filter.name(), phase),
                filter,
            })
            .collect();
        Phase {
            filters,
            timer: metrics.admission_step(phase),
        }
    }

    /// The phase's filters the request is for.
    fn selected<'a>(&'a self, info: &'a RequestInfo) -> impl Iterator<Item = &'a Controller> {
        self.filters
            .iter()
            .filter(|controller| stage::selects(&controller.filter.spec.matcher, info))
    }
}

impl Admission {
    pub(crate) fn new(
        mutating: Vec<LoadedFilter<AdmissionKind>>,
        validating: Vec<LoadedFilter<AdmissionKind>>,
        next: SharedHandler,
    ) -> Self {
        Admission {
            mutating: Phase::new(AdmissionType::Admit, mutating),
            validating: Phase::new(AdmissionType::Validate, validating),
            next,
        }
    }
}

/// Where the object stands after a filter.
enum Step {
    Continue,
    Changed(serde_json::Value),
    Stop(GatewayError),
}

impl Handler for Admission {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        Box::pin(async move {
            let Some(info) = request.extensions().get::<RequestInfo>() else {
                return self.next.call(request).await;
            };
            let Some(operation) = operation(info) else {
                return self.next.call(request).await;
            };
            if self
                .mutating
                .selected(info)
                .chain(self.validating.selected(info))
                .next()
                .is_none()
            {
                return self.next.call(request).await;
            }
            // Boxed: reads never get here, and inline the admission's state
            // would be in every request's future, which is moved whole.
            match Box::pin(self.admit(request, operation)).await {
                Ok(request) => self.next.call(request).await,
                Err(error) => error.into_response(),
            }
        })
    }
}

impl Admission {
    async fn admit(&self, request: Request, operation: Operation) -> Result<Request, GatewayError> {
        let (mut parts, body) = request.into_parts();
        let (original, body) = match operation {
            // Its body, if any, is the upstream's: never read here.
            Operation::Connect => {
                let info = parts.extensions.get::<RequestInfo>();
                let options = info
                    .map(|info| connect_options::connect_options(info, parts.uri.query()))
                    .transpose()?
                    .flatten();
                (options, Object::Unread(body))
            }
            _ => {
                let bytes = read_body(&parts, body).await?;
                (parse_object(&bytes)?, Object::Read(bytes))
            }
        };
        let text = match &body {
            Object::Read(bytes) => {
                (!bytes.is_empty()).then(|| String::from_utf8_lossy(bytes).into_owned())
            }
            Object::Unread(_) => original.as_ref().map(serde_json::Value::to_string),
        };
        let mut review = review(&parts, operation, text);
        let watchers = Watchers::of(&parts.extensions);
        let (no_info, nobody) = (RequestInfo::default(), UserInfo::default());
        let info = parts.extensions.get::<RequestInfo>().unwrap_or(&no_info);
        let user = parts.extensions.get::<UserInfo>().unwrap_or(&nobody);
        // The object as the last mutation left it; None while none changed it.
        let mut mutated: Option<serde_json::Value> = None;
        // kube's step metric: each phase's time, and whether it rejected.
        let operation_name = operation_label(operation);
        let started = Instant::now();
        for controller in self.mutating.selected(info) {
            given_to(&controller.filter, &mut review, info, user);
            let object = mutated.as_ref().or(original.as_ref());
            match self.run(controller, &review, object, true, &watchers).await {
                Step::Continue => {}
                Step::Changed(value) => {
                    review.object = Some(value.to_string());
                    mutated = Some(value);
                }
                Step::Stop(error) => {
                    let timer = &self.mutating.timer;
                    timer.observe(operation_name, true, started.elapsed());
                    return Err(error);
                }
            }
        }
        if !self.mutating.filters.is_empty() {
            let timer = &self.mutating.timer;
            timer.observe(operation_name, false, started.elapsed());
        }
        let started = Instant::now();
        for controller in self.validating.selected(info) {
            given_to(&controller.filter, &mut review, info, user);
            let object = mutated.as_ref().or(original.as_ref());
            if let Step::Stop(error) = self
                .run(controller, &review, object, false, &watchers)
                .await
            {
                let timer = &self.validating.timer;
                timer.observe(operation_name, true, started.elapsed());
                return Err(error);
            }
        }
        if !self.validating.filters.is_empty() {
            let timer = &self.validating.timer;
            timer.observe(operation_name, false, started.elapsed());
        }
        let bytes = match body {
            Object::Unread(body) => return Ok(http::Request::from_parts(parts, body)),
            Object::Read(bytes) => bytes,
        };
        let body = match mutated.filter(|object| Some(object) != original.as_ref()) {
            // Sent as the text the validating filters were given: the last
            // mutation's, made once.
            Some(object) => {
                let text = review.object.take();
                let bytes = Bytes::from(text.unwrap_or_else(|| object.to_string()));
                parts
                    .headers
                    .insert(CONTENT_LENGTH, HeaderValue::from(bytes.len()));
                bytes
            }
            None => bytes,
        };
        Ok(http::Request::from_parts(parts, Body::full(body)))
    }

    /// One filter's call, timed per filter (kube's per-controller metric).
    async fn run(
        &self,
        controller: &Controller,
        review: &AdmissionRequest,
        object: Option<&serde_json::Value>,
        mutating: bool,
        watchers: &Watchers,
    ) -> Step {
        let started = Instant::now();
        let step = self
            .call(&controller.filter, review, object, mutating, watchers)
            .await;
        controller.timer.observe(
            operation_label(review.operation),
            matches!(step, Step::Stop(_)),
            started.elapsed(),
        );
        step
    }

    async fn call(
        &self,
        filter: &LoadedFilter<AdmissionKind>,
        review: &AdmissionRequest,
        object: Option<&serde_json::Value>,
        mutating: bool,
        watchers: &Watchers,
    ) -> Step {
        let started = Instant::now();
        let call = filter.admit(review).await;
        stage::observe(
            STAGE,
            &filter.spec,
            (&call, Lookup::Uncached),
            describe,
            started.elapsed(),
            watchers,
        );
        let answer = match call.outcome {
            Outcome::Answer(answer) => answer,
            failed => return failure(filter, &failed),
        };
        let step = match answer {
            AdmissionResponse::Allowed => Step::Continue,
            AdmissionResponse::Denied(status) => Step::Stop(denial(status)),
            AdmissionResponse::Mutated(_) | AdmissionResponse::Patched(_) if !mutating => {
                tracing::error!(
                    filter = filter.name(),
                    "a validating filter tried to change the object"
                );
                return failure(
                    filter,
                    &Outcome::<()>::FilterError("validating filters may not mutate".to_owned()),
                );
            }
            AdmissionResponse::Mutated(_) | AdmissionResponse::Patched(_)
                if review.operation == Operation::Connect =>
            {
                return failure(
                    filter,
                    &Outcome::<()>::FilterError(
                        "a connect request's options may not be changed: its query goes upstream as sent"
                            .to_owned(),
                    ),
                );
            }
            AdmissionResponse::Mutated(json) => match serde_json::from_str(&json) {
                Ok(value) => Step::Changed(value),
                Err(error) => {
                    return failure(
                        filter,
                        &Outcome::<()>::FilterError(format!("mutated object is not JSON: {error}")),
                    );
                }
            },
            AdmissionResponse::Patched(patch) => match apply_patch(object, &patch) {
                Ok(value) => Step::Changed(value),
                Err(message) => return failure(filter, &Outcome::<()>::FilterError(message)),
            },
        };
        if filter.spec.mode == Mode::Monitor {
            if !matches!(step, Step::Continue) {
                tracing::info!(
                    filter = filter.name(),
                    "monitor mode: admission decision not enforced"
                );
            }
            return Step::Continue;
        }
        step
    }
}

fn failure<T>(filter: &LoadedFilter<AdmissionKind>, outcome: &Outcome<T>) -> Step {
    match stage::on_failure(STAGE, &filter.spec, outcome) {
        Failure::Skip => Step::Continue,
        Failure::Fail(error) => Step::Stop(error),
    }
}

impl stage::Answer for AdmissionResponse {
    fn word(&self) -> &'static str {
        match self {
            AdmissionResponse::Allowed => "allow",
            AdmissionResponse::Mutated(_) => "mutated",
            AdmissionResponse::Patched(_) => "patched",
            AdmissionResponse::Denied(_) => "deny",
        }
    }
}

fn describe(answer: &AdmissionResponse) -> String {
    match answer {
        AdmissionResponse::Allowed => "allowed".to_owned(),
        AdmissionResponse::Mutated(_) => "mutated the object".to_owned(),
        AdmissionResponse::Patched(patch) => format!("patched: {patch}"),
        AdmissionResponse::Denied(status) => format!("denied {}: {}", status.code, status.message),
    }
}

/// kube's name of an operation, as its metrics label it.
fn operation_label(operation: Operation) -> &'static str {
    match operation {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

/// kube's admission operations, by verb; None for requests without an object.
fn operation(info: &RequestInfo) -> Option<Operation> {
    if matches!(
        info.subresource.as_str(),
        "exec" | "attach" | "portforward" | "proxy"
    ) && info.is_resource_request
    {
        return Some(Operation::Connect);
    }
    match info.verb.as_str() {
        "create" => Some(Operation::Create),
        "update" | "patch" => Some(Operation::Update),
        "delete" | "deletecollection" => Some(Operation::Delete),
        _ => None,
    }
}

/// Fills `review`'s request and user info as `filter` reads them (its
/// `reads`): a filter that reads only the object is given neither.
fn given_to(
    filter: &LoadedFilter<AdmissionKind>,
    review: &mut AdmissionRequest,
    info: &RequestInfo,
    user: &UserInfo,
) {
    let reads = filter.spec.reads;
    review.request = reads
        .includes(ReadField::Request)
        .then(|| convert::request_info(info, reads));
    review.user = reads
        .includes(ReadField::User)
        .then(|| convert::user_to_wit(user));
}

/// What the object was read from: the body, or, for a connect request, the
/// query (its body left for the upstream).
enum Object {
    Read(Bytes),
    Unread(Body),
}

async fn read_body(parts: &http::request::Parts, body: Body) -> Result<Bytes, GatewayError> {
    let limit = parts
        .extensions
        .get::<MaxRequestBody>()
        .map_or(0, |limit| limit.0);
    Ok(body
        .collect()
        .await
        .map_err(|error| GatewayError::body_unreadable(&*error, limit))?
        .to_bytes())
}

/// The body as JSON; None when there is none.
fn parse_object(bytes: &[u8]) -> Result<Option<serde_json::Value>, GatewayError> {
    if bytes.is_empty() {
        return Ok(None);
    }
    serde_json::from_slice(bytes)
        .map(Some)
        .map_err(|error| GatewayError::BadRequest {
            message: format!("the request body is not valid JSON: {error}"),
        })
}

/// The review of one request, without its request and user info: each
/// filter is given those it reads ([`given_to`]).
fn review(
    parts: &http::request::Parts,
    operation: Operation,
    object: Option<String>,
) -> AdmissionRequest {
    let extensions = &parts.extensions;
    let dry_run = url::form_urlencoded::parse(parts.uri.query().unwrap_or("").as_bytes())
        .any(|(key, value)| key == "dryRun" && value == "All");
    AdmissionRequest {
        uid: extensions
            .get::<AuditId>()
            .map(|id| id.0.clone())
            .unwrap_or_default(),
        operation,
        request: None,
        user: None,
        object,
        content_type: parts
            .headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned(),
        dry_run,
    }
}

fn apply_patch(
    object: Option<&serde_json::Value>,
    patch: &str,
) -> Result<serde_json::Value, String> {
    let patch: json_patch::Patch =
        serde_json::from_str(patch).map_err(|error| format!("not a JSON Patch: {error}"))?;
    let mut value = object.cloned().unwrap_or(serde_json::Value::Null);
    json_patch::patch(&mut value, &patch)
        .map_err(|error| format!("the JSON Patch does not apply: {error}"))?;
    Ok(value)
}

/// A filter's denial as a Status; codes outside 4xx become 403.
fn denial(status: crate::wasm::bindings::types::Status) -> GatewayError {
    let code = StatusCode::from_u16(status.code)
        .ok()
        .filter(StatusCode::is_client_error)
        .unwrap_or(StatusCode::FORBIDDEN);
    let reason = if status.reason.is_empty() {
        "Forbidden".to_owned()
    } else {
        status.reason
    };
    GatewayError::Denied {
        code,
        reason,
        message: status.message,
    }
}
