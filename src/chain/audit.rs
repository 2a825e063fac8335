//! The audit stage (kube's `WithAudit`): the manifest's policy picks a level
//! for each request (first matching rule; none means not audited), and
//! events at RequestReceived, ResponseStarted (long-running requests only),
//! ResponseComplete and Panic go to every audit filter. In `blocking` mode
//! the request waits for its events to be written; in `batch` mode they go
//! through a bounded queue, and what does not fit is dropped, counted and
//! logged, never silently. Audit never fails a request.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use http_body_util::BodyExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::body::{Body, Request, Response};
use crate::config::stages::{AuditLevel, AuditMode, AuditRule, AuditStage};
use crate::context::{
    AuditId, ClientOrigin, ConnectionControl, ConnectionInfo, Deadline, ReceivedAt, UserInfo,
};
use crate::handler::{Handler, SharedHandler};
use crate::request_info::RequestInfo;
use crate::wasm::bindings::types::Status;
use crate::wasm::filter::{Annotation, Auditor, Event, Level, ObjectReference, Stage};
use crate::wasm::{LoadedFilter, Outcome, convert};

/// Filled in by the stages inside audit (authorization's decision, the
/// impersonated user) and read when the later events are made.
#[derive(Clone, Default)]
pub struct AuditContext(Arc<Mutex<AuditNotes>>);

#[derive(Default)]
struct AuditNotes {
    annotations: Vec<(String, String)>,
    impersonated: Option<UserInfo>,
}

impl AuditContext {
    pub fn annotate(&self, key: &str, value: &str) {
        if let Ok(mut notes) = self.0.lock() {
            notes.annotations.push((key.to_owned(), value.to_owned()));
        }
    }

    pub fn impersonating(&self, user: &UserInfo) {
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
                    key: key.clone(),
                    value: value.clone(),
                })
                .collect();
            event.impersonated_user = notes.impersonated.as_ref().map(convert::user_to_wit);
        }
    }
}

/// Where events go: the audit filters, directly or through the queue.
pub struct AuditBackend {
    filters: Arc<Vec<LoadedFilter<Auditor>>>,
    queue: Option<mpsc::Sender<Event>>,
    /// Events accepted and not yet written by every filter.
    pending: Arc<AtomicUsize>,
    dropped: AtomicU64,
}

impl AuditBackend {
    /// A backend; in batch mode its writer task starts here.
    pub fn new(
        filters: Vec<LoadedFilter<Auditor>>,
        mode: AuditMode,
        queue_size: usize,
    ) -> Arc<Self> {
        let filters = Arc::new(filters);
        let pending = Arc::new(AtomicUsize::new(0));
        let queue = (mode == AuditMode::Batch).then(|| {
            let (sender, mut receiver) = mpsc::channel::<Event>(queue_size.max(1));
            let (filters, pending) = (filters.clone(), pending.clone());
            tokio::spawn(async move {
                while let Some(event) = receiver.recv().await {
                    write(&filters, &event).await;
                    // One flush per burst of events; done before the event
                    // stops counting as pending, so `flush` waits for it.
                    if receiver.is_empty() {
                        flush_sinks(&filters);
                    }
                    pending.fetch_sub(1, Ordering::AcqRel);
                }
            });
            sender
        });
        Arc::new(AuditBackend {
            filters,
            queue,
            pending,
            dropped: AtomicU64::new(0),
        })
    }

    async fn emit(&self, event: Event) {
        match &self.queue {
            None => write_through(&self.filters, &event).await,
            Some(queue) => self.enqueue(queue, event),
        }
    }

    /// For events made where nothing can wait (a response body's end, a
    /// request dropped before its response); counted as pending until
    /// written, so that [`AuditBackend::flush`] waits for them too.
    fn emit_detached(self: &Arc<Self>, event: Event) {
        match &self.queue {
            Some(queue) => self.enqueue(queue, event),
            None => {
                self.pending.fetch_add(1, Ordering::AcqRel);
                let backend = self.clone();
                tokio::spawn(async move {
                    write_through(&backend.filters, &event).await;
                    backend.pending.fetch_sub(1, Ordering::AcqRel);
                });
            }
        }
    }

    fn enqueue(&self, queue: &mpsc::Sender<Event>, event: Event) {
        self.pending.fetch_add(1, Ordering::AcqRel);
        if queue.try_send(event).is_err() {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            crate::metrics::metrics().audit_events_dropped.inc();
            // Every drop is counted; the log says so without flooding.
            if dropped.is_power_of_two() {
                tracing::warn!(dropped_total = dropped, "audit queue full: event dropped");
            }
        }
    }

    /// Events dropped because the batch queue was full, since start.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Waits (up to `limit`) until every queued event has been written.
    pub async fn flush(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        while self.pending.load(Ordering::Acquire) > 0 {
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(
                    pending = self.pending.load(Ordering::Acquire),
                    "audit events still unwritten at shutdown"
                );
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        true
    }
}

/// Blocking mode: the event is in the sinks' files before the request goes on.
async fn write_through(filters: &[LoadedFilter<Auditor>], event: &Event) {
    write(filters, event).await;
    flush_sinks(filters);
}

fn flush_sinks(filters: &[LoadedFilter<Auditor>]) {
    for filter in filters {
        filter.flush_sink();
    }
}

async fn write(filters: &[LoadedFilter<Auditor>], event: &Event) {
    for filter in filters {
        match filter.audit(event).await {
            Outcome::Answer(()) => {}
            Outcome::FilterError(message) => {
                tracing::warn!(filter = filter.name(), error = %message, "audit filter returned an error")
            }
            Outcome::Trap(message) => {
                tracing::error!(filter = filter.name(), trap = %message, "audit filter trapped")
            }
            Outcome::Timeout => tracing::error!(filter = filter.name(), "audit filter timed out"),
            Outcome::Exhausted(what) => {
                tracing::warn!(filter = filter.name(), %what, "no room to run the audit filter: event not written")
            }
        }
    }
}

pub struct Audit {
    pub policy: Vec<AuditRule>,
    pub backend: Arc<AuditBackend>,
    pub next: SharedHandler,
}

impl Handler for Audit {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        Box::pin(async move {
            let level = {
                let extensions = request.extensions();
                extensions
                    .get::<RequestInfo>()
                    .and_then(|info| policy_level(&self.policy, extensions.get::<UserInfo>(), info))
            };
            let Some((level, omitted)) = level else {
                return self.next.call(request).await;
            };
            let (mut request, request_object) = if level >= AuditLevel::Request {
                buffer_request_object(request).await
            } else {
                (request, None)
            };
            let context = AuditContext::default();
            request.extensions_mut().insert(context.clone());
            let mut event = base_event(&request, level);
            event.request_object = request_object;
            let long_running = request
                .extensions()
                .get::<RequestInfo>()
                .is_some_and(RequestInfo::is_long_running);
            let emits = |stage: AuditStage| !omitted.contains(&stage);

            // From here on the request is completed in the log whatever
            // happens to it: answered, cut at its deadline, abandoned by its
            // client, closed by the shutdown (kube writes ResponseComplete
            // when its handler returns, however it returns).
            let mut completion = Completion {
                event: Some(event),
                omitted: !emits(AuditStage::ResponseComplete),
                interruption: Interruption::of(&request),
                context: context.clone(),
                backend: self.backend.clone(),
            };
            if emits(AuditStage::RequestReceived)
                && let Some(event) = &completion.event
            {
                self.backend
                    .emit(stamped(event.clone(), Stage::RequestReceived, &context))
                    .await;
            }
            let response = match AssertUnwindSafe(self.next.call(request))
                .catch_unwind()
                .await
            {
                Ok(response) => response,
                Err(panic) => {
                    // kube writes Panic instead of ResponseComplete.
                    if let Some(event) = completion.event.take()
                        && emits(AuditStage::Panic)
                    {
                        let mut panicked = stamped(event, Stage::Panic, &context);
                        panicked.response_status =
                            Some(status_record(500, "InternalError", "APIServer panic'd"));
                        self.backend.emit(panicked).await;
                    }
                    // Panic recovery, outside, turns it into a 500.
                    std::panic::resume_unwind(panic);
                }
            };
            let status = status_record(response.status().as_u16(), "", "");
            if long_running {
                completion.answered(status, None);
                if emits(AuditStage::ResponseStarted)
                    && let Some(event) = &completion.event
                {
                    self.backend
                        .emit(stamped(event.clone(), Stage::ResponseStarted, &context))
                        .await;
                }
                // The response completes when its body ends, after this returns.
                return response.map(|body| body.with_guard(completion));
            }
            let (response, response_object) = if level == AuditLevel::RequestResponse {
                buffer_response_object(response).await
            } else {
                (response, None)
            };
            completion.answered(status, response_object);
            completion.write().await;
            response
        })
    }
}

/// The level of the first rule of `policy` matching the request, and that
/// rule's omitted stages; None when not audited. `user` is None when
/// authentication failed.
fn policy_level<'p>(
    policy: &'p [AuditRule],
    user: Option<&UserInfo>,
    info: &RequestInfo,
) -> Option<(AuditLevel, &'p [AuditStage])> {
    let rule = policy.iter().find(|rule| rule_matches(rule, user, info))?;
    (rule.level > AuditLevel::None).then_some((rule.level, rule.omit_stages.as_slice()))
}

/// kube's `policyRuleEvaluator`: every non-empty list must match.
/// A rule naming users or groups never matches an unknown user.
fn rule_matches(rule: &AuditRule, user: Option<&UserInfo>, info: &RequestInfo) -> bool {
    let any =
        |list: &[String], value: &str| list.is_empty() || list.iter().any(|item| item == value);
    let users = rule.users.is_empty() || user.is_some_and(|user| rule.users.contains(&user.name));
    let groups = rule.groups.is_empty()
        || user.is_some_and(|user| user.groups.iter().any(|group| rule.groups.contains(group)));
    let verbs = any(&rule.verbs, &info.verb);
    if !(users && groups && verbs) {
        return false;
    }
    if info.is_resource_request {
        // A rule about non-resource URLs only does not match resource requests.
        if rule.resources.is_empty()
            && rule.namespaces.is_empty()
            && !rule.non_resource_urls.is_empty()
        {
            return false;
        }
        let namespaces = any(&rule.namespaces, &info.namespace);
        let resources = rule.resources.is_empty()
            || rule.resources.iter().any(|(group, resources)| {
                group == &info.api_group
                    && (resources.is_empty()
                        || resources
                            .iter()
                            .any(|pattern| resource_matches(pattern, info)))
            });
        namespaces && resources
    } else {
        if !rule.resources.is_empty() || !rule.namespaces.is_empty() {
            return false;
        }
        rule.non_resource_urls.is_empty()
            || rule
                .non_resource_urls
                .iter()
                .any(|url| match url.strip_suffix('*') {
                    Some(prefix) => info.path.starts_with(prefix),
                    None => url == &info.path,
                })
    }
}

/// kube's resource patterns: `resource` (never its subresources) or
/// `resource/subresource` exactly, `*`, `*/subresource`, `resource/*`.
fn resource_matches(pattern: &str, info: &RequestInfo) -> bool {
    let (resource, subresource) = (info.resource.as_str(), info.subresource.as_str());
    let exact = match pattern.split_once('/') {
        None => subresource.is_empty() && pattern == resource,
        Some((r, s)) => r == resource && s == subresource,
    };
    exact
        || pattern == "*"
        || (!subresource.is_empty() && pattern.strip_prefix("*/") == Some(subresource))
        || pattern.strip_suffix("/*") == Some(resource)
}

fn base_event(request: &Request, level: AuditLevel) -> Event {
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
        verb: info.map(|i| i.verb.clone()).unwrap_or_default(),
        request_uri: request
            .uri()
            .path_and_query()
            .map(|pq| pq.as_str().to_owned())
            .unwrap_or_default(),
        user: extensions.get::<UserInfo>().map_or_else(
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
        object_ref: info
            .filter(|i| i.is_resource_request)
            .map(|i| ObjectReference {
                resource: i.resource.clone(),
                namespace: i.namespace.clone(),
                name: i.name.clone(),
                api_group: i.api_group.clone(),
                api_version: i.api_version.clone(),
                subresource: i.subresource.clone(),
            }),
        response_status: None,
        request_received_timestamp: humantime::format_rfc3339_micros(received).to_string(),
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

fn stamped(mut event: Event, stage: Stage, context: &AuditContext) -> Event {
    event.stage = stage;
    event.stage_timestamp = humantime::format_rfc3339_micros(SystemTime::now()).to_string();
    context.apply(&mut event);
    event
}

fn status_record(code: u16, reason: &str, message: &str) -> Status {
    Status {
        code,
        reason: reason.to_owned(),
        message: message.to_owned(),
    }
}

/// Reads the request body to record it (levels Request and above), and puts
/// it back. A body that is not JSON is forwarded but not recorded.
async fn buffer_request_object(request: Request) -> (Request, Option<String>) {
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

async fn buffer_response_object(response: Response) -> (Response, Option<String>) {
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

/// A request's ResponseComplete, written once: by [`Completion::write`] when
/// the response is ready (a long-running one's when its body is done), or
/// when the request is dropped before that, recording why.
struct Completion {
    /// None once written (or replaced by a Panic event).
    event: Option<Event>,
    /// True when the policy omits the stage.
    omitted: bool,
    interruption: Interruption,
    context: AuditContext,
    backend: Arc<AuditBackend>,
}

impl Completion {
    /// The response is ready: its status (and object) go in the event.
    fn answered(&mut self, status: Status, object: Option<String>) {
        if let Some(event) = &mut self.event {
            event.response_status = Some(status);
            event.response_object = object;
        }
    }

    /// Writes the event now (blocking mode: before the response is sent).
    async fn write(mut self) {
        if let Some(event) = self.event.take()
            && !self.omitted
        {
            self.backend
                .emit(stamped(event, Stage::ResponseComplete, &self.context))
                .await;
        }
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        if let Some(mut event) = self.event.take()
            && !self.omitted
        {
            if event.response_status.is_none() {
                event.response_status = Some(self.interruption.status());
            }
            self.backend
                .emit_detached(stamped(event, Stage::ResponseComplete, &self.context));
        }
    }
}

/// What tells why a request was dropped before its response: its deadline
/// passed (the timeout filter answered 504), the shutdown closed its
/// connection, or else its client went away.
struct Interruption {
    deadline: Option<Instant>,
    shutdown_cut: Option<CancellationToken>,
}

impl Interruption {
    fn of(request: &Request) -> Self {
        let extensions = request.extensions();
        Interruption {
            deadline: extensions.get::<Deadline>().map(|deadline| deadline.0),
            shutdown_cut: extensions
                .get::<ConnectionControl>()
                .map(|control| control.shutdown_cut.clone()),
        }
    }

    /// The status the event records. Of the three, only the 504 reached the
    /// client; the others have no HTTP status of their own and take the
    /// nearest: 503 (the server went away) and nginx's 499 (Client Closed
    /// Request).
    fn status(&self) -> Status {
        if self
            .deadline
            .is_some_and(|deadline| Instant::now() >= deadline)
        {
            status_record(504, "Timeout", super::timeout::TIMEOUT_MESSAGE)
        } else if self
            .shutdown_cut
            .as_ref()
            .is_some_and(CancellationToken::is_cancelled)
        {
            status_record(
                503,
                "ServiceUnavailable",
                "the gateway shut down before the response was complete",
            )
        } else {
            status_record(
                499,
                "",
                "the client closed the connection before the response was complete",
            )
        }
    }
}

/// kube's `WithFailedAuthenticationAudit`: a request that authentication
/// refused never reaches the audit stage, and is audited here, at the level
/// the policy gives an unknown user (rules naming users or groups do not
/// match it), in one event at stage ResponseStarted (kube's stage for it)
/// with the response's status and the kinds of credentials tried.
pub struct FailedAuthenticationAudit {
    pub policy: Vec<AuditRule>,
    pub backend: Arc<AuditBackend>,
}

impl FailedAuthenticationAudit {
    /// Audits `request`, refused with `status`.
    pub async fn record(&self, request: Request, status: http::StatusCode) {
        let Some(info) = request.extensions().get::<RequestInfo>() else {
            return;
        };
        let Some((level, omitted)) = policy_level(&self.policy, None, info) else {
            return;
        };
        if omitted.contains(&AuditStage::ResponseStarted) {
            return;
        }
        let mut event = base_event(&request, level);
        event.response_status = Some(status_record(
            status.as_u16(),
            "",
            &attempted_credentials(&request),
        ));
        let context = AuditContext::default();
        self.backend
            .emit(stamped(event, Stage::ResponseStarted, &context))
            .await;
    }
}

/// kube's `getAuthMethods`: the kinds of credentials the request carried.
fn attempted_credentials(request: &Request) -> String {
    let scheme = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().split_once(' '))
        .map(|(scheme, _)| scheme.to_ascii_lowercase());
    let access_token = request.uri().query().is_some_and(|query| {
        url::form_urlencoded::parse(query.as_bytes())
            .any(|(key, value)| key == "access_token" && !value.trim().is_empty())
    });
    let x509 = request
        .extensions()
        .get::<ConnectionInfo>()
        .is_some_and(|connection| connection.client_chain.is_some());
    let methods: Vec<&str> = [
        (scheme.as_deref() == Some("basic"), "basic"),
        (scheme.as_deref() == Some("bearer"), "bearer"),
        (access_token, "access_token"),
        (x509, "x509"),
    ]
    .into_iter()
    .filter_map(|(present, name)| present.then_some(name))
    .collect();
    if methods.is_empty() {
        "Authentication failed, no credentials provided".to_owned()
    } else {
        format!("Authentication failed, attempted: {}", methods.join(", "))
    }
}
