//! `{{name}}`: an authorizer (world `authorizer-filter`), scaffolded by
//! `wasmgate new-filter`. As scaffolded it allows every request: put your
//! policy in `authorize` and answer `Decision::Deny(reason)` or
//! `Decision::NoOpinion(reason)` where it applies.

use serde::Deserialize;
use wasmgate_filter::authorizer::{self, Attributes, Decision, Guest};
use wasmgate_filter::{FilterConfig, debug};

/// The manifest's `config` table, kept whole: make it a struct of the keys
/// you read (with `#[serde(deny_unknown_fields)]`, a typo is a bad config).
#[derive(Deserialize)]
#[serde(transparent)]
struct Config(serde_json::Map<String, serde_json::Value>);

impl FilterConfig for Config {
    const FILTER: &'static str = "{{name}}";
}

struct Filter;

impl Guest for Filter {
    fn authorize(attributes: Attributes) -> Result<Decision, String> {
        // `Err` is this filter's own failure: the manifest's failure_policy decides.
        let config = wasmgate_filter::config::<Config>()?;
        let request = &attributes.request;
        // Formatted only when the gateway's log keeps debug lines.
        debug!(
            "{} {} {} (config: {} keys)",
            attributes.user.name,
            request.verb,
            request.path,
            config.0.len()
        );
        Ok(Decision::Allow)
    }
}

authorizer::export!(Filter);
