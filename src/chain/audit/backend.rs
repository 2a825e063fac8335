//! Where audit events go: every audit filter, written before the request goes
//! on (`blocking` mode) or through kube's batch backend (`batch` mode,
//! `staging/src/k8s.io/apiserver/plugin/pkg/audit/buffered/buffered.go`): a
//! bounded buffer a writer task drains in batches of at most
//! `max_batch_size` events, each sent once it is full or `max_batch_wait`
//! after its first event; what does not fit the buffer is dropped, counted
//! and logged. One writer keeps the events in the order they were made, so
//! a request's events reach every filter in stage order.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::future::OptionFuture;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::stages::{Audit, AuditMode};
use crate::wasm::audit_batch::AuditBatch;
use crate::wasm::filter::{Auditor, Event};
use crate::wasm::{LoadedFilter, Outcome};

/// Where events go: the audit filters, directly or through the buffer.
pub(crate) struct AuditBackend {
    filters: Arc<Vec<LoadedFilter<Auditor>>>,
    queue: Option<mpsc::Sender<Event>>,
    /// Events accepted and not yet written by every filter.
    pending: Arc<AtomicUsize>,
    dropped: AtomicU64,
    /// Cancelled by [`AuditBackend::flush`]: the writer stops waiting for
    /// batches to fill (kube's `Shutdown` closes the buffer for the same).
    hurry: CancellationToken,
}

/// How the batch writer groups events.
#[derive(Clone, Copy)]
struct Batching {
    max_size: usize,
    max_wait: Duration,
}

impl AuditBackend {
    /// A backend for the manifest's `[audit]`; in batch mode its writer task
    /// starts here.
    pub(crate) fn new(filters: Vec<LoadedFilter<Auditor>>, audit: &Audit) -> Arc<Self> {
        let filters = Arc::new(filters);
        let pending = Arc::new(AtomicUsize::new(0));
        let hurry = CancellationToken::new();
        let queue = (audit.mode == AuditMode::Batch).then(|| {
            let (sender, receiver) = mpsc::channel::<Event>(audit.queue_size.max(1));
            let batching = Batching {
                max_size: audit.max_batch_size.max(1),
                max_wait: audit.max_batch_wait,
            };
            tokio::spawn(write_batches(
                receiver,
                batching,
                filters.clone(),
                pending.clone(),
                hurry.clone(),
            ));
            sender
        });
        Arc::new(AuditBackend {
            filters,
            queue,
            pending,
            dropped: AtomicU64::new(0),
            hurry,
        })
    }

    /// Hands `event` on: queued at once in batch mode, leaving nothing to
    /// wait for; written by the returned future in blocking mode. Not an
    /// `async fn`: its state (the event, the filters' calls) would sit in
    /// the future of every audited request, which is moved whole when it
    /// is made (bench/README.md § "Futures moved whole").
    pub(super) fn emit(&self, event: Event) -> impl Future<Output = Option<()>> + Send + '_ {
        crate::metrics::metrics().stages.audit_event();
        let write = match &self.queue {
            Some(queue) => {
                self.enqueue(queue, event);
                None
            }
            None => Some(Box::pin(async move {
                write_through(&self.filters, std::slice::from_ref(&event)).await
            })),
        };
        OptionFuture::from(write)
    }

    /// For events made where nothing can wait (a response body's end, a
    /// request dropped before its response); counted as pending until
    /// written, so that [`AuditBackend::flush`] waits for them too.
    pub(super) fn emit_detached(self: &Arc<Self>, event: Event) {
        crate::metrics::metrics().stages.audit_event();
        match &self.queue {
            Some(queue) => self.enqueue(queue, event),
            None => {
                self.pending.fetch_add(1, Ordering::AcqRel);
                let backend = self.clone();
                tokio::spawn(async move {
                    write_through(&backend.filters, &[event]).await;
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
            crate::metrics::metrics().stages.audit_errors("buffered", 1);
            // Every drop is counted; the log says so without flooding.
            if dropped.is_power_of_two() {
                tracing::warn!(dropped_total = dropped, "audit buffer full: event dropped");
            }
        }
    }

    /// Writes what is queued without waiting for batches to fill, and waits
    /// (up to `limit`) until every queued event has been written. Called at
    /// the end of the process: later batches are written at once too.
    pub(crate) async fn flush(&self, limit: Duration) -> bool {
        self.hurry.cancel();
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

/// The batch writer: kube's `processIncomingEvents`, one batch at a time.
async fn write_batches(
    mut receiver: mpsc::Receiver<Event>,
    batching: Batching,
    filters: Arc<Vec<LoadedFilter<Auditor>>>,
    pending: Arc<AtomicUsize>,
    hurry: CancellationToken,
) {
    let mut batch = Vec::with_capacity(batching.max_size);
    while collect(&mut receiver, &mut batch, batching, &hurry).await {
        write_through(&filters, &batch).await;
        // Done before the events stop counting as pending, so `flush`
        // waits for them.
        pending.fetch_sub(batch.len(), Ordering::AcqRel);
        batch.clear();
    }
}

/// Fills `batch` as kube's `collectEvents` does: up to the maximum size,
/// waiting at most the maximum wait after the first event (what is already
/// queued is taken at once), or not at all once `hurry` is cancelled.
/// False once the buffer is closed and drained.
async fn collect(
    receiver: &mut mpsc::Receiver<Event>,
    batch: &mut Vec<Event>,
    batching: Batching,
    hurry: &CancellationToken,
) -> bool {
    if receiver.recv_many(batch, batching.max_size).await == 0 {
        return false;
    }
    let deadline = tokio::time::Instant::now() + batching.max_wait;
    while batch.len() < batching.max_size {
        let room = batching.max_size - batch.len();
        let more = tokio::select! {
            biased;
            () = hurry.cancelled() => break,
            more = tokio::time::timeout_at(deadline, receiver.recv_many(batch, room)) => more,
        };
        match more {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    true
}

/// One batch to every filter, then their sinks flushed: in blocking mode
/// the event is in the sinks' files before the request goes on. The batch
/// is serialised at most once, for the first filter that takes it so.
async fn write_through(filters: &[LoadedFilter<Auditor>], events: &[Event]) {
    crate::metrics::metrics().gateway.audit_batches.inc();
    let batch = AuditBatch::new(events);
    for filter in filters {
        let outcome = filter.audit(&batch).await.outcome;
        if !matches!(outcome, Outcome::Answer(())) {
            crate::metrics::metrics()
                .stages
                .audit_errors(filter.name(), events.len());
        }
        match outcome {
            Outcome::Answer(()) => {}
            Outcome::FilterError(message) => {
                tracing::warn!(filter = filter.name(), events = events.len(), error = %message, "audit filter returned an error")
            }
            Outcome::Trap(message) => {
                tracing::error!(filter = filter.name(), events = events.len(), trap = %message, "audit filter trapped")
            }
            Outcome::Timeout => {
                tracing::error!(
                    filter = filter.name(),
                    events = events.len(),
                    "audit filter timed out"
                )
            }
            Outcome::Exhausted(what) => {
                tracing::warn!(filter = filter.name(), events = events.len(), %what, "no room to run the audit filter: events not written")
            }
        }
        filter.flush_sink();
    }
}
