//! The host side of `wit/`: one `bindgen!` per filter world, all in this
//! module. The auditor world imports everything (types, host, sink), so its
//! bindings define the shared interfaces and the other worlds reuse them.

pub(crate) mod auditor {
    wasmtime::component::bindgen!({
        path: "wit",
        world: "auditor-filter",
        exports: { default: async },
    });
}

pub mod authenticator {
    wasmtime::component::bindgen!({
        path: "wit",
        world: "authenticator-filter",
        exports: { default: async },
        with: {
            "wasmgate:filter/types": super::auditor::wasmgate::filter::types,
            "wasmgate:filter/host": super::auditor::wasmgate::filter::host,
        },
    });
}

pub(crate) mod authorizer {
    wasmtime::component::bindgen!({
        path: "wit",
        world: "authorizer-filter",
        exports: { default: async },
        with: {
            "wasmgate:filter/types": super::auditor::wasmgate::filter::types,
            "wasmgate:filter/host": super::auditor::wasmgate::filter::host,
        },
    });
}

pub(crate) mod admission {
    wasmtime::component::bindgen!({
        path: "wit",
        world: "admission-filter",
        exports: { default: async },
        with: {
            "wasmgate:filter/types": super::auditor::wasmgate::filter::types,
            "wasmgate:filter/host": super::auditor::wasmgate::filter::host,
        },
    });
}

pub use auditor::wasmgate::filter::{host, sink, types};
