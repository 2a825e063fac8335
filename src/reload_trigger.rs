//! Asking for a reload: the [`ReloadTrigger`] the file watcher, SIGHUP and
//! `POST /debug/reload` pull, the [`ReloadOutcome`] a reload answers with,
//! and the [`ReloadEndpoint`] that serves `POST /debug/reload` (behind
//! authorization, as a non-resource URL). The reloader that serves the
//! requests is `server::reload`; this sits below both it and the
//! delegation chain that routes to the endpoint.

use futures_util::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};

use crate::body::{Request, Response};
use crate::handler::Handler;
use crate::status::{GatewayError, Status};

/// How a reload ended.
#[derive(Debug, Clone)]
pub enum ReloadOutcome {
    /// The new chain is in force.
    Swapped {
        /// The generation of the configuration now served.
        generation: u64,
        /// Settings that changed but take effect only after a restart.
        restart_required: Vec<String>,
    },
    /// The new configuration was refused; the running chain is unchanged.
    Rejected(String),
}

/// Asks the reloader for a reload; with a reply channel, to hear how it went.
#[derive(Clone)]
pub struct ReloadTrigger(mpsc::UnboundedSender<Option<oneshot::Sender<ReloadOutcome>>>);

pub(crate) type ReloadRequests = mpsc::UnboundedReceiver<Option<oneshot::Sender<ReloadOutcome>>>;

impl ReloadTrigger {
    pub(crate) fn new() -> (ReloadTrigger, ReloadRequests) {
        let (sender, receiver) = mpsc::unbounded_channel();
        (ReloadTrigger(sender), receiver)
    }

    /// Requests a reload without waiting for it.
    pub(crate) fn request(&self) {
        let _ = self.0.send(None);
    }

    /// Requests a reload and waits for its outcome.
    pub(crate) async fn reload(&self) -> Option<ReloadOutcome> {
        let (reply, outcome) = oneshot::channel();
        self.0.send(Some(reply)).ok()?;
        outcome.await.ok()
    }
}

/// `POST /debug/reload`: reload now and answer how it went.
pub(crate) struct ReloadEndpoint(pub ReloadTrigger);

impl Handler for ReloadEndpoint {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        Box::pin(async move {
            if request.method() != http::Method::POST {
                return GatewayError::MethodNotAllowed.into_response();
            }
            match self.0.reload().await {
                Some(ReloadOutcome::Swapped {
                    generation,
                    restart_required,
                }) => {
                    let mut message = format!("configuration reloaded: generation {generation}");
                    if !restart_required.is_empty() {
                        message.push_str(&format!(
                            "; restart required for: {}",
                            restart_required.join(", ")
                        ));
                    }
                    Status::success(message).into_response()
                }
                Some(ReloadOutcome::Rejected(problems)) => {
                    GatewayError::Invalid { message: problems }.into_response()
                }
                None => GatewayError::ServiceUnavailable {
                    message: "the reloader is not running".to_owned(),
                }
                .into_response(),
            }
        })
    }
}
