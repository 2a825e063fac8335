//! `compat-0-3-audit`: a test fixture auditor built against
//! `wasmgate:filter@0.3.0` (`wit/filter-0.3.0.wit`) with wit-bindgen
//! directly, not the SDK (which targets the current contract). 0.4.0 added
//! an auditor that takes its batch serialised by the gateway and left the
//! record auditor as it was; the gateway's tests load this one to prove a
//! 0.3.0 record auditor still loads and is given the events' fields. It
//! writes each event as one line: its audit ID, its stage, its user, its
//! response code (`-` before there is one) and the size of the batch it
//! came in.

wit_bindgen::generate!({
    path: "../../../wit/filter-0.3.0.wit",
    world: "auditor-filter",
});

use exports::wasmgate::filter::auditor::{Event, Guest, Stage};
use wasmgate::filter::sink;

struct Filter;

impl Guest for Filter {
    fn audit_batch(events: Vec<Event>) -> Result<(), String> {
        for event in &events {
            sink::write(&line(event, events.len()))?;
        }
        Ok(())
    }
}

fn line(event: &Event, batch: usize) -> String {
    let stage = match event.stage {
        Stage::RequestReceived => "RequestReceived",
        Stage::ResponseStarted => "ResponseStarted",
        Stage::ResponseComplete => "ResponseComplete",
        Stage::Panic => "Panic",
    };
    let code = event
        .response_status
        .as_ref()
        .map_or_else(|| "-".to_owned(), |status| status.code.to_string());
    format!(
        "{} {stage} {} {code} {batch}",
        event.audit_id, event.user.name
    )
}

export!(Filter);
