//! Which level a request is audited at: the first rule of the manifest's
//! policy that matches it (kube's `policyRuleEvaluator`, in
//! `staging/src/k8s.io/apiserver/pkg/audit/policy/checker.go`).

use crate::config::stages::{AuditLevel, AuditRule};
use crate::context::UserInfo;
use crate::request_info::RequestInfo;

/// The first rule of `policy` matching the request, when its level audits
/// it: the rule says the level, the stages left out and whether managed
/// fields are. `user` is None when authentication failed.
pub(super) fn matching_rule<'p>(
    policy: &'p [AuditRule],
    user: Option<&UserInfo>,
    info: &RequestInfo,
) -> Option<&'p AuditRule> {
    let rule = policy.iter().find(|rule| rule_matches(rule, user, info))?;
    (rule.level > AuditLevel::None).then_some(rule)
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
            || rule.resources.iter().any(|resources| {
                resources.group == info.api_group.as_str()
                    && (resources.resources.is_empty()
                        || (any(&resources.resource_names, &info.name)
                            && resources
                                .resources
                                .iter()
                                .any(|pattern| resource_matches(pattern, info))))
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
                    None => url == info.path.as_str(),
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
