//! Where audit events go: every audit filter, written before the request goes
//! on (`blocking` mode) or through kube's batch backend (`batch` mode,
//! `staging/src/k8s.io/apiserver/plugin/pkg/audit/buffered/buffered.go`): a
//! bounded buffer (`buffer`) a writer task drains in batches of at most
//! `max_batch_size` events, each sent once it is full or `max_batch_wait`
//! after its first event; what does not fit the buffer is dropped, counted
//! and logged. One writer keeps the events in the order they were made, so
//! a request's events reach every filter in stage order.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::buffer::{Batch, Buffer, Full};
use crate::audit_event::AuditEvent;
use crate::config::stages::{Audit, AuditMode};
use crate::wasm::audit_batch::AuditBatch;
use crate::wasm::filter::{Auditor, JsonBatch};
use crate::wasm::{LoadedFilter, Outcome};

/// A blocking-mode write running in a task of its own.
pub(super) type Writing = tokio::task::JoinHandle<()>;

/// Where events go: the audit filters, directly or through the buffer.
pub(crate) struct AuditBackend {
    filters: Arc<Vec<LoadedFilter<Auditor>>>,
    queue: Option<Queue>,
    progress: Arc<Progress>,
    dropped: AtomicU64,
}

/// What a flush needs of a backend: its count of events still to write and
/// the signal that stops its writer waiting. Apart from the backend, and
/// held by its writer task too, so that it outlives a backend a reload let
/// go while that writer still has events (see [`AuditWriters`]).
struct Progress {
    /// Events accepted and not yet written by every filter.
    pending: Arc<AtomicUsize>,
    /// Cancelled by a flush: the writer stops waiting for batches to fill
    /// (kube's `Shutdown` closes the buffer for the same).
    hurry: CancellationToken,
}

/// The batch mode's buffer, by what its batches hold: the events' JSON
/// lines when every auditor takes them so, else the events.
enum Queue {
    Records(Arc<Buffer<Vec<AuditEvent>>>),
    Lines(Arc<Buffer<JsonBatch>>),
}

impl AuditBackend {
    /// A backend for the manifest's `[audit]`; in batch mode its writer task
    /// starts here.
    pub(crate) fn new(filters: Vec<LoadedFilter<Auditor>>, audit: &Audit) -> Arc<Self> {
        let filters = Arc::new(filters);
        let progress = Arc::new(Progress {
            pending: Arc::new(AtomicUsize::new(0)),
            hurry: CancellationToken::new(),
        });
        let queue = (audit.mode == AuditMode::Batch).then(|| {
            let writer = Writer {
                filters: filters.clone(),
                max_wait: audit.max_batch_wait,
                progress: progress.clone(),
            };
            if filters.iter().all(LoadedFilter::takes_serialised) {
                Queue::Lines(writer.start(audit))
            } else {
                Queue::Records(writer.start(audit))
            }
        });
        Arc::new(AuditBackend {
            filters,
            queue,
            progress,
            dropped: AtomicU64::new(0),
        })
    }

    /// Hands `event` on in a way its request's end cannot cancel: queued at
    /// once in batch mode; in blocking mode written by a task of its own,
    /// after the request's write still going (`after`, so that a request's
    /// events keep their order), and counted as pending until written, so
    /// that [`AuditWriters::flush`] waits for it too. For events made where
    /// nothing can wait (a response body's end, a request dropped before
    /// its response), and for a request's own writes in blocking mode: the
    /// request waits for the returned task, and if it is dropped meanwhile
    /// (its deadline, its client gone, the shutdown's cut) the event is
    /// written all the same.
    pub(super) fn emit_detached(
        self: &Arc<Self>,
        event: AuditEvent,
        after: Option<Writing>,
    ) -> Option<Writing> {
        crate::metrics::metrics().stages.audit_event();
        match &self.queue {
            Some(queue) => {
                self.enqueue(queue, Cow::Owned(event));
                None
            }
            None => {
                self.progress.pending.fetch_add(1, Ordering::AcqRel);
                let backend = self.clone();
                Some(tokio::spawn(async move {
                    if let Some(earlier) = after {
                        // Its failure (a panic in a filter's host code) is
                        // that write's; this one goes on.
                        let _ = earlier.await;
                    }
                    write_through(&backend.filters, &AuditBatch::new(&[event])).await;
                    backend.progress.pending.fetch_sub(1, Ordering::AcqRel);
                }))
            }
        }
    }

    /// [`AuditBackend::emit_detached`] for an event lent (a request's
    /// RequestReceived, ResponseStarted: the event its ResponseComplete is
    /// made from later). Batches of lines read it where it is, batches of
    /// events copy it; a blocking write takes a copy to its task.
    pub(super) fn emit_lent(
        self: &Arc<Self>,
        event: &AuditEvent,
        after: Option<Writing>,
    ) -> Option<Writing> {
        match &self.queue {
            Some(queue) => {
                crate::metrics::metrics().stages.audit_event();
                self.enqueue(queue, Cow::Borrowed(event));
                None
            }
            None => self.emit_detached(event.clone(), after),
        }
    }

    /// [`AuditBackend::emit_detached`], waited for: the event is queued, or
    /// written in blocking mode, when this returns, and is written even if
    /// the caller is dropped first.
    pub(super) async fn emit_owned(self: &Arc<Self>, event: AuditEvent) {
        if let Some(writing) = self.emit_detached(event, None) {
            let _ = writing.await;
        }
    }

    fn enqueue(&self, queue: &Queue, event: Cow<'_, AuditEvent>) {
        let queued = match queue {
            Queue::Records(buffer) => buffer.push(event),
            Queue::Lines(buffer) => buffer.push(event),
        };
        if let Err(Full) = queued {
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            crate::metrics::metrics().stages.audit_errors("buffered", 1);
            // Every drop is counted; the log says so without flooding.
            if dropped.is_power_of_two() {
                tracing::warn!(dropped_total = dropped, "audit buffer full: event dropped");
            }
        }
    }
}

impl Progress {
    /// Waits until every event accepted has been written, or `deadline`.
    async fn written_by(&self, deadline: tokio::time::Instant) -> bool {
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

/// Every backend a gateway built, for the shutdown to flush. A reload
/// replaces the live snapshot's backend, but the one it replaced may still
/// be given events (by requests in flight on it, completed by the
/// shutdown's cut) or still be writing them (its writer drains the buffer
/// the backend closed when dropped); the live snapshot's alone would leave
/// those to a task the exiting process never runs. Entries are weak: they
/// keep nothing alive, and each is gone once its backend and writer are.
/// One entry per snapshot built, none per request.
#[derive(Default)]
pub(crate) struct AuditWriters {
    writers: Mutex<Vec<Weak<Progress>>>,
}

impl AuditWriters {
    /// Tracks `backend` (once per snapshot built); forgets the backends
    /// done writing, so the list never holds more than those still alive.
    pub(crate) fn register(&self, backend: &AuditBackend) {
        self.track(&backend.progress);
    }

    fn track(&self, progress: &Arc<Progress>) {
        let mut writers = self.writers();
        writers.retain(|writer| writer.strong_count() > 0);
        writers.push(Arc::downgrade(progress));
    }

    /// Writes what every backend still writing has queued, without waiting
    /// for batches to fill, and waits (all within the one `limit`) until
    /// it has been written: every writer is hurried first, so they write at
    /// once, side by side, while the first is waited for. Called at the end
    /// of the process: later batches are written at once too.
    pub(crate) async fn flush(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        let writing: Vec<Arc<Progress>> = self.writers().iter().filter_map(Weak::upgrade).collect();
        for progress in &writing {
            progress.hurry.cancel();
        }
        let mut all_written = true;
        for progress in &writing {
            all_written &= progress.written_by(deadline).await;
        }
        all_written
    }

    fn writers(&self) -> MutexGuard<'_, Vec<Weak<Progress>>> {
        // Nothing panics while holding it; a poisoned lock still guards a
        // whole list.
        self.writers.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for AuditBackend {
    /// The writer writes what is left, then stops (kube closes its buffer).
    fn drop(&mut self) {
        match &self.queue {
            Some(Queue::Records(buffer)) => buffer.close(),
            Some(Queue::Lines(buffer)) => buffer.close(),
            None => {}
        }
    }
}

/// The batch writer: kube's `processIncomingEvents`, one batch at a time.
struct Writer {
    filters: Arc<Vec<LoadedFilter<Auditor>>>,
    max_wait: Duration,
    /// Held as long as the writer runs: a flush finds it through
    /// [`AuditWriters`] after the backend is gone.
    progress: Arc<Progress>,
}

impl Writer {
    /// The buffer for `audit`, its writer started.
    fn start<B: Batch>(self, audit: &Audit) -> Arc<Buffer<B>> {
        let buffer = Arc::new(Buffer::new(
            audit.queue_size,
            audit.max_batch_size,
            self.progress.pending.clone(),
        ));
        tokio::spawn(self.run(buffer.clone()));
        buffer
    }

    async fn run<B: Batch>(self, buffer: Arc<Buffer<B>>) {
        while let Some(batch) = buffer.next_batch(self.max_wait, &self.progress.hurry).await {
            write_through(&self.filters, &batch.as_audit_batch()).await;
            // Handed back after every filter has it, so `flush` waits for it.
            buffer.written(batch);
        }
    }
}

/// One batch to every filter, then their sinks flushed: in blocking mode
/// the event is in the sinks' files before the request goes on. The batch
/// is serialised at most once, for the first filter that takes it so.
async fn write_through(filters: &[LoadedFilter<Auditor>], batch: &AuditBatch<'_>) {
    crate::metrics::metrics().gateway.audit_batches.inc();
    let events = batch.len();
    for filter in filters {
        let outcome = filter.audit(batch).await.outcome;
        if !matches!(outcome, Outcome::Answer(())) {
            crate::metrics::metrics()
                .stages
                .audit_errors(filter.name(), events);
        }
        match outcome {
            Outcome::Answer(()) => {}
            Outcome::FilterError(message) => {
                tracing::warn!(filter = filter.name(), events, error = %message, "audit filter returned an error")
            }
            Outcome::Trap(message) => {
                tracing::error!(filter = filter.name(), events, trap = %message, "audit filter trapped")
            }
            Outcome::Timeout => {
                tracing::error!(filter = filter.name(), events, "audit filter timed out")
            }
            Outcome::Exhausted(what) => {
                tracing::warn!(filter = filter.name(), events, %what, "no room to run the audit filter: events not written")
            }
        }
        filter.flush_sink();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(pending: usize) -> Arc<Progress> {
        Arc::new(Progress {
            pending: Arc::new(AtomicUsize::new(pending)),
            hurry: CancellationToken::new(),
        })
    }

    /// A writer left with `events` once its backend is gone: it waits for a
    /// flush to hurry it, then writes them a moment later.
    fn orphaned_writer(writers: &AuditWriters, events: usize) -> Arc<AtomicUsize> {
        let progress = progress(events);
        writers.track(&progress);
        let pending = progress.pending.clone();
        // The writer task's hold, the only one left.
        tokio::spawn(async move {
            progress.hurry.cancelled().await;
            tokio::time::sleep(Duration::from_millis(50)).await;
            progress.pending.fetch_sub(events, Ordering::AcqRel);
        });
        pending
    }

    #[tokio::test]
    async fn a_flush_waits_for_every_writer_still_writing_its_backend_gone_or_not() {
        let writers = AuditWriters::default();
        let live = progress(0);
        writers.track(&live);
        let replaced = orphaned_writer(&writers, 3);
        let older = orphaned_writer(&writers, 2);
        assert!(writers.flush(Duration::from_secs(10)).await);
        assert_eq!(replaced.load(Ordering::Acquire), 0);
        assert_eq!(older.load(Ordering::Acquire), 0);
        assert!(live.hurry.is_cancelled());
    }

    #[tokio::test]
    async fn a_flush_gives_up_at_its_limit() {
        let writers = AuditWriters::default();
        let stuck = progress(1);
        writers.track(&stuck);
        let started = tokio::time::Instant::now();
        assert!(!writers.flush(Duration::from_millis(50)).await);
        assert!(started.elapsed() >= Duration::from_millis(50));
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn the_backends_done_writing_are_forgotten() {
        let writers = AuditWriters::default();
        for _ in 0..10 {
            writers.track(&progress(0));
        }
        let kept = progress(0);
        writers.track(&kept);
        assert_eq!(writers.writers().len(), 1);
    }
}
