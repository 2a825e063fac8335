//! The host side of `wit/`: one `bindgen!` per filter world and contract
//! version, all in this module.
//!
//! The current contract is `wasmgate:filter@0.2.0` (`wit/filter-0.2.0.wit`);
//! its Rust types are the ones the gateway works with. The auditor world
//! imports types, host and sink, so its bindings define those interfaces and
//! the other worlds reuse them; the authenticator world defines `cache`.
//!
//! Components built against `0.1.0` (`wit/filter.wit`) keep loading: [`v0_1`]
//! holds that version's bindings, whose shared `types` are the same Rust
//! types as 0.2.0's (the interface did not change), so only the records each
//! world defines for itself differ (see `super::legacy`).

pub mod auditor {
    wasmtime::component::bindgen!({
        path: "wit/filter-0.2.0.wit",
        world: "auditor-filter",
        exports: { default: async },
    });
}

pub mod authenticator {
    wasmtime::component::bindgen!({
        path: "wit/filter-0.2.0.wit",
        world: "authenticator-filter",
        exports: { default: async },
        with: {
            "wasmgate:filter/types": super::auditor::wasmgate::filter::types,
            "wasmgate:filter/host": super::auditor::wasmgate::filter::host,
        },
    });
}

pub mod authorizer {
    wasmtime::component::bindgen!({
        path: "wit/filter-0.2.0.wit",
        world: "authorizer-filter",
        exports: { default: async },
        with: {
            "wasmgate:filter/types": super::auditor::wasmgate::filter::types,
            "wasmgate:filter/host": super::auditor::wasmgate::filter::host,
            "wasmgate:filter/cache": super::authenticator::wasmgate::filter::cache,
        },
    });
}

pub mod admission {
    wasmtime::component::bindgen!({
        path: "wit/filter-0.2.0.wit",
        world: "admission-filter",
        exports: { default: async },
        with: {
            "wasmgate:filter/types": super::auditor::wasmgate::filter::types,
            "wasmgate:filter/host": super::auditor::wasmgate::filter::host,
        },
    });
}

/// `wasmgate:filter@0.1.0`, for components built against it.
pub mod v0_1 {
    pub mod auditor {
        wasmtime::component::bindgen!({
            path: "wit/filter.wit",
            world: "auditor-filter",
            exports: { default: async },
            with: {
                "wasmgate:filter/types": crate::wasm::bindings::types,
            },
        });
    }

    pub mod authenticator {
        wasmtime::component::bindgen!({
            path: "wit/filter.wit",
            world: "authenticator-filter",
            exports: { default: async },
            with: {
                "wasmgate:filter/types": crate::wasm::bindings::types,
                "wasmgate:filter/host": super::auditor::wasmgate::filter::host,
            },
        });
    }

    pub mod authorizer {
        wasmtime::component::bindgen!({
            path: "wit/filter.wit",
            world: "authorizer-filter",
            exports: { default: async },
            with: {
                "wasmgate:filter/types": crate::wasm::bindings::types,
                "wasmgate:filter/host": super::auditor::wasmgate::filter::host,
            },
        });
    }

    pub mod admission {
        wasmtime::component::bindgen!({
            path: "wit/filter.wit",
            world: "admission-filter",
            exports: { default: async },
            with: {
                "wasmgate:filter/types": crate::wasm::bindings::types,
                "wasmgate:filter/host": super::auditor::wasmgate::filter::host,
            },
        });
    }

    pub use auditor::wasmgate::filter::{host, sink};
}

pub use auditor::wasmgate::filter::{host, sink, types};
pub use authenticator::wasmgate::filter::cache;
