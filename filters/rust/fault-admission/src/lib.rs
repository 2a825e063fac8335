//! `fault-admission`: a test fixture admission filter that answers, fails or
//! misbehaves as the object's `metadata.name` says. See the README.

use faults::Fault;
use serde_json::Value;
use wasmgate_filter::admission::{self, AdmissionRequest, AdmissionResponse, Guest};
use wasmgate_filter::types::Status;

const NAME: &str = "fault-admission";
/// The label `mutate` and `patch` add.
const LABEL: &str = "fault-admission";
/// The namespace `move-namespace` moves the object to.
const ELSEWHERE: &str = "elsewhere";
/// The name `rename` gives the object.
const RENAMED: &str = "renamed";

struct Filter;

/// The word a request carries: the object's `metadata.name`, or, for a
/// connect request's options (which have no metadata), the first `command`
/// of an exec; else none.
fn word(object: Option<&Value>) -> &str {
    object
        .and_then(|object| {
            object
                .pointer("/metadata/name")
                .or_else(|| object.pointer("/command/0"))
        })
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// What of the request and its user the filter was given (its `reads`):
/// `request=<verb> user=<name>`, `-` for one it was not.
fn given(request: &AdmissionRequest) -> String {
    let verb = request
        .request
        .as_ref()
        .map_or("-", |info| info.verb.as_str());
    let user = request.user.as_ref().map_or("-", |user| user.name.as_str());
    format!("request={verb} user={user}")
}

fn answer(word: &str, object: Option<Value>, dry_run: bool, given: &str) -> AdmissionResponse {
    let denied = |message: String| {
        AdmissionResponse::Denied(Status {
            code: 403,
            reason: "Forbidden".into(),
            message,
        })
    };
    match (word, object) {
        ("deny", _) => denied(format!("{NAME}: deny requested")),
        ("given", _) => denied(given.to_owned()),
        ("dry-run", _) if dry_run => denied(format!("{NAME}: the request is a dry run")),
        ("mutate", Some(mut object)) => {
            if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                let labels = metadata
                    .entry("labels")
                    .or_insert_with(|| Value::Object(serde_json::Map::new()));
                if let Some(labels) = labels.as_object_mut() {
                    labels.insert(LABEL.into(), Value::String("mutated".into()));
                }
            }
            AdmissionResponse::Mutated(object.to_string())
        }
        ("patch", Some(_)) => AdmissionResponse::Patched(
            serde_json::json!([{"op": "add", "path": "/metadata/annotations", "value": {LABEL: "patched"}}]).to_string(),
        ),
        ("move-namespace", Some(_)) => AdmissionResponse::Patched(
            serde_json::json!([{"op": "add", "path": "/metadata/namespace", "value": ELSEWHERE}])
                .to_string(),
        ),
        ("rename", Some(mut object)) => {
            if let Some(name) = object.pointer_mut("/metadata/name") {
                *name = Value::String(RENAMED.into());
            }
            AdmissionResponse::Mutated(object.to_string())
        }
        _ => AdmissionResponse::Allowed,
    }
}

impl Guest for Filter {
    fn admit(request: AdmissionRequest) -> Result<AdmissionResponse, String> {
        let object = match request.object.as_deref().map(serde_json::from_str::<Value>) {
            None => None,
            Some(Ok(object)) => Some(object),
            Some(Err(error)) => return Err(format!("{NAME}: the object is not JSON: {error}")),
        };
        let word = word(object.as_ref()).to_owned();
        wasmgate_filter::debug!("{NAME}: {word:?} for {}", request.uid);
        match faults::parse(&word) {
            Fault::Answer(word) => Ok(answer(word, object, request.dry_run, &given(&request))),
            Fault::Error => Err(format!("{NAME}: error requested")),
            Fault::Trap => faults::trap(NAME),
            Fault::Loop => faults::spin_forever(),
            Fault::Alloc => faults::exhaust_memory(),
            Fault::Burden(burden) => {
                faults::bear(burden);
                Ok(AdmissionResponse::Allowed)
            }
        }
    }
}

admission::export!(Filter);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_object_name_is_the_word() {
        assert_eq!(word(Some(&json!({"metadata": {"name": "trap"}}))), "trap");
        assert_eq!(word(Some(&json!({"kind": "DeleteOptions"}))), "");
        assert_eq!(word(None), "");
    }

    #[test]
    fn answers() {
        assert!(matches!(
            answer("allow", None, false, ""),
            AdmissionResponse::Allowed
        ));
        assert!(matches!(
            answer("no-opinion", None, false, ""),
            AdmissionResponse::Allowed
        ));
        assert!(
            matches!(answer("deny", None, false, ""), AdmissionResponse::Denied(s) if s.code == 403)
        );
        assert!(matches!(
            answer("dry-run", None, false, ""),
            AdmissionResponse::Allowed
        ));
        assert!(matches!(
            answer("dry-run", None, true, ""),
            AdmissionResponse::Denied(_)
        ));
        match answer(
            "mutate",
            Some(json!({"metadata": {"name": "mutate"}})),
            false,
            "",
        ) {
            AdmissionResponse::Mutated(object) => {
                let object: Value = serde_json::from_str(&object).unwrap();
                assert_eq!(object["metadata"]["labels"][LABEL], "mutated");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            answer("patch", Some(json!({"metadata": {}})), false, ""),
            AdmissionResponse::Patched(_)
        ));
        match answer("move-namespace", Some(json!({"metadata": {}})), false, "") {
            AdmissionResponse::Patched(patch) => assert!(patch.contains(ELSEWHERE), "{patch}"),
            other => panic!("{other:?}"),
        }
        match answer(
            "rename",
            Some(json!({"metadata": {"name": "rename"}})),
            false,
            "",
        ) {
            AdmissionResponse::Mutated(object) => {
                let object: Value = serde_json::from_str(&object).unwrap();
                assert_eq!(object["metadata"]["name"], RENAMED);
            }
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(answer("given", None, false, "request=- user=-"), AdmissionResponse::Denied(s) if s.message == "request=- user=-")
        );
    }
}
