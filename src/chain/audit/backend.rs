//! Where audit events go: every audit filter, written before the request goes
//! on (`blocking` mode) or through a bounded queue a writer task drains
//! (`batch` mode, kube's
//! `staging/src/k8s.io/apiserver/plugin/pkg/audit/buffered/buffered.go`);
//! what does not fit the queue is dropped, counted and logged.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::config::stages::AuditMode;
use crate::wasm::filter::{Auditor, Event};
use crate::wasm::{LoadedFilter, Outcome};

/// Where events go: the audit filters, directly or through the queue.
pub(crate) struct AuditBackend {
    filters: Arc<Vec<LoadedFilter<Auditor>>>,
    queue: Option<mpsc::Sender<Event>>,
    /// Events accepted and not yet written by every filter.
    pending: Arc<AtomicUsize>,
    dropped: AtomicU64,
}

impl AuditBackend {
    /// A backend; in batch mode its writer task starts here.
    pub(crate) fn new(
        filters: Vec<LoadedFilter<Auditor>>,
        mode: AuditMode,
        queue_size: usize,
    ) -> Arc<Self> {
        let filters = Arc::new(filters);
        let pending = Arc::new(AtomicUsize::new(0));
        let queue = (mode == AuditMode::Batch).then(|| {
            let (sender, mut receiver) = mpsc::channel::<Event>(queue_size.max(1));
            let (filters, pending) = (filters.clone(), pending.clone());
            tokio::spawn(async move {
                while let Some(event) = receiver.recv().await {
                    write(&filters, &event).await;
                    // One flush per burst of events; done before the event
                    // stops counting as pending, so `flush` waits for it.
                    if receiver.is_empty() {
                        flush_sinks(&filters);
                    }
                    pending.fetch_sub(1, Ordering::AcqRel);
                }
            });
            sender
        });
        Arc::new(AuditBackend {
            filters,
            queue,
            pending,
            dropped: AtomicU64::new(0),
        })
    }

    pub(super) async fn emit(&self, event: Event) {
        match &self.queue {
            None => write_through(&self.filters, &event).await,
            Some(queue) => self.enqueue(queue, event),
        }
    }

    /// For events made where nothing can wait (a response body's end, a
    /// request dropped before its response); counted as pending until
    /// written, so that [`AuditBackend::flush`] waits for them too.
    pub(super) fn emit_detached(self: &Arc<Self>, event: Event) {
        match &self.queue {
            Some(queue) => self.enqueue(queue, event),
            None => {
                self.pending.fetch_add(1, Ordering::AcqRel);
                let backend = self.clone();
                tokio::spawn(async move {
                    write_through(&backend.filters, &event).await;
                    backend.pending.fetch_sub(1, Ordering::AcqRel);
                });
            }
        }
    }

    fn enqueue(&self, queue: &mpsc::Sender<Event>, event: Event) {
        self.pending.fetch_add(1, Ordering::AcqRel);
        if queue.try_send(event).is_err() {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            crate::metrics::metrics().audit_events_dropped.inc();
            // Every drop is counted; the log says so without flooding.
            if dropped.is_power_of_two() {
                tracing::warn!(dropped_total = dropped, "audit queue full: event dropped");
            }
        }
    }

    /// Waits (up to `limit`) until every queued event has been written.
    pub(crate) async fn flush(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        while self.pending.load(Ordering::Acquire) > 0 {
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(
                    pending = self.pending.load(Ordering::Acquire),
                    "audit events still unwritten at shutdown"
                );
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        true
    }
}

/// Blocking mode: the event is in the sinks' files before the request goes on.
async fn write_through(filters: &[LoadedFilter<Auditor>], event: &Event) {
    write(filters, event).await;
    flush_sinks(filters);
}

fn flush_sinks(filters: &[LoadedFilter<Auditor>]) {
    for filter in filters {
        filter.flush_sink();
    }
}

async fn write(filters: &[LoadedFilter<Auditor>], event: &Event) {
    for filter in filters {
        match filter.audit(event).await.outcome {
            Outcome::Answer(()) => {}
            Outcome::FilterError(message) => {
                tracing::warn!(filter = filter.name(), error = %message, "audit filter returned an error")
            }
            Outcome::Trap(message) => {
                tracing::error!(filter = filter.name(), trap = %message, "audit filter trapped")
            }
            Outcome::Timeout => tracing::error!(filter = filter.name(), "audit filter timed out"),
            Outcome::Exhausted(what) => {
                tracing::warn!(filter = filter.name(), %what, "no room to run the audit filter: event not written")
            }
        }
    }
}
