//! The WebAssembly side: filters are components of the worlds in `wit/`,
//! run by wasmtime. [`engine`] is the process's engine and compiled-component
//! cache, [`bindings`] the host side of the WIT, [`state`] what a store holds
//! and the imports it grants, [`mod@capacity`] the instance slots and filter
//! memory a configuration's filters share, [`filter`] one loaded filter and
//! its outcomes, [`convert`] the records built from a request, [`cache_key`]
//! what a decision cache keys an answer by, [`audit_batch`] a batch of audit
//! events as auditors are given it (records, or serialised once as kube's
//! audit log lines), [`legacy`] the records of components built against
//! the earlier contracts (`wasmgate:filter@0.3.0`, `0.2.0` and `0.1.0`). The stages that
//! call them sit in the chain: `chain::authentication`, `chain::audit`,
//! `chain::authorization`, `chain::admission`.

pub mod audit_batch;
pub mod bindings;
pub mod cache_key;
pub mod capacity;
pub mod convert;
pub(crate) mod engine;
mod epoch;
pub mod filter;
mod legacy;
pub mod state;

pub(crate) use engine::LoadError;
pub use engine::WasmHost;
pub use filter::LoadedFilter;
pub(crate) use filter::{Call, Outcome};

use std::sync::Arc;

use crate::config::stages::{FilterSpec, Stages};
use crate::config::{Config, ConfigError, Limits, Problem};
use capacity::Capacity;
use filter::{Admission, Auditor, Authenticator, Authorizer, Kind};

/// Every filter of every stage, loaded and pre-instantiated.
#[derive(Default)]
pub struct LoadedStages {
    pub(crate) authenticators: Vec<LoadedFilter<Authenticator>>,
    pub(crate) authorizers: Vec<LoadedFilter<Authorizer>>,
    pub(crate) mutating: Vec<LoadedFilter<Admission>>,
    pub(crate) validating: Vec<LoadedFilter<Admission>>,
    pub(crate) auditors: Vec<LoadedFilter<Auditor>>,
}

/// Loads every component the configuration names (compiling only what the
/// cache does not hold). Every failure is reported, at the place in the
/// manifest that names the component; this is part of what `wasmgate check`
/// and a reload verify.
pub fn load_stages(config: &Config) -> Result<LoadedStages, ConfigError> {
    let stages: &Stages = &config.stages;
    if stages.all_filters().next().is_none() {
        return Ok(LoadedStages::default());
    }
    let host =
        WasmHost::shared().map_err(|error| invalid(config, vec![problem_at(None, error)]))?;
    let capacity = Arc::new(capacity(host, &config.limits));
    let mut problems = Vec::new();
    let loaded = LoadedStages {
        authenticators: load_all(
            host,
            &stages.authentication.filters,
            &capacity,
            &mut problems,
        ),
        authorizers: load_all(
            host,
            &stages.authorization.filters,
            &capacity,
            &mut problems,
        ),
        mutating: load_all(host, &stages.admission.mutating, &capacity, &mut problems),
        validating: load_all(host, &stages.admission.validating, &capacity, &mut problems),
        auditors: load_all(host, &stages.audit.filters, &capacity, &mut problems),
    };
    if problems.is_empty() {
        Ok(loaded)
    } else {
        Err(invalid(config, problems))
    }
}

/// What this configuration's filters may hold at once. A call waits for
/// room at most a quarter of the request timeout: the wait limit kube gives
/// priority and fairness (`RequestTimeout/4` in `DefaultBuildHandlerChain`,
/// `staging/src/k8s.io/apiserver/pkg/server/config.go`), whose total
/// concurrency is the two in-flight limits' sum
/// (`staging/src/k8s.io/apiserver/pkg/server/options/recommended.go`).
fn capacity(host: &WasmHost, limits: &Limits) -> Capacity {
    Capacity::new(
        limits.filter_instances,
        limits.filter_memory,
        host.slots.clone(),
        limits.request_timeout / 4,
    )
}

fn load_all<K: Kind>(
    host: &WasmHost,
    specs: &[FilterSpec],
    capacity: &Arc<Capacity>,
    problems: &mut Vec<Problem>,
) -> Vec<LoadedFilter<K>> {
    specs
        .iter()
        .filter_map(|spec| {
            LoadedFilter::<K>::load(host, spec, capacity.clone())
                .map_err(|error| problems.push(problem_at(Some(spec), error)))
                .ok()
        })
        .collect()
}

fn problem_at(spec: Option<&FilterSpec>, error: LoadError) -> Problem {
    Problem {
        location: spec.and_then(|spec| spec.location),
        key: spec
            .map(|spec| format!("filter {:?}", spec.name.as_str()))
            .unwrap_or_default(),
        message: error.to_string(),
    }
}

fn invalid(config: &Config, problems: Vec<Problem>) -> ConfigError {
    ConfigError::Invalid {
        path: config.source.clone(),
        problems,
    }
}
