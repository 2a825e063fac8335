//! TLS on the listener: the self-signed default written to `cert_dir`,
//! certificates from a test CA, optional client certificates (mTLS),
//! HTTP/2 by ALPN, HTTP/1.1, and h2c with prior knowledge on plaintext.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use wasmgate::body::{Body, Request, Response};
use wasmgate::context::RequestContext;
use wasmgate::handler::{Handler, SharedHandler};

use crate::support::*;

const SERVERS: &str = r#"
[[servers]]
name = "tls"

[[servers.routes]]
path = "/hello"
static = { body = "hello" }
"#;

fn tls_manifest(client_ca: bool) -> String {
    let client_ca = if client_ca {
        "client_ca = \"ca.crt\"\n"
    } else {
        ""
    };
    format!(
        "[listen]\naddress = \"127.0.0.1:0\"\n\n[listen.tls]\ncert = \"server.crt\"\nkey = \"server.key\"\n{client_ca}\n{SERVERS}"
    )
}

/// Answers `/whoami` with what the listener learnt about the client's
/// certificate; everything else goes to the servers.
struct WhoAmI {
    next: SharedHandler,
}

impl Handler for WhoAmI {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        if request.uri().path() != "/whoami" {
            return self.next.call(request);
        }
        let info = RequestContext::of(request.extensions()).connection.clone();
        Box::pin(async move {
            let text = match info {
                None => "no connection info".to_owned(),
                Some(info) => format!(
                    "tls={} client-certs={}",
                    info.tls,
                    info.client_chain.as_ref().map_or(0, |chain| chain.len())
                ),
            };
            http::Response::new(Body::full(text))
        })
    }
}

/// An HTTP/1.1 request over a TLS connection made with rustls directly,
/// presenting `identity`; the answer, or the error that ended it.
async fn raw_tls_exchange(
    addr: std::net::SocketAddr,
    ca_pem: &str,
    identity: Option<&CertAndKey>,
) -> Result<String, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(cert.expect("a CA certificate"))
            .expect("a usable CA");
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(roots);
    let config = match identity {
        Some(identity) => {
            let chain = CertificateDer::pem_slice_iter(identity.cert_pem.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .expect("a certificate");
            let key = PrivateKeyDer::from_pem_slice(identity.key_pem.as_bytes()).expect("a key");
            builder
                .with_client_auth_cert(chain, key)
                .expect("a client identity")
        }
        None => builder.with_no_client_auth(),
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from("localhost").expect("a server name");
    let exchange = async {
        let mut tls = connector.connect(name, tcp).await?;
        tls.write_all(b"GET /hello HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await?;
        let mut answer = Vec::new();
        tls.read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&answer).into_owned())
    };
    bounded("a TLS exchange", exchange)
        .await
        .map_err(|error| error.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_is_a_self_signed_certificate_kept_in_cert_dir() {
    let dir = new_dir();
    let cert_dir = dir.path().join("generated");
    let manifest =
        format!("[listen]\naddress = \"127.0.0.1:0\"\ncert_dir = \"generated\"\n{SERVERS}");
    let gateway = TestGateway::start_in(dir, &manifest).await;
    assert!(gateway.https, "no [listen.tls] and no plaintext means TLS");
    let cert_path = cert_dir.join("wasmgate.crt");
    let cert_pem =
        std::fs::read_to_string(&cert_path).expect("the generated certificate is in cert_dir");
    assert!(cert_pem.contains("BEGIN CERTIFICATE"));
    assert!(
        cert_dir.join("wasmgate.key").exists(),
        "the key is kept beside it"
    );

    // curl -k
    let answer = get(&insecure_client(), &gateway.url("/hello")).await;
    assert_eq!((answer.status, answer.body.as_str()), (200, "hello"));
    // A client that trusts the generated certificate verifies it.
    let answer = get(&tls_client(&cert_pem), &gateway.url("/hello")).await;
    assert_eq!((answer.status, answer.body.as_str()), (200, "hello"));
    let dir = gateway.dir;

    // A second start keeps the certificate it generated first.
    let again = TestGateway::start_in(dir, &manifest).await;
    assert_eq!(
        std::fs::read_to_string(&cert_path).expect("still there"),
        cert_pem
    );
    let answer = get(&tls_client(&cert_pem), &again.url("/hello")).await;
    assert_eq!(answer.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_test_ca_serves_http2_by_alpn_and_http1() {
    let dir = new_dir();
    let ca = write_server_pki(dir.path());
    let gateway = TestGateway::start_in(dir, &tls_manifest(false)).await;

    let h2 = get(&tls_client(&ca.cert_pem), &gateway.url("/hello")).await;
    assert_eq!((h2.status, h2.body.as_str()), (200, "hello"));
    assert_eq!(h2.version, http::Version::HTTP_2, "ALPN offers h2");

    let h1 = get(&tls_client_http1(&ca.cert_pem), &gateway.url("/hello")).await;
    assert_eq!((h1.status, h1.body.as_str()), (200, "hello"));
    assert_eq!(h1.version, http::Version::HTTP_11);

    // A client that trusts another CA refuses the server.
    let stranger = Ca::new("another CA");
    let refused = tls_client(&stranger.cert_pem)
        .get(gateway.url("/hello"))
        .send()
        .await;
    assert!(
        refused.is_err(),
        "a client must not trust a certificate its CA did not sign"
    );

    // Plain HTTP to a TLS listener is not served.
    let plain = http_client()
        .get(format!("http://{}/hello", gateway.addr))
        .send()
        .await;
    assert!(plain.is_err() || plain.is_ok_and(|r| r.status() != 200));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstream_is_told_the_client_came_over_https() {
    let dir = new_dir();
    let ca = write_server_pki(dir.path());
    let upstream = Upstream::start().await;
    let manifest = format!(
        "{}\n[[servers.routes]]\nprefix = \"/up/\"\nupstream = \"{}\"\n",
        tls_manifest(false),
        upstream.url()
    );
    let gateway = TestGateway::start_in(dir, &manifest).await;
    for client in [tls_client(&ca.cert_pem), tls_client_http1(&ca.cert_pem)] {
        let answer = get(&client, &gateway.url("/up/x")).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        let headers = &answer.json()["headers"];
        assert_eq!(headers["x-forwarded-proto"], serde_json::json!(["https"]));
        assert_eq!(
            headers["x-forwarded-host"],
            serde_json::json!([gateway.addr.to_string()])
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_are_verified_but_optional() {
    let dir = new_dir();
    let ca = write_server_pki(dir.path());
    let alice = ca.client_cert("alice");
    let manifest = tls_manifest(true);
    let gateway = TestGateway::start_with_center(dir, &manifest, |servers| {
        Arc::new(WhoAmI { next: servers })
    })
    .await;

    let with_cert = tls_client_with_identity(&ca.cert_pem, &alice);
    let answer = get(&with_cert, &gateway.url("/whoami")).await;
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (200, "tls=true client-certs=1")
    );
    assert_eq!(get(&with_cert, &gateway.url("/hello")).await.body, "hello");

    // No certificate: still served, as in kube (other authenticators may
    // recognise the request).
    let anonymous = tls_client(&ca.cert_pem);
    let answer = get(&anonymous, &gateway.url("/whoami")).await;
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (200, "tls=true client-certs=0")
    );

    // A certificate from another CA is refused at the handshake.
    let mallory = Ca::new("mallory's CA").client_cert("mallory");
    let refused = tls_client_with_identity(&ca.cert_pem, &mallory)
        .get(gateway.url("/hello"))
        .send()
        .await;
    assert!(
        refused.is_err(),
        "a client certificate from another CA must be refused: {refused:?}"
    );
    // Seen from rustls itself: the server ends the handshake with an alert.
    let alert = raw_tls_exchange(gateway.addr, &ca.cert_pem, Some(&mallory)).await;
    assert!(
        alert.is_err_and(|error| error.contains("alert")),
        "the handshake must end with a TLS alert"
    );
    let served = raw_tls_exchange(gateway.addr, &ca.cert_pem, Some(&alice)).await;
    assert!(served.is_ok_and(|answer| answer.starts_with("HTTP/1.1 200")));

    // And the listener goes on serving.
    assert_eq!(get(&with_cert, &gateway.url("/hello")).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_serves_http1_and_h2c_with_prior_knowledge() {
    let gateway = TestGateway::start_with_center(new_dir(), &plaintext(SERVERS), |servers| {
        Arc::new(WhoAmI { next: servers })
    })
    .await;
    assert!(!gateway.https);
    let h2c = get(&h2c_client(), &gateway.url("/hello")).await;
    assert_eq!(
        (h2c.status, h2c.body.as_str(), h2c.version),
        (200, "hello", http::Version::HTTP_2)
    );
    let h1 = get(&http_client(), &gateway.url("/hello")).await;
    assert_eq!(
        (h1.status, h1.body.as_str(), h1.version),
        (200, "hello", http::Version::HTTP_11)
    );
    let who = get(&http_client(), &gateway.url("/whoami")).await;
    assert_eq!(who.body, "tls=false client-certs=0");
}

/// A gateway whose users are the client certificates `client_ca` (a file in
/// the manifest's folder) verifies, anonymous requests allowed, `/up/` sent
/// to `upstream` with the user's name in `X-Remote-User`; `/generation`
/// answers `generation`.
fn x509_manifest(client_ca: &str, upstream: &Upstream, generation: &str) -> String {
    let x509 = filter("authentication.filters", "certs", "x509-authn", None, "");
    format!(
        "[listen]\naddress = \"127.0.0.1:0\"\n\n[listen.tls]\ncert = \"server.crt\"\nkey = \"server.key\"\nclient_ca = \"{client_ca}\"\n\n\
         [authentication]\nanonymous = true\n{x509}\n[authorization]\nalways_allow = true\n\n\
         [[servers]]\nname = \"x509\"\n\
         [[servers.routes]]\npath = \"/generation\"\nstatic = {{ body = \"{generation}\" }}\n\
         [[servers.routes]]\nprefix = \"/up/\"\nupstream = {{ url = \"{}\", identity = \"request-header\" }}\n",
        upstream.url(),
    )
}

/// A gateway started from [`x509_manifest`] trusting the clients of a CA of
/// its own, with `others.crt` (another CA) beside it for a reload: the
/// manifest's path, the gateway, the server's CA, the clients' CA, and a
/// client without a certificate (served as `system:anonymous`).
struct X509Gateway {
    path: std::path::PathBuf,
    upstream: Upstream,
    gateway: GatewayProcess,
    server_ca: Ca,
    clients: Ca,
    anonymous: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl X509Gateway {
    async fn start() -> X509Gateway {
        build_filters();
        let upstream = Upstream::start().await;
        let dir = new_dir();
        let server_ca = write_server_pki(dir.path());
        let clients = Ca::new("clients CA");
        let others = Ca::new("other clients CA");
        std::fs::write(dir.path().join("clients.crt"), &clients.cert_pem).expect("write");
        std::fs::write(dir.path().join("others.crt"), &others.cert_pem).expect("write");
        let path = dir.path().join("gateway.toml");
        std::fs::write(&path, x509_manifest("clients.crt", &upstream, "1")).expect("write");
        let gateway = GatewayProcess::spawn(&path);
        let anonymous = tls_client(&server_ca.cert_pem);
        let started = X509Gateway {
            path,
            upstream,
            gateway,
            server_ca,
            clients,
            anonymous,
            _dir: dir,
        };
        assert_eq!(
            started.user_seen(&started.anonymous).await,
            (200, Some("system:anonymous".to_owned()))
        );
        started
    }

    /// The status and the user the upstream was told of, for a request on
    /// `client`'s connection.
    async fn user_seen(&self, client: &reqwest::Client) -> (u16, Option<String>) {
        let answer = get(client, &self.gateway.url("/up/who")).await;
        let user = (answer.status == 200)
            .then(|| echoed_header(&echo(&answer), "x-remote-user"))
            .flatten();
        (answer.status, user)
    }

    /// A client presenting `identity`; it keeps its connection (HTTP/2).
    fn client(&self, identity: &CertAndKey) -> reqwest::Client {
        tls_client_with_identity(&self.server_ca.cert_pem, identity)
    }
}

// kube's x509 authenticator verifies the client's chain on every request,
// at the request's time and against the CA bundle in force then
// (`AuthenticateRequest` in
// `staging/src/k8s.io/apiserver/pkg/authentication/request/x509/x509.go`,
// through `dynamiccertificates.WithChainsVerification`), and an error there
// is a 401 even with anonymous requests allowed (anonymous is added with
// `union.NewFailOnError`). A connection opened while its certificate was
// good does not keep it good.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_that_expired_on_an_open_connection_counts_no_more() {
    let x509 = X509Gateway::start().await;
    // Alice's certificate ends in three seconds; her connection outlives it.
    let not_after = unix_now() + 3;
    let alice = x509.clients.client_cert_until("alice", not_after);
    let as_alice = x509.client(&alice);
    assert_eq!(
        x509.user_seen(&as_alice).await,
        (200, Some("alice".to_owned()))
    );
    while unix_now() <= not_after + 1 {
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    assert_eq!(
        x509.user_seen(&as_alice).await,
        (401, None),
        "a request on a connection whose client certificate expired"
    );
    let new_connection = x509
        .client(&alice)
        .get(x509.gateway.url("/up/who"))
        .send()
        .await;
    assert!(
        new_connection.is_err(),
        "a new connection with the expired certificate fails its handshake"
    );
    assert_eq!(
        x509.user_seen(&x509.anonymous).await,
        (200, Some("system:anonymous".to_owned()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_whose_ca_a_reload_removed_counts_no_more() {
    let x509 = X509Gateway::start().await;
    let as_bob = x509.client(&x509.clients.client_cert("bob"));
    assert_eq!(x509.user_seen(&as_bob).await, (200, Some("bob".to_owned())));
    write_atomically(
        &x509.path,
        &x509_manifest("others.crt", &x509.upstream, "2"),
    );
    eventually("the reload", || async {
        let answer = get(&x509.anonymous, &x509.gateway.url("/generation")).await;
        (answer.body == "2").then_some(())
    })
    .await;
    assert_eq!(
        x509.user_seen(&as_bob).await,
        (401, None),
        "a request on a connection whose client certificate's CA is no longer trusted"
    );
    assert_eq!(
        x509.user_seen(&x509.anonymous).await,
        (200, Some("system:anonymous".to_owned()))
    );
}
