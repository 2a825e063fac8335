//! Pure logic of `label-defaults`: no host calls, so it runs in host-target
//! tests.

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
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
    Allowed(&'static str),
    /// An RFC 6902 JSON Patch document.
    Patched(String),
}

/// Escapes a JSON Pointer reference token (RFC 6901): `~` as `~0`, `/` as `~1`.
pub fn escape_pointer_token(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// True for the body of a patch request: a patch document, not the object.
fn is_patch(input: &Input<'_>) -> bool {
    // A window compare, not a lower-cased copy searched for a substring: the
    // same answer without an allocation or the two-way searcher's code, on
    // every write the filter sees.
    input.verb == "patch"
        || input
            .content_type
            .as_bytes()
            .windows(b"patch".len())
            .any(|window| window.eq_ignore_ascii_case(b"patch"))
}

pub fn admit(config: &Config, input: &Input<'_>) -> Result<Outcome, String> {
    if !matches!(input.operation, Op::Create | Op::Update) {
        return Ok(Outcome::Allowed("not a create or update"));
    }
    if is_patch(input) {
        return Ok(Outcome::Allowed(
            "a patch request: its body is a patch document, not the object",
        ));
    }
    let Some(body) = input.object else {
        return Ok(Outcome::Allowed("no object"));
    };
    let Shape::Object(metadata) =
        read_metadata(body).map_err(|e| format!("label-defaults: the object is not JSON: {e}"))?
    else {
        return Ok(Outcome::Allowed("the body is not a JSON object"));
    };
    let patch = label_patch(config, metadata.as_ref().map(|m| &m.0));
    if patch.is_empty() {
        return Ok(Outcome::Allowed("every label is already set"));
    }
    serde_json::to_string(&patch)
        .map(Outcome::Patched)
        .map_err(|e| format!("label-defaults: cannot encode the patch: {e}"))
}

/// A JSON value as far as the filter looks into it: of an object, only the
/// one member it asks for is read (the last, when the name is repeated, as
/// a parse into a map keeps it); everything else is checked and skipped,
/// never built, so an object costs its scan, however large it is.
#[derive(Debug, PartialEq)]
pub enum Shape<T> {
    Null,
    /// The member asked for, if the object has it.
    Object(Option<T>),
    /// An array, string, number or boolean.
    Other,
}

/// The object's `metadata`, read only as far as its `labels`.
#[derive(Debug, PartialEq)]
pub struct Metadata(pub Shape<Value>);

impl<'de> Deserialize<'de> for Metadata {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_any(ShapeOf::new("labels"))
            .map(Metadata)
    }
}

/// `body` read as far as `metadata.labels`; an error when it is not JSON.
fn read_metadata(body: &str) -> serde_json::Result<Shape<Metadata>> {
    let mut deserializer = serde_json::Deserializer::from_str(body);
    let shape = (&mut deserializer).deserialize_any(ShapeOf::new("metadata"))?;
    deserializer.end()?;
    Ok(shape)
}

/// Reads a [`Shape`] whose object member is `member`, read as `T`.
struct ShapeOf<T> {
    member: &'static str,
    read: PhantomData<T>,
}

impl<T> ShapeOf<T> {
    fn new(member: &'static str) -> Self {
        ShapeOf {
            member,
            read: PhantomData,
        }
    }
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for ShapeOf<T> {
    type Value = Shape<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Shape<T>, E> {
        Ok(Shape::Null)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Shape<T>, A::Error> {
        let mut found = None;
        while let Some(wanted) = map.next_key_seed(IsKey(self.member))? {
            if wanted {
                found = Some(map.next_value()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(Shape::Object(found))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Shape<T>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Shape::Other)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Shape<T>, E> {
        Ok(Shape::Other)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Shape<T>, E> {
        Ok(Shape::Other)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Shape<T>, E> {
        Ok(Shape::Other)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Shape<T>, E> {
        Ok(Shape::Other)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Shape<T>, E> {
        Ok(Shape::Other)
    }
}

/// Tells whether an object's key is the member asked for, without copying it.
struct IsKey(&'static str);

impl<'de> DeserializeSeed<'de> for IsKey {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for IsKey {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<bool, E> {
        Ok(key == self.0)
    }
}

/// One operation of the patch, serialised as RFC 6902 writes it: typed, so
/// the patch is written straight from the config's labels, with no JSON
/// tree built and dropped on the way.
#[derive(Debug, Serialize)]
pub struct PatchOp<'a> {
    op: PatchVerb,
    path: String,
    value: PatchValue<'a>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "lowercase")]
enum PatchVerb {
    Add,
    Replace,
}

/// What an operation writes: the whole `metadata`, the whole `labels`, or
/// one label's value.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum PatchValue<'a> {
    Metadata {
        labels: &'a BTreeMap<String, String>,
    },
    Labels(&'a BTreeMap<String, String>),
    Label(&'a str),
}

/// The JSON Patch operations that add the configured labels to an object
/// whose `metadata` is `metadata` (None: it has none).
pub fn label_patch<'a>(config: &'a Config, metadata: Option<&Shape<Value>>) -> Vec<PatchOp<'a>> {
    if config.labels.is_empty() {
        return Vec::new();
    }
    let all_labels = &config.labels;
    let labels = match metadata {
        None | Some(Shape::Null) => {
            return vec![PatchOp {
                op: PatchVerb::Add,
                path: "/metadata".into(),
                value: PatchValue::Metadata { labels: all_labels },
            }];
        }
        Some(Shape::Object(labels)) => labels,
        // Not an object: leave it to the API server's validation.
        Some(Shape::Other) => return Vec::new(),
    };
    let labels: &Map<String, Value> = match labels {
        None | Some(Value::Null) => {
            return vec![PatchOp {
                op: PatchVerb::Add,
                path: "/metadata/labels".into(),
                value: PatchValue::Labels(all_labels),
            }];
        }
        Some(Value::Object(labels)) => labels,
        Some(_) => return Vec::new(),
    };
    let mut ops = Vec::new();
    for (key, value) in all_labels {
        let op = match labels.get(key) {
            None => PatchVerb::Add,
            Some(existing) if config.overwrite && existing.as_str() != Some(value.as_str()) => {
                PatchVerb::Replace
            }
            Some(_) => continue,
        };
        ops.push(PatchOp {
            op,
            path: format!("/metadata/labels/{}", escape_pointer_token(key)),
            value: PatchValue::Label(value),
        });
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
            // Media types are case-insensitive (RFC 9110 § 8.3.1).
            Input {
                operation: Op::Update,
                verb: "update",
                content_type: "Application/JSON-PATCH+json",
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

    /// Only the top level's `metadata` and its `labels` count: a member of
    /// that name deeper down is skipped, an escaped key is its text, the
    /// last of a repeated member wins (as a parse into a map keeps it), and
    /// what follows the object, or a broken value inside a skipped member,
    /// is still an error.
    #[test]
    fn reads_the_labels_where_they_are_and_checks_the_rest() {
        let c = cfg(false);
        let all = json!({"example.com/tier": "gold", "team": "platform"});
        let labels_added = json!([{"op": "add", "path": "/metadata/labels", "value": all}]);
        for object in [
            r#"{"spec": {"metadata": {"labels": {"team": "x"}}}, "metadata": {"name": "n"}}"#,
            r#"{"meta\u0064ata": {"name": "n"}, "spec": [1, -2.5e3, true, null, "s", {"a": []}]}"#,
            r#"{"metadata": {"labels": {"team": "platform", "example.com/tier": "gold"}}, "metadata": {"name": "n"}}"#,
            r#"{"metadata": {"labels": null, "annotations": {"labels": {}}}}"#,
        ] {
            assert_eq!(patched(&c, &create(object)), labels_added, "{object}");
        }
        for broken in [
            r#"{"metadata": {"name": "n"}} trailing"#,
            r#"{"spec": {"replicas": 3,}, "metadata": {}}"#,
            r#"{"metadata": {"name": "n"}"#,
        ] {
            assert!(
                admit(&c, &create(broken))
                    .unwrap_err()
                    .starts_with("label-defaults: the object is not JSON: "),
                "{broken}"
            );
        }
        for not_an_object in ["null", "3", "true", "\"s\"", "[{\"metadata\": null}]"] {
            assert!(
                matches!(admit(&c, &create(not_an_object)), Ok(Outcome::Allowed(_))),
                "{not_an_object}"
            );
        }
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
        let labels = Shape::Object(Some(json!({})));
        let patch = serde_json::to_value(label_patch(&c, Some(&labels))).unwrap();
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
