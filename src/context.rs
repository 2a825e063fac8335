//! What the flow learns about a request, carried in its extensions: the
//! connection it came on (set by the listener), its audit ID, arrival time
//! and deadline (set by the first native filters), and the user (set by
//! authentication). [`crate::request_info::RequestInfo`] travels the same way.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use http::HeaderValue;
use rustls_pki_types::CertificateDer;

/// The connection a request arrived on.
#[derive(Debug, Clone)]
pub struct ConnectionInfo {
    pub remote_addr: SocketAddr,
    /// The client's IP address as the upstream proxy's `X-Forwarded-For`
    /// names it, rendered once per connection rather than per request.
    pub client_ip: HeaderValue,
    /// `ip:port`, as an authenticator's `request-view` gives it; rendered
    /// once per connection too.
    pub remote_text: String,
    /// True when the connection is TLS.
    pub tls: bool,
    /// The client's certificate chain, leaf first, when the listener verified
    /// one (mTLS).
    pub client_chain: Option<Arc<Vec<CertificateDer<'static>>>>,
}

impl ConnectionInfo {
    pub fn new(
        remote_addr: SocketAddr,
        tls: bool,
        client_chain: Option<Arc<Vec<CertificateDer<'static>>>>,
    ) -> Self {
        let client_ip = HeaderValue::try_from(remote_addr.ip().to_string())
            .unwrap_or_else(|_| HeaderValue::from_static("unknown"));
        ConnectionInfo {
            remote_addr,
            client_ip,
            remote_text: remote_addr.to_string(),
            tls,
            client_chain,
        }
    }
}

/// The request's audit ID, from the client's `Audit-ID` header or generated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditId(pub String);

/// When the request arrived (kube's request-received timestamp).
#[derive(Debug, Clone, Copy)]
pub struct ReceivedAt {
    pub instant: Instant,
    pub wall: SystemTime,
}

/// The latest moment the request may finish at; handlers that wait on
/// others (the upstream proxy) stop waiting then.
#[derive(Debug, Clone, Copy)]
pub struct Deadline(pub Instant);

/// Who is making the request (kube's user.Info).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: Vec<(String, Vec<String>)>,
}

impl UserInfo {
    /// kube's anonymous user: `system:anonymous` in `system:unauthenticated`.
    pub fn anonymous() -> Self {
        UserInfo {
            name: "system:anonymous".to_owned(),
            groups: vec!["system:unauthenticated".to_owned()],
            ..UserInfo::default()
        }
    }
}

/// What the flow may do to the connection a request came on, and what the
/// gateway did to it (set by the listener).
#[derive(Debug, Clone)]
pub struct ConnectionControl {
    /// Cancelling it closes the connection at once: how a response past its
    /// deadline is cut. HTTP/1.x requests only: an HTTP/2 connection carries
    /// other requests' streams, and a stream is reset through its body.
    pub cut: Option<tokio_util::sync::CancellationToken>,
    /// Cancelled when the shutdown closes every connection still open
    /// (`shutdown_timeout` passed), so what ends then knows why.
    pub shutdown_cut: tokio_util::sync::CancellationToken,
}
