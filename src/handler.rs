//! The one shape every step of the request flow has: a [`Handler`] takes a
//! request and produces a response. A native filter is a handler that holds
//! the next one (the onion of kube's handler chain); the director, the
//! delegation chain, the upstream proxy and the built-in endpoints are the
//! handlers at the centre.

use std::sync::Arc;

use futures_util::future::BoxFuture;

use crate::body::{Request, Response};

/// One stage of request handling: the chain's filters, the delegation servers and the handlers they route to.
pub trait Handler: Send + Sync {
    /// Serves one request. Errors are already responses: a handler turns its
    /// [`crate::status::GatewayError`] into a Status before returning.
    fn call(&self, request: Request) -> BoxFuture<'_, Response>;
}

/// A handler shared by the chain (the next step of a filter, a route's target).
pub type SharedHandler = Arc<dyn Handler>;
