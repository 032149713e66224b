/// mimalloc rather than glibc's malloc: a put through the etcd gateway allocates a few
/// dozen times (HTTP/2 frames, protobuf messages, the store's entries and events), and
/// glibc's allocator took about a fifth of a gateway's CPU (docs/performance.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(partita::cli::main());
}
