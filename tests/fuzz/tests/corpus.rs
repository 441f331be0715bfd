//! The seed corpus (`corpus/<target>/`): written from the seeds below with
//! `ZCNET_WRITE_CORPUS=1 cargo test --test corpus`, and every file there (seeds, inputs the
//! fuzzers found and kept, regressions) replayed through its target's code on the stable
//! toolchain by a plain `cargo test`.

use std::fs;
use std::path::{Path, PathBuf};

use zcnet_fuzz::frames::{self, flags, *};
use zcnet_fuzz::input::Writer;

/// A target's seeds: (name, input).
type Seeds = Vec<(&'static str, Vec<u8>)>;

fn w() -> Writer {
    Writer::default()
}

/// `stack_ingress` operations, encoded as `ingress::Harness::op` reads them.
mod op {
    use super::*;

    pub fn raw(w: &mut Writer, frame: &[u8], fix: bool) {
        w.u8(if fix { 0x80 } else { 0 }).long(frame);
    }
    pub fn arp_request(w: &mut Writer) {
        w.u8(5).u16(1).u8(0).u8(0);
    }
    pub fn ping6(w: &mut Writer, id: u16, seq: u16) {
        let mut icmp = Vec::new();
        icmp.extend_from_slice(&id.to_be_bytes());
        icmp.extend_from_slice(&seq.to_be_bytes());
        icmp.extend_from_slice(b"seed ping");
        w.u8(0x89).u8(128).u8(0).long(&icmp);
    }
    pub fn ping4(w: &mut Writer, id: u16, seq: u16) {
        let mut icmp = Vec::new();
        icmp.extend_from_slice(&id.to_be_bytes());
        icmp.extend_from_slice(&seq.to_be_bytes());
        icmp.extend_from_slice(b"seed ping");
        w.u8(9).u8(8).u8(0).long(&icmp);
    }
    #[allow(clippy::too_many_arguments)]
    pub fn listener_seg(
        w: &mut Writer,
        v6: bool,
        src: u16,
        fl: u8,
        seq: u32,
        ack: u32,
        payload: &[u8],
    ) {
        let options: &[u8] = if fl & flags::SYN != 0 {
            &[2, 4, 0x05, 0xa0, 1, 3, 3, 7, 4, 2, 1, 1]
        } else {
            &[]
        };
        w.u8(if v6 { 0x83 } else { 3 })
            .u16(src)
            .u8(0)
            .u8(fl)
            .u32(seq)
            .u32(ack)
            .u16(8192)
            .short(options)
            .short(payload);
    }
    pub fn conn_seg(w: &mut Writer, fl: u8, seq_off: i16, ack_off: i16, payload: &[u8]) {
        w.u8(2)
            .u8(fl)
            .u16(seq_off as u16)
            .u16(ack_off as u16)
            .u16(8192)
            .short(&[])
            .short(payload);
    }
    /// An ICMPv6 packet too big naming `mtu`, quoting a segment of the established connection
    /// `seq_off` from the highest sequence number the stack sent.
    pub fn packet_too_big(w: &mut Writer, mtu: u32, seq_off: i16) {
        w.u8(0x89).u8(2).u8(0x80).u32(mtu).u16(seq_off as u16);
    }
    pub fn udp(w: &mut Writer, sel: u8, src_port: u16, payload: &[u8]) {
        w.u8(4).u8(sel).u16(src_port).long(payload);
    }
    pub fn ra(w: &mut Writer, prefix: [u8; 8]) {
        w.u8(0x86).bytes(&prefix);
    }
    pub fn dhcp(w: &mut Writer, kind: u8, lease: u32) {
        dhcp_with(w, kind, lease, &[]);
    }
    /// A DHCP reply with `extra` options after the usual ones (a later option wins).
    pub fn dhcp_with(w: &mut Writer, kind: u8, lease: u32, extra: &[u8]) {
        w.u8(8).u8(kind).u32(lease).short(extra);
    }
    pub fn clock_ms(w: &mut Writer, ms: u16) {
        w.u8(7).u16(ms);
    }
    pub fn clock_s(w: &mut Writer, s: u16) {
        w.u8(0x87).u16(s);
    }
}

fn stack_ingress() -> Seeds {
    let mut out = Vec::new();
    let mut s = w();
    op::arp_request(&mut s);
    out.push(("arp-request", s.out));
    let mut s = w();
    op::ping6(&mut s, 1, 1);
    out.push(("icmpv6-echo", s.out));
    let mut s = w();
    op::ping4(&mut s, 2, 1);
    out.push(("icmpv4-echo-no-address", s.out));
    let mut s = w();
    op::listener_seg(&mut s, true, 50000, flags::SYN, 7, 0, &[]);
    out.push(("tcp6-syn", s.out));
    let mut s = w();
    op::listener_seg(&mut s, false, 50001, flags::SYN, 7, 0, &[]);
    out.push(("tcp4-syn", s.out));
    let mut s = w();
    op::conn_seg(
        &mut s,
        flags::ACK | flags::PSH,
        0,
        0,
        b"GET / HTTP/1.1\r\n\r\n",
    );
    op::conn_seg(&mut s, flags::ACK, 0, 0, &[]);
    out.push(("tcp-established-data", s.out));
    let mut s = w();
    op::conn_seg(&mut s, flags::ACK | flags::FIN, 0, 0, &[]);
    op::clock_ms(&mut s, 500);
    out.push(("tcp-established-fin", s.out));
    let mut s = w();
    op::conn_seg(&mut s, flags::RST, 0, 0, &[]);
    out.push(("tcp-established-rst", s.out));
    let mut s = w();
    op::conn_seg(&mut s, flags::ACK | flags::PSH, 100, 0, b"out of order");
    op::conn_seg(&mut s, flags::ACK | flags::PSH, 0, 0, &[b'a'; 100]);
    out.push(("tcp-established-reorder", s.out));
    // Path MTU discovery: the echoed request is in flight when the message comes.
    let mut s = w();
    op::conn_seg(&mut s, flags::ACK | flags::PSH, 0, 0, &[b'p'; 200]);
    op::packet_too_big(&mut s, 1280, -1);
    op::conn_seg(&mut s, flags::ACK, 0, 0, &[]);
    out.push(("tcp-established-packet-too-big", s.out));
    let mut s = w();
    op::dhcp(&mut s, frames::dhcp::OFFER, 3600);
    op::dhcp(&mut s, frames::dhcp::ACK, 3600);
    op::ping4(&mut s, 3, 1);
    out.push(("dhcp-offer-ack", s.out));
    let mut s = w();
    op::dhcp(&mut s, frames::dhcp::OFFER, 60);
    op::dhcp(&mut s, frames::dhcp::ACK, 60);
    op::clock_s(&mut s, 40);
    op::dhcp(&mut s, frames::dhcp::NAK, 0);
    out.push(("dhcp-lease-nak", s.out));
    // A /32 lease whose router (the peer) lies outside it; the harness then pings the leased
    // address from the router (regressions/stack_ingress/dhcp-32-lease-off-link-router).
    let mut s = w();
    let mask_32 = [1, 4, 255, 255, 255, 255];
    op::dhcp_with(&mut s, frames::dhcp::OFFER, 3600, &mask_32);
    op::dhcp_with(&mut s, frames::dhcp::ACK, 3600, &mask_32);
    out.push(("dhcp-32-lease-off-link-router", s.out));
    let mut s = w();
    op::ra(&mut s, [0xfd, 0, 0, 1, 0, 0, 0, 0]);
    out.push(("ndp-ra", s.out));
    let mut s = w();
    op::udp(&mut s, 0x10, 5000, b"echo me over IPv6");
    op::udp(&mut s, 0, 5001, b"echo me over IPv4");
    op::clock_s(&mut s, 4);
    out.push(("udp-zero-copy-echo", s.out));
    let mut s = w();
    op::udp(&mut s, 3, 5002, b"to any port");
    out.push(("udp-closed-port", s.out));
    let mut s = w();
    let ns = frames::ndp_ns(PEER_MAC, PEER_V6, OUR_V6);
    op::raw(&mut s, &ns, false);
    let arp = frames::arp(1, PEER_MAC, PEER_V4, [0; 6], OUR_V4);
    op::raw(&mut s, &arp, true);
    out.push(("raw-ns-arp", s.out));
    let mut s = w();
    let syn = frames::tcp6_frame(50002, 80, 9, 0, flags::SYN, 1024, &[2, 4, 2, 0], &[]);
    op::raw(&mut s, &syn, true);
    op::clock_s(&mut s, 3);
    out.push(("raw-tcp6-syn-retransmit", s.out));
    out
}

fn classifier_neighbors() -> Seeds {
    let mut out = Vec::new();
    // classify(ARP request from 10.0.0.1 for us), lookup 10.0.0.1.
    let mut s = w();
    s.u8(0).u8(1).u8(0).u8(0).u8(0);
    s.u8(2).u8(0);
    out.push(("arp-learn-lookup", s.out));
    // lookup 10.0.0.3 (unknown: hold), egress, ARP reply from it, poll.
    let mut s = w();
    s.u8(2).u8(1).u8(40).u8(0);
    s.u8(5);
    s.u8(0).u8(1).u8(1).u8(0).u8(1);
    s.u8(6).u8(0).u8(0);
    out.push(("hold-resolve-send", s.out));
    // lookup fe80::2 (hold), egress, NA from it.
    let mut s = w();
    s.u8(2).u8(3).u8(40).u8(1);
    s.u8(5);
    s.u8(0).u8(2).u8(3);
    out.push(("ndp-hold-advert", s.out));
    // hold, then time out: egress at +1 s, +2 s, +3 s.
    let mut s = w();
    s.u8(2).u8(4).u8(10).u8(0);
    for _ in 0..3 {
        s.u8(5).u8(7).u16(1000);
    }
    s.u8(5).u8(6).u8(0).u8(0);
    out.push(("hold-timeout", s.out));
    // UDP v4 to port 7 and 9, v6 to port 7.
    let mut s = w();
    s.u8(0).u8(4).u8(0).short(b"x").bytes(&[0, b'z', 0, 0]);
    s.u8(0).u8(4).u8(1).long(b"nine").u16(5000).u8(0).u8(0);
    s.u8(0).u8(5).u8(0).long(b"six").u16(5001);
    out.push(("udp-deliver", s.out));
    // A raw NS for our address.
    let mut s = w();
    let ns = frames::ndp_ns(PEER_MAC, PEER_V6, OUR_V6);
    s.u8(0).u8(0).long(&ns);
    out.push(("raw-ns", s.out));
    out
}

fn buffer_leases() -> Seeds {
    let mut out = Vec::new();
    let mut s = w();
    // post, complete(60), lend, advance 14, drop; post, drop.
    s.u8(0)
        .u8(1)
        .u8(0)
        .u16(60)
        .u8(3)
        .u8(0)
        .u8(4)
        .u8(0)
        .u16(28)
        .u8(5)
        .u8(0);
    s.u8(0).u8(6).u8(0);
    out.push(("rx-lifecycle", s.out));
    let mut s = w();
    // alloc, set headroom 64, append 100, push_header 14, into_device, loop_back, drop.
    s.u8(7).u8(10).u8(0).u16(128).u8(8).u8(0).u16(100).u8(0xab);
    s.u8(9).u8(0).u16(14).u8(11).u8(0).u8(12).u8(0).u8(5).u8(0);
    out.push(("tx-loop-back", s.out));
    let mut s = w();
    for _ in 0..10 {
        s.u8(0).u8(7);
    }
    s.u8(15).u8(0).u8(15).u8(2);
    out.push(("exhaust-and-clear", s.out));
    let mut s = w();
    // complete_range past the slot; complete too long.
    s.u8(0)
        .u8(2)
        .u8(0)
        .u16(4000)
        .u16(4000)
        .u8(1)
        .u8(0)
        .u8(1)
        .u8(0)
        .u16(65535);
    out.push(("rx-bad-lengths", s.out));
    let mut s = w();
    // alloc, append 100, retain, send, push_header 14, into_device, loop_back (refused),
    // send again (pending: the device has it), completion, send, ACK (socket lets go),
    // the device drops its lease.
    s.u8(7)
        .u8(8)
        .u8(0)
        .u16(100)
        .u8(0xab)
        .u8(16)
        .u8(0)
        .u8(17)
        .u8(0);
    s.u8(9).u8(0).u16(14).u8(11).u8(0).u8(12).u8(0).u8(17).u8(0);
    s.u8(13).u8(0).u8(17).u8(0).u8(20).u8(0).u8(14).u8(0);
    out.push(("retained-send-ack", s.out));
    let mut s = w();
    // alloc, append 10, retain, append 20, advance 5, 30 bytes through the spare room, drop.
    s.u8(7).u8(8).u8(0).u16(10).u8(0x11).u8(16).u8(0);
    s.u8(18)
        .u8(0)
        .u16(20)
        .u8(0x22)
        .u8(19)
        .u8(0)
        .u16(5)
        .u8(23)
        .u8(0)
        .u16(30);
    s.u8(15).u8(4);
    out.push(("retained-append-advance", s.out));
    let mut s = w();
    // post, complete 60, append_from, fill, lend, append_from (refused), drop.
    s.u8(0).u8(1).u8(0).u16(60).u8(21).u8(0).short(b"tail");
    s.u8(22)
        .u8(0)
        .u8(0x33)
        .u8(3)
        .u8(0)
        .u8(21)
        .u8(0)
        .short(b"x")
        .u8(5)
        .u8(0);
    out.push(("rx-append-from", s.out));
    out
}

fn http_parser() -> Seeds {
    vec![
        (
            "curl-get",
            b"GET / HTTP/1.1\r\nHost: 10.0.0.2\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\n\r\n"
                .to_vec(),
        ),
        (
            "get-stats",
            b"GET /stats HTTP/1.1\r\nHost: zcnet\r\nConnection: close\r\n\r\n".to_vec(),
        ),
        (
            "post-body",
            b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello".to_vec(),
        ),
        (
            "http10",
            b"GET /index.html HTTP/1.0\r\n\r\n".to_vec(),
        ),
        (
            "chunked",
            b"PUT /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\nHost: y\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
                .to_vec(),
        ),
        ("bad-version", b"GET / HTTP/9.9\r\n\r\n".to_vec()),
    ]
}

fn iperf3_control() -> Seeds {
    let cookie = b"zcnetfuzzcookie00000000000000000000\0\0";
    let msg = |json: &str| {
        let mut m = (json.len() as u32).to_be_bytes().to_vec();
        m.extend_from_slice(json.as_bytes());
        m
    };
    let with = |parts: &[&[u8]]| {
        let mut v = cookie[..37].to_vec();
        for p in parts {
            v.extend_from_slice(p);
        }
        v
    };
    let tcp = msg(
        r#"{"tcp":true,"omit":0,"time":10,"num":0,"blockcount":0,"parallel":1,"len":131072,"pacing_timer":1000,"client_version":"3.12"}"#,
    );
    let udp = msg(
        r#"{"udp":true,"omit":0,"time":10,"num":0,"blockcount":0,"parallel":2,"len":1460,"bandwidth":1048576,"pacing_timer":1000,"udp_counters_64bit":1,"client_version":"3.12"}"#,
    );
    let reverse = msg(
        r#"{"tcp":true,"reverse":true,"time":5,"parallel":4,"len":131072,"get_server_output":1}"#,
    );
    let results = msg(
        r#"{"cpu_util_total":1.5,"cpu_util_user":1.0,"cpu_util_system":0.5,"sender_has_retransmits":1,"streams":[{"id":1,"bytes":1048576,"retransmits":0,"jitter":0,"errors":0,"packets":0,"start_time":0,"end_time":10.0}]}"#,
    );
    let mut udp_datagram = Vec::new();
    udp_datagram.extend_from_slice(&[0, 0, 0, 5, 0, 1, 0, 0, 0, 0, 0, 1]);
    vec![
        ("tcp-params", with(&[&tcp])),
        ("udp-params-datagram", with(&[&udp, &udp_datagram])),
        ("reverse-params-results", with(&[&reverse, &results])),
        ("udp-connect", with(&[&0x3637_3839u32.to_be_bytes()])),
        (
            "nested-json",
            with(&[&msg(
                r#"{"a":[1,2,{"b":[true,false,null,"\u00e9\n"]}],"c":-1.5e3}"#,
            )]),
        ),
    ]
}

fn tcp_fast_path() -> Seeds {
    use zcnet_fuzz::fast_path::encode;
    // Request/response: the client writes and sends, the server reads, answers, the client
    // reads; a millisecond per round.
    let round = [
        (0, 40),
        (8, 0),
        (16, 0),
        (5, 200),
        (1, 90),
        (9, 0),
        (17, 0),
        (9, 0),
        (17, 0),
        (4, 255),
        (8, 0),
        (16, 0),
        (34, 1),
    ];
    let rr: Vec<(u8, u8)> = round
        .iter()
        .copied()
        .cycle()
        .take(round.len() * 20)
        .collect();
    // Bulk from the client with a loss, a reordering and a duplicate, then SACK recovery.
    let mut bulk = vec![(34, 0)];
    for i in 0..40u8 {
        bulk.extend([(0, 64), (8, 0), (8, 0)]);
        match i % 10 {
            3 => bulk.push((24, 0)),
            5 => bulk.push((26, 0)),
            7 => bulk.push((28, 0)),
            _ => {}
        }
        bulk.extend([(16, 0), (16, 0), (5, 255), (9, 0), (17, 0), (34, 5)]);
    }
    // Small buffers: zero windows, the receive budget, window probes after a long wait.
    let mut small = Vec::new();
    for _ in 0..20 {
        small.extend([(0, 60), (8, 0), (16, 0), (8, 0), (16, 0), (9, 0), (17, 0)]);
        small.extend([(34, 250), (8, 0), (16, 0), (5, 3), (9, 0), (17, 0)]);
    }
    // Forged segments on an established connection: every kind of change.
    let mut forged = round.to_vec();
    forged.extend(round);
    for arg in (0..=255u8).step_by(9) {
        forged.extend([(30, arg), (9, 0), (17, 0), (0, 10), (8, 0), (16, 0)]);
    }
    vec![
        ("request-response", encode(0, &rr)),
        ("bulk-loss", encode(0, &bulk)),
        ("small-buffers", encode(2, &small)),
        ("forged", encode(1, &forged)),
    ]
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus")
}

fn seeds() -> Vec<(&'static str, Seeds)> {
    vec![
        ("stack_ingress", stack_ingress()),
        ("classifier_neighbors", classifier_neighbors()),
        ("buffer_leases", buffer_leases()),
        ("http_parser", http_parser()),
        ("iperf3_control", iperf3_control()),
        ("tcp_fast_path", tcp_fast_path()),
    ]
}

fn run(target: &str, data: &[u8]) {
    match target {
        "stack_ingress" => zcnet_fuzz::ingress::run(data),
        "classifier_neighbors" => zcnet_fuzz::neighbors::run(data),
        "buffer_leases" => zcnet_fuzz::leases::run(data),
        "http_parser" => zcnet_fuzz::parsers::http(data),
        "iperf3_control" => zcnet_fuzz::parsers::iperf3(data),
        "tcp_fast_path" => {
            zcnet_fuzz::fast_path::run(data);
        }
        _ => panic!("unknown target {target}"),
    }
}

/// Writes the seeds (with `ZCNET_WRITE_CORPUS=1`), checks that each is in the corpus, and
/// replays every file of every target's corpus and regressions (each `stack_ingress`
/// regression on a fresh stack, the corpus on the process's one).
#[test]
fn corpus_replays() {
    let write = std::env::var_os("ZCNET_WRITE_CORPUS").is_some();
    for (target, list) in seeds() {
        let dir = corpus_dir().join(target);
        if write {
            fs::create_dir_all(&dir).unwrap();
        }
        for (name, data) in list {
            let path = dir.join(format!("seed-{name}"));
            if write {
                fs::write(&path, &data).unwrap();
            }
            assert_eq!(
                fs::read(&path).ok().as_deref(),
                Some(&data[..]),
                "{} is out of date: ZCNET_WRITE_CORPUS=1 cargo test --test corpus",
                path.display()
            );
        }
    }
    let regressions = corpus_dir().parent().unwrap().join("regressions");
    for (target, _) in seeds() {
        for (dir, regression) in [
            (corpus_dir().join(target), false),
            (regressions.join(target), true),
        ] {
            let Ok(entries) = fs::read_dir(&dir) else {
                continue;
            };
            let mut files: Vec<_> = entries.map(|e| e.unwrap().path()).collect();
            files.sort();
            for f in files {
                let data = fs::read(&f).unwrap();
                if regression && target == "stack_ingress" {
                    // On a stack of its own, as when the fuzzer's crash file is run alone:
                    // the inputs before it on the process's stack could keep it from
                    // reaching what it reproduces.
                    zcnet_fuzz::ingress::Harness::new().run(&data);
                } else {
                    run(target, &data);
                }
            }
        }
    }
    let h = zcnet_fuzz::ingress::harness().stats();
    eprintln!("stack_ingress harness: {h:?}");
}
