//! `compat-0-1-audit`: a test fixture auditor built against
//! `wasmgate:filter@0.1.0` (`wit/filter.wit`) with wit-bindgen directly, not
//! the SDK (which targets the current contract). 0.1.0's auditor exports
//! `audit`, one event a call, where 0.2.0's exports `audit-batch`: the
//! gateway's tests load it to prove the batch backend falls back to one call
//! per event. It writes each event as one line: its audit ID, its stage and
//! the number of this instance's `audit` call (1 for an instance's first),
//! so a test sees how many calls one batch took.

wit_bindgen::generate!({
    path: "../../../wit/filter.wit",
    world: "auditor-filter",
});

use std::sync::atomic::{AtomicU64, Ordering};

use exports::wasmgate::filter::auditor::{Event, Guest, Stage};
use wasmgate::filter::sink;

/// This instance's `audit` calls so far.
static CALLS: AtomicU64 = AtomicU64::new(0);

struct Filter;

impl Guest for Filter {
    fn audit(event: Event) -> Result<(), String> {
        let call = CALLS.fetch_add(1, Ordering::Relaxed) + 1;
        let stage = match event.stage {
            Stage::RequestReceived => "RequestReceived",
            Stage::ResponseStarted => "ResponseStarted",
            Stage::ResponseComplete => "ResponseComplete",
            Stage::Panic => "Panic",
        };
        sink::write(&format!("{} {stage} {call}", event.audit_id))
    }
}

export!(Filter);
