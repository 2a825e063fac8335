//! What the status page draws: the chain in force (every step, in the
//! order `chain::build` recorded them, the `filter` label of those it times,
//! and each stage's filters from the manifest), the servers with their
//! routes, and the configuration's flow control; made when a snapshot is
//! built, published when it goes live, and filled with the numbers of the
//! moment on each poll.

use std::sync::{Arc, RwLock};

use serde_json::{Value, json};

use super::exposition::Samples;
use crate::config::stages::{FilterSpec, Isolation, Mode};
use crate::config::{Config, RouteHandler};
use crate::flow_control::Controller;

/// The chain, servers and flow control of one snapshot, as the page draws them.
pub(crate) struct Layout {
    pub generation: u64,
    steps: Vec<Step>,
    servers: Vec<ServerLayout>,
    flow_control: Option<Arc<Controller>>,
}

struct Step {
    name: &'static str,
    /// The `filter` label of `apiserver_request_filter_duration_seconds`,
    /// for a timed step.
    timed_as: Option<&'static str>,
    filters: Vec<FilterLayout>,
}

struct FilterLayout {
    name: String,
    /// `mutating` or `validating` for admission, else empty.
    kind: &'static str,
    isolation: &'static str,
    mode: &'static str,
}

struct ServerLayout {
    name: String,
    routes: Vec<RouteLayout>,
}

struct RouteLayout {
    route: String,
    upstream: Option<String>,
}

static CURRENT: RwLock<Option<Arc<Layout>>> = RwLock::new(None);

/// A step of the chain, and the `filter` label it is timed under, if any.
pub(crate) type StepTiming = (&'static str, Option<&'static str>);

/// Makes `layout` the one the page draws: its snapshot is now in force.
pub(crate) fn publish(layout: &Arc<Layout>) {
    if let Ok(mut current) = CURRENT.write() {
        *current = Some(layout.clone());
    }
}

pub(crate) fn current() -> Option<Arc<Layout>> {
    CURRENT.read().ok().and_then(|current| current.clone())
}

impl Layout {
    /// The layout of the chain built from `config`, whose steps are `steps`
    /// in request order.
    pub(crate) fn new(
        generation: u64,
        config: &Config,
        steps: &[StepTiming],
        flow_control: Option<Arc<Controller>>,
    ) -> Layout {
        let stages = &config.stages;
        let filters = |kind: &'static str, specs: &[FilterSpec]| {
            specs
                .iter()
                .map(|spec| FilterLayout {
                    name: spec.name.to_string(),
                    kind,
                    isolation: match spec.isolation {
                        Isolation::Pooled => "pooled",
                        Isolation::PerRequest => "per-request",
                    },
                    mode: match spec.mode {
                        Mode::Enforce => "enforce",
                        Mode::Monitor => "monitor",
                    },
                })
                .collect::<Vec<_>>()
        };
        let steps = steps
            .iter()
            .map(|&(name, timed_as)| Step {
                name,
                timed_as,
                filters: match name {
                    "authentication" => filters("", &stages.authentication.filters),
                    "audit" => filters("", &stages.audit.filters),
                    "authorization" => filters("", &stages.authorization.filters),
                    "admission" => {
                        let mut both = filters("mutating", &stages.admission.mutating);
                        both.extend(filters("validating", &stages.admission.validating));
                        both
                    }
                    _ => Vec::new(),
                },
            })
            .collect();
        let servers = config
            .servers
            .iter()
            .map(|server| ServerLayout {
                name: server.name.to_string(),
                routes: server
                    .routes
                    .iter()
                    .map(|route| RouteLayout {
                        route: route.matcher.path().to_owned(),
                        upstream: match &route.handler {
                            RouteHandler::Upstream(upstream) => Some(upstream.url.to_string()),
                            RouteHandler::Static(_) => None,
                        },
                    })
                    .collect(),
            })
            .collect();
        Layout {
            generation,
            steps,
            servers,
            flow_control,
        }
    }
}

const OUTCOMES: [&str; 5] = ["answer", "error", "trap", "timeout", "exhausted"];

impl Layout {
    pub(crate) fn chain(&self, samples: &Samples) -> Value {
        let steps: Vec<Value> = self
            .steps
            .iter()
            .map(|step| {
                let filters: Vec<Value> = step
                    .filters
                    .iter()
                    .map(|filter| filter.status(samples))
                    .collect();
                let Some(timed_as) = step.timed_as else {
                    return json!({"step": step.name, "timed_as": Value::Null, "filters": filters});
                };
                let by_step = [("filter", timed_as)];
                let latency = "apiserver_request_filter_duration_seconds";
                json!({
                    "step": step.name,
                    "timed_as": timed_as,
                    "count": samples.sum(&format!("{latency}_count"), &by_step),
                    "p50_seconds": samples.quantile(latency, &by_step, 0.5),
                    "p99_seconds": samples.quantile(latency, &by_step, 0.99),
                    "filters": filters,
                })
            })
            .collect();
        Value::from(steps)
    }

    pub(crate) fn servers(&self, samples: &Samples) -> Value {
        let servers: Vec<Value> = self
            .servers
            .iter()
            .map(|server| {
                let routes: Vec<Value> = server
                    .routes
                    .iter()
                    .map(|route| route.status(&server.name, samples))
                    .collect();
                json!({"name": server.name, "routes": routes})
            })
            .collect();
        Value::from(servers)
    }

    /// Flow control's levels and queues now, or null when it is off.
    pub(crate) fn flow_control(&self) -> Value {
        self.flow_control
            .as_ref()
            .map_or(Value::Null, |controller| controller.status())
    }
}

impl FilterLayout {
    fn status(&self, samples: &Samples) -> Value {
        let name = [("filter", self.name.as_str())];
        let calls: serde_json::Map<String, Value> = OUTCOMES
            .iter()
            .map(|outcome| {
                let labels = [("filter", self.name.as_str()), ("outcome", outcome)];
                let count = samples.sum("wasmgate_filter_calls_total", &labels);
                ((*outcome).to_owned(), Value::from(count))
            })
            .collect();
        let latency = "wasmgate_filter_call_duration_seconds";
        json!({
            "name": self.name,
            "kind": self.kind,
            "isolation": self.isolation,
            "mode": self.mode,
            "calls": calls,
            "p50_seconds": samples.quantile(latency, &name, 0.5),
            "p99_seconds": samples.quantile(latency, &name, 0.99),
        })
    }
}

impl RouteLayout {
    fn status(&self, server: &str, samples: &Samples) -> Value {
        let Some(upstream) = &self.upstream else {
            return json!({"route": self.route, "upstream": Value::Null});
        };
        let labels = [
            ("server", server),
            ("route", self.route.as_str()),
            ("upstream", upstream.as_str()),
        ];
        let by_class: serde_json::Map<String, Value> = ["1xx", "2xx", "3xx", "4xx", "5xx"]
            .iter()
            .map(|class| {
                let mut with_code = labels.to_vec();
                with_code.push(("code", class));
                let count = samples.sum("wasmgate_upstream_requests_total", &with_code);
                ((*class).to_owned(), Value::from(count))
            })
            .collect();
        let errors: serde_json::Map<String, Value> = ["connect", "exchange", "timeout"]
            .iter()
            .map(|error| {
                let mut with_error = labels.to_vec();
                with_error.push(("error", error));
                let count = samples.sum("wasmgate_upstream_errors_total", &with_error);
                ((*error).to_owned(), Value::from(count))
            })
            .collect();
        let latency = "wasmgate_upstream_request_duration_seconds";
        let dropped = samples.sum(
            "wasmgate_openapi_v3_group_versions_dropped",
            &[("upstream", upstream.as_str())],
        );
        json!({
            "route": self.route,
            "upstream": upstream,
            "responses": by_class,
            "errors": errors,
            "openapi_v3_dropped": dropped,
            "p50_seconds": samples.quantile(latency, &labels, 0.5),
            "p99_seconds": samples.quantile(latency, &labels, 0.99),
        })
    }
}
