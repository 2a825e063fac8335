//! wasmgate: an API gateway that re-creates the Kubernetes API server's
//! generic server, with its policy stages pluggable as WebAssembly components.
//!
//! One request, end to end:
//!
//! ```text
//! client ──TCP/TLS──> server::listener (HTTP/1.1 + HTTP/2)
//!   └─> chain::build, outermost first:
//!         nosniff ─ audit ID ─ panic recovery ─ request headers ─ canonical target ─
//!         request info ─ HTTP log ─ HSTS ─
//!         cache-control ─ body limit ─ deadline/timeout ─ CORS ─
//!         [authentication] ─ [audit] ─ max-in-flight ─ [authorization] ─ [admission]
//!   └─> server 1's director ──match──> handler (upstream | static | health | discovery)
//!         │ no match
//!         └─> server 2's director ─ ... ─> not-found (404 Status)
//! ```
//!
//! Module map, in the order a request meets them:
//! - [`config`]: the manifest, completed and validated before anything starts.
//! - [`server`]: listener, TLS, the swappable snapshot, lifecycle hooks, graceful shutdown.
//! - [`reload`]: watch, rebuild, validate, swap.
//! - [`chain`]: the native handler chain, built in one function.
//! - [`request_target`]: the canonical request target, judged and served.
//! - [`request_info`]: kube's RequestInfo resolver.
//! - [`delegation`] and [`director`]: the server chain and each server's routing.
//! - [`upstream`], [`static_response`], [`health`], [`discovery`], [`metrics`]: the handlers.
//! - [`wasm`]: the WebAssembly host the Wasm stages call.
//! - [`decision_cache`]: the authenticators' and authorizers' decision caches.
//! - [`try_request`]: `wasmgate try`, one request through the chain without a network.
//! - [`scaffold`]: `wasmgate new-filter`, a new filter's folder in Rust, Python, JavaScript or C.
//! - [`status`]: the one place errors become kube Status responses.
//! - [`body`], [`handler`], [`context`]: the types every step shares.

pub mod body;
pub mod chain;
pub mod config;
pub mod context;
pub mod decision_cache;
pub mod delegation;
pub mod director;
pub mod discovery;
pub mod handler;
pub mod health;
pub mod metrics;
pub mod reload;
pub mod request_info;
pub mod request_target;
pub mod scaffold;
pub mod server;
pub mod static_response;
pub mod status;
pub mod try_request;
pub mod upstream;
pub mod wasm;
