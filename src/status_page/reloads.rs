//! The reload history the status page shows: the last [`KEPT`] reloads,
//! applied or refused, each refused one with its problems.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::Value;

/// How many reloads the page remembers.
pub(crate) const KEPT: usize = 20;

#[derive(Clone, Serialize)]
struct Reload {
    at_unix: u64,
    /// The generation put in force, for an applied one.
    generation: Option<u64>,
    result: &'static str,
    /// Why a refused one was refused.
    error: Option<String>,
}

static HISTORY: Mutex<VecDeque<Reload>> = Mutex::new(VecDeque::new());

/// Records a reload: applied (`Ok(generation)`) or refused (`Err(problems)`).
pub(crate) fn record_reload(outcome: Result<u64, String>) {
    let at_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let reload = match outcome {
        Ok(generation) => Reload {
            at_unix,
            generation: Some(generation),
            result: "success",
            error: None,
        },
        Err(error) => Reload {
            at_unix,
            generation: None,
            result: "failure",
            error: Some(error),
        },
    };
    if let Ok(mut history) = HISTORY.lock() {
        if history.len() == KEPT {
            history.pop_front();
        }
        history.push_back(reload);
    }
}

/// The history, newest first.
pub(crate) fn history() -> Value {
    let reloads: Vec<Reload> = HISTORY
        .lock()
        .map(|history| history.iter().rev().cloned().collect())
        .unwrap_or_default();
    serde_json::to_value(reloads).unwrap_or_default()
}
