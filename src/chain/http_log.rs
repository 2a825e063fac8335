//! The HTTP log (kube's `WithHTTPLogging` and latency tracking): one line per
//! request, after the response, with its verb, path, code, latency, user,
//! audit ID and, when the request is traced, its trace ID. At `debug` level so the hot path pays nothing by default.

use std::time::Instant;

use futures_util::future::BoxFuture;

use crate::body::{Request, Response};
use crate::context::{AuditId, UserInfo};
use crate::handler::{Handler, SharedHandler};
use crate::request_info::RequestInfo;

pub(crate) struct HttpLog {
    pub next: SharedHandler,
}

impl Handler for HttpLog {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        if !tracing::enabled!(target: "wasmgate::http", tracing::Level::DEBUG) {
            return self.next.call(request);
        }
        let start = Instant::now();
        let method = request.method().clone();
        let uri = request.uri().clone();
        let verb = request
            .extensions()
            .get::<RequestInfo>()
            .map(|info| info.verb.clone())
            .unwrap_or_default();
        let audit_id = request
            .extensions()
            .get::<AuditId>()
            .map(|id| id.0.clone())
            .unwrap_or_default();
        let trace_id = crate::traces::trace_id(request.extensions()).unwrap_or_default();
        Box::pin(async move {
            let response = self.next.call(request).await;
            let user = response
                .extensions()
                .get::<UserInfo>()
                .map(|u| u.name.as_str())
                .unwrap_or("");
            tracing::debug!(
                target: "wasmgate::http",
                %method, %uri, %verb, code = response.status().as_u16(),
                latency_us = start.elapsed().as_micros() as u64, user, audit_id, trace_id,
                "request served"
            );
            response
        })
    }
}
