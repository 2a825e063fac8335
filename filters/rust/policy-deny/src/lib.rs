//! `policy-deny`: a validating admission filter that rejects objects whose
//! fields match configured rules. The logic lives in [`logic`], unit-tested on
//! the host target.

mod logic;

wit_bindgen::generate!({
    path: "../../../wit/filter-0.2.0.wit",
    world: "admission-filter",
});

use exports::wasmgate::filter::admission::{AdmissionRequest, AdmissionResponse, Guest, Operation};
use wasmgate::filter::host;
use wasmgate::filter::types::{LogLevel, Status};

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
            resource: &request.request.resource,
            content_type: &request.content_type,
            object: request.object.as_deref(),
        };
        match config.admit(&input) {
            Ok(logic::Outcome::Allowed(why)) => {
                if host::log_enabled(LogLevel::Debug) {
                    host::log(LogLevel::Debug, &why);
                }
                Ok(AdmissionResponse::Allowed)
            }
            Ok(logic::Outcome::Denied(denial)) => {
                host::log(
                    LogLevel::Info,
                    &format!("request {} denied: {}", request.uid, denial.message),
                );
                Ok(AdmissionResponse::Denied(Status {
                    code: denial.code,
                    reason: denial.reason.into(),
                    message: denial.message,
                }))
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
