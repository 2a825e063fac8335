//! The request-header deadline of a connection, kept as Go's `http.Server`
//! keeps `ReadHeaderTimeout` beside `IdleTimeout`: the first request's head
//! must be read within `read_header_timeout` of the connection's start;
//! between requests a keep-alive connection waits for the next request
//! under the idle timeout alone (the listener's idle timer), and from the
//! first byte of that request its head must be complete within
//! `read_header_timeout`. Past the deadline the connection's reads fail and
//! it is closed without an answer, as Go closes it: a slow client sending
//! its headers byte by byte (slowloris) holds a connection no longer.
//!
//! hyper's own `header_read_timeout` is not used: it starts as soon as a
//! response is done, so an idle keep-alive connection was closed at the
//! header timeout, not the idle timeout. A connection whose requests are
//! HTTP/2 has no header deadline once its first request arrived: a stream's
//! headers come in one frame, and pings and window updates arrive between
//! requests; the idle timeout bounds it.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// Where a connection is in its request cycle, shared by its reads (the
/// [`HeaderDeadlineIo`]) and its requests (the listener's service). One
/// atomic: nanoseconds from `opened` to the deadline of the head being
/// read, or one of the markers below.
pub(crate) struct HeaderClock {
    opened: Instant,
    timeout: Duration,
    state: AtomicU64,
}

/// HTTP/2 or upgraded: never a header deadline again.
const OFF: u64 = u64::MAX;
/// A request is being served: its body may take as long as the request may.
const SERVING: u64 = u64::MAX - 1;
/// Idle between requests: the next byte starts the next head's deadline.
const WAITING: u64 = u64::MAX - 2;

impl HeaderClock {
    /// A clock for a connection that starts now: the first head is due
    /// within `timeout`.
    pub(crate) fn new(timeout: Duration) -> Self {
        HeaderClock {
            opened: Instant::now(),
            timeout,
            state: AtomicU64::new(below_markers(timeout)),
        }
    }

    /// A request's head has been read.
    pub(crate) fn request_started(&self, version: http::Version) {
        if version >= http::Version::HTTP_2 {
            self.stop();
        } else {
            // Never out of OFF: compare first.
            let _ = self
                .state
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |state| {
                    (state != OFF).then_some(SERVING)
                });
        }
    }

    /// The connection has no request left in flight.
    pub(crate) fn requests_done(&self) {
        let _ = self
            .state
            .compare_exchange(SERVING, WAITING, Ordering::AcqRel, Ordering::Acquire);
    }

    /// No header deadline from now on (HTTP/2, or the connection upgraded).
    pub(crate) fn stop(&self) {
        self.state.store(OFF, Ordering::Release);
    }

    fn bytes_arrived(&self) {
        let _ = self.state.compare_exchange(
            WAITING,
            self.due_from_now(),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    fn deadline(&self) -> Option<Instant> {
        match self.state.load(Ordering::Acquire) {
            OFF | SERVING | WAITING => None,
            nanos => Some(self.opened + Duration::from_nanos(nanos)),
        }
    }

    /// Nanoseconds from `opened` to now plus the timeout.
    fn due_from_now(&self) -> u64 {
        below_markers(self.opened.elapsed().saturating_add(self.timeout))
    }
}

/// `duration` in nanoseconds, kept below the markers (a deadline centuries
/// away is as good as none).
fn below_markers(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).map_or(WAITING - 1, |nanos| nanos.min(WAITING - 1))
}

/// A connection's transport with the header deadline on its reads: a read
/// past the deadline fails with `TimedOut`, and a read waiting for bytes
/// wakes at the deadline to fail. Writes pass through untouched.
pub(crate) struct HeaderDeadlineIo<IO> {
    io: IO,
    clock: std::sync::Arc<HeaderClock>,
    /// Re-armed whenever the deadline moves; it only ever wakes the
    /// connection, which then reads and finds out.
    timer: Option<Pin<Box<Sleep>>>,
}

impl<IO> HeaderDeadlineIo<IO> {
    pub(crate) fn new(io: IO, clock: std::sync::Arc<HeaderClock>) -> Self {
        HeaderDeadlineIo {
            io,
            clock,
            timer: None,
        }
    }

    /// True when `deadline` has passed; otherwise this task wakes then.
    fn passed(&mut self, deadline: Instant, cx: &mut Context<'_>) -> bool {
        let deadline = tokio::time::Instant::from_std(deadline);
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if timer.deadline() != deadline {
            timer.as_mut().reset(deadline);
        }
        timer.as_mut().poll(cx).is_ready()
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for HeaderDeadlineIo<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(deadline) = this.clock.deadline()
            && this.passed(deadline, cx)
        {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the request's headers were not read within read_header_timeout",
            )));
        }
        let filled = buf.filled().len();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        if buf.filled().len() > filled {
            this.clock.bytes_arrived();
        }
        polled
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for HeaderDeadlineIo<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
