//! `fault-authz`: a test fixture authorizer that answers, fails or
//! misbehaves as the last segment of the request path says (`/x/deny`,
//! `/apis/g/v1/namespaces/n/widgets/trap`). See the README for the words.

use faults::Fault;
use wasmgate_filter::authorizer::{self, Attributes, Decision, Guest};

const NAME: &str = "fault-authz";

struct Filter;

/// The word a request carries: the last segment of its path.
fn word(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or("")
}

fn answer(word: &str) -> Decision {
    match word {
        "allow" => Decision::Allow,
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
        let word = word(&attributes.request.path);
        wasmgate_filter::debug!("{NAME}: {word:?} for user {:?}", attributes.user.name);
        match faults::parse(word) {
            Fault::Answer(word) => Ok(answer(word)),
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
        assert_eq!(word("/fault/deny"), "deny");
        assert_eq!(
            word("/apis/demo.example.io/v1/namespaces/default/widgets/trap"),
            "trap"
        );
        assert_eq!(word("/x/"), "");
        assert_eq!(word(""), "");
        assert!(matches!(answer("allow"), Decision::Allow));
        assert!(matches!(answer("deny"), Decision::Deny(_)));
        assert!(matches!(answer("no-opinion"), Decision::NoOpinion(_)));
        assert!(matches!(answer("healthz"), Decision::NoOpinion(_)));
    }
}
