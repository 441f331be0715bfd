//! The echo example: TCP and UDP echo (port 7) on zcnet over a TAP whose Linux side is in the
//! network namespace `zcnet-demo`.
//!
//! ```text
//! cargo build --release -p zcnet-examples && sudo target/release/echo
//! echo hello | sudo ip netns exec zcnet-demo nc -N 10.77.0.2 7
//! sudo target/release/echo --pcap echo.pcap   # also records every frame: tcpdump -r echo.pcap
//! sudo target/release/echo -vv   # logs connections and dropped frames to stderr (-v: less, -vvv: more)
//! ```

use std::process::ExitCode;

use zcnet_examples::echo::{EchoConfig, EchoServer};
use zcnet_examples::tap_setup::{Demo, Options, ZCNET_ADDR};

fn main() -> ExitCode {
    let options = Options::from_env("echo", "TCP and UDP echo servers on zcnet (port 7)");
    let demo = match Demo::start(options) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let server = match EchoServer::bind(demo.stack, EchoConfig::default()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: cannot bind port 7: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "zcnet echo server on {ZCNET_ADDR} port 7, TCP and UDP (TAP {})",
        demo.options.tap
    );
    println!(
        "  TCP:  echo hello | {}",
        demo.peer(&format!("nc -N {ZCNET_ADDR} 7"))
    );
    println!(
        "  UDP:  echo hello | {}",
        demo.peer(&format!("nc -u -w1 {ZCNET_ADDR} 7"))
    );
    println!("Ctrl-C stops.");
    let stats = server.stats();
    demo.run(server.run(demo.exec.local_spawner()));
    let s = stats.get();
    println!(
        "echoed {} TCP bytes over {} connections, {} UDP datagrams ({} bytes)",
        s.tcp_bytes, s.tcp_connections, s.udp_datagrams, s.udp_bytes
    );
    ExitCode::SUCCESS
}
