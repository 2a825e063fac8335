//! kube's bounded audit buffer (`staging/src/k8s.io/apiserver/plugin/pkg/audit/buffered/buffered.go`),
//! with its events grouped into batches as they arrive rather than when the
//! writer collects them: a queue of batches, each of at most the maximum
//! batch size, holding at most the buffer's size of events in all. A batch
//! is the events themselves (`audit_event::AuditEvent`, for an auditor that
//! takes records), or, when every auditor takes them serialised, the
//! events' JSON lines, rendered as each is queued: then no event outlives
//! its request, and the writer's batch is ready to hand over without a
//! pass over memory gone cold.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::audit_event::AuditEvent;
use crate::wasm::audit_batch::{AuditBatch, push_line};
use crate::wasm::filter::JsonBatch;

/// What a batch holds its events as.
pub(super) trait Batch: Send + 'static {
    fn empty() -> Self;
    /// Adds `event`; how many events that made (none for one with no line).
    /// Lent, it is copied only by a batch that keeps events.
    fn push(&mut self, event: Cow<'_, AuditEvent>) -> usize;
    fn len(&self) -> usize;
    fn clear(&mut self);
    /// The bytes it keeps allocated once cleared.
    fn retained(&self) -> usize;
    /// The batch as the auditors are given it.
    fn as_audit_batch(&self) -> AuditBatch<'_>;
}

impl Batch for Vec<AuditEvent> {
    fn empty() -> Self {
        Vec::new()
    }
    fn push(&mut self, event: Cow<'_, AuditEvent>) -> usize {
        Vec::push(self, event.into_owned());
        1
    }
    fn len(&self) -> usize {
        Vec::len(self)
    }
    fn clear(&mut self) {
        Vec::clear(self)
    }
    fn retained(&self) -> usize {
        self.capacity() * size_of::<AuditEvent>()
    }
    fn as_audit_batch(&self) -> AuditBatch<'_> {
        AuditBatch::new(self)
    }
}

impl Batch for JsonBatch {
    fn empty() -> Self {
        JsonBatch {
            lines: Vec::new(),
            stages: Vec::new(),
        }
    }
    fn push(&mut self, event: Cow<'_, AuditEvent>) -> usize {
        usize::from(push_line(self, &event))
    }
    fn len(&self) -> usize {
        self.stages.len()
    }
    fn clear(&mut self) {
        self.lines.clear();
        self.stages.clear();
    }
    fn retained(&self) -> usize {
        self.lines.capacity() + self.stages.capacity()
    }
    fn as_audit_batch(&self) -> AuditBatch<'_> {
        AuditBatch::serialised_already(self)
    }
}

/// A written batch this large is let go rather than kept for the next one:
/// room for a few thousand Metadata events.
const MAX_RETAINED_BYTES: usize = 4 << 20;

/// The buffer was full: the event was not taken.
pub(super) struct Full;

/// The bounded buffer, shared by the requests that queue events and the
/// writer that takes them.
pub(super) struct Buffer<B> {
    state: Mutex<State<B>>,
    /// Wakes the writer: a first event, a batch full, the buffer closed.
    wake: Notify,
    /// Events queued and not yet written (the backend's, which `flush`
    /// waits on); raised under the lock, so before the writer can see them.
    pending: Arc<AtomicUsize>,
    capacity: usize,
    max_batch: usize,
}

struct State<B> {
    /// Oldest first; only the last one is still filling.
    batches: VecDeque<B>,
    /// Events in `batches`.
    queued: usize,
    /// A written batch, emptied, for the next one to fill.
    spare: Option<B>,
    /// No more events will come.
    closed: bool,
}

impl<B: Batch> Buffer<B> {
    pub(super) fn new(capacity: usize, max_batch: usize, pending: Arc<AtomicUsize>) -> Self {
        Buffer {
            state: Mutex::new(State {
                batches: VecDeque::new(),
                queued: 0,
                spare: None,
                closed: false,
            }),
            wake: Notify::new(),
            pending,
            capacity: capacity.max(1),
            max_batch: max_batch.max(1),
        }
    }

    fn state(&self) -> MutexGuard<'_, State<B>> {
        // Nothing panics while holding it; a poisoned lock still guards a
        // whole state.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `event`, or refuses it when the buffer holds its size already.
    pub(super) fn push(&self, event: Cow<'_, AuditEvent>) -> Result<(), Full> {
        let mut state = self.state();
        if state.queued >= self.capacity {
            return Err(Full);
        }
        let filling = state
            .batches
            .back()
            .is_some_and(|last| last.len() < self.max_batch);
        if !filling {
            let fresh = state.spare.take().unwrap_or_else(B::empty);
            state.batches.push_back(fresh);
        }
        let only = state.batches.len() == 1;
        let Some(last) = state.batches.back_mut() else {
            return Ok(());
        };
        let added = last.push(event);
        let len = last.len();
        state.queued += added;
        self.pending.fetch_add(added, Ordering::AcqRel);
        drop(state);
        // The writer waits on the oldest batch only: for its first event,
        // then for it to fill. A batch behind it means it is full already.
        if added > 0 && only && (len == 1 || len == self.max_batch) {
            self.wake.notify_one();
        }
        Ok(())
    }

    /// No more events: the writer takes what is left at once, then stops.
    pub(super) fn close(&self) {
        self.state().closed = true;
        self.wake.notify_one();
    }

    /// The next batch, as kube's `collectEvents` makes it: waits for a first
    /// event, then at most `max_wait` for the batch to fill, or not at all
    /// once `hurry` is cancelled or the buffer closed. None once it is
    /// closed and empty.
    pub(super) async fn next_batch(
        &self,
        max_wait: Duration,
        hurry: &CancellationToken,
    ) -> Option<B> {
        loop {
            {
                let state = self.state();
                if state.queued > 0 {
                    break;
                }
                if state.closed {
                    return None;
                }
            }
            // A wake with nobody waiting is kept, so none is missed between
            // the look above and this wait.
            self.wake.notified().await;
        }
        let deadline = tokio::time::Instant::now() + max_wait;
        while !self.oldest_is_ready() && !hurry.is_cancelled() {
            tokio::select! {
                biased;
                () = hurry.cancelled() => break,
                () = tokio::time::sleep_until(deadline) => break,
                () = self.wake.notified() => {}
            }
        }
        self.take_oldest()
    }

    /// The oldest batch is full, or the buffer closed.
    fn oldest_is_ready(&self) -> bool {
        let state = self.state();
        state.closed || state.batches.len() > 1 || state.queued >= self.max_batch
    }

    fn take_oldest(&self) -> Option<B> {
        let mut state = self.state();
        let batch = state.batches.pop_front()?;
        state.queued -= batch.len();
        Some(batch)
    }

    /// Hands back a written batch, to be filled again.
    pub(super) fn written(&self, mut batch: B) {
        self.pending.fetch_sub(batch.len(), Ordering::AcqRel);
        if batch.retained() <= MAX_RETAINED_BYTES {
            batch.clear();
            self.state().spare = Some(batch);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit_event::tests::event;
    use crate::context::AuditId;

    /// An event told apart by its Audit-ID.
    fn numbered(number: usize) -> AuditEvent {
        AuditEvent {
            audit_id: Some(AuditId::from(http::HeaderValue::from(number))),
            ..event()
        }
    }

    fn ids(batch: &[AuditEvent]) -> Vec<&str> {
        batch.iter().map(AuditEvent::audit_id).collect()
    }

    /// The next batch, failing the test rather than hanging it.
    async fn next<B: Batch>(
        buffer: &Buffer<B>,
        wait: Duration,
        hurry: &CancellationToken,
    ) -> Option<B> {
        tokio::time::timeout(Duration::from_secs(10), buffer.next_batch(wait, hurry))
            .await
            .expect("a batch within 10 s")
    }

    #[tokio::test]
    async fn batches_fill_to_their_maximum_in_order_and_the_buffer_refuses_past_its_size() {
        let pending = Arc::new(AtomicUsize::new(0));
        let buffer = Buffer::<Vec<AuditEvent>>::new(5, 2, pending.clone());
        for number in 0..5 {
            assert!(buffer.push(Cow::Owned(numbered(number))).is_ok());
        }
        assert!(matches!(buffer.push(Cow::Owned(numbered(5))), Err(Full)));
        assert_eq!(pending.load(Ordering::Acquire), 5);
        let hurry = CancellationToken::new();
        hurry.cancel();
        let mut seen = Vec::new();
        for size in [2, 2, 1] {
            let batch = next(&buffer, Duration::from_secs(60), &hurry)
                .await
                .unwrap();
            assert_eq!(batch.len(), size);
            seen.extend(ids(&batch).into_iter().map(str::to_owned));
            buffer.written(batch);
        }
        assert_eq!(seen, ["0", "1", "2", "3", "4"]);
        assert_eq!(pending.load(Ordering::Acquire), 0);
        // Taken events make room again; the written batch is filled anew.
        assert!(buffer.push(Cow::Owned(numbered(6))).is_ok());
    }

    #[tokio::test]
    async fn json_batches_hold_the_lines_the_records_would_render_to() {
        let buffer = Buffer::<JsonBatch>::new(10, 10, Arc::new(AtomicUsize::new(0)));
        let events = [numbered(1), numbered(2), numbered(3)];
        // Lent: a batch of lines renders them and keeps no record.
        for event in &events {
            assert!(buffer.push(Cow::Borrowed(event)).is_ok());
        }
        buffer.close();
        let batch = next(&buffer, Duration::from_secs(60), &CancellationToken::new())
            .await
            .unwrap();
        let rendered = AuditBatch::new(&events);
        assert_eq!(batch.lines, rendered.serialised().lines);
        assert_eq!(batch.as_audit_batch().len(), 3);
        assert!(batch.as_audit_batch().records().is_none());
    }

    #[tokio::test]
    async fn a_batch_waits_at_most_its_wait_for_more_events() {
        let buffer = Buffer::<Vec<AuditEvent>>::new(10, 10, Arc::new(AtomicUsize::new(0)));
        assert!(buffer.push(Cow::Owned(numbered(1))).is_ok());
        let started = std::time::Instant::now();
        let batch = next(
            &buffer,
            Duration::from_millis(50),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
        assert!(started.elapsed() >= Duration::from_millis(50));
        assert_eq!(ids(&batch), ["1"]);
    }

    #[tokio::test]
    async fn the_writer_is_woken_by_a_first_event_and_by_a_full_batch() {
        let buffer = Arc::new(Buffer::<Vec<AuditEvent>>::new(
            10,
            3,
            Arc::new(AtomicUsize::new(0)),
        ));
        let filler = buffer.clone();
        tokio::spawn(async move {
            for number in 0..3 {
                tokio::time::sleep(Duration::from_millis(10)).await;
                assert!(filler.push(Cow::Owned(numbered(number))).is_ok());
            }
        });
        // A minute's wait, cut short by the batch filling up.
        let batch = next(&buffer, Duration::from_secs(60), &CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(ids(&batch), ["0", "1", "2"]);
    }

    #[tokio::test]
    async fn a_closed_buffer_gives_what_is_left_at_once_then_nothing() {
        let buffer = Buffer::<Vec<AuditEvent>>::new(10, 10, Arc::new(AtomicUsize::new(0)));
        assert!(buffer.push(Cow::Owned(numbered(1))).is_ok());
        buffer.close();
        let hurry = CancellationToken::new();
        let batch = next(&buffer, Duration::from_secs(60), &hurry)
            .await
            .unwrap();
        assert_eq!(ids(&batch), ["1"]);
        assert!(
            next(&buffer, Duration::from_secs(60), &hurry)
                .await
                .is_none()
        );
    }
}
