//! Real clients against the real binary: `curl` (HTTP/1.1 and HTTP/2 over
//! TLS with `--cacert`, `-k` against the self-signed default, h2c) and
//! `kubectl` (`get --raw` for health, and discovery through `api-versions`
//! and `api-resources`). Nothing is skipped: a missing program fails the test
//! with a message saying what to install.

use crate::support::run_client as run;
use crate::support::*;

const CURL: &str = "/usr/bin/curl";

fn spawn_binary(dir: &tempfile::TempDir, manifest: &str) -> GatewayProcess {
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, manifest).expect("write the manifest");
    GatewayProcess::spawn(&path)
}

const DISCOVERY_SERVERS: &str = r#"
[[servers]]
name = "gateway"

[[servers.routes]]
path = "/hello"
static = { body = "hello" }

[[servers.routes]]
api = "/apis/demo.example.io/v1"
static = { status = 200, content_type = "application/json", body = '{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"demo.example.io/v1","resources":[{"name":"widgets","singularName":"widget","namespaced":true,"kind":"Widget","verbs":["create","delete","get","list","patch","update"],"shortNames":["wd"]}]}' }

[[servers]]
name = "second"

[[servers.routes]]
api = "/apis/other.example.io/v1beta1"
static = { status = 200, content_type = "application/json", body = '{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"other.example.io/v1beta1","resources":[{"name":"gadgets","singularName":"gadget","namespaced":false,"kind":"Gadget","verbs":["get","list"]}]}' }

[[servers.routes]]
api = "/api/v1"
static = { status = 200, content_type = "application/json", body = '{"kind":"APIResourceList","groupVersion":"v1","resources":[{"name":"configmaps","singularName":"configmap","namespaced":true,"kind":"ConfigMap","verbs":["get","list"],"shortNames":["cm"]}]}' }
"#;

fn tls_manifest() -> String {
    format!(
        "[listen]\naddress = \"127.0.0.1:0\"\n\n[listen.tls]\ncert = \"server.crt\"\nkey = \"server.key\"\nclient_ca = \"ca.crt\"\n\n{DISCOVERY_SERVERS}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_over_tls_with_http1_and_http2() {
    let dir = new_dir();
    write_server_pki(dir.path());
    let gateway = spawn_binary(&dir, &tls_manifest());
    let ca = dir.path().join("ca.crt");
    let ca = ca.to_str().expect("a UTF-8 path");
    let url = gateway.url("/hello");
    let write_out = "\n%{http_version} %{http_code}";
    for (flag, version) in [("--http1.1", "1.1"), ("--http2", "2")] {
        let (ok, stdout, stderr) = run(
            CURL,
            &[
                "-sS",
                "--noproxy",
                "*",
                "--cacert",
                ca,
                flag,
                "-w",
                write_out,
                &url,
            ],
            dir.path(),
        )
        .await;
        assert!(ok, "curl {flag} failed: {stderr}");
        assert_eq!(stdout, format!("hello\n{version} 200"), "curl {flag}");
    }
    // Headers: the chain's, as curl sees them.
    let (ok, stdout, stderr) = run(
        CURL,
        &[
            "-sS",
            "--noproxy",
            "*",
            "--cacert",
            ca,
            "-D",
            "-",
            "-o",
            "/dev/null",
            &url,
        ],
        dir.path(),
    )
    .await;
    assert!(ok, "{stderr}");
    let lower = stdout.to_ascii_lowercase();
    assert!(
        lower.contains("cache-control: no-cache, private"),
        "{stdout}"
    );
    assert!(lower.contains("audit-id: "), "{stdout}");
    // A 404 is kube's Status; without --cacert curl refuses the server.
    let (ok, stdout, _) = run(
        CURL,
        &[
            "-sS",
            "--noproxy",
            "*",
            "--cacert",
            ca,
            &gateway.url("/nowhere"),
        ],
        dir.path(),
    )
    .await;
    assert!(ok);
    assert_eq!(stdout, NOT_FOUND_BODY);
    let (ok, _, stderr) = run(CURL, &["-sS", "--noproxy", "*", &url], dir.path()).await;
    assert!(!ok, "curl must not trust the test CA by itself");
    assert!(stderr.contains("certificate"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_k_against_the_self_signed_default() {
    let dir = new_dir();
    let manifest =
        format!("[listen]\naddress = \"127.0.0.1:0\"\ncert_dir = \"certs\"\n\n{DISCOVERY_SERVERS}");
    let gateway = spawn_binary(&dir, &manifest);
    assert!(gateway.https);
    let (ok, stdout, stderr) = run(
        CURL,
        &[
            "-sS",
            "-k",
            "--noproxy",
            "*",
            "-w",
            " %{http_code}",
            &gateway.url("/readyz"),
        ],
        dir.path(),
    )
    .await;
    assert!(ok, "{stderr}");
    assert_eq!(stdout, "ok 200");
    // The generated certificate verifies the server too.
    let cert = dir.path().join("certs").join("wasmgate.crt");
    let (ok, stdout, stderr) = run(
        CURL,
        &[
            "-sS",
            "--noproxy",
            "*",
            "--cacert",
            cert.to_str().expect("UTF-8"),
            &gateway.url("/hello"),
        ],
        dir.path(),
    )
    .await;
    assert!(ok, "{stderr}");
    assert_eq!(stdout, "hello");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_h2c_with_prior_knowledge() {
    let dir = new_dir();
    let gateway = spawn_binary(&dir, &plaintext(DISCOVERY_SERVERS));
    let (ok, stdout, stderr) = run(
        CURL,
        &[
            "-sS",
            "--noproxy",
            "*",
            "--http2-prior-knowledge",
            "-w",
            "\n%{http_version}",
            &gateway.url("/hello"),
        ],
        dir.path(),
    )
    .await;
    assert!(ok, "{stderr}");
    assert_eq!(stdout, "hello\n2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_reads_health_and_discovery() {
    let dir = new_dir();
    let ca = write_server_pki(dir.path());
    // kubectl authenticates with a client certificate (without credentials
    // it would prompt for a user name).
    let alice = ca.client_cert("alice");
    std::fs::write(dir.path().join("alice.crt"), &alice.cert_pem).expect("write alice.crt");
    std::fs::write(dir.path().join("alice.key"), &alice.key_pem).expect("write alice.key");
    let gateway = spawn_binary(&dir, &tls_manifest());
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).expect("a HOME for kubectl");
    let server = format!("https://{}", gateway.addr);
    let ca = dir.path().join("ca.crt");
    let ca = ca.to_str().expect("a UTF-8 path");
    let cert = dir.path().join("alice.crt");
    let key = dir.path().join("alice.key");
    let (cert, key) = (cert.to_str().expect("UTF-8"), key.to_str().expect("UTF-8"));
    let kubectl = |args: &[&str]| {
        let mut all = vec![
            "--server",
            &server,
            "--certificate-authority",
            ca,
            "--client-certificate",
            cert,
            "--client-key",
            key,
        ];
        all.extend_from_slice(args);
        all.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };

    let args = kubectl(&["get", "--raw", "/readyz?verbose"]);
    let (ok, stdout, stderr) = run(
        KUBECTL,
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
        &home,
    )
    .await;
    assert!(ok, "kubectl get --raw failed: {stderr}");
    assert_eq!(
        stdout,
        "[+]ping ok\n[+]log ok\n[+]shutdown ok\nreadyz check passed\n"
    );

    let args = kubectl(&["api-versions"]);
    let (ok, stdout, stderr) = run(
        KUBECTL,
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
        &home,
    )
    .await;
    assert!(
        ok,
        "kubectl api-versions failed: {stderr}\nstdout: {stdout}"
    );
    assert_eq!(
        stdout,
        "authentication.k8s.io/v1\nauthorization.k8s.io/v1\ndemo.example.io/v1\nother.example.io/v1beta1\nv1\n",
        "stderr: {stderr}"
    );

    let args = kubectl(&["api-resources", "--no-headers"]);
    let (ok, stdout, stderr) = run(
        KUBECTL,
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
        &home,
    )
    .await;
    assert!(
        ok,
        "kubectl api-resources failed: {stderr}\nstdout: {stdout}"
    );
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            vec!["configmaps", "cm", "v1", "true", "ConfigMap"],
            vec![
                "selfsubjectreviews",
                "authentication.k8s.io/v1",
                "false",
                "SelfSubjectReview"
            ],
            vec![
                "selfsubjectaccessreviews",
                "authorization.k8s.io/v1",
                "false",
                "SelfSubjectAccessReview"
            ],
            vec![
                "selfsubjectrulesreviews",
                "authorization.k8s.io/v1",
                "false",
                "SelfSubjectRulesReview"
            ],
            vec!["widgets", "wd", "demo.example.io/v1", "true", "Widget"],
            vec!["gadgets", "other.example.io/v1beta1", "false", "Gadget"],
        ],
        "stderr: {stderr}"
    );

    // A 404 through kubectl reads as kube's own.
    let args = kubectl(&["get", "--raw", "/nowhere"]);
    let (ok, _, stderr) = run(
        KUBECTL,
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
        &home,
    )
    .await;
    assert!(!ok);
    assert!(
        stderr.contains("the server could not find the requested resource"),
        "{stderr}"
    );
}
