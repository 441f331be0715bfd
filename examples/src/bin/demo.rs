//! The README's first command: two zcnet stacks in one process talk over an in-memory wire —
//! addresses, ping, HTTP, a 1 MiB TCP echo, zero-copy UDP, DNS — and each step prints what it
//! cost (frames, polls, bytes copied); at the end, the frame pools' audit. No root, no setup:
//!
//! ```text
//! cargo run -p zcnet-examples --bin demo
//! cargo run -p zcnet-examples --bin demo -- -vv   # with both stacks' log lines on stderr
//! ```
//!
//! `-v` prints the stacks' info lines (creation, addresses), `-vv` also TCP connections and
//! dropped frames, `-vvv` every TCP state change; without it, warnings and errors only.
//!
//! The code is `zcnet_examples::stack_demo`; `pool-demo` shows the frame pool's slot states on
//! a simulated NIC.

const USAGE: &str = "demo: two zcnet stacks talk over an in-memory wire, step by step\n\n\
usage: demo [-v|-vv|-vvv]\n\n\
The report goes to stdout; the stacks' log lines to stderr (warnings and errors; -v info,\n\
-vv debug: TCP connections and dropped frames, -vvv trace: every TCP state change).\n";

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let verbosity = zcnet_examples::logger::take_verbosity(&mut args);
    if args.iter().any(|a| a == "-h" || a == "--help") {
        print!("{USAGE}");
        return;
    }
    if let Some(a) = args.first() {
        eprint!("error: unknown argument {a}\n\n{USAGE}");
        std::process::exit(2);
    }
    zcnet_examples::logger::init(verbosity);
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
