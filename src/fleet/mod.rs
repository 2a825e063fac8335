//! A fleet of gateways on one chain, through etcd (docs/fleet.md).
//!
//! The manifest and its components live under one etcd prefix ([`store`]):
//! `wasmgate push` validates a manifest as `check` does, uploads each
//! component once under its SHA-256 and writes the manifest, its component
//! paths rewritten to those digests, in one transaction that fails when
//! someone else pushed meanwhile ([`push`]). Every gateway run with
//! `--config etcd://HOST:PORT/PREFIX` loads that manifest, then watches it
//! ([`watch`]): each new revision takes the path a file reload takes
//! (complete, validate, compile what is new, swap), and one it refuses
//! leaves the last good chain serving. Each gateway reports what it runs
//! under a lease ([`status`]), and keeps the last good manifest and its
//! components on disk ([`disk`]) to start from while etcd is away.
//!
//! The revision of a manifest is the etcd revision that wrote it (its
//! `mod_revision`): the same number in every gateway, in `wasmgate status`,
//! `/readyz?verbose`, `/debug/reload`'s answer and `wasmgate_config_revision`.

pub mod disk;
pub mod push;
pub mod status;
pub mod store;
pub mod watch;

use std::path::PathBuf;
use std::time::Duration;

/// How long one etcd request may take before it counts as failed: short,
/// so a gateway notices at once that etcd is away and serves on.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// An etcd revision.
pub type Revision = i64;

/// The most etcd endpoints one fleet URL may name.
pub const MAX_ENDPOINTS: usize = 16;

/// Where the fleet lives: `etcd://HOST:PORT[,HOST:PORT...]/PREFIX`, and how
/// to reach it.
#[derive(Debug, Clone)]
pub struct Target {
    /// The members' `HOST:PORT`s, as kube-apiserver's `--etcd-servers`
    /// lists them: one at least, at most [`MAX_ENDPOINTS`].
    pub endpoints: Vec<String>,
    /// The key prefix, `/PREFIX` (no trailing `/`).
    pub prefix: String,
    /// How to reach etcd: plain, or TLS with these files.
    pub tls: EtcdTls,
}

/// TLS to etcd, as etcd's own clients take it (`--cacert`, `--cert`,
/// `--key`): with a CA the connection is `https`.
#[derive(Debug, Clone, Default)]
pub struct EtcdTls {
    /// `--etcd-cafile`: the CA that signed etcd's certificate.
    pub ca_file: Option<PathBuf>,
    /// `--etcd-certfile`: this client's certificate.
    pub cert_file: Option<PathBuf>,
    /// `--etcd-keyfile`: the key of `cert_file`.
    pub key_file: Option<PathBuf>,
}

/// What went wrong talking to the fleet.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is what it means"
)]
pub enum FleetError {
    #[error("{0:?} is not an etcd URL: expected etcd://HOST:PORT[,HOST:PORT...]/PREFIX")]
    Url(String),
    #[error("{url:?} names {count} etcd endpoints: at most {MAX_ENDPOINTS}")]
    TooManyEndpoints { url: String, count: usize },
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--etcd-certfile and --etcd-keyfile go together, and with --etcd-cafile")]
    HalfIdentity,
    #[error("etcd: {0}")]
    Etcd(#[from] etcd_client::Error),
    #[error("etcd at {endpoint} did not answer within {}", humantime::format_duration(*timeout))]
    Timeout { endpoint: String, timeout: Duration },
    #[error("{0} is not in etcd")]
    Missing(String),
    #[error("{key} in etcd is damaged: {problem}")]
    Damaged { key: String, problem: String },
    #[error(
        "the manifest changed since this push started (now revision {now}, was {was}): push again"
    )]
    Conflict { was: Revision, now: Revision },
    #[error("{0}")]
    Disk(String),
}

impl Target {
    /// Parses `etcd://HOST:PORT[,HOST:PORT...]/PREFIX`: the members
    /// separated by commas, as etcdctl's `--endpoints` and kube-apiserver's
    /// `--etcd-servers` take them.
    pub fn parse(url: &str, tls: EtcdTls) -> Result<Target, FleetError> {
        let bad = || FleetError::Url(url.to_owned());
        let rest = url.strip_prefix("etcd://").ok_or_else(bad)?;
        let (endpoints, prefix) = rest.split_once('/').ok_or_else(bad)?;
        let prefix = prefix.trim_end_matches('/');
        let valid_prefix = !prefix.is_empty()
            && prefix
                .split('/')
                .all(|segment| !segment.is_empty() && segment != "." && segment != "..");
        let endpoints: Vec<&str> = endpoints.split(',').collect();
        if !valid_prefix || !endpoints.iter().all(|endpoint| host_and_port(endpoint)) {
            return Err(bad());
        }
        if endpoints.len() > MAX_ENDPOINTS {
            return Err(FleetError::TooManyEndpoints {
                url: url.to_owned(),
                count: endpoints.len(),
            });
        }
        Ok(Target {
            endpoints: endpoints.into_iter().map(str::to_owned).collect(),
            prefix: format!("/{prefix}"),
            tls,
        })
    }

    /// True for a `--config` that names the fleet rather than a file.
    pub fn is_etcd_url(config: &str) -> bool {
        config.starts_with("etcd://")
    }

    /// `etcd://HOST:PORT[,HOST:PORT...]/PREFIX`, as given.
    pub fn url(&self) -> String {
        format!("etcd://{}{}", self.endpoints.join(","), self.prefix)
    }

    /// A client for this etcd, balancing its calls among every endpoint.
    /// It connects lazily and reconnects by itself: a gateway keeps one for
    /// its whole life.
    pub async fn connect(&self) -> Result<etcd_client::Client, FleetError> {
        self.connect_with(&self.endpoints, false).await
    }

    /// A client of the one member at `endpoint` whose every call requires
    /// that the member has a leader (gRPC metadata `hasleader: true`), for
    /// the manifest's watch, as kube's etcd3 watcher watches with
    /// `clientv3.WithRequireLeader`
    /// (`staging/src/k8s.io/apiserver/pkg/storage/etcd3/watcher.go`): a
    /// member cut off from its quorum cancels such a watch, where it would
    /// keep a plain one open and silent, and the gateway watches again
    /// through the next endpoint.
    pub async fn connect_requiring_leader(
        &self,
        endpoint: &str,
    ) -> Result<etcd_client::Client, FleetError> {
        self.connect_with(&[endpoint.to_owned()], true).await
    }

    async fn connect_with(
        &self,
        endpoints: &[String],
        require_leader: bool,
    ) -> Result<etcd_client::Client, FleetError> {
        let mut options = etcd_client::ConnectOptions::new()
            .with_require_leader(require_leader)
            .with_connect_timeout(REQUEST_TIMEOUT)
            .with_timeout(REQUEST_TIMEOUT)
            .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2))
            .with_keep_alive_while_idle(true);
        let scheme = match self.tls_options()? {
            Some(tls) => {
                options = options.with_tls(tls);
                "https"
            }
            None => "http",
        };
        let endpoints: Vec<String> = endpoints
            .iter()
            .map(|endpoint| format!("{scheme}://{endpoint}"))
            .collect();
        let connecting = etcd_client::Client::connect(endpoints, Some(options));
        tokio::time::timeout(REQUEST_TIMEOUT, connecting)
            .await
            .map_err(|_| self.timeout())?
            .map_err(FleetError::from)
    }

    fn timeout(&self) -> FleetError {
        FleetError::Timeout {
            endpoint: self.endpoints.join(","),
            timeout: REQUEST_TIMEOUT,
        }
    }

    fn tls_options(&self) -> Result<Option<etcd_client::TlsOptions>, FleetError> {
        let read = |path: &PathBuf| {
            std::fs::read(path).map_err(|source| FleetError::Read {
                path: path.clone(),
                source,
            })
        };
        let identity = match (&self.tls.cert_file, &self.tls.key_file) {
            (Some(cert), Some(key)) => {
                Some(etcd_client::Identity::from_pem(read(cert)?, read(key)?))
            }
            (None, None) => None,
            _ => return Err(FleetError::HalfIdentity),
        };
        let Some(ca) = &self.tls.ca_file else {
            return match identity {
                Some(_) => Err(FleetError::HalfIdentity),
                None => Ok(None),
            };
        };
        let mut tls = etcd_client::TlsOptions::new()
            .ca_certificate(etcd_client::Certificate::from_pem(read(ca)?));
        if let Some(identity) = identity {
            tls = tls.identity(identity);
        }
        Ok(Some(tls))
    }
}

/// `HOST:PORT`, as a URL's authority names a member: a host, a port, no
/// user info, no path.
fn host_and_port(endpoint: &str) -> bool {
    let Ok(authority) = endpoint.parse::<http::uri::Authority>() else {
        return false;
    };
    authority.as_str() == endpoint
        && !endpoint.contains('@')
        && !authority.host().is_empty()
        && authority.port_u16().is_some_and(|port| port > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_etcd_url_names_its_endpoints_and_a_prefix() {
        let target = Target::parse("etcd://127.0.0.1:2379/gw/prod/", EtcdTls::default())
            .expect("a valid URL");
        assert_eq!(target.endpoints, ["127.0.0.1:2379"]);
        assert_eq!(target.prefix, "/gw/prod");
        assert_eq!(target.url(), "etcd://127.0.0.1:2379/gw/prod");
        let members = "etcd://10.0.0.1:2379,etcd-2.example:2379,[::1]:2379/gw";
        let target = Target::parse(members, EtcdTls::default()).expect("three members");
        assert_eq!(
            target.endpoints,
            ["10.0.0.1:2379", "etcd-2.example:2379", "[::1]:2379"]
        );
        assert_eq!(target.url(), members);
        let sixteen = vec!["127.0.0.1:2379"; MAX_ENDPOINTS].join(",");
        assert!(Target::parse(&format!("etcd://{sixteen}/gw"), EtcdTls::default()).is_ok());
        let seventeen = format!("etcd://{sixteen},127.0.0.1:2379/gw");
        assert!(matches!(
            Target::parse(&seventeen, EtcdTls::default()),
            Err(FleetError::TooManyEndpoints { count: 17, .. })
        ));
        for bad in [
            "etcd:///gw",
            "etcd://127.0.0.1:2379,/gw",
            "etcd://,127.0.0.1:2379/gw",
            "etcd://127.0.0.1:2379,,127.0.0.1:2380/gw",
            "etcd://127.0.0.1:2379,127.0.0.1/gw",
            "etcd://127.0.0.1:0/gw",
            "etcd://127.0.0.1:99999/gw",
            "etcd://user@127.0.0.1:2379/gw",
            "etcd://:2379/gw",
            "etcd://127.0.0.1:2379 /gw",
            "http://127.0.0.1:2379/gw",
            "etcd://127.0.0.1:2379",
            "etcd://127.0.0.1:2379/",
            "etcd://127.0.0.1/gw",
            "etcd://127.0.0.1:2379/a//b",
            "etcd://127.0.0.1:2379/a/../b",
        ] {
            assert!(
                Target::parse(bad, EtcdTls::default()).is_err(),
                "{bad} was accepted"
            );
        }
    }
}
