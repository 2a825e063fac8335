//! `[limits]`: server-wide limits and timeouts, each bounded
//! ([`super::bounds`]), kube-apiserver's defaults where kube has the flag.

use std::time::Duration;

use super::bounds;
use super::complete::Completer;
use super::manifest as m;

/// Server-wide limits and timeouts (kube's flags of the same names:
/// `staging/src/k8s.io/apiserver/pkg/server/options/server_run_options.go`).
#[derive(Debug, Clone)]
pub struct Limits {
    /// Read-only requests in flight at once; 0 means unlimited.
    pub max_requests_in_flight: usize,
    /// Mutating requests in flight at once; 0 means unlimited.
    pub max_mutating_requests_in_flight: usize,
    /// How long a request may take before the gateway answers it with a 504.
    pub request_timeout: Duration,
    /// kube's `--min-request-timeout`: a watch without `timeoutSeconds`
    /// lasts a random time between this and twice this.
    pub(crate) min_request_timeout: Duration,
    pub(crate) max_request_body: u64,
    pub(crate) max_header_bytes: usize,
    pub(crate) read_header_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) shutdown_delay: Duration,
    pub(crate) shutdown_timeout: Duration,
    /// Wasm instances alive at once (in calls and idle in pools), at most
    /// [`MAX_FILTER_INSTANCES`]; at least the two in-flight limits' sum
    /// when the manifest has filters, so every request max-in-flight admits
    /// can run the chain.
    pub filter_instances: usize,
    /// Total linear memory of all live instances, in bytes.
    pub filter_memory: u64,
}

/// The engine's instance pool holds this many component instances.
pub(crate) const MAX_FILTER_INSTANCES: usize = 1000;

/// The default `filter_memory`: on a machine of 24 GiB and 2 cores, room for
/// the default 600 in-flight requests each running a filter of about 1 MiB
/// (the shipped Rust filters) three times over (filters with a larger
/// runtime, JavaScript or Python, proportionally fewer at once), and a
/// bound on the memory filters keep after a burst.
pub(crate) const DEFAULT_FILTER_MEMORY: u64 = 2 << 30;

/// kube-apiserver's request body limit, 3 MiB (`--max-request-body-bytes`'s
/// default, as its `MaxRequestBodyBytes`).
pub(crate) const DEFAULT_MAX_REQUEST_BODY: u64 = 3 * 1024 * 1024;

/// The largest `filter_memory`.
pub(crate) const MAX_FILTER_MEMORY_TOTAL: u64 = 1 << 40;

impl Default for Limits {
    /// kube-apiserver's defaults.
    fn default() -> Self {
        Limits {
            max_requests_in_flight: 400,
            max_mutating_requests_in_flight: 200,
            request_timeout: Duration::from_secs(60),
            min_request_timeout: Duration::from_secs(1800),
            max_request_body: DEFAULT_MAX_REQUEST_BODY,
            max_header_bytes: 1024 * 1024,
            read_header_timeout: Duration::from_secs(32),
            idle_timeout: Duration::from_secs(90),
            shutdown_delay: Duration::ZERO,
            shutdown_timeout: Duration::from_secs(60),
            filter_instances: MAX_FILTER_INSTANCES,
            filter_memory: DEFAULT_FILTER_MEMORY,
        }
    }
}

impl Completer<'_> {
    pub(super) fn limits(&mut self, limits: &m::Limits) -> Limits {
        let defaults = Limits::default();
        let request_timeout = self.duration(
            &limits.request_timeout,
            "limits.request_timeout",
            defaults.request_timeout,
            bounds::REQUEST_TIMEOUT,
        );
        Limits {
            max_requests_in_flight: self.count(
                &limits.max_requests_in_flight,
                "limits.max_requests_in_flight",
                defaults.max_requests_in_flight,
                bounds::REQUESTS_IN_FLIGHT,
            ),
            max_mutating_requests_in_flight: self.count(
                &limits.max_mutating_requests_in_flight,
                "limits.max_mutating_requests_in_flight",
                defaults.max_mutating_requests_in_flight,
                bounds::REQUESTS_IN_FLIGHT,
            ),
            request_timeout,
            min_request_timeout: self.duration(
                &limits.min_request_timeout,
                "limits.min_request_timeout",
                defaults.min_request_timeout,
                bounds::MIN_REQUEST_TIMEOUT,
            ),
            max_request_body: self.size(
                &limits.max_request_body,
                "limits.max_request_body",
                defaults.max_request_body,
                bounds::MAX_REQUEST_BODY,
            ),
            max_header_bytes: self
                .size(
                    &limits.max_header_bytes,
                    "limits.max_header_bytes",
                    defaults.max_header_bytes as u64,
                    bounds::MAX_HEADER_BYTES,
                )
                .try_into()
                .unwrap_or(defaults.max_header_bytes),
            read_header_timeout: self.duration(
                &limits.read_header_timeout,
                "limits.read_header_timeout",
                defaults.read_header_timeout,
                bounds::READ_HEADER_TIMEOUT,
            ),
            idle_timeout: self.duration(
                &limits.idle_timeout,
                "limits.idle_timeout",
                defaults.idle_timeout,
                bounds::IDLE_TIMEOUT,
            ),
            shutdown_delay: self.duration(
                &limits.shutdown_delay,
                "limits.shutdown_delay",
                defaults.shutdown_delay,
                bounds::SHUTDOWN_DELAY,
            ),
            // kube drains for as long as a request may take.
            shutdown_timeout: self.duration(
                &limits.shutdown_timeout,
                "limits.shutdown_timeout",
                request_timeout,
                bounds::SHUTDOWN_TIMEOUT,
            ),
            filter_instances: self.count(
                &limits.filter_instances,
                "limits.filter_instances",
                defaults.filter_instances,
                bounds::FILTER_INSTANCES,
            ),
            filter_memory: self.size(
                &limits.filter_memory,
                "limits.filter_memory",
                defaults.filter_memory,
                bounds::FILTER_MEMORY_TOTAL,
            ),
        }
    }
}
