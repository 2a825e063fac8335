//! The epoch ticker: the thread that advances the engine's epoch every
//! [`EPOCH_TICK`]. Each call into a filter sets its epoch deadline one tick
//! ahead (`filter.rs`), so the tick is how a filter's `timeout` fires and
//! how a long call yields to other requests.
//!
//! It ticks only while filters run. Each call holds a [`Running`] for as
//! long as guest code may run (instantiation included); once no call has
//! begun or been running for [`IDLE`], the ticker parks, and the next call
//! wakes it. An idle gateway then wakes no thread at every tick, and a busy
//! one, whose calls come microseconds apart, never parks it between two:
//! the wake-up stays off the request path.
//!
//! A tick costs more than its thread's 8 µs: the worker it interrupts
//! (a timer's interrupt, two context switches, on a virtual machine the
//! hypervisor too) runs on with its caches refilled, 55–80 µs of a busy
//! process's CPU a tick in all, measured (bench/README.md, "The epoch
//! ticker's tick"). At 1 ms that was 3.4–4.7 µs a request of a chain
//! calling a filter on every request; at 10 ms it is a tenth. The price:
//! a long call holds its worker for up to 10 ms between yields, and a
//! timeout fires up to 10 ms late; 10 ms is also the slice Go's scheduler,
//! kube's runtime, lets a goroutine run before it preempts it
//! (`forcePreemptNS` in Go's `src/runtime/proc.go`).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::Duration;

use wasmtime::Engine;

/// How often the epoch advances: the resolution of filter timeouts, and how
/// often a long-running filter yields to other requests.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(10);

/// How long the ticker goes on with no call before it parks.
const IDLE: Duration = Duration::from_millis(100);

/// [`IDLE`] in ticks, so that a change of [`EPOCH_TICK`] keeps it.
const IDLE_TICKS: u32 = (IDLE.as_millis() / EPOCH_TICK.as_millis()) as u32;

/// The ticker of one engine, shared by the filters loaded on it.
#[derive(Debug, Default)]
pub(crate) struct EpochTicker {
    /// Calls that may be running guest code now.
    running: AtomicUsize,
    /// Calls begun since start: tells the ticker calls came between two of
    /// its ticks even when none is running as it looks.
    begun: AtomicU64,
    /// Set while the ticker is parked (or about to be): a call that sees it
    /// wakes the ticker.
    parked: AtomicBool,
    /// The ticker's thread, once started.
    thread: OnceLock<Thread>,
    /// Ticks so far.
    ticks: AtomicU64,
}

/// A call in progress: the epoch advances while one exists.
pub(crate) struct Running<'a>(&'a EpochTicker);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

impl EpochTicker {
    /// Starts the ticker of `engine`; it ends when the engine is dropped.
    pub(crate) fn start(engine: &Engine) -> Arc<EpochTicker> {
        let ticker = Arc::new(EpochTicker::default());
        let (engine, shared) = (engine.weak(), ticker.clone());
        let spawned = std::thread::Builder::new()
            .name("wasmgate-epoch".into())
            .spawn(move || shared.tick_while(|| engine.upgrade().map(|e| e.increment_epoch())));
        match spawned {
            Ok(handle) => {
                // Set before any filter is loaded on this engine, so no call
                // can miss it; a call that finds it unset has nothing to wake.
                let _ = ticker.thread.set(handle.thread().clone());
            }
            Err(error) => {
                tracing::error!(%error, "cannot start the epoch ticker: filter timeouts will not fire")
            }
        }
        ticker
    }

    /// Marks a call that may run guest code until the guard is dropped,
    /// waking the ticker if it is parked.
    pub(crate) fn running(&self) -> Running<'_> {
        self.running.fetch_add(1, Ordering::SeqCst);
        self.begun.fetch_add(1, Ordering::SeqCst);
        if self.parked.load(Ordering::SeqCst)
            && let Some(thread) = self.thread.get()
        {
            thread.unpark();
        }
        Running(self)
    }

    /// The ticker's loop: `advance` every tick until it returns None (the
    /// engine is gone), parked whenever no call came for [`IDLE_TICKS`].
    fn tick_while(&self, advance: impl Fn() -> Option<()>) {
        let mut idle = 0;
        let mut seen = self.begun.load(Ordering::SeqCst);
        loop {
            std::thread::sleep(EPOCH_TICK);
            if advance().is_none() {
                return;
            }
            self.ticks.fetch_add(1, Ordering::Relaxed);
            let begun = self.begun.load(Ordering::SeqCst);
            if begun != seen || self.running.load(Ordering::SeqCst) > 0 {
                (idle, seen) = (0, begun);
                continue;
            }
            idle += 1;
            if idle >= IDLE_TICKS {
                self.park_until_a_call(seen);
                idle = 0;
            }
        }
    }

    /// Parks until a call begins after `seen` calls. `parked` is set before
    /// the last look: a call either began before it (and is seen here) or
    /// finds `parked` set and unparks, which the park below then returns
    /// for, even if it comes first.
    fn park_until_a_call(&self, seen: u64) {
        self.parked.store(true, Ordering::SeqCst);
        while self.begun.load(Ordering::SeqCst) == seen && self.running.load(Ordering::SeqCst) == 0
        {
            std::thread::park();
        }
        self.parked.store(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    /// The ticks counted within a bounded wait for `done`.
    fn wait_for(ticker: &EpochTicker, done: impl Fn(u64) -> bool) -> bool {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(5) {
            if done(ticker.ticks.load(Ordering::Relaxed)) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    #[test]
    fn the_ticker_ticks_while_a_call_runs_parks_when_idle_and_wakes_for_the_next_call() {
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(true);
        let engine = Engine::new(&config).expect("an engine");
        let ticker = EpochTicker::start(&engine);

        // A call that runs long keeps it ticking past the idle ticks.
        let call = ticker.running();
        let from = ticker.ticks.load(Ordering::Relaxed);
        assert!(wait_for(&ticker, |ticks| ticks > from + u64::from(IDLE_TICKS) * 2));
        assert!(!ticker.parked.load(Ordering::SeqCst));
        drop(call);

        // With no call, it parks, and stops ticking.
        assert!(wait_for(&ticker, |_| ticker.parked.load(Ordering::SeqCst)));
        let parked_at = ticker.ticks.load(Ordering::Relaxed);
        std::thread::sleep(EPOCH_TICK * 50);
        assert_eq!(ticker.ticks.load(Ordering::Relaxed), parked_at);

        // The next call wakes it.
        let call = ticker.running();
        assert!(wait_for(&ticker, |ticks| ticks > parked_at + 5));
        drop(call);
    }
}
