//! Replays a `stack_ingress` recording (`ZCNET_FUZZ_RECORD`, see `zcnet_fuzz::ingress::replay`)
//! on one stack, in order, and prints the harness's counters:
//!
//! ```sh
//! cargo run --release --example replay -- /tmp/stack_ingress.rec
//! ```

fn main() {
    let path = std::env::args_os()
        .nth(1)
        .expect("usage: replay <recording>");
    let recording = std::fs::read(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let n = zcnet_fuzz::ingress::replay(&recording);
    let h = zcnet_fuzz::ingress::harness();
    println!("{n} inputs replayed: {:?}", h.stats());
}
