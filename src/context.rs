//! What the flow learns about a request, carried in its extensions as one
//! [`RequestContext`]: the connection it came on (set by the listener),
//! where the client is and which host it asked for (its [`ClientOrigin`],
//! set once by the request-headers filter), its audit ID, arrival time,
//! [`RequestInfo`], body limit and deadline (set by the first native
//! filters), and the user (set by authentication).

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, LazyLock, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use http::{HeaderMap, HeaderName, HeaderValue};
use rustls_pki_types::CertificateDer;
use tokio_util::sync::CancellationToken;

use crate::body::MaxRequestBody;
use crate::request_info::RequestInfo;
use crate::status::GatewayError;

/// What the flow has learnt about one request, in one extension: the
/// listener starts it with the connection's values, the chain's first steps
/// fill in theirs as they run ([`RequestContext::learn`]), and the steps and
/// handlers after them read it ([`RequestContext::of`]). One value for all
/// of them: as an extension each, every request paid a box for each, and
/// the extensions' table was allocated and then grown twice to hold them.
#[derive(Debug, Clone, Default)]
pub struct RequestContext {
    /// The connection the request came on (the listener).
    pub connection: Option<Arc<ConnectionInfo>>,
    /// What the flow may do to that connection (the listener).
    pub(crate) control: Option<ConnectionControl>,
    /// The request's audit ID (the audit-ID step).
    pub audit_id: Option<AuditId>,
    /// Where the client is and which host it asked for (request headers).
    pub(crate) origin: Option<ClientOrigin>,
    /// When the request arrived (request info).
    pub(crate) received: Option<ReceivedAt>,
    /// kube's RequestInfo for the request (request info).
    pub info: Option<RequestInfo>,
    /// The request body limit in force (body limit), for the handler that
    /// reads the body, so its 413 names it.
    pub(crate) max_body: Option<MaxRequestBody>,
    /// The latest moment the request may finish at (timeout): handlers that
    /// wait on others (the upstream proxy) stop waiting then.
    pub(crate) deadline: Option<Instant>,
    /// Who makes the request (authentication, then impersonation), shared;
    /// None before authentication has run (the chain's own answers run
    /// before it).
    pub(crate) user: Option<Arc<UserInfo>>,
    /// The `Authorization` values authentication took off the request.
    pub(crate) credentials: Option<ClientCredentials>,
    /// How long the authentication union took (for audit's latency
    /// annotations, kube's authentication tracker); None when no filter
    /// was asked.
    pub(crate) authenticated_in: Option<Duration>,
}

/// The context of a request no step has added to.
static NOTHING_LEARNT: RequestContext = RequestContext {
    connection: None,
    control: None,
    audit_id: None,
    origin: None,
    received: None,
    info: None,
    max_body: None,
    deadline: None,
    user: None,
    credentials: None,
    authenticated_in: None,
};

impl RequestContext {
    /// What the flow has learnt about the request with `extensions`
    /// (nothing, for a request made outside it).
    pub fn of(extensions: &http::Extensions) -> &RequestContext {
        extensions
            .get::<RequestContext>()
            .unwrap_or(&NOTHING_LEARNT)
    }

    /// The same, for a step to add what it learns.
    pub fn learn(extensions: &mut http::Extensions) -> &mut RequestContext {
        extensions.get_or_insert_default::<RequestContext>()
    }

    /// The user authentication found and what the request is, for a
    /// `stage` that judges them. Every chain `chain::build` makes resolves
    /// both outside such a stage, so their absence is the gateway's own
    /// error, not a request to judge.
    pub(crate) fn requester(&self, stage: &str) -> Result<(&UserInfo, &RequestInfo), GatewayError> {
        match (self.user.as_deref(), self.info.as_ref()) {
            (Some(user), Some(info)) => Ok((user, info)),
            _ => Err(GatewayError::internal(format!(
                "the request reached {stage} without a user"
            ))),
        }
    }

    /// The user the request is made as; kube's anonymous user when
    /// authentication set none.
    pub(crate) fn user_or_anonymous(&self) -> &UserInfo {
        self.user.as_deref().unwrap_or(&ANONYMOUS)
    }
}

/// The one long-running predicate (kube's `LongRunningFunc`, built by
/// `BasicLongRunningRequestCheck` in
/// `staging/src/k8s.io/apiserver/pkg/server/filters/longrunning.go`): the
/// request info's verbs and subresources ([`RequestInfo::is_long_running`]),
/// and any upgrade (HTTP/1.1 `Upgrade`, HTTP/2 extended CONNECT), which
/// becomes a tunnel of unbounded length (kube serves upgrades only on those
/// subresources). The timeout, request-metrics, max-in-flight,
/// priority-and-fairness and audit steps ask it, and so may any step that
/// must not hold a slot or a deadline for the life of a stream.
pub fn is_long_running<B>(request: &http::Request<B>) -> bool {
    crate::request_info::is_upgrade(request)
        || RequestContext::of(request.extensions())
            .info
            .as_ref()
            .is_some_and(RequestInfo::is_long_running)
}

/// The connection a request arrived on.
#[derive(Debug, Clone)]
pub struct ConnectionInfo {
    pub(crate) remote_addr: SocketAddr,
    /// The client's IP address as the upstream proxy's `X-Forwarded-For`
    /// names it, rendered once per connection rather than per request.
    pub client_ip: HeaderValue,
    /// `ip:port`, as an authenticator's `request-view` gives it; rendered
    /// once per connection too, and shared by its requests' copies.
    pub remote_text: Arc<str>,
    /// True when the connection is TLS.
    pub tls: bool,
    /// The client's certificate chain, leaf first, when the listener verified
    /// one (mTLS).
    pub client_chain: Option<Arc<Vec<CertificateDer<'static>>>>,
    /// The connection's handshake verified a client certificate that does
    /// not verify any more (it expired, or a reload took its CA out of
    /// `listen.tls.client_ca`): `client_chain` is `None`, and the request
    /// counts as one whose credentials were refused, as kube's x509
    /// authenticator's error makes it.
    pub client_chain_refused: bool,
}

impl ConnectionInfo {
    /// The connection's peer, the listener's address and whether it is TLS.
    pub fn new(
        remote_addr: SocketAddr,
        tls: bool,
        client_chain: Option<Arc<Vec<CertificateDer<'static>>>>,
    ) -> Self {
        // An IPv4 client on an IPv6 socket is named by its IPv4 address.
        let client_ip = HeaderValue::try_from(remote_addr.ip().to_canonical().to_string())
            .unwrap_or_else(|_| HeaderValue::from_static("unknown"));
        ConnectionInfo {
            remote_addr,
            client_ip,
            remote_text: remote_addr.to_string().into(),
            tls,
            client_chain,
            client_chain_refused: false,
        }
    }
}

/// Where a request comes from and which host it asked for, decided once per
/// request from its connection, its checked host and `listen.trusted_proxies`.
/// The upstream proxy's `X-Forwarded-*` headers and the audit event's
/// `sourceIPs` are both read from here, so what the gateway tells the
/// upstream and what it records are the same belief.
#[derive(Debug, Clone)]
pub(crate) struct ClientOrigin {
    /// The one valid host the client asked for (`Host`, or the request
    /// target's authority), when it named one (HTTP/1.0 need not).
    pub host: Option<HeaderValue>,
    /// The peer is a trusted proxy: the forwarding headers it sent
    /// (`X-Forwarded-*`, `Forwarded`, `X-Real-IP`) are believed and passed on.
    pub peer_trusted: bool,
    /// The `X-Forwarded-For` the upstream receives: a trusted peer's own
    /// `X-Forwarded-For` lines, then the peer; otherwise the peer alone.
    pub forwarded_for: HeaderValue,
    /// kube's `sourceIPs` ([`ClientOrigin::source_ips`]).
    source_ips: SourceIps,
}

/// kube's `sourceIPs` for a request, shared by each of its audit events.
#[derive(Debug, Clone)]
pub enum SourceIps {
    /// A trusted peer's: what its headers say, then itself.
    Believed(Arc<[String]>),
    /// Any other peer's: its own address (its `X-Forwarded-For`), alone.
    Peer(HeaderValue),
}

impl SourceIps {
    /// The addresses, first to last.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        let (believed, peer) = match self {
            SourceIps::Believed(ips) => (&ips[..], None),
            SourceIps::Peer(peer) => (&[][..], Some(peer.to_str().unwrap_or(""))),
        };
        believed.iter().map(String::as_str).chain(peer)
    }
}

impl ClientOrigin {
    /// The origin of a request with `headers` that came on `connection`.
    pub(crate) fn new(
        connection: &ConnectionInfo,
        headers: &HeaderMap,
        host: Option<HeaderValue>,
        peer_trusted: bool,
    ) -> Self {
        let peer = connection.remote_addr.ip().to_canonical();
        if !peer_trusted {
            // The common case: nothing the client says about addresses counts.
            return ClientOrigin {
                host,
                peer_trusted,
                forwarded_for: connection.client_ip.clone(),
                source_ips: SourceIps::Peer(connection.client_ip.clone()),
            };
        }
        let hops: Vec<&[u8]> = headers
            .get_all(X_FORWARDED_FOR)
            .iter()
            .map(HeaderValue::as_bytes)
            .chain(std::iter::once(connection.client_ip.as_bytes()))
            .collect();
        let forwarded_for = HeaderValue::from_bytes(&hops.join(&b", "[..]))
            .unwrap_or_else(|_| connection.client_ip.clone());
        ClientOrigin {
            host,
            peer_trusted,
            forwarded_for,
            source_ips: SourceIps::Believed(source_ips(headers, peer).into()),
        }
    }

    /// kube's `utilnet.SourceIPs`: the believed `X-Forwarded-For` addresses,
    /// then a believed `X-Real-IP` not already among them, then the peer
    /// unless it is already the last; the peer alone when it is not trusted.
    pub(crate) fn source_ips(&self) -> &SourceIps {
        &self.source_ips
    }
}

const X_FORWARDED_FOR: &str = "x-forwarded-for";
const X_REAL_IP: &str = "x-real-ip";

/// kube's `utilnet.SourceIPs` over a trusted peer's headers.
fn source_ips(headers: &HeaderMap, peer: IpAddr) -> Vec<String> {
    let parse = |text: &str| text.trim().parse::<IpAddr>().ok();
    let mut ips: Vec<IpAddr> = headers
        .get_all(X_FORWARDED_FOR)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(parse)
        .collect();
    let real_ip = headers
        .get(X_REAL_IP)
        .and_then(|value| value.to_str().ok())
        .and_then(parse);
    if let Some(real_ip) = real_ip.filter(|ip| !ips.contains(ip)) {
        ips.push(real_ip);
    }
    if ips.last() != Some(&peer) {
        ips.push(peer);
    }
    ips.iter().map(ToString::to_string).collect()
}

/// The `Audit-ID` header, a name made once: a `&str` name is parsed, and
/// copied into a new allocation, by every insert (twice a request in
/// `chain/audit_id.rs`).
pub(crate) const AUDIT_ID_HEADER: HeaderName = HeaderName::from_static("audit-id");

/// The request's audit ID, from the client's `Audit-ID` header or generated:
/// kept as the header value it is sent as, so that the upstream's header,
/// the response's, the audit events and the log share its bytes. Letters,
/// digits and hyphens (`chain/audit_id.rs` checks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditId(HeaderValue);

impl AuditId {
    /// The ID as text.
    pub fn as_str(&self) -> &str {
        self.0.to_str().unwrap_or("")
    }

    /// Its first 64 characters, as kube's `GetAuditIDTruncated` gives a
    /// client's long ID to its traces (`staging/src/k8s.io/apiserver/pkg/audit/context.go`).
    pub(crate) fn truncated(&self) -> &str {
        /// kube's `maxAuditIDLength` there.
        const SHOWN: usize = 64;
        let id = self.as_str();
        id.get(..SHOWN).unwrap_or(id)
    }
}

impl From<HeaderValue> for AuditId {
    fn from(header: HeaderValue) -> Self {
        AuditId(header)
    }
}

/// When the request arrived (kube's request-received timestamp).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReceivedAt {
    /// For waits measured from arrival (flow control's queue deadline).
    pub instant: Instant,
    pub wall: SystemTime,
}

/// Who is making the request (kube's user.Info). A request carries it
/// shared, as an `Arc` in its context ([`RequestContext::user`]): the answer an
/// authenticator's cache keeps, the request it identifies and every step
/// that reads the user hold one copy of it, and the anonymous user is one
/// copy for the whole process.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct UserInfo {
    /// The user's name (kube's `user.Info.GetName`).
    pub name: String,
    /// A unique ID for the user, empty when the authenticator gives none.
    pub uid: String,
    /// The groups the user belongs to.
    pub groups: Vec<String>,
    /// Further attributes, as key and values, in the authenticator's order.
    pub extra: Vec<(String, Vec<String>)>,
}

/// kube's `user.SystemPrivilegedGroup`
/// (`staging/src/k8s.io/apiserver/pkg/authentication/user/user.go`): the
/// super-admins, exempt from flow control and from max-in-flight's 429.
pub(crate) const SYSTEM_PRIVILEGED_GROUP: &str = "system:masters";

/// kube's `user.Anonymous`, `user.AllAuthenticated` and
/// `user.AllUnauthenticated` (the same `user.go`).
pub(crate) const ANONYMOUS_USER: &str = "system:anonymous";
pub(crate) const ALL_AUTHENTICATED: &str = "system:authenticated";
pub(crate) const ALL_UNAUTHENTICATED: &str = "system:unauthenticated";

impl UserInfo {
    /// Whether the user is in `system:masters`.
    pub(crate) fn is_privileged(&self) -> bool {
        self.in_group(SYSTEM_PRIVILEGED_GROUP)
    }

    pub(crate) fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }

    /// Puts the user in `system:authenticated` (last) where kube does, and
    /// says whether it did: not `system:anonymous`, nor a user already in
    /// `system:authenticated` or in `system:unauthenticated`
    /// (`staging/src/k8s.io/apiserver/pkg/authentication/group/authenticated_group_adder.go`,
    /// and `WithImpersonation` for an impersonated user).
    pub(crate) fn add_authenticated_group(&mut self) -> bool {
        let add = self.name != ANONYMOUS_USER
            && !self.in_group(ALL_AUTHENTICATED)
            && !self.in_group(ALL_UNAUTHENTICATED);
        if add {
            self.groups.push(ALL_AUTHENTICATED.to_owned());
        }
        add
    }

    /// Puts `system:anonymous` in `system:unauthenticated` (last) unless it
    /// is there, as kube's `WithImpersonation` does for an impersonated
    /// anonymous user
    /// (`staging/src/k8s.io/apiserver/pkg/endpoints/filters/impersonation/impersonation.go`).
    pub(crate) fn add_unauthenticated_group(&mut self) {
        if self.name == ANONYMOUS_USER && !self.in_group(ALL_UNAUTHENTICATED) {
            self.groups.push(ALL_UNAUTHENTICATED.to_owned());
        }
    }
}

/// kube's anonymous user, made once.
static ANONYMOUS: LazyLock<Arc<UserInfo>> = LazyLock::new(|| {
    Arc::new(UserInfo {
        name: ANONYMOUS_USER.to_owned(),
        groups: vec![ALL_UNAUTHENTICATED.to_owned()],
        ..UserInfo::default()
    })
});

impl UserInfo {
    /// kube's anonymous user: `system:anonymous` in `system:unauthenticated`.
    pub(crate) fn anonymous() -> Arc<UserInfo> {
        ANONYMOUS.clone()
    }
}

/// What steps inside report about a request to a step outside them that
/// reads it once the response is back (the HTTP log, `wasmgate try`):
/// the user authentication found, the user impersonation acts as, and the
/// route that took the request. That outer step puts one in the request; a request
/// with none carries no copy of them out.
#[derive(Debug, Clone, Default)]
pub(crate) struct RequestReport(Arc<Reported>);

#[derive(Debug, Default)]
struct Reported {
    authenticated: OnceLock<Arc<UserInfo>>,
    /// The impersonated user's name.
    impersonated: OnceLock<String>,
    answered: OnceLock<RouteAnswered>,
    /// The trace of a request whose own trace was decided after
    /// authentication (it named one in its `traceparent`).
    trace_id: OnceLock<String>,
}

impl RequestReport {
    /// Called by authentication, once; a second report is ignored.
    pub(crate) fn authenticated(&self, user: &Arc<UserInfo>) {
        let _ = self.0.authenticated.set(user.clone());
    }

    /// Called by impersonation, once it has allowed `user` (kube's
    /// impersonation filter notes "X is impersonating Y" in its HTTP log).
    pub(crate) fn impersonating(&self, user: &UserInfo) {
        let _ = self.0.impersonated.set(user.name.clone());
    }

    /// Called by the delegation chain's route that takes the request.
    pub(crate) fn answered_by(&self, route: &RouteAnswered) {
        let _ = self.0.answered.set(route.clone());
    }

    /// The user authentication reported, if the request reached it.
    pub(crate) fn user(&self) -> Option<&UserInfo> {
        self.0.authenticated.get().map(|user| &**user)
    }

    /// The name of the user the request was made as, if it impersonated one.
    pub(crate) fn impersonated(&self) -> Option<&str> {
        self.0.impersonated.get().map(String::as_str)
    }

    /// The server and route that took the request, if one did.
    pub(crate) fn answered(&self) -> Option<&RouteAnswered> {
        self.0.answered.get()
    }

    /// Called by tracing when it decides, after authentication, the trace
    /// of a request that named one.
    pub(crate) fn traced(&self, trace_id: String) {
        let _ = self.0.trace_id.set(trace_id);
    }

    /// The trace tracing reported, if it decided one after authentication.
    pub(crate) fn trace_id(&self) -> Option<&str> {
        self.0.trace_id.get().map(String::as_str)
    }
}

/// The `Authorization` values the authentication stage took off a request
/// it authenticated, kept in its context for an upstream route that
/// forwards credentials (`forward_credentials = true`).
#[derive(Debug, Clone, Default)]
pub struct ClientCredentials(pub Vec<HeaderValue>);

/// What the flow may do to the connection a request came on, and what the
/// gateway did to it (set by the listener). Made once per connection and
/// shared by its requests: a clone is one reference count, where cloning
/// the tokens themselves takes a lock each, and another to drop.
#[derive(Debug, Clone)]
pub(crate) struct ConnectionControl(Arc<ConnectionTokens>);

#[derive(Debug)]
struct ConnectionTokens {
    cut: Option<CancellationToken>,
    shutdown_cut: CancellationToken,
    closing: CancellationToken,
}

impl ConnectionControl {
    pub(crate) fn new(
        cut: Option<CancellationToken>,
        shutdown_cut: CancellationToken,
        closing: CancellationToken,
    ) -> Self {
        ConnectionControl(Arc::new(ConnectionTokens {
            cut,
            shutdown_cut,
            closing,
        }))
    }

    /// Cancelling it closes the connection at once: how a response past its
    /// deadline is cut. HTTP/1.x requests only: an HTTP/2 connection carries
    /// other requests' streams, and a stream is reset through its body.
    pub(crate) fn cut(&self) -> Option<&CancellationToken> {
        self.0.cut.as_ref()
    }

    /// Cancelled when the shutdown closes every connection still open
    /// (`shutdown_timeout` passed), so what ends then knows why.
    pub(crate) fn shutdown_cut(&self) -> &CancellationToken {
        &self.0.shutdown_cut
    }

    /// Cancelled when the shutdown, `shutdown_delay` after it began, asks
    /// every connection to finish: long-running requests (a watch, a tunnel)
    /// end then rather than hold the drain until `shutdown_timeout`.
    pub(crate) fn closing(&self) -> &CancellationToken {
        &self.0.closing
    }
}

/// Set on a response the gateway ended in self-defense (its request
/// timeout, and the 429 of max-in-flight or of priority and fairness, where
/// kube calls `RecordRequestTermination`), for kube's
/// `apiserver_request_terminations_total`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Terminated;

/// The server and route a request reached, reported by the delegation
/// chain while the access log is on ([`RequestReport::answered_by`]).
#[derive(Debug, Clone)]
pub(crate) struct RouteAnswered {
    pub server: std::sync::Arc<str>,
    /// The route's match, as the manifest writes it.
    pub route: std::sync::Arc<str>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_steps_learn_is_kept_in_one_extension() {
        let mut extensions = http::Extensions::new();
        let nothing = RequestContext::of(&extensions);
        assert!(nothing.info.is_none() && nothing.user.is_none());
        assert!(extensions.is_empty(), "reading adds nothing");

        let deadline = Instant::now();
        RequestContext::learn(&mut extensions).deadline = Some(deadline);
        RequestContext::learn(&mut extensions).audit_id =
            Some(AuditId::from(HeaderValue::from_static("id-1")));
        RequestContext::learn(&mut extensions).user = Some(UserInfo::anonymous());

        assert_eq!(extensions.len(), 1);
        let context = RequestContext::of(&extensions);
        assert_eq!(context.deadline, Some(deadline));
        assert_eq!(context.audit_id.as_ref().map(AuditId::as_str), Some("id-1"));
        assert_eq!(context.user_or_anonymous().name, "system:anonymous");
        assert!(Arc::ptr_eq(
            context.user.as_ref().expect("a user"),
            &UserInfo::anonymous()
        ));
    }

    fn origin_of(peer: &str, trusted: bool, sent: &[(&str, &str)]) -> ClientOrigin {
        let mut headers = HeaderMap::new();
        for (name, value) in sent {
            headers.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        let connection = ConnectionInfo::new(peer.parse().unwrap(), false, None);
        ClientOrigin::new(&connection, &headers, None, trusted)
    }

    const SENT: [(&str, &str); 3] = [
        ("x-forwarded-for", "1.1.1.1, not-an-ip"),
        ("x-forwarded-for", "2.2.2.2"),
        ("x-real-ip", "3.3.3.3"),
    ];

    #[test]
    fn an_untrusted_peer_is_the_only_source() {
        let origin = origin_of("10.0.0.1:5000", false, &SENT);
        assert_eq!(origin.forwarded_for, "10.0.0.1");
        assert_eq!(origin.source_ips().iter().collect::<Vec<_>>(), ["10.0.0.1"]);
    }

    #[test]
    fn a_trusted_peer_is_believed_as_kube_believes_every_peer() {
        let origin = origin_of("10.0.0.1:5000", true, &SENT);
        assert_eq!(
            origin.forwarded_for,
            "1.1.1.1, not-an-ip, 2.2.2.2, 10.0.0.1"
        );
        assert_eq!(
            origin.source_ips().iter().collect::<Vec<_>>(),
            ["1.1.1.1", "2.2.2.2", "3.3.3.3", "10.0.0.1"]
        );
        // X-Real-IP already in the chain, and the peer already last, are
        // not repeated (utilnet.SourceIPs).
        let origin = origin_of(
            "10.0.0.1:5000",
            true,
            &[
                ("x-forwarded-for", "1.1.1.1, 10.0.0.1"),
                ("x-real-ip", "1.1.1.1"),
            ],
        );
        assert_eq!(
            origin.source_ips().iter().collect::<Vec<_>>(),
            ["1.1.1.1", "10.0.0.1"]
        );
    }

    #[test]
    fn an_ipv4_peer_on_an_ipv6_socket_is_named_by_its_ipv4_address() {
        let origin = origin_of("[::ffff:10.0.0.1]:5000", false, &[]);
        assert_eq!(origin.forwarded_for, "10.0.0.1");
        assert_eq!(origin.source_ips().iter().collect::<Vec<_>>(), ["10.0.0.1"]);
    }
}
