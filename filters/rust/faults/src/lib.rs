//! `faults`: the misbehaviours the three fault filters share (`fault-authz`,
//! `fault-authn` and `fault-admission` depend on this crate): each filter reads
//! a word from the request and either answers with it or misbehaves as the
//! word says. Everything here runs inside the component, so a trap, an
//! endless loop or memory exhaustion is the guest's own doing, exactly what
//! the gateway's budgets must contain.

use std::time::{Duration, Instant};

/// The size of each allocation `alloc` makes.
pub const CHUNK: usize = 1 << 20;

/// What a request asks the filter to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault<'a> {
    /// Answer; the word (`allow`, `deny`, ...) is for the filter to read.
    Answer(&'a str),
    /// `error`: the filter's own error outcome.
    Error,
    /// `trap`: a panic, which is a trap (the filters build with `panic = "abort"`).
    Trap,
    /// `loop`: an endless loop that never returns.
    Loop,
    /// `alloc`: allocate and touch memory until allocation fails.
    Alloc,
    /// Do something costly, then answer as if asked to allow.
    Burden(Burden),
}

/// What a `Fault::Burden` costs the filter before it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Burden {
    /// `slow-<ms>`: busy-wait that long on the monotonic clock.
    Slow(u64),
    /// `work-<n>`: `n` million rounds of arithmetic, a fixed amount of
    /// computation whose wall time grows when calls share a thread (a
    /// `slow` call ends on time however little of the thread it gets).
    Work(u64),
    /// `leak-<kib>`: allocate that many KiB, touch them, and never free
    /// them: a pooled instance's memory grows with every such call.
    Leak(usize),
    /// `sleep-<ms>`: sleep that long (`std::thread::sleep`, a WASI
    /// monotonic-clock pollable the host waits on): the guest runs no code
    /// meanwhile, so only a deadline the host keeps outside the guest
    /// stops it.
    Sleep(u64),
}

/// What `word` asks for.
pub fn parse(word: &str) -> Fault<'_> {
    match word {
        "error" => Fault::Error,
        "trap" => Fault::Trap,
        "loop" => Fault::Loop,
        "alloc" => Fault::Alloc,
        _ => {
            let number = |prefix: &str| word.strip_prefix(prefix).and_then(|n| n.parse().ok());
            if let Some(ms) = number("slow-") {
                Fault::Burden(Burden::Slow(ms))
            } else if let Some(millions) = number("work-") {
                Fault::Burden(Burden::Work(millions))
            } else if let Some(kib) = number("leak-") {
                Fault::Burden(Burden::Leak(usize::try_from(kib).unwrap_or(usize::MAX)))
            } else if let Some(ms) = number("sleep-") {
                Fault::Burden(Burden::Sleep(ms))
            } else {
                Fault::Answer(word)
            }
        }
    }
}

/// `trap`: panics, which aborts, which is a Wasm trap.
pub fn trap(filter: &str) -> ! {
    panic!("{filter}: trap requested");
}

/// `loop`: spins forever; only the host's deadline stops it.
pub fn spin_forever() -> ! {
    let mut turns: u64 = 0;
    loop {
        turns = std::hint::black_box(turns.wrapping_add(1));
    }
}

/// `alloc`: keeps allocating 1 MiB chunks and writing one byte per page of
/// each, so the memory is really used, until an allocation fails (which
/// aborts: a trap).
pub fn exhaust_memory() -> ! {
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut chunk = vec![0u8; CHUNK];
        for byte in chunk.iter_mut().step_by(4096) {
            *byte = 1;
        }
        chunks.push(std::hint::black_box(chunk));
    }
}

/// Bears a `Fault::Burden`.
pub fn bear(burden: Burden) {
    match burden {
        Burden::Slow(millis) => busy_wait(millis),
        Burden::Work(millions) => work(millions),
        Burden::Leak(kib) => leak(kib),
        Burden::Sleep(millis) => std::thread::sleep(Duration::from_millis(millis)),
    }
}

/// `leak-<kib>`: allocates `kib` KiB, writes one byte per page so the
/// memory is really used, and forgets it.
fn leak(kib: usize) {
    let mut chunk = vec![0u8; kib.saturating_mul(1024)];
    for byte in chunk.iter_mut().step_by(4096) {
        *byte = 1;
    }
    std::mem::forget(std::hint::black_box(chunk));
}

/// `work-<n>`: `n` million rounds of a multiply-and-add the optimiser
/// cannot fold away.
fn work(millions: u64) {
    let mut state = std::hint::black_box(1u64);
    for round in 0..millions.saturating_mul(1_000_000) {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(round);
    }
    std::hint::black_box(state);
}

/// `slow-<ms>`: busy-waits (no sleeping: the guest stays busy) on the WASI
/// monotonic clock, which is what `Instant` reads on wasm32-wasip2.
pub fn busy_wait(millis: u64) {
    let until = Instant::now() + Duration::from_millis(millis);
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_name_faults() {
        assert_eq!(parse("error"), Fault::Error);
        assert_eq!(parse("trap"), Fault::Trap);
        assert_eq!(parse("loop"), Fault::Loop);
        assert_eq!(parse("alloc"), Fault::Alloc);
        assert_eq!(parse("slow-250"), Fault::Burden(Burden::Slow(250)));
        assert_eq!(parse("work-40"), Fault::Burden(Burden::Work(40)));
        assert_eq!(parse("leak-64"), Fault::Burden(Burden::Leak(64)));
        assert_eq!(parse("sleep-5000"), Fault::Burden(Burden::Sleep(5000)));
        assert_eq!(parse("leak-x"), Fault::Answer("leak-x"));
        assert_eq!(parse("slow-x"), Fault::Answer("slow-x"));
        assert_eq!(parse("allow"), Fault::Answer("allow"));
        assert_eq!(parse(""), Fault::Answer(""));
    }

    #[test]
    fn busy_wait_waits() {
        let started = Instant::now();
        busy_wait(20);
        assert!(started.elapsed() >= Duration::from_millis(20));
    }
}
