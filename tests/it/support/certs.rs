//! Certificates: a CA made for one test with rcgen, the serving and client
//! certificates it signs, and certificates read back.

use std::path::Path;

use super::unix_now;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// A certificate and its private key, PEM.
#[derive(Clone)]
pub struct CertAndKey {
    pub cert_pem: String,
    pub key_pem: String,
}

/// A certificate authority made for one test.
pub struct Ca {
    pub cert_pem: String,
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("a CA key");
        let issuer = CertifiedIssuer::self_signed(params, key).expect("a CA certificate");
        Ca {
            cert_pem: issuer.pem(),
            issuer,
        }
    }

    /// A serving certificate for localhost and the loopback addresses.
    pub fn server_cert(&self) -> CertAndKey {
        let names = vec![
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
            "::1".to_owned(),
        ];
        self.sign(
            names,
            "wasmgate-test-server",
            &[],
            ExtendedKeyUsagePurpose::ServerAuth,
        )
    }

    /// A client certificate for user `name`.
    pub fn client_cert(&self, name: &str) -> CertAndKey {
        self.sign(Vec::new(), name, &[], ExtendedKeyUsagePurpose::ClientAuth)
    }

    /// A client certificate `CN=<name>, O=<each organization>`.
    pub fn client_cert_in(&self, name: &str, organizations: &[&str]) -> CertAndKey {
        self.sign(
            Vec::new(),
            name,
            organizations,
            ExtendedKeyUsagePurpose::ClientAuth,
        )
    }

    /// A client certificate for user `name` that stops being valid at
    /// `not_after` (unix seconds).
    pub fn client_cert_until(&self, name: &str, not_after: i64) -> CertAndKey {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("certificate params");
        params.not_before =
            time::OffsetDateTime::from_unix_timestamp(unix_now() - DAY).expect("a date");
        params.not_after = time::OffsetDateTime::from_unix_timestamp(not_after).expect("a date");
        self.sign_with(params, name, &[], ExtendedKeyUsagePurpose::ClientAuth)
    }

    fn sign(
        &self,
        names: Vec<String>,
        common_name: &str,
        organizations: &[&str],
        usage: ExtendedKeyUsagePurpose,
    ) -> CertAndKey {
        let params = CertificateParams::new(names).expect("certificate params");
        self.sign_with(params, common_name, organizations, usage)
    }

    fn sign_with(
        &self,
        mut params: CertificateParams,
        common_name: &str,
        organizations: &[&str],
        usage: ExtendedKeyUsagePurpose,
    ) -> CertAndKey {
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        for organization in organizations {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *organization);
        }
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate().expect("a key");
        let cert = params
            .signed_by(&key, &*self.issuer)
            .expect("a signed certificate");
        CertAndKey {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

/// Writes `ca.crt`, `server.crt` and `server.key` into `dir` and returns the
/// CA; a manifest in `dir` then says `cert = "server.crt"`, `key =
/// "server.key"`.
pub fn write_server_pki(dir: &Path) -> Ca {
    let ca = Ca::new("wasmgate test CA");
    let server = ca.server_cert();
    std::fs::write(dir.join("ca.crt"), &ca.cert_pem).expect("write ca.crt");
    std::fs::write(dir.join("server.crt"), &server.cert_pem).expect("write server.crt");
    std::fs::write(dir.join("server.key"), &server.key_pem).expect("write server.key");
    ca
}

/// One day, in seconds.
pub const DAY: i64 = 86_400;

/// A certificate for 127.0.0.1 that expired yesterday, and its key.
pub fn expired_certificate() -> (String, String) {
    let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("params");
    params.not_before =
        time::OffsetDateTime::from_unix_timestamp(unix_now() - 366 * DAY).expect("a date");
    params.not_after = time::OffsetDateTime::from_unix_timestamp(unix_now() - DAY).expect("a date");
    let key = rcgen::KeyPair::generate().expect("a key");
    let cert = params.self_signed(&key).expect("a certificate");
    (cert.pem(), key.serialize_pem())
}

/// Validity (not before, not after) and subject CN of a PEM certificate.
pub fn validity_and_name(pem: &str) -> (i64, i64, String) {
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).expect("PEM");
    let cert = pem.parse_x509().expect("an X.509 certificate");
    let name = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .expect("a CN")
        .to_owned();
    (
        cert.validity().not_before.timestamp(),
        cert.validity().not_after.timestamp(),
        name,
    )
}
