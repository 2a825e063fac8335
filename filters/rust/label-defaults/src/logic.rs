//! Pure logic of `label-defaults`: no host calls, so it runs in host-target
//! tests.

use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use wasmgate_filter::FilterConfig;

/// The filter's `config` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The labels to add, name to value.
    pub labels: BTreeMap<String, String>,
    /// Replace a label the object already has with a different value.
    #[serde(default)]
    pub overwrite: bool,
}

impl FilterConfig for Config {
    const FILTER: &'static str = "label-defaults";

    fn check(&self) -> Result<(), String> {
        for (key, value) in &self.labels {
            validate_label_key(key).map_err(|e| format!("label key {key:?}: {e}"))?;
            validate_label_value(value)
                .map_err(|e| format!("value {value:?} of label {key:?}: {e}"))?;
        }
        Ok(())
    }
}

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, at most 63 characters: a label
/// name, and a non-empty label value.
fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// A DNS-1123 subdomain: the optional prefix of a label key.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// Kubernetes' `IsQualifiedName`: `[prefix/]name`.
pub fn validate_label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && !is_dns_subdomain(prefix)
    {
        return Err("the prefix must be a lower-case DNS subdomain".into());
    }
    if !is_qualified_name_part(name) {
        return Err("the name must be 1 to 63 alphanumerics, '-', '_' or '.', \
                    starting and ending with an alphanumeric"
            .into());
    }
    Ok(())
}

/// Kubernetes' `IsValidLabelValue`: empty, or a qualified name part.
pub fn validate_label_value(value: &str) -> Result<(), String> {
    if value.is_empty() || is_qualified_name_part(value) {
        Ok(())
    } else {
        Err(
            "a label value must be empty or 1 to 63 alphanumerics, '-', '_' or '.', \
             starting and ending with an alphanumeric"
                .into(),
        )
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
    pub content_type: &'a str,
    pub object: Option<&'a str>,
}

#[derive(Debug, PartialEq)]
pub enum Outcome {
    /// Nothing to do; why, for a debug log line.
    Allowed(String),
    /// An RFC 6902 JSON Patch document.
    Patched(String),
}

/// Escapes a JSON Pointer reference token (RFC 6901): `~` as `~0`, `/` as `~1`.
pub fn escape_pointer_token(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// True for the body of a patch request: a patch document, not the object.
fn is_patch(input: &Input<'_>) -> bool {
    input.verb == "patch" || input.content_type.to_ascii_lowercase().contains("patch")
}

pub fn admit(config: &Config, input: &Input<'_>) -> Result<Outcome, String> {
    if !matches!(input.operation, Op::Create | Op::Update) {
        return Ok(Outcome::Allowed("not a create or update".into()));
    }
    if is_patch(input) {
        return Ok(Outcome::Allowed(
            "a patch request: its body is a patch document, not the object".into(),
        ));
    }
    let Some(body) = input.object else {
        return Ok(Outcome::Allowed("no object".into()));
    };
    let object: Value = serde_json::from_str(body)
        .map_err(|e| format!("label-defaults: the object is not JSON: {e}"))?;
    let Some(object) = object.as_object() else {
        return Ok(Outcome::Allowed("the body is not a JSON object".into()));
    };
    let patch = label_patch(config, object);
    if patch.is_empty() {
        return Ok(Outcome::Allowed("every label is already set".into()));
    }
    serde_json::to_string(&patch)
        .map(Outcome::Patched)
        .map_err(|e| format!("label-defaults: cannot encode the patch: {e}"))
}

/// The JSON Patch operations that add the configured labels to `object`.
pub fn label_patch(config: &Config, object: &Map<String, Value>) -> Vec<Value> {
    if config.labels.is_empty() {
        return Vec::new();
    }
    let all_labels = || -> Value {
        Value::Object(
            config
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect(),
        )
    };
    let metadata = match object.get("metadata") {
        None | Some(Value::Null) => {
            return vec![
                json!({"op": "add", "path": "/metadata", "value": {"labels": all_labels()}}),
            ];
        }
        Some(Value::Object(metadata)) => metadata,
        // Not an object: leave it to the API server's validation.
        Some(_) => return Vec::new(),
    };
    let labels = match metadata.get("labels") {
        None | Some(Value::Null) => {
            return vec![json!({"op": "add", "path": "/metadata/labels", "value": all_labels()})];
        }
        Some(Value::Object(labels)) => labels,
        Some(_) => return Vec::new(),
    };
    let mut ops = Vec::new();
    for (key, value) in &config.labels {
        let path = format!("/metadata/labels/{}", escape_pointer_token(key));
        match labels.get(key) {
            None => ops.push(json!({"op": "add", "path": path, "value": value})),
            Some(existing) if config.overwrite && existing.as_str() != Some(value.as_str()) => {
                ops.push(json!({"op": "replace", "path": path, "value": value}))
            }
            Some(_) => {}
        }
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(overwrite: bool) -> Config {
        Config::parse(&format!(
            r#"{{"labels": {{"team": "platform", "example.com/tier": "gold"}}, "overwrite": {overwrite}}}"#
        ))
        .unwrap()
    }

    fn create(object: &str) -> Input<'_> {
        Input {
            operation: Op::Create,
            verb: "create",
            content_type: "application/json",
            object: Some(object),
        }
    }

    fn patched(config: &Config, input: &Input<'_>) -> Value {
        match admit(config, input).unwrap() {
            Outcome::Patched(p) => serde_json::from_str(&p).unwrap(),
            other => panic!("not patched: {other:?}"),
        }
    }

    /// Applies a patch of `add`/`replace` operations, for checking the result.
    fn apply(mut doc: Value, patch: &Value) -> Value {
        for op in patch.as_array().unwrap() {
            let path = op["path"].as_str().unwrap();
            let (parent, last) = path.rsplit_once('/').unwrap();
            let last = last.replace("~1", "/").replace("~0", "~");
            let target = doc.pointer_mut(parent).unwrap().as_object_mut().unwrap();
            match op["op"].as_str().unwrap() {
                "add" => {
                    target.insert(last, op["value"].clone());
                }
                "replace" => {
                    assert!(target.contains_key(&last));
                    target.insert(last, op["value"].clone());
                }
                other => panic!("unexpected op {other}"),
            }
        }
        doc
    }

    #[test]
    fn table() {
        let c = cfg(false);
        let all = json!({"example.com/tier": "gold", "team": "platform"});
        let rows: Vec<(&str, Value, Value)> = vec![
            // No metadata at all.
            (
                r#"{"kind": "Pod"}"#,
                json!([{"op": "add", "path": "/metadata", "value": {"labels": all}}]),
                json!({"kind": "Pod", "metadata": {"labels": all}}),
            ),
            // metadata: null.
            (
                r#"{"metadata": null}"#,
                json!([{"op": "add", "path": "/metadata", "value": {"labels": all}}]),
                json!({"metadata": {"labels": all}}),
            ),
            // No labels.
            (
                r#"{"metadata": {"name": "x"}}"#,
                json!([{"op": "add", "path": "/metadata/labels", "value": all}]),
                json!({"metadata": {"name": "x", "labels": all}}),
            ),
            // Some labels, one of ours already set to another value (kept).
            (
                r#"{"metadata": {"labels": {"team": "web", "app": "a"}}}"#,
                json!([{"op": "add", "path": "/metadata/labels/example.com~1tier", "value": "gold"}]),
                json!({"metadata": {"labels": {"team": "web", "app": "a", "example.com/tier": "gold"}}}),
            ),
        ];
        for (object, want_patch, want_result) in rows {
            let patch = patched(&c, &create(object));
            assert_eq!(patch, want_patch, "{object}");
            assert_eq!(
                apply(serde_json::from_str(object).unwrap(), &patch),
                want_result,
                "{object}"
            );
        }
    }

    #[test]
    fn overwrite() {
        let c = cfg(true);
        let object = r#"{"metadata": {"labels": {"team": "web", "example.com/tier": "gold"}}}"#;
        assert_eq!(
            patched(&c, &create(object)),
            json!([{"op": "replace", "path": "/metadata/labels/team", "value": "platform"}])
        );
        let update = Input {
            operation: Op::Update,
            verb: "update",
            ..create(object)
        };
        assert!(matches!(admit(&c, &update).unwrap(), Outcome::Patched(_)));
    }

    #[test]
    fn allowed() {
        let c = cfg(false);
        let complete = r#"{"metadata": {"labels": {"team": "web", "example.com/tier": "gold"}}}"#;
        let cases = [
            create(complete),
            Input {
                object: None,
                ..create("")
            },
            create("[1, 2]"),
            create("\"str\""),
            create(r#"{"metadata": "odd"}"#),
            create(r#"{"metadata": {"labels": ["odd"]}}"#),
            Input {
                operation: Op::Delete,
                verb: "delete",
                ..create(r#"{"kind": "DeleteOptions"}"#)
            },
            Input {
                operation: Op::Connect,
                verb: "create",
                ..create("{}")
            },
            Input {
                operation: Op::Update,
                verb: "patch",
                content_type: "application/merge-patch+json",
                ..create("{}")
            },
            Input {
                operation: Op::Update,
                verb: "update",
                content_type: "application/json-patch+json",
                ..create("[]")
            },
        ];
        for input in cases {
            assert!(
                matches!(admit(&c, &input), Ok(Outcome::Allowed(_))),
                "{input:?}"
            );
        }
        let empty = Config::parse(r#"{"labels": {}}"#).unwrap();
        assert!(matches!(
            admit(&empty, &create("{}")),
            Ok(Outcome::Allowed(_))
        ));
        assert!(
            admit(&c, &create("{not json"))
                .unwrap_err()
                .starts_with("label-defaults: ")
        );
    }

    #[test]
    fn pointer_escaping() {
        assert_eq!(escape_pointer_token("a/b~c"), "a~1b~0c");
        assert_eq!(escape_pointer_token("~1"), "~01");
        // `~` is no valid label key character, so build this config by hand.
        let c = Config {
            labels: [("a~b/c".to_string(), "x".to_string())].into(),
            overwrite: false,
        };
        let object: Value = json!({"metadata": {"labels": {}}});
        let patch = Value::Array(label_patch(&c, object.as_object().unwrap()));
        assert_eq!(
            patch,
            json!([{"op": "add", "path": "/metadata/labels/a~0b~1c", "value": "x"}])
        );
        assert_eq!(
            apply(object, &patch),
            json!({"metadata": {"labels": {"a~b/c": "x"}}})
        );
    }

    #[test]
    fn bad_configs() {
        for bad in [
            "[]",
            "{}",
            r#"{"labels": {"team": 1}}"#,
            r#"{"labels": {"": "x"}}"#,
            r#"{"labels": {"-bad": "x"}}"#,
            r#"{"labels": {"Example.com/x": "x"}}"#,
            r#"{"labels": {"x": "has space"}}"#,
            r#"{"labels": {"x": "y"}, "overwrite": "yes"}"#,
            r#"{"labels": {"x": "y"}, "typo": 1}"#,
        ] {
            let err = Config::parse(bad).unwrap_err();
            assert!(
                err.starts_with("label-defaults: bad config: "),
                "{bad}: {err}"
            );
        }
        assert!(
            Config::parse(r#"{"labels": {"app.kubernetes.io/name": "", "x": "a.b-c_d"}}"#).is_ok()
        );
    }
}
