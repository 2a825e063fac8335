//! API Priority and Fairness (kube's `WithPriorityAndFairness`,
//! `staging/src/k8s.io/apiserver/pkg/server/filters/priority-and-fairness.go`),
//! installed instead of max-in-flight when `[flow_control]` is on: the
//! request is classified into a flow of a priority level, waits for its
//! seats there ([`crate::flow_control`]), and holds them until its response
//! body has been sent. A watch holds its seat only until its response head
//! is ready (its set-up); other long-running requests
//! ([`crate::context::is_long_running`], upgrades included) are not
//! tracked, as in kube. Every answer, the 429 included, names the flow schema and priority
//! level that judged it by UID.

use std::sync::Arc;
use std::time::Instant;

use futures_util::future::BoxFuture;
use http::HeaderName;

use super::audit::{AuditContext, Layer};
use crate::body::{Request, Response};
use crate::context::{RequestContext, Terminated};
use crate::flow_control::{Controller, RequestDetail, Work, width};
use crate::handler::{Handler, SharedHandler};
use crate::request_info::RequestInfo;
use crate::status::GatewayError;

pub(crate) const FLOW_SCHEMA_UID: HeaderName =
    HeaderName::from_static("x-kubernetes-pf-flowschema-uid");
pub(crate) const PRIORITY_LEVEL_UID: HeaderName =
    HeaderName::from_static("x-kubernetes-pf-prioritylevel-uid");

pub(crate) struct PriorityAndFairness {
    pub controller: Arc<Controller>,
    pub next: SharedHandler,
}

impl Handler for PriorityAndFairness {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        // kube's filter serves long-running requests other than watches
        // without a seat; an upgrade is long-running too.
        let long_running = crate::context::is_long_running(&request);
        let tracked = RequestContext::of(request.extensions())
            .info
            .as_ref()
            .map(|info| info.verb == "watch" || !long_running);
        match tracked {
            Some(true) => Box::pin(self.admit_then_serve(request)),
            Some(false) => self.next.call(request),
            None => Box::pin(async {
                GatewayError::internal("the request reached flow control without request info")
                    .into_response()
            }),
        }
    }
}

impl PriorityAndFairness {
    async fn admit_then_serve(&self, request: Request) -> Response {
        let admitted = {
            let context = RequestContext::of(request.extensions());
            let user = context.user_or_anonymous();
            let default_info = RequestInfo::default();
            let info = context.info.as_ref().unwrap_or(&default_info);
            let flow = self.controller.classify(info, user);
            let uids = self.controller.uids(&flow);
            let watch = info.verb == "watch";
            let work = Work {
                seats: width::seats(info, request.uri().query()),
                watch,
            };
            let received = context.received.map_or_else(Instant::now, |r| r.instant);
            let until = self.controller.queue_deadline(received, context.deadline);
            let detail = || RequestDetail::new(&flow, info, user);
            // Timed for audit's latency annotations (kube's APF queue-wait
            // tracker), when the request is audited.
            let audit = request.extensions().get::<AuditContext>();
            let asked = audit.map(|_| Instant::now());
            let admitted = self.controller.admit(&flow, work, until, detail).await;
            if let (Some(audit), Some(asked)) = (audit, asked) {
                audit.took(Layer::ApfQueueWait, asked.elapsed());
            }
            (admitted, uids, watch)
        };
        let (admitted, (schema_uid, level_uid), watch) = admitted;
        let mut response = match admitted {
            Ok(seat) if watch => {
                let response = self.next.call(request).await;
                drop(seat);
                response
            }
            Ok(seat) => self
                .next
                .call(request)
                .await
                .map(|body| body.with_guard(seat)),
            Err(rejection) => {
                let mut response = GatewayError::TooManyRequests {
                    message: "Too many requests, please try again later.".to_owned(),
                    retry_after_seconds: rejection.retry_after_seconds,
                }
                .into_response();
                // kube's `RecordRequestTermination` with 429.
                response.extensions_mut().insert(Terminated);
                response
            }
        };
        let headers = response.headers_mut();
        headers.insert(FLOW_SCHEMA_UID, schema_uid);
        headers.insert(PRIORITY_LEVEL_UID, level_uid);
        response
    }
}
