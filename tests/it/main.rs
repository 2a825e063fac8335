//! The integration tests, in one binary (wasmtime's `tests/all` pattern):
//! one module per concern of the gateway, each driving real sockets on
//! 127.0.0.1, real upstreams, real TLS, real components built from
//! `filters/` and real clients; the helpers they share are in [`support`],
//! one module per concern. One binary links the gateway and wasmtime once,
//! and builds the filters once per run.
//!
//! `cargo test --test it MODULE::` runs one module's tests.

// This binary is test code throughout, helpers included (clippy's
// allow-*-in-tests covers only `#[test]` functions): a failed `expect` is a
// failed test. Its helpers are `pub` for the modules that share them; no
// other crate sees them, so `pub(crate)` would say nothing more.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a panic is a failed test, with the message saying what was expected"
)]
#![allow(
    unreachable_pub,
    reason = "one test binary: its helpers are pub to its modules and reachable from no other crate"
)]

mod support;

mod audit;
mod audit_batches;
mod chain;
mod chain_order;
mod check;
mod clients;
mod deadlines;
mod decision_cache;
mod filter_units;
mod filter_versions;
mod fleet;
mod flow_control;
mod health;
mod hostile_headers;
mod hostile_paths;
mod identity;
mod kube_clients;
mod languages;
mod lifecycle;
mod limits;
mod malformed;
mod module_graph;
mod observability;
mod properties;
mod readme;
mod reload;
mod routing;
mod scaffold;
mod self_reviews;
mod self_signed;
mod systemd;
mod tls;
mod tracing;
mod try_cli;
mod upgrades;
mod upstream;
mod wasi_grants;
mod wasm_budgets;
mod wasm_capacity;
mod wasm_stages;
