//! The iperf3 example: an iperf3-compatible server on zcnet over a TAP whose Linux side is in
//! the network namespace `zcnet-demo`, so an unmodified `iperf3 -c` measures zcnet.
//!
//! ```text
//! cargo build --release -p zcnet-examples && sudo target/release/iperf3
//! sudo ip netns exec zcnet-demo iperf3 -c 10.77.0.2          # Linux sends, zcnet receives
//! sudo ip netns exec zcnet-demo iperf3 -c 10.77.0.2 -R       # zcnet sends
//! sudo ip netns exec zcnet-demo iperf3 -c 10.77.0.2 -P 4     # four parallel streams
//! sudo target/release/iperf3 --pcap iperf3.pcap   # also records every frame: tcpdump -r iperf3.pcap
//! sudo target/release/iperf3 -vv   # logs connections and dropped frames to stderr (-v: less, -vvv: more)
//! ```

use std::process::ExitCode;

use zcnet_examples::iperf3::{Iperf3Config, Iperf3Server, PORT};
use zcnet_examples::tap_setup::{Demo, Options, ZCNET_ADDR};

fn main() -> ExitCode {
    let options = Options::from_env("iperf3", "an iperf3-compatible server on zcnet (port 5201)");
    let demo = match Demo::start(options) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let config = Iperf3Config {
        log: Some(|line| println!("{line}")),
        ..Iperf3Config::default()
    };
    let server = match Iperf3Server::bind(demo.stack, config) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: cannot listen on port {PORT}: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "zcnet iperf3 server on {ZCNET_ADDR}:{PORT} (TAP {})",
        demo.options.tap
    );
    println!(
        "  zcnet receives:  {}",
        demo.peer(&format!("iperf3 -c {ZCNET_ADDR}"))
    );
    println!(
        "  zcnet sends:     {}",
        demo.peer(&format!("iperf3 -c {ZCNET_ADDR} -R"))
    );
    println!(
        "  4 streams:       {}",
        demo.peer(&format!("iperf3 -c {ZCNET_ADDR} -P 4"))
    );
    println!("Ctrl-C stops.");
    demo.run(server.run(demo.exec.local_spawner()));
    ExitCode::SUCCESS
}
