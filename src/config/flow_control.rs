//! `[flow_control]`: API Priority and Fairness, configured in kube's own
//! terms (`PriorityLevelConfiguration` and `FlowSchema`,
//! `staging/src/k8s.io/api/flowcontrol/v1/types.go`) written as TOML.
//! Completion fills kube's defaults, adds the mandatory `exempt` and
//! `catch-all` objects when missing (as `apf_controller.go` imagines them),
//! gives `enabled = true` without levels or schemas kube's suggested
//! configuration
//! (`staging/src/k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap/default.go`),
//! and orders the schemas by matching precedence; `flow_control` (the
//! module) runs it.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// Where the debug dumps are served; routes may not take these paths.
pub(crate) const DEBUG_PREFIX: &str = "/debug/api_priority_and_fairness/";

use serde::Deserialize;
use toml::Spanned;

use super::complete::Completer;
use super::{Limits, Name, bounds};

/// API Priority and Fairness, completed: replaces max-in-flight.
#[derive(Debug, Clone)]
pub struct FlowControl {
    /// Every level, the mandatory `exempt` and `catch-all` included.
    pub levels: Vec<PriorityLevel>,
    /// In matching order: by `matching_precedence`, then by name.
    pub schemas: Vec<FlowSchema>,
    /// The seats split among the limited levels:
    /// `max_requests_in_flight + max_mutating_requests_in_flight`.
    pub server_concurrency_limit: usize,
    /// How long a request without a deadline (a watch) may wait in its
    /// queue: `request_timeout / 4`, the default wait kube's
    /// `DefaultBuildHandlerChain` (`server/config.go`) passes
    /// `WithPriorityAndFairness` (`c.RequestTimeout/4`).
    pub default_request_wait: Duration,
}

#[derive(Debug, Clone)]
pub struct PriorityLevel {
    pub name: Name,
    pub kind: LevelKind,
}

#[derive(Debug, Clone)]
pub enum LevelKind {
    /// Never queued, never rejected.
    Exempt,
    Limited(Limited),
}

#[derive(Debug, Clone)]
pub struct Limited {
    /// This level's share of the server's seats, against the other levels'.
    pub nominal_concurrency_shares: u32,
    /// How much of its nominal seats other levels may borrow, in percent.
    pub lendable_percent: u32,
    /// How many seats beyond its nominal ones it may borrow, in percent of
    /// them; `None` means no limit.
    pub borrowing_limit_percent: Option<u32>,
    pub limit_response: LimitResponse,
}

/// What happens to a request that finds no free seat.
#[derive(Debug, Clone, Copy)]
pub enum LimitResponse {
    Reject,
    Queue(Queuing),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queuing {
    pub queues: usize,
    pub hand_size: usize,
    pub queue_length_limit: usize,
}

#[derive(Debug, Clone)]
pub struct FlowSchema {
    pub name: Name,
    pub matching_precedence: u32,
    /// Index into [`FlowControl::levels`].
    pub priority_level: usize,
    /// How requests of this schema are split into flows; `None` puts them
    /// all in one flow.
    pub distinguisher: Option<Distinguisher>,
    /// The schema matches a request that any rule matches.
    pub rules: Vec<PolicyRules>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distinguisher {
    ByUser,
    ByNamespace,
}

/// One rule: a subject, and a resource or non-resource rule, must match.
#[derive(Debug, Clone, Default)]
pub struct PolicyRules {
    pub subjects: Vec<Subject>,
    pub resource_rules: Vec<ResourceRule>,
    pub non_resource_rules: Vec<NonResourceRule>,
}

/// `*` as a name matches every user, group, or service account of the
/// namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    User(String),
    Group(String),
    ServiceAccount { namespace: String, name: String },
}

/// `*` in a list matches everything.
#[derive(Debug, Clone, Default)]
pub struct ResourceRule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    /// `pods`, or `pods/log` for a subresource.
    pub resources: Vec<String>,
    /// Matches requests that name no namespace.
    pub cluster_scope: bool,
    pub namespaces: Vec<String>,
}

#[derive(Debug, Clone, Default)]
pub struct NonResourceRule {
    pub verbs: Vec<String>,
    /// Paths (each matching itself and the paths under it), `/prefix/*`,
    /// or `*`.
    pub non_resource_urls: Vec<String>,
}

/// kube's dealer refuses deals that need more entropy than this.
const MAX_DEAL_BITS: f64 = 60.0;

// kube's defaults (`pkg/apis/flowcontrol/v1/defaults.go`).
const DEFAULT_SHARES: usize = 30;
const DEFAULT_QUEUING: Queuing = Queuing {
    queues: 64,
    hand_size: 8,
    queue_length_limit: 50,
};
const DEFAULT_PRECEDENCE: usize = 1000;

pub(crate) const EXEMPT: &str = "exempt";
pub(crate) const CATCH_ALL: &str = "catch-all";

/// The manifest as written.
pub(super) mod written {
    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(crate) struct FlowControl {
        pub enabled: Option<Spanned<bool>>,
        #[serde(default)]
        pub priority_levels: Vec<Spanned<PriorityLevel>>,
        #[serde(default)]
        pub flow_schemas: Vec<Spanned<FlowSchema>>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(crate) struct PriorityLevel {
        pub name: Spanned<String>,
        #[serde(rename = "type")]
        pub kind: Option<Spanned<String>>,
        pub nominal_concurrency_shares: Option<Spanned<i64>>,
        pub lendable_percent: Option<Spanned<i64>>,
        pub borrowing_limit_percent: Option<Spanned<i64>>,
        pub queuing: Option<Spanned<Queuing>>,
        pub reject: Option<Spanned<bool>>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(crate) struct Queuing {
        pub queues: Option<Spanned<i64>>,
        pub hand_size: Option<Spanned<i64>>,
        pub queue_length_limit: Option<Spanned<i64>>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(crate) struct FlowSchema {
        pub name: Spanned<String>,
        pub priority_level: Spanned<String>,
        pub matching_precedence: Option<Spanned<i64>>,
        pub distinguisher: Option<Spanned<String>>,
        #[serde(default)]
        pub rules: Vec<Spanned<Rule>>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(crate) struct Rule {
        #[serde(default)]
        pub users: Vec<String>,
        #[serde(default)]
        pub groups: Vec<String>,
        #[serde(default)]
        pub service_accounts: Vec<Spanned<String>>,
        #[serde(default)]
        pub resource_rules: Vec<Spanned<ResourceRule>>,
        #[serde(default)]
        pub non_resource_rules: Vec<Spanned<NonResourceRule>>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(crate) struct ResourceRule {
        pub verbs: Vec<String>,
        pub api_groups: Vec<String>,
        pub resources: Vec<String>,
        #[serde(default)]
        pub cluster_scope: bool,
        #[serde(default)]
        pub namespaces: Vec<String>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(crate) struct NonResourceRule {
        pub verbs: Vec<String>,
        pub non_resource_urls: Vec<Spanned<String>>,
    }
}

impl Completer<'_> {
    /// `[flow_control]`: `None` when it is off (max-in-flight runs).
    pub(super) fn flow_control(
        &mut self,
        written: &Spanned<written::FlowControl>,
        limits: &Limits,
    ) -> Option<FlowControl> {
        let section = written.get_ref();
        let enabled = section.enabled.as_ref().is_none_or(|e| *e.get_ref());
        let given = !section.priority_levels.is_empty() || !section.flow_schemas.is_empty();
        if !enabled {
            if given {
                let span = section.enabled.as_ref().map(Spanned::span);
                self.problem(
                    span,
                    "flow_control.enabled",
                    "is false, so the priority levels and flow schemas have no effect",
                );
            }
            return None;
        }
        let server_concurrency_limit =
            limits.max_requests_in_flight + limits.max_mutating_requests_in_flight;
        if server_concurrency_limit == 0 {
            self.at(
                written,
                "flow_control",
                "needs seats to share: max_requests_in_flight + \
                 max_mutating_requests_in_flight must be at least 1",
            );
        }
        let (levels, schemas) = if given {
            let levels = self.priority_levels(&section.priority_levels);
            let schemas = self.flow_schemas(&section.flow_schemas, &levels);
            (levels, schemas)
        } else {
            suggested()
        };
        let shares: u64 = levels
            .iter()
            .filter_map(|level| match &level.kind {
                LevelKind::Limited(limited) => Some(u64::from(limited.nominal_concurrency_shares)),
                LevelKind::Exempt => None,
            })
            .sum();
        if shares == 0 {
            self.at(
                written,
                "flow_control.priority_levels",
                "the limited levels' nominal_concurrency_shares sum to 0: no level could run a request",
            );
        }
        Some(FlowControl {
            levels,
            schemas,
            server_concurrency_limit,
            default_request_wait: limits.request_timeout / 4,
        })
    }

    fn priority_levels(
        &mut self,
        written: &[Spanned<written::PriorityLevel>],
    ) -> Vec<PriorityLevel> {
        let mut names = HashSet::new();
        let mut levels = Vec::new();
        for (index, level) in written.iter().enumerate() {
            let key = format!("flow_control.priority_levels[{index}]");
            let level = level.get_ref();
            let Some(name) = self.name(&level.name, &format!("{key}.name")) else {
                continue;
            };
            if !names.insert(name.clone()) {
                self.at(
                    &level.name,
                    &format!("{key}.name"),
                    format!("{:?} names another priority level too", name.as_str()),
                );
                continue;
            }
            if let Some(kind) = self.level_kind(level, &key, &name) {
                levels.push(PriorityLevel { name, kind });
            }
        }
        // The mandatory levels, as kube supplies them when missing.
        if !names.iter().any(|name| name.as_str() == EXEMPT) {
            levels.insert(0, exempt_level());
        }
        if !names.iter().any(|name| name.as_str() == CATCH_ALL) {
            levels.push(catch_all_level());
        }
        levels
    }

    fn level_kind(
        &mut self,
        level: &written::PriorityLevel,
        key: &str,
        name: &Name,
    ) -> Option<LevelKind> {
        let kind = level
            .kind
            .as_ref()
            .map_or("limited", |k| k.get_ref().as_str());
        match kind {
            "exempt" => {
                let limited_keys = [
                    level.nominal_concurrency_shares.as_ref().map(Spanned::span),
                    level.lendable_percent.as_ref().map(Spanned::span),
                    level.borrowing_limit_percent.as_ref().map(Spanned::span),
                    level.queuing.as_ref().map(Spanned::span),
                    level.reject.as_ref().map(Spanned::span),
                ];
                if let Some(span) = limited_keys.into_iter().flatten().next() {
                    self.problem(
                        Some(span),
                        key,
                        "an exempt level has no seats, queues or limit: only type = \"exempt\" applies",
                    );
                }
                Some(LevelKind::Exempt)
            }
            "limited" if name.as_str() == EXEMPT => {
                let span = level.kind.as_ref().map(Spanned::span);
                self.problem(
                    span,
                    &format!("{key}.type"),
                    "the mandatory \"exempt\" level must be type = \"exempt\"",
                );
                None
            }
            "limited" => Some(LevelKind::Limited(self.limited(level, key))),
            other => {
                let span = level.kind.as_ref().map(Spanned::span);
                self.problem(
                    span,
                    &format!("{key}.type"),
                    format!("{other:?} is not one of \"limited\", \"exempt\""),
                );
                None
            }
        }
    }

    fn limited(&mut self, level: &written::PriorityLevel, key: &str) -> Limited {
        let nominal_concurrency_shares = self.number(
            &level.nominal_concurrency_shares,
            &format!("{key}.nominal_concurrency_shares"),
            DEFAULT_SHARES,
            bounds::CONCURRENCY_SHARES,
        );
        let lendable_percent = self.number(
            &level.lendable_percent,
            &format!("{key}.lendable_percent"),
            0,
            bounds::PERCENT,
        );
        let borrowing_limit_percent = level.borrowing_limit_percent.as_ref().map(|_| {
            self.number(
                &level.borrowing_limit_percent,
                &format!("{key}.borrowing_limit_percent"),
                0,
                bounds::BORROWING_PERCENT,
            )
        });
        let reject = level.reject.as_ref().is_some_and(|r| *r.get_ref());
        let limit_response = match (&level.queuing, reject) {
            (Some(queuing), true) => {
                self.at(
                    queuing,
                    &format!("{key}.queuing"),
                    "conflicts with reject = true: choose one",
                );
                LimitResponse::Reject
            }
            (None, true) => LimitResponse::Reject,
            (Some(queuing), false) => {
                LimitResponse::Queue(self.queuing(queuing, &format!("{key}.queuing")))
            }
            (None, false) => LimitResponse::Queue(DEFAULT_QUEUING),
        };
        Limited {
            nominal_concurrency_shares: as_u32(nominal_concurrency_shares),
            lendable_percent: as_u32(lendable_percent),
            borrowing_limit_percent: borrowing_limit_percent.map(as_u32),
            limit_response,
        }
    }

    fn queuing(&mut self, written: &Spanned<written::Queuing>, key: &str) -> Queuing {
        let queuing = written.get_ref();
        let queues = self.number(
            &queuing.queues,
            &format!("{key}.queues"),
            DEFAULT_QUEUING.queues,
            bounds::QUEUES,
        );
        let hand_size = self.number(
            &queuing.hand_size,
            &format!("{key}.hand_size"),
            DEFAULT_QUEUING.hand_size.min(queues),
            bounds::HAND_SIZE,
        );
        let queue_length_limit = self.number(
            &queuing.queue_length_limit,
            &format!("{key}.queue_length_limit"),
            DEFAULT_QUEUING.queue_length_limit,
            bounds::QUEUE_LENGTH_LIMIT,
        );
        let span = queuing
            .hand_size
            .as_ref()
            .map_or(written.span(), Spanned::span);
        if hand_size > queues {
            self.problem(
                Some(span),
                &format!("{key}.hand_size"),
                format!("{hand_size} is more than the {queues} queues to deal from"),
            );
        } else if deal_bits(queues, hand_size) > MAX_DEAL_BITS {
            self.problem(
                Some(span),
                &format!("{key}.hand_size"),
                format!(
                    "a hand of {hand_size} from {queues} queues needs {:.0} bits of the flow's \
                     hash; at most 60 (use fewer queues or a smaller hand)",
                    deal_bits(queues, hand_size).ceil()
                ),
            );
        }
        Queuing {
            queues,
            hand_size: hand_size.min(queues),
            queue_length_limit,
        }
    }

    fn flow_schemas(
        &mut self,
        written: &[Spanned<written::FlowSchema>],
        levels: &[PriorityLevel],
    ) -> Vec<FlowSchema> {
        let level_index: HashMap<&str, usize> = levels
            .iter()
            .enumerate()
            .map(|(index, level)| (level.name.as_str(), index))
            .collect();
        let mut names = HashSet::new();
        let mut schemas = Vec::new();
        for (index, schema) in written.iter().enumerate() {
            let key = format!("flow_control.flow_schemas[{index}]");
            let schema = schema.get_ref();
            let name = self.name(&schema.name, &format!("{key}.name"));
            if let Some(name) = &name
                && !names.insert(name.clone())
            {
                self.at(
                    &schema.name,
                    &format!("{key}.name"),
                    format!("{:?} names another flow schema too", name.as_str()),
                );
            }
            let priority_level = level_index
                .get(schema.priority_level.get_ref().as_str())
                .copied();
            if priority_level.is_none() {
                self.at(
                    &schema.priority_level,
                    &format!("{key}.priority_level"),
                    format!(
                        "{:?} is not a priority level of [[flow_control.priority_levels]]",
                        schema.priority_level.get_ref()
                    ),
                );
            }
            let matching_precedence = self.number(
                &schema.matching_precedence,
                &format!("{key}.matching_precedence"),
                DEFAULT_PRECEDENCE,
                bounds::MATCHING_PRECEDENCE,
            );
            let distinguisher = self.distinguisher(schema, &key);
            let rules = schema
                .rules
                .iter()
                .enumerate()
                .map(|(i, rule)| self.rule(rule, &format!("{key}.rules[{i}]")))
                .collect();
            if let (Some(name), Some(priority_level)) = (name, priority_level) {
                schemas.push(FlowSchema {
                    name,
                    matching_precedence: as_u32(matching_precedence),
                    priority_level,
                    distinguisher,
                    rules,
                });
            }
        }
        let find = |name: &str| level_index.get(name).copied().unwrap_or(0);
        if !names.iter().any(|name| name.as_str() == EXEMPT) {
            schemas.push(exempt_schema(find(EXEMPT)));
        }
        if !names.iter().any(|name| name.as_str() == CATCH_ALL) {
            schemas.push(catch_all_schema(find(CATCH_ALL)));
        }
        sort_for_matching(&mut schemas);
        schemas
    }

    fn distinguisher(&mut self, schema: &written::FlowSchema, key: &str) -> Option<Distinguisher> {
        let written = schema.distinguisher.as_ref()?;
        match written.get_ref().as_str() {
            "by_user" => Some(Distinguisher::ByUser),
            "by_namespace" => Some(Distinguisher::ByNamespace),
            other => {
                self.at(
                    written,
                    &format!("{key}.distinguisher"),
                    format!("{other:?} is not one of \"by_user\", \"by_namespace\""),
                );
                None
            }
        }
    }

    fn rule(&mut self, written: &Spanned<written::Rule>, key: &str) -> PolicyRules {
        let rule = written.get_ref();
        let mut subjects: Vec<Subject> = rule.users.iter().cloned().map(Subject::User).collect();
        subjects.extend(rule.groups.iter().cloned().map(Subject::Group));
        for account in &rule.service_accounts {
            match account.get_ref().split_once('/') {
                Some((namespace, name)) if !namespace.is_empty() && !name.is_empty() => subjects
                    .push(Subject::ServiceAccount {
                        namespace: namespace.to_owned(),
                        name: name.to_owned(),
                    }),
                _ => self.at(
                    account,
                    &format!("{key}.service_accounts"),
                    format!(
                        "{:?} is not \"<namespace>/<name>\" (the name may be \"*\")",
                        account.get_ref()
                    ),
                ),
            }
        }
        if subjects.is_empty() {
            self.at(
                written,
                key,
                "needs a subject: users, groups or service_accounts",
            );
        }
        if rule.resource_rules.is_empty() && rule.non_resource_rules.is_empty() {
            self.at(written, key, "needs resource_rules or non_resource_rules");
        }
        let resource_rules = rule
            .resource_rules
            .iter()
            .map(|r| self.resource_rule(r, &format!("{key}.resource_rules")))
            .collect();
        let non_resource_rules = rule
            .non_resource_rules
            .iter()
            .map(|r| self.non_resource_rule(r, &format!("{key}.non_resource_rules")))
            .collect();
        PolicyRules {
            subjects,
            resource_rules,
            non_resource_rules,
        }
    }

    fn resource_rule(
        &mut self,
        written: &Spanned<written::ResourceRule>,
        key: &str,
    ) -> ResourceRule {
        let rule = written.get_ref();
        for (field, list) in [
            ("verbs", &rule.verbs),
            ("api_groups", &rule.api_groups),
            ("resources", &rule.resources),
        ] {
            if list.is_empty() {
                self.at(
                    written,
                    &format!("{key}.{field}"),
                    "must not be empty (\"*\" matches all)",
                );
            }
        }
        for (field, list, what) in [
            ("verbs", &rule.verbs, "verbs"),
            ("api_groups", &rule.api_groups, "api groups"),
            ("resources", &rule.resources, "resources"),
            ("namespaces", &rule.namespaces, "namespaces"),
        ] {
            self.star_alone(written, &format!("{key}.{field}"), list, what);
        }
        if !rule.cluster_scope && rule.namespaces.is_empty() {
            self.at(
                written,
                &format!("{key}.namespaces"),
                "is empty and cluster_scope is false: the rule would match no request",
            );
        }
        ResourceRule {
            verbs: rule.verbs.clone(),
            api_groups: rule.api_groups.clone(),
            resources: rule.resources.clone(),
            cluster_scope: rule.cluster_scope,
            namespaces: rule.namespaces.clone(),
        }
    }

    fn non_resource_rule(
        &mut self,
        written: &Spanned<written::NonResourceRule>,
        key: &str,
    ) -> NonResourceRule {
        let rule = written.get_ref();
        if rule.verbs.is_empty() {
            self.at(
                written,
                &format!("{key}.verbs"),
                "must not be empty (\"*\" matches all)",
            );
        }
        self.star_alone(written, &format!("{key}.verbs"), &rule.verbs, "verbs");
        let urls: Vec<String> = rule
            .non_resource_urls
            .iter()
            .map(|url| url.get_ref().clone())
            .collect();
        self.star_alone(
            written,
            &format!("{key}.non_resource_urls"),
            &urls,
            "non-resource URLs",
        );
        if rule.non_resource_urls.is_empty() {
            self.at(
                written,
                &format!("{key}.non_resource_urls"),
                "must not be empty (\"*\" matches all)",
            );
        }
        for url in &rule.non_resource_urls {
            let text = url.get_ref();
            let star_ok = text == "*" || !text.trim_end_matches("/*").contains('*');
            if !(text == "*" || text.starts_with('/')) || !star_ok {
                self.at(
                    url,
                    &format!("{key}.non_resource_urls"),
                    format!("{text:?} must be \"*\", a path, or a path ending in \"/*\""),
                );
            }
        }
        NonResourceRule {
            verbs: rule.verbs.clone(),
            non_resource_urls: urls,
        }
    }

    /// kube's validation of a rule's lists
    /// (`pkg/apis/flowcontrol/validation/validation.go`): `"*"` stands alone
    /// in its list, where it means every value; beside others it would
    /// silently widen them.
    fn star_alone<T>(&mut self, written: &Spanned<T>, key: &str, list: &[String], what: &str) {
        if list.len() > 1 && list.iter().any(|item| item == "*") {
            self.at(
                written,
                key,
                format!("if \"*\" is present, must not specify other {what}"),
            );
        }
    }
}

impl Completer<'_> {
    /// A whole number within `range`; `default` when absent or outside.
    fn number(
        &mut self,
        value: &Option<Spanned<i64>>,
        key: &str,
        default: usize,
        range: std::ops::RangeInclusive<i64>,
    ) -> usize {
        let Some(written) = value else { return default };
        let number = *written.get_ref();
        match bounds::outside(number, &range, |n| n.to_string()) {
            None => usize::try_from(number).unwrap_or(default),
            Some(problem) => {
                self.at(written, key, problem);
                default
            }
        }
    }
}

/// Bits of hash a deal of `hand_size` from `queues` consumes (kube's
/// `shufflesharding.RequiredEntropyBits`).
fn deal_bits(queues: usize, hand_size: usize) -> f64 {
    (queues as f64).log2() * hand_size as f64
}

fn as_u32(value: usize) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

/// kube's order: by precedence, then by name.
fn sort_for_matching(schemas: &mut [FlowSchema]) {
    schemas.sort_by(|a, b| {
        (a.matching_precedence, a.name.as_str()).cmp(&(b.matching_precedence, b.name.as_str()))
    });
}

fn name(text: &str) -> Name {
    // The names below are all valid; a typo would show in every test.
    Name::parse(text).unwrap_or_else(|_| Name(text.to_owned()))
}

fn limited(shares: u32, lendable: u32, response: LimitResponse) -> LevelKind {
    LevelKind::Limited(Limited {
        nominal_concurrency_shares: shares,
        lendable_percent: lendable,
        borrowing_limit_percent: None,
        limit_response: response,
    })
}

fn queue(queues: usize, hand_size: usize) -> LimitResponse {
    LimitResponse::Queue(Queuing {
        queues,
        hand_size,
        queue_length_limit: 50,
    })
}

fn exempt_level() -> PriorityLevel {
    PriorityLevel {
        name: name(EXEMPT),
        kind: LevelKind::Exempt,
    }
}

fn catch_all_level() -> PriorityLevel {
    PriorityLevel {
        name: name(CATCH_ALL),
        kind: limited(5, 0, LimitResponse::Reject),
    }
}

fn everything() -> (Vec<ResourceRule>, Vec<NonResourceRule>) {
    let all = || vec!["*".to_owned()];
    (
        vec![ResourceRule {
            verbs: all(),
            api_groups: all(),
            resources: all(),
            cluster_scope: true,
            namespaces: all(),
        }],
        vec![NonResourceRule {
            verbs: all(),
            non_resource_urls: all(),
        }],
    )
}

fn schema_for_all(
    schema: &str,
    precedence: u32,
    level: usize,
    distinguisher: Option<Distinguisher>,
    subjects: Vec<Subject>,
) -> FlowSchema {
    let (resource_rules, non_resource_rules) = everything();
    FlowSchema {
        name: name(schema),
        matching_precedence: precedence,
        priority_level: level,
        distinguisher,
        rules: vec![PolicyRules {
            subjects,
            resource_rules,
            non_resource_rules,
        }],
    }
}

fn group(name: &str) -> Subject {
    Subject::Group(name.to_owned())
}

fn user(name: &str) -> Subject {
    Subject::User(name.to_owned())
}

fn kube_system_accounts() -> Subject {
    Subject::ServiceAccount {
        namespace: "kube-system".to_owned(),
        name: "*".to_owned(),
    }
}

fn exempt_schema(level: usize) -> FlowSchema {
    schema_for_all(
        EXEMPT,
        1,
        level,
        None,
        vec![group(crate::context::SYSTEM_PRIVILEGED_GROUP)],
    )
}

fn catch_all_schema(level: usize) -> FlowSchema {
    schema_for_all(
        CATCH_ALL,
        10_000,
        level,
        Some(Distinguisher::ByUser),
        vec![
            group(crate::context::ALL_UNAUTHENTICATED),
            group(crate::context::ALL_AUTHENTICATED),
        ],
    )
}

/// kube's suggested configuration (`bootstrap/default.go`), without what
/// only a cluster has (the `node-high` level: no kubelets call a gateway).
fn suggested() -> (Vec<PriorityLevel>, Vec<FlowSchema>) {
    let levels = vec![
        exempt_level(),
        PriorityLevel {
            name: name("system"),
            kind: limited(30, 33, queue(64, 6)),
        },
        PriorityLevel {
            name: name("leader-election"),
            kind: limited(10, 0, queue(16, 4)),
        },
        PriorityLevel {
            name: name("workload-high"),
            kind: limited(40, 50, queue(128, 6)),
        },
        PriorityLevel {
            name: name("workload-low"),
            kind: limited(100, 90, queue(128, 6)),
        },
        PriorityLevel {
            name: name("global-default"),
            kind: limited(20, 50, queue(128, 6)),
        },
        catch_all_level(),
    ];
    let [
        exempt,
        system,
        leader_election,
        workload_high,
        workload_low,
        global_default,
        catch_all,
    ] = [0, 1, 2, 3, 4, 5, 6];
    let by_user = Some(Distinguisher::ByUser);
    let by_namespace = Some(Distinguisher::ByNamespace);
    let everyone = || {
        vec![
            group(crate::context::ALL_UNAUTHENTICATED),
            group(crate::context::ALL_AUTHENTICATED),
        ]
    };
    let leases = |subjects| PolicyRules {
        subjects,
        resource_rules: vec![ResourceRule {
            verbs: ["get", "create", "update"].map(str::to_owned).to_vec(),
            api_groups: vec!["coordination.k8s.io".to_owned()],
            resources: vec!["leases".to_owned()],
            cluster_scope: false,
            namespaces: vec!["kube-system".to_owned()],
        }],
        non_resource_rules: Vec::new(),
    };
    let mut schemas = vec![
        exempt_schema(exempt),
        FlowSchema {
            name: name("probes"),
            matching_precedence: 2,
            priority_level: exempt,
            distinguisher: None,
            rules: vec![PolicyRules {
                subjects: everyone(),
                resource_rules: Vec::new(),
                non_resource_rules: vec![NonResourceRule {
                    verbs: vec!["get".to_owned()],
                    non_resource_urls: ["/healthz", "/readyz", "/livez"]
                        .map(str::to_owned)
                        .to_vec(),
                }],
            }],
        },
        FlowSchema {
            name: name("system-leader-election"),
            matching_precedence: 100,
            priority_level: leader_election,
            distinguisher: by_user,
            rules: vec![leases(vec![
                user("system:kube-controller-manager"),
                user("system:kube-scheduler"),
            ])],
        },
        FlowSchema {
            name: name("workload-leader-election"),
            matching_precedence: 200,
            priority_level: leader_election,
            distinguisher: by_user,
            rules: vec![leases(vec![kube_system_accounts()])],
        },
        schema_for_all(
            "system-nodes",
            500,
            system,
            by_user,
            vec![group("system:nodes")],
        ),
        schema_for_all(
            "kube-controller-manager",
            800,
            workload_high,
            by_namespace,
            vec![user("system:kube-controller-manager")],
        ),
        schema_for_all(
            "kube-scheduler",
            800,
            workload_high,
            by_namespace,
            vec![user("system:kube-scheduler")],
        ),
        schema_for_all(
            "kube-system-service-accounts",
            900,
            workload_high,
            by_namespace,
            vec![kube_system_accounts()],
        ),
        schema_for_all(
            "service-accounts",
            9000,
            workload_low,
            by_user,
            vec![group("system:serviceaccounts")],
        ),
        schema_for_all("global-default", 9900, global_default, by_user, everyone()),
        catch_all_schema(catch_all),
    ];
    sort_for_matching(&mut schemas);
    (levels, schemas)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_suggested_configuration_is_kubes() {
        let (levels, schemas) = suggested();
        let names: Vec<&str> = levels.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "exempt",
                "system",
                "leader-election",
                "workload-high",
                "workload-low",
                "global-default",
                "catch-all"
            ]
        );
        let order: Vec<(&str, u32)> = schemas
            .iter()
            .map(|s| (s.name.as_str(), s.matching_precedence))
            .collect();
        assert_eq!(order.first(), Some(&("exempt", 1)));
        assert_eq!(order.last(), Some(&("catch-all", 10_000)));
        assert!(order.windows(2).all(|w| w[0].1 <= w[1].1));
        for schema in &schemas {
            assert!(schema.priority_level < levels.len());
        }
        for name in names {
            assert!(Name::parse(name).is_ok());
        }
    }

    #[test]
    fn hands_are_limited_by_the_entropy_of_a_deal() {
        assert!(deal_bits(64, 6) <= MAX_DEAL_BITS);
        assert!(deal_bits(128, 8) <= MAX_DEAL_BITS);
        assert!(deal_bits(65_536, 4) > MAX_DEAL_BITS);
    }
}
