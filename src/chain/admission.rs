//! The admission stage (kube's admission chain, after authorization): for
//! requests that carry an object (create, update, patch; delete with its
//! options; connect with the options of its query, `connect_options`),
//! every mutating filter runs first, in order, each seeing the previous
//! one's output (a JSON Patch is applied here, natively, to the object
//! parsed once and patched in place: [`Draft`]), then every validating
//! filter. The first denial ends the request with the filter's
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
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use super::audit::{AuditContext, Layer};
use super::stage::{self, Failure, Watchers};
use crate::body::{Body, Request, Response};
use crate::config::DEFAULT_MAX_REQUEST_BODY;
use crate::config::stages::{Mode, ReadField};
use crate::context::{RequestContext, UserInfo};
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

/// Where the request stands after a filter: its change, if any, is made
/// already (in the review's object and the [`Draft`]).
enum Step {
    Continue,
    Stop(GatewayError),
}

/// What a filter's answer asks of the object.
enum Verdict {
    Allow,
    Replace(serde_json::Value),
    Patch(json_patch::Patch),
    Deny(GatewayError),
}

/// Why an answer is the filter's failure rather than a [`Verdict`].
#[derive(Debug, thiserror::Error)]
enum Unfit {
    #[error("validating filters may not mutate")]
    ValidatingMutated,
    #[error("a connect request's options may not be changed: its query goes upstream as sent")]
    ConnectChanged,
    #[error("mutated object is not JSON: {0}")]
    NotJson(serde_json::Error),
    #[error("not a JSON Patch: {0}")]
    NotAPatch(serde_json::Error),
}

impl Handler for Admission {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        Box::pin(async move {
            let Some(info) = &RequestContext::of(request.extensions()).info else {
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
        // Checked before the body is read: without a requester there is
        // nothing to judge, and the body would be read for nothing.
        let (user, info) = RequestContext::of(&parts.extensions).requester("admission")?;
        let (text, mut draft, body, format) = self.object(&parts, body, operation).await?;
        // The client's object is held to its path before any filter sees
        // it, as kube's create, update and patch handlers hold it before
        // admission: a filter judges the namespace and name the path, and
        // authorization, gave.
        let stated = match &draft.value {
            Some(object) => Stated::of(object),
            None => std::mem::take(&mut draft.stated),
        };
        where_the_path_puts_it(&stated, operation, info)?;
        let mut review = review(&parts, operation, text, format);
        let watchers = Watchers::of(&parts.extensions);
        // kube's step metric: each phase's time, and whether it rejected.
        let operation_name = operation_label(operation);
        let audit = parts.extensions.get::<AuditContext>();
        for (phase, mutating) in [(&self.mutating, true), (&self.validating, false)] {
            let started = Instant::now();
            // Audit's latency annotations, under kube's keys for the
            // admission webhooks these filters stand for.
            let layer = if mutating {
                Layer::MutatingAdmission
            } else {
                Layer::ValidatingAdmission
            };
            let note = |took| {
                if let Some(audit) = audit {
                    audit.took(layer, took);
                }
            };
            let mut asked = false;
            for controller in phase.selected(info) {
                asked = true;
                given_to(&controller.filter, &mut review, info, user);
                let step = self
                    .run(controller, &mut review, &mut draft, mutating, &watchers)
                    .await;
                if let Step::Stop(error) = step {
                    let took = started.elapsed();
                    phase.timer.observe(operation_name, true, took);
                    note(took);
                    return Err(error);
                }
            }
            if !phase.filters.is_empty() {
                let took = started.elapsed();
                phase.timer.observe(operation_name, false, took);
                if asked {
                    note(took);
                }
            }
            // What the mutations made is held to the request's path before
            // the validating filters see it, as kube's registry holds it
            // (`BeforeCreate`, `BeforeUpdate`) before validating admission.
            if mutating
                && draft.changed
                && let Some(object) = &draft.value
            {
                where_the_path_puts_it(&Stated::of(object), operation, info)?;
            }
        }
        let bytes = match body {
            Object::Unread(body) => return Ok(http::Request::from_parts(parts, body)),
            Object::Read(bytes) => bytes,
        };
        // A YAML body goes upstream as the JSON the filters judged, changed
        // or not: what the upstream decodes is then what was judged, and no
        // corner where two YAML readers differ (a tag, a merge key, a
        // repeated key) lets it read another object.
        let resent = draft.changed || format != Format::Json;
        let body = match review.object.take().filter(|_| resent) {
            // Sent as the text the validating filters were given: the last
            // mutation's, made once.
            Some(text) => {
                let bytes = Bytes::from(text);
                parts
                    .headers
                    .insert(CONTENT_LENGTH, HeaderValue::from(bytes.len()));
                if let Some(media_type) = format.resent_as() {
                    parts
                        .headers
                        .insert(CONTENT_TYPE, HeaderValue::from_static(media_type));
                }
                bytes
            }
            None => bytes,
        };
        Ok(http::Request::from_parts(parts, Body::full(body)))
    }

    /// The object the filters are given, as text, its [`Draft`], what it
    /// was read from (the body, or a connect request's query, its body left
    /// unread, for the upstream) and the body's [`Format`].
    async fn object(
        &self,
        parts: &http::request::Parts,
        body: Body,
        operation: Operation,
    ) -> Result<(Option<String>, Draft, Object, Format), GatewayError> {
        let info = RequestContext::of(&parts.extensions).info.as_ref();
        if operation == Operation::Connect {
            let options = info
                .map(|info| connect_options::connect_options(info, parts.uri.query()))
                .transpose()?
                .flatten();
            let text = options
                .as_ref()
                .map(serialized)
                .transpose()
                .map_err(GatewayError::internal)?;
            return Ok((text, Draft::default(), Object::Unread(body), Format::Json));
        }
        let bytes = read_body(parts, body).await?;
        // A request without a body has no format to read: it passes as it
        // did, whatever its Content-Type.
        let format = if bytes.is_empty() {
            Format::Json
        } else {
            Format::of(parts, info)?
        };
        // A patch needs the value: parsed at once when a filter that may
        // answer one (a mutating one, enforced) is to be asked, and then
        // the parse is the body's check.
        let parse = info.is_some_and(|info| {
            self.mutating
                .selected(info)
                .any(|controller| controller.filter.spec.mode == Mode::Enforce)
        });
        let limit = length(
            RequestContext::of(&parts.extensions)
                .max_body
                .map_or(DEFAULT_MAX_REQUEST_BODY, |limit| limit.0),
        );
        let (text, mut draft) = match format {
            Format::Json => read_object(&bytes, parse)?,
            Format::Yaml | Format::ApplyYaml => read_yaml_apart(bytes.clone(), limit).await?,
        };
        draft.limit = limit;
        Ok((text, draft, Object::Read(bytes), format))
    }

    /// One filter's call, timed per filter (kube's per-controller metric).
    async fn run(
        &self,
        controller: &Controller,
        review: &mut AdmissionRequest,
        draft: &mut Draft,
        mutating: bool,
        watchers: &Watchers,
    ) -> Step {
        let started = Instant::now();
        let step = self
            .call(&controller.filter, review, draft, mutating, watchers)
            .await;
        controller.timer.observe(
            operation_label(review.operation),
            matches!(step, Step::Stop(_)),
            started.elapsed(),
        );
        step
    }

    /// Asks `filter`, and does what it answers: a change is made to the
    /// review's object and `draft` at once, in place.
    async fn call(
        &self,
        filter: &LoadedFilter<AdmissionKind>,
        review: &mut AdmissionRequest,
        draft: &mut Draft,
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
        let verdict = match verdict(answer, filter.name(), review.operation, mutating) {
            Ok(verdict) => verdict,
            Err(unfit) => {
                if let Unfit::ValidatingMutated = unfit {
                    tracing::error!(
                        filter = filter.name(),
                        "a validating filter tried to change the object"
                    );
                }
                return failure(filter, &Outcome::<()>::FilterError(unfit.to_string()));
            }
        };
        if filter.spec.mode == Mode::Monitor {
            // Never obeyed; a patch that would not apply is still the
            // filter's failure, as when enforced.
            if let Verdict::Patch(patch) = &verdict
                && let Err(message) = draft.check(review.object.as_deref(), patch)
            {
                return failure(filter, &Outcome::<()>::FilterError(message));
            }
            if !matches!(verdict, Verdict::Allow) {
                tracing::info!(
                    filter = filter.name(),
                    "monitor mode: admission decision not enforced"
                );
            }
            return Step::Continue;
        }
        match verdict {
            Verdict::Allow => Step::Continue,
            Verdict::Deny(error) => Step::Stop(error),
            Verdict::Replace(object) => match draft.replace(&mut review.object, object) {
                Ok(()) => Step::Continue,
                Err(message) => failure(filter, &Outcome::<()>::FilterError(message)),
            },
            Verdict::Patch(patch) => match draft.patch(&mut review.object, &patch) {
                Ok(()) => Step::Continue,
                Err(message) => failure(filter, &Outcome::<()>::FilterError(message)),
            },
        }
    }
}

/// What `answer`, from the filter named `filter`, asks of the object, or
/// why it is the filter's failure: a change from a validating filter, or
/// to a connect request's options, a replacement that is not JSON, a
/// patch that is not a JSON Patch.
fn verdict(
    answer: AdmissionResponse,
    filter: &str,
    operation: Operation,
    mutating: bool,
) -> Result<Verdict, Unfit> {
    match answer {
        AdmissionResponse::Allowed => Ok(Verdict::Allow),
        AdmissionResponse::Denied(status) => Ok(Verdict::Deny(denial(filter, status))),
        AdmissionResponse::Mutated(_) | AdmissionResponse::Patched(_) if !mutating => {
            Err(Unfit::ValidatingMutated)
        }
        AdmissionResponse::Mutated(_) | AdmissionResponse::Patched(_)
            if operation == Operation::Connect =>
        {
            Err(Unfit::ConnectChanged)
        }
        AdmissionResponse::Mutated(json) => serde_json::from_str(&json)
            .map(Verdict::Replace)
            .map_err(Unfit::NotJson),
        AdmissionResponse::Patched(patch) => serde_json::from_str(&patch)
            .map(Verdict::Patch)
            .map_err(Unfit::NotAPatch),
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

/// kube's word for an object whose namespace is not its request's
/// (`EnsureObjectNamespaceMatchesRequestNamespace`,
/// `staging/src/k8s.io/apiserver/pkg/registry/rest/create.go`).
const OTHER_NAMESPACE: &str =
    "the namespace of the provided object does not match the namespace sent on the request";

/// Whether an object, the client's or what the mutating filters made of
/// it, belongs where the request's path puts it, the path authorization
/// decided on: a 400 as kube words it when it is elsewhere. kube checks the
/// object of a create, an update and a patch against the request before
/// admission (`staging/src/k8s.io/apiserver/pkg/endpoints/handlers/create.go`,
/// `update.go`, `patch.go`), and its registry checks the namespace again
/// after mutating admission (`BeforeCreate`, `BeforeUpdate` in
/// `staging/src/k8s.io/apiserver/pkg/registry/rest/`); kube's webhook
/// admission itself checks neither.
///
/// The namespace, for a request in one (not a namespace itself, which
/// belongs to none: `ExpectedNamespaceForResource`), may be absent or
/// empty (kube then sets the request's) or the request's. The name, for
/// an update or a patch of a named object, is the URL's (`checkName`,
/// `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/rest.go`). A
/// patch request's object is its patch document, which leaves out what it
/// does not change: its fields are checked only when it sets them (a JSON
/// Patch, an array, has none).
fn where_the_path_puts_it(
    stated: &Stated,
    operation: Operation,
    info: &RequestInfo,
) -> Result<(), GatewayError> {
    if !the_path_places(operation, info) {
        return Ok(());
    }
    let patch = info.verb == "patch";
    if places_the_namespace(info) {
        let elsewhere = stated.namespace.as_ref().is_some_and(|namespace| {
            namespace.as_str().is_none_or(|namespace| {
                !namespace.is_empty() && namespace != info.namespace.as_str()
            })
        });
        if elsewhere {
            return Err(GatewayError::BadRequest {
                message: OTHER_NAMESPACE.to_owned(),
            });
        }
    }
    if places_the_name(info) {
        let name = match &stated.name {
            None if patch => return Ok(()),
            None => String::new(),
            Some(serde_json::Value::String(name)) => name.clone(),
            Some(other) => other.to_string(),
        };
        if name != info.name.as_str() {
            return Err(GatewayError::BadRequest {
                message: format!(
                    "the name of the object ({name}) does not match the name on the URL ({})",
                    info.name
                ),
            });
        }
    }
    Ok(())
}

/// Whether the request's path says where its object belongs
/// ([`where_the_path_puts_it`] has something to check).
fn the_path_places(operation: Operation, info: &RequestInfo) -> bool {
    matches!(operation, Operation::Create | Operation::Update)
        && (places_the_namespace(info) || places_the_name(info))
}

/// A request in a namespace, for anything but a namespace itself, which
/// belongs to none (`ExpectedNamespaceForResource`).
fn places_the_namespace(info: &RequestInfo) -> bool {
    let namespace_itself = info.api_group.is_empty() && info.resource == "namespaces";
    !info.namespace.is_empty() && !namespace_itself
}

/// An update or a patch of a named object (`checkName`).
fn places_the_name(info: &RequestInfo) -> bool {
    matches!(info.verb.as_str(), "update" | "patch") && !info.name.is_empty()
}

/// What the object was read from: the body, or, for a connect request, the
/// query (its body left for the upstream).
enum Object {
    Read(Bytes),
    Unread(Body),
}

async fn read_body(parts: &http::request::Parts, body: Body) -> Result<Bytes, GatewayError> {
    let limit = RequestContext::of(&parts.extensions)
        .max_body
        .map_or(0, |limit| limit.0);
    Ok(body
        .collect()
        .await
        .map_err(|error| GatewayError::body_unreadable(&*error, limit))?
        .to_bytes())
}

/// The body's text, for the filters, and the [`Draft`] of its object
/// (None, and an empty draft, for no body). A body that is not JSON is
/// refused here: parsed when `parse`, else checked as `serde_json::Value`
/// would read it (its nesting limit, numbers in range, strings of valid
/// UTF-8), keeping only where the object says it belongs ([`Stated`]).
fn read_object(bytes: &[u8], parse: bool) -> Result<(Option<String>, Draft), GatewayError> {
    if bytes.is_empty() {
        return Ok((None, Draft::default()));
    }
    let refused = |error: serde_json::Error| GatewayError::BadRequest {
        message: format!("the request body is not valid JSON: {error}"),
    };
    let (value, stated) = if parse {
        (
            Some(serde_json::from_slice(bytes).map_err(refused)?),
            Stated::default(),
        )
    } else {
        (
            None,
            serde_json::from_slice::<Stated>(bytes).map_err(refused)?,
        )
    };
    let text = String::from_utf8_lossy(bytes).into_owned();
    Ok((
        Some(text),
        Draft {
            value,
            stated,
            ..Draft::default()
        },
    ))
}

/// Where an object says it belongs: its `metadata.namespace` and
/// `metadata.name`, a null taken as absent.
#[derive(Debug, Default, PartialEq)]
struct Stated {
    namespace: Option<serde_json::Value>,
    name: Option<serde_json::Value>,
}

impl Stated {
    fn of(object: &serde_json::Value) -> Stated {
        let field = |pointer: &str| object.pointer(pointer).filter(|value| !value.is_null());
        Stated {
            namespace: field("/metadata/namespace").cloned(),
            name: field("/metadata/name").cloned(),
        }
    }
}

/// A body read as [`Checked`] reads it, keeping what its object states
/// ([`Stated::of`] its parsed value, without building the value): a
/// later `metadata` replaces an earlier one, and a later `namespace` or
/// `name` in it an earlier one, as they do in a parsed value.
impl<'de> Deserialize<'de> for Stated {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StatedIn::Object)
    }
}

/// Where [`Stated`]'s reader is: at the top of the body, or in its
/// `metadata`.
#[derive(Clone, Copy)]
enum StatedIn {
    Object,
    Metadata,
}

impl<'de> Visitor<'de> for StatedIn {
    type Value = Stated;

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        Checked.expecting(formatter)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Stated, E> {
        Ok(Stated::default())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Stated, E> {
        Ok(Stated::default())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Stated, E> {
        Ok(Stated::default())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Stated, E> {
        Ok(Stated::default())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Stated, E> {
        Ok(Stated::default())
    }
    fn visit_unit<E: de::Error>(self) -> Result<Stated, E> {
        Ok(Stated::default())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, items: A) -> Result<Stated, A::Error> {
        Checked.visit_seq(items)?;
        Ok(Stated::default())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut members: A) -> Result<Stated, A::Error> {
        let mut stated = Stated::default();
        while let Some(key) = members.next_key::<String>()? {
            match (self, key.as_str()) {
                (StatedIn::Object, "metadata") => {
                    stated = members.next_value_seed(StatedIn::Metadata)?;
                }
                (StatedIn::Metadata, "namespace") => {
                    stated.namespace = stated_field(members.next_value()?);
                }
                (StatedIn::Metadata, "name") => {
                    stated.name = stated_field(members.next_value()?);
                }
                _ => {
                    members.next_value::<Checked>()?;
                }
            }
        }
        Ok(stated)
    }
}

impl<'de> de::DeserializeSeed<'de> for StatedIn {
    type Value = Stated;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Stated, D::Error> {
        deserializer.deserialize_any(self)
    }
}

/// A stated field's value, a null taken as absent.
fn stated_field(value: serde_json::Value) -> Option<serde_json::Value> {
    Some(value).filter(|value| !value.is_null())
}

/// A JSON value read through and kept as nothing. Unlike serde's
/// `IgnoredAny`, whose nested values serde_json skips by their syntax
/// alone, every value goes through `deserialize_any`, so it meets the
/// checks a `serde_json::Value` does.
struct Checked;

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(Checked)
    }
}

impl<'de> Visitor<'de> for Checked {
    type Value = Checked;

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("a JSON value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Checked, A::Error> {
        while items.next_element::<Checked>()?.is_some() {}
        Ok(Checked)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut members: A) -> Result<Checked, A::Error> {
        while members.next_key::<Checked>()?.is_some() {
            members.next_value::<Checked>()?;
        }
        Ok(Checked)
    }
}

/// How a body is read for the filters, chosen by its `Content-Type` as
/// kube's handlers choose their decoder: create, update and delete
/// negotiate one of the serializer's media types, JSON when none is named
/// (`NegotiateInputSerializer`,
/// `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/negotiation/negotiate.go`);
/// a patch must name one of the patch types (`PatchResource`,
/// `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go`). Any
/// other is kube's 415. Protobuf, which kube reads for its built-in types
/// with their schemas, is one the gateway cannot read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    /// `application/json` (or no `Content-Type`), or a patch's JSON types.
    Json,
    /// `application/yaml`: read as YAML, sent on as its JSON
    /// (`application/json`).
    Yaml,
    /// `application/apply-patch+yaml`, server-side apply's: read as YAML,
    /// sent on as its JSON under its own type (JSON is YAML; kubectl sends
    /// its applies so).
    ApplyYaml,
}

/// The media types a create, an update or a delete's body is read in, as
/// kube's 415 lists its serializer's.
const SERIALIZER_TYPES: &str = "application/json, application/yaml";

/// The patch types, as kube's API installer lists them
/// (`staging/src/k8s.io/apiserver/pkg/endpoints/installer.go`).
const PATCH_TYPES: &str = "application/json-patch+json, application/merge-patch+json, \
                           application/strategic-merge-patch+json, application/apply-patch+yaml";

impl Format {
    /// The format of a request's body, or kube's 415 for one it does not read.
    fn of(parts: &http::request::Parts, info: Option<&RequestInfo>) -> Result<Self, GatewayError> {
        let header = match parts.headers.get(CONTENT_TYPE) {
            None => "",
            Some(value) => value.to_str().unwrap_or("\u{fffd}"),
        };
        if info.is_some_and(|info| info.verb == "patch") {
            // kube's patch handler cuts at a `;` past the start, and
            // compares the rest as it is.
            let media_type = match header.find(';') {
                Some(at) if at > 0 => &header[..at],
                _ => header,
            };
            return match media_type {
                "application/json-patch+json"
                | "application/merge-patch+json"
                | "application/strategic-merge-patch+json" => Ok(Format::Json),
                "application/apply-patch+yaml" => Ok(Format::ApplyYaml),
                _ => Err(GatewayError::UnsupportedMediaType {
                    accepted: PATCH_TYPES,
                }),
            };
        }
        // Go's mime.ParseMediaType: the type before its parameters, trimmed
        // and in lower case; none is the first serializer's, JSON.
        let media_type = header
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match media_type.as_str() {
            _ if header.is_empty() => Ok(Format::Json),
            "application/json" => Ok(Format::Json),
            "application/yaml" => Ok(Format::Yaml),
            _ => Err(GatewayError::UnsupportedMediaType {
                accepted: SERIALIZER_TYPES,
            }),
        }
    }

    /// The `Content-Type` the object goes upstream with when it is not the
    /// client's: a YAML body's JSON is `application/json`.
    fn resent_as(self) -> Option<&'static str> {
        match self {
            Format::Yaml => Some("application/json"),
            Format::Json | Format::ApplyYaml => None,
        }
    }
}

/// The deepest a YAML body may nest: as deep as a JSON body may
/// (serde_json's limit), so its JSON is read back as any JSON body is.
const YAML_DEPTH: usize = 128;

/// The stack of the thread a YAML body is read on. serde-saphyr reads a
/// nested value by recursion, some tens of KiB a level in a debug build:
/// [`YAML_DEPTH`] levels would overflow a runtime worker's 2 MiB, and a
/// stack overflow aborts the process. Only what is used is committed.
const YAML_STACK: usize = 16 * 1024 * 1024;

/// [`read_yaml`] on a thread of its own, with a stack for the deepest body
/// ([`YAML_STACK`]); at most one a request in flight, and a YAML body only.
async fn read_yaml_apart(
    bytes: Bytes,
    limit: usize,
) -> Result<(Option<String>, Draft), GatewayError> {
    let (send, receive) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("wasmgate-yaml".to_owned())
        .stack_size(YAML_STACK)
        .spawn(move || {
            // The request may have gone: then there is no one to tell.
            let _ = send.send(read_yaml(&bytes, limit));
        })
        .map_err(|error| {
            GatewayError::internal(format!("cannot start the YAML reader: {error}"))
        })?;
    receive
        .await
        .map_err(|_| GatewayError::internal("the YAML reader ended without an answer"))?
}

/// A YAML body's object as JSON text, for the filters, and its [`Draft`]
/// with the value parsed. Read as kube's YAML serializer reads it
/// (`sigs.k8s.io/yaml` over go-yaml v2, YAML 1.1: `yes`, `no`, `on` and
/// `off` are booleans, `0755` octal, `1_000` a thousand; merge keys
/// merged; of a repeated key the last), a document's keys that are not
/// strings written as strings. Bounded against a hostile body: one
/// document only (kube decodes one object), nested at most [`YAML_DEPTH`]
/// deep, and what its aliases expand to held to `limit`, the body limit,
/// as the object is built ([`Bounded`]), so a few bytes of nested aliases
/// cannot fill memory.
fn read_yaml(bytes: &[u8], limit: usize) -> Result<(Option<String>, Draft), GatewayError> {
    let refused = |error: &dyn std::fmt::Display| GatewayError::BadRequest {
        message: format!("the request body is not valid YAML: {error}"),
    };
    let mut budget = serde_saphyr::Budget::default();
    budget.max_depth = YAML_DEPTH;
    budget.max_documents = 1;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    options.with_snippet = false;
    options.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::LastWins;
    options.legacy_octal_numbers = true;
    let room = std::cell::Cell::new(limit);
    let value = serde_saphyr::with_deserializer_from_slice_with_options(bytes, options, |de| {
        de::DeserializeSeed::deserialize(Bounded { room: &room, limit }, de)
    })
    .map_err(|error| refused(&error))?;
    let text = serialized(&value).map_err(|error| refused(&error))?;
    Ok((
        Some(text),
        Draft {
            value: Some(value),
            ..Draft::default()
        },
    ))
}

/// A YAML value built as JSON's, each node charged against the room left
/// (`room`, of `limit` bytes) at the least its JSON text takes: two bytes a
/// node (itself and a separator), and a string's or a key's length. Past
/// the limit the read stops, however few bytes the aliases that expand to
/// it were.
#[derive(Clone, Copy)]
struct Bounded<'a> {
    room: &'a std::cell::Cell<usize>,
    limit: usize,
}

impl Bounded<'_> {
    fn spend<E: de::Error>(self, bytes: usize) -> Result<(), E> {
        let left = self.room.get().checked_sub(bytes.saturating_add(2));
        match left {
            Some(left) => {
                self.room.set(left);
                Ok(())
            }
            None => Err(E::custom(format_args!(
                "its object is over the request body limit of {} bytes",
                self.limit
            ))),
        }
    }
}

impl<'de> de::DeserializeSeed<'de> for Bounded<'_> {
    type Value = serde_json::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Bounded<'_> {
    type Value = serde_json::Value;

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("a value JSON can hold")
    }
    fn visit_bool<E: de::Error>(self, value: bool) -> Result<Self::Value, E> {
        self.spend(0)?;
        Ok(value.into())
    }
    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Self::Value, E> {
        self.spend(0)?;
        Ok(value.into())
    }
    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Self::Value, E> {
        self.spend(0)?;
        Ok(value.into())
    }
    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Self::Value, E> {
        self.spend(0)?;
        serde_json::Number::from_f64(value)
            .map(serde_json::Value::Number)
            .ok_or_else(|| E::custom(format_args!("{value} is not a number JSON can hold")))
    }
    fn visit_str<E: de::Error>(self, value: &str) -> Result<Self::Value, E> {
        self.spend(value.len())?;
        Ok(value.into())
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        self.spend(0)?;
        Ok(serde_json::Value::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        self.visit_unit()
    }
    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Self::Value, A::Error> {
        self.spend(0)?;
        let mut values = Vec::new();
        while let Some(value) = items.next_element_seed(self)? {
            values.push(value);
        }
        Ok(serde_json::Value::Array(values))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut members: A) -> Result<Self::Value, A::Error> {
        self.spend(0)?;
        let mut object = serde_json::Map::new();
        while let Some(key) = members.next_key_seed(Key(self))? {
            let value = members.next_value_seed(self)?;
            object.insert(key, value);
        }
        Ok(serde_json::Value::Object(object))
    }
}

/// A YAML key as JSON's: a string, or a number's or a boolean's text, as
/// `sigs.k8s.io/yaml` writes keys that are not strings; a null, a sequence
/// or a mapping is no key JSON has.
struct Key<'a>(Bounded<'a>);

impl<'de> de::DeserializeSeed<'de> for Key<'_> {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Key<'_> {
    type Value = String;

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("a string, a number or a boolean as a mapping's key")
    }
    fn visit_bool<E: de::Error>(self, value: bool) -> Result<String, E> {
        self.visit_string(value.to_string())
    }
    fn visit_i64<E: de::Error>(self, value: i64) -> Result<String, E> {
        self.visit_string(value.to_string())
    }
    fn visit_u64<E: de::Error>(self, value: u64) -> Result<String, E> {
        self.visit_string(value.to_string())
    }
    fn visit_f64<E: de::Error>(self, value: f64) -> Result<String, E> {
        self.visit_string(value.to_string())
    }
    fn visit_str<E: de::Error>(self, value: &str) -> Result<String, E> {
        self.visit_string(value.to_owned())
    }
    fn visit_string<E: de::Error>(self, value: String) -> Result<String, E> {
        self.0.spend(value.len())?;
        Ok(value)
    }
}

/// The object as the mutating filters leave it. Its text is the review's
/// (what each filter is given, and what goes upstream once changed); its
/// value, parsed once (up front, or when a patch first needs it), is
/// patched in place and kept for the next patch.
struct Draft {
    value: Option<serde_json::Value>,
    /// Where the client's object says it belongs, read with the body's
    /// check when its value was not parsed.
    stated: Stated,
    /// A filter changed it: it answered `mutated`, or a patch with an
    /// operation other than `test`.
    changed: bool,
    /// The request body limit (`limits.max_request_body`), in bytes: the
    /// largest object a mutation may leave (it goes upstream in place of
    /// a body that was held to it), and the most a patch's `copy`
    /// operations may add to the object together.
    limit: usize,
}

/// Why a request without an object (a delete without a body) cannot be
/// patched or replaced: there is nothing to change, and a body made up
/// for it is not the filter's to send. kube's mutating dispatcher refuses
/// a webhook's non-empty patch when there is no object
/// (`staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/mutating/dispatcher.go`).
const NO_OBJECT: &str = "the request has no object to change: a mutation is not supported for it";

/// A byte limit as a length in memory (a request that reached admission
/// without the body-limit step, none in the chain, is held to kube's
/// default).
fn length(limit: u64) -> usize {
    usize::try_from(limit).unwrap_or(usize::MAX)
}

impl Default for Draft {
    fn default() -> Self {
        Draft {
            value: None,
            stated: Stated::default(),
            changed: false,
            limit: length(DEFAULT_MAX_REQUEST_BODY),
        }
    }
}

impl Draft {
    /// `object` replaces the object whose text is `text`, unless it is
    /// over the body limit.
    fn replace(
        &mut self,
        text: &mut Option<String>,
        object: serde_json::Value,
    ) -> Result<(), String> {
        if text.is_none() {
            return Err(NO_OBJECT.to_owned());
        }
        *text = Some(self.within_limit(serialized(&object)?)?);
        self.value = Some(object);
        self.changed = true;
        Ok(())
    }

    /// Applies `patch` to the object whose text is `text`: all of it, or
    /// (an error) none of it.
    fn patch(
        &mut self,
        text: &mut Option<String>,
        patch: &json_patch::Patch,
    ) -> Result<(), String> {
        if text.is_none() && !patch.0.is_empty() {
            return Err(NO_OBJECT.to_owned());
        }
        let value = match &mut self.value {
            Some(value) => value,
            None => self.value.insert(parsed(text.as_deref())?),
        };
        if let Err(message) = applied(value, patch, self.limit) {
            // Half applied: the object as it was is its text's.
            self.value = Some(parsed(text.as_deref())?);
            return Err(message);
        }
        let changes = patch
            .0
            .iter()
            .any(|operation| !matches!(operation, json_patch::PatchOperation::Test(_)));
        if changes {
            match serialized(value).and_then(|patched| self.within_limit(patched)) {
                Ok(patched) => *text = Some(patched),
                Err(message) => {
                    self.value = Some(parsed(text.as_deref())?);
                    return Err(message);
                }
            }
            self.changed = true;
        }
        Ok(())
    }

    /// A mutated object's text, unless it is over the body limit: kube
    /// holds a body to its limit as it reads it (`limitedReadBody`,
    /// `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/rest.go`),
    /// and the upstream is owed the same of what the gateway sends it.
    fn within_limit(&self, text: String) -> Result<String, String> {
        if text.len() > self.limit {
            return Err(format!(
                "the mutated object is {} bytes, over the request body limit of {} bytes",
                text.len(),
                self.limit
            ));
        }
        Ok(text)
    }

    /// Whether `patch` would apply, the object left as it is.
    fn check(&self, text: Option<&str>, patch: &json_patch::Patch) -> Result<(), String> {
        if text.is_none() && !patch.0.is_empty() {
            return Err(NO_OBJECT.to_owned());
        }
        let mut copy = match &self.value {
            Some(value) => value.clone(),
            None => parsed(text)?,
        };
        applied(&mut copy, patch, self.limit)
    }
}

/// `patch` applied to `value`, operation by operation; on an error,
/// `value` is left half patched, and the caller puts it back (from the
/// text it has, or by dropping a copy). Not `json_patch::patch`, which
/// undoes what it applied when an operation fails: its undo of some
/// patches fails (a `move` into the moved value's parent is undone as a
/// move into the value's own child, which it refuses) and then it panics.
///
/// What its `copy` operations copy is counted, as JSON text, and held to
/// `limit` together: a patch of a few bytes whose copies each double the
/// object would otherwise take more memory than there is. kube holds them
/// to `JSONPatchMaxCopyBytes` (json-patch's `AccumulatedCopySizeLimit`),
/// 3 MiB like its request body limit
/// (`staging/src/k8s.io/apiserver/pkg/server/config.go`).
fn applied(
    value: &mut serde_json::Value,
    patch: &json_patch::Patch,
    limit: usize,
) -> Result<(), String> {
    let mut copied: usize = 0;
    for (index, operation) in patch.0.iter().enumerate() {
        if let json_patch::PatchOperation::Copy(copy) = operation
            && let Some(source) = value.pointer(copy.from.as_str())
        {
            let room = limit.saturating_sub(copied);
            copied += json_length_within(source, room).ok_or_else(|| {
                format!(
                    "the JSON Patch does not apply: its copy operations add more than {limit} bytes, the request body limit"
                )
            })?;
        }
        json_patch::patch_unsafe(value, std::slice::from_ref(operation)).map_err(|error| {
            // Its own index is 0, in a patch of one operation.
            format!(
                "the JSON Patch does not apply: operation '/{index}' failed at path '{}': {}",
                error.path, error.kind
            )
        })?;
    }
    Ok(())
}

/// The length of `value`'s JSON text, or None when it is over `cap`:
/// counted as it is written, and written no further than past `cap`.
fn json_length_within(value: &serde_json::Value, cap: usize) -> Option<usize> {
    struct Counter {
        length: usize,
        cap: usize,
    }
    impl std::io::Write for Counter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.length = self.length.saturating_add(bytes.len());
            if self.length > self.cap {
                return Err(std::io::Error::other("over the cap"));
            }
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter { length: 0, cap };
    serde_json::to_writer(&mut counter, value).ok()?;
    Some(counter.length)
}

/// The object's text, written straight into its buffer (`Value`'s
/// `Display` goes through a formatter a piece at a time).
fn serialized(object: &serde_json::Value) -> Result<String, String> {
    serde_json::to_string(object).map_err(|error| format!("cannot serialize the object: {error}"))
}

/// The object whose text is `text` (checked already by [`read_object`]);
/// null when there is none.
fn parsed(text: Option<&str>) -> Result<serde_json::Value, String> {
    text.map_or(Ok(serde_json::Value::Null), serde_json::from_str)
        .map_err(|error| format!("the object is not JSON: {error}"))
}

/// The review of one request, without its request and user info: each
/// filter is given those it reads ([`given_to`]).
fn review(
    parts: &http::request::Parts,
    operation: Operation,
    object: Option<String>,
    format: Format,
) -> AdmissionRequest {
    let extensions = &parts.extensions;
    let dry_run = url::form_urlencoded::parse(parts.uri.query().unwrap_or("").as_bytes())
        .any(|(key, value)| key == "dryRun" && value == "All");
    AdmissionRequest {
        uid: RequestContext::of(extensions)
            .audit_id
            .as_ref()
            .map_or_else(String::new, |id| id.as_str().to_owned()),
        operation,
        request: None,
        user: None,
        object,
        // The type of the object as it goes upstream: a YAML body's is
        // given, and sent on, as JSON.
        content_type: format
            .resent_as()
            .or_else(|| parts.headers.get(CONTENT_TYPE)?.to_str().ok())
            .unwrap_or("")
            .to_owned(),
        dry_run,
    }
}

/// The denial of the filter named `filter` as a Status, made as kube's
/// webhook admission makes a webhook's rejection (`ToStatusErr`,
/// `staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/errors/statuserror.go`),
/// the filter's manifest name as the webhook's: the message says who
/// denied the request (`admission webhook "<name>" denied the request: `
/// before the filter's message, or its reason when it wrote no message,
/// or ` without explanation` when it wrote neither); a code below 400 is
/// no rejection's and becomes 400, as does one HTTP has no room for; a
/// 5xx stays.
fn denial(filter: &str, status: crate::wasm::bindings::types::Status) -> GatewayError {
    let code = StatusCode::from_u16(status.code)
        .ok()
        .filter(|code| code.as_u16() >= 400)
        .unwrap_or(StatusCode::BAD_REQUEST);
    // A filter's name is a DNS label: quoted as it is, as Go's %q quotes it.
    let denied_by = format!("admission webhook \"{filter}\" denied the request");
    let message = match (status.message.as_str(), status.reason.as_str()) {
        ("", "") => format!("{denied_by} without explanation"),
        ("", reason) => format!("{denied_by}: {reason}"),
        (message, _) => format!("{denied_by}: {message}"),
    };
    let reason = if status.reason.is_empty() {
        "Forbidden".to_owned()
    } else {
        status.reason
    };
    GatewayError::Denied {
        code,
        reason,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn patch(operations: serde_json::Value) -> json_patch::Patch {
        serde_json::from_value(operations).expect("a JSON Patch")
    }

    /// kube's `ToStatusErr`: a rejection's code below 400 becomes 400,
    /// any other is kept, a 5xx too; an empty reason is `Forbidden`.
    #[test]
    fn a_denials_code_is_kept_as_kubes_admission_keeps_it() {
        let code = |code: u16| {
            let status = crate::wasm::bindings::types::Status {
                code,
                reason: String::new(),
                message: "no".to_owned(),
            };
            match denial("policy", status) {
                GatewayError::Denied { code, reason, .. } => {
                    assert_eq!(reason, "Forbidden");
                    code.as_u16()
                }
                other => panic!("not a denial: {other:?}"),
            }
        };
        assert_eq!(code(0), 400);
        assert_eq!(code(200), 400);
        assert_eq!(code(399), 400);
        assert_eq!(code(403), 403);
        assert_eq!(code(422), 422);
        assert_eq!(code(503), 503);
        assert_eq!(code(1000), 400);
    }

    /// kube's `ToStatusErr` names the webhook before what it wrote: its
    /// message, else its reason, else that it gave no explanation.
    #[test]
    fn a_denial_says_which_filter_denied_the_request() {
        let message = |reason: &str, message: &str| {
            let status = crate::wasm::bindings::types::Status {
                code: 403,
                reason: reason.to_owned(),
                message: message.to_owned(),
            };
            denial("replica-limit", status).to_string()
        };
        let denied_by = r#"admission webhook "replica-limit" denied the request"#;
        assert_eq!(
            message("Forbidden", "replicas above 10 are not allowed"),
            format!("{denied_by}: replicas above 10 are not allowed")
        );
        assert_eq!(message("TooMany", ""), format!("{denied_by}: TooMany"));
        assert_eq!(message("", ""), format!("{denied_by} without explanation"));
    }

    /// The check refuses exactly what a parse into `serde_json::Value`
    /// refuses, and its error says the same; the parse up front is that
    /// parse. What the check keeps of where the object says it belongs is
    /// what the parsed value says.
    #[test]
    fn the_body_is_checked_as_a_value_would_be_read() {
        let deep = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let bodies: Vec<Vec<u8>> = vec![
            br#"{"a": [1, -2.5e3, true, null, "s\u00e9\n", {"b": {}}], "a": 0}"#.to_vec(),
            br#"  {"n": 18446744073709551615, "m": -9223372036854775808, "f": 1e308}  "#.to_vec(),
            deep(128).into_bytes(),
            deep(129).into_bytes(),
            br#"{"n": 1e400}"#.to_vec(),
            b"{\"s\": \"\xff\"}".to_vec(),
            br#"{"s": "\ud800"}"#.to_vec(),
            br#"{"a": 1} trailing"#.to_vec(),
            br#"{"a": 1,}"#.to_vec(),
            br#"{1: 2}"#.to_vec(),
            b"\"unterminated".to_vec(),
            br#"{"metadata": {"namespace": "a", "name": "n", "namespace": "b"}}"#.to_vec(),
            br#"{"metadata": {"namespace": "a"}, "metadata": {"name": 7}}"#.to_vec(),
            br#"{"metadata": {"namespace": null, "name": {"x": [1]}}, "spec": {}}"#.to_vec(),
            br#"{"metadata": "n", "spec": {"metadata": {"namespace": "x"}}}"#.to_vec(),
            br#"[{"metadata": {"namespace": "x"}}]"#.to_vec(),
            format!(r#"{{"metadata": {{"labels": {}}}}}"#, deep(125)).into_bytes(),
            format!(r#"{{"metadata": {{"labels": {}}}}}"#, deep(127)).into_bytes(),
        ];
        for body in bodies {
            let expected = serde_json::from_slice::<serde_json::Value>(&body);
            let (checked, parsed) = (read_object(&body, false), read_object(&body, true));
            match (checked, parsed, expected) {
                (Ok((Some(text), draft)), Ok((_, parsed)), Ok(value)) => {
                    assert_eq!(text.as_bytes(), &body[..]);
                    assert!(draft.value.is_none());
                    assert_eq!(draft.stated, Stated::of(&value));
                    assert_eq!(parsed.value, Some(value));
                }
                (
                    Err(GatewayError::BadRequest { message }),
                    Err(GatewayError::BadRequest { message: same }),
                    Err(error),
                ) => {
                    assert_eq!(
                        message,
                        format!("the request body is not valid JSON: {error}")
                    );
                    assert_eq!(same, message);
                }
                (ours, parsed, theirs) => panic!(
                    "{}: the check gave {:?}, the parse {:?}, a Value {theirs:?}",
                    String::from_utf8_lossy(&body),
                    ours.map(|(text, _)| text)
                        .map_err(|error| error.to_string()),
                    parsed
                        .map(|(text, _)| text)
                        .map_err(|error| error.to_string()),
                ),
            }
        }
        assert!(matches!(
            read_object(b"", true),
            Ok((
                None,
                Draft {
                    value: None,
                    changed: false,
                    ..
                }
            ))
        ));
    }

    /// YAML is read as kube's go-yaml v2 reads it (YAML 1.1 booleans and
    /// octals, merge keys, the last of a repeated key, keys that are not
    /// strings written as strings), into the JSON the filters are given.
    #[test]
    fn a_yaml_body_is_read_as_kube_reads_it() {
        let body = b"---\nkind: Widget\nbase: &base {replicas: 2, paused: no}\nspec:\n  <<: *base\n  enabled: yes\n  mode: 0755\n  count: 1_000\n  quoted: \"yes\"\n  1: one\n  true: t\n  name: a\n  name: b\n";
        let (text, draft) = read_yaml(body, 3 * 1024 * 1024).expect("read");
        let expected = json!({
            "kind": "Widget",
            "base": {"replicas": 2, "paused": false},
            "spec": {
                "replicas": 2, "paused": false, "enabled": true, "mode": 493, "count": 1000,
                "quoted": "yes", "1": "one", "true": "t", "name": "b",
            },
        });
        assert_eq!(draft.value.as_ref(), Some(&expected));
        assert!(!draft.changed);
        let text = text.expect("a text");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&text).expect("JSON"),
            expected
        );
    }

    /// kube decodes one object: a body of two documents is refused, not
    /// judged by its first.
    #[test]
    fn a_yaml_body_of_several_documents_is_refused() {
        for body in [
            &b"kind: A\n---\nkind: B\n"[..],
            b"---\nkind: A\n...\n---\nkind: B\n",
        ] {
            match read_yaml(body, 1024) {
                Err(GatewayError::BadRequest { message }) => assert!(
                    message.starts_with("the request body is not valid YAML: "),
                    "{message}"
                ),
                other => panic!("{:?}", other.map(|(text, _)| text)),
            }
        }
    }

    /// A few hundred bytes of aliases, each of a list of ten of the last,
    /// expand to a billion strings: the read stops at the body limit, at
    /// once, with a 400.
    #[test]
    fn nested_yaml_aliases_are_held_to_the_body_limit() {
        let mut body = String::from(
            "a0: &a0 [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
        );
        for level in 1..10 {
            let previous = format!("*a{}", level - 1);
            let items = [previous.as_str(); 10].join(",");
            body.push_str(&format!("a{level}: &a{level} [{items}]\n"));
        }
        let started = Instant::now();
        match read_yaml(body.as_bytes(), 3 * 1024 * 1024) {
            Err(GatewayError::BadRequest { message }) => {
                assert!(
                    message.starts_with("the request body is not valid YAML: "),
                    "{message}"
                );
            }
            other => panic!("{:?}", other.map(|(text, _)| text.map(|text| text.len()))),
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        // Aliases that expand within the limit are read.
        let small = "a: &a [p, q]\nb: [*a, *a]\n";
        let (_, draft) = read_yaml(small.as_bytes(), 1024).expect("within the limit");
        assert_eq!(
            draft.value,
            Some(json!({"a": ["p", "q"], "b": [["p", "q"], ["p", "q"]]}))
        );
        // Each string counts: a long one aliased past the limit is refused.
        let long = format!("a: &a {}\nb: [*a, *a, *a, *a]\n", "x".repeat(300));
        assert!(read_yaml(long.as_bytes(), 1024).is_err());
    }

    /// As deep as a JSON body may nest, and no deeper, read on its own thread, whose stack holds the deepest (a runtime
    /// worker's does not: read there, a body nested 48 deep overflowed a
    /// 1 MiB stack in a debug build, and the process aborted).
    #[tokio::test]
    async fn a_yaml_body_nests_as_deep_as_json_on_a_stack_that_holds_it() {
        let deep = |depth: usize| {
            let flow = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            let block: String = (0..depth)
                .map(|level| format!("{}a:\n", "  ".repeat(level)))
                .collect();
            [
                Bytes::from(flow),
                Bytes::from(block + &"  ".repeat(depth) + "x\n"),
            ]
        };
        for body in deep(YAML_DEPTH) {
            assert!(read_yaml_apart(body, 1 << 20).await.is_ok());
        }
        for body in deep(YAML_DEPTH + 1) {
            assert!(read_yaml_apart(body, 1 << 20).await.is_err());
        }
        assert!(read_yaml(b"a: .inf\n", 1024).is_err());
        assert!(read_yaml(b"a: [\n", 1024).is_err());
        assert!(read_yaml(b"a: \xff\n", 1024).is_err());
    }

    /// kube's decoder choice: a patch by its patch types, as they are
    /// spelled; anything else by the serializer's types, JSON when none is
    /// named; any other is a 415 listing them.
    #[test]
    fn a_bodys_format_is_chosen_by_its_content_type_as_kube_chooses_it() {
        let format = |method: &str, path: &str, content_type: Option<&str>| {
            let mut request = http::Request::builder().method(method).uri(path);
            if let Some(content_type) = content_type {
                request = request.header(CONTENT_TYPE, content_type);
            }
            let (parts, ()) = request.body(()).expect("a request").into_parts();
            let method = http::Method::from_bytes(method.as_bytes()).expect("a method");
            let info = RequestInfo::resolve(&method, path, None);
            Format::of(&parts, Some(&info)).map_err(|error| error.to_string())
        };
        let create = "/api/v1/namespaces/default/configmaps";
        let named = "/api/v1/namespaces/default/configmaps/c";
        let serializer = format!(
            "the body of the request was in an unknown format - accepted media types include: {SERIALIZER_TYPES}"
        );
        let patches = format!(
            "the body of the request was in an unknown format - accepted media types include: {PATCH_TYPES}"
        );
        for (method, path, content_type, expected) in [
            ("POST", create, None, Format::Json),
            ("POST", create, Some("application/json"), Format::Json),
            (
                "PUT",
                named,
                Some(" Application/JSON ; charset=utf-8"),
                Format::Json,
            ),
            ("POST", create, Some("application/yaml"), Format::Yaml),
            ("DELETE", named, Some("application/yaml"), Format::Yaml),
        ] {
            assert_eq!(
                format(method, path, content_type),
                Ok(expected),
                "{method} {content_type:?}"
            );
        }
        for unread in [
            "application/vnd.kubernetes.protobuf",
            "application/cbor",
            "text/plain",
            "application/merge-patch+json",
        ] {
            assert_eq!(
                format("POST", create, Some(unread)),
                Err(serializer.clone()),
                "{unread}"
            );
        }
        for (patch, expected) in [
            ("application/json-patch+json", Format::Json),
            ("application/merge-patch+json", Format::Json),
            (
                "application/strategic-merge-patch+json; charset=utf-8",
                Format::Json,
            ),
            ("application/apply-patch+yaml", Format::ApplyYaml),
        ] {
            assert_eq!(format("PATCH", named, Some(patch)), Ok(expected), "{patch}");
        }
        for unread in [
            None,
            Some("application/json"),
            Some("application/yaml"),
            Some("Application/merge-patch+json"),
            Some("application/vnd.kubernetes.protobuf"),
        ] {
            assert_eq!(
                format("PATCH", named, unread),
                Err(patches.clone()),
                "{unread:?}"
            );
        }
    }

    #[test]
    fn a_patch_changes_the_object_in_place_and_its_text_with_it() {
        let mut text = Some(r#"{ "metadata" : {"name": "w"} }"#.to_owned());
        let mut draft = Draft::default();
        let add = patch(json!([{"op": "add", "path": "/metadata/labels", "value": {"team": "a"}}]));
        assert_eq!(draft.patch(&mut text, &add), Ok(()));
        assert!(draft.changed);
        let expected = json!({"metadata": {"name": "w", "labels": {"team": "a"}}});
        assert_eq!(draft.value.as_ref(), Some(&expected));
        assert_eq!(text.as_deref(), Some(expected.to_string().as_str()));
        // The next patch works on the value kept, not a new parse.
        let replace =
            patch(json!([{"op": "replace", "path": "/metadata/labels/team", "value": "b"}]));
        assert_eq!(draft.patch(&mut text, &replace), Ok(()));
        assert_eq!(
            text.as_deref(),
            Some(r#"{"metadata":{"name":"w","labels":{"team":"b"}}}"#)
        );
    }

    #[test]
    fn a_patch_that_fails_leaves_the_object_as_it_was() {
        let sent = r#"{"metadata": {"name": "w"}}"#;
        let mut text = Some(sent.to_owned());
        let mut draft = Draft::default();
        // Its first operation applies, its second does not: neither stays.
        let half = patch(json!([
            {"op": "add", "path": "/metadata/labels", "value": {}},
            {"op": "remove", "path": "/spec"},
        ]));
        let error = draft
            .patch(&mut text, &half)
            .expect_err("no /spec to remove");
        assert!(
            error.starts_with("the JSON Patch does not apply: "),
            "{error}"
        );
        assert!(!draft.changed);
        assert_eq!(text.as_deref(), Some(sent));
        assert_eq!(draft.value, Some(json!({"metadata": {"name": "w"}})));
    }

    #[test]
    fn only_tests_in_a_patch_change_nothing() {
        let sent = r#"{"kind": "Widget"}"#;
        let mut text = Some(sent.to_owned());
        let mut draft = Draft::default();
        let test = patch(json!([{"op": "test", "path": "/kind", "value": "Widget"}]));
        assert_eq!(draft.patch(&mut text, &test), Ok(()));
        assert!(!draft.changed);
        assert_eq!(text.as_deref(), Some(sent));
        let failing = patch(json!([{"op": "test", "path": "/kind", "value": "Gadget"}]));
        assert!(draft.patch(&mut text, &failing).is_err());
    }

    /// A request without an object (a delete without a body) has nothing
    /// to change: a filter's patch or replacement of it is its failure, as
    /// kube's mutating dispatcher refuses a webhook's non-empty patch when
    /// there is no object
    /// (`staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/mutating/dispatcher.go`),
    /// rather than a body made up for the request.
    #[test]
    fn a_request_without_an_object_cannot_be_mutated() {
        let mut text = None;
        let mut draft = Draft::default();
        let whole = patch(json!([{"op": "add", "path": "", "value": {"kind": "Widget"}}]));
        let error = draft.patch(&mut text, &whole).expect_err("no object");
        assert!(error.contains("no object"), "{error}");
        assert!(draft.check(None, &whole).is_err());
        let error = draft
            .replace(&mut text, json!({"kind": "Widget"}))
            .expect_err("no object");
        assert!(error.contains("no object"), "{error}");
        assert!(!draft.changed);
        assert_eq!(text, None);
        // An empty patch asks nothing of it.
        assert_eq!(draft.patch(&mut text, &patch(json!([]))), Ok(()));
        assert_eq!(text, None);
    }

    /// Monitor mode's check leaves the object, its value and its text alone.
    #[test]
    fn a_check_changes_nothing() {
        let sent = r#"{"metadata": {}}"#;
        let draft = Draft::default();
        let add = patch(json!([{"op": "add", "path": "/metadata/labels", "value": {}}]));
        assert_eq!(draft.check(Some(sent), &add), Ok(()));
        assert!(draft.value.is_none() && !draft.changed);
        let remove = patch(json!([{"op": "remove", "path": "/spec"}]));
        assert!(draft.check(Some(sent), &remove).is_err());
    }

    /// A patch json-patch cannot undo (its `move` into the parent of what
    /// it moved, then a failing `test`: json-patch's undo is a move into
    /// the moved value's own child, which it refuses, and it panics) is
    /// refused like any patch that does not apply, the object as it was.
    #[test]
    fn a_patch_whose_undo_json_patch_cannot_do_is_refused_without_a_panic() {
        let sent = r#"{"metadata": {"name": "w", "labels": {"a": "b"}}}"#;
        let mut text = Some(sent.to_owned());
        let mut draft = Draft::default();
        let hostile = patch(json!([
            {"op": "move", "from": "/metadata/labels", "path": "/metadata"},
            {"op": "test", "path": "/kind", "value": "Widget"},
        ]));
        let error = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            draft.patch(&mut text, &hostile)
        }))
        .expect("no panic")
        .expect_err("the test fails");
        assert!(
            error.starts_with("the JSON Patch does not apply: operation '/1'"),
            "{error}"
        );
        assert!(!draft.changed);
        assert_eq!(text.as_deref(), Some(sent));
        assert_eq!(
            draft.value,
            Some(json!({"metadata": {"name": "w", "labels": {"a": "b"}}}))
        );
        let check = std::panic::catch_unwind(|| Draft::default().check(Some(sent), &hostile));
        assert!(matches!(check, Ok(Err(_))), "{check:?}");
    }

    /// A few bytes of `copy` operations, each doubling the object, would
    /// make it gigabytes: what they copy together is held to the body
    /// limit, as kube holds it to `JSONPatchMaxCopyBytes`, 3 MiB like its
    /// body limit (`staging/src/k8s.io/apiserver/pkg/server/config.go`).
    #[test]
    fn copies_are_held_to_the_body_limit() {
        let sent = json!({"a": "x".repeat(64 * 1024)}).to_string();
        let mut text = Some(sent.clone());
        let mut draft = Draft::default();
        // 64 KiB doubled 7 times is 8 MiB, over kube's 3 MiB default (a
        // few dozen times, without the limit, would be more than any
        // memory).
        let mut operations = vec![json!({"op": "add", "path": "/b", "value": []})];
        operations.extend((0..7).map(|_| json!({"op": "copy", "from": "", "path": "/b/-"})));
        let doubling = patch(serde_json::Value::Array(operations));
        let error = draft
            .patch(&mut text, &doubling)
            .expect_err("over the limit");
        assert!(
            error.contains("copy operations") && error.contains("3145728 bytes"),
            "{error}"
        );
        assert!(!draft.changed);
        assert_eq!(text.as_deref(), Some(sent.as_str()));
        assert!(Draft::default().check(Some(&sent), &doubling).is_err());
        // Copies within the limit apply.
        let twice = patch(json!([
            {"op": "copy", "from": "/a", "path": "/b"},
            {"op": "copy", "from": "/a", "path": "/c"},
        ]));
        assert_eq!(draft.patch(&mut text, &twice), Ok(()));
        assert!(draft.changed);
    }

    /// A mutated object goes upstream: one over the body limit, which the
    /// client's own body could not be, is the filter's failure, and the
    /// object stays as it was.
    #[test]
    fn a_mutation_over_the_body_limit_is_refused() {
        let sent = r#"{"metadata": {"name": "w"}}"#;
        let big = "x".repeat(3 * 1024 * 1024);
        let mut text = Some(sent.to_owned());
        let mut draft = Draft::default();
        let add = patch(json!([{"op": "add", "path": "/spec", "value": big}]));
        let error = draft.patch(&mut text, &add).expect_err("over the limit");
        assert!(error.contains("over the request body limit"), "{error}");
        assert!(!draft.changed);
        assert_eq!(text.as_deref(), Some(sent));
        assert_eq!(draft.value, Some(json!({"metadata": {"name": "w"}})));
        let error = draft
            .replace(&mut text, json!({"spec": big}))
            .expect_err("over the limit");
        assert!(error.contains("over the request body limit"), "{error}");
        assert!(!draft.changed);
        assert_eq!(text.as_deref(), Some(sent));
        // Up to the limit is fine.
        let fits = "x".repeat(3 * 1024 * 1024 - r#"{"spec":""}"#.len());
        assert_eq!(draft.replace(&mut text, json!({"spec": fits})), Ok(()));
        assert_eq!(text.as_ref().map(String::len), Some(3 * 1024 * 1024));
    }

    /// The object a mutation left, held to the request's path: an absent,
    /// null or empty namespace is the request's, another (or one that is
    /// no string) is refused; a namespace itself is in none; an update's
    /// name is the URL's, a patch document's only when it sets one; a
    /// create's and a delete's are not checked.
    #[test]
    fn a_mutated_object_is_held_to_the_requests_path() {
        let request = |method: &str, path: &str| {
            let method = http::Method::from_bytes(method.as_bytes()).expect("a method");
            RequestInfo::resolve(&method, path, None)
        };
        let checked = |operation, info: &RequestInfo, object: serde_json::Value| {
            where_the_path_puts_it(&Stated::of(&object), operation, info)
                .map_err(|error| error.to_string())
        };
        let create = request("POST", "/api/v1/namespaces/default/configmaps");
        for fine in [
            json!({"metadata": {"name": "any"}}),
            json!({"metadata": {"namespace": null}}),
            json!({"metadata": {"namespace": ""}}),
            json!({"metadata": {"namespace": "default"}}),
            json!([{"op": "add", "path": "/metadata/namespace", "value": "x"}]),
        ] {
            assert_eq!(checked(Operation::Create, &create, fine), Ok(()));
        }
        for moved in [json!("elsewhere"), json!(7), json!({"name": "default"})] {
            let object = json!({"metadata": {"namespace": moved}});
            assert_eq!(
                checked(Operation::Create, &create, object),
                Err(OTHER_NAMESPACE.to_owned())
            );
        }
        let cluster = request("POST", "/apis/demo.example.io/v1/widgets");
        let elsewhere = json!({"metadata": {"namespace": "elsewhere"}});
        assert_eq!(
            checked(Operation::Create, &cluster, elsewhere.clone()),
            Ok(())
        );
        let namespace = request("PUT", "/api/v1/namespaces/team");
        let team = json!({"metadata": {"name": "team", "namespace": "elsewhere"}});
        assert_eq!(checked(Operation::Update, &namespace, team), Ok(()));

        let update = request("PUT", "/api/v1/namespaces/default/configmaps/c");
        assert_eq!(
            checked(
                Operation::Update,
                &update,
                json!({"metadata": {"name": "c"}})
            ),
            Ok(())
        );
        let renamed = |name: &str| {
            format!("the name of the object ({name}) does not match the name on the URL (c)")
        };
        assert_eq!(
            checked(
                Operation::Update,
                &update,
                json!({"metadata": {"name": "d"}})
            ),
            Err(renamed("d"))
        );
        assert_eq!(
            checked(Operation::Update, &update, json!({"metadata": {}})),
            Err(renamed(""))
        );
        assert_eq!(
            checked(Operation::Update, &update, json!({"metadata": {"name": 1}})),
            Err(renamed("1"))
        );
        let patch = request("PATCH", "/api/v1/namespaces/default/configmaps/c");
        assert_eq!(
            checked(Operation::Update, &patch, json!({"data": {"k": "v"}})),
            Ok(())
        );
        assert_eq!(
            checked(
                Operation::Update,
                &patch,
                json!({"metadata": {"name": "d"}})
            ),
            Err(renamed("d"))
        );
        let delete = request("DELETE", "/api/v1/namespaces/default/configmaps/c");
        assert_eq!(checked(Operation::Delete, &delete, elsewhere), Ok(()));
    }

    #[test]
    fn a_replacement_is_the_new_text_and_value() {
        let mut text = Some("{}".to_owned());
        let mut draft = Draft::default();
        assert_eq!(draft.replace(&mut text, json!({"kind": "Widget"})), Ok(()));
        assert!(draft.changed);
        assert_eq!(text.as_deref(), Some(r#"{"kind":"Widget"}"#));
        assert_eq!(draft.value, Some(json!({"kind": "Widget"})));
    }
}
