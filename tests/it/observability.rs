//! Observability (issue 15): kube's request metrics and the gateway's own
//! ([`metrics`]), the stages' metrics under kube's names ([`stages`]), the
//! access log ([`access_log`]), a real Prometheus scraping the gateway with
//! the docs' config, rules and dashboard ([`prometheus`]), and the live
//! status page in a real headless Chromium ([`status_page`]). Each test
//! runs the gateway as its own process, so its metrics count nothing but
//! the test's traffic.

mod access_log;
mod metrics;
mod prometheus;
mod stages;
mod status_page;

use crate::support::metric;

/// The value of the one sample named `name` with exactly `labels`, written
/// as the exposition writes them, in its order.
fn sample(text: &str, name: &str, labels: &str) -> Option<f64> {
    metric(text, &format!("{name}{{{labels}}}"))
}
