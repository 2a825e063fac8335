//! The range every manifest value may take. A value outside its range is a
//! problem at completion, so `wasmgate check` refuses what `run` could not
//! live with: a timeout so long that adding it to the clock overflows, a
//! count that no semaphore or queue can hold, a file that never ends. The
//! ranges are generous: they bound the absurd, not the unusual. The table in
//! docs/security.md ("Manifest values") lists them; keep the two in step.

use std::ops::RangeInclusive;
use std::time::Duration;

const MILLISECOND: Duration = Duration::from_millis(1);
const SECOND: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(60 * 60);
const DAY: Duration = Duration::from_secs(24 * 60 * 60);

pub(crate) const KIB: u64 = 1024;
pub(crate) const MIB: u64 = 1024 * KIB;
pub(crate) const GIB: u64 = 1024 * MIB;
pub(crate) const TIB: u64 = 1024 * GIB;

// ---- durations ----

pub(crate) const REQUEST_TIMEOUT: RangeInclusive<Duration> = MILLISECOND..=DAY;
pub(crate) const MIN_REQUEST_TIMEOUT: RangeInclusive<Duration> = SECOND..=DAY;
pub(crate) const READ_HEADER_TIMEOUT: RangeInclusive<Duration> = MILLISECOND..=HOUR;
pub(crate) const IDLE_TIMEOUT: RangeInclusive<Duration> = MILLISECOND..=DAY;
pub(crate) const SHUTDOWN_DELAY: RangeInclusive<Duration> = Duration::ZERO..=HOUR;
pub(crate) const SHUTDOWN_TIMEOUT: RangeInclusive<Duration> = Duration::ZERO..=DAY;
pub(crate) const HOOK_TIMEOUT: RangeInclusive<Duration> = MILLISECOND..=HOUR;
pub(crate) const UPSTREAM_TIMEOUT: RangeInclusive<Duration> = MILLISECOND..=DAY;
/// A filter runs inside a request: minutes are already far more than any
/// request should wait for one decision.
pub(crate) const FILTER_TIMEOUT: RangeInclusive<Duration> =
    MILLISECOND..=Duration::from_secs(10 * 60);
/// A decision cache's TTL: kube's are minutes; a day bounds the absurd.
pub(crate) const CACHE_TTL: RangeInclusive<Duration> = Duration::ZERO..=DAY;
/// How long an audit event may wait for its batch to fill (kube's webhook
/// default is 30s); a minute bounds the absurd.
pub(crate) const AUDIT_BATCH_WAIT: RangeInclusive<Duration> = Duration::ZERO..=MINUTE;

// ---- counts ----

/// `0` means unlimited; beyond a million, a limit limits nothing.
pub(crate) const REQUESTS_IN_FLIGHT: RangeInclusive<i64> = 0..=1_000_000;
/// The engine's instance pool holds this many instances.
pub(crate) const FILTER_INSTANCES: RangeInclusive<i64> = 1..=super::MAX_FILTER_INSTANCES as i64;
/// A share of requests, in kube's tracing terms: at least one in a million.
pub(crate) const SAMPLE_RATE_PER_MILLION: RangeInclusive<i64> = 1..=1_000_000;
/// kube's default batch buffer is 10 000 events.
pub(crate) const AUDIT_QUEUE_SIZE: RangeInclusive<i64> = 1..=1_000_000;

// ---- [flow_control] (kube's ranges, `pkg/apis/flowcontrol/validation`) ----

pub(crate) const CONCURRENCY_SHARES: RangeInclusive<i64> = 0..=1_000_000;
pub(crate) const PERCENT: RangeInclusive<i64> = 0..=100;
/// Borrowing may multiply a level's nominal seats 10 000 times at most.
pub(crate) const BORROWING_PERCENT: RangeInclusive<i64> = 0..=1_000_000;
/// Queues cost memory whether they are used or not.
/// kube's `maxSamplingRatePerMillion`: every request.
pub(crate) const SAMPLING_RATE_PER_MILLION: RangeInclusive<i64> = 0..=1_000_000;
pub(crate) const QUEUES: RangeInclusive<i64> = 1..=65_536;
/// The largest hand: more cards than this need more than the 60 bits of
/// entropy kube allows a deal (`util/shufflesharding/shufflesharding.go`).
pub(crate) const MAX_HAND: usize = 15;
/// A larger hand needs more than the 60 bits of hash a deal may use.
pub(crate) const HAND_SIZE: RangeInclusive<i64> = 1..=MAX_HAND as i64;
pub(crate) const QUEUE_LENGTH_LIMIT: RangeInclusive<i64> = 1..=100_000;
pub(crate) const MATCHING_PRECEDENCE: RangeInclusive<i64> = 1..=10_000;
/// kube's webhook batches hold at most 400 events by default.
pub(crate) const AUDIT_BATCH_SIZE: RangeInclusive<i64> = 1..=100_000;
/// One filter's decision cache: each entry is a key and an answer in memory.
pub(crate) const CACHE_ENTRIES: RangeInclusive<i64> = 1..=10_000_000;

// ---- sizes ----

pub(crate) const MAX_REQUEST_BODY: RangeInclusive<u64> = 1..=16 * GIB;
/// Every connection may buffer this much while it reads headers.
pub(crate) const MAX_HEADER_BYTES: RangeInclusive<u64> = KIB..=16 * MIB;
/// From one Wasm page to what the engine's instance pool holds.
pub(crate) const FILTER_MEMORY: RangeInclusive<u64> = 64 * KIB..=super::stages::MAX_FILTER_MEMORY;
/// All filters' instances together (`[limits] filter_memory`).
pub(crate) const FILTER_MEMORY_TOTAL: RangeInclusive<u64> = MIB..=super::MAX_FILTER_MEMORY_TOTAL;

// ---- files ----

pub(crate) const MANIFEST_FILE: u64 = 16 * MIB;
/// A certificate, key or CA bundle (a system CA bundle is a few hundred KiB).
pub(crate) const PEM_FILE: u64 = 16 * MIB;
/// A bearer token file (`bearer_token_file`): a service account token is
/// about 1 KiB.
pub(crate) const TOKEN_FILE: u64 = 64 * KIB;
/// A request-header name or prefix (`identity_headers`).
pub(crate) const IDENTITY_HEADER_NAME: usize = 256;
/// A Wasm component (an interpreter built in, as the Python filters have,
/// is tens of MiB).
pub(crate) const COMPONENT_FILE: u64 = 256 * MIB;
/// A compiled component in the disk cache (native code is a few times its
/// component's size).
pub(crate) const COMPILED_COMPONENT_FILE: u64 = 4 * COMPONENT_FILE;

/// `16MiB`, `64KiB`, `1GiB`, `1TiB`, or a number of bytes: a size as the manifest
/// writes it.
pub(crate) fn show_size(bytes: u64) -> String {
    for (unit, size) in [("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)] {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{}{unit}", bytes / size);
        }
    }
    bytes.to_string()
}

/// `24h`, `10m`, `1s`, `1ms`: a duration as the manifest writes it.
pub(crate) fn show_duration(duration: Duration) -> String {
    let (seconds, millis) = (duration.as_secs(), duration.subsec_millis());
    if millis != 0 || seconds == 0 {
        return format!("{}ms", duration.as_millis());
    }
    for (unit, size) in [("h", HOUR), ("m", MINUTE)] {
        let size = size.as_secs();
        if seconds.is_multiple_of(size) {
            return format!("{}{unit}", seconds / size);
        }
    }
    format!("{seconds}s")
}

/// Why `value` is outside `range`, in the manifest's words; `None` inside.
pub(crate) fn outside<T: PartialOrd + Copy>(
    value: T,
    range: &RangeInclusive<T>,
    show: impl Fn(T) -> String,
) -> Option<String> {
    if value < *range.start() {
        Some(format!("must be at least {}", show(*range.start())))
    } else if value > *range.end() {
        Some(format!("must be at most {}", show(*range.end())))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations_read_as_the_manifest_writes_them() {
        assert_eq!(show_size(16 * MIB), "16MiB");
        assert_eq!(show_size(64 * KIB), "64KiB");
        assert_eq!(show_size(1536), "1536");
        assert_eq!(show_size(0), "0");
        assert_eq!(show_duration(DAY), "24h");
        assert_eq!(show_duration(Duration::from_secs(600)), "10m");
        assert_eq!(show_duration(Duration::from_secs(90)), "90s");
        assert_eq!(show_duration(MILLISECOND), "1ms");
        assert_eq!(show_duration(Duration::ZERO), "0ms");
    }

    #[test]
    fn every_default_is_inside_its_range() {
        let limits = super::super::Limits::default();
        assert!(REQUEST_TIMEOUT.contains(&limits.request_timeout));
        assert!(MIN_REQUEST_TIMEOUT.contains(&limits.min_request_timeout));
        assert!(READ_HEADER_TIMEOUT.contains(&limits.read_header_timeout));
        assert!(IDLE_TIMEOUT.contains(&limits.idle_timeout));
        assert!(SHUTDOWN_DELAY.contains(&limits.shutdown_delay));
        assert!(SHUTDOWN_TIMEOUT.contains(&limits.shutdown_timeout));
        assert!(MAX_REQUEST_BODY.contains(&limits.max_request_body));
        assert!(MAX_HEADER_BYTES.contains(&(limits.max_header_bytes as u64)));
        for count in [
            limits.max_requests_in_flight,
            limits.max_mutating_requests_in_flight,
        ] {
            assert!(REQUESTS_IN_FLIGHT.contains(&(count as i64)));
        }
        use super::super::stages::{
            CacheSpec, DEFAULT_AUDIT_BATCH_SIZE, DEFAULT_AUDIT_BATCH_WAIT, DEFAULT_AUDIT_QUEUE,
            DEFAULT_FILTER_MEMORY, DEFAULT_FILTER_TIMEOUT,
        };
        assert!(AUDIT_QUEUE_SIZE.contains(&(DEFAULT_AUDIT_QUEUE as i64)));
        assert!(AUDIT_BATCH_SIZE.contains(&(DEFAULT_AUDIT_BATCH_SIZE as i64)));
        assert!(AUDIT_BATCH_WAIT.contains(&DEFAULT_AUDIT_BATCH_WAIT));
        for cache in [CacheSpec::AUTHENTICATION, CacheSpec::AUTHORIZATION] {
            assert!(CACHE_TTL.contains(&cache.ttl) && CACHE_TTL.contains(&cache.negative_ttl));
            assert!(CACHE_ENTRIES.contains(&(cache.max_entries as i64)));
        }
        assert!(FILTER_MEMORY.contains(&DEFAULT_FILTER_MEMORY));
        assert!(FILTER_TIMEOUT.contains(&DEFAULT_FILTER_TIMEOUT));
    }
}
