//! The per-call cost of each shipped filter (the Rust ones, and the C,
//! Python and JavaScript ones), in each isolation mode, through the real host
//! (`LoadedFilter`), against a baseline measured in the same run: the native
//! floor (building the same input records and awaiting an empty future), so
//! the ratios show what a Wasm call adds. `fault-authn`, which only looks
//! for one header, measures the host's own share of a call, and
//! `wasmtime-floor` the same call made straight through wasmtime: the
//! difference is the gateway's own bookkeeping.
//!
//!     cargo bench --bench filters
//!
//! Criterion prints each measurement; a table of ratios follows at the end.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark harness: a setup that fails stops the run with its message"
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use criterion::Criterion;
use wasmgate::audit_event::{Annotations, AuditEvent, ResponseStatus};
use wasmgate::config::Name;
use wasmgate::config::stages::{
    AuditLevel, AuditStage, FailurePolicy, FilterMatch, FilterSpec, Isolation, Mode, Reads,
    RequestHeaders, Sink,
};
use wasmgate::context::{AuditId, RequestContext, SourceIps, UserInfo};
use wasmgate::request_info::RequestInfo;
use wasmgate::wasm::audit_batch::AuditBatch;
use wasmgate::wasm::bindings::authenticator::{AuthenticatorFilter, AuthenticatorFilterPre};
use wasmgate::wasm::bindings::types;
use wasmgate::wasm::capacity::{Capacity, Slot, StoreData, WaitDeadline};
use wasmgate::wasm::filter::{AdmissionRequest, Attributes, Operation};
use wasmgate::wasm::state::{FilterIdentity, FilterState};
use wasmgate::wasm::{LoadedFilter, WasmHost, convert};

const GROUP: &str = "filter-call";

fn main() {
    build_filters();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    let inputs = Inputs::new();
    let mut group = criterion.benchmark_group(GROUP);
    group.bench_function("native-floor", |b| {
        b.to_async(&runtime)
            .iter(|| async { std::hint::black_box(Inputs::new()) })
    });
    for isolation in [Isolation::PerRequest, Isolation::Pooled] {
        let mode = mode_name(isolation);
        // A filter that does next to nothing (it looks for one header and
        // has no opinion): what remains is the host's own cost of a call.
        let idle = load(spec("fault-authn", isolation, "{}"));
        group.bench_function(format!("fault-authn/{mode}"), |b| {
            b.to_async(&runtime)
                .iter(|| idle.authenticate(&inputs.parts, || &inputs.view))
        });
        let floor = WasmtimeFloor::new(&spec("fault-authn", isolation, "{}"));
        group.bench_function(format!("wasmtime-floor/{mode}"), |b| match isolation {
            Isolation::PerRequest => b.to_async(&runtime).iter(|| floor.fresh_call(&inputs.view)),
            Isolation::Pooled => b
                .to_async(&runtime)
                .iter_custom(|calls| floor.timed_warm_calls(calls, &inputs.view)),
        });
        let token = load(spec(
            "token-authn",
            isolation,
            "{\"tokens\":[{\"token\":\"alice-token\",\"user\":\"alice\"}]}",
        ));
        group.bench_function(format!("token-authn/{mode}"), |b| {
            b.to_async(&runtime)
                .iter(|| token.authenticate(&inputs.parts, || &inputs.view))
        });
        let rbac = load(spec("rbac-authz", isolation, RBAC_CONFIG));
        group.bench_function(format!("rbac-authz/{mode}"), |b| {
            b.to_async(&runtime)
                .iter(|| rbac.authorize(&inputs.user, &inputs.info, || &inputs.attributes))
        });
        let labels = load(spec(
            "label-defaults",
            isolation,
            "{\"labels\":{\"team\":\"platform\"}}",
        ));
        group.bench_function(format!("label-defaults/{mode}"), |b| {
            b.to_async(&runtime)
                .iter(|| labels.admit(&inputs.admission))
        });
        let policy = load(spec("policy-deny", isolation, POLICY_CONFIG));
        group.bench_function(format!("policy-deny/{mode}"), |b| {
            b.to_async(&runtime)
                .iter(|| policy.admit(&inputs.admission))
        });
        let mut audit_spec = spec("jsonl-audit", isolation, "{}");
        audit_spec.sink = Some(Sink::File(PathBuf::from("/dev/null")));
        let audit = load(audit_spec);
        group.bench_function(format!("jsonl-audit/{mode}"), |b| {
            b.to_async(&runtime).iter(|| async {
                // Rendered in every call, as the audit stage renders every batch.
                let batch = AuditBatch::new(std::slice::from_ref(&inputs.event));
                audit.audit(&batch).await
            })
        });
        // The filters in other languages: C, Python (CPython), JavaScript (SpiderMonkey).
        let apikey = load(spec("apikey-authn", isolation, APIKEY_CONFIG));
        group.bench_function(format!("apikey-authn/{mode}"), |b| {
            b.to_async(&runtime)
                .iter(|| apikey.authenticate(&inputs.parts, || &inputs.view))
        });
        let abac = load(spec("abac-authz", isolation, ABAC_CONFIG));
        group.bench_function(format!("abac-authz/{mode}"), |b| {
            b.to_async(&runtime)
                .iter(|| abac.authorize(&inputs.user, &inputs.info, || &inputs.attributes))
        });
        let schema = load(spec("schema-admission", isolation, SCHEMA_CONFIG));
        group.bench_function(format!("schema-admission/{mode}"), |b| {
            b.to_async(&runtime)
                .iter(|| schema.admit(&inputs.admission))
        });
    }
    group.finish();
    criterion.final_summary();
    print_ratios();
}

const RBAC_CONFIG: &str = r#"{"roles":[{"name":"admin","rules":[{"verbs":["*"],"apiGroups":["demo.example.io"],"resources":["widgets"]}]}],
"bindings":[{"role":"admin","namespace":"default","users":["alice"]}]}"#;
const POLICY_CONFIG: &str =
    r#"{"rules":[{"pointer":"/spec/replicas","op":"gt","value":10,"message":"too many"}]}"#;
/// The request's bearer token is the API key (the inputs carry no other header).
const APIKEY_CONFIG: &str = r#"{"header":"authorization","scheme":"Bearer","keys":[{"key":"alice-token","user":"alice","groups":["dev"]}]}"#;
const ABAC_CONFIG: &str = r#"{"rules":[
{"name":"after-hours","effect":"deny","groups":["dev"],"verbs":["create","update","patch","delete"],"outside":{"days":["mon","tue","wed","thu","fri"],"hours":"08:00-18:00"}},
{"name":"reads","effect":"allow","verbs":["get","list","watch"],"resources":["*"]},
{"name":"dev-writes","effect":"allow","groups":["dev"],"api_groups":["demo.example.io"]}]}"#;
const SCHEMA_CONFIG: &str = r#"{"schemas":[{"resources":["widgets"],"api_groups":["demo.example.io"],"schema":{
"type":"object","required":["metadata","spec"],"properties":{
"metadata":{"type":"object","required":["name"],"properties":{"name":{"type":"string","pattern":"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"}}},
"spec":{"type":"object","required":["replicas"],"additionalProperties":false,"properties":{"replicas":{"type":"integer","minimum":1,"maximum":10}}}}}}]}"#;

fn mode_name(isolation: Isolation) -> &'static str {
    match isolation {
        Isolation::PerRequest => "per-request",
        Isolation::Pooled => "pooled",
    }
}

fn build_filters() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("filters/build.sh");
    let status = std::process::Command::new("bash")
        .arg(script)
        .stdout(std::process::Stdio::null())
        .status();
    assert!(status.is_ok_and(|s| s.success()), "filters/build.sh failed");
}

fn spec(name: &str, isolation: Isolation, config_json: &str) -> FilterSpec {
    FilterSpec {
        name: Name::parse(name).expect("valid name"),
        component: Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("filters/dist/{name}.wasm")),
        location: None,
        sha256: None,
        isolation,
        timeout: Duration::from_secs(1),
        memory: 64 << 20,
        failure_policy: FailurePolicy::FailClosed,
        mode: Mode::Enforce,
        matcher: FilterMatch::default(),
        config_json: config_json.to_owned(),
        sink: None,
        headers: RequestHeaders::All,
        reads: Reads::ALL,
        wasi: Default::default(),
        cache: None,
    }
}

fn load<K: wasmgate::wasm::filter::Kind>(spec: FilterSpec) -> LoadedFilter<K> {
    let host = WasmHost::shared().expect("wasm host");
    LoadedFilter::load(host, &spec, capacity(host))
        .unwrap_or_else(|error| panic!("{}: {error}", spec.name))
}

/// The default `[limits]` capacity, as a gateway's configuration has it.
fn capacity(host: &WasmHost) -> Arc<Capacity> {
    let limits = wasmgate::config::Limits::default();
    Arc::new(Capacity::new(
        limits.filter_instances,
        limits.filter_memory,
        host.slots.clone(),
        limits.request_timeout / 4,
    ))
}

/// What wasmtime itself needs to make `fault-authn`'s call, without the
/// gateway's bookkeeping around it (the instance pool, the budgets re-armed,
/// the outcome classified, counted and timed): a store with the same memory
/// cap and epoch deadline, the instantiation, the call. The floor under what
/// `LoadedFilter` can cost.
struct WasmtimeFloor {
    engine: wasmtime::Engine,
    pre: AuthenticatorFilterPre<StoreData>,
    identity: Arc<FilterIdentity>,
    capacity: Arc<Capacity>,
}

type WarmInstance = (wasmtime::Store<StoreData>, AuthenticatorFilter, Slot);

impl WasmtimeFloor {
    fn new(spec: &FilterSpec) -> Self {
        let host = WasmHost::shared().expect("wasm host");
        let component = host.component(&spec.component, None).expect("component");
        let pre = host.linker.instantiate_pre(&component).expect("links");
        WasmtimeFloor {
            engine: host.engine.clone(),
            pre: AuthenticatorFilterPre::new(pre).expect("authenticator world"),
            identity: Arc::new(FilterIdentity {
                name: spec.name.to_string(),
                config_json: spec.config_json.clone(),
                sink: None,
                wasi: Default::default(),
            }),
            capacity: capacity(host),
        }
    }

    async fn instance(&self) -> WarmInstance {
        let (slot, memory) = self
            .capacity
            .reserve(0, &mut WaitDeadline::default())
            .await
            .expect("room");
        let state = FilterState::new(self.identity.clone(), 64 << 20).expect("state");
        let mut store = wasmtime::Store::new(&self.engine, StoreData::new(state, memory));
        store.limiter(|data| data);
        store.epoch_deadline_callback(|_| Ok(wasmtime::UpdateDeadline::Yield(1)));
        store.set_epoch_deadline(1);
        let exports = self
            .pre
            .instantiate_async(&mut store)
            .await
            .expect("instance");
        (store, exports, slot)
    }

    async fn call((store, exports, _): &mut WarmInstance, view: &types::RequestView) {
        store.set_epoch_deadline(1);
        let answer = exports
            .wasmgate_filter_authenticator()
            .call_authenticate(store, view)
            .await
            .expect("call");
        std::hint::black_box(answer);
    }

    async fn fresh_call(&self, view: &types::RequestView) {
        Self::call(&mut self.instance().await, view).await;
    }

    /// Makes `calls` calls on one instance, timing only the calls.
    async fn timed_warm_calls(&self, calls: u64, view: &types::RequestView) -> Duration {
        let mut instance = self.instance().await;
        let started = std::time::Instant::now();
        for _ in 0..calls {
            Self::call(&mut instance, view).await;
        }
        started.elapsed()
    }
}

/// One request's worth of filter inputs: what the stages build per request.
struct Inputs {
    parts: http::request::Parts,
    view: types::RequestView,
    user: UserInfo,
    info: RequestInfo,
    attributes: Attributes,
    admission: AdmissionRequest,
    event: AuditEvent,
}

impl Inputs {
    fn new() -> Self {
        let path = "/apis/demo.example.io/v1/namespaces/default/widgets";
        let info = RequestInfo::resolve(&http::Method::POST, path, None);
        let user = UserInfo {
            name: "alice".into(),
            groups: vec!["dev".into()],
            ..UserInfo::default()
        };
        let mut request = http::Request::post(path)
            .header("authorization", "Bearer alice-token")
            .header("content-type", "application/json")
            .header("user-agent", "bench")
            .body(())
            .expect("request");
        RequestContext::learn(request.extensions_mut()).info = Some(info.clone());
        let (parts, ()) = request.into_parts();
        let object = r#"{"apiVersion":"demo.example.io/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"replicas":3}}"#;
        Inputs {
            view: convert::request_view(&parts, &RequestHeaders::All, Reads::ALL),
            attributes: Attributes {
                user: convert::user_to_wit(&user),
                request: convert::request_info(&info, Reads::ALL),
            },
            admission: AdmissionRequest {
                uid: "bench".into(),
                operation: Operation::Create,
                request: Some(convert::request_info(&info, Reads::ALL)),
                user: Some(convert::user_to_wit(&user)),
                object: Some(object.into()),
                content_type: "application/json".into(),
                dry_run: false,
            },
            event: AuditEvent {
                audit_id: Some(AuditId::from(http::HeaderValue::from_static("bench"))),
                stage: AuditStage::ResponseComplete,
                level: AuditLevel::Metadata,
                verb: info.verb.clone(),
                request_uri: Some(http::uri::PathAndQuery::from_static(path)),
                user: Some(Arc::new(user.clone())),
                impersonated_user: None,
                source_ips: Some(SourceIps::Peer(http::HeaderValue::from_static("127.0.0.1"))),
                user_agent: Some(http::HeaderValue::from_static("bench")),
                object_ref: None,
                response_status: Some(ResponseStatus::code_only(201)),
                request_object: None,
                response_object: None,
                request_received: std::time::UNIX_EPOCH + Duration::from_secs(1_767_225_600),
                stage_time: std::time::UNIX_EPOCH + Duration::from_micros(1_767_225_600_000_100),
                annotations: Annotations::default(),
            },
            user,
            info,
            parts,
        }
    }
}

/// Reads criterion's estimates back and prints each filter against the
/// native floor and against its own pooled mode.
fn print_ratios() {
    let dir = criterion_dir().join(GROUP);
    let mean = |id: &str| -> Option<f64> {
        let text = std::fs::read_to_string(dir.join(id).join("new/estimates.json")).ok()?;
        let json: serde_json::Value = serde_json::from_str(&text).ok()?;
        json["mean"]["point_estimate"].as_f64()
    };
    let Some(floor) = mean("native-floor") else {
        println!("no estimates found under {}", dir.display());
        return;
    };
    println!(
        "\nper-call cost (mean), ratio to the native floor ({floor:.0} ns) measured in this run:"
    );
    println!(
        "{:<16} {:>14} {:>10} {:>14} {:>10} {:>14}",
        "filter", "per-request", "x floor", "pooled", "x floor", "fresh/pooled"
    );
    for filter in [
        "wasmtime-floor",
        "fault-authn",
        "token-authn",
        "rbac-authz",
        "label-defaults",
        "policy-deny",
        "jsonl-audit",
        "apikey-authn",
        "abac-authz",
        "schema-admission",
    ] {
        let (Some(fresh), Some(pooled)) = (
            mean(&format!("{filter}_per-request")),
            mean(&format!("{filter}_pooled")),
        ) else {
            continue;
        };
        println!(
            "{filter:<16} {:>11.2} µs {:>9.1}x {:>11.2} µs {:>9.1}x {:>13.1}x",
            fresh / 1000.0,
            fresh / floor,
            pooled / 1000.0,
            pooled / floor,
            fresh / pooled
        );
    }
    // The same call, made through the gateway's `LoadedFilter` and straight
    // through wasmtime: what the gateway's own bookkeeping adds.
    for mode in ["per-request", "pooled"] {
        if let (Some(gateway), Some(wasmtime)) = (
            mean(&format!("fault-authn_{mode}")),
            mean(&format!("wasmtime-floor_{mode}")),
        ) {
            println!(
                "fault-authn {mode}: {:.2} µs, of which wasmtime {:.2} µs and the gateway's bookkeeping {:.2} µs",
                gateway / 1000.0,
                wasmtime / 1000.0,
                (gateway - wasmtime) / 1000.0
            );
        }
    }
}

fn criterion_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
        .join("criterion")
}
