//! The one rustls crypto provider the gateway uses, on both sides: the
//! listener's server configuration (`server::tls`) and the client
//! configuration upstreams are dialled with (`upstream`).

use std::sync::Arc;

use rustls::crypto::CryptoProvider;

/// ring's provider, shared by every TLS configuration of the gateway.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}
