//! `label-defaults`: a mutating admission filter that adds configured labels
//! to `metadata.labels` of created and updated objects, as an RFC 6902 JSON
//! Patch. The logic lives in [`logic`], unit-tested on the host target.

mod logic;

use wasmgate_filter::admission::{self, AdmissionRequest, AdmissionResponse, Guest, Operation};
use wasmgate_filter::{debug, error};

struct Filter;

impl Guest for Filter {
    fn admit(request: AdmissionRequest) -> Result<AdmissionResponse, String> {
        let config = wasmgate_filter::config::<logic::Config>()?;
        let input = logic::Input {
            operation: match request.operation {
                Operation::Create => logic::Op::Create,
                Operation::Update => logic::Op::Update,
                Operation::Delete => logic::Op::Delete,
                Operation::Connect => logic::Op::Connect,
            },
            // Absent when the manifest's `reads` leaves `request` out: a patch
            // is then told by its content type alone.
            verb: request
                .request
                .as_ref()
                .map_or("", |info| info.verb.as_str()),
            content_type: &request.content_type,
            object: request.object.as_deref(),
        };
        match logic::admit(config, &input) {
            Ok(logic::Outcome::Allowed(why)) => {
                debug!("{why}");
                Ok(AdmissionResponse::Allowed)
            }
            Ok(logic::Outcome::Patched(patch)) => {
                debug!("patching {}: {patch}", request.uid);
                Ok(AdmissionResponse::Patched(patch))
            }
            Err(message) => {
                error!("{message}");
                Err(message)
            }
        }
    }
}

admission::export!(Filter);
