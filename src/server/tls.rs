//! TLS for the listener (rustls, TLS 1.2 and 1.3, ALPN `h2` and
//! `http/1.1`), with optional client-certificate verification, and the
//! self-signed serving certificate kube-apiserver generates into its
//! `--cert-dir` when it is given none.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, KeyPair, KeyUsagePurpose,
};

use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::bounds::PEM_FILE;
use crate::config::files::read_limited;
use crate::config::{SELF_SIGNED_FILES, TlsMaterial};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("the serving certificate and key cannot be used: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("the client CA cannot be used: {0}")]
    ClientCa(#[from] rustls::server::VerifierBuilderError),
    #[error("cannot generate a self-signed certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("{}: {source}", path.display())]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The rustls server configuration for loaded material, and the verifier
/// of client certificates it holds, when `client_ca` asks for one.
pub(crate) fn server_config(material: &TlsMaterial) -> Result<ServerTls, TlsError> {
    let builder = ServerConfig::builder_with_provider(crate::crypto::provider())
        .with_safe_default_protocol_versions()?;
    let (builder, client_verifier) = match &material.client_ca {
        // Client certificates are optional, as in kube: a request without one
        // goes on to the other authenticators.
        Some(roots) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(
                roots.clone(),
                crate::crypto::provider(),
            )
            .allow_unauthenticated()
            .build()?;
            (
                builder.with_client_cert_verifier(verifier.clone()),
                Some(verifier),
            )
        }
        None => (builder.with_no_client_auth(), None),
    };
    let mut config =
        builder.with_single_cert(material.cert_chain.clone(), material.key.clone_key())?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok((Arc::new(config), client_verifier))
}

/// A server configuration and its verifier of client certificates.
pub(crate) type ServerTls = (Arc<ServerConfig>, Option<Arc<dyn ClientCertVerifier>>);

const CERT_FILE: &str = SELF_SIGNED_FILES[0];
const KEY_FILE: &str = SELF_SIGNED_FILES[1];

const DAY: Duration = Duration::from_secs(24 * 60 * 60);
/// kube's self-signed serving certificates are valid a year
/// (`duration365d` in `staging/src/k8s.io/client-go/util/cert/cert.go`).
pub(crate) const VALIDITY: Duration = Duration::from_secs(365 * 24 * 60 * 60);
/// A kept certificate that expires sooner than this is replaced.
pub(crate) const RENEW_BEFORE: Duration = Duration::from_secs(30 * 24 * 60 * 60);
/// Valid from a little before now, for clients whose clock lags (kube
/// back-dates its own by an hour for the same reason).
const BACKDATE: Duration = Duration::from_secs(60 * 60);

/// The self-signed certificate in `cert_dir`, generated there first when it
/// is not there, cannot be used, or expires within [`RENEW_BEFORE`]. It is
/// made as kube-apiserver makes its `--cert-dir` certificate
/// (`GenerateSelfSignedCertKeyWithFixtures` in
/// `staging/src/k8s.io/client-go/util/cert/cert.go`): valid a year, named
/// `<host>@<unix time>`, for the host, localhost, the loopback addresses and
/// the listen address. Unlike kube's, it is its own issuer (no separate CA),
/// so the certificate file is what a client trusts.
pub(crate) fn self_signed(cert_dir: &Path, listen: SocketAddr) -> Result<TlsMaterial, TlsError> {
    let cert_path = cert_dir.join(CERT_FILE);
    let key_path = cert_dir.join(KEY_FILE);
    match kept(&cert_path, &key_path) {
        Kept::Usable(material) => {
            tracing::info!(cert = %cert_path.display(), "using the generated serving certificate");
            return Ok(material);
        }
        Kept::Expiring { not_after } => {
            tracing::info!(cert = %cert_path.display(), not_after, "the generated serving certificate expires soon: renewing it");
        }
        Kept::Absent => {}
    }
    generate(cert_dir, &cert_path, &key_path, listen)
}

/// When the certificate kept in `cert_dir` stops being valid; `None` when
/// there is none that can be read.
pub(crate) fn kept_until(cert_dir: &Path) -> Option<SystemTime> {
    let pem = read_limited(&cert_dir.join(CERT_FILE), PEM_FILE).ok()?;
    let der = CertificateDer::pem_slice_iter(&pem).next()?.ok()?;
    not_after(&der)
}

enum Kept {
    Usable(TlsMaterial),
    /// Unix time of its end of validity.
    Expiring {
        not_after: u64,
    },
    Absent,
}

fn kept(cert_path: &Path, key_path: &Path) -> Kept {
    let (Ok(cert_pem), Ok(key_pem)) = (
        read_limited(cert_path, PEM_FILE),
        read_limited(key_path, PEM_FILE),
    ) else {
        return Kept::Absent;
    };
    let chain: Vec<_> = CertificateDer::pem_slice_iter(&cert_pem)
        .filter_map(Result::ok)
        .collect();
    let (Some(leaf), Ok(key)) = (chain.first(), PrivateKeyDer::from_pem_slice(&key_pem)) else {
        return Kept::Absent;
    };
    let Some(until) = not_after(leaf) else {
        return Kept::Absent;
    };
    if until < SystemTime::now() + RENEW_BEFORE {
        let not_after = until.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        return Kept::Expiring { not_after };
    }
    Kept::Usable(TlsMaterial {
        cert_chain: chain,
        key,
        client_ca: None,
    })
}

/// When a certificate stops being valid.
pub(crate) fn not_after(der: &CertificateDer<'_>) -> Option<SystemTime> {
    let (_, certificate) = x509_parser::parse_x509_certificate(der).ok()?;
    let seconds = certificate.validity().not_after.timestamp();
    Some(UNIX_EPOCH + Duration::from_secs(u64::try_from(seconds).unwrap_or(0)))
}

fn generate(
    cert_dir: &Path,
    cert_path: &Path,
    key_path: &Path,
    listen: SocketAddr,
) -> Result<TlsMaterial, TlsError> {
    let now = SystemTime::now();
    let unix = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let host = host_name(listen);
    let mut params = CertificateParams::new(subject_alt_names(&host, listen))?;
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, format!("{host}@{unix}"));
    params.not_before = datetime(now - BACKDATE);
    params.not_after = datetime(now + VALIDITY);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let signing_key = KeyPair::generate()?;
    let cert = params.self_signed(&signing_key)?;
    let io_error = |path: &Path| {
        let path = path.to_owned();
        move |source| TlsError::Io { path, source }
    };
    std::fs::create_dir_all(cert_dir).map_err(io_error(cert_dir))?;
    write_private(key_path, signing_key.serialize_pem().as_bytes()).map_err(io_error(key_path))?;
    std::fs::write(cert_path, cert.pem()).map_err(io_error(cert_path))?;
    tracing::info!(cert = %cert_path.display(), valid_days = VALIDITY.as_secs() / DAY.as_secs(), "generated a self-signed serving certificate");
    let key = PrivateKeyDer::try_from(signing_key.serialize_der())
        .map_err(|message| TlsError::Rustls(rustls::Error::General(message.to_owned())))?;
    Ok(TlsMaterial {
        cert_chain: vec![cert.der().clone()],
        key,
        client_ca: None,
    })
}

/// The host the certificate is named for: the listen address when it is a
/// specific one (kube names its certificate for the address it advertises),
/// else the machine's host name.
fn host_name(listen: SocketAddr) -> String {
    if !listen.ip().is_unspecified() {
        return listen.ip().to_string();
    }
    let mut buffer = [0u8; 256];
    // SAFETY: the buffer is writable for its whole length, which is passed.
    let status = unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) };
    let name = std::ffi::CStr::from_bytes_until_nul(&buffer)
        .ok()
        .and_then(|name| name.to_str().ok())
        .filter(|name| status == 0 && is_dns_name(name));
    name.unwrap_or("localhost").to_owned()
}

/// The certificate's names: the host, localhost, the loopback addresses and
/// the listen address when it is a specific one.
fn subject_alt_names(host: &str, listen: SocketAddr) -> Vec<String> {
    let mut ips: Vec<IpAddr> = vec![Ipv4Addr::LOCALHOST.into(), Ipv6Addr::LOCALHOST.into()];
    if !listen.ip().is_unspecified() && !ips.contains(&listen.ip()) {
        ips.push(listen.ip());
    }
    let mut names = vec!["localhost".to_owned()];
    if host.parse::<IpAddr>().is_err() && host != "localhost" {
        names.push(host.to_owned());
    }
    names.extend(ips.iter().map(IpAddr::to_string));
    names
}

/// A host name a certificate can carry: dot-separated labels of letters,
/// digits and `-`.
fn is_dns_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

fn datetime(time: SystemTime) -> time::OffsetDateTime {
    let seconds = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    time::OffsetDateTime::from_unix_timestamp(i64::try_from(seconds).unwrap_or(0))
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

/// Writes a file only its owner can read.
fn write_private(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(contents)
}

#[cfg(test)]
mod tests {
    use x509_parser::extensions::GeneralName;

    use super::*;

    fn listen(address: &str) -> SocketAddr {
        address.parse().expect("an address")
    }

    fn leaf_pem(cert_dir: &Path) -> Vec<u8> {
        std::fs::read(cert_dir.join(CERT_FILE)).expect("the certificate file")
    }

    /// Subject CN, validity and SANs (DNS names and IPs as text).
    struct Parsed {
        common_name: String,
        not_before: i64,
        not_after: i64,
        names: Vec<String>,
    }

    fn parse(der: &CertificateDer<'_>) -> Parsed {
        let (_, cert) = x509_parser::parse_x509_certificate(der).expect("an X.509 certificate");
        let common_name = cert
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .expect("a CN")
            .to_owned();
        let names = cert
            .subject_alternative_name()
            .expect("a well-formed SAN extension")
            .expect("a SAN extension")
            .value
            .general_names
            .iter()
            .map(|name| match name {
                GeneralName::DNSName(dns) => (*dns).to_owned(),
                GeneralName::IPAddress(bytes) => match bytes.len() {
                    4 => IpAddr::from(<[u8; 4]>::try_from(*bytes).expect("4 bytes")).to_string(),
                    16 => IpAddr::from(<[u8; 16]>::try_from(*bytes).expect("16 bytes")).to_string(),
                    _ => panic!("an IP SAN of {} bytes", bytes.len()),
                },
                other => panic!("an unexpected SAN {other:?}"),
            })
            .collect();
        Parsed {
            common_name,
            not_before: cert.validity().not_before.timestamp(),
            not_after: cert.validity().not_after.timestamp(),
            names,
        }
    }

    fn unix_now() -> i64 {
        i64::try_from(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .expect("after 1970")
                .as_secs(),
        )
        .expect("seconds fit an i64")
    }

    #[test]
    fn the_generated_certificate_is_valid_a_year_named_for_the_host_and_its_addresses() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let before = unix_now();
        let material = self_signed(dir.path(), listen("10.1.2.3:8443")).expect("generated");
        let parsed = parse(&material.cert_chain[0]);
        let after = unix_now();

        let (name, made) = parsed
            .common_name
            .split_once('@')
            .expect("<host>@<unix time>");
        assert_eq!(name, "10.1.2.3");
        let made: i64 = made.parse().expect("a unix time");
        assert!(
            (before..=after).contains(&made),
            "{made} not in {before}..={after}"
        );
        let year = i64::try_from(VALIDITY.as_secs()).expect("fits");
        let backdate = i64::try_from(BACKDATE.as_secs()).expect("fits");
        assert!((before - backdate..=after - backdate).contains(&parsed.not_before));
        assert!((before + year..=after + year).contains(&parsed.not_after));
        for expected in ["localhost", "127.0.0.1", "::1", "10.1.2.3"] {
            assert!(
                parsed.names.iter().any(|n| n == expected),
                "{expected} in {:?}",
                parsed.names
            );
        }
        // What was served is what was written, and the key is the file's.
        let written: Vec<_> = CertificateDer::pem_slice_iter(&leaf_pem(dir.path()))
            .collect::<Result<_, _>>()
            .expect("PEM");
        assert_eq!(written, material.cert_chain);
        server_config(&material).expect("the certificate and key make a server config");
    }

    #[test]
    fn on_an_unspecified_address_it_is_named_for_the_machine() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let material = self_signed(dir.path(), listen("0.0.0.0:8443")).expect("generated");
        let parsed = parse(&material.cert_chain[0]);
        let host = host_name(listen("0.0.0.0:8443"));
        assert!(
            parsed.common_name.starts_with(&format!("{host}@")),
            "{}",
            parsed.common_name
        );
        assert!(parsed.names.contains(&host), "{host} in {:?}", parsed.names);
        assert!(
            !parsed.names.iter().any(|n| n == "0.0.0.0"),
            "{:?}",
            parsed.names
        );
    }

    #[test]
    fn a_certificate_kept_in_cert_dir_is_reused() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let first = self_signed(dir.path(), listen("127.0.0.1:8443")).expect("generated");
        let second = self_signed(dir.path(), listen("127.0.0.1:8443")).expect("kept");
        assert_eq!(first.cert_chain, second.cert_chain);
    }

    /// Writes a certificate valid from a year ago for `remaining` from now
    /// (negative: expired that long ago) into `cert_dir`.
    fn write_certificate_ending_in(cert_dir: &Path, remaining: i64) -> Vec<u8> {
        let now = unix_now();
        let mut params = CertificateParams::new(vec!["localhost".to_owned()]).expect("params");
        params.not_before =
            time::OffsetDateTime::from_unix_timestamp(now - 365 * 86_400).expect("a date");
        params.not_after =
            time::OffsetDateTime::from_unix_timestamp(now + remaining).expect("a date");
        let key = KeyPair::generate().expect("a key");
        let cert = params.self_signed(&key).expect("a certificate");
        std::fs::write(cert_dir.join(CERT_FILE), cert.pem()).expect("write the certificate");
        std::fs::write(cert_dir.join(KEY_FILE), key.serialize_pem()).expect("write the key");
        leaf_pem(cert_dir)
    }

    #[test]
    fn an_expired_or_expiring_certificate_is_replaced_and_a_lasting_one_kept() {
        let day = 86_400;
        for (remaining, replaced) in [
            (-day, true),
            (10 * day, true),
            (29 * day, true),
            (31 * day, false),
            (200 * day, false),
        ] {
            let dir = tempfile::tempdir().expect("a temp dir");
            let old = write_certificate_ending_in(dir.path(), remaining);
            let material =
                self_signed(dir.path(), listen("127.0.0.1:8443")).expect("a certificate");
            let now_kept = leaf_pem(dir.path());
            assert_eq!(now_kept != old, replaced, "{} days left", remaining / day);
            let parsed = parse(&material.cert_chain[0]);
            if replaced {
                assert!(
                    parsed.not_after > unix_now() + 364 * day,
                    "renewed for a year"
                );
                assert!(parsed.common_name.starts_with("127.0.0.1@"));
            } else {
                let expected = unix_now() + remaining;
                assert!((parsed.not_after - expected).abs() <= 5, "kept as it was");
            }
        }
    }
}
