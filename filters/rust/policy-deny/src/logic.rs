//! Pure logic of `policy-deny`: no host calls, so it runs in host-target tests.

use regex::Regex;
use serde::Deserialize;
use serde_json::Value;
use wasmgate_filter::FilterConfig;

/// The filter's `config` table, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    rules: Vec<RawRule>,
    #[serde(default)]
    patch_requests: PatchRequests,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    pointer: String,
    op: String,
    #[serde(default)]
    value: Option<Value>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    resources: Vec<String>,
}

/// What to do with patch requests, whose body is a patch document that the
/// rules cannot judge.
#[derive(Debug, Default, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PatchRequests {
    #[default]
    Allow,
    Deny,
}

/// A checked config: every rule's operator and value agree, every regex
/// compiles.
#[derive(Debug, Deserialize)]
#[serde(try_from = "RawConfig")]
pub struct Config {
    pub rules: Vec<Rule>,
    pub patch_requests: PatchRequests,
}

#[derive(Debug)]
pub struct Rule {
    pub pointer: String,
    pub test: Test,
    pub message: String,
    /// The resources (`deployments`) the rule applies to; empty or `*` = all.
    pub resources: Vec<String>,
}

#[derive(Debug)]
pub enum Test {
    Equals(Value),
    NotEquals(Value),
    Exists,
    Absent,
    Gt(f64),
    Lt(f64),
    Matches(Regex),
    In(Vec<Value>),
}

impl FilterConfig for Config {
    const FILTER: &'static str = "policy-deny";
}

impl TryFrom<RawConfig> for Config {
    type Error = String;

    fn try_from(raw: RawConfig) -> Result<Config, String> {
        let rules = raw
            .rules
            .into_iter()
            .enumerate()
            .map(|(i, r)| Rule::check(r).map_err(|e| format!("rules[{i}]: {e}")))
            .collect::<Result<_, _>>()?;
        Ok(Config {
            rules,
            patch_requests: raw.patch_requests,
        })
    }
}

impl Rule {
    fn check(raw: RawRule) -> Result<Rule, String> {
        if !raw.pointer.is_empty() && !raw.pointer.starts_with('/') {
            return Err(format!(
                "pointer {:?} is not a JSON Pointer (it must start with '/')",
                raw.pointer
            ));
        }
        let need_value = |op: &str| {
            raw.value
                .clone()
                .ok_or_else(|| format!("op {op:?} needs a value"))
        };
        let number = |op: &str| -> Result<f64, String> {
            need_value(op)?
                .as_f64()
                .ok_or_else(|| format!("op {op:?} needs a number value"))
        };
        let test = match raw.op.as_str() {
            "equals" => Test::Equals(need_value("equals")?),
            "not-equals" => Test::NotEquals(need_value("not-equals")?),
            "exists" | "absent" => {
                if raw.value.is_some() {
                    return Err(format!("op {:?} takes no value", raw.op));
                }
                if raw.op == "exists" {
                    Test::Exists
                } else {
                    Test::Absent
                }
            }
            "gt" => Test::Gt(number("gt")?),
            "lt" => Test::Lt(number("lt")?),
            "matches" => {
                let value = need_value("matches")?;
                let pattern = value
                    .as_str()
                    .ok_or("op \"matches\" needs a string value (a regex)")?;
                Test::Matches(
                    Regex::new(pattern).map_err(|e| format!("bad regex {pattern:?}: {e}"))?,
                )
            }
            "in" => match need_value("in")? {
                Value::Array(list) => Test::In(list),
                _ => return Err("op \"in\" needs a list value".into()),
            },
            other => {
                return Err(format!(
                    "unknown op {other:?} (expected equals, not-equals, exists, absent, gt, lt, matches or in)"
                ));
            }
        };
        let message = match raw.message {
            Some(m) if !m.is_empty() => m,
            Some(_) => return Err("message is empty".into()),
            None => match &raw.value {
                Some(v) => format!("{} {} {}", raw.pointer, raw.op, v),
                None => format!("{} {}", raw.pointer, raw.op),
            },
        };
        Ok(Rule {
            pointer: raw.pointer,
            test,
            message,
            resources: raw.resources,
        })
    }

    fn applies_to(&self, resource: &str) -> bool {
        self.resources.is_empty() || self.resources.iter().any(|r| r == "*" || r == resource)
    }

    /// True when the object matches this rule (and so is denied).
    pub fn matches(&self, object: &Value) -> bool {
        let field = object.pointer(&self.pointer).filter(|v| !v.is_null());
        match (&self.test, field) {
            (Test::Exists, field) => field.is_some(),
            (Test::Absent, field) => field.is_none(),
            (_, None) => false,
            (Test::Equals(v), Some(f)) => json_eq(f, v),
            (Test::NotEquals(v), Some(f)) => !json_eq(f, v),
            (Test::Gt(n), Some(f)) => f.as_f64().is_some_and(|f| f > *n),
            (Test::Lt(n), Some(f)) => f.as_f64().is_some_and(|f| f < *n),
            (Test::Matches(re), Some(f)) => f.as_str().is_some_and(|s| re.is_match(s)),
            (Test::In(list), Some(f)) => list.iter().any(|v| json_eq(f, v)),
        }
    }
}

/// JSON equality, with numbers compared by value (`10` equals `10.0`).
pub fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x == y,
            _ => x.as_f64() == y.as_f64(),
        },
        _ => a == b,
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Op {
    Create,
    Update,
    Delete,
    Connect,
}

/// What the filter reads of an admission request.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    pub operation: Op,
    pub verb: &'a str,
    pub resource: &'a str,
    pub content_type: &'a str,
    pub object: Option<&'a str>,
}

#[derive(Debug, PartialEq)]
pub struct Denial {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
}

#[derive(Debug, PartialEq)]
pub enum Outcome {
    /// Allowed; why, for a debug log line.
    Allowed(String),
    Denied(Denial),
}

/// A denial with `message`, which the gateway shows after the filter's
/// manifest name, as kube shows a webhook's (`admission webhook "<name>"
/// denied the request: <message>`).
fn deny(message: &str) -> Outcome {
    Outcome::Denied(Denial {
        code: 403,
        reason: "Forbidden",
        message: message.to_owned(),
    })
}

impl Config {
    pub fn admit(&self, input: &Input<'_>) -> Result<Outcome, String> {
        if !matches!(input.operation, Op::Create | Op::Update) {
            return Ok(Outcome::Allowed("not a create or update".into()));
        }
        if input.verb == "patch" || input.content_type.to_ascii_lowercase().contains("patch") {
            return Ok(match self.patch_requests {
                PatchRequests::Allow => Outcome::Allowed(
                    "a patch request: its body is a patch document, which the rules cannot judge"
                        .into(),
                ),
                PatchRequests::Deny => deny("patch requests are not allowed; use update"),
            });
        }
        let Some(body) = input.object else {
            return Ok(Outcome::Allowed("no object".into()));
        };
        let object: Value = serde_json::from_str(body)
            .map_err(|e| format!("policy-deny: the object is not JSON: {e}"))?;
        for rule in self.rules.iter().filter(|r| r.applies_to(input.resource)) {
            if rule.matches(&object) {
                return Ok(deny(&rule.message));
            }
        }
        Ok(Outcome::Allowed("no rule matches".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(pointer: &str, op: &str, value: Option<Value>) -> Rule {
        let mut raw = json!({"pointer": pointer, "op": op});
        if let Some(v) = value {
            raw["value"] = v;
        }
        Rule::check(serde_json::from_value(raw).unwrap()).unwrap()
    }

    #[test]
    fn ops() {
        let obj = json!({
            "metadata": {"name": "web", "labels": {"env": "prod", "a/b": "slash", "t~": "tilde"}},
            "spec": {"replicas": 12, "ratio": 0.5, "hostNetwork": false, "nothing": null,
                     "image": "registry.example.com/web:1.2", "tags": ["a", "b"]}
        });
        let rows: Vec<(&str, &str, Option<Value>, bool)> = vec![
            ("/spec/replicas", "gt", Some(json!(10)), true),
            ("/spec/replicas", "gt", Some(json!(12)), false),
            ("/spec/replicas", "gt", Some(json!(11.5)), true),
            ("/spec/replicas", "lt", Some(json!(13)), true),
            ("/spec/replicas", "lt", Some(json!(12)), false),
            ("/spec/ratio", "lt", Some(json!(1)), true),
            ("/metadata/name", "gt", Some(json!(1)), false),
            ("/spec/missing", "gt", Some(json!(1)), false),
            ("/metadata/labels/env", "equals", Some(json!("prod")), true),
            ("/metadata/labels/env", "equals", Some(json!("dev")), false),
            ("/spec/replicas", "equals", Some(json!(12.0)), true),
            ("/spec/hostNetwork", "equals", Some(json!(false)), true),
            ("/spec/tags", "equals", Some(json!(["a", "b"])), true),
            (
                "/metadata/labels/a~1b",
                "equals",
                Some(json!("slash")),
                true,
            ),
            ("/metadata/labels/t~0", "equals", Some(json!("tilde")), true),
            (
                "/metadata/labels/env",
                "not-equals",
                Some(json!("dev")),
                true,
            ),
            (
                "/metadata/labels/env",
                "not-equals",
                Some(json!("prod")),
                false,
            ),
            // not-equals needs the field: absence is what `absent` is for.
            (
                "/metadata/labels/team",
                "not-equals",
                Some(json!("x")),
                false,
            ),
            ("/spec/hostNetwork", "exists", None, true),
            ("/spec/nothing", "exists", None, false),
            ("/spec/missing", "exists", None, false),
            ("/spec/missing", "absent", None, true),
            ("/spec/nothing", "absent", None, true),
            ("/spec/hostNetwork", "absent", None, false),
            (
                "/spec/image",
                "matches",
                Some(json!(r"^registry\.example\.com/")),
                true,
            ),
            ("/spec/image", "matches", Some(json!(r":latest$")), false),
            ("/spec/image", "matches", Some(json!(r"\d+\.\d+")), true),
            ("/spec/image", "matches", Some(json!(r"(?i)REGISTRY")), true),
            ("/spec/replicas", "matches", Some(json!("12")), false),
            (
                "/metadata/labels/env",
                "in",
                Some(json!(["prod", "staging"])),
                true,
            ),
            ("/metadata/labels/env", "in", Some(json!(["dev"])), false),
            ("/spec/replicas", "in", Some(json!([1, 12])), true),
            ("/spec/missing", "in", Some(json!([null])), false),
            ("", "exists", None, true),
        ];
        for (pointer, op, value, want) in rows {
            let r = rule(pointer, op, value.clone());
            assert_eq!(r.matches(&obj), want, "{pointer} {op} {value:?}");
        }
    }

    fn input(object: &str) -> Input<'_> {
        Input {
            operation: Op::Create,
            verb: "create",
            resource: "deployments",
            content_type: "application/json",
            object: Some(object),
        }
    }

    #[test]
    fn admit() {
        let c = Config::parse(
            r#"{"rules": [
                {"pointer": "/spec/replicas", "op": "gt", "value": 10, "message": "replicas above 10 are not allowed"},
                {"pointer": "/metadata/labels/env", "op": "equals", "value": "prod", "message": "no prod here", "resources": ["pods"]},
                {"pointer": "/spec/hostNetwork", "op": "exists"}
            ]}"#,
        )
        .unwrap();
        let denied = |m: &str| {
            Outcome::Denied(Denial {
                code: 403,
                reason: "Forbidden",
                message: m.to_owned(),
            })
        };
        assert_eq!(
            c.admit(&input(r#"{"spec": {"replicas": 11}}"#)).unwrap(),
            denied("replicas above 10 are not allowed")
        );
        assert!(matches!(
            c.admit(&input(r#"{"spec": {"replicas": 10}}"#)).unwrap(),
            Outcome::Allowed(_)
        ));
        // The env rule is only for pods.
        let prod = r#"{"metadata": {"labels": {"env": "prod"}}}"#;
        assert!(matches!(
            c.admit(&input(prod)).unwrap(),
            Outcome::Allowed(_)
        ));
        assert_eq!(
            c.admit(&Input {
                resource: "pods",
                ..input(prod)
            })
            .unwrap(),
            denied("no prod here")
        );
        // Default message.
        assert_eq!(
            c.admit(&input(r#"{"spec": {"hostNetwork": true}}"#))
                .unwrap(),
            denied("/spec/hostNetwork exists")
        );
        // Updates are checked too; deletes, connects, bodiless and patch requests are not.
        let big = r#"{"spec": {"replicas": 50}}"#;
        assert!(matches!(
            c.admit(&Input {
                operation: Op::Update,
                verb: "update",
                ..input(big)
            })
            .unwrap(),
            Outcome::Denied(_)
        ));
        for skipped in [
            Input {
                operation: Op::Delete,
                verb: "delete",
                ..input(big)
            },
            Input {
                operation: Op::Connect,
                ..input(big)
            },
            Input {
                object: None,
                ..input(big)
            },
            Input {
                operation: Op::Update,
                verb: "patch",
                content_type: "application/merge-patch+json",
                ..input(big)
            },
        ] {
            assert!(
                matches!(c.admit(&skipped).unwrap(), Outcome::Allowed(_)),
                "{skipped:?}"
            );
        }
        // Non-object bodies simply match nothing.
        assert!(matches!(
            c.admit(&input("[1]")).unwrap(),
            Outcome::Allowed(_)
        ));
        assert!(
            c.admit(&input("{oops"))
                .unwrap_err()
                .starts_with("policy-deny: ")
        );

        let denying = Config::parse(r#"{"patch_requests": "deny", "rules": []}"#).unwrap();
        let patch = Input {
            operation: Op::Update,
            verb: "patch",
            content_type: "application/json-patch+json",
            ..input("[]")
        };
        assert_eq!(
            denying.admit(&patch).unwrap(),
            Outcome::Denied(Denial {
                code: 403,
                reason: "Forbidden",
                message: "patch requests are not allowed; use update".into(),
            })
        );
    }

    #[test]
    fn bad_configs() {
        for bad in [
            "[]",
            "{}",
            r#"{"rules": [{"pointer": "spec", "op": "exists"}]}"#,
            r#"{"rules": [{"pointer": "/a", "op": "bigger", "value": 1}]}"#,
            r#"{"rules": [{"pointer": "/a", "op": "gt"}]}"#,
            r#"{"rules": [{"pointer": "/a", "op": "gt", "value": "10"}]}"#,
            r#"{"rules": [{"pointer": "/a", "op": "in", "value": "x"}]}"#,
            r#"{"rules": [{"pointer": "/a", "op": "matches", "value": "("}]}"#,
            r#"{"rules": [{"pointer": "/a", "op": "matches", "value": 1}]}"#,
            r#"{"rules": [{"pointer": "/a", "op": "exists", "value": 1}]}"#,
            r#"{"rules": [{"pointer": "/a", "op": "exists", "message": ""}]}"#,
            r#"{"rules": [{"pointer": "/a", "op": "exists", "mesage": "typo"}]}"#,
            r#"{"rules": [], "name": "policy"}"#,
            r#"{"rules": [], "patch_requests": "maybe"}"#,
        ] {
            let err = Config::parse(bad).unwrap_err();
            assert!(err.starts_with("policy-deny: bad config: "), "{bad}: {err}");
        }
    }
}
