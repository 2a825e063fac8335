//! Fleet status: each gateway writes what it runs to `P/status/<id>` under
//! an etcd lease (gone with the gateway, [`LEASE_TTL`] after it stopped
//! renewing), and a copy to `P/seen/<id>` that outlives it, so that
//! `wasmgate status` shows who runs which revision, who refused what, and
//! who is gone.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::store::Store;
use super::{FleetError, Revision};

/// How long a gateway's status outlives its last renewal.
pub const LEASE_TTL: i64 = 10;

/// How often the lease is renewed: three times per TTL.
const RENEW_EVERY: Duration = Duration::from_secs(3);

/// How long to wait before trying again after etcd failed a status write.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// What one gateway reports.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct GatewayStatus {
    /// The gateway's name in the fleet (`--gateway-id`).
    pub gateway: String,
    /// The wasmgate version it runs.
    pub version: String,
    /// Unix seconds.
    pub started_at: u64,
    /// The address it serves on.
    pub listen: String,
    /// The revision whose chain serves.
    pub applied: Revision,
    /// Where it was loaded from at last.
    pub applied_from: AppliedFrom,
    /// The last revision refused since the one applied, and why.
    pub refused: Option<Refusal>,
    /// The manifest's watch: the member it is on, and whether it is down
    /// (absent from a status written before this field was).
    #[serde(default)]
    pub watch: WatchStatus,
}

/// The manifest's watch, as a gateway reports it: while it is down, the
/// revision the gateway serves may be stale.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct WatchStatus {
    /// The etcd member (`HOST:PORT`) the watch is on, or is tried on next.
    pub endpoint: String,
    /// Since when and why the watch is down; `None` while it watches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub down: Option<WatchDown>,
}

/// A watch that failed and has not been established again.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct WatchDown {
    /// Unix seconds: when it failed first.
    pub since: u64,
    /// Its last error, after the member that gave it: `HOST:PORT: why`.
    pub error: String,
}

impl std::fmt::Display for WatchDown {
    /// `since 2026-01-02T03:04:05Z (HOST:PORT: the error's first line)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let since = UNIX_EPOCH + Duration::from_secs(self.since);
        let first = self.error.lines().next().unwrap_or_default();
        write!(
            f,
            "since {} ({first})",
            humantime::format_rfc3339_seconds(since)
        )
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
/// Where a gateway's serving chain was loaded from.
pub enum AppliedFrom {
    /// The fleet's etcd.
    Etcd,
    /// The disk copy: etcd was away when the gateway started.
    Disk,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
/// A revision a gateway would not apply.
pub struct Refusal {
    /// The revision refused.
    pub revision: Revision,
    /// Why, as `wasmgate check` would say it.
    pub error: String,
}

/// One row of `wasmgate status`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Member {
    /// False once its lease expired: the gateway stopped or lost etcd.
    pub up: bool,
    /// What the gateway last wrote of itself.
    #[serde(flatten)]
    pub status: GatewayStatus,
}

/// The fleet, as `wasmgate status` prints it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Fleet {
    /// The fleet, as `etcd://HOST:PORT/PREFIX`.
    pub url: String,
    /// The manifest's revision, 0 before the first push.
    pub revision: Revision,
    /// Every gateway that has reported, up or gone.
    pub gateways: Vec<Member>,
}

/// Now in Unix seconds (0 should the clock be before 1970).
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Reads the fleet's status.
pub async fn fleet(store: &Store, url: String) -> Result<Fleet, FleetError> {
    let revision = store
        .manifest()
        .await?
        .map_or(0, |manifest| manifest.revision);
    let live: Vec<String> = store
        .folder("status")
        .await?
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let gateways = store
        .folder("seen")
        .await?
        .into_iter()
        .filter_map(|(id, text)| {
            let status: GatewayStatus = serde_json::from_str(&text).ok()?;
            Some(Member {
                up: live.contains(&id),
                status,
            })
        })
        .collect();
    Ok(Fleet {
        url,
        revision,
        gateways,
    })
}

impl std::fmt::Display for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{}: manifest revision {}", self.url, self.revision)?;
        writeln!(
            f,
            "{:<24} {:<5} {:>9}  {:<22} NOTE",
            "GATEWAY", "STATE", "REVISION", "LISTEN"
        )?;
        for member in &self.gateways {
            let status = &member.status;
            let mut note = Vec::new();
            if member.up && status.applied != self.revision {
                note.push(format!("behind revision {}", self.revision));
            }
            if status.applied_from == AppliedFrom::Disk {
                note.push("started from its disk copy".to_owned());
            }
            if let Some(refused) = &status.refused {
                let first = refused.error.lines().next().unwrap_or_default();
                note.push(format!("refused {}: {first}", refused.revision));
            }
            if let Some(down) = &status.watch.down {
                note.push(format!("watch down {down}"));
            }
            writeln!(
                f,
                "{:<24} {:<5} {:>9}  {:<22} {}",
                status.gateway,
                if member.up { "up" } else { "gone" },
                status.applied,
                status.listen,
                note.join("; ")
            )?;
        }
        Ok(())
    }
}

/// Keeps this gateway's status in etcd, under a lease renewed every
/// [`RENEW_EVERY`] and written anew on every change, until the status's
/// sender is dropped (the lease is then revoked); a lost lease (etcd was
/// away longer than the TTL) is granted again.
pub async fn report(store: Store, mut status: watch::Receiver<GatewayStatus>) {
    while let Err(error) = hold_lease(&store, &mut status).await {
        tracing::debug!(%error, "cannot write the fleet status: trying again");
        tokio::time::sleep(RETRY_AFTER).await;
        if status.has_changed().is_err() {
            return;
        }
    }
}

async fn hold_lease(
    store: &Store,
    status: &mut watch::Receiver<GatewayStatus>,
) -> Result<(), FleetError> {
    let mut client = store.client();
    let lease = client.lease_grant(LEASE_TTL, None).await?.id();
    let write = |current: &GatewayStatus| {
        let text = serde_json::to_string(current).unwrap_or_default();
        let gateway = current.gateway.clone();
        async move { store.put_status(&gateway, &text, lease).await }
    };
    let first = status.borrow_and_update().clone();
    write(&first).await?;
    let (mut keeper, mut answers) = client.lease_keep_alive(lease).await?;
    let mut renewal = tokio::time::interval(RENEW_EVERY);
    loop {
        tokio::select! {
            _ = renewal.tick() => {
                keeper.keep_alive().await?;
                match answers.message().await? {
                    Some(answer) if answer.ttl() > 0 => {}
                    _ => return Err(FleetError::Missing(format!("lease {lease:x}"))),
                }
            }
            changed = status.changed() => {
                if changed.is_err() {
                    // The gateway is stopping: its status goes with it.
                    let _ = client.lease_revoke(lease).await;
                    return Ok(());
                }
                let current = status.borrow_and_update().clone();
                write(&current).await?;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_written_before_the_watch_was_reported_still_reads() {
        let before = r#"{"gateway":"gw1","version":"0.1.0","started_at":1,"listen":"127.0.0.1:1","applied":7,"applied_from":"etcd","refused":null}"#;
        let status: GatewayStatus = serde_json::from_str(before).expect("an older status");
        assert_eq!(status.watch, WatchStatus::default());
        let down = WatchDown {
            since: 0,
            error: "127.0.0.1:2379: etcd: no leader\nmore".to_owned(),
        };
        assert_eq!(
            down.to_string(),
            "since 1970-01-01T00:00:00Z (127.0.0.1:2379: etcd: no leader)"
        );
    }
}
