//! The HTTP/1.1 example: a static page at `/` and live counters at `/stats`, on zcnet over a
//! TAP whose Linux side is in the network namespace `zcnet-demo`.
//!
//! ```text
//! cargo build --release -p zcnet-examples && sudo target/release/http
//! sudo ip netns exec zcnet-demo curl http://10.77.0.2/stats
//! sudo target/release/http --pcap http.pcap   # also records every frame: tcpdump -r http.pcap
//! sudo target/release/http -vv   # logs connections and dropped frames to stderr (-v: less, -vvv: more)
//! ```

use std::process::ExitCode;

use zcnet_examples::http::{HttpConfig, HttpServer};
use zcnet_examples::tap_setup::{tap_driver_stats, Demo, Options, ZCNET_ADDR};

fn main() -> ExitCode {
    let options = Options::from_env("http", "an HTTP/1.1 server on zcnet (port 80)");
    let demo = match Demo::start(options) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let config = HttpConfig {
        driver_stats: Some(tap_driver_stats(demo.tap_stats.clone())),
        ..HttpConfig::default()
    };
    let server = match HttpServer::bind(demo.stack, config) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: cannot listen on port 80: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "zcnet HTTP server on http://{ZCNET_ADDR}/ (TAP {})",
        demo.options.tap
    );
    println!(
        "  page:      {}",
        demo.peer(&format!("curl http://{ZCNET_ADDR}/"))
    );
    println!(
        "  counters:  {}",
        demo.peer(&format!("curl http://{ZCNET_ADDR}/stats"))
    );
    println!(
        "  load:      {}",
        demo.peer(&format!("wrk -c 50 -d 10 http://{ZCNET_ADDR}/"))
    );
    println!("Ctrl-C stops.");
    demo.run(server.run(demo.exec.local_spawner()));
    ExitCode::SUCCESS
}
