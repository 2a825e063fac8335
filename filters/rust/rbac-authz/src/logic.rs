//! Pure logic of `rbac-authz`: Kubernetes RBAC rule matching, as
//! `plugin/pkg/auth/authorizer/rbac/rbac.go` (`RuleAllows`) and
//! `pkg/apis/rbac/v1/evaluation_helpers.go` (`VerbMatches`, `APIGroupMatches`,
//! `ResourceMatches`, `ResourceNameMatches`, `NonResourceURLMatches`). No host
//! calls, so it runs in host-target tests.

use serde::Deserialize;
use std::collections::BTreeMap;
use wasmgate_filter::FilterConfig;

/// The filter's `config` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub roles: Vec<Role>,
    #[serde(default)]
    pub bindings: Vec<Binding>,
}

/// A (cluster) role: a named list of policy rules.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Role {
    pub name: String,
    #[serde(default)]
    pub rules: Vec<PolicyRule>,
}

/// Kubernetes' rbac/v1 `PolicyRule`, with its JSON field names.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PolicyRule {
    #[serde(default)]
    pub verbs: Vec<String>,
    #[serde(default)]
    pub api_groups: Vec<String>,
    #[serde(default)]
    pub resources: Vec<String>,
    #[serde(default)]
    pub resource_names: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
}

/// A binding of a role to subjects: a RoleBinding when `namespace` is set (it
/// grants the role only in that namespace), a ClusterRoleBinding otherwise.
#[derive(Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Binding {
    /// A name for reasons and logs; `bindings[i]` when absent.
    #[serde(default)]
    pub name: Option<String>,
    pub role: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub users: Vec<String>,
    #[serde(default)]
    pub groups: Vec<String>,
    #[serde(default)]
    pub service_accounts: Vec<ServiceAccount>,
}

/// A service account subject; its user name is
/// `system:serviceaccount:<namespace>:<name>`.
#[derive(Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceAccount {
    /// Defaults to the binding's namespace; required for cluster-wide bindings.
    #[serde(default)]
    pub namespace: Option<String>,
    pub name: String,
}

/// The authorization attributes RBAC looks at.
#[derive(Debug, Clone, Copy, Default)]
pub struct Request<'a> {
    pub user: &'a str,
    pub groups: &'a [String],
    pub is_resource_request: bool,
    pub verb: &'a str,
    pub api_group: &'a str,
    pub namespace: &'a str,
    pub resource: &'a str,
    pub subresource: &'a str,
    pub name: &'a str,
    pub path: &'a str,
}

#[derive(Debug, PartialEq)]
pub enum Verdict<'a> {
    /// Allowed by this grant; its `Display` is the reason.
    Allow(Grant<'a>),
    /// No rule allows it (RBAC never denies); the reason says what was asked.
    NoOpinion(String),
}

/// The binding, role and subject that allowed a request. The reason is
/// written out only when someone reads it: the decision itself carries none.
#[derive(Debug, PartialEq)]
pub struct Grant<'a> {
    binding: &'a Binding,
    index: usize,
    role: &'a str,
    subject: Subject<'a>,
}

impl std::fmt::Display for Grant<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RBAC: allowed by {} of role {:?} to {}",
            self.binding.describe(self.index),
            self.role,
            self.subject
        )
    }
}

impl FilterConfig for Config {
    const FILTER: &'static str = "rbac-authz";

    /// Validates the config as the Kubernetes API would validate the RBAC
    /// objects.
    fn check(&self) -> Result<(), String> {
        self.validate()
    }
}

impl Config {
    fn validate(&self) -> Result<(), String> {
        let mut names = BTreeMap::new();
        for (i, role) in self.roles.iter().enumerate() {
            if role.name.is_empty() {
                return Err(format!("roles[{i}].name is empty"));
            }
            if names.insert(role.name.as_str(), i).is_some() {
                return Err(format!("roles[{i}]: duplicate role name {:?}", role.name));
            }
            for (j, rule) in role.rules.iter().enumerate() {
                rule.validate()
                    .map_err(|e| format!("roles[{i}] ({:?}).rules[{j}]: {e}", role.name))?;
            }
        }
        for (i, binding) in self.bindings.iter().enumerate() {
            let Some(&role) = names.get(binding.role.as_str()) else {
                return Err(format!("bindings[{i}]: no role named {:?}", binding.role));
            };
            if binding.namespace.as_deref() == Some("") {
                return Err(format!(
                    "bindings[{i}].namespace is empty (leave it out for a cluster-wide binding)"
                ));
            }
            if binding.namespace.is_some()
                && self.roles[role]
                    .rules
                    .iter()
                    .any(|r| !r.non_resource_urls.is_empty())
            {
                // Harmless (such rules can never match in a namespace), but
                // Kubernetes rejects nonResourceURLs in namespaced rules.
                return Err(format!(
                    "bindings[{i}]: role {:?} has nonResourceURLs rules, which a namespaced binding can never grant",
                    binding.role
                ));
            }
            if binding.users.is_empty()
                && binding.groups.is_empty()
                && binding.service_accounts.is_empty()
            {
                return Err(format!(
                    "bindings[{i}] has no users, groups or serviceAccounts"
                ));
            }
            for (j, sa) in binding.service_accounts.iter().enumerate() {
                if sa.name.is_empty() {
                    return Err(format!("bindings[{i}].serviceAccounts[{j}].name is empty"));
                }
                if sa
                    .namespace
                    .as_deref()
                    .or(binding.namespace.as_deref())
                    .unwrap_or("")
                    .is_empty()
                {
                    return Err(format!(
                        "bindings[{i}].serviceAccounts[{j}] needs a namespace in a cluster-wide binding"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Kubernetes' `RBACAuthorizer.Authorize`: cluster-wide bindings first,
    /// then the bindings of the request's namespace, in config order; the first
    /// rule that allows the request wins.
    pub fn authorize(&self, req: &Request<'_>) -> Verdict<'_> {
        let cluster_wide = self
            .bindings
            .iter()
            .enumerate()
            .filter(|(_, b)| b.namespace.is_none());
        let namespaced = self.bindings.iter().enumerate().filter(|(_, b)| {
            !req.namespace.is_empty() && b.namespace.as_deref() == Some(req.namespace)
        });
        for (i, binding) in cluster_wide.chain(namespaced) {
            let Some(subject) = binding.applies_to(req) else {
                continue;
            };
            // Validation made sure the role exists; a binding rarely applies,
            // so finding its role by name costs less than indexing them all.
            let Some(role) = self.roles.iter().find(|role| role.name == binding.role) else {
                continue;
            };
            if role.rules.iter().any(|rule| rule_allows(req, rule)) {
                return Verdict::Allow(Grant {
                    binding,
                    index: i,
                    role: &role.name,
                    subject,
                });
            }
        }
        Verdict::NoOpinion(format!(
            "RBAC: no rules authorize user {:?} with groups {:?} to {} {}",
            req.user,
            req.groups,
            describe_operation(req),
            if req.namespace.is_empty() {
                "cluster-wide".to_string()
            } else {
                format!("in namespace {:?}", req.namespace)
            }
        ))
    }
}

impl PolicyRule {
    /// Kubernetes' `ValidatePolicyRule`.
    fn validate(&self) -> Result<(), String> {
        if self.verbs.is_empty() {
            return Err("verbs must contain at least one value".into());
        }
        if !self.non_resource_urls.is_empty() {
            if !self.api_groups.is_empty()
                || !self.resources.is_empty()
                || !self.resource_names.is_empty()
            {
                return Err(
                    "rules cannot apply to both regular resources and non-resource URLs".into(),
                );
            }
            return Ok(());
        }
        if self.api_groups.is_empty() {
            return Err("resource rules must supply at least one api group".into());
        }
        if self.resources.is_empty() {
            return Err("resource rules must supply at least one resource".into());
        }
        Ok(())
    }
}

impl Binding {
    /// The subject of this binding that the request's user is, or None.
    fn applies_to(&self, req: &Request<'_>) -> Option<Subject<'_>> {
        if let Some(user) = self.users.iter().find(|u| *u == req.user) {
            return Some(Subject::User(user));
        }
        if let Some(group) = self.groups.iter().find(|g| req.groups.contains(g)) {
            return Some(Subject::Group(group));
        }
        for sa in &self.service_accounts {
            let namespace = sa
                .namespace
                .as_deref()
                .or(self.namespace.as_deref())
                .unwrap_or("");
            if matches_service_account(namespace, &sa.name, req.user) {
                return Some(Subject::ServiceAccount {
                    namespace,
                    name: &sa.name,
                });
            }
        }
        None
    }

    fn describe(&self, index: usize) -> String {
        let name = self
            .name
            .clone()
            .unwrap_or_else(|| format!("bindings[{index}]"));
        match &self.namespace {
            Some(ns) => format!("RoleBinding \"{name}/{ns}\""),
            None => format!("ClusterRoleBinding {name:?}"),
        }
    }
}

/// The subject a binding granted its role to, described as Kubernetes does
/// (`User "alice"`) only when a reason is written.
#[derive(Debug, PartialEq)]
enum Subject<'a> {
    User(&'a str),
    Group(&'a str),
    ServiceAccount { namespace: &'a str, name: &'a str },
}

impl std::fmt::Display for Subject<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Subject::User(user) => write!(f, "User {user:?}"),
            Subject::Group(group) => write!(f, "Group {group:?}"),
            Subject::ServiceAccount { namespace, name } => {
                write!(f, "ServiceAccount \"{namespace}/{name}\"")
            }
        }
    }
}

/// `serviceaccount.MatchesUsername`.
fn matches_service_account(namespace: &str, name: &str, user: &str) -> bool {
    user.strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.strip_prefix(namespace))
        .and_then(|rest| rest.strip_prefix(':'))
        == Some(name)
}

fn describe_operation(req: &Request<'_>) -> String {
    if !req.is_resource_request {
        return format!("{:?} nonResourceURL {:?}", req.verb, req.path);
    }
    let mut s = format!("{:?} resource \"{}", req.verb, req.resource);
    if !req.api_group.is_empty() {
        s.push('.');
        s.push_str(req.api_group);
    }
    if !req.subresource.is_empty() {
        s.push('/');
        s.push_str(req.subresource);
    }
    s.push('"');
    if !req.name.is_empty() {
        s.push_str(&format!(" named {:?}", req.name));
    }
    s
}

/// `RuleAllows`.
pub fn rule_allows(req: &Request<'_>, rule: &PolicyRule) -> bool {
    if req.is_resource_request {
        return verb_matches(rule, req.verb)
            && api_group_matches(rule, req.api_group)
            && resource_matches(rule, req.resource, req.subresource)
            && resource_name_matches(rule, req.name);
    }
    verb_matches(rule, req.verb) && non_resource_url_matches(rule, req.path)
}

pub fn verb_matches(rule: &PolicyRule, verb: &str) -> bool {
    rule.verbs.iter().any(|v| v == "*" || v == verb)
}

pub fn api_group_matches(rule: &PolicyRule, group: &str) -> bool {
    rule.api_groups.iter().any(|g| g == "*" || g == group)
}

/// kube's `ResourceMatches`, given the resource and subresource apart: a
/// rule's entry is compared with `resource/subresource` piece by piece, so
/// no combined name is made for each rule a request is checked against.
pub fn resource_matches(rule: &PolicyRule, resource: &str, subresource: &str) -> bool {
    rule.resources.iter().any(|r| {
        r == "*"
            || names_combined(r, resource, subresource)
            || (!subresource.is_empty()
                && r.len() == subresource.len() + 2
                && r.starts_with("*/")
                && r.ends_with(subresource))
    })
}

/// True when `entry` is `resource`, or `resource/subresource` when there is a
/// subresource: kube's combined requested resource.
fn names_combined(entry: &str, resource: &str, subresource: &str) -> bool {
    if subresource.is_empty() {
        return entry == resource;
    }
    entry
        .strip_prefix(resource)
        .and_then(|rest| rest.strip_prefix('/'))
        == Some(subresource)
}

/// An empty list allows every name, including the empty name of create and
/// list requests; a non-empty list never matches those.
pub fn resource_name_matches(rule: &PolicyRule, name: &str) -> bool {
    rule.resource_names.is_empty() || rule.resource_names.iter().any(|n| n == name)
}

pub fn non_resource_url_matches(rule: &PolicyRule, path: &str) -> bool {
    rule.non_resource_urls.iter().any(|u| {
        u == "*" || u == path || (u.ends_with('*') && path.starts_with(u.trim_end_matches('*')))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reason of an allow, or a failure naming the other verdict.
    fn allowed_because(verdict: Verdict<'_>) -> String {
        match verdict {
            Verdict::Allow(grant) => grant.to_string(),
            other => panic!("not allowed: {other:?}"),
        }
    }

    /// Go's `strings.Split(s, ",")`, as kube's tests build rules: `""` is
    /// the one-element list holding the core group.
    fn split(s: &str) -> Vec<String> {
        s.split(',').map(String::from).collect()
    }

    fn rule(verbs: &str, groups: &str, resources: &str) -> PolicyRule {
        PolicyRule {
            verbs: split(verbs),
            api_groups: split(groups),
            resources: split(resources),
            ..Default::default()
        }
    }

    fn url_rule(verbs: &str, urls: &str) -> PolicyRule {
        PolicyRule {
            verbs: split(verbs),
            non_resource_urls: split(urls),
            ..Default::default()
        }
    }

    fn res<'a>(verb: &'a str, group: &'a str, resource: &'a str, sub: &'a str) -> Request<'a> {
        Request {
            is_resource_request: true,
            verb,
            api_group: group,
            resource,
            subresource: sub,
            ..Default::default()
        }
    }

    fn url<'a>(verb: &'a str, path: &'a str) -> Request<'a> {
        Request {
            verb,
            path,
            ..Default::default()
        }
    }

    /// Ported from kube's `TestRuleMatches`.
    #[test]
    fn rule_matches() {
        type Case<'a> = (&'a str, PolicyRule, Vec<(Request<'a>, bool)>);
        let cases: Vec<Case> = vec![
            (
                "star verb, exact match other",
                rule("*", "group1", "resource1"),
                vec![
                    (res("verb1", "group1", "resource1", ""), true),
                    (res("verb1", "group2", "resource1", ""), false),
                    (res("verb1", "group1", "resource2", ""), false),
                    (res("verb2", "group1", "resource1", ""), true),
                    (res("verb2", "group2", "resource2", ""), false),
                ],
            ),
            (
                "star group, exact match other",
                rule("verb1", "*", "resource1"),
                vec![
                    (res("verb1", "group1", "resource1", ""), true),
                    (res("verb1", "group2", "resource1", ""), true),
                    (res("verb1", "group1", "resource2", ""), false),
                    (res("verb2", "group1", "resource1", ""), false),
                ],
            ),
            (
                "star resource, exact match other",
                rule("verb1", "group1", "*"),
                vec![
                    (res("verb1", "group1", "resource1", ""), true),
                    (res("verb1", "group2", "resource1", ""), false),
                    (res("verb1", "group1", "resource2", ""), true),
                    (res("verb2", "group1", "resource1", ""), false),
                    // `*` covers subresources too.
                    (res("verb1", "group1", "resource1", "status"), true),
                ],
            ),
            (
                "tuple expansion",
                rule("verb1,verb2", "group1,group2", "resource1,resource2"),
                vec![
                    (res("verb1", "group1", "resource1", ""), true),
                    (res("verb1", "group2", "resource1", ""), true),
                    (res("verb1", "group1", "resource2", ""), true),
                    (res("verb2", "group2", "resource2", ""), true),
                    (res("verb3", "group2", "resource2", ""), false),
                ],
            ),
            (
                "subresource expansion",
                rule("*", "*", "resource1/subresource1"),
                vec![
                    (res("verb1", "group1", "resource1", "subresource1"), true),
                    (res("verb1", "group2", "resource1", "subresource2"), false),
                    (res("verb1", "group1", "resource2", "subresource1"), false),
                    (res("verb2", "group1", "resource1", "subresource1"), true),
                    (res("verb2", "group1", "resource1", ""), false),
                    // Compared piece by piece: neither a longer resource,
                    // nor a name that only joins up to the entry, matches.
                    (res("verb1", "group1", "resource1x", "subresource1"), false),
                    (res("verb1", "group1", "resource1/", "subresource1"), false),
                    (res("verb1", "group1", "resource1", "subresource1x"), false),
                ],
            ),
            (
                "a resource without its subresources",
                rule("*", "*", "resource1"),
                vec![
                    (res("verb1", "group1", "resource1", ""), true),
                    (res("verb1", "group1", "resource1", "subresource1"), false),
                ],
            ),
            (
                "star subresource",
                rule("*", "*", "*/status"),
                vec![
                    (res("get", "", "pods", "status"), true),
                    (res("get", "apps", "deployments", "status"), true),
                    (res("get", "", "pods", ""), false),
                    (res("get", "", "pods", "log"), false),
                    // `*/status` needs the whole subresource, not a suffix of it.
                    (res("get", "", "pods", "xstatus"), false),
                ],
            ),
            (
                "star nonresource, exact match other",
                url_rule("verb1", "*"),
                vec![
                    (url("verb1", "/foo"), true),
                    (url("verb1", "/foo/bar"), true),
                    (url("verb1", "/foo/baz/one"), true),
                    (url("verb2", "/foo"), false),
                    (url("verb2", "/foo/bar/one"), false),
                ],
            ),
            (
                "star nonresource subpath",
                url_rule("verb1", "/foo/*"),
                vec![
                    (url("verb1", "/foo"), false),
                    (url("verb1", "/foo/bar"), true),
                    (url("verb1", "/foo/baz"), true),
                    (url("verb1", "/foo/bar/one"), true),
                    (url("verb1", "/foo/baz/one"), true),
                    (url("verb1", "/notfoo"), false),
                    (url("verb2", "/foo/bar"), false),
                ],
            ),
            (
                "star verb, exact nonresource",
                url_rule("*", "/foo,/foo/bar/one"),
                vec![
                    (url("verb1", "/foo"), true),
                    (url("verb1", "/foo/bar"), false),
                    (url("verb1", "/foo/baz"), false),
                    (url("verb1", "/foo/bar/one"), true),
                    (url("verb2", "/foo"), true),
                    (url("verb2", "/foo/bar/one"), true),
                ],
            ),
            (
                "trailing stars are all trimmed",
                url_rule("get", "/healthz**"),
                vec![
                    (url("get", "/healthz"), true),
                    (url("get", "/healthz/etcd"), true),
                    (url("get", "/health"), false),
                ],
            ),
            (
                "a resource rule never matches a non-resource request",
                rule("*", "*", "*"),
                vec![(url("get", "/apis"), false)],
            ),
            (
                "a non-resource rule never matches a resource request",
                url_rule("*", "*"),
                vec![(res("get", "", "pods", ""), false)],
            ),
        ];
        for (name, rule, requests) in cases {
            for (req, want) in requests {
                assert_eq!(rule_allows(&req, &rule), want, "{name}: {req:?}");
            }
        }
    }

    #[test]
    fn resource_names() {
        let mut r = rule("get,update,create,list,delete", "", "configmaps");
        r.resource_names = split("my-configmap");
        let named = |verb: &'static str, name: &'static str| Request {
            name,
            ..res(verb, "", "configmaps", "")
        };
        assert!(rule_allows(&named("get", "my-configmap"), &r));
        assert!(rule_allows(&named("update", "my-configmap"), &r));
        assert!(!rule_allows(&named("get", "other"), &r));
        // create and list carry no name, so resourceNames never match them.
        assert!(!rule_allows(&named("create", ""), &r));
        assert!(!rule_allows(&named("list", ""), &r));
        // A list of a single object by field selector is a list with no name.
        r.resource_names.clear();
        assert!(rule_allows(&named("create", ""), &r));
        assert!(rule_allows(&named("list", ""), &r));
    }

    fn config(json: &str) -> Config {
        Config::parse(json).unwrap()
    }

    fn who<'a>(user: &'a str, groups: &'a [String], req: Request<'a>) -> Request<'a> {
        Request {
            user,
            groups,
            ..req
        }
    }

    /// Ported from kube's `TestAuthorizer`.
    #[test]
    fn authorizer() {
        let none: Vec<String> = vec![];
        let group1 = split("group1");
        let admins = split("admins");
        let group1_admins = split("group1,admins");
        let bar = split("bar");
        let admin_group = split("admin");
        let prefixed = split("prefixed");

        // A role bound in ns1 only.
        let c = config(
            r#"{"roles": [{"name": "admin", "rules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]}],
                "bindings": [{"role": "admin", "namespace": "ns1", "users": ["admin"], "groups": ["admins"]}]}"#,
        );
        let ns = |ns: &'static str, r: Request<'static>| Request { namespace: ns, ..r };
        for req in [
            who("admin", &none, ns("ns1", res("get", "", "Pods", ""))),
            who("admin", &none, ns("ns1", res("watch", "", "Pods", ""))),
            who("admin", &group1, ns("ns1", res("watch", "", "Foobar", ""))),
            who("joe", &admins, ns("ns1", res("watch", "", "Foobar", ""))),
            who(
                "joe",
                &group1_admins,
                ns("ns1", res("watch", "", "Foobar", "")),
            ),
        ] {
            assert!(matches!(c.authorize(&req), Verdict::Allow(_)), "{req:?}");
        }
        for req in [
            who("admin", &none, ns("ns2", res("GET", "", "Pods", ""))),
            who("admin", &none, ns("", res("GET", "", "Nodes", ""))),
            who("admin", &admins, ns("ns2", res("GET", "", "Pods", ""))),
            who("admin", &admins, ns("", res("GET", "", "Nodes", ""))),
            // Not a namespace the binding names: cluster-scoped requests.
            who("admin", &admins, ns("", res("get", "", "nodes", ""))),
        ] {
            assert!(
                matches!(c.authorize(&req), Verdict::NoOpinion(_)),
                "{req:?}"
            );
        }

        // Non-resource URLs.
        let c = config(
            r#"{"roles": [
                  {"name": "non-resource-url-getter", "rules": [{"verbs": ["get"], "nonResourceURLs": ["/apis"]}]},
                  {"name": "non-resource-url", "rules": [{"verbs": ["*"], "nonResourceURLs": ["/apis"]}]},
                  {"name": "non-resource-url-prefix", "rules": [{"verbs": ["get"], "nonResourceURLs": ["/apis/*"]}]}],
                "bindings": [
                  {"role": "non-resource-url-getter", "users": ["foo"], "groups": ["bar"]},
                  {"role": "non-resource-url", "users": ["admin"], "groups": ["admin"]},
                  {"role": "non-resource-url-prefix", "users": ["prefixed"], "groups": ["prefixed"]}]}"#,
        );
        for req in [
            who("foo", &none, url("get", "/apis")),
            who("", &bar, url("get", "/apis")),
            who("admin", &none, url("get", "/apis")),
            who("", &admin_group, url("get", "/apis")),
            who("admin", &none, url("watch", "/apis")),
            who("", &admin_group, url("watch", "/apis")),
            who("prefixed", &none, url("get", "/apis/v1")),
            who("", &prefixed, url("get", "/apis/v1")),
            who("prefixed", &none, url("get", "/apis/v1/foobar")),
            who("", &prefixed, url("get", "/apis/v1/foorbar")),
        ] {
            assert!(matches!(c.authorize(&req), Verdict::Allow(_)), "{req:?}");
        }
        for req in [
            who("foo", &none, url("watch", "/apis")),
            who("", &bar, url("watch", "/apis")),
            who("foo", &none, url("get", "/api/v1")),
            who("", &bar, url("get", "/api/v1")),
            who("admin", &none, url("get", "/api/v1")),
            who("", &admin_group, url("get", "/api/v1")),
            who("prefixed", &none, url("get", "/api/v1")),
            who("", &prefixed, url("get", "/api/v1")),
        ] {
            assert!(
                matches!(c.authorize(&req), Verdict::NoOpinion(_)),
                "{req:?}"
            );
        }

        // Subresource resolution.
        let c = config(
            r#"{"roles": [{"name": "admin", "rules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["pods"]}]}],
                "bindings": [{"role": "admin", "namespace": "ns1", "users": ["admin"], "groups": ["admins"]}]}"#,
        );
        assert!(matches!(
            c.authorize(&who("admin", &none, ns("ns1", res("get", "", "pods", "")))),
            Verdict::Allow(_)
        ));
        assert!(matches!(
            c.authorize(&who(
                "admin",
                &none,
                ns("ns1", res("get", "", "pods", "status"))
            )),
            Verdict::NoOpinion(_)
        ));
        let c = config(
            r#"{"roles": [{"name": "admin", "rules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["pods/status"]}]}],
                "bindings": [{"role": "admin", "namespace": "ns1", "users": ["admin"], "groups": ["admins"]}]}"#,
        );
        assert!(matches!(
            c.authorize(&who(
                "admin",
                &none,
                ns("ns1", res("get", "", "pods", "status"))
            )),
            Verdict::Allow(_)
        ));
        assert!(matches!(
            c.authorize(&who("admin", &none, ns("ns1", res("get", "", "pods", "")))),
            Verdict::NoOpinion(_)
        ));
    }

    #[test]
    fn cluster_wide_bindings_apply_everywhere_and_reasons() {
        let c = config(
            r#"{"roles": [
                  {"name": "view", "rules": [{"verbs": ["get", "list", "watch"], "apiGroups": ["", "apps"], "resources": ["pods", "deployments"]}]},
                  {"name": "impersonator", "rules": [{"verbs": ["impersonate"], "apiGroups": [""], "resources": ["users", "groups"], "resourceNames": ["bob", "dev"]}]}],
                "bindings": [
                  {"name": "viewers", "role": "view", "groups": ["dev"]},
                  {"role": "impersonator", "users": ["alice"]},
                  {"name": "sa-view", "role": "view", "namespace": "team", "serviceAccounts": [{"name": "robot"}]}]}"#,
        );
        let dev = split("dev");
        let none: Vec<String> = vec![];
        let r = Request {
            namespace: "anywhere",
            ..who("carol", &dev, res("list", "apps", "deployments", ""))
        };
        assert_eq!(
            allowed_because(c.authorize(&r)),
            r#"RBAC: allowed by ClusterRoleBinding "viewers" of role "view" to Group "dev""#
        );
        let r = who("carol", &dev, res("list", "", "pods", ""));
        assert!(matches!(c.authorize(&r), Verdict::Allow(_)));
        let r = Request {
            namespace: "x",
            name: "p",
            ..who("carol", &dev, res("delete", "", "pods", ""))
        };
        assert_eq!(
            c.authorize(&r),
            Verdict::NoOpinion(
                r#"RBAC: no rules authorize user "carol" with groups ["dev"] to "delete" resource "pods" named "p" in namespace "x""#.into()
            )
        );
        let r = who("carol", &dev, url("get", "/healthz"));
        assert_eq!(
            c.authorize(&r),
            Verdict::NoOpinion(
                r#"RBAC: no rules authorize user "carol" with groups ["dev"] to "get" nonResourceURL "/healthz" cluster-wide"#.into()
            )
        );
        let r = Request {
            subresource: "scale",
            namespace: "ns",
            ..who("carol", &dev, res("get", "apps", "deployments", ""))
        };
        assert_eq!(
            c.authorize(&r),
            Verdict::NoOpinion(
                r#"RBAC: no rules authorize user "carol" with groups ["dev"] to "get" resource "deployments.apps/scale" in namespace "ns""#.into()
            )
        );

        // Impersonation falls out of rule matching.
        let imp = |resource: &'static str, name: &'static str| Request {
            name,
            ..who("alice", &none, res("impersonate", "", resource, ""))
        };
        assert_eq!(
            allowed_because(c.authorize(&imp("users", "bob"))),
            r#"RBAC: allowed by ClusterRoleBinding "bindings[1]" of role "impersonator" to User "alice""#
        );
        assert!(matches!(
            c.authorize(&imp("groups", "dev")),
            Verdict::Allow(_)
        ));
        assert!(matches!(
            c.authorize(&imp("users", "root")),
            Verdict::NoOpinion(_)
        ));
        assert!(matches!(
            c.authorize(&imp("serviceaccounts", "bob")),
            Verdict::NoOpinion(_)
        ));

        // Service accounts, defaulting to the binding's namespace.
        let sa = Request {
            namespace: "team",
            ..who(
                "system:serviceaccount:team:robot",
                &none,
                res("get", "", "pods", ""),
            )
        };
        assert_eq!(
            allowed_because(c.authorize(&sa)),
            r#"RBAC: allowed by RoleBinding "sa-view/team" of role "view" to ServiceAccount "team/robot""#
        );
        let sa_elsewhere = Request {
            namespace: "other",
            ..sa
        };
        assert!(matches!(c.authorize(&sa_elsewhere), Verdict::NoOpinion(_)));
        let other_sa = Request {
            user: "system:serviceaccount:other:robot",
            ..sa
        };
        assert!(matches!(c.authorize(&other_sa), Verdict::NoOpinion(_)));
    }

    #[test]
    fn matches_service_account_user_names() {
        assert!(matches_service_account(
            "ns",
            "sa",
            "system:serviceaccount:ns:sa"
        ));
        assert!(!matches_service_account(
            "ns",
            "sa",
            "system:serviceaccount:ns:sa2"
        ));
        assert!(!matches_service_account(
            "ns",
            "sa",
            "system:serviceaccount:ns2:sa"
        ));
        assert!(!matches_service_account("ns", "sa", "ns:sa"));
    }

    #[test]
    fn bad_configs() {
        for bad in [
            "[]",
            r#"{"roles": [{"name": "r"}], "bindings": [{"role": "missing", "users": ["a"]}]}"#,
            r#"{"roles": [{"name": "r"}, {"name": "r"}]}"#,
            r#"{"roles": [{"name": ""}]}"#,
            r#"{"roles": [{"name": "r", "rules": [{"verbs": [], "apiGroups": [""], "resources": ["pods"]}]}]}"#,
            r#"{"roles": [{"name": "r", "rules": [{"verbs": ["get"], "resources": ["pods"]}]}]}"#,
            r#"{"roles": [{"name": "r", "rules": [{"verbs": ["get"], "apiGroups": [""]}]}]}"#,
            r#"{"roles": [{"name": "r", "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"], "nonResourceURLs": ["/x"]}]}]}"#,
            r#"{"roles": [{"name": "r", "rules": [{"verbs": ["get"], "apigroups": [""], "resources": ["pods"]}]}]}"#,
            r#"{"roles": [{"name": "r", "rules": [{"verbs": ["get"], "nonResourceURLs": ["/x"]}]}], "bindings": [{"role": "r", "namespace": "ns", "users": ["a"]}]}"#,
            r#"{"roles": [{"name": "r"}], "bindings": [{"role": "r", "namespace": "", "users": ["a"]}]}"#,
            r#"{"roles": [{"name": "r"}], "bindings": [{"role": "r"}]}"#,
            r#"{"roles": [{"name": "r"}], "bindings": [{"role": "r", "serviceAccounts": [{"name": "x"}]}]}"#,
        ] {
            let err = Config::parse(bad).unwrap_err();
            assert!(err.starts_with("rbac-authz: bad config: "), "{bad}: {err}");
        }
        assert!(Config::parse("{}").is_ok());
    }
}
