//! Compiles the Envoy rate-limit service's protos (vendored under `proto/`, as envoy-types
//! ships them: the very files the server's types were generated from) into an encoded
//! `FileDescriptorSet` for gRPC server reflection, with protox: no `protoc` needed to build.

use std::path::PathBuf;

use prost::Message;

fn main() {
    println!("cargo:rerun-if-changed=proto");
    let set = match protox::compile(["envoy/service/ratelimit/v3/rls.proto"], ["proto"]) {
        Ok(set) => set,
        Err(e) => {
            // A build script reports by exiting; the message names the file and line.
            eprintln!("cannot compile proto/envoy/service/ratelimit/v3/rls.proto: {e:?}");
            std::process::exit(1);
        }
    };
    let Some(out) = std::env::var_os("OUT_DIR").map(PathBuf::from) else {
        eprintln!("cargo sets OUT_DIR for build scripts; it is missing");
        std::process::exit(1);
    };
    let path = out.join("rls_descriptor_set.bin");
    if let Err(e) = std::fs::write(&path, set.encode_to_vec()) {
        eprintln!("cannot write {}: {e}", path.display());
        std::process::exit(1);
    }
}
