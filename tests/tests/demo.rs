//! The README's first command (`cargo run -p zcnet-examples --bin demo`), run in-process: each
//! step did what it says (not merely did not panic), the counters it prints agree with each
//! other, the pools audit exact, and a second run prints exactly the same report.
//!
//! One test in its own binary: the copy ledger the demo reports from is process-wide.

use zcnet_buffer::ledger::CopySite;
use zcnet_examples::stack_demo::{self, DemoSummary, ADDR, DATAGRAMS, PINGS, TCP_BYTES};
use zcnet_stack::{IpAddress, Ipv4Cidr};

fn run() -> (DemoSummary, String) {
    let mut out = Vec::new();
    let summary = stack_demo::run(&mut out).expect("writing to a Vec cannot fail");
    (
        summary,
        String::from_utf8(out).expect("the report is UTF-8"),
    )
}

#[test]
fn demo_steps_all_succeed_with_exact_audit_and_repeat_exactly() {
    let (s, report) = run();
    let names: Vec<&str> = s.steps.iter().map(|st| st.name).collect();
    assert_eq!(
        names,
        ["addresses", "ping", "http", "tcp", "udp", "dns"],
        "{report}"
    );
    for st in &s.steps {
        assert!(st.ok, "step {} failed: {}\n{report}", st.name, st.detail);
        // The drivers' counters and the stacks' agree: every frame a stack handed to its
        // driver crossed the wire.
        assert_eq!(st.cost.frames, st.cost.frames_out, "step {}", st.name);
    }

    // 1. Both stacks report their static addresses.
    assert_eq!(
        s.addresses,
        [
            Some(Ipv4Cidr::new(ADDR[0], 24)),
            Some(Ipv4Cidr::new(ADDR[1], 24))
        ]
    );
    // 2. Every ping answered; an ARP exchange and the echoes each way.
    assert_eq!(s.ping_replies, PINGS);
    let ping = &s.steps[1].cost;
    assert_eq!(ping.frames, [u64::from(PINGS) + 1; 2], "{ping:?}");
    // 3. The page, byte for byte.
    assert_eq!(s.http_status, Some(200));
    assert!(s.http_body_exact);
    // 4. 1 MiB there and back, byte-exact, in at least as many full-size segments as it takes.
    assert_eq!(s.tcp_bytes_back, TCP_BYTES);
    assert!(s.tcp_exact);
    let tcp = &s.steps[3].cost;
    assert!(tcp.frames[0] >= (TCP_BYTES / 1460) as u64, "{tcp:?}");
    assert!(tcp.frames[1] >= (TCP_BYTES / 1460) as u64, "{tcp:?}");
    // The stacks keep received segments in their frames and send the frames the applications
    // wrote: the echo server reads and writes each byte once, the client works in place, and
    // the stacks copy only parts of frames the peer's window cut short (under 1% here).
    let mib = TCP_BYTES as u64;
    assert_eq!(tcp.copies.bytes(CopySite::StackRx), 0);
    assert!(tcp.copies.bytes(CopySite::Emit) < mib / 100, "{tcp:?}");
    assert_eq!(tcp.copies.bytes(CopySite::SocketToApp), mib);
    assert_eq!(tcp.copies.bytes(CopySite::AppToSocket), mib);
    // 5. Zero-copy UDP: every datagram back byte-exact, read in a slot of A's pool, and not
    // one byte copied by zcnet.
    assert_eq!(s.udp_exact, DATAGRAMS);
    assert!(s.udp_in_pool);
    let udp = &s.steps[4].cost;
    assert_eq!(udp.copies.user_calls(), 0, "{udp:?}");
    assert!(udp.frames[0] >= DATAGRAMS as u64 && udp.frames[1] >= DATAGRAMS as u64);
    // 6. The name resolved to B's address by B's responder: one query, one answer.
    assert_eq!(s.dns, [IpAddress::from(ADDR[1])]);
    assert_eq!(s.steps[5].cost.frames, [1, 1]);

    // The audit: free lists consistent, nothing lent, in flight or held by a stack; at most
    // the two TX frames each stack keeps for itself.
    assert!(s.audit_exact, "{report}");
    for audit in &s.audit {
        let occ = audit
            .as_ref()
            .expect("audited")
            .as_ref()
            .expect("free list consistent");
        assert_eq!(
            (occ.posted, occ.stack, occ.lent, occ.device),
            (0, 0, 0, 0),
            "{occ}"
        );
        assert!(occ.tx <= 2, "{occ}");
        assert_eq!(occ.free + occ.tx, occ.total(), "{occ}");
    }
    assert!(s.all_ok());

    // The report: the steps in order, each marked ok, on one screen; and deterministic.
    for (i, st) in s.steps.iter().enumerate() {
        let line = report
            .lines()
            .find(|l| l.starts_with(&format!("{}. {}", i + 1, st.name)))
            .unwrap_or_else(|| panic!("no line for step {}\n{report}", st.name));
        assert!(line.ends_with(" ok"), "{line}");
    }
    assert!(report.ends_with("all steps ok\n"), "{report}");
    assert!(report.lines().count() <= 40, "{report}");
    let (again, report_again) = run();
    assert!(again.all_ok());
    assert_eq!(report_again, report, "a second run prints the same report");
}
