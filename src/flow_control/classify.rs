//! Classification: the first flow schema, in matching order, whose rules
//! match the request's user and request info names the request's priority
//! level, and its distinguisher names its flow (kube's `startRequest` in
//! `apf_controller.go` and `matchesFlowSchema` in `rule.go`).

use std::hash::{DefaultHasher, Hash, Hasher};

use crate::config::flow_control::{
    Distinguisher, FlowSchema, NonResourceRule, PolicyRules, ResourceRule, Subject,
};
use crate::context::UserInfo;
use crate::request_info::RequestInfo;

/// `*` in a rule's list.
const EVERY: &str = "*";

/// The flow a request belongs to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Flow<'a> {
    /// Index of the matching schema.
    pub schema: usize,
    /// The user's name or the namespace, as the schema distinguishes flows;
    /// empty when it does not.
    pub distinguisher: &'a str,
    /// The flow's identity for shuffle sharding.
    pub hash: u64,
}

/// The flow of a request: the first schema that matches, else `fallback`
/// (the `catch-all` schema, which matches every authenticated and
/// unauthenticated request unless a manifest narrowed it).
pub(crate) fn classify<'a>(
    schemas: &[FlowSchema],
    fallback: usize,
    info: &'a RequestInfo,
    user: &'a UserInfo,
) -> Flow<'a> {
    let schema = schemas
        .iter()
        .position(|schema| schema.rules.iter().any(|rule| matches(rule, info, user)))
        .unwrap_or(fallback);
    let distinguisher = match schemas.get(schema).and_then(|s| s.distinguisher) {
        Some(Distinguisher::ByUser) => user.name.as_str(),
        Some(Distinguisher::ByNamespace) => info.namespace.as_str(),
        None => "",
    };
    let name = schemas.get(schema).map_or("", |s| s.name.as_str());
    Flow {
        schema,
        distinguisher,
        hash: flow_hash(name, distinguisher),
    }
}

/// kube hashes the schema's name and the distinguisher; any good 64-bit
/// hash deals hands as well.
fn flow_hash(schema: &str, distinguisher: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    schema.hash(&mut hasher);
    distinguisher.hash(&mut hasher);
    hasher.finish()
}

fn matches(rule: &PolicyRules, info: &RequestInfo, user: &UserInfo) -> bool {
    if !rule
        .subjects
        .iter()
        .any(|subject| subject_matches(subject, user))
    {
        return false;
    }
    if info.is_resource_request {
        rule.resource_rules
            .iter()
            .any(|r| resource_matches(r, info))
    } else {
        rule.non_resource_rules
            .iter()
            .any(|r| non_resource_matches(r, info))
    }
}

fn subject_matches(subject: &Subject, user: &UserInfo) -> bool {
    match subject {
        Subject::User(name) => name == EVERY || *name == user.name,
        // kube's `matchesSubject` (`staging/src/k8s.io/apiserver/pkg/util/flowcontrol/rule.go`)
        // answers yes for a group `*` before it looks at the user's groups.
        Subject::Group(name) => name == EVERY || user.groups.iter().any(|g| g == name),
        Subject::ServiceAccount { namespace, name } => user
            .name
            .strip_prefix("system:serviceaccount:")
            .and_then(|rest| rest.split_once(':'))
            .is_some_and(|(ns, account)| ns == namespace && (name == EVERY || name == account)),
    }
}

fn listed(list: &[String], value: &str) -> bool {
    list.iter().any(|item| item == EVERY || item == value)
}

fn resource_matches(rule: &ResourceRule, info: &RequestInfo) -> bool {
    let resource_listed = if info.subresource.is_empty() {
        listed(&rule.resources, &info.resource)
    } else {
        rule.resources.iter().any(|item| {
            item == EVERY
                || item
                    .split_once('/')
                    .is_some_and(|(r, s)| r == info.resource && s == info.subresource)
        })
    };
    let namespace_listed = if info.namespace.is_empty() {
        rule.cluster_scope
    } else {
        listed(&rule.namespaces, &info.namespace)
    };
    listed(&rule.verbs, &info.verb)
        && listed(&rule.api_groups, &info.api_group)
        && resource_listed
        && namespace_listed
}

fn non_resource_matches(rule: &NonResourceRule, info: &RequestInfo) -> bool {
    listed(&rule.verbs, &info.verb)
        && rule
            .non_resource_urls
            .iter()
            .any(|url| url_matches(url, &info.path))
}

/// kube's `matchPolicyRuleNonResourceURL`
/// (`staging/src/k8s.io/apiserver/pkg/util/flowcontrol/rule.go`): `*`, the
/// path itself, or a path under the rule's: the rule without a trailing `*`,
/// with a `/` appended when it does not end in one, is a prefix of it. So
/// `/healthz` covers `/healthz/etcd` (not `/healthzx`), and `/metrics/*`
/// covers `/metrics/x` (not `/metrics`).
fn url_matches(rule: &str, path: &str) -> bool {
    if rule == EVERY || rule == path {
        return true;
    }
    let prefix = rule.strip_suffix('*').unwrap_or(rule);
    match path.strip_prefix(prefix) {
        Some(rest) => prefix.ends_with('/') || rest.starts_with('/'),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Name;

    fn schema(name: &str, distinguisher: Option<Distinguisher>, rule: PolicyRules) -> FlowSchema {
        FlowSchema {
            name: Name::parse(name).unwrap(),
            matching_precedence: 100,
            priority_level: 0,
            distinguisher,
            rules: vec![rule],
        }
    }

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            name: name.to_owned(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..UserInfo::default()
        }
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn info(method: &str, path: &str) -> RequestInfo {
        RequestInfo::resolve(&method.parse().unwrap(), path, None)
    }

    #[test]
    fn the_first_matching_schema_wins_and_names_the_flow() {
        let pods = PolicyRules {
            subjects: vec![Subject::Group("dev".into())],
            resource_rules: vec![ResourceRule {
                verbs: strings(&["get", "list"]),
                api_groups: strings(&[""]),
                resources: strings(&["pods", "pods/log"]),
                cluster_scope: false,
                namespaces: strings(&["*"]),
            }],
            non_resource_rules: Vec::new(),
        };
        let healthz = PolicyRules {
            subjects: vec![Subject::User("*".into())],
            resource_rules: Vec::new(),
            non_resource_rules: vec![NonResourceRule {
                verbs: strings(&["get"]),
                non_resource_urls: strings(&["/healthz", "/metrics/*"]),
            }],
        };
        let schemas = [
            schema("pods", Some(Distinguisher::ByNamespace), pods),
            schema("probes", Some(Distinguisher::ByUser), healthz),
        ];
        let alice = user("alice", &["dev"]);
        let list = info("GET", "/api/v1/namespaces/team-a/pods");
        let flow = classify(&schemas, 1, &list, &alice);
        assert_eq!((flow.schema, flow.distinguisher), (0, "team-a"));
        let log = info("GET", "/api/v1/namespaces/team-a/pods/p/log");
        assert_eq!(classify(&schemas, 9, &log, &alice).schema, 0);
        let exec = info("GET", "/api/v1/namespaces/team-a/pods/p/exec");
        assert_eq!(classify(&schemas, 9, &exec, &alice).schema, 9);
        // Cluster-scoped requests need cluster_scope.
        let all = info("GET", "/api/v1/pods");
        assert_eq!(classify(&schemas, 9, &all, &alice).schema, 9);
        let bob = user("bob", &[]);
        let probe = info("GET", "/healthz");
        let flow = classify(&schemas, 9, &probe, &bob);
        assert_eq!((flow.schema, flow.distinguisher), (1, "bob"));
        assert_eq!(
            classify(&schemas, 9, &info("GET", "/metrics/x"), &bob).schema,
            1
        );
        assert_eq!(
            classify(&schemas, 9, &info("GET", "/metrics"), &bob).schema,
            9
        );
        assert_eq!(
            classify(&schemas, 9, &info("POST", "/healthz"), &bob).schema,
            9
        );
    }

    #[test]
    fn service_accounts_match_by_namespace_and_name() {
        let account = |ns: &str, name: &str| Subject::ServiceAccount {
            namespace: ns.into(),
            name: name.into(),
        };
        let robot = user("system:serviceaccount:kube-system:robot", &[]);
        assert!(subject_matches(&account("kube-system", "*"), &robot));
        assert!(subject_matches(&account("kube-system", "robot"), &robot));
        assert!(!subject_matches(&account("kube-system", "other"), &robot));
        assert!(!subject_matches(&account("default", "*"), &robot));
        assert!(!subject_matches(
            &account("kube-system", "*"),
            &user("robot", &[])
        ));
    }

    /// kube's `matchPolicyRuleNonResourceURL`
    /// (`staging/src/k8s.io/apiserver/pkg/util/flowcontrol/rule.go`): a rule
    /// path matches itself and every path under it (`/healthz` covers
    /// `/healthz/etcd`: the prefix is the rule without its `*`, with a `/`
    /// appended when it has none), so the suggested `probes` schema covers
    /// kube's per-check probes (`/readyz/shutdown`, `/livez/ping`), which
    /// this gateway serves behind the chain; a path that merely starts with
    /// the same letters (`/healthzx`) is not under it.
    #[test]
    fn a_non_resource_rule_covers_the_paths_under_it() {
        let probes = PolicyRules {
            subjects: vec![Subject::User("*".into())],
            resource_rules: Vec::new(),
            non_resource_rules: vec![NonResourceRule {
                verbs: strings(&["get"]),
                non_resource_urls: strings(&["/healthz", "/readyz", "/livez"]),
            }],
        };
        let schemas = [schema("probes", None, probes)];
        let anyone = user("kubelet", &["system:authenticated"]);
        for path in ["/readyz/shutdown", "/livez/ping", "/healthz/log"] {
            assert_eq!(
                classify(&schemas, 9, &info("GET", path), &anyone).schema,
                0,
                "{path} should match the probes schema, as in kube"
            );
        }
        for path in ["/healthzx", "/live", "/readyz-x/y"] {
            assert_eq!(
                classify(&schemas, 9, &info("GET", path), &anyone).schema,
                9,
                "{path} is not under a probe"
            );
        }
    }

    /// kube's `matchesSubject`
    /// (`staging/src/k8s.io/apiserver/pkg/util/flowcontrol/rule.go`): a group
    /// subject named `*` matches every user, a user in no group too; a
    /// named group still needs the user in it.
    #[test]
    fn a_group_subject_star_matches_a_user_without_groups() {
        let nobody = user("system:anonymous", &[]);
        assert!(subject_matches(&Subject::Group("*".into()), &nobody));
        assert!(!subject_matches(
            &Subject::Group("system:unauthenticated".into()),
            &nobody
        ));
    }

    #[test]
    fn flows_of_one_schema_differ_by_distinguisher() {
        assert_eq!(flow_hash("s", "alice"), flow_hash("s", "alice"));
        assert_ne!(flow_hash("s", "alice"), flow_hash("s", "bob"));
        assert_ne!(flow_hash("s", "alice"), flow_hash("t", "alice"));
    }
}
