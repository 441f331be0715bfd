//! The `http_parser` and `iperf3_control` targets: the examples' parsers of what a remote
//! client sends, fed anything.

use zcnet_examples::http;
use zcnet_examples::iperf3::{self, Params, UdpHeader};
use zcnet_examples::json;

/// `http_parser`: [`http::head_end`] finds the end of a request head inside the input, and
/// [`http::parse_head`] parses the head (or the whole input) without panicking; a request it
/// accepts has a method, a target and header values that are slices of the input, and its
/// status (on refusal) is one the server can answer with.
pub fn http(data: &[u8]) {
    let head = match http::head_end(data) {
        Some(n) => {
            assert!(n <= data.len(), "head_end past the input");
            &data[..n]
        }
        None => data,
    };
    match http::parse_head(head) {
        Ok(req) => {
            let _ = format!("{req:?}");
        }
        Err(status) => {
            assert!((400..600).contains(&status), "status {status}");
            assert!(!http::reason(status).is_empty());
            let _ = http::error_body(status);
        }
    }
}

/// `iperf3_control`: the input as an iperf3 client's control stream: a cookie (37 bytes),
/// then length-prefixed JSON messages (a big-endian `u32` length, at most
/// [`iperf3::MAX_JSON`], then the text), each parsed with [`json::parse`] and, when it parses,
/// checked as test parameters ([`Params::parse`], [`Params::from_json`]) and round-tripped
/// through [`json::Json::to_compact`]; the rest as UDP stream datagrams
/// ([`UdpHeader::parse`] in both counter widths, [`iperf3::udp_connect_reply`]).
pub fn iperf3(data: &[u8]) {
    let mut rest = data.get(iperf3::COOKIE_SIZE..).unwrap_or_default();
    while rest.len() >= 4 {
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if len > iperf3::MAX_JSON || rest.len() < 4 + len {
            break;
        }
        let body = &rest[4..4 + len];
        rest = &rest[4 + len..];
        let Ok(j) = json::parse(body) else {
            continue;
        };
        let text = j.to_compact();
        let again = json::parse(text.as_bytes()).expect("compact JSON parses again");
        assert_eq!(text, again.to_compact(), "compact JSON round-trips");
        if let Ok(p) = Params::parse(&j) {
            let _ = (p.streams(), p.streams_received());
        }
        let _ = Params::from_json(&j);
    }
    for wide in [false, true] {
        if let Some(h) = UdpHeader::parse(rest, wide) {
            let mut buf = [0u8; 16];
            assert!(h.write(&mut buf, wide));
            assert_eq!(
                UdpHeader::parse(&buf, wide),
                Some(h),
                "UDP header round-trips"
            );
        }
    }
    let _ = iperf3::udp_connect_reply(rest);
}
