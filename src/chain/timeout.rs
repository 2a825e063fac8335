//! Request deadline and timeout (kube's `WithRequestDeadline` and
//! `WithTimeoutForNonLongRunningRequests`): a request that is not
//! long-running must produce its response within the request timeout, or
//! within its own `?timeout=` when that is shorter; past it the client gets a
//! 504 Status and the work inside is cancelled. Long-running requests (watch,
//! proxy, exec, ...) are exempt.

use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;

use crate::body::{Request, Response};
use crate::context::Deadline;
use crate::handler::{Handler, SharedHandler};
use crate::request_info::RequestInfo;
use crate::status::GatewayError;

pub struct Timeout {
    pub request_timeout: Duration,
    pub next: SharedHandler,
}

impl Handler for Timeout {
    fn call(&self, mut request: Request) -> BoxFuture<'_, Response> {
        Box::pin(async move {
            let long_running = request
                .extensions()
                .get::<RequestInfo>()
                .is_some_and(RequestInfo::is_long_running);
            if long_running {
                return self.next.call(request).await;
            }
            let timeout = match requested_timeout(request.uri().query()) {
                Ok(Some(asked)) => asked.min(self.request_timeout),
                Ok(None) => self.request_timeout,
                Err(message) => return GatewayError::BadRequest { message }.into_response(),
            };
            request
                .extensions_mut()
                .insert(Deadline(Instant::now() + timeout));
            match tokio::time::timeout(timeout, self.next.call(request)).await {
                Ok(response) => response,
                Err(_) => GatewayError::Timeout {
                    message: "request did not complete within the allotted timeout".to_owned(),
                }
                .into_response(),
            }
        })
    }
}

/// The client's `?timeout=` (a Go duration such as `30s`), if it sent one.
/// As in kube, a timeout of 0 or less means the client set none.
fn requested_timeout(query: Option<&str>) -> Result<Option<Duration>, String> {
    let Some(query) = query else { return Ok(None) };
    let Some((_, value)) =
        url::form_urlencoded::parse(query.as_bytes()).find(|(key, _)| key == "timeout")
    else {
        return Ok(None);
    };
    let (negative, magnitude) = match value.strip_prefix('-') {
        Some(magnitude) => (true, magnitude),
        None => (false, value.strip_prefix('+').unwrap_or(&value)),
    };
    // Go's durations allow a bare "0".
    let parsed = if magnitude == "0" {
        Ok(Duration::ZERO)
    } else {
        crate::config::parse_duration(magnitude)
    };
    match parsed {
        Ok(timeout) if negative || timeout.is_zero() => Ok(None),
        Ok(timeout) => Ok(Some(timeout)),
        Err(message) => Err(format!(
            "invalid timeout specified in the request URL: {message}"
        )),
    }
}
