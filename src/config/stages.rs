//! The four Wasm stages as configured: which filters run in each, in what
//! order, with what budgets, and the audit policy. Completed from the
//! manifest's `[authentication]`, `[authorization]`, `[admission]` and
//! `[audit]` tables; the components themselves are loaded by the Wasm host.

use std::path::PathBuf;
use std::time::Duration;

use toml::Spanned;

use super::Name;
use super::bounds;
use super::complete::Completer;
use super::error::Location;
use super::manifest as m;
use crate::request_info::is_dns1123_subdomain;

/// Every stage's filters, in manifest order.
#[derive(Debug, Default)]
pub struct Stages {
    pub(crate) authentication: Authentication,
    /// The authorization stage.
    pub authorization: Authorization,
    pub(crate) admission: Admission,
    pub(crate) audit: Audit,
}

impl Stages {
    /// Every filter of every stage, in request order.
    pub(crate) fn all_filters(&self) -> impl Iterator<Item = &FilterSpec> {
        self.authentication
            .filters
            .iter()
            .chain(&self.audit.filters)
            .chain(&self.authorization.filters)
            .chain(&self.admission.mutating)
            .chain(&self.admission.validating)
    }
}

#[derive(Debug, Default)]
pub(crate) struct Authentication {
    /// Requests no authenticator recognises go on as `system:anonymous`
    /// (else they get a 401).
    pub anonymous: bool,
    pub filters: Vec<FilterSpec>,
}

/// The authorization stage: its authorizers, asked in order, and kube's `AlwaysAllow` fallback.
#[derive(Debug, Default)]
pub struct Authorization {
    /// Explicitly allow everything when no authorizer is configured.
    pub always_allow: bool,
    pub(crate) filters: Vec<FilterSpec>,
}

#[derive(Debug, Default)]
pub(crate) struct Admission {
    pub mutating: Vec<FilterSpec>,
    pub validating: Vec<FilterSpec>,
}

#[derive(Debug, Default)]
pub(crate) struct Audit {
    pub mode: AuditMode,
    /// Batch mode: events queued at most; beyond, events are dropped and
    /// counted.
    pub queue_size: usize,
    /// Batch mode: the most events one call to an audit filter carries.
    pub max_batch_size: usize,
    /// Batch mode: how long a batch stays open for more events after its
    /// first; zero sends whatever is queued at once.
    pub max_batch_wait: Duration,
    pub policy: Vec<AuditRule>,
    pub filters: Vec<FilterSpec>,
}

/// How audit events reach the audit filters (kube's backend modes).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AuditMode {
    /// The request waits for its events to be written.
    Blocking,
    /// Events are queued and written by a background task.
    #[default]
    Batch,
}

/// kube audit levels, in increasing detail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum AuditLevel {
    /// Not audited.
    None,
    /// The request's metadata: who, what, when, the response's status.
    Metadata,
    /// The metadata and the request's body.
    Request,
    /// The metadata and both bodies.
    RequestResponse,
}

/// kube audit stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditStage {
    /// As soon as the request is received, before it goes on.
    RequestReceived,
    /// A long-running request's response headers are sent, its body not yet.
    ResponseStarted,
    /// The response is complete.
    ResponseComplete,
    /// The handler panicked.
    Panic,
}

/// One rule of the audit policy, completed with the policy's own
/// `omit_stages` and `omit_managed_fields` (kube's `NewChecker` folds them
/// into every rule); empty lists match everything.
#[derive(Debug, Clone)]
pub(crate) struct AuditRule {
    pub level: AuditLevel,
    pub users: Vec<String>,
    pub groups: Vec<String>,
    pub verbs: Vec<String>,
    pub resources: Vec<AuditResources>,
    pub namespaces: Vec<String>,
    /// Exact paths, or prefixes ending in `*`.
    pub non_resource_urls: Vec<String>,
    /// The rule's stages and the policy's.
    pub omit_stages: Vec<AuditStage>,
    /// What the recorded objects keep of their metadata.
    pub managed_fields: ManagedFields,
}

/// Whether the objects an audit event records keep their
/// `metadata.managedFields` (kube's `omitManagedFields`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ManagedFields {
    /// Recorded as they came.
    Kept,
    /// Left out of the object, of each item of a list, of each row's object
    /// of a Table.
    Omitted,
}

/// The resources of one API group an audit rule is about (kube's
/// `GroupResources`).
#[derive(Debug, Clone)]
pub(crate) struct AuditResources {
    /// The API group, `""` for the core group.
    pub group: String,
    /// Resource patterns; empty means every resource of the group.
    pub resources: Vec<String>,
    /// Object names; empty means every object.
    pub resource_names: Vec<String>,
}

/// One Wasm filter, as configured.
#[derive(Debug, Clone)]
pub struct FilterSpec {
    /// The filter's name, unique in the manifest.
    pub name: Name,
    /// The component's path, resolved against the manifest's folder.
    pub component: PathBuf,
    /// Where `component` is written in the manifest, for load errors.
    pub location: Option<Location>,
    /// A pinned digest: the component must hash to it.
    pub sha256: Option<[u8; 32]>,
    /// Whether an instance serves one request or is pooled.
    pub isolation: Isolation,
    /// How long one call may take.
    pub timeout: Duration,
    /// Linear memory cap in bytes.
    pub memory: u64,
    /// What a failed call (an error, a trap, a timeout) means for the request.
    pub failure_policy: FailurePolicy,
    /// Whether the filter's decision is enforced or only logged.
    pub mode: Mode,
    /// Which requests the filter sees.
    pub matcher: FilterMatch,
    /// The `config` table, as JSON, handed to the filter.
    pub config_json: String,
    /// Audit filters only: where `sink.write` goes.
    pub sink: Option<Sink>,
    /// Authentication filters only: which request headers reach the filter.
    pub headers: RequestHeaders,
    /// Which of its records' optional fields the filter is given.
    pub reads: Reads,
    /// What of WASI the filter may use (nothing unless the manifest grants it).
    pub wasi: WasiGrants,
    /// Authentication and authorization filters only: how long answers are
    /// kept; None when they are not cached.
    pub cache: Option<CacheSpec>,
}

/// A filter's decision cache (kube's webhook caches): answers are kept
/// `ttl` when positive (authenticated, allow) and `negative_ttl` otherwise
/// (no opinion; deny), at most `max_entries` of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheSpec {
    /// How long a positive answer (authenticated, allowed) is kept.
    pub ttl: Duration,
    /// How long a negative answer (no opinion, denied) is kept.
    pub negative_ttl: Duration,
    /// The most answers kept; the oldest go first past it.
    pub max_entries: usize,
}

impl CacheSpec {
    /// kube's token cache: 2 minutes for both
    /// (`--authentication-token-webhook-cache-ttl`).
    pub const AUTHENTICATION: CacheSpec = CacheSpec {
        ttl: Duration::from_secs(120),
        negative_ttl: Duration::from_secs(120),
        max_entries: DEFAULT_CACHE_ENTRIES,
    };
    /// kube's webhook authorizer: 5 minutes authorized, 30 s unauthorized
    /// (`--authorization-webhook-cache-authorized-ttl`, `-unauthorized-ttl`).
    pub const AUTHORIZATION: CacheSpec = CacheSpec {
        ttl: Duration::from_secs(300),
        negative_ttl: Duration::from_secs(30),
        max_entries: DEFAULT_CACHE_ENTRIES,
    };
}

/// Which request headers an authenticator's `request-view` carries. Every
/// header is a string copied into the guest, so naming the few a filter
/// reads (`Authorization`, say) makes each call cheaper.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RequestHeaders {
    /// Every header of the request.
    #[default]
    All,
    /// Only these, in the order the request carries them.
    Only(Vec<http::HeaderName>),
}

impl RequestHeaders {
    pub(crate) fn includes(&self, name: &http::HeaderName) -> bool {
        match self {
            RequestHeaders::All => true,
            RequestHeaders::Only(names) => names.contains(name),
        }
    }
}

/// A field of the records a filter is given that is there only for a
/// filter that reads it (the options of `wasmgate:filter@0.3.0`): each
/// string handed to a filter costs a call into its allocator, an absent
/// option none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadField {
    /// `request-view.method` (authenticators).
    Method,
    /// `request-view.path` (authenticators).
    Path,
    /// `request-view.query` (authenticators).
    Query,
    /// `request-view.remote-addr` (authenticators).
    RemoteAddr,
    /// `request-info.api-prefix` (authorizers, admission).
    ApiPrefix,
    /// `request-info.api-version` (authorizers, admission).
    ApiVersion,
    /// `request-info.label-selector` (authorizers, admission).
    LabelSelector,
    /// `request-info.field-selector` (authorizers, admission).
    FieldSelector,
    /// `admission-request.request`, the request info (admission).
    Request,
    /// `admission-request.user`, the user info (admission).
    User,
}

impl ReadField {
    const AUTHENTICATION: &[ReadField] = &[
        ReadField::Method,
        ReadField::Path,
        ReadField::Query,
        ReadField::RemoteAddr,
    ];
    const AUTHORIZATION: &[ReadField] = &[
        ReadField::ApiPrefix,
        ReadField::ApiVersion,
        ReadField::LabelSelector,
        ReadField::FieldSelector,
    ];
    const ADMISSION: &[ReadField] = &[
        ReadField::Request,
        ReadField::User,
        ReadField::ApiPrefix,
        ReadField::ApiVersion,
        ReadField::LabelSelector,
        ReadField::FieldSelector,
    ];

    /// Its name in `reads`: the WIT field's.
    fn name(self) -> &'static str {
        match self {
            ReadField::Method => "method",
            ReadField::Path => "path",
            ReadField::Query => "query",
            ReadField::RemoteAddr => "remote-addr",
            ReadField::ApiPrefix => "api-prefix",
            ReadField::ApiVersion => "api-version",
            ReadField::LabelSelector => "label-selector",
            ReadField::FieldSelector => "field-selector",
            ReadField::Request => "request",
            ReadField::User => "user",
        }
    }

    fn bit(self) -> u16 {
        1 << self as u16
    }
}

/// The optional fields a filter is given: those its `reads` lists, or every
/// one when it has no `reads` (what a 0.2.0 filter saw).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reads(u16);

impl Reads {
    /// Every optional field: a filter without `reads`.
    pub const ALL: Reads = Reads(u16::MAX);

    /// Whether the filter is given `field`.
    pub fn includes(self, field: ReadField) -> bool {
        self.0 & field.bit() != 0
    }
}

impl Default for Reads {
    fn default() -> Self {
        Reads::ALL
    }
}

/// The fields listed, and no others.
impl FromIterator<ReadField> for Reads {
    fn from_iter<I: IntoIterator<Item = ReadField>>(fields: I) -> Self {
        Reads(fields.into_iter().fold(0, |bits, field| bits | field.bit()))
    }
}

/// WASI capabilities granted to one filter. Network access is never granted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WasiGrants {
    /// Environment variables the filter sees.
    pub env: Vec<(String, String)>,
    /// Host folders the filter may open, under a guest path.
    pub(crate) dirs: Vec<GrantedDir>,
    /// The filter's standard output and error go to the gateway's.
    pub stdio: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GrantedDir {
    pub host: PathBuf,
    pub guest: String,
    pub writable: bool,
}

/// How instances are kept between calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// A fresh instance for every call: nothing leaks between requests.
    PerRequest,
    /// Instances are reused; one that trapped is thrown away.
    Pooled,
}

/// What a filter's failure (error, trap, timeout) does to the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    /// The request fails: 500 Status (503 for a timeout).
    FailClosed,
    /// The filter is skipped, and that is logged.
    FailOpen,
}

/// Whether an authorization or admission filter's decision is enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The decision is enforced.
    Enforce,
    /// The decision is logged, never enforced; the filter's failures are
    /// skipped whatever its failure policy.
    Monitor,
}

/// Which requests a filter runs for; every non-empty list must match.
#[derive(Debug, Clone, Default)]
pub struct FilterMatch {
    pub(crate) path_prefixes: Vec<String>,
    pub(crate) api_groups: Vec<String>,
    pub(crate) resources: Vec<String>,
    pub(crate) verbs: Vec<String>,
    pub(crate) namespaces: Vec<String>,
}

/// Where an audit filter's records go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sink {
    /// The gateway's standard output.
    Stdout,
    /// A file, appended to.
    File(PathBuf),
}

pub(crate) const DEFAULT_FILTER_TIMEOUT: Duration = Duration::from_millis(500);
pub(crate) const DEFAULT_FILTER_MEMORY: u64 = 64 * 1024 * 1024;
/// The largest linear memory the engine's instance pool holds.
pub(crate) const MAX_FILTER_MEMORY: u64 = 1 << 30;
pub(crate) const DEFAULT_AUDIT_QUEUE: usize = 10_000;
/// kube's `--audit-webhook-batch-max-size`.
pub(crate) const DEFAULT_AUDIT_BATCH_SIZE: usize = 400;
/// kube waits 30 s (`--audit-webhook-batch-max-wait`) for a remote webhook;
/// an audit filter writes locally, so a batch waits far less.
pub(crate) const DEFAULT_AUDIT_BATCH_WAIT: Duration = Duration::from_millis(100);
pub(crate) const DEFAULT_CACHE_ENTRIES: usize = 10_000;

/// The stage a filter belongs to decides its defaults and which keys it may use.
#[derive(Clone, Copy, PartialEq, Eq)]
enum StageKind {
    Authentication,
    Authorization,
    Admission,
    Audit,
}

impl Completer<'_> {
    pub(super) fn stages(
        &mut self,
        authentication: Option<m::Authentication>,
        authorization: Option<m::Authorization>,
        admission: Option<m::Admission>,
        audit: Option<m::Audit>,
    ) -> Stages {
        let authentication =
            authentication.map_or_else(Authentication::default, |a| Authentication {
                anonymous: a.anonymous,
                filters: self.filters(
                    &a.filters,
                    "authentication.filters",
                    StageKind::Authentication,
                ),
            });
        let (always_allow, authorizers) = match authorization {
            Some(a) => {
                let filters = self.filters(
                    &a.filters,
                    "authorization.filters",
                    StageKind::Authorization,
                );
                if let Some(flag) = a
                    .always_allow
                    .as_ref()
                    .filter(|f| *f.get_ref() && !filters.is_empty())
                {
                    self.at(
                        flag,
                        "authorization.always_allow",
                        "conflicts with authorization filters: choose one",
                    );
                }
                (a.always_allow.is_some_and(|f| *f.get_ref()), filters)
            }
            None => (false, Vec::new()),
        };
        if !authentication.filters.is_empty() && authorizers.is_empty() && !always_allow {
            self.problem(
                None,
                "authorization",
                "authentication filters are configured but no authorization filter: add [[authorization.filters]] \
                 or set authorization.always_allow = true",
            );
        }
        let admission = admission.map_or_else(Admission::default, |a| Admission {
            mutating: self.filters(&a.mutating, "admission.mutating", StageKind::Admission),
            validating: self.filters(&a.validating, "admission.validating", StageKind::Admission),
        });
        let audit = audit.map_or_else(Audit::default, |a| self.audit(a));
        let stages = Stages {
            authentication,
            authorization: Authorization {
                always_allow,
                filters: authorizers,
            },
            admission,
            audit,
        };
        self.unique_filter_names(&stages);
        stages
    }

    fn unique_filter_names(&mut self, stages: &Stages) {
        let mut seen = std::collections::HashSet::new();
        for filter in stages.all_filters() {
            if !seen.insert(filter.name.clone()) {
                let message = format!(
                    "{:?} names another filter too: filter names are unique",
                    filter.name.as_str()
                );
                self.problems.push(super::Problem {
                    location: filter.location,
                    key: "filters".to_owned(),
                    message,
                });
            }
        }
    }

    fn audit(&mut self, audit: m::Audit) -> Audit {
        let mode = match audit.mode.as_ref().map(|m| m.get_ref().as_str()) {
            None | Some("batch") => AuditMode::Batch,
            Some("blocking") => AuditMode::Blocking,
            Some(other) => {
                let message = format!("{other:?} is not one of \"blocking\", \"batch\"");
                if let Some(mode) = &audit.mode {
                    self.at(mode, "audit.mode", message);
                }
                AuditMode::Batch
            }
        };
        let queue_size = self.count(
            &audit.queue_size,
            "audit.queue_size",
            DEFAULT_AUDIT_QUEUE,
            bounds::AUDIT_QUEUE_SIZE,
        );
        let max_batch_size = self.count(
            &audit.max_batch_size,
            "audit.max_batch_size",
            DEFAULT_AUDIT_BATCH_SIZE,
            bounds::AUDIT_BATCH_SIZE,
        );
        let max_batch_wait = self.duration(
            &audit.max_batch_wait,
            "audit.max_batch_wait",
            DEFAULT_AUDIT_BATCH_WAIT,
            bounds::AUDIT_BATCH_WAIT,
        );
        let policy_omits = self.omit_stages(&audit.omit_stages, "audit.omit_stages");
        let managed_fields = managed_fields(audit.omit_managed_fields, ManagedFields::Kept);
        let policy = audit
            .policy
            .iter()
            .enumerate()
            .filter_map(|(i, rule)| self.audit_rule(rule, i, &policy_omits, managed_fields))
            .collect();
        let filters: Vec<FilterSpec> =
            self.filters(&audit.filters, "audit.filters", StageKind::Audit);
        if !filters.is_empty() && audit.policy.is_empty() {
            self.problem(None, "audit.policy", "audit filters are configured but no [[audit.policy]] rule: nothing would be audited");
        }
        Audit {
            mode,
            queue_size,
            max_batch_size,
            max_batch_wait,
            policy,
            filters,
        }
    }

    /// A rule, with the policy's omitted stages and `omit_managed_fields`
    /// where it says nothing of its own; validated as kube's
    /// `validatePolicyRule` (`staging/src/k8s.io/apiserver/pkg/apis/audit/validation/validation.go`).
    fn audit_rule(
        &mut self,
        spanned: &Spanned<m::AuditRule>,
        index: usize,
        policy_omits: &[AuditStage],
        policy_managed_fields: ManagedFields,
    ) -> Option<AuditRule> {
        let key = format!("audit.policy[{index}]");
        let rule = spanned.get_ref();
        let level = match rule.level.get_ref().as_str() {
            "None" => AuditLevel::None,
            "Metadata" => AuditLevel::Metadata,
            "Request" => AuditLevel::Request,
            "RequestResponse" => AuditLevel::RequestResponse,
            other => {
                let message =
                    format!("{other:?} is not one of None, Metadata, Request, RequestResponse");
                self.at(&rule.level, &format!("{key}.level"), message);
                return None;
            }
        };
        let mut omit_stages = policy_omits.to_vec();
        for stage in self.omit_stages(&rule.omit_stages, &format!("{key}.omit_stages")) {
            if !omit_stages.contains(&stage) {
                omit_stages.push(stage);
            }
        }
        self.audit_rule_urls(spanned, &key);
        let resources = rule
            .resources
            .iter()
            .enumerate()
            .map(|(i, resources)| {
                self.audit_resources(spanned, &format!("{key}.resources[{i}]"), resources)
            })
            .collect();
        Some(AuditRule {
            level,
            users: rule.users.clone(),
            groups: rule.groups.clone(),
            verbs: rule.verbs.clone(),
            resources,
            namespaces: rule.namespaces.clone(),
            non_resource_urls: rule.non_resource_urls.clone(),
            omit_stages,
            managed_fields: managed_fields(rule.omit_managed_fields, policy_managed_fields),
        })
    }

    /// kube's `validateNonResourceURLs`, and a rule is about resources or
    /// about non-resource URLs, never both.
    fn audit_rule_urls(&mut self, spanned: &Spanned<m::AuditRule>, key: &str) {
        let rule = spanned.get_ref();
        for (i, url) in rule.non_resource_urls.iter().enumerate() {
            let key = format!("{key}.non_resource_urls[{i}]");
            if url == "*" {
                continue;
            }
            if !url.starts_with('/') {
                self.at(
                    spanned,
                    &key,
                    format!("{url:?}: non-resource URL rules must begin with a '/' character"),
                );
            }
            if url.strip_suffix('*').unwrap_or(url).contains('*') {
                self.at(spanned, &key, format!("{url:?}: non-resource URL wildcards '*' must be the final character of the rule"));
            }
        }
        if !rule.non_resource_urls.is_empty()
            && (!rule.resources.is_empty() || !rule.namespaces.is_empty())
        {
            self.at(
                spanned,
                &format!("{key}.non_resource_urls"),
                "rules cannot apply to both regular resources and non-resource URLs",
            );
        }
    }

    /// kube's `validateResources`: a group is a DNS subdomain, and names
    /// need resources.
    fn audit_resources(
        &mut self,
        spanned: &Spanned<m::AuditRule>,
        key: &str,
        resources: &m::AuditResources,
    ) -> AuditResources {
        let group = &resources.group;
        if !group.is_empty() && !is_dns1123_subdomain(group) {
            self.at(spanned, &format!("{key}.group"), format!("{group:?} is not an API group: a lower-case DNS subdomain (\"apps\", \"demo.example.io\"), without a version"));
        }
        if !resources.resource_names.is_empty() && resources.resources.is_empty() {
            self.at(
                spanned,
                &format!("{key}.resource_names"),
                "using resource_names requires at least one resource",
            );
        }
        AuditResources {
            group: group.clone(),
            resources: resources.resources.clone(),
            resource_names: resources.resource_names.clone(),
        }
    }

    fn omit_stages(&mut self, stages: &[Spanned<String>], key: &str) -> Vec<AuditStage> {
        let mut parsed = Vec::new();
        for stage in stages {
            match parse_stage(stage.get_ref()) {
                Some(stage) => parsed.push(stage),
                None => self.at(
                    stage,
                    key,
                    format!("{:?} is not one of RequestReceived, ResponseStarted, ResponseComplete, Panic", stage.get_ref()),
                ),
            }
        }
        parsed
    }

    fn filters(
        &mut self,
        filters: &[Spanned<m::Filter>],
        key: &str,
        stage: StageKind,
    ) -> Vec<FilterSpec> {
        filters
            .iter()
            .enumerate()
            .filter_map(|(i, f)| self.filter(f.get_ref(), &format!("{key}[{i}]"), stage))
            .collect()
    }

    fn filter(&mut self, filter: &m::Filter, key: &str, stage: StageKind) -> Option<FilterSpec> {
        let name = self.name(&filter.name, &format!("{key}.name"));
        let isolation = self.choice(
            &filter.isolation,
            &format!("{key}.isolation"),
            &[
                ("per-request", Isolation::PerRequest),
                ("pooled", Isolation::Pooled),
            ],
            Isolation::PerRequest,
        );
        let failure_policy = self.choice(
            &filter.failure_policy,
            &format!("{key}.failure_policy"),
            &[
                ("fail-closed", FailurePolicy::FailClosed),
                ("fail-open", FailurePolicy::FailOpen),
            ],
            // Audit never fails a request.
            if stage == StageKind::Audit {
                FailurePolicy::FailOpen
            } else {
                FailurePolicy::FailClosed
            },
        );
        if stage == StageKind::Audit
            && failure_policy == FailurePolicy::FailClosed
            && let Some(policy) = &filter.failure_policy
        {
            self.at(
                policy,
                &format!("{key}.failure_policy"),
                "audit filters never fail a request: use fail-open or leave it out",
            );
        }
        let mode = self.choice(
            &filter.mode,
            &format!("{key}.mode"),
            &[("enforce", Mode::Enforce), ("monitor", Mode::Monitor)],
            Mode::Enforce,
        );
        if let Some(given) = filter
            .mode
            .as_ref()
            .filter(|_| matches!(stage, StageKind::Authentication | StageKind::Audit))
        {
            self.at(
                given,
                &format!("{key}.mode"),
                "only authorization and admission filters have a monitor mode",
            );
        }
        let sink = match (&filter.sink, stage) {
            (Some(sink), StageKind::Audit) if sink.get_ref() == "stdout" => Some(Sink::Stdout),
            (Some(sink), StageKind::Audit) => Some(Sink::File(self.resolve(sink.get_ref()))),
            (None, StageKind::Audit) => Some(Sink::Stdout),
            (Some(sink), _) => {
                self.at(
                    sink,
                    &format!("{key}.sink"),
                    "only audit filters have a sink",
                );
                None
            }
            (None, _) => None,
        };
        let headers = self.request_headers(filter, key, stage);
        let reads = self.reads(filter, key, stage);
        let cache = self.cache(filter, key, stage);
        let sha256 = filter.sha256.as_ref().and_then(|digest| {
            let parsed = hex::decode(digest.get_ref().trim_start_matches("sha256:"))
                .ok()
                .and_then(|b| <[u8; 32]>::try_from(b).ok());
            if parsed.is_none() {
                self.at(
                    digest,
                    &format!("{key}.sha256"),
                    "must be 64 hexadecimal digits",
                );
            }
            parsed
        });
        let timeout = self.duration(
            &filter.timeout,
            &format!("{key}.timeout"),
            DEFAULT_FILTER_TIMEOUT,
            bounds::FILTER_TIMEOUT,
        );
        let memory = self.size(
            &filter.memory,
            &format!("{key}.memory"),
            DEFAULT_FILTER_MEMORY,
            bounds::FILTER_MEMORY,
        );
        if let (Some(_), StageKind::Audit) = (&filter.matcher, stage) {
            self.at(
                &filter.name,
                &format!("{key}.match"),
                "audit filters have no match: [[audit.policy]] selects what is audited",
            );
        }
        let matcher = filter
            .matcher
            .as_ref()
            .map_or_else(FilterMatch::default, |m| FilterMatch {
                path_prefixes: m.path_prefixes.clone(),
                api_groups: m.api_groups.clone(),
                resources: m.resources.clone(),
                verbs: m.verbs.clone(),
                namespaces: m.namespaces.clone(),
            });
        let wasi = filter
            .wasi
            .as_ref()
            .map(|grant| self.wasi_grants(grant, &format!("{key}.wasi")))
            .unwrap_or_default();
        let config = self.config_with_files(filter, key);
        let config_json = serde_json::to_string(&config).unwrap_or_else(|_| "{}".to_owned());
        Some(FilterSpec {
            name: name?,
            component: self.resolve(filter.component.get_ref()),
            location: Some(Location::of_span(self.source, &filter.component.span())),
            sha256,
            isolation,
            timeout,
            memory,
            failure_policy,
            mode,
            matcher,
            config_json,
            sink,
            headers,
            reads,
            wasi,
            cache,
        })
    }

    /// The filter's `config` table, each key `config_files` names holding
    /// the text of the file its value names (resolved against the
    /// manifest's folder, read within [`bounds::PEM_FILE`]): a filter has no
    /// filesystem, so a CA bundle reaches it as text.
    fn config_with_files(&mut self, filter: &m::Filter, key: &str) -> toml::Table {
        let mut config = filter.config.clone().unwrap_or_default();
        let Some(files) = &filter.config_files else {
            return config;
        };
        let files_key = format!("{key}.config_files");
        for name in files.get_ref() {
            let Some(toml::Value::String(path)) = config.get(name) else {
                self.at(
                    files,
                    &files_key,
                    format!("config.{name} must be a file name (a string)"),
                );
                continue;
            };
            let file = Spanned::new(files.span(), path.clone());
            let Some(bytes) = self.read_file(&file, &format!("{key}.config.{name}")) else {
                continue;
            };
            match String::from_utf8(bytes) {
                Ok(text) => {
                    config.insert(name.clone(), toml::Value::String(text));
                }
                Err(_) => self.at(
                    files,
                    &files_key,
                    format!("the file of config.{name} is not UTF-8 text"),
                ),
            }
        }
        config
    }

    /// The filter's decision cache: kube's TTLs for its stage, each
    /// overridable; only authenticators and authorizers have one.
    fn cache(&mut self, filter: &m::Filter, key: &str, stage: StageKind) -> Option<CacheSpec> {
        let given = filter.cache.as_ref()?;
        let key = format!("{key}.cache");
        let defaults = match stage {
            StageKind::Authentication => CacheSpec::AUTHENTICATION,
            StageKind::Authorization => CacheSpec::AUTHORIZATION,
            StageKind::Admission | StageKind::Audit => {
                self.at(
                    given,
                    &key,
                    "only authentication and authorization filters have a decision cache",
                );
                return None;
            }
        };
        match given.get_ref() {
            m::FilterCache::Enabled(false) => None,
            m::FilterCache::Enabled(true) => Some(defaults),
            m::FilterCache::Tuned(table) => Some(CacheSpec {
                ttl: self.duration(
                    &table.ttl,
                    &format!("{key}.ttl"),
                    defaults.ttl,
                    bounds::CACHE_TTL,
                ),
                negative_ttl: self.duration(
                    &table.negative_ttl,
                    &format!("{key}.negative_ttl"),
                    defaults.negative_ttl,
                    bounds::CACHE_TTL,
                ),
                max_entries: self.count(
                    &table.max_entries,
                    &format!("{key}.max_entries"),
                    defaults.max_entries,
                    bounds::CACHE_ENTRIES,
                ),
            }),
        }
    }

    fn request_headers(
        &mut self,
        filter: &m::Filter,
        key: &str,
        stage: StageKind,
    ) -> RequestHeaders {
        let Some(given) = &filter.headers else {
            return RequestHeaders::All;
        };
        let key = format!("{key}.headers");
        if stage != StageKind::Authentication {
            self.at(
                given,
                &key,
                "only authentication filters see request headers",
            );
            return RequestHeaders::All;
        }
        let mut names = Vec::new();
        for name in given.get_ref() {
            match http::HeaderName::from_bytes(name.as_bytes()) {
                Ok(parsed) if !names.contains(&parsed) => names.push(parsed),
                Ok(_) => self.at(given, &key, format!("{name:?} is listed twice")),
                Err(_) => self.at(given, &key, format!("{name:?} is not a header name")),
            }
        }
        RequestHeaders::Only(names)
    }

    /// The optional fields `reads` lists, each one a field of the stage's
    /// records; an admission filter that reads a field of the request info
    /// reads the request info.
    fn reads(&mut self, filter: &m::Filter, key: &str, stage: StageKind) -> Reads {
        let Some(given) = &filter.reads else {
            return Reads::ALL;
        };
        let key = format!("{key}.reads");
        let known = match stage {
            StageKind::Authentication => ReadField::AUTHENTICATION,
            StageKind::Authorization => ReadField::AUTHORIZATION,
            StageKind::Admission => ReadField::ADMISSION,
            StageKind::Audit => {
                self.at(
                    given,
                    &key,
                    "audit filters are given whole events: only authentication, authorization and admission filters have reads",
                );
                return Reads::ALL;
            }
        };
        let mut fields = Vec::new();
        for name in given.get_ref() {
            match known.iter().find(|field| field.name() == name) {
                Some(field) if fields.contains(field) => {
                    self.at(given, &key, format!("{name:?} is listed twice"));
                }
                Some(field) => fields.push(*field),
                None => {
                    let names: Vec<&str> = known.iter().map(|field| field.name()).collect();
                    self.at(
                        given,
                        &key,
                        format!(
                            "{name:?} is not an optional field of this stage's records: one of {}",
                            names.join(", ")
                        ),
                    );
                }
            }
        }
        if stage == StageKind::Admission && fields.iter().any(|f| *f != ReadField::User) {
            fields.push(ReadField::Request);
        }
        fields.into_iter().collect()
    }

    fn wasi_grants(&mut self, grant: &Spanned<m::WasiGrant>, key: &str) -> WasiGrants {
        let mut dirs = Vec::new();
        for dir in &grant.get_ref().dirs {
            let host = self.resolve(&dir.host);
            if !host.is_dir() {
                self.at(
                    grant,
                    &format!("{key}.dirs"),
                    format!("{} is not a folder", host.display()),
                );
            } else if dir.guest.is_empty() {
                self.at(
                    grant,
                    &format!("{key}.dirs"),
                    "guest must name the path the filter sees",
                );
            } else {
                dirs.push(GrantedDir {
                    host,
                    guest: dir.guest.clone(),
                    writable: dir.writable,
                });
            }
        }
        let grant = grant.get_ref();
        WasiGrants {
            env: grant
                .env
                .iter()
                .map(|(name, value)| (name.clone(), value.clone()))
                .collect(),
            dirs,
            stdio: grant.stdio,
        }
    }

    fn choice<T: Copy>(
        &mut self,
        value: &Option<Spanned<String>>,
        key: &str,
        options: &[(&str, T)],
        default: T,
    ) -> T {
        let Some(value) = value else { return default };
        match options.iter().find(|(text, _)| text == value.get_ref()) {
            Some((_, choice)) => *choice,
            None => {
                let names: Vec<String> = options
                    .iter()
                    .map(|(text, _)| format!("{text:?}"))
                    .collect();
                self.at(
                    value,
                    key,
                    format!("{:?} is not one of {}", value.get_ref(), names.join(", ")),
                );
                default
            }
        }
    }
}

/// `omit_managed_fields` as written, or `otherwise` when it is not.
fn managed_fields(omit: Option<bool>, otherwise: ManagedFields) -> ManagedFields {
    match omit {
        Some(true) => ManagedFields::Omitted,
        Some(false) => ManagedFields::Kept,
        None => otherwise,
    }
}

fn parse_stage(text: &str) -> Option<AuditStage> {
    match text {
        "RequestReceived" => Some(AuditStage::RequestReceived),
        "ResponseStarted" => Some(AuditStage::ResponseStarted),
        "ResponseComplete" => Some(AuditStage::ResponseComplete),
        "Panic" => Some(AuditStage::Panic),
        _ => None,
    }
}
