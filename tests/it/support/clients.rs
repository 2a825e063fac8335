//! Clients of the gateway: reqwest clients (HTTP/1.1, h2c, TLS trusting a
//! test CA or nothing), answers read whole and checked as kube Statuses,
//! and the `/metrics` text read.

use super::certs::CertAndKey;
use super::{BOUND, bounded};

/// kube's 404 body, byte for byte.
pub const NOT_FOUND_BODY: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","details":{},"code":404}"#;

fn client_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(BOUND)
        .tls_built_in_root_certs(false)
}

/// A plaintext HTTP/1.1 client.
pub fn http_client() -> reqwest::Client {
    client_builder()
        .http1_only()
        .build()
        .expect("build a client")
}

/// A plaintext HTTP/2 client with prior knowledge (h2c).
pub fn h2c_client() -> reqwest::Client {
    client_builder()
        .http2_prior_knowledge()
        .build()
        .expect("build a client")
}

/// A TLS client trusting `ca_pem` only (HTTP/2 offered via ALPN).
pub fn tls_client(ca_pem: &str) -> reqwest::Client {
    tls_builder(ca_pem).build().expect("build a client")
}

/// A TLS client trusting `ca_pem`, speaking HTTP/1.1 only.
pub fn tls_client_http1(ca_pem: &str) -> reqwest::Client {
    tls_builder(ca_pem)
        .http1_only()
        .build()
        .expect("build a client")
}

/// A TLS client trusting `ca_pem` that reports redirects instead of
/// following them.
pub fn tls_client_no_redirects(ca_pem: &str) -> reqwest::Client {
    tls_builder(ca_pem)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("build a client")
}

/// A TLS client trusting `ca_pem` that presents a client certificate.
pub fn tls_client_with_identity(ca_pem: &str, cert: &CertAndKey) -> reqwest::Client {
    let identity =
        reqwest::Identity::from_pem(format!("{}{}", cert.cert_pem, cert.key_pem).as_bytes())
            .expect("a client identity");
    tls_builder(ca_pem)
        .identity(identity)
        .build()
        .expect("build a client")
}

/// A TLS client that accepts any certificate (curl's `-k`).
pub fn insecure_client() -> reqwest::Client {
    client_builder()
        .danger_accept_invalid_certs(true)
        .build()
        .expect("build a client")
}

fn tls_builder(ca_pem: &str) -> reqwest::ClientBuilder {
    let ca = reqwest::Certificate::from_pem(ca_pem.as_bytes()).expect("a CA certificate");
    client_builder().add_root_certificate(ca)
}

/// A response read whole: status, headers, body text.
pub struct Answer {
    pub status: u16,
    pub version: http::Version,
    pub headers: http::HeaderMap,
    pub body: String,
}

impl Answer {
    pub async fn of(response: reqwest::Response) -> Answer {
        let status = response.status().as_u16();
        let version = response.version();
        let headers = response.headers().clone();
        let body = bounded("a response body", response.text())
            .await
            .expect("read a response body");
        Answer {
            status,
            version,
            headers,
            body,
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(name)
            .map(|value| value.to_str().expect("a text header"))
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|error| panic!("not JSON ({error}): {}", self.body))
    }

    /// Asserts the body is a kube Status with this code and reason.
    pub fn assert_status(&self, code: u16, reason: &str) -> serde_json::Value {
        assert_eq!(self.status, code, "body: {}", self.body);
        let status = self.json();
        assert_eq!(status["kind"], "Status", "body: {}", self.body);
        assert_eq!(status["apiVersion"], "v1", "body: {}", self.body);
        assert_eq!(status["status"], "Failure", "body: {}", self.body);
        assert_eq!(status["code"], code, "body: {}", self.body);
        assert_eq!(status["reason"], reason, "body: {}", self.body);
        assert_eq!(
            self.header("content-type"),
            Some("application/json"),
            "a Status is JSON: {:?}",
            self.headers
        );
        status
    }
}

/// GET `url` and read the whole answer.
pub async fn get(client: &reqwest::Client, url: &str) -> Answer {
    let response = bounded("a response", client.get(url).send())
        .await
        .expect("send a request");
    Answer::of(response).await
}

/// Sends `request` and reads the whole answer.
pub async fn send(request: reqwest::RequestBuilder) -> Answer {
    let response = bounded("a response", request.send())
        .await
        .expect("send a request");
    Answer::of(response).await
}

/// Sends `request`: the status, headers and body as bytes (a body that is
/// not text, such as protobuf).
pub async fn send_for_bytes(
    request: reqwest::RequestBuilder,
) -> (u16, http::HeaderMap, bytes::Bytes) {
    let response = bounded("a response", request.send())
        .await
        .expect("send a request");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = bounded("a response body", response.bytes())
        .await
        .expect("read a response body");
    (status, headers, body)
}

/// An error and every cause under it, on one line.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The `/metrics` text of the gateway at `base` (`http://127.0.0.1:PORT`).
pub async fn metrics_text(client: &reqwest::Client, base: &str) -> String {
    let metrics = get(client, &format!("{base}/metrics")).await;
    assert_eq!(metrics.status, 200, "GET /metrics: {}", metrics.body);
    metrics.body
}

/// The value of one series (`name{labels}`, as printed) in a metrics text.
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix(series)?.strip_prefix(' ')?;
        value.split_whitespace().next()?.parse().ok()
    })
}

/// The value of `wasmgate_filter_calls_total` for one filter and outcome,
/// read from a plaintext gateway's `/metrics` URL (0 before the first call).
pub async fn filter_calls(metrics_url: &str, filter: &str, outcome: &str) -> u64 {
    let metrics = get(&http_client(), metrics_url).await;
    assert_eq!(metrics.status, 200, "{}", metrics.body);
    let prefix =
        format!("wasmgate_filter_calls_total{{filter=\"{filter}\",outcome=\"{outcome}\"}} ");
    metrics
        .body
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map_or(0, |count| count.parse().expect("a count"))
}

/// The value of one series (`name{labels}`, as printed) of this process's
/// metrics, 0 when absent: for gateways running in this process, without
/// a request (which would itself pass through the filters it counts).
pub fn local_metric(series: &str) -> u64 {
    let prefix = format!("{series} ");
    wasmgate::metrics_exposition()
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map_or(0, |value| value.parse().expect("a count"))
}

/// [`filter_calls`], read with [`local_metric`].
pub fn local_filter_calls(filter: &str, outcome: &str) -> u64 {
    local_metric(&format!(
        "wasmgate_filter_calls_total{{filter=\"{filter}\",outcome=\"{outcome}\"}}"
    ))
}
