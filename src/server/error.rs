//! Why the gateway could not be built or started: the one error a start, a
//! check and a reload share, below everything in `server` that returns it.

use std::net::SocketAddr;

use super::tls::TlsError;
use crate::config::ConfigError;
use crate::upstream::UpstreamError;

/// Why the gateway could not be built or started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Filters(#[from] ConfigError),
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("cannot set up tracing: {0}")]
    Tracing(String),
    #[error("cannot listen on {address}: {source}")]
    Bind {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}
