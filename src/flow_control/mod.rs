//! API Priority and Fairness: kube's flow control
//! (`staging/src/k8s.io/apiserver/pkg/util/flowcontrol/`), on the gateway's
//! requests. One [`Controller`] per configuration (each chain snapshot owns
//! its own, so a reload never moves a queued request to other queues):
//!
//! ```text
//! request ─> classify: first flow schema that matches ─> priority level
//!              │ flow = (schema, user or namespace)
//!              ├─ exempt level ─────────────────────────────> runs now
//!              └─ limited level: its share of the seats
//!                   shuffle sharding: the flow's hand of queues, the shortest
//!                   fair queuing: the head of least virtual finish runs next
//!                   no seat before a quarter of the deadline ──> 429
//! ```
//!
//! - [`classify`]: schemas, rules and distinguishers.
//! - [`width`]: how many seats a request takes (LIST by its `limit`).
//! - [`queueset`]: one level's queues, seats and virtual time.
//! - [`dispatch`]: levels, the seats split by shares, borrowing, the wait
//!   for a seat.
//! - [`debug`]: kube's `/debug/api_priority_and_fairness/dump_*` endpoints.
//! - [`metrics`]: kube's `apiserver_flowcontrol_*` series.
//!
//! The chain's step is `chain/priority_and_fairness.rs`.

pub(crate) mod classify;
pub(crate) mod debug;
pub(crate) mod dispatch;
pub(crate) mod metrics;
pub(crate) mod queueset;
pub(crate) mod width;

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use http::HeaderValue;
use sha2::{Digest, Sha256};

use crate::config::flow_control::{CATCH_ALL, FlowControl, FlowSchema};
use crate::context::UserInfo;
use crate::request_info::RequestInfo;
use classify::Flow;
use dispatch::Level;
use metrics::SchemaMetrics;

pub(crate) use dispatch::{RequestDetail, Work};

pub(crate) use crate::config::flow_control::DEBUG_PREFIX;

/// One configuration's flow control.
pub(crate) struct Controller {
    /// In matching order.
    flow_schemas: Vec<FlowSchema>,
    schemas: Vec<Schema>,
    levels: Vec<Level>,
    /// The schema a request that matches none goes to.
    catch_all: usize,
    /// How long a request without a deadline waits in its queue.
    default_request_wait: Duration,
    started: Instant,
}

/// What a schema needs at run time besides its configuration.
struct Schema {
    level: usize,
    uid: HeaderValue,
    metrics: SchemaMetrics,
}

impl Controller {
    /// Builds the levels and their queues, and starts borrowing between
    /// them (for as long as the controller lives) when a runtime is there
    /// to run it.
    pub(crate) fn new(config: &FlowControl) -> Arc<Controller> {
        let levels = dispatch::levels(config);
        let schemas = config
            .schemas
            .iter()
            .map(|schema| Schema {
                level: schema.priority_level,
                uid: uid("flowschema", schema.name.as_str()),
                metrics: SchemaMetrics::new(
                    &levels[schema.priority_level].name,
                    schema.name.as_str(),
                ),
            })
            .collect();
        let catch_all = config
            .schemas
            .iter()
            .position(|schema| schema.name.as_str() == CATCH_ALL)
            .unwrap_or(config.schemas.len().saturating_sub(1));
        let controller = Arc::new(Controller {
            flow_schemas: config.schemas.clone(),
            schemas,
            levels,
            catch_all,
            default_request_wait: config.default_request_wait,
            started: Instant::now(),
        });
        // kube divides the seats as it digests a configuration
        // (`finishQueueSetReconfigsLocked` in apf_controller.go), on no
        // demand yet.
        controller.adjust_limits(Instant::now());
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(borrow_periodically(Arc::downgrade(&controller)));
        }
        controller
    }

    /// The flow of a request.
    pub(crate) fn classify<'a>(&self, info: &'a RequestInfo, user: &'a UserInfo) -> Flow<'a> {
        classify::classify(&self.flow_schemas, self.catch_all, info, user)
    }

    /// `X-Kubernetes-PF-FlowSchema-UID` and `X-Kubernetes-PF-PriorityLevel-UID`
    /// of a flow.
    pub(crate) fn uids(&self, flow: &Flow<'_>) -> (HeaderValue, HeaderValue) {
        let schema = &self.schemas[flow.schema];
        (schema.uid.clone(), self.levels[schema.level].uid.clone())
    }
}

async fn borrow_periodically(controller: Weak<Controller>) {
    let mut ticks = tokio::time::interval(dispatch::BORROWING_PERIOD);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let Some(controller) = controller.upgrade() else {
            return;
        };
        controller.adjust_limits(Instant::now());
    }
}

/// A stable UID for a configured object, as kube gives each API object
/// one: derived from its kind and name, so it survives reloads that keep
/// the name (a UUID of version 8, "custom").
fn uid(kind: &str, name: &str) -> HeaderValue {
    let digest = Sha256::new()
        .chain_update(kind)
        .chain_update([0])
        .chain_update(name)
        .finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    let uuid = uuid::Builder::from_custom_bytes(bytes).into_uuid();
    HeaderValue::from_str(&uuid.hyphenated().to_string())
        .unwrap_or_else(|_| HeaderValue::from_static("unknown"))
}
