//! The `upstream` route handler: a reverse proxy with pooled keep-alive
//! connections (HTTP/1.1 to `http://` upstreams through [`pool`]; HTTP/1.1,
//! or HTTP/2 when they offer it, to `https://` upstreams through hyper-util's
//! client). Bodies stream both ways; nothing is buffered. Headers are
//! rewritten in [`headers`]: hop-by-hop ones dropped both ways, the client's
//! identity headers dropped, the forwarding headers set from the request's
//! origin. The user's identity and the gateway's credentials are attached
//! in [`identity`], from files kept current by [`credentials`].
//! An upgrade request goes to the upstream on a connection of its own and,
//! once both sides switched, becomes a tunnel ([`upgrade`]); it is rewritten
//! as any other request first, identity included.
//! Failures become Status responses: unreachable 503, no answer in time
//! 504, a broken answer 502, a request body over the limit 413.

mod credentials;
mod headers;
mod identity;
mod pool;
mod upgrade;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures_util::future::{BoxFuture, Either};
use futures_util::{FutureExt, TryFutureExt};
use http::header;
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderName, HeaderValue, StatusCode, Uri, Version};
use http_body_util::BodyExt;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use self::credentials::Watched;
use self::identity::IdentityHeaders;
use self::pool::Http1Pool;
use self::upgrade::TunnelTarget;
use crate::body::{Body, BodyError, MaxRequestBody, Request, Response, is_body_limit_error};
use crate::config::Upstream;
use crate::config::identity::{ClientCert, ClientCertFiles, load_client_cert};
use crate::context::RequestContext;
use crate::handler::Handler;
use crate::metrics::gateway::{PoolMetrics, RouteLabels, UpstreamFailure, UpstreamMetrics};
use crate::status::GatewayError;

/// Why an upstream client could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("upstream {url}: its host and port cannot be sent as a Host header")]
    Authority { url: String },
    #[error("cannot set up TLS for upstream {url}: {source}")]
    Tls {
        url: String,
        #[source]
        source: rustls::Error,
    },
    #[error("upstream {url}: {message}")]
    Credentials { url: String, message: String },
}

/// How long an unused keep-alive connection to an upstream is kept.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Why an exchange with the upstream failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ExchangeError {
    /// No connection could be made: the upstream is unavailable (503).
    #[error("cannot connect to the upstream")]
    Connect(#[source] BodyError),
    /// The connection failed once made (502), or the client's request body
    /// did (400, 413).
    #[error("the exchange with the upstream failed")]
    Exchange(#[source] BodyError),
}

pub(crate) struct UpstreamProxy {
    base: Uri,
    transport: Transport,
    /// Where upgrade requests go, on connections of their own.
    tunnel: TunnelTarget,
    timeout: Option<Duration>,
    identity: IdentityHeaders,
    metrics: UpstreamMetrics,
}

enum Transport {
    /// `http://`: wasmgate's own HTTP/1.1 keep-alive pool.
    Plain {
        pool: Arc<Http1Pool>,
        /// The `Host` header sent upstream: the URL's host, and its port
        /// unless that is 80.
        host: HeaderValue,
    },
    /// `https://`: hyper-util's pooled client, TLS with HTTP/2 by ALPN.
    Tls(Box<TlsTransport>),
}

type TlsClient = Client<HttpsConnector<HttpConnector>, Body>;

/// An https upstream's client, made again (with a new pool) when the client
/// certificate it presents changes, so that no connection keeps presenting
/// the old one (client-go closes its connections on a rotation too).
struct TlsTransport {
    url: String,
    roots: Arc<rustls::RootCertStore>,
    client_cert: Option<Watched<ClientCert>>,
    /// The clients and the certificate generation they were made with.
    clients: Mutex<(u64, TlsClients)>,
}

/// What sends to an https upstream with one client certificate: the pooled
/// client, and the connector of upgraded requests' own connections.
#[derive(Clone)]
struct TlsClients {
    pooled: Arc<TlsClient>,
    tunnel: tokio_rustls::TlsConnector,
}

impl UpstreamProxy {
    /// The proxy to `upstream`; `credential_headers` are the headers the
    /// authenticators read, never forwarded unless the route says so;
    /// `labels` name the route in the metrics.
    pub(crate) fn new(
        upstream: &Upstream,
        credential_headers: &[HeaderName],
        labels: RouteLabels,
    ) -> Result<Self, UpstreamError> {
        let metrics = crate::metrics::metrics().gateway.upstream(labels);
        let url = upstream.url.to_string();
        let credentials_error = |message| UpstreamError::Credentials {
            url: url.clone(),
            message,
        };
        let no_authority = || UpstreamError::Authority { url: url.clone() };
        let tunnel = TunnelTarget::new(&upstream.url).ok_or_else(no_authority)?;
        let transport = match upstream.url.authority() {
            Some(authority) if upstream.url.scheme() != Some(&Scheme::HTTPS) => {
                plain_transport(authority, metrics.pool.clone()).ok_or_else(no_authority)?
            }
            _ => Transport::Tls(Box::new(TlsTransport::new(upstream).map_err(
                |error| match error {
                    TlsSetupError::Tls(source) => UpstreamError::Tls {
                        url: url.clone(),
                        source,
                    },
                    TlsSetupError::Credentials(message) => credentials_error(message),
                },
            )?)),
        };
        Ok(UpstreamProxy {
            base: upstream.url.clone(),
            transport,
            tunnel,
            timeout: upstream.timeout,
            identity: IdentityHeaders::new(upstream, credential_headers)
                .map_err(credentials_error)?,
            metrics,
        })
    }
}

enum TlsSetupError {
    Tls(rustls::Error),
    Credentials(String),
}

impl TlsTransport {
    fn new(upstream: &Upstream) -> Result<Self, TlsSetupError> {
        let roots = upstream
            .ca
            .clone()
            .unwrap_or_else(|| Arc::new(rustls::RootCertStore::empty()));
        let client_cert = match &upstream.credentials.client_cert {
            Some(files) => Some(
                Watched::new(
                    vec![files.cert.clone(), files.key.clone()],
                    read_client_cert,
                )
                .map_err(TlsSetupError::Credentials)?,
            ),
            None => None,
        };
        let cert = client_cert.as_ref().map(|watched| watched.current().0);
        let clients = tls_clients(&roots, cert.as_deref()).map_err(TlsSetupError::Tls)?;
        Ok(TlsTransport {
            url: upstream.url.to_string(),
            roots,
            client_cert,
            clients: Mutex::new((0, clients)),
        })
    }

    /// The clients to send with: made again first when the client
    /// certificate's files changed.
    fn clients(&self) -> TlsClients {
        let current = self.client_cert.as_ref().map(Watched::current);
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((cert, generation)) = current
            && generation != clients.0
        {
            match tls_clients(&self.roots, Some(&cert)) {
                Ok(fresh) => *clients = (generation, fresh),
                Err(error) => {
                    tracing::warn!(upstream = %self.url, %error, "the new client certificate cannot be used; the last one stays");
                    clients.0 = generation;
                }
            }
        }
        clients.1.clone()
    }
}

fn read_client_cert(paths: &[std::path::PathBuf]) -> Result<ClientCert, String> {
    match paths {
        [cert, key] => load_client_cert(&ClientCertFiles {
            cert: cert.clone(),
            key: key.clone(),
        }),
        _ => Err("a client certificate is read from a certificate and a key file".to_owned()),
    }
}

fn plain_transport(authority: &Authority, metrics: PoolMetrics) -> Option<Transport> {
    let host = authority.host();
    let port = authority.port_u16();
    // Host names the upstream as hyper's client would: no user info, no
    // default port.
    let host_header = match port {
        Some(port) if port != 80 => HeaderValue::try_from(format!("{host}:{port}")),
        _ => HeaderValue::try_from(host),
    };
    Some(Transport::Plain {
        pool: Http1Pool::new(host, port.unwrap_or(80), IDLE_TIMEOUT, metrics),
        host: host_header.ok()?,
    })
}

fn tls_clients(
    roots: &Arc<rustls::RootCertStore>,
    client_cert: Option<&ClientCert>,
) -> Result<TlsClients, rustls::Error> {
    let builder = rustls::ClientConfig::builder_with_provider(crate::crypto::provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(Arc::clone(roots));
    let tls = match client_cert {
        Some((chain, key)) => builder.with_client_auth_cert(chain.clone(), key.clone_key())?,
        None => builder.with_no_client_auth(),
    };
    // An upgraded request's connection speaks HTTP/1.1 whatever the
    // upstream offers.
    let mut tunnel = tls.clone();
    tunnel.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .build();
    let pooled = Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(IDLE_TIMEOUT)
        .timer(TokioTimer::new())
        .build(connector);
    Ok(TlsClients {
        pooled: Arc::new(pooled),
        tunnel: tokio_rustls::TlsConnector::from(Arc::new(tunnel)),
    })
}

impl UpstreamProxy {
    /// The request as the upstream receives it, sent within the route's
    /// timeout when it has one, and its answer. Composed here rather than
    /// written as nested `async fn`s: each of those would keep its own copy
    /// of the request, and the whole would be copied into the box; this way
    /// the box holds the request once, inside the exchange.
    fn forward(&self, mut request: Request) -> Result<BoxFuture<'_, Response>, GatewayError> {
        let body_limit = RequestContext::of(request.extensions()).max_body;
        let asked = crate::request_info::is_upgrade(&request)
            .then(|| upgrade::Asked::take(&mut request))
            .flatten();
        let mut outgoing = self.outgoing_request(request)?;
        // An upgrade's span ends at the upstream's answer (its 101): the
        // tunnel after it is no part of the request's trace.
        let span = crate::traces::upstream_span(&mut outgoing, &self.base).map(Box::new);
        let answering = Answering {
            span,
            body_limit,
            started: Instant::now(),
        };
        let exchange = match asked {
            Some(asked) => {
                let tls = match &self.transport {
                    Transport::Plain { .. } => None,
                    Transport::Tls(tls) => Some(tls.clients().tunnel),
                };
                // Boxed: a tunnel's set-up (TLS included) is a large
                // future, which inline would be copied into every
                // request's box.
                Either::Left(Box::pin(upgrade::exchange(
                    &self.tunnel,
                    tls,
                    asked,
                    outgoing,
                )))
            }
            None => Either::Right(self.exchange(outgoing)),
        };
        // Without a route timeout of its own, the request's deadline is
        // already enforced around the whole chain (the timeout filter).
        let exchange = match self.timeout {
            Some(wait) => Either::Left(tokio::time::timeout(wait, exchange)),
            None => Either::Right(exchange.map(Ok)),
        };
        Ok(Box::pin(exchange.map(move |timed| {
            self.answered(timed, answering)
                .unwrap_or_else(GatewayError::into_response)
        })))
    }

    /// What the exchange's result becomes: the response, or the Status its
    /// failure is classified as, with the metrics and the span it ends.
    fn answered(&self, timed: Timed, answering: Answering) -> Result<Response, GatewayError> {
        let answered = match timed {
            Ok(Ok(response)) => {
                self.metrics
                    .answered(response.status(), answering.started.elapsed());
                Ok(response)
            }
            Ok(Err(error)) => {
                self.metrics.failed(match error {
                    ExchangeError::Connect(_) => UpstreamFailure::Connect,
                    ExchangeError::Exchange(_) => UpstreamFailure::Exchange,
                });
                Err(self.classify(&error, answering.body_limit))
            }
            Err(_elapsed) => {
                self.metrics.failed(UpstreamFailure::Timeout);
                Err(GatewayError::Timeout {
                    message: "the upstream did not answer in time".to_owned(),
                })
            }
        };
        crate::traces::upstream_answered(answering.span.map(|span| *span), &answered);
        answered
    }

    /// The exchange of an ordinary (not upgraded) request, hop-by-hop
    /// headers dropped from its response; a 101 is a broken answer (502).
    fn exchange(
        &self,
        request: Request,
    ) -> impl Future<Output = Result<Response, ExchangeError>> + Send + '_ {
        let sent = match &self.transport {
            Transport::Plain { pool, .. } => Either::Left(
                pool.send(request)
                    .map_ok(|response| response.map(Body::wrap)),
            ),
            Transport::Tls(tls) => Either::Right(tls.clients().pooled.request(request).map(
                |result| match result {
                    Ok(response) => Ok(response.map(Body::wrap)),
                    Err(error) if error.is_connect() => Err(ExchangeError::Connect(error.into())),
                    Err(error) => Err(ExchangeError::Exchange(error.into())),
                },
            )),
        };
        sent.map(|sent| {
            let mut response = sent?;
            // A 101 to a request that asked for no upgrade would switch the
            // client's connection to a protocol nobody negotiated, bytes the
            // upstream sends after it read as the client's next responses:
            // Go's `ReverseProxy` (kube's proxy) answers it 502 too.
            if response.status() == StatusCode::SWITCHING_PROTOCOLS {
                return Err(ExchangeError::Exchange(
                    "the upstream switched protocols on a request that asked for no upgrade".into(),
                ));
            }
            headers::prepare_response_headers(response.headers_mut());
            Ok(response)
        })
    }

    fn outgoing_request(&self, request: Request) -> Result<Request, GatewayError> {
        let (mut parts, body) = request.into_parts();
        let path_and_query = self.target_path(&parts.uri)?;
        parts.version = Version::HTTP_11;
        headers::prepare_request_headers(&mut parts.headers, &parts.extensions);
        self.identity.apply(&mut parts.headers, &parts.extensions)?;
        let headers = &mut parts.headers;
        match &self.transport {
            // The pool sends the URI as it is: origin-form.
            Transport::Plain { host, .. } => {
                parts.uri = Uri::from(path_and_query);
                headers.insert(header::HOST, host.clone());
            }
            // The client sets Host from the URI.
            Transport::Tls(_) => {
                parts.uri = self.absolute_uri(path_and_query)?;
                headers.remove(header::HOST);
            }
        }
        // Errors reading the client's body are marked, so they are not taken
        // for the upstream's.
        let body = Body::wrap(body.map_err(RequestBodyError));
        Ok(http::Request::from_parts(parts, body))
    }

    /// The upstream's base path joined with the request's path and query.
    /// The path is the canonical target request info resolved and the stages
    /// judged (`crate::request_target`) and the base path is canonical too
    /// (a config check), so the two are joined as they are, byte for byte.
    fn target_path(&self, incoming: &Uri) -> Result<PathAndQuery, GatewayError> {
        let base_path = self.base.path().trim_end_matches('/');
        match incoming.path_and_query() {
            // The common case, an upstream URL without a path: the request's
            // own path and query, shared, not re-parsed.
            Some(path_and_query) if base_path.is_empty() => Ok(path_and_query.clone()),
            incoming_path => {
                let incoming_path = incoming_path.map_or("/", PathAndQuery::as_str);
                format!("{base_path}{incoming_path}").parse().map_err(|_| {
                    GatewayError::BadRequest {
                        message: format!("the request path {incoming_path:?} cannot be forwarded"),
                    }
                })
            }
        }
    }

    /// The upstream's URL with `path_and_query` in place of its path.
    fn absolute_uri(&self, path_and_query: PathAndQuery) -> Result<Uri, GatewayError> {
        let mut parts = self.base.clone().into_parts();
        parts.path_and_query = Some(path_and_query);
        parts.scheme = parts.scheme.or(Some(Scheme::HTTP));
        Uri::from_parts(parts)
            .map_err(|error| GatewayError::internal(format!("bad upstream URL: {error}")))
    }

    fn classify(&self, error: &ExchangeError, body_limit: Option<MaxRequestBody>) -> GatewayError {
        if let Some(MaxRequestBody(limit)) = body_limit.filter(|_| is_body_limit_error(error)) {
            return GatewayError::RequestEntityTooLarge { limit };
        }
        if is_request_body_error(error) {
            tracing::debug!(error = %error_chain(error), "the client's request body could not be read");
            return GatewayError::BadRequest {
                message: "the request body could not be read".to_owned(),
            };
        }
        tracing::warn!(upstream = %self.base, error = %error_chain(error), "upstream request failed");
        match error {
            ExchangeError::Connect(_) => GatewayError::ServiceUnavailable {
                message: "the upstream of this route is unavailable".to_owned(),
            },
            ExchangeError::Exchange(_) => GatewayError::BadGateway {
                message: "the upstream's response could not be read".to_owned(),
            },
        }
    }
}

impl Handler for UpstreamProxy {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        self.forward(request)
            .unwrap_or_else(|error| Box::pin(std::future::ready(error.into_response())))
    }
}

/// The exchange's result within the route's timeout: `Err` when it passed.
type Timed = Result<Result<Response, ExchangeError>, tokio::time::error::Elapsed>;

/// What a request's answer needs once the upstream has given it.
struct Answering {
    /// Boxed: a span is large, and most requests have none.
    span: Option<Box<crate::traces::Span>>,
    body_limit: Option<MaxRequestBody>,
    started: Instant,
}

/// An error reading the client's request body while it is forwarded: the
/// client's doing (a malformed chunk, a body cut short) or the body limit's,
/// never the upstream's.
#[derive(Debug)]
struct RequestBodyError(BodyError);

impl std::fmt::Display for RequestBodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "reading the request body: {}", self.0)
    }
}

impl std::error::Error for RequestBodyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}

fn is_request_body_error(error: &(dyn std::error::Error + 'static)) -> bool {
    crate::body::caused_by::<RequestBodyError>(error)
}

/// The error and its sources, `: `-separated, for the log.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let messages: Vec<String> = std::iter::successors(Some(error), |error| error.source())
        .map(ToString::to_string)
        .collect();
    messages.join(": ")
}
