//! `[listen]` and `[listen.tls]`: the address, how the listener speaks
//! (TLS from the manifest's files, a generated self-signed certificate, or
//! plaintext), and which peers' forwarding headers are believed.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use toml::Spanned;

use super::complete::Completer;
use super::manifest as m;
use super::{bounds, files};

#[derive(Debug)]
pub struct Listen {
    pub address: SocketAddr,
    pub transport: Transport,
    pub(crate) trusted_proxies: TrustedProxies,
}

/// The peers whose forwarding headers (`X-Forwarded-*`, `Forwarded`,
/// `X-Real-IP`) are believed: `listen.trusted_proxies`. Empty by default:
/// no peer is trusted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TrustedProxies(Vec<ipnet::IpNet>);

impl TrustedProxies {
    pub(crate) fn new(networks: Vec<ipnet::IpNet>) -> Self {
        TrustedProxies(networks)
    }

    /// True when `peer` is in one of the networks. An IPv4 peer that reached
    /// an IPv6 socket (`::ffff:a.b.c.d`) is matched as the IPv4 address it is.
    pub(crate) fn contains(&self, peer: IpAddr) -> bool {
        let peer = peer.to_canonical();
        self.0.iter().any(|network| network.contains(&peer))
    }
}

/// How the listener speaks.
#[derive(Debug)]
pub enum Transport {
    /// Plain HTTP/1.1 and h2c (explicit opt-out of TLS).
    Plaintext,
    /// TLS with certificates from the manifest.
    Tls(Arc<TlsMaterial>),
    /// TLS with a self-signed certificate kept in this directory, generated
    /// at start when absent, as kube-apiserver does with `--cert-dir`.
    SelfSigned {
        /// The folder the generated certificate and key are kept in.
        cert_dir: PathBuf,
    },
}

/// The generated certificate and its key, in `cert_dir`.
pub(crate) const SELF_SIGNED_FILES: [&str; 2] = ["wasmgate.crt", "wasmgate.key"];

/// Loaded serving certificate, key and optional client CA.
#[derive(Debug)]
pub struct TlsMaterial {
    pub cert_chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    /// When set, client certificates are verified against these roots.
    pub client_ca: Option<Arc<RootCertStore>>,
}

impl Completer<'_> {
    pub(super) fn listen(&mut self, listen: Spanned<m::Listen>) -> Option<Listen> {
        let listen = listen.into_inner();
        let has_tls = listen.tls.is_some();
        let address = match listen.address.get_ref().parse() {
            Ok(address) => Some(address),
            Err(_) => {
                let message = format!("{:?} is not an ip:port address", listen.address.get_ref());
                self.at(&listen.address, "listen.address", message);
                None
            }
        };
        let plaintext = listen.plaintext.as_ref().is_some_and(|p| *p.get_ref());
        let transport = match (listen.tls, plaintext) {
            (Some(tls), true) => {
                self.at(
                    &tls,
                    "listen.tls",
                    "conflicts with listen.plaintext = true: choose one",
                );
                None
            }
            (Some(tls), false) => self.tls(tls.get_ref()).map(|m| Transport::Tls(Arc::new(m))),
            (None, true) => Some(Transport::Plaintext),
            (None, false) => {
                let cert_dir = match &listen.cert_dir {
                    Some(dir) => self.resolve(dir.get_ref()),
                    None => default_cert_dir(),
                };
                self.cert_dir(&cert_dir, listen.cert_dir.as_ref())
                    .map(|()| Transport::SelfSigned { cert_dir })
            }
        };
        if let Some(dir) = &listen.cert_dir {
            if plaintext {
                self.at(
                    dir,
                    "listen.cert_dir",
                    "has no effect with listen.plaintext = true",
                );
            } else if has_tls {
                self.at(
                    dir,
                    "listen.cert_dir",
                    "has no effect with [listen.tls]: the certificate is given",
                );
            }
        }
        let trusted_proxies = self.trusted_proxies(&listen.trusted_proxies);
        Some(Listen {
            address: address?,
            transport: transport?,
            trusted_proxies,
        })
    }

    /// `listen.trusted_proxies`: each entry a CIDR (`10.0.0.0/8`) or a single
    /// address (`10.1.2.3`, that address alone).
    fn trusted_proxies(&mut self, entries: &[Spanned<String>]) -> TrustedProxies {
        let mut networks = Vec::with_capacity(entries.len());
        for entry in entries {
            let text = entry.get_ref().trim();
            let parsed = text
                .parse::<ipnet::IpNet>()
                .or_else(|_| text.parse::<std::net::IpAddr>().map(ipnet::IpNet::from));
            match parsed {
                Ok(network) => networks.push(network.trunc()),
                Err(_) => self.at(
                    entry,
                    "listen.trusted_proxies",
                    format!(
                        "{text:?} is neither a CIDR (\"10.0.0.0/8\", \"fd00::/8\") nor an IP address"
                    ),
                ),
            }
        }
        TrustedProxies::new(networks)
    }

    /// `run` creates `cert_dir` when it is missing and keeps the generated
    /// certificate and key there: it must be a folder, or be creatable
    /// under one, and what it holds under those names must be regular files.
    fn cert_dir(&mut self, dir: &Path, given: Option<&Spanned<String>>) -> Option<()> {
        let span = given.map(Spanned::span);
        let problem = match std::fs::metadata(dir) {
            Ok(metadata) if metadata.is_dir() => SELF_SIGNED_FILES
                .iter()
                .map(|name| dir.join(name))
                .filter(|file| file.exists())
                .find_map(|file| {
                    files::check_regular(&file, bounds::PEM_FILE)
                        .err()
                        .map(|error| format!("cannot use {}: {error}", file.display()))
                }),
            Ok(_) => Some(format!("{} is not a folder", dir.display())),
            Err(_) => dir
                .ancestors()
                .skip(1)
                .find(|ancestor| ancestor.exists())
                .filter(|ancestor| !ancestor.is_dir())
                .map(|ancestor| {
                    format!(
                        "{} cannot be created: {} is not a folder",
                        dir.display(),
                        ancestor.display()
                    )
                }),
        };
        match problem {
            Some(message) => {
                self.problem(span, "listen.cert_dir", message);
                None
            }
            None => Some(()),
        }
    }

    fn tls(&mut self, tls: &m::Tls) -> Option<TlsMaterial> {
        let cert_chain = self
            .read_file(&tls.cert, "listen.tls.cert")
            .and_then(|pem| {
                let certs: Vec<_> = CertificateDer::pem_slice_iter(&pem)
                    .filter_map(Result::ok)
                    .collect();
                if certs.is_empty() {
                    self.at(&tls.cert, "listen.tls.cert", "holds no PEM certificate");
                    return None;
                }
                Some(certs)
            });
        let key = self.read_file(&tls.key, "listen.tls.key").and_then(|pem| {
            match PrivateKeyDer::from_pem_slice(&pem) {
                Ok(key) => Some(key),
                Err(error) => {
                    self.at(
                        &tls.key,
                        "listen.tls.key",
                        format!("holds no usable PEM private key: {error}"),
                    );
                    None
                }
            }
        });
        let client_ca = match &tls.client_ca {
            Some(file) => Some(Arc::new(self.roots(file, "listen.tls.client_ca")?)),
            None => None,
        };
        Some(TlsMaterial {
            cert_chain: cert_chain?,
            key: key?,
            client_ca,
        })
    }
}

/// Where a generated serving certificate is kept when the manifest does not
/// say: `$XDG_CACHE_HOME/wasmgate/certs`, else `~/.cache/wasmgate/certs`.
fn default_cert_dir() -> PathBuf {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    cache.join("wasmgate").join("certs")
}
