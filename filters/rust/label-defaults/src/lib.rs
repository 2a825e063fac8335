//! `label-defaults`: a mutating admission filter that adds configured labels
//! to `metadata.labels` of created and updated objects, as an RFC 6902 JSON
//! Patch. The logic lives in [`logic`], unit-tested on the host target.

mod logic;

wit_bindgen::generate!({
    path: "../../../wit/filter-0.2.0.wit",
    world: "admission-filter",
});

use exports::wasmgate::filter::admission::{AdmissionRequest, AdmissionResponse, Guest, Operation};
use wasmgate::filter::host;
use wasmgate::filter::types::LogLevel;

struct Filter;

impl Guest for Filter {
    fn admit(request: AdmissionRequest) -> Result<AdmissionResponse, String> {
        let config = match config() {
            Ok(config) => config,
            Err(message) => {
                host::log(LogLevel::Error, &message);
                return Err(message);
            }
        };
        let input = logic::Input {
            operation: match request.operation {
                Operation::Create => logic::Op::Create,
                Operation::Update => logic::Op::Update,
                Operation::Delete => logic::Op::Delete,
                Operation::Connect => logic::Op::Connect,
            },
            verb: &request.request.verb,
            content_type: &request.content_type,
            object: request.object.as_deref(),
        };
        match logic::admit(config, &input) {
            Ok(logic::Outcome::Allowed(why)) => {
                if host::log_enabled(LogLevel::Debug) {
                    host::log(LogLevel::Debug, &why);
                }
                Ok(AdmissionResponse::Allowed)
            }
            Ok(logic::Outcome::Patched(patch)) => {
                if host::log_enabled(LogLevel::Debug) {
                    host::log(
                        LogLevel::Debug,
                        &format!("patching {}: {patch}", request.uid),
                    );
                }
                Ok(AdmissionResponse::Patched(patch))
            }
            Err(message) => {
                host::log(LogLevel::Error, &message);
                Err(message)
            }
        }
    }
}

/// The filter's config, parsed on the instance's first call: a pooled
/// instance serves many calls, all with the same config (a reload makes
/// new instances).
fn config() -> Result<&'static logic::Config, String> {
    static CONFIG: std::sync::OnceLock<Result<logic::Config, String>> = std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| logic::Config::parse(&host::config()))
        .as_ref()
        .map_err(Clone::clone)
}

export!(Filter);
