//! Upgraded requests: an HTTP/1.1 `Connection: Upgrade` request (WebSocket,
//! kubectl's `SPDY/3.1` for exec, attach and port-forward) that the chain
//! let through goes to the upstream on a connection of its own (never
//! pooled, HTTP/1.1 whatever the upstream offers by ALPN), with its
//! `Upgrade` header. When the upstream switches protocols (`101`), the
//! client is answered `101` with the upstream's headers, and once both
//! sides have switched, bytes are copied both ways until both sides have
//! closed (each side's end of stream is passed on to the other), or until
//! the shutdown closes the connections (`shutdown_delay` after it began),
//! which also ends, with a 503, an upgrade still waiting for its answer
//! (the timeout step ends every long-running request's wait so).
//! Any other answer of the upstream is passed on as it is.
//!
//! A WebSocket over HTTP/2 (RFC 8441's extended CONNECT, `:protocol =
//! websocket`) goes to the upstream as the HTTP/1.1 `GET` it stands for,
//! with a `Sec-WebSocket-Key` of the gateway's (tungstenite's), whose
//! `Sec-WebSocket-Accept` the upstream must answer rightly (502 otherwise);
//! the client is answered `200`, and the stream is the tunnel. Any other 2xx
//! of the upstream would tell the client the same, so it is a 502 too. This is kube's
//! `UpgradeAwareHandler`
//! (`staging/src/k8s.io/apimachinery/pkg/util/proxy/upgradeaware.go`).

use http::header::{self, HeaderValue};
use http::uri::PathAndQuery;
use http::{StatusCode, Uri};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_util::sync::CancellationToken;

use super::ExchangeError;
use crate::body::{Body, Request, Response, Tunnel};

/// Where an upgraded request's connection goes.
pub(super) struct TunnelTarget {
    host: String,
    port: u16,
    /// The name the certificate of an `https://` upstream must carry.
    server_name: Option<ServerName<'static>>,
}

impl TunnelTarget {
    /// The target of `url`.
    pub(super) fn new(url: &Uri) -> Option<TunnelTarget> {
        let host = url.host()?.trim_start_matches('[').trim_end_matches(']');
        let https = url.scheme() == Some(&http::uri::Scheme::HTTPS);
        let server_name = match https {
            true => Some(ServerName::try_from(host.to_owned()).ok()?),
            false => None,
        };
        let port = url.port_u16().unwrap_or(if https { 443 } else { 80 });
        Some(TunnelTarget {
            host: host.to_owned(),
            port,
            server_name,
        })
    }

    /// A connection to the target, through `tls` (the upstream's current
    /// client configuration, HTTP/1.1 only) for an `https://` one.
    async fn connect(&self, tls: Option<TlsConnector>) -> Result<SendRequest<Body>, ExchangeError> {
        let connect_error = |error: std::io::Error| ExchangeError::Connect(error.into());
        let tcp = TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(connect_error)?;
        tcp.set_nodelay(true).map_err(connect_error)?;
        match (tls, &self.server_name) {
            (Some(connector), Some(name)) => {
                let stream = connector
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(connect_error)?;
                handshake(stream).await
            }
            // http:// (an https:// target always has its name: `new`).
            _ => handshake(tcp).await,
        }
    }
}

async fn handshake<IO>(io: IO) -> Result<SendRequest<Body>, ExchangeError>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = http1::handshake(TokioIo::new(io))
        .await
        .map_err(|error| ExchangeError::Connect(error.into()))?;
    tokio::spawn(async move {
        if let Err(error) = connection.with_upgrades().await {
            tracing::debug!(%error, "an upgraded upstream connection ended with an error");
        }
    });
    Ok(sender)
}

/// What the client asked to switch to, taken from its request before the
/// request is rewritten for the upstream (which drops hop-by-hop headers).
pub(super) struct Asked {
    upgrade: HeaderValue,
    client: OnUpgrade,
    closing: CancellationToken,
    /// For a WebSocket over HTTP/2: the key sent upstream.
    websocket_key: Option<String>,
}

impl Asked {
    pub(super) fn take(request: &mut Request) -> Option<Asked> {
        let (upgrade, websocket_key) = if crate::request_info::is_websocket_over_h2(request) {
            let key = tungstenite::handshake::client::generate_key();
            (HeaderValue::from_static("websocket"), Some(key))
        } else {
            (request.headers().get(header::UPGRADE)?.clone(), None)
        };
        let closing = crate::context::RequestContext::of(request.extensions())
            .control
            .as_ref()
            .map(|control| control.closing().clone())
            .unwrap_or_default();
        Some(Asked {
            upgrade,
            client: hyper::upgrade::on(request),
            closing,
            websocket_key,
        })
    }
}

/// Sends `outgoing` (hop-by-hop headers gone), in origin form, with the
/// client's `Upgrade` on a new connection, and answers as the upstream
/// does; a `101` starts the tunnel.
pub(super) async fn exchange(
    target: &TunnelTarget,
    tls: Option<TlsConnector>,
    asked: Asked,
    outgoing: Request,
) -> Result<Response, ExchangeError> {
    let mut outgoing = origin_form(outgoing)?;
    let headers = outgoing.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, asked.upgrade);
    if let Some(key) = &asked.websocket_key {
        *outgoing.method_mut() = http::Method::GET;
        let headers = outgoing.headers_mut();
        let key =
            HeaderValue::from_str(key).map_err(|error| ExchangeError::Exchange(error.into()))?;
        headers.insert(header::SEC_WEBSOCKET_KEY, key);
        headers
            .entry(header::SEC_WEBSOCKET_VERSION)
            .or_insert(HeaderValue::from_static("13"));
    }
    // The wait for the answer ends at the shutdown's closing as every
    // long-running request's does (`chain::timeout`).
    let mut sender = target.connect(tls).await?;
    let mut response = sender
        .send_request(outgoing)
        .await
        .map_err(|error| ExchangeError::Exchange(error.into()))?;
    if response.status() != StatusCode::SWITCHING_PROTOCOLS {
        // Over HTTP/2 a 2xx to the extended CONNECT tells the client its
        // tunnel is open (RFC 8441 §5): an upstream that answered the `GET`
        // without switching must not pass as one that did.
        if asked.websocket_key.is_some() && response.status().is_success() {
            return Err(ExchangeError::Exchange(
                format!(
                    "the upstream answered a WebSocket upgrade {} without switching protocols",
                    response.status()
                )
                .into(),
            ));
        }
        super::headers::prepare_response_headers(response.headers_mut());
        return Ok(response.map(Body::wrap));
    }
    let switched_to = response.headers().get(header::UPGRADE).cloned();
    let upstream = hyper::upgrade::on(&mut response);
    let (mut parts, _) = response.into_parts();
    super::headers::prepare_response_headers(&mut parts.headers);
    match &asked.websocket_key {
        // HTTP/2 has no Connection or Upgrade: a 200 opens the stream.
        Some(key) => {
            let accept = parts.headers.remove(header::SEC_WEBSOCKET_ACCEPT);
            let expected = tungstenite::handshake::derive_accept_key(key.as_bytes());
            if accept.as_ref().and_then(|value| value.to_str().ok()) != Some(expected.as_str()) {
                return Err(ExchangeError::Exchange(
                    "the upstream's Sec-WebSocket-Accept does not answer the gateway's key".into(),
                ));
            }
            parts.status = StatusCode::OK;
        }
        None => {
            parts
                .headers
                .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
            if let Some(protocol) = switched_to {
                parts.headers.insert(header::UPGRADE, protocol);
            }
        }
    }
    let tunnel = Tunnel::open();
    parts.extensions = http::Extensions::new();
    parts.extensions.insert(tunnel.clone());
    tokio::spawn(relay(asked.client, upstream, asked.closing, tunnel));
    Ok(Response::from_parts(parts, Body::empty()))
}

/// Copies bytes both ways once both sides have switched protocols, then
/// closes the tunnel (what it held: the audit event's completion, the
/// request's place in the drain).
async fn relay(client: OnUpgrade, upstream: OnUpgrade, closing: CancellationToken, tunnel: Tunnel) {
    let switched = tokio::select! {
        switched = futures_util::future::try_join(client, upstream) => switched,
        () = closing.cancelled() => {
            tunnel.close();
            return;
        }
    };
    match switched {
        Ok((client, upstream)) => {
            let mut client = TokioIo::new(client);
            let mut upstream = TokioIo::new(upstream);
            tokio::select! {
                copied = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {
                    if let Err(error) = copied {
                        tracing::debug!(%error, "an upgraded connection ended with an error");
                    }
                }
                () = closing.cancelled() => {
                    tracing::debug!("upgraded connection closed by the shutdown");
                }
            }
        }
        Err(error) => tracing::debug!(%error, "a side of an upgraded connection did not switch"),
    }
    tunnel.close();
}

/// `request` with an origin-form target and the `Host` its absolute one
/// named, as a connection of the proxy's own sends it.
fn origin_form(request: Request) -> Result<Request, ExchangeError> {
    let (mut parts, body) = request.into_parts();
    if let Some(authority) = parts.uri.authority() {
        let host = HeaderValue::from_str(authority.as_str())
            .map_err(|error| ExchangeError::Exchange(error.into()))?;
        parts.headers.insert(header::HOST, host);
        let target = parts
            .uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        parts.uri = Uri::from(target);
    }
    Ok(http::Request::from_parts(parts, body))
}
