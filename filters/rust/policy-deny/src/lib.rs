//! `policy-deny`: a validating admission filter that rejects objects whose
//! fields match configured rules. The logic lives in [`logic`], unit-tested on
//! the host target.

mod logic;

use wasmgate_filter::admission::{self, AdmissionRequest, AdmissionResponse, Guest, Operation};
use wasmgate_filter::types::Status;
use wasmgate_filter::{debug, error, info};

struct Filter;

impl Guest for Filter {
    fn admit(request: AdmissionRequest) -> Result<AdmissionResponse, String> {
        let config = wasmgate_filter::config::<logic::Config>()?;
        let Some(info) = &request.request else {
            return Err(
                "policy-deny reads the request's verb and resource: keep `request` in its `reads`"
                    .to_owned(),
            );
        };
        let input = logic::Input {
            operation: match request.operation {
                Operation::Create => logic::Op::Create,
                Operation::Update => logic::Op::Update,
                Operation::Delete => logic::Op::Delete,
                Operation::Connect => logic::Op::Connect,
            },
            verb: &info.verb,
            resource: &info.resource,
            content_type: &request.content_type,
            object: request.object.as_deref(),
        };
        match config.admit(&input) {
            Ok(logic::Outcome::Allowed(why)) => {
                debug!("{why}");
                Ok(AdmissionResponse::Allowed)
            }
            Ok(logic::Outcome::Denied(denial)) => {
                info!("request {} denied: {}", request.uid, denial.message);
                Ok(AdmissionResponse::Denied(Status {
                    code: denial.code,
                    reason: denial.reason.into(),
                    message: denial.message,
                }))
            }
            Err(message) => {
                error!("{message}");
                Err(message)
            }
        }
    }
}

admission::export!(Filter);
