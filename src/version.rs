//! `GET /version` (and `/version/`): the gateway's own `version.Info`, as
//! kube's core server answers it (`routes.Version` in
//! `staging/src/k8s.io/apiserver/pkg/server/routes/version.go`, over
//! `k8s.io/apimachinery/pkg/version.Info`). Every field kube sends is
//! present (the Python client's `VersionInfo` refuses a missing one);
//! `goVersion` is empty, as the gateway is not built by Go. A route that
//! claims `/version` (a real API server behind the gateway) answers instead.

use futures_util::future::BoxFuture;
use http::Method;
use http::header::CONTENT_TYPE;

use crate::body::{Body, Request, Response};
use crate::handler::Handler;
use crate::status::GatewayError;

/// The paths kube's version handler is registered at.
pub(crate) const PATHS: [&str; 2] = ["/version", "/version/"];

pub(crate) struct Version(bytes::Bytes);

impl Version {
    pub(crate) fn new() -> Self {
        let semver = env!("CARGO_PKG_VERSION");
        let mut numbers = semver.split('.');
        let major = numbers.next().unwrap_or("0");
        let minor = numbers.next().unwrap_or("0");
        let info = serde_json::json!({
            "major": major,
            "minor": minor,
            "gitVersion": format!("v{semver}"),
            "gitCommit": "",
            "gitTreeState": "",
            "buildDate": "",
            "goVersion": "",
            "compiler": "rustc",
            "platform": format!("{}/{}", std::env::consts::OS, go_arch(std::env::consts::ARCH)),
        });
        Version(info.to_string().into())
    }
}

impl Default for Version {
    fn default() -> Self {
        Self::new()
    }
}

/// Go's name for the architecture (`GOARCH`), as kube's `platform` has it.
fn go_arch(arch: &str) -> &str {
    match arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

impl Handler for Version {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        let response = if request.method() != Method::GET && request.method() != Method::HEAD {
            GatewayError::MethodNotAllowed.into_response()
        } else {
            let mut response = http::Response::new(Body::full(self.0.clone()));
            response.headers_mut().insert(
                CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
            response
        };
        Box::pin(async move { response })
    }
}

#[cfg(test)]
mod tests {
    use super::go_arch;

    #[test]
    fn architectures_take_go_names() {
        assert_eq!(go_arch("x86_64"), "amd64");
        assert_eq!(go_arch("aarch64"), "arm64");
        assert_eq!(go_arch("riscv64"), "riscv64");
    }
}
