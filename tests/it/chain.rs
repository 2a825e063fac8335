//! The native handler chain seen from a client: panic recovery, the audit ID,
//! cache-control, HSTS and CORS.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use wasmgate::body::{Body, Request, Response};
use wasmgate::handler::{Handler, SharedHandler};

use crate::support::*;

/// A centre that panics on `/panic` (inside its future) and `/panic-now`
/// (in `call` itself), and otherwise hands over to the servers; the audit
/// tests' too.
pub struct Panicky {
    pub next: SharedHandler,
}

impl Handler for Panicky {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        match request.uri().path() {
            "/panic-now" => panic!("the centre panicked at once"),
            "/panic" => Box::pin(async {
                tokio::task::yield_now().await;
                panic!("the centre panicked while serving");
            }),
            "/fine" => Box::pin(async { http::Response::new(Body::full("fine")) }),
            _ => self.next.call(request),
        }
    }
}

pub const SERVERS: &str = r#"
[[servers]]
name = "chain"

[[servers.routes]]
path = "/static"
static = { body = "static" }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_is_a_500_status_and_the_gateway_goes_on() {
    let gateway = TestGateway::start_with_center(new_dir(), &plaintext(SERVERS), |next| {
        Arc::new(Panicky { next })
    })
    .await;
    for client in [http_client(), h2c_client()] {
        for path in ["/panic", "/panic-now"] {
            let answer = send(
                client
                    .get(gateway.url(path))
                    .header("audit-id", "panic-audit-id"),
            )
            .await;
            let status = answer.assert_status(500, "InternalError");
            let message = status["message"].as_str().expect("a message");
            assert!(
                message.starts_with("Internal error occurred: "),
                "{message}"
            );
            assert!(
                message.ends_with(&format!("while serving GET {path}")),
                "the message names the request: {message}"
            );
            assert!(
                !message.contains("the centre panicked"),
                "the panic's text is for the log only: {message}"
            );
            assert_eq!(
                answer.header("audit-id"),
                Some("panic-audit-id"),
                "the audit ID survives the panic"
            );

            // The next request on the same client (same connection) is served.
            let next = get(&client, &gateway.url("/fine")).await;
            assert_eq!((next.status, next.body.as_str()), (200, "fine"));
        }
    }
    // Without an Audit-ID, a panic still answers with a generated one.
    let answer = get(&http_client(), &gateway.url("/panic")).await;
    let id = answer.header("audit-id").expect("an audit ID");
    assert!(uuid::Uuid::parse_str(id).is_ok(), "{id}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_id_is_echoed_or_generated() {
    let gateway = TestGateway::start(&plaintext(SERVERS)).await;
    let client = http_client();
    for path in ["/static", "/nowhere", "/healthz"] {
        let echoed = send(
            client
                .get(gateway.url(path))
                .header("Audit-ID", "4d1b4e0c-my-own-id"),
        )
        .await;
        assert_eq!(
            echoed.header("audit-id"),
            Some("4d1b4e0c-my-own-id"),
            "{path}"
        );

        let first = get(&client, &gateway.url(path)).await;
        let second = get(&client, &gateway.url(path)).await;
        let ids: Vec<&str> = [&first, &second]
            .iter()
            .map(|a| a.header("audit-id").expect("an audit ID"))
            .collect();
        for id in &ids {
            let uuid = uuid::Uuid::parse_str(id).unwrap_or_else(|_| panic!("{id} is not a UUID"));
            assert_eq!(uuid.get_version_num(), 4, "{id}");
        }
        assert_ne!(ids[0], ids[1], "every request gets its own ID");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_control_is_added_unless_the_upstream_set_one() {
    let upstream = Upstream::start().await;
    let manifest = plaintext(&format!(
        "{SERVERS}\n[[servers.routes]]\nprefix = \"/up/\"\nupstream = \"{}\"\n",
        upstream.url()
    ));
    let gateway = TestGateway::start(&manifest).await;
    let client = http_client();
    for path in ["/static", "/nowhere", "/up/x", "/readyz", "/apis"] {
        let answer = get(&client, &gateway.url(path)).await;
        assert_eq!(
            answer.header("cache-control"),
            Some("no-cache, private"),
            "{path}"
        );
    }
    let own = send(client.get(gateway.url("/up/cached")).header(MODE, "cache")).await;
    assert_eq!(own.status, 200);
    let values: Vec<_> = own.headers.get_all("cache-control").iter().collect();
    assert_eq!(
        values,
        ["max-age=60"],
        "the upstream's own Cache-Control is kept, alone"
    );
    // No HSTS without [hsts].
    assert!(own.header("strict-transport-security").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hsts_is_sent_when_configured() {
    let manifest = plaintext(&format!(
        "[hsts]\ndirectives = [\"max-age=31536000\", \"includeSubDomains\", \"preload\"]\n\n{SERVERS}"
    ));
    let gateway = TestGateway::start(&manifest).await;
    for path in ["/static", "/nowhere", "/healthz"] {
        let answer = get(&http_client(), &gateway.url(path)).await;
        assert_eq!(
            answer.header("strict-transport-security"),
            Some("max-age=31536000; includeSubDomains; preload"),
            "{path}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_allows_listed_origins_answers_preflights_and_refuses_others() {
    let upstream = Upstream::start().await;
    let manifest = plaintext(&format!(
        r#"
[cors]
allowed_origins = ['^https://good\.example$', '//localhost(:|$)']

{SERVERS}
[[servers.routes]]
prefix = "/up/"
upstream = "{}"
"#,
        upstream.url()
    ));
    let gateway = TestGateway::start(&manifest).await;
    let client = http_client();

    let preflight = send(
        client
            .request(reqwest::Method::OPTIONS, gateway.url("/up/x"))
            .header("origin", "https://good.example")
            .header("access-control-request-method", "PUT"),
    )
    .await;
    assert_eq!(preflight.status, 204);
    assert_eq!(preflight.body, "");
    assert_eq!(
        upstream.hits(),
        0,
        "a pre-flight is answered before the upstream"
    );
    let expected = [
        ("access-control-allow-origin", "https://good.example"),
        (
            "access-control-allow-methods",
            "POST, GET, OPTIONS, PUT, DELETE, PATCH",
        ),
        ("access-control-allow-credentials", "true"),
        ("vary", "Origin"),
    ];
    for (name, value) in expected {
        assert_eq!(preflight.header(name), Some(value), "{name}");
    }
    let allowed_headers = preflight
        .header("access-control-allow-headers")
        .expect("allowed headers");
    assert!(
        allowed_headers.contains("Authorization"),
        "{allowed_headers}"
    );

    let allowed = send(
        client
            .get(gateway.url("/up/x"))
            .header("origin", "http://localhost:3000"),
    )
    .await;
    assert_eq!(allowed.status, 200);
    assert_eq!(
        allowed.header("access-control-allow-origin"),
        Some("http://localhost:3000")
    );
    assert_eq!(upstream.hits(), 1);

    for origin in [
        "https://evil.example",
        "https://good.example.evil.io",
        "http://localhostevil.io",
    ] {
        let refused = send(client.get(gateway.url("/up/x")).header("origin", origin)).await;
        refused.assert_status(403, "Forbidden");
        assert!(
            refused.header("access-control-allow-origin").is_none(),
            "{origin}"
        );
        let refused_preflight = send(
            client
                .request(reqwest::Method::OPTIONS, gateway.url("/up/x"))
                .header("origin", origin),
        )
        .await;
        refused_preflight.assert_status(403, "Forbidden");
    }
    assert_eq!(
        upstream.hits(),
        1,
        "refused origins never reach the upstream"
    );

    // No Origin: not a CORS request, served as usual and without CORS headers.
    let plain = get(&client, &gateway.url("/up/x")).await;
    assert_eq!(plain.status, 200);
    assert!(plain.header("access-control-allow-origin").is_none());
}
