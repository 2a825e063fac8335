//! kube's debug dumps (`util/flowcontrol/apf_controller_debug.go`), in
//! kube's layout: comma-separated columns aligned as Go's `tabwriter`
//! aligns them (minimum width 8, padding 1), one row per priority level,
//! per queue, or per waiting request (`?includeRequestDetails=1` adds who
//! and what). kube's `dump_requests` lists executing requests too, from
//! the request it keeps while each runs; the gateway keeps no more than the
//! seats of a running request, so it lists the waiting ones. Served behind
//! the chain, as kube serves them.

use std::sync::Arc;
use std::time::SystemTime;

use futures_util::future::BoxFuture;
use http::HeaderValue;
use http::header::CONTENT_TYPE;

use super::Controller;
use super::DEBUG_PREFIX;
use crate::body::{Body, Request, Response};
use crate::handler::{Handler, SharedHandler};
use crate::status::GatewayError;

const QUERY_INCLUDE_REQUEST_DETAILS: &str = "includeRequestDetails";
/// The `StartTime` of a request that has not started: Go's zero time, as
/// kube formats it (`time.Time{}.UTC().Format(time.RFC3339Nano)`).
const NOT_STARTED: &str = "0001-01-01T00:00:00Z";

#[derive(Clone, Copy)]
enum Dump {
    PriorityLevels,
    Queues,
    Requests,
}

/// One dump endpoint of one configuration.
pub(crate) struct DumpEndpoint {
    controller: Arc<Controller>,
    dump: Dump,
}

/// The three endpoints and their paths.
pub(crate) fn endpoints(controller: &Arc<Controller>) -> Vec<(String, SharedHandler)> {
    [
        ("dump_priority_levels", Dump::PriorityLevels),
        ("dump_queues", Dump::Queues),
        ("dump_requests", Dump::Requests),
    ]
    .into_iter()
    .map(|(name, dump)| {
        let handler: SharedHandler = Arc::new(DumpEndpoint {
            controller: controller.clone(),
            dump,
        });
        (format!("{DEBUG_PREFIX}{name}"), handler)
    })
    .collect()
}

impl Handler for DumpEndpoint {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        let response = if request.method() == http::Method::GET {
            let text = match self.dump {
                Dump::PriorityLevels => self.controller.dump_priority_levels(),
                Dump::Queues => self.controller.dump_queues(),
                Dump::Requests => self
                    .controller
                    .dump_requests(include_request_details(request.uri().query())),
            };
            let mut response = http::Response::new(Body::full(text));
            response.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            response
        } else {
            GatewayError::MethodNotAllowed.into_response()
        };
        Box::pin(async move { response })
    }
}

/// kube asks only that the parameter be non-empty.
fn include_request_details(query: Option<&str>) -> bool {
    query.is_some_and(|query| {
        url::form_urlencoded::parse(query.as_bytes())
            .any(|(key, value)| key == QUERY_INCLUDE_REQUEST_DETAILS && !value.is_empty())
    })
}

impl Controller {
    /// The levels and their queues as JSON, for the status page: what
    /// `dump_priority_levels` and `dump_queues` show, one object a level.
    pub(crate) fn status(&self) -> serde_json::Value {
        let levels: Vec<serde_json::Value> = self
            .levels
            .iter()
            .map(|level| {
                let limited = &level.limit;
                let state = limited.lock();
                let totals = state.queues.totals();
                let queues: Vec<serde_json::Value> = state
                    .queues
                    .queue_dumps()
                    .map(|queue| {
                        serde_json::json!({
                            "waiting": queue.waiting,
                            "executing": queue.executing,
                            "seats_in_use": queue.seats_in_use,
                        })
                    })
                    .collect();
                serde_json::json!({
                    "name": level.name,
                    "exempt": limited.exempt,
                    "nominal_seats": limited.nominal,
                    "seats_in_use": totals.seats_in_use,
                    "waiting": totals.waiting,
                    "executing": totals.executing,
                    "dispatched": totals.dispatched,
                    "rejected": totals.rejected,
                    "timed_out": totals.timed_out,
                    "cancelled": totals.cancelled,
                    "queues": queues,
                })
            })
            .collect();
        serde_json::Value::from(levels)
    }

    pub(crate) fn dump_priority_levels(&self) -> String {
        let mut rows = vec![strings(&[
            "PriorityLevelName",
            "ActiveQueues",
            "IsIdle",
            "IsQuiescing",
            "WaitingRequests",
            "ExecutingRequests",
            "DispatchedRequests",
            "RejectedRequests",
            "TimedoutRequests",
            "CancelledRequests",
        ])];
        // By name, as kube's `dumpPriorityLevels` sorts them.
        let mut levels: Vec<_> = self.levels.iter().collect();
        levels.sort_by(|a, b| a.name.cmp(&b.name));
        for level in levels {
            let state = level.limit.lock();
            let totals = state.queues.totals();
            rows.push(vec![
                level.name.clone(),
                state.queues.active_queues().to_string(),
                (totals.waiting == 0 && totals.executing == 0).to_string(),
                // A changed configuration gets a controller of its own: no
                // level here is ever winding down.
                false.to_string(),
                totals.waiting.to_string(),
                totals.executing.to_string(),
                totals.dispatched.to_string(),
                totals.rejected.to_string(),
                totals.timed_out.to_string(),
                totals.cancelled.to_string(),
            ]);
        }
        tabulate(&rows)
    }

    pub(crate) fn dump_queues(&self) -> String {
        let mut rows = vec![strings(&[
            "PriorityLevelName",
            "Index",
            "PendingRequests",
            "ExecutingRequests",
            "SeatsInUse",
            "NextDispatchR",
            "InitialSeatsSum",
            "MaxSeatsSum",
            "TotalWorkSum",
        ])];
        for level in &self.levels {
            // The exempt level has no queues, hence no rows.
            let state = level.limit.lock();
            for (index, queue) in state.queues.queue_dumps().enumerate() {
                rows.push(vec![
                    level.name.clone(),
                    index.to_string(),
                    queue.waiting.to_string(),
                    queue.executing.to_string(),
                    queue.seats_in_use.to_string(),
                    seat_seconds(queue.next_dispatch_r),
                    queue.seats_waiting.to_string(),
                    queue.seats_waiting.to_string(),
                    seat_seconds(super::queueset::work(queue.seats_waiting)),
                ]);
            }
        }
        tabulate(&rows)
    }

    pub(crate) fn dump_requests(&self, include_details: bool) -> String {
        let mut header = strings(&[
            "PriorityLevelName",
            "FlowSchemaName",
            "QueueIndex",
            "RequestIndexInQueue",
            "FlowDistingsher",
            "ArriveTime",
            "InitialSeats",
            "FinalSeats",
            "AdditionalLatency",
            "StartTime",
        ]);
        if include_details {
            header.extend(strings(&[
                "UserName",
                "Verb",
                "APIPath",
                "Namespace",
                "Name",
                "APIVersion",
                "Resource",
                "SubResource",
            ]));
        }
        let mut rows = vec![header];
        for level in &self.levels {
            let state = level.limit.lock();
            for (queue, place, waiting) in state.queues.waiting() {
                let detail = &waiting.payload.detail;
                let schema = self
                    .flow_schemas
                    .get(detail.schema)
                    .map_or("", |s| s.name.as_str());
                let mut row = vec![
                    level.name.clone(),
                    schema.to_owned(),
                    queue.to_string(),
                    place.to_string(),
                    detail.distinguisher.clone(),
                    rfc3339_nano(detail.arrived),
                    waiting.seats().to_string(),
                    "0".to_owned(),
                    "0s".to_owned(),
                    NOT_STARTED.to_owned(),
                ];
                if include_details {
                    row.extend([
                        detail.user.clone(),
                        detail.verb.clone(),
                        detail.path.clone(),
                        detail.namespace.clone(),
                        detail.name.clone(),
                        detail.api_version.clone(),
                        detail.resource.clone(),
                        detail.subresource.clone(),
                    ]);
                }
                rows.push(row);
            }
        }
        tabulate(&rows)
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|item| (*item).to_owned()).collect()
}

/// kube's `SeatSeconds` text: eight decimals and `ss`.
fn seat_seconds(value: f64) -> String {
    format!("{value:.8}ss")
}

/// Go's `time.RFC3339Nano` in UTC: the fraction without trailing zeros. A
/// clock set before 1970 gives the epoch (humantime would panic).
fn rfc3339_nano(time: SystemTime) -> String {
    let time = time.max(SystemTime::UNIX_EPOCH);
    let text = humantime::format_rfc3339_nanos(time).to_string();
    match text.strip_suffix('Z').and_then(|t| t.split_once('.')) {
        Some((seconds, fraction)) => {
            let fraction = fraction.trim_end_matches('0');
            if fraction.is_empty() {
                format!("{seconds}Z")
            } else {
                format!("{seconds}.{fraction}Z")
            }
        }
        None => text,
    }
}

/// Rows as kube writes them: cells joined by `,\t`, then aligned as Go's
/// `tabwriter.NewWriter(w, 8, 0, 1, ' ', 0)` aligns them. Every cell but a
/// line's last ends in a tab and so belongs to a column, as wide as its
/// widest cell plus one space, and at least 8; the last is not padded.
fn tabulate(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![8usize; columns];
    for row in rows {
        for (column, cell) in row.iter().enumerate().take(row.len().saturating_sub(1)) {
            // The cell's text is the value and its comma.
            widths[column] = widths[column].max(cell.chars().count() + 2);
        }
    }
    let mut text = String::new();
    for row in rows {
        for (column, cell) in row.iter().enumerate() {
            if column + 1 == row.len() {
                text.push_str(cell);
            } else {
                let padded = format!("{cell},");
                text.push_str(&format!("{padded:<width$}", width = widths[column]));
            }
        }
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_as_gos_tabwriter_aligns_them() {
        let rows = vec![
            strings(&["PriorityLevelName", "Index", "Last"]),
            strings(&["exempt", "0", "x"]),
        ];
        assert_eq!(
            tabulate(&rows),
            "PriorityLevelName, Index,  Last\nexempt,            0,      x\n"
        );
    }

    #[test]
    fn arrival_times_are_rfc3339_with_nanoseconds_trimmed() {
        let time = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_500);
        assert_eq!(rfc3339_nano(time), "1970-01-01T00:00:01.5Z");
        let time = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(2);
        assert_eq!(rfc3339_nano(time), "1970-01-01T00:00:02Z");
        let before = SystemTime::UNIX_EPOCH - std::time::Duration::from_secs(2);
        assert_eq!(rfc3339_nano(before), "1970-01-01T00:00:00Z");
    }

    #[test]
    fn request_details_are_asked_for_with_a_non_empty_parameter() {
        assert!(include_request_details(Some("includeRequestDetails=1")));
        assert!(!include_request_details(Some("includeRequestDetails=")));
        assert!(!include_request_details(None));
    }
}
