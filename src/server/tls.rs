//! TLS for the listener (rustls, TLS 1.2 and 1.3, ALPN `h2` and
//! `http/1.1`), with optional client-certificate verification, and the
//! self-signed serving certificate kube-apiserver generates into its
//! `--cert-dir` when it is given none.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::TlsMaterial;

/// The one crypto provider the gateway uses, client and server side.
pub fn crypto_provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

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

/// The rustls server configuration for loaded material.
pub fn server_config(material: &TlsMaterial) -> Result<Arc<ServerConfig>, TlsError> {
    let builder = ServerConfig::builder_with_provider(crypto_provider())
        .with_safe_default_protocol_versions()?;
    let builder = match &material.client_ca {
        // Client certificates are optional, as in kube: a request without one
        // goes on to the other authenticators.
        Some(roots) => builder.with_client_cert_verifier(
            WebPkiClientVerifier::builder_with_provider(roots.clone(), crypto_provider())
                .allow_unauthenticated()
                .build()?,
        ),
        None => builder.with_no_client_auth(),
    };
    let mut config =
        builder.with_single_cert(material.cert_chain.clone(), material.key.clone_key())?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

const CERT_FILE: &str = "wasmgate.crt";
const KEY_FILE: &str = "wasmgate.key";

/// The self-signed certificate in `cert_dir`, generated there first if it is
/// not there yet (valid for localhost, the loopback addresses and the listen
/// address).
pub fn self_signed(cert_dir: &Path, listen: SocketAddr) -> Result<TlsMaterial, TlsError> {
    let cert_path = cert_dir.join(CERT_FILE);
    let key_path = cert_dir.join(KEY_FILE);
    if let (Ok(cert_pem), Ok(key_pem)) = (std::fs::read(&cert_path), std::fs::read(&key_path)) {
        let chain: Vec<_> = CertificateDer::pem_slice_iter(&cert_pem)
            .filter_map(Result::ok)
            .collect();
        if let (false, Ok(key)) = (chain.is_empty(), PrivateKeyDer::from_pem_slice(&key_pem)) {
            tracing::info!(cert = %cert_path.display(), "using the generated serving certificate");
            return Ok(TlsMaterial {
                cert_chain: chain,
                key,
                client_ca: None,
            });
        }
    }
    let mut names = vec!["localhost".to_owned()];
    let mut ips: Vec<IpAddr> = vec![Ipv4Addr::LOCALHOST.into(), Ipv6Addr::LOCALHOST.into()];
    if !listen.ip().is_unspecified() && !ips.contains(&listen.ip()) {
        ips.push(listen.ip());
    }
    names.extend(ips.iter().map(IpAddr::to_string));
    let certified = rcgen::generate_simple_self_signed(names)?;
    let io_error = |path: &Path| {
        let path = path.to_owned();
        move |source| TlsError::Io { path, source }
    };
    std::fs::create_dir_all(cert_dir).map_err(io_error(cert_dir))?;
    write_private(&key_path, certified.signing_key.serialize_pem().as_bytes())
        .map_err(io_error(&key_path))?;
    std::fs::write(&cert_path, certified.cert.pem()).map_err(io_error(&cert_path))?;
    tracing::info!(cert = %cert_path.display(), "generated a self-signed serving certificate");
    let key = PrivateKeyDer::try_from(certified.signing_key.serialize_der())
        .map_err(|message| TlsError::Rustls(rustls::Error::General(message.to_owned())))?;
    Ok(TlsMaterial {
        cert_chain: vec![certified.cert.der().clone()],
        key,
        client_ca: None,
    })
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
