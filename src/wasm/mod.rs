//! The WebAssembly side: filters are components of the worlds in `wit/`,
//! run by wasmtime. [`engine`] is the process's engine and compiled-component
//! cache, [`bindings`] the host side of the WIT, [`state`] what a store holds
//! and the imports it grants, [`filter`] one loaded filter and its four
//! outcomes, [`convert`] the records built from a request. The stages that
//! call them sit in the chain: `chain::authentication`, `chain::audit`,
//! `chain::authorization`, `chain::admission`.

pub mod bindings;
pub mod convert;
pub mod engine;
pub mod filter;
pub mod state;

pub use engine::{CacheStats, LoadError, WasmHost};
pub use filter::{LoadedFilter, Outcome};
