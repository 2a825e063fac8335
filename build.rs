//! Generates the Rust types of gnostic's OpenAPI v2 protobuf messages
//! (proto/gnostic/OpenAPIv2.proto), which `/openapi/v2` is served as to a
//! client that asks for protobuf (src/openapi/v2_proto.rs). protoc is the
//! one etcd-client's build script runs: `PROTOC` from .cargo/config.toml
//! (tools/protoc, the binary protoc-bin-vendored ships).

fn main() -> std::io::Result<()> {
    let proto = "proto/gnostic/OpenAPIv2.proto";
    println!("cargo:rerun-if-changed={proto}");
    prost_build::Config::new().compile_protos(&[proto], &["proto/gnostic"])
}
