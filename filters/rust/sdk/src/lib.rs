//! `wasmgate-filter`: what every Rust filter of wasmgate shares, so that a
//! filter crate holds only its own logic.
//!
//! - The bindings of the five filter worlds of `wit/filter-0.4.0.wit`
//!   (`wasmgate:filter@0.4.0`), one module
//!   each ([`authenticator`], [`authorizer`], [`admission`], [`auditor`]
//!   and [`json_auditor`], the auditor given its events serialised),
//!   with the world's `Guest` trait, its types and its `export!` macro: a
//!   filter implements `Guest` for a type of its own and names it in
//!   `export!`. The types every world shares are in [`types`], the host's
//!   functions in [`host`], and [`cache::limit_ttl`] (authenticators and
//!   authorizers) shortens how long the gateway keeps this call's answer.
//! - The filter's config, parsed once per instance into its own type:
//!   [`config`] and [`FilterConfig`].
//! - [`debug!`], [`info!`], [`warn!`] and [`error!`]: a line for the
//!   gateway's log, formatted only when `host.log-enabled` says it is kept.
//! - [`headers`]: reading request headers as Kubernetes does.
//! - The filter's allocator (with the default `call-arena` feature): the
//!   inputs the host lowers into a call bumped through a static arena that
//!   starts over when they are all freed ([`CallArena`]); the filter's own
//!   code, which each world's `export!` runs outside the arena, allocates
//!   from the standard allocator.
//!
//! An authorizer that allows everything is:
//!
//! ```
//! use wasmgate_filter::authorizer::{self, Attributes, Decision, Guest};
//!
//! struct Filter;
//!
//! impl Guest for Filter {
//!     fn authorize(_attributes: Attributes) -> Result<Decision, String> {
//!         Ok(Decision::Allow)
//!     }
//! }
//!
//! authorizer::export!(Filter);
//! ```
//!
//! The bindings are generated from `wit/filter-0.4.0.wit` here (`wit/` is a
//! link to the checkout's `wit/`, the contract); `wasmgate new-filter --dir` writes this crate, with
//! a copy of the contract there, beside a filter that lives outside the
//! checkout.
//!
//! Each world's bindings are generated with `pub_export_macro`, so its
//! export macro works from the filter's crate, and so only the world a
//! filter exports ends up in its component: a world's own custom section
//! carries its imports alone, the `export!` invocation adds the one with
//! its export. The world's `export!` is the SDK's own (`__export_world!`):
//! it exports a type that runs the filter's function outside the call
//! arena.

mod arena;
mod config;
pub mod headers;
mod log;

#[doc(hidden)]
pub use arena::outside_arena as __outside_arena;
pub use arena::{ARENA_BYTES, CallArena};
pub use config::{FilterConfig, config};
#[doc(hidden)]
pub use log::write as __log;

/// Exports `$ty`, which implements world `$world`'s `Guest`, as the
/// component's export of that world: through a type of the SDK's whose
/// `$function` runs `$ty`'s outside the call arena (src/arena.rs), so that
/// all the filter's own code allocates from the standard allocator. Each
/// world's `export!` is this macro with the world's function filled in.
#[doc(hidden)]
#[macro_export]
macro_rules! __export_world {
    ($world:ident, $ty:ident, $function:ident($input:ty) -> $output:ty) => {
        #[doc(hidden)]
        struct __WasmgateFilterExport;

        impl $crate::$world::Guest for __WasmgateFilterExport {
            fn $function(input: $input) -> $output {
                $crate::__outside_arena(|| <$ty as $crate::$world::Guest>::$function(input))
            }
        }

        $crate::$world::bindings::export!(
            __WasmgateFilterExport with_types_in $crate::$world::bindings
        );
    };
}

/// The interfaces the worlds import (`types`, `host`, `cache`), generated
/// once for all five: each world's bindings refer to these (`with`), so a
/// `Header` or a `LogLevel` is one type whatever the world.
mod imports {
    wit_bindgen::generate!({
        inline: "
            package wasmgate:filter-sdk;
            world imports {
                import wasmgate:filter/host@0.4.0;
                import wasmgate:filter/cache@0.4.0;
            }
        ",
        path: "wit/filter-0.4.0.wit",
        world: "wasmgate:filter-sdk/imports",
        generate_all,
    });
}

pub use imports::wasmgate::filter::{cache, host, types};

/// Generates world `$world`'s bindings in module `$module::bindings`, on
/// the shared `types` and `host` (and the shared `cache`, for the worlds that
/// import it: `with` refuses a mapping the world does not use).
macro_rules! world_bindings {
    ($world:literal, $module:literal) => {
        world_bindings!($world, $module, {});
    };
    ($world:literal, $module:literal, cache) => {
        world_bindings!($world, $module, { "wasmgate:filter/cache@0.4.0": crate::cache, });
    };
    ($world:literal, $module:literal, { $($imports:tt)* }) => {
        #[doc(hidden)]
        pub mod bindings {
            wit_bindgen::generate!({
                path: "wit/filter-0.4.0.wit",
                world: $world,
                with: {
                    "wasmgate:filter/types@0.4.0": crate::types,
                    "wasmgate:filter/host@0.4.0": crate::host,
                    $($imports)*
                },
                pub_export_macro: true,
                default_bindings_module: $module,
            });
        }
    };
}

/// World `authenticator-filter`: `authenticate` a request as a user, or have
/// no opinion.
pub mod authenticator {
    world_bindings!(
        "wasmgate:filter/authenticator-filter@0.4.0",
        "$crate::authenticator::bindings",
        cache
    );
    /// Exports type `$ty` (which implements [`Guest`]) as the component's
    /// `authenticator`.
    #[doc(inline)]
    pub use crate::__export_authenticator as export;
    pub use bindings::exports::wasmgate::filter::authenticator::{AuthnResult, Guest};
}

/// World `authorizer-filter`: `authorize` a user's request.
pub mod authorizer {
    world_bindings!(
        "wasmgate:filter/authorizer-filter@0.4.0",
        "$crate::authorizer::bindings",
        cache
    );
    /// Exports type `$ty` (which implements [`Guest`]) as the component's
    /// `authorizer`.
    #[doc(inline)]
    pub use crate::__export_authorizer as export;
    pub use bindings::exports::wasmgate::filter::authorizer::{Attributes, Decision, Guest};
}

/// World `admission-filter`: `admit` (validate or mutate) an object.
pub mod admission {
    world_bindings!(
        "wasmgate:filter/admission-filter@0.4.0",
        "$crate::admission::bindings"
    );
    /// Exports type `$ty` (which implements [`Guest`]) as the component's
    /// `admission`.
    #[doc(inline)]
    pub use crate::__export_admission as export;
    pub use bindings::exports::wasmgate::filter::admission::{
        AdmissionRequest, AdmissionResponse, Guest, Operation,
    };
}

/// World `auditor-filter`: `audit_batch`, a batch of events in the order
/// they happened, written to the `sink`.
pub mod auditor {
    world_bindings!(
        "wasmgate:filter/auditor-filter@0.4.0",
        "$crate::auditor::bindings"
    );
    /// Exports type `$ty` (which implements [`Guest`]) as the component's
    /// `auditor`.
    #[doc(inline)]
    pub use crate::__export_auditor as export;
    pub use bindings::exports::wasmgate::filter::auditor::{
        Annotation, Event, Guest, Level, ObjectReference, Stage,
    };
    pub use bindings::wasmgate::filter::sink;
}

/// World `json-auditor-filter`: `audit_json_lines`, a batch of events the
/// gateway serialised as kube's audit log lines, written to the `sink`
/// (`sink::write_lines` appends whole lines as they are).
pub mod json_auditor {
    world_bindings!(
        "wasmgate:filter/json-auditor-filter@0.4.0",
        "$crate::json_auditor::bindings"
    );
    /// Exports type `$ty` (which implements [`Guest`]) as the component's
    /// `json-auditor`.
    #[doc(inline)]
    pub use crate::__export_json_auditor as export;
    pub use bindings::exports::wasmgate::filter::json_auditor::{Guest, JsonBatch, Stage};
    pub use bindings::wasmgate::filter::sink;
}

#[doc(hidden)]
#[macro_export]
macro_rules! __export_authenticator {
    ($ty:ident) => {
        $crate::__export_world!(authenticator, $ty, authenticate($crate::types::RequestView) -> $crate::authenticator::AuthnResult);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __export_authorizer {
    ($ty:ident) => {
        $crate::__export_world!(authorizer, $ty, authorize($crate::authorizer::Attributes) -> Result<$crate::authorizer::Decision, String>);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __export_admission {
    ($ty:ident) => {
        $crate::__export_world!(admission, $ty, admit($crate::admission::AdmissionRequest) -> Result<$crate::admission::AdmissionResponse, String>);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __export_auditor {
    ($ty:ident) => {
        $crate::__export_world!(
            auditor,
            $ty,
            audit_batch(Vec<$crate::auditor::Event>) -> Result<(), String>
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __export_json_auditor {
    ($ty:ident) => {
        $crate::__export_world!(json_auditor, $ty, audit_json_lines($crate::json_auditor::JsonBatch) -> Result<(), String>);
    };
}
