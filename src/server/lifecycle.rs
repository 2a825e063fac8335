//! Lifecycle hooks (kube's post-start and pre-shutdown hooks): commands from
//! the manifest run after the listener is up, and when shutdown begins. A
//! post-start hook's `poststarthook/<name>` readiness check fails until the
//! hook has succeeded; a failed hook is logged and stays failed, so the
//! gateway is never reported ready without it (kube exits instead; a gateway
//! keeps serving what it can and says so).

use std::net::SocketAddr;
use std::process::Stdio;

use crate::config::Hook;
use crate::health::Flag;

/// Why a hook did not succeed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HookError {
    #[error("cannot start {program:?}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("did not finish within {0:?}")]
    Timeout(std::time::Duration),
    #[error("exited with {status}: {stderr}")]
    Failed {
        status: std::process::ExitStatus,
        stderr: String,
    },
}

/// Runs one hook to completion, in the manifest's folder. The hook sees the
/// gateway's address in `WASMGATE_ADDRESS` and its own name in `WASMGATE_HOOK`.
pub(crate) async fn run_hook(hook: &Hook, address: SocketAddr) -> Result<(), HookError> {
    let Some((program, args)) = hook.command.split_first() else {
        return Ok(());
    };
    let child = tokio::process::Command::new(program)
        .args(args)
        .current_dir(&hook.working_dir)
        .env("WASMGATE_ADDRESS", address.to_string())
        .env("WASMGATE_HOOK", hook.name.as_str())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| HookError::Spawn {
            program: program.clone(),
            source,
        })?;
    let output = tokio::time::timeout(hook.timeout, child.wait_with_output())
        .await
        .map_err(|_| HookError::Timeout(hook.timeout))?
        .map_err(|source| HookError::Spawn {
            program: program.clone(),
            source,
        })?;
    if output.status.success() {
        Ok(())
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
        Err(HookError::Failed {
            status: output.status,
            stderr,
        })
    }
}

/// Starts every post-start hook in the background; each sets its flag when
/// it succeeded.
pub(crate) fn spawn_post_start_hooks(hooks: Vec<(Hook, Flag)>, address: SocketAddr) {
    for (hook, done) in hooks {
        tokio::spawn(async move {
            match run_hook(&hook, address).await {
                Ok(()) => {
                    tracing::info!(hook = %hook.name, "post-start hook finished");
                    done.set();
                }
                Err(error) => tracing::error!(hook = %hook.name, %error, "post-start hook failed"),
            }
        });
    }
}

/// Runs the pre-shutdown hooks one after another; failures are logged and
/// shutdown goes on.
pub(crate) async fn run_pre_shutdown_hooks(hooks: &[Hook], address: SocketAddr) {
    for hook in hooks {
        match run_hook(hook, address).await {
            Ok(()) => tracing::info!(hook = %hook.name, "pre-shutdown hook finished"),
            Err(error) => tracing::error!(hook = %hook.name, %error, "pre-shutdown hook failed"),
        }
    }
}
