//! `[tracing]`: OpenTelemetry traces exported over OTLP/gRPC, in the terms
//! of kube's `--tracing-config-file` (`TracingConfiguration` of
//! `staging/src/k8s.io/component-base/tracing/api/v1/types.go`, checked as
//! its `config.go` checks it). No table, no tracing: the chain has no
//! tracing step and a request pays nothing.

use toml::Spanned;

use super::bounds;
use super::complete::Completer;
use super::manifest as m;

/// Where spans go and how many requests start a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tracing {
    /// The collector's OTLP/gRPC endpoint as a URL (`http://host:port`);
    /// kube's connection is plaintext too.
    pub endpoint: String,
    /// Of a million requests that arrive without a sampled parent, how many
    /// start a trace. A parent's decision is followed either way (kube's
    /// `ParentBased(TraceIDRatioBased)`); 0, kube's default, traces only
    /// requests whose client asked for it.
    pub sampling_rate_per_million: u32,
}

/// kube's default endpoint, the OTLP/gRPC default.
const DEFAULT_ENDPOINT: &str = "localhost:4317";

impl Completer<'_> {
    pub(super) fn tracing(&mut self, written: &m::Tracing) -> Option<Tracing> {
        let endpoint = match &written.endpoint {
            Some(endpoint) => self.tracing_endpoint(endpoint),
            None => Some(format!("http://{DEFAULT_ENDPOINT}")),
        };
        let rate = self.count(
            &written.sampling_rate_per_million,
            "tracing.sampling_rate_per_million",
            0,
            bounds::SAMPLING_RATE_PER_MILLION,
        );
        Some(Tracing {
            endpoint: endpoint?,
            sampling_rate_per_million: u32::try_from(rate).unwrap_or(0),
        })
    }

    /// `host:port`, as kube's endpoint is written (a gRPC `dns` target),
    /// as the URL tonic connects to.
    fn tracing_endpoint(&mut self, endpoint: &Spanned<String>) -> Option<String> {
        let text = endpoint.get_ref();
        let parsed = url::Url::parse(&format!("http://{text}"))
            .ok()
            .filter(|url| {
                url.host_str().is_some_and(|host| !host.is_empty())
                    && url.port().is_some()
                    && url.path() == "/"
                    && url.query().is_none()
                    && url.username().is_empty()
                    && !text.contains('/')
            });
        if parsed.is_none() {
            self.at(
                endpoint,
                "tracing.endpoint",
                format!(
                    "{text:?} is not a collector address like \"127.0.0.1:4317\" or \
                     \"collector.example:4317\" (host:port, OTLP over plaintext gRPC)"
                ),
            );
        }
        parsed.map(|_| format!("http://{text}"))
    }
}
