//! The self-signed serving certificate kube's way (`--cert-dir`), on the
//! real binary: an expired certificate kept in `cert_dir` is replaced at
//! start by one valid a year, and the new one is what the listener serves.

use crate::support::{
    DAY, GatewayProcess, expired_certificate, get, new_dir, tls_client, unix_now, validity_and_name,
};

#[tokio::test]
async fn an_expired_certificate_in_cert_dir_is_replaced_at_start_and_served() {
    let dir = new_dir();
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).expect("the cert dir");
    let (expired, key) = expired_certificate();
    std::fs::write(certs.join("wasmgate.crt"), &expired).expect("write the certificate");
    std::fs::write(certs.join("wasmgate.key"), &key).expect("write the key");
    let manifest = dir.path().join("gateway.toml");
    std::fs::write(
        &manifest,
        "[listen]\naddress = \"127.0.0.1:0\"\ncert_dir = \"certs\"\n\n[[servers]]\nname = \"main\"\n\n\
         [[servers.routes]]\npath = \"/which\"\nstatic = { body = \"A\" }\n",
    )
    .expect("write the manifest");

    let started = unix_now();
    let gateway = GatewayProcess::spawn(&manifest);
    assert!(gateway.https, "the self-signed default speaks TLS");
    let renewed = std::fs::read_to_string(certs.join("wasmgate.crt")).expect("the certificate");
    assert_ne!(renewed, expired, "the expired certificate was replaced");
    let (not_before, not_after, name) = validity_and_name(&renewed);
    assert!(not_before <= started, "valid from before the start");
    assert!(
        (started + 365 * DAY - 60..=unix_now() + 365 * DAY).contains(&not_after),
        "valid a year: not after {not_after}, started {started}"
    );
    assert!(
        name.starts_with("127.0.0.1@"),
        "named <host>@<unix time>: {name}"
    );

    // The renewed certificate is the one served: a client that trusts it
    // (and it only) is answered, one that trusts the expired one is not.
    let answer = get(&tls_client(&renewed), &gateway.url("/which")).await;
    assert_eq!((answer.status, answer.body.as_str()), (200, "A"));
    let refused = tls_client(&expired).get(gateway.url("/which")).send().await;
    assert!(refused.is_err(), "the expired certificate is not served");
    drop(gateway);
}
