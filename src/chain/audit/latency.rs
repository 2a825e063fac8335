//! kube's latency annotations (`writeLatencyToAnnotation` in
//! `staging/src/k8s.io/apiserver/pkg/endpoints/filters/audit.go`, the keys
//! `AuditAnnotationsFromLatencyTrackers` writes in
//! `staging/src/k8s.io/apiserver/pkg/endpoints/request/webhook_duration.go`):
//! a request that took longer than [`THRESHOLD`] from its arrival to its
//! ResponseComplete gets, in that event, the time each of its layers took
//! (those that took any) and the total, as Go writes a duration.
//!
//! The layers are the gateway's that have kube's counterpart: the
//! authentication and authorization unions, the wait in a flow-control
//! queue, and the mutating and validating admission filters, under kube's
//! keys for its admission webhooks (the filters stand where kube's webhooks
//! do). kube's storage, serialization and response-write layers are the
//! upstream's here, so they are not written.

use std::time::Duration;

use crate::audit_event::Annotations;

/// kube writes the latencies only for a request slower than this.
const THRESHOLD: Duration = Duration::from_millis(500);

/// A layer of the chain whose time the annotations give.
#[derive(Clone, Copy)]
pub(crate) enum Layer {
    Authentication,
    ApfQueueWait,
    Authorization,
    MutatingAdmission,
    ValidatingAdmission,
}

impl Layer {
    const COUNT: usize = 5;

    fn key(self) -> &'static str {
        match self {
            Layer::Authentication => "apiserver.latency.k8s.io/authentication",
            Layer::ApfQueueWait => "apiserver.latency.k8s.io/apf-queue-wait",
            Layer::Authorization => "apiserver.latency.k8s.io/authorization",
            Layer::MutatingAdmission => "apiserver.latency.k8s.io/mutating-webhook",
            Layer::ValidatingAdmission => "apiserver.latency.k8s.io/validating-webhook",
        }
    }

    const ALL: [Layer; Layer::COUNT] = [
        Layer::Authentication,
        Layer::ApfQueueWait,
        Layer::Authorization,
        Layer::MutatingAdmission,
        Layer::ValidatingAdmission,
    ];
}

/// The time each layer has taken so far (a layer passed twice, as
/// admission's phases may be, adds up, as kube's trackers do).
#[derive(Default)]
pub(super) struct Latencies([Duration; Layer::COUNT]);

impl Latencies {
    pub(super) fn add(&mut self, layer: Layer, took: Duration) {
        self.0[layer as usize] += took;
    }

    /// kube's annotations for a request that took `total`: none when it
    /// was quick, or when no layer took any time.
    pub(super) fn annotate(&self, annotations: &mut Annotations, total: Duration) {
        if total <= THRESHOLD || self.0.iter().all(Duration::is_zero) {
            return;
        }
        for layer in Layer::ALL {
            let took = self.0[layer as usize];
            if !took.is_zero() {
                annotations.insert(layer.key(), go_duration(took));
            }
        }
        annotations.insert("apiserver.latency.k8s.io/total", go_duration(total));
    }
}

/// `duration` as Go's `time.Duration.String` writes it: `512.3ms`,
/// `1.5s`, `1m1.5s`, `1h0m0s`, the digits after the point as many as
/// needed.
fn go_duration(duration: Duration) -> String {
    let nanos = duration.as_nanos();
    let (unit, places) = match nanos {
        0 => return "0s".to_owned(),
        n if n < 1_000 => return format!("{n}ns"),
        n if n < 1_000_000 => ("µs", 3),
        n if n < 1_000_000_000 => ("ms", 6),
        _ => ("s", 9),
    };
    let scale = 10u128.pow(places);
    let (whole, part) = (nanos / scale, nanos % scale);
    let fraction = if part == 0 {
        String::new()
    } else {
        let digits = format!("{part:0width$}", width = places as usize);
        format!(".{}", digits.trim_end_matches('0'))
    };
    if unit != "s" {
        return format!("{whole}{fraction}{unit}");
    }
    let (hours, minutes, seconds) = (whole / 3600, whole / 60 % 60, whole % 60);
    if hours > 0 {
        format!("{hours}h{minutes}m{seconds}{fraction}s")
    } else if minutes > 0 {
        format!("{minutes}m{seconds}{fraction}s")
    } else {
        format!("{seconds}{fraction}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Go's own cases (`time_test.go`'s `durationTests`, and a few of
    /// kube's typical latencies).
    #[test]
    fn durations_are_written_as_go_writes_them() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(1), "1ns"),
            (Duration::from_nanos(1_100), "1.1µs"),
            (Duration::from_micros(2_200), "2.2ms"),
            (Duration::from_millis(3_300), "3.3s"),
            (Duration::from_secs(4 * 60 + 5), "4m5s"),
            (Duration::from_millis(4 * 60_000 + 5_001), "4m5.001s"),
            (
                Duration::from_secs(5 * 3600 + 6 * 60 + 7) + Duration::from_millis(1),
                "5h6m7.001s",
            ),
            (
                Duration::from_secs(8 * 60) + Duration::from_nanos(1),
                "8m0.000000001s",
            ),
            (Duration::from_secs(3600), "1h0m0s"),
            (Duration::from_nanos(512_300_000), "512.3ms"),
            (Duration::from_nanos(600_123_456), "600.123456ms"),
        ];
        for (duration, written) in cases {
            assert_eq!(go_duration(duration), written, "{duration:?}");
        }
    }

    /// Only a request slower than 500 ms, and only the layers that took
    /// time, with the total.
    #[test]
    fn only_a_slow_request_gets_the_layers_that_took_time() {
        let mut latencies = Latencies::default();
        latencies.add(Layer::Authorization, Duration::from_millis(400));
        latencies.add(Layer::Authorization, Duration::from_millis(200));
        let mut quick = Annotations::default();
        latencies.annotate(&mut quick, THRESHOLD);
        assert_eq!(quick.iter().count(), 0);
        let mut slow = Annotations::default();
        latencies.annotate(&mut slow, Duration::from_millis(700));
        let written: Vec<_> = slow.iter().collect();
        assert_eq!(
            written,
            [
                ("apiserver.latency.k8s.io/authorization", "600ms"),
                ("apiserver.latency.k8s.io/total", "700ms"),
            ]
        );
        let mut none = Annotations::default();
        Latencies::default().annotate(&mut none, Duration::from_secs(9));
        assert_eq!(none.iter().count(), 0);
    }
}
