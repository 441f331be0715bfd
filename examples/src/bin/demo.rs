//! The README's first command: two zcnet stacks in one process talk over an in-memory wire —
//! addresses, ping, HTTP, a 1 MiB TCP echo, zero-copy UDP, DNS — and each step prints what it
//! cost (frames, polls, bytes copied); at the end, the frame pools' audit. No root, no setup:
//!
//! ```text
//! cargo run -p zcnet-examples --bin demo
//! ```
//!
//! The code is `zcnet_examples::stack_demo`; `pool-demo` shows the frame pool's slot states on
//! a simulated NIC.

fn main() {
    let mut out = std::io::stdout().lock();
    match zcnet_examples::stack_demo::run(&mut out) {
        Ok(summary) if summary.all_ok() => {}
        Ok(_) => std::process::exit(1),
        Err(e) => {
            eprintln!("demo: cannot write its report: {e}");
            std::process::exit(2);
        }
    }
}
