//! Compiles `proto/*.proto` (etcd's API, our subset) with protox, a protobuf compiler in
//! pure Rust, and generates the messages and tonic services from the descriptors: the
//! build needs no `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(["rpc.proto"], ["proto"])?;
    tonic_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
