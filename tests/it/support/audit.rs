//! JSON-lines audit logs, read back event by event.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::BOUND;

/// Every event in a JSON-lines audit file (none if it does not exist yet).
/// Only whole lines count: a last line without its newline is an event the
/// auditor is still writing, read in the middle of its write.
pub fn audit_events(path: &Path) -> Vec<Value> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    text.split_inclusive('\n')
        .filter_map(|line| line.strip_suffix('\n'))
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|error| panic!("not a JSON event ({error}): {line}"))
        })
        .collect()
}

/// The events of one request, in file order.
pub fn events_of(path: &Path, audit_id: &str) -> Vec<Value> {
    audit_events(path)
        .into_iter()
        .filter(|event| event["auditID"] == audit_id)
        .collect()
}

/// The stages of one request's events, in file order.
pub fn stages_of(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|event| event["stage"].as_str().expect("a stage").to_owned())
        .collect()
}

/// Polls (every 20 ms, at most [`BOUND`]) until the request's events are at
/// least `count`, and returns them.
pub async fn wait_for_events(path: &Path, audit_id: &str, count: usize) -> Vec<Value> {
    let started = Instant::now();
    loop {
        let events = events_of(path, audit_id);
        if events.len() >= count {
            return events;
        }
        assert!(
            started.elapsed() < BOUND,
            "timed out waiting for {count} events of {audit_id}; have {}: {events:?}",
            events.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
