//! A batch of audit events as the auditors are given it: serialised, as
//! kube's log backend writes them (`audit_event`'s JSON lines, with each
//! line's stage beside it), for a `json-auditor`; or as the WIT's event
//! records, for an `auditor`. Each form is made at most once per batch, and
//! only when an auditor takes it; when every auditor takes the lines, each
//! event is rendered as it is queued ([`push_line`]), and the batch holds no
//! events.

use std::sync::OnceLock;

use crate::audit_event::AuditEvent;
use crate::config::stages::AuditStage;
use crate::wasm::convert;
use crate::wasm::filter::{Event, JsonBatch, JsonStage};

/// One batch of events, in the order they happened.
pub struct AuditBatch<'a> {
    form: Form<'a>,
}

/// What a batch was made from.
enum Form<'a> {
    /// The events, made into lines or records when an auditor first asks.
    Events {
        events: &'a [AuditEvent],
        records: OnceLock<Vec<Event>>,
        serialised: OnceLock<JsonBatch>,
    },
    /// Events serialised as they were queued, when every auditor takes them
    /// so (`chain/audit/backend.rs`): the events are gone.
    Serialised(&'a JsonBatch),
}

impl<'a> AuditBatch<'a> {
    /// The batch of `events`, neither serialised nor made records yet.
    pub fn new(events: &'a [AuditEvent]) -> Self {
        AuditBatch {
            form: Form::Events {
                events,
                records: OnceLock::new(),
                serialised: OnceLock::new(),
            },
        }
    }

    /// A batch already serialised, for auditors that take it so.
    pub(crate) fn serialised_already(batch: &'a JsonBatch) -> Self {
        AuditBatch {
            form: Form::Serialised(batch),
        }
    }

    /// The events as the WIT's records, made on the first call; None for a
    /// batch made serialised.
    pub(crate) fn records(&self) -> Option<&[Event]> {
        match &self.form {
            Form::Events {
                events, records, ..
            } => Some(records.get_or_init(|| events.iter().map(convert::audit_event).collect())),
            Form::Serialised(_) => None,
        }
    }

    /// The events serialised, rendered on the first call.
    pub(crate) fn serialised(&self) -> &JsonBatch {
        match &self.form {
            Form::Events {
                events, serialised, ..
            } => serialised.get_or_init(|| render(events)),
            Form::Serialised(batch) => batch,
        }
    }

    /// How many events it holds.
    pub(crate) fn len(&self) -> usize {
        match &self.form {
            Form::Events { events, .. } => events.len(),
            Form::Serialised(batch) => batch.stages.len(),
        }
    }
}

/// Room made for the first line: a Metadata event is 450 to 700 bytes.
const LINE_BYTES: usize = 640;

/// The lines of `events`, in order, and their stages. Once the first line
/// is written, room is made for the others at its length and an eighth
/// more: a batch of events like its first grows (and is copied) once,
/// while it holds one line.
fn render(events: &[AuditEvent]) -> JsonBatch {
    let mut batch = JsonBatch {
        lines: Vec::with_capacity(LINE_BYTES),
        stages: Vec::with_capacity(events.len()),
    };
    for (index, event) in events.iter().enumerate() {
        let start = batch.lines.len();
        if push_line(&mut batch, event) && batch.stages.len() == 1 {
            let line = batch.lines.len() - start;
            let rest = events.len() - index - 1;
            batch.lines.reserve(rest * (line + line / 8));
        }
    }
    batch
}

/// Appends `event`'s line and stage to `batch`; false when it has none
/// ([`AuditEvent::write_line`]).
pub(crate) fn push_line(batch: &mut JsonBatch, event: &AuditEvent) -> bool {
    let written = event.write_line(&mut batch.lines);
    if written {
        batch.stages.push(json_stage(event.stage));
    }
    written
}

fn json_stage(stage: AuditStage) -> JsonStage {
    match stage {
        AuditStage::RequestReceived => JsonStage::RequestReceived,
        AuditStage::ResponseStarted => JsonStage::ResponseStarted,
        AuditStage::ResponseComplete => JsonStage::ResponseComplete,
        AuditStage::Panic => JsonStage::Panic,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit_event::tests::{event, line};
    use crate::config::stages::AuditLevel;

    #[test]
    fn a_batch_is_one_line_per_event_in_order_with_its_stage() {
        let events = [
            AuditEvent {
                stage: AuditStage::RequestReceived,
                ..event()
            },
            AuditEvent {
                level: AuditLevel::None,
                ..event()
            },
            event(),
        ];
        let batch = render(&events);
        assert_eq!(
            batch.stages,
            [JsonStage::RequestReceived, JsonStage::ResponseComplete]
        );
        let text = String::from_utf8(batch.lines).unwrap();
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].trim_end(), line(&events[0]));
        assert_eq!(lines[1].trim_end(), line(&event()));
    }

    /// Records are made for an auditor that takes them, once, every event
    /// (one at level None too: the lines leave it out, records do not).
    #[test]
    fn records_are_made_once_for_every_event() {
        let events = [
            event(),
            AuditEvent {
                level: AuditLevel::None,
                ..event()
            },
        ];
        let batch = AuditBatch::new(&events);
        let records = batch.records().unwrap();
        assert_eq!(records.len(), 2);
        assert!(std::ptr::eq(records, batch.records().unwrap()));
        assert_eq!(batch.serialised().stages.len(), 1);
    }
}
