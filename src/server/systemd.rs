//! systemd's notification protocol (`sd_notify(3)`), as kube's
//! `preparedGenericAPIServer.NonBlockingRunWithContext` speaks it
//! (`staging/src/k8s.io/apiserver/pkg/server/genericapiserver.go`:
//! `systemd.SdNotify(true, "READY=1\n")` once serving, after the post-start
//! hooks were started), and further, for a unit of `Type=notify-reload` or
//! `Type=notify` with a watchdog: `RELOADING=1` (with `MONOTONIC_USEC=`, as
//! systemd asks) then `READY=1` around a reload, `STOPPING=1` when shutdown
//! begins, and `WATCHDOG=1` every half `WATCHDOG_USEC`. Without
//! `$NOTIFY_SOCKET` every call does nothing. The `sd-notify` crate writes
//! the datagrams; a failure to send is logged, never fatal.

use sd_notify::NotifyState;
use tokio::task::JoinHandle;

fn notify(states: &[NotifyState]) {
    if let Err(error) = sd_notify::notify(states) {
        tracing::warn!(%error, "cannot notify the service manager");
    }
}

/// The gateway serves: `READY=1`.
pub(crate) fn ready() {
    notify(&[NotifyState::Ready]);
}

/// A reload begins: `RELOADING=1` with the monotonic time it began.
pub(crate) fn reloading() {
    match NotifyState::monotonic_usec_now() {
        Ok(now) => notify(&[NotifyState::Reloading, now]),
        Err(error) => tracing::warn!(%error, "cannot read the monotonic clock for RELOADING=1"),
    }
}

/// Shutdown begins: `STOPPING=1`.
pub(crate) fn stopping() {
    notify(&[NotifyState::Stopping]);
}

/// When the service manager set a watchdog (`WATCHDOG_USEC`, for this
/// process), a task that sends `WATCHDOG=1` every half of it, as
/// `sd_watchdog_enabled(3)` advises; stopped at shutdown.
pub(crate) fn spawn_watchdog() -> Option<JoinHandle<()>> {
    let period = sd_notify::watchdog_enabled()?.checked_div(2)?;
    if period.is_zero() {
        return None;
    }
    Some(tokio::spawn(async move {
        let mut ticks = tokio::time::interval(period);
        loop {
            ticks.tick().await;
            notify(&[NotifyState::Watchdog]);
        }
    }))
}
