//! wasmgate: an API gateway that re-creates the Kubernetes API server's
//! generic server, with its policy stages pluggable as WebAssembly components.
//!
//! A request meets `server`'s listener, then the handler chain that
//! [`chain::build`] builds (the one place its order is written; `wasmgate
//! check` lists it for a manifest), then `delegation`'s servers, whose
//! directors route it to a handler or, at the end, to a 404 Status.
//! docs/architecture.md follows a request through the code and maps the
//! modules in their layers, bottom-up: each imports only from below it.

mod accept;
mod aggregator;
pub mod audit_event;
pub mod body;
mod chain;
pub mod cli;
pub mod config;
pub mod context;
mod crypto;
mod decision_cache;
mod delegation;
mod director;
mod discovery;
pub mod fleet;
mod flow_control;
pub mod handler;
pub mod health;
mod metrics;
mod openapi;
mod published;
pub mod reload_trigger;
pub mod request_info;
pub mod request_target;
pub mod scaffold;
mod self_review;
pub mod server;
mod static_response;
pub mod status;
mod status_page;
mod tagged_document;
mod traces;
pub mod try_request;
mod upstream;
mod version;
pub mod wasm;

pub use metrics::exposition as metrics_exposition;
