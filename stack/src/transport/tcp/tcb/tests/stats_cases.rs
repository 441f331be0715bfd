// =========================================================================================//
// zcnet: the connection's statistics (`Tcb::stats`), over the helpers of `cases.rs`.
// =========================================================================================//

/// `n` milliseconds, as the statistics give durations.
fn ms(n: u64) -> core::time::Duration {
    core::time::Duration::from_millis(n)
}

/// The remote's segment carrying `payload` at `REMOTE_SEQ + 1 + at`, acknowledging everything
/// before `LOCAL_SEQ + 1 + acked`.
fn remote_data(at: usize, acked: usize, payload: &[u8]) -> TcpRepr<'_> {
    TcpRepr {
        seq_number: REMOTE_SEQ + 1 + at,
        ack_number: Some(LOCAL_SEQ + 1 + acked),
        payload,
        ..SEND_TEMPL
    }
}

/// Bytes and segments each way: payload counted once when sent and when acknowledged, bytes
/// received once readable, every segment in and out (the pure ACK included).
#[test]
fn test_stats_count_bytes_and_segments_each_way() {
    let mut s = socket_established();
    let st = s.stats();
    let c = st.counters;
    assert_eq!(
        (c.segments_sent, c.segments_received, c.bytes_sent),
        (0, 0, 0)
    );
    assert_eq!(st.state, State::Established);

    s.send_slice(b"abcdef").unwrap();
    recv!(s, [data_at(0, b"abcdef")]);
    let st = s.stats();
    let c = st.counters;
    assert_eq!((c.bytes_sent, c.bytes_acked, st.unacked), (6, 0, 6));
    assert_eq!((c.segments_sent, c.segments_received), (1, 0));

    // The remote acknowledges the six bytes and sends four; our ACK answers them.
    send!(s, remote_data(0, 6, b"wxyz"));
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 6,
            ack_number: Some(REMOTE_SEQ + 1 + 4),
            window_len: 60,
            ..RECV_TEMPL
        }]
    );
    let st = s.stats();
    let c = st.counters;
    assert_eq!((c.bytes_sent, c.bytes_acked, st.unacked), (6, 6, 0));
    assert_eq!(c.bytes_received, 4);
    assert_eq!((c.segments_sent, c.segments_received), (2, 1));
    assert_eq!((c.bytes_retransmitted, c.retransmitted_segments), (0, 0));
    assert_eq!((c.fast_recoveries, c.timeouts), (0, 0));
    assert_eq!(st.peer_window, 256);
    // No timestamps, the remote's default MSS (smaller than ours).
    assert_eq!(st.mss, 536);
    // No congestion control by default.
    assert_eq!((st.cwnd, st.ssthresh), (None, None));
}

/// Out-of-order data counts as received only when the hole before it fills; a duplicate counts
/// as a segment, not as bytes; the immediate ACKs `process` returns count as segments sent.
#[test]
fn test_stats_count_in_order_bytes_only() {
    let mut s = socket_established();
    let now = Instant::from_millis(0);
    assert!(send(&mut s, now, &remote_data(3, 0, b"def")).is_some());
    let st = s.stats();
    let c = st.counters;
    assert_eq!(
        (c.bytes_received, c.segments_received, c.segments_sent),
        (0, 1, 1)
    );

    assert!(send(&mut s, now, &remote_data(0, 0, b"abc")).is_some());
    let st = s.stats();
    let c = st.counters;
    assert_eq!(
        (c.bytes_received, c.segments_received, c.segments_sent),
        (6, 2, 2)
    );

    // "abc" again, now left of the window: acknowledged at once, nothing more received.
    assert!(send(&mut s, now, &remote_data(0, 0, b"abc")).is_some());
    let st = s.stats();
    let c = st.counters;
    assert_eq!(
        (c.bytes_received, c.segments_received, c.segments_sent),
        (6, 3, 3)
    );
}

/// SACK-based recovery (as in `test_sack_recovery_retransmits_only_the_holes`): one episode,
/// two segments and their six bytes sent again, the 24 bytes sent once.
#[test]
fn test_stats_count_a_recovery_episode() {
    let mut s = socket_sent_eight_segments(true);
    send!(s, time 1050, ack_with_sack(0, [sack_block(3, 9), sack_block(12, 24), None]));
    recv!(s, time 1050, [data_at(0, b"aaa"), data_at(9, b"DDD")]);
    send!(s, time 1060, ack_with_sack(24, [None; 3]));
    let st = s.stats();
    let c = st.counters;
    assert_eq!(
        (c.bytes_sent, c.bytes_retransmitted, c.bytes_acked),
        (24, 6, 24)
    );
    assert_eq!(
        (c.retransmitted_segments, c.fast_recoveries, c.timeouts),
        (2, 1, 0)
    );
    // Eight segments and two again; the first ACK (before the data), the SACK and the last.
    assert_eq!((c.segments_sent, c.segments_received), (10, 3));
}

/// A retransmission timeout (as in `test_data_retransmit_bursts`): counted once, both
/// segments and their twelve bytes sent again, and the timeout doubled.
#[test]
fn test_stats_count_a_retransmission_timeout() {
    let mut s = socket_established();
    s.remote_mss = 6;
    s.send_slice(b"abcdef012345").unwrap();
    recv!(s, time 0, Ok(data_at(0, b"abcdef")));
    recv!(s, time 0, Ok(data_at(6, b"012345")));
    recv_nothing!(s, time 0);
    assert_eq!(s.stats().rto, ms(1000));
    recv!(s, time 1000, Ok(data_at(0, b"abcdef")));
    recv!(s, time 1500, Ok(data_at(6, b"012345")));
    let st = s.stats();
    let c = st.counters;
    assert_eq!((c.bytes_sent, c.bytes_retransmitted), (12, 12));
    assert_eq!(
        (c.retransmitted_segments, c.timeouts, c.fast_recoveries),
        (2, 1, 0)
    );
    assert_eq!(c.segments_sent, 4);
    assert_eq!(st.rto, ms(2000));
    // Nothing was ever acknowledged: no measurement.
    assert_eq!((st.srtt, st.rttvar, st.min_rtt), (None, None, None));
}

/// The RTT estimate follows RFC 6298 from the segments timed: 50 ms, then 10 ms; the RTO is
/// SRTT + 4 RTTVAR (above a 100 ms floor).
#[test]
fn test_stats_show_the_rtt_estimate() {
    let mut s = socket_established();
    s.set_min_rto(Duration::from_millis(100));
    s.send_slice(b"abc").unwrap();
    recv!(s, time 1000, [data_at(0, b"abc")]);
    send!(s, time 1050, remote_data(0, 3, b""));
    let st = s.stats();
    assert_eq!(st.srtt, Some(ms(50)));
    assert_eq!(st.rttvar, Some(ms(25)));
    assert_eq!(st.min_rtt, Some(ms(50)));
    assert_eq!(st.rto, ms(50 + 4 * 25));

    s.send_slice(b"def").unwrap();
    recv!(s, time 2000, [data_at(3, b"def")]);
    send!(s, time 2010, remote_data(0, 6, b""));
    let st = s.stats();
    // SRTT = (7 * 50 + 10) / 8, RTTVAR = (3 * 25 + |50 - 10|) / 4, both rounded up.
    assert_eq!(st.srtt, Some(ms(45)));
    assert_eq!(st.rttvar, Some(ms(29)));
    assert_eq!(st.min_rtt, Some(ms(10)));
    assert_eq!(st.rto, ms(45 + 4 * 29));
}

/// With a congestion controller, its window and, after a loss, its slow-start threshold.
#[test]
fn test_stats_show_the_congestion_window() {
    let mut s = socket_established();
    s.set_congestion_control(CongestionControl::Reno);
    let st = s.stats();
    assert!(st.cwnd.is_some_and(|w| w > 0), "{st:?}");
    assert_eq!(st.ssthresh, None);
    s.send_slice(b"abc").unwrap();
    recv!(s, time 0, [data_at(0, b"abc")]);
    recv!(s, time 1000, [data_at(0, b"abc")]);
    let st = s.stats();
    let c = st.counters;
    assert_eq!(c.timeouts, 1);
    assert!(st.ssthresh.is_some(), "{st:?}");
}

/// A connection's congestion state does not carry over to the socket's next connection: after
/// a timeout set ssthresh, listening again (a new connection) starts a fresh controller of the
/// same algorithm.
#[test]
fn test_congestion_state_starts_over_with_the_next_connection() {
    let mut s = socket_established();
    s.set_congestion_control(CongestionControl::Cubic);
    let fresh = s.stats().cwnd;
    s.send_slice(b"abc").unwrap();
    recv!(s, time 0, [data_at(0, b"abc")]);
    recv!(s, time 1000, [data_at(0, b"abc")]);
    assert!(s.stats().ssthresh.is_some());
    s.abort();
    s.listen(LISTEN_END).unwrap();
    let st = s.stats();
    assert_eq!((st.cwnd, st.ssthresh), (fresh, None), "{st:?}");
    assert_eq!(s.congestion_control(), CongestionControl::Cubic);
}

/// An established socket that sent three bytes at 1 s, acknowledged 50 ms later.
fn socket_after_a_round_trip() -> TestSocket {
    let mut s = socket_established();
    s.send_slice(b"abc").unwrap();
    recv!(s, time 1000, [data_at(0, b"abc")]);
    send!(s, time 1050, remote_data(0, 3, b""));
    s
}

/// The counters and the estimate outlive the connection (`reset`, which TIME-WAIT's end
/// calls, keeps them) and start from zero when the socket listens again; a handshake that
/// the remote resets leaves the listening socket with nothing counted.
#[test]
fn test_stats_survive_the_close_until_the_socket_listens() {
    let mut s = socket_after_a_round_trip();
    s.reset();
    let st = s.stats();
    let c = st.counters;
    assert_eq!(st.state, State::Closed);
    assert_eq!((c.bytes_sent, c.bytes_acked, c.segments_sent), (3, 3, 1));
    assert_eq!(st.srtt, Some(ms(50)));

    s.listen(LISTEN_END).unwrap();
    let st = s.stats();
    let c = st.counters;
    assert_eq!(st.state, State::Listen);
    assert_eq!((c.bytes_sent, c.bytes_acked, c.segments_sent), (0, 0, 0));
    assert_eq!((st.srtt, st.min_rtt), (None, None));

    // A SYN counts for the connection it starts ...
    send!(
        s,
        TcpRepr {
            control: TcpControl::Syn,
            seq_number: REMOTE_SEQ,
            ack_number: None,
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.stats().counters.segments_received, 1);
    // ... and is forgotten when the remote resets the handshake.
    send!(
        s,
        TcpRepr {
            control: TcpControl::Rst,
            seq_number: REMOTE_SEQ + 1,
            ack_number: None,
            ..SEND_TEMPL
        }
    );
    let st = s.stats();
    let c = st.counters;
    assert_eq!(st.state, State::Listen);
    assert_eq!((c.segments_received, c.segments_sent), (0, 0));
}

/// Connecting again starts the counters and the estimate from zero too.
#[test]
fn test_stats_start_afresh_on_connect() {
    let mut s = socket_after_a_round_trip();
    s.reset();
    s.socket
        .connect(&mut s.cx, REMOTE_END, LOCAL_END.port)
        .unwrap();
    let st = s.stats();
    let c = st.counters;
    assert_eq!(st.state, State::SynSent);
    assert_eq!((c.bytes_sent, c.bytes_acked, c.segments_sent), (0, 0, 0));
    assert_eq!((st.srtt, st.min_rtt), (None, None));
}

/// Counters of two connections add up field by field.
#[test]
fn test_stats_counters_add_up() {
    let one = socket_after_a_round_trip().stats().counters;
    let mut two = socket_sent_eight_segments(false).stats().counters;
    assert_eq!(
        (one.bytes_sent, one.bytes_acked, one.segments_received),
        (3, 3, 1)
    );
    assert_eq!(
        (two.bytes_sent, two.bytes_acked, two.segments_received),
        (24, 0, 1)
    );
    two.add(&one);
    assert_eq!((two.bytes_sent, two.bytes_acked), (27, 3));
    assert_eq!((two.segments_sent, two.segments_received), (9, 2));
}
