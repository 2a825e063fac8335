//! The object a connect request is admitted with: kube's connect options,
//! decoded from the request's query, never read from its body (an exec has
//! none; a proxied request's body belongs to the pod it goes to).
//!
//! kube's `ConnectResource` (`staging/src/k8s.io/apiserver/pkg/endpoints/handlers/rest.go`)
//! asks the resource's connecter for its options (`NewConnectOptions`, in
//! `pkg/registry/core/pod/rest/subresources.go`,
//! `pkg/registry/core/node/rest/proxy.go` and
//! `pkg/registry/core/service/proxy.go`), fills them from the query by
//! `getRequestOptions` (a proxy's path after the subresource going in as
//! `path`), and admits the request with them as its object. The query is
//! decoded as kube's parameter codec does
//! (`staging/src/k8s.io/apimachinery/pkg/runtime/codec.go`: no parameters,
//! the options' zero value; else converted, then defaulted): a flag is true
//! unless it is absent, `false` or `0`
//! (`staging/src/k8s.io/apimachinery/pkg/runtime/conversion.go`), ports
//! are comma-separated 16-bit numbers
//! (`staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/conversion.go`), and
//! an exec or attach gets stdout and stderr set
//! (`pkg/apis/core/v1/defaults.go`). Only the core group's connect
//! subresources have options kube knows; another API's connect request is
//! admitted with no object.

use serde::Serialize;

use crate::request_info::{RequestInfo, first_value, go_parse_query, go_query_bool};
use crate::status::GatewayError;

/// The options of `info`'s connect request as kube's v1 JSON (`kind` and
/// `apiVersion` first), or None when its resource has none. A query kube
/// cannot decode is its 400.
pub(super) fn connect_options(
    info: &RequestInfo,
    query: Option<&str>,
) -> Result<Option<serde_json::Value>, GatewayError> {
    let Some(kind) = Kind::of(info) else {
        return Ok(None);
    };
    // Read as kube reads it: Go's `URL.Query()`.
    let mut parameters = go_parse_query(query.unwrap_or(""));
    if kind.has_subpath() {
        // A `path` in the query is replaced, as kube replaces it.
        parameters.retain(|(key, _)| key != "path");
        parameters.push(("path".to_owned(), subpath(info)));
    }
    let query = Query(parameters);
    let options = match kind {
        Kind::Exec => typed("PodExecOptions", Exec::decode(&query)),
        Kind::Attach => typed("PodAttachOptions", Streams::decode(&query)),
        Kind::PortForward => typed("PodPortForwardOptions", PortForward::decode(&query)?),
        Kind::PodProxy => typed("PodProxyOptions", Proxy::decode(&query)),
        Kind::NodeProxy => typed("NodeProxyOptions", Proxy::decode(&query)),
        Kind::ServiceProxy => typed("ServiceProxyOptions", Proxy::decode(&query)),
    };
    Ok(Some(options))
}

/// The connect subresources of kube's core group, by the options they take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Exec,
    Attach,
    PortForward,
    PodProxy,
    NodeProxy,
    ServiceProxy,
}

impl Kind {
    fn of(info: &RequestInfo) -> Option<Kind> {
        if !info.is_resource_request || !info.api_group.is_empty() {
            return None;
        }
        match (info.resource.as_str(), info.subresource.as_str()) {
            ("pods", "exec") => Some(Kind::Exec),
            ("pods", "attach") => Some(Kind::Attach),
            ("pods", "portforward") => Some(Kind::PortForward),
            ("pods", "proxy") => Some(Kind::PodProxy),
            ("nodes", "proxy") => Some(Kind::NodeProxy),
            ("services", "proxy") => Some(Kind::ServiceProxy),
            _ => None,
        }
    }

    /// The proxies take the rest of the path as their `path` option.
    fn has_subpath(self) -> bool {
        matches!(self, Kind::PodProxy | Kind::NodeProxy | Kind::ServiceProxy)
    }
}

/// kube's `getRequestOptions` subpath: the parts after `{resource}/{name}/proxy`,
/// with a leading slash when there are any, and the request's trailing one.
fn subpath(info: &RequestInfo) -> String {
    let mut path = info.parts.get(3..).unwrap_or_default().join("/");
    if !path.is_empty() && !path.starts_with('/') {
        path.insert(0, '/');
    }
    if info.path.ends_with('/') && !path.ends_with('/') {
        path.push('/');
    }
    path
}

/// A request's query parameters, in order, as kube's `url.Values` holds them.
struct Query(Vec<(String, String)>);

impl Query {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn values<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0
            .iter()
            .filter(move |(name, _)| name == key)
            .map(|(_, value)| value.as_str())
    }

    /// kube's `Convert_Slice_string_To_bool` of the first value: absent is false.
    fn flag(&self, key: &str) -> bool {
        first_value(&self.0, key).is_some_and(go_query_bool)
    }

    /// The first value, or empty.
    fn string(&self, key: &str) -> String {
        first_value(&self.0, key).unwrap_or_default().to_owned()
    }
}

/// Options as kube's v1 JSON: its type first, then its fields.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Typed<T> {
    kind: &'static str,
    api_version: &'static str,
    #[serde(flatten)]
    options: T,
}

fn typed(kind: &'static str, options: impl Serialize) -> serde_json::Value {
    let typed = Typed {
        kind,
        api_version: "v1",
        options,
    };
    // Plain structs of strings, flags and numbers always serialise.
    serde_json::to_value(typed).unwrap_or(serde_json::Value::Null)
}

fn is_false(flag: &bool) -> bool {
    !flag
}

/// kube's v1 `PodExecOptions`: an attach's streams and the command.
#[derive(Debug, Serialize)]
struct Exec {
    #[serde(flatten)]
    streams: Streams,
    /// Go's nil slice, `null`, when no `command` was given.
    command: Option<Vec<String>>,
}

impl Exec {
    fn decode(query: &Query) -> Self {
        let command: Vec<String> = query.values("command").map(str::to_owned).collect();
        Exec {
            streams: Streams::decode(query),
            command: (!command.is_empty()).then_some(command),
        }
    }
}

/// kube's v1 `PodAttachOptions`, the streams an exec has too.
#[derive(Debug, Serialize)]
struct Streams {
    #[serde(skip_serializing_if = "is_false")]
    stdin: bool,
    #[serde(skip_serializing_if = "is_false")]
    stdout: bool,
    #[serde(skip_serializing_if = "is_false")]
    stderr: bool,
    #[serde(skip_serializing_if = "is_false")]
    tty: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    container: String,
}

impl Streams {
    fn decode(query: &Query) -> Self {
        // Defaulted only when decoded: no parameters, no defaults.
        let defaulted = !query.is_empty();
        Streams {
            stdin: query.flag("stdin"),
            stdout: defaulted || query.flag("stdout"),
            stderr: defaulted || query.flag("stderr"),
            tty: query.flag("tty"),
            container: query.string("container"),
        }
    }
}

/// kube's v1 `PodPortForwardOptions`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct PortForward {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ports: Vec<u16>,
}

impl PortForward {
    /// kube's `Convert_Slice_string_To_Slice_int32`: every value, split at
    /// commas, each a 16-bit number; anything else is kube's 400.
    fn decode(query: &Query) -> Result<Self, GatewayError> {
        let mut ports = Vec::new();
        for value in query.values("ports") {
            for port in value.split(',') {
                ports.push(parse_port(port)?);
            }
        }
        Ok(PortForward { ports })
    }
}

/// Go's `strconv.ParseUint(port, 10, 16)`, with its messages.
fn parse_port(port: &str) -> Result<u16, GatewayError> {
    let refused = |why: &str| GatewayError::BadRequest {
        message: format!(
            "cannot convert to []int32: strconv.ParseUint: parsing {}: {why}",
            serde_json::Value::from(port)
        ),
    };
    if port.is_empty() || !port.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err(refused("invalid syntax"));
    }
    port.parse().map_err(|_| refused("value out of range"))
}

/// kube's v1 `PodProxyOptions`, `NodeProxyOptions` and `ServiceProxyOptions`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Proxy {
    #[serde(skip_serializing_if = "String::is_empty")]
    path: String,
}

impl Proxy {
    fn decode(query: &Query) -> Self {
        Proxy {
            path: query.string("path"),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn options(method: &str, target: &str) -> Result<Option<serde_json::Value>, GatewayError> {
        let (path, query) = target
            .split_once('?')
            .map_or((target, None), |(p, q)| (p, Some(q)));
        let method = http::Method::from_bytes(method.as_bytes()).expect("a method");
        connect_options(&RequestInfo::resolve(&method, path, query), query)
    }

    fn ok(method: &str, target: &str) -> serde_json::Value {
        options(method, target)
            .expect("decoded")
            .expect("options for the core group's connect subresources")
    }

    const EXEC: &str = "/api/v1/namespaces/default/pods/p/exec";

    #[test]
    fn an_exec_is_its_query_with_stdout_and_stderr_defaulted() {
        assert_eq!(
            ok(
                "POST",
                &format!(
                    "{EXEC}?command=ls&command=-l&stdin=true&tty=1&container=app&stderr=false"
                )
            ),
            json!({"kind": "PodExecOptions", "apiVersion": "v1", "stdin": true, "stdout": true,
                   "stderr": true, "tty": true, "container": "app", "command": ["ls", "-l"]})
        );
        assert_eq!(
            ok("GET", &format!("{EXEC}?command=date")).to_string(),
            r#"{"kind":"PodExecOptions","apiVersion":"v1","stdout":true,"stderr":true,"command":["date"]}"#,
            "kube's field order"
        );
        // No parameters: kube decodes nothing, so nothing is defaulted.
        assert_eq!(
            ok("GET", EXEC),
            json!({"kind": "PodExecOptions", "apiVersion": "v1", "command": null})
        );
    }

    #[test]
    fn a_flag_is_true_unless_absent_false_or_zero() {
        for (value, expected) in [
            ("true", true),
            ("", true),
            ("yes", true),
            ("FALSE", false),
            ("0", false),
        ] {
            let options = ok("GET", &format!("{EXEC}?stdin={value}&stdin=true"));
            assert_eq!(options.get("stdin").is_some(), expected, "stdin={value}");
        }
        assert!(ok("GET", &format!("{EXEC}?tty=false")).get("tty").is_none());
        // Go's `strings.EqualFold`: the long s folds to `s`.
        assert!(
            ok("GET", &format!("{EXEC}?tty=fal%C5%BFe"))
                .get("tty")
                .is_none()
        );
    }

    #[test]
    fn an_attach_has_no_command() {
        assert_eq!(
            ok(
                "POST",
                "/api/v1/namespaces/default/pods/p/attach?stdin=1&container=c"
            ),
            json!({"kind": "PodAttachOptions", "apiVersion": "v1", "stdin": true, "stdout": true,
                   "stderr": true, "container": "c"})
        );
    }

    #[test]
    fn ports_are_comma_separated_16_bit_numbers_or_kubes_400() {
        let target = "/api/v1/namespaces/default/pods/p/portforward";
        assert_eq!(
            ok("GET", &format!("{target}?ports=80,443&ports=8080")),
            json!({"kind": "PodPortForwardOptions", "apiVersion": "v1", "ports": [80, 443, 8080]})
        );
        for (ports, why) in [
            ("http", "invalid syntax"),
            ("", "invalid syntax"),
            ("-1", "invalid syntax"),
            ("65536", "value out of range"),
        ] {
            match options("GET", &format!("{target}?ports={ports}")) {
                Err(GatewayError::BadRequest { message }) => assert_eq!(
                    message,
                    format!(
                        "cannot convert to []int32: strconv.ParseUint: parsing \"{ports}\": {why}"
                    )
                ),
                other => panic!("ports={ports}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_proxy_takes_the_rest_of_the_path_over_any_path_in_the_query() {
        let pod = "/api/v1/namespaces/default/pods/p/proxy";
        assert_eq!(
            ok("POST", &format!("{pod}/upload/file?path=/elsewhere")),
            json!({"kind": "PodProxyOptions", "apiVersion": "v1", "path": "/upload/file"})
        );
        assert_eq!(ok("GET", &format!("{pod}/dir/"))["path"], "/dir/");
        assert_eq!(
            ok("GET", pod),
            json!({"kind": "PodProxyOptions", "apiVersion": "v1"})
        );
        assert_eq!(
            ok("GET", "/api/v1/nodes/n/proxy/metrics")["kind"],
            "NodeProxyOptions"
        );
        assert_eq!(
            ok("GET", "/api/v1/namespaces/default/services/s/proxy/healthz"),
            json!({"kind": "ServiceProxyOptions", "apiVersion": "v1", "path": "/healthz"})
        );
    }

    #[test]
    fn another_apis_connect_request_has_no_options() {
        assert!(
            options(
                "POST",
                "/apis/demo.example.io/v1/namespaces/default/widgets/w/exec?command=ls"
            )
            .expect("nothing to decode")
            .is_none()
        );
    }
}
