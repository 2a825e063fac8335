//! `fault-authz`: a test fixture authorizer that answers, fails or
//! misbehaves as the last segment of the request path says (`/x/deny`,
//! `/apis/g/v1/namespaces/n/widgets/trap`), or, in an impersonation check
//! (which has no path), as the name impersonated (`Impersonate-User: trap`).
//! See the README for the words.

use faults::Fault;
use wasmgate_filter::authorizer::{self, Attributes, Decision, Guest};
use wasmgate_filter::types::RequestInfo;

const NAME: &str = "fault-authz";

/// What `log-lines` logs.
const LOG_LINES: &str = "one line\nforged: a second line\r\u{1b}[2K";

struct Filter;

/// The word a request carries: the last segment of its path, or the name
/// an impersonation check (which has no path) asks about.
fn word(request: &RequestInfo) -> &str {
    if request.path.is_empty() {
        return &request.name;
    }
    request.path.rsplit('/').next().unwrap_or("")
}

/// The optional request attributes the filter was given (its `reads`), as
/// `key=value` (`key=-` for an absent one) separated by spaces.
fn given(request: &RequestInfo) -> String {
    [
        ("api-prefix", &request.api_prefix),
        ("api-version", &request.api_version),
        ("label-selector", &request.label_selector),
        ("field-selector", &request.field_selector),
    ]
    .map(|(key, value)| format!("{key}={}", value.as_deref().unwrap_or("-")))
    .join(" ")
}

fn answer(word: &str, request: &RequestInfo) -> Decision {
    if let Some(kib) = word
        .strip_prefix("log-")
        .and_then(|kib| kib.parse::<usize>().ok())
    {
        // One line of `kib` KiB for the gateway's log: what it keeps of a
        // line is the host's to bound.
        wasmgate_filter::warn!("{NAME}: {}", "l".repeat(kib.saturating_mul(1024)));
        return Decision::Allow;
    }
    match word {
        "given" => Decision::Deny(given(request)),
        "allow" => Decision::Allow,
        "log-lines" => {
            // One line for the gateway's log that holds a line break, a
            // carriage return and a terminal's escape sequence.
            wasmgate_filter::warn!("{NAME}: {LOG_LINES}");
            Decision::Allow
        }
        "deny" => Decision::Deny(format!("{NAME}: deny requested")),
        // What WASI lets the filter see, told back in a denial: the
        // environment variable FAULT_ENV, and the file /data/fault.txt.
        "env" => Decision::Deny(format!(
            "env: {}",
            std::env::var("FAULT_ENV").unwrap_or_else(|_| "unset".into())
        )),
        "file" => Decision::Deny(match std::fs::read_to_string("/data/fault.txt") {
            Ok(text) => format!("file: {}", text.trim()),
            Err(error) => format!("file unreadable: {error}"),
        }),
        _ => Decision::NoOpinion(format!("{NAME}: no opinion on {word:?}")),
    }
}

impl Guest for Filter {
    fn authorize(attributes: Attributes) -> Result<Decision, String> {
        let word = word(&attributes.request);
        wasmgate_filter::debug!("{NAME}: {word:?} for user {:?}", attributes.user.name);
        match faults::parse(word) {
            Fault::Answer(word) => Ok(answer(word, &attributes.request)),
            Fault::Error => Err(format!("{NAME}: error requested")),
            Fault::Trap => faults::trap(NAME),
            Fault::Loop => faults::spin_forever(),
            Fault::Alloc => faults::exhaust_memory(),
            Fault::Burden(burden) => {
                faults::bear(burden);
                Ok(Decision::Allow)
            }
        }
    }
}

authorizer::export!(Filter);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_path_segment_is_the_word() {
        let at = |path: &str| RequestInfo {
            path: path.into(),
            ..request(None)
        };
        assert_eq!(word(&at("/fault/deny")), "deny");
        assert_eq!(
            word(&at(
                "/apis/demo.example.io/v1/namespaces/default/widgets/trap"
            )),
            "trap"
        );
        assert_eq!(word(&at("/x/")), "");
        // An impersonation check has no path: the name is the word.
        let impersonating = RequestInfo {
            verb: "impersonate".into(),
            resource: "users".into(),
            name: "trap".into(),
            ..at("")
        };
        assert_eq!(word(&impersonating), "trap");
        let request = request(None);
        assert!(matches!(answer("allow", &request), Decision::Allow));
        assert!(matches!(answer("deny", &request), Decision::Deny(_)));
        assert!(matches!(
            answer("no-opinion", &request),
            Decision::NoOpinion(_)
        ));
        assert!(matches!(
            answer("healthz", &request),
            Decision::NoOpinion(_)
        ));
    }

    fn request(version: Option<&str>) -> RequestInfo {
        RequestInfo {
            is_resource_request: true,
            path: "/api/v1/pods/given".into(),
            verb: "get".into(),
            api_prefix: None,
            api_group: String::new(),
            api_version: version.map(str::to_owned),
            namespace: String::new(),
            resource: "pods".into(),
            subresource: String::new(),
            name: "given".into(),
            label_selector: Some(String::new()),
            field_selector: None,
        }
    }

    #[test]
    fn given_spells_out_the_options() {
        let Decision::Deny(reason) = answer("given", &request(Some("v1"))) else {
            panic!("given denies");
        };
        assert_eq!(
            reason,
            "api-prefix=- api-version=v1 label-selector= field-selector=-"
        );
    }
}
