// zcnet: super-segments (`TcpContext::with_gso`, `SendBuffer::take_run`, the deferral in
// `seq_to_transmit`).

/// What one `dispatch` with super-segments offered sent: `(sequence number, payload lengths
/// of its frames in order, control)`, or `None`. The chain is emptied, as `emit` does.
fn dispatch_run(s: &mut TestSocket, t: u64) -> Option<(TcpSeqNumber, Vec<usize>, TcpControl)> {
    s.cx.set_now(Instant::from_millis(t as i64));
    let mut got = None;
    let r: Result<(), ()> = s.socket.dispatch(&mut s.cx, |cx, (ip, repr), zc| {
        let mut lens: Vec<usize> = zc.iter().map(|f| f.len()).collect();
        if !repr.payload.is_empty() {
            lens.push(repr.payload.len());
        }
        if let Some(g) = cx.gso.as_mut() {
            lens.extend(g.tail.frames().map(|f| f.len()));
            drop(core::mem::take(&mut *g.tail));
        }
        let tcp_len = repr.header_len() + lens.iter().sum::<usize>();
        assert_eq!(ip.payload_len(), tcp_len, "the IP length counts every frame");
        got = Some((repr.seq_number, lens, repr.control.quash_psh()));
        Ok(())
    });
    assert_eq!(r, Ok(()));
    got
}

/// An established connection whose peer's window is `window`, its context offering
/// super-segments of up to 64 KiB.
fn socket_with_gso(tx_len: usize, window: usize) -> TestSocket {
    let mut s = socket_established_with_buffer_sizes(tx_len, 64);
    s.remote_win_len = window;
    let tail: &'static mut TxChain = Box::leak(Box::new(TxChain::new()));
    s.cx = test_context().with_gso(65_000, tail);
    s
}

/// One pass sends every whole frame the window allows: the first as `emit`'s frame, the others
/// in the chain; Nagle keeps the short last frame back while data is in flight, and it goes
/// once everything is acknowledged, with PSH.
#[test]
fn one_pass_sends_the_whole_frames_the_window_allows() {
    let mut s = socket_with_gso(4000, 100_000);
    let mss = s.data_mss();
    assert_eq!(s.send_slice(&[7u8; 2780]).unwrap(), 2780);
    let full = 2780 / mss;
    let (seq, lens, _) = dispatch_run(&mut s, 0).expect("a run");
    assert_eq!(seq, LOCAL_SEQ + 1);
    assert_eq!(lens, std::vec![mss; full], "whole frames, not the short last one");
    assert_eq!(s.remote_last_seq, LOCAL_SEQ + 1 + full * mss);
    assert!(dispatch_run(&mut s, 0).is_none(), "Nagle holds the short frame");
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + full * mss),
            window_len: 60_000,
            ..SEND_TEMPL
        }
    );
    let (seq, lens, _) = dispatch_run(&mut s, 0).expect("the short frame");
    assert_eq!((seq, lens), (LOCAL_SEQ + 1 + full * mss, std::vec![2780 - full * mss]));
}

/// The window limits a run to the frames that fit it whole.
#[test]
fn a_run_stops_at_the_peers_window() {
    let mut s = socket_with_gso(4000, 1200);
    let mss = s.data_mss();
    assert!(mss <= 600, "two frames fit the window");
    s.send_slice(&[1u8; 3000]).unwrap();
    let (_, lens, _) = dispatch_run(&mut s, 0).expect("a run");
    assert_eq!(lens.iter().sum::<usize>(), 1200 / mss * mss, "{lens:?}");
}

/// While the send queue is full and data is in flight, a run shorter than a quarter of what
/// may be in flight waits for the next acknowledgement; without super-segments offered it
/// goes at once.
#[test]
fn a_short_run_waits_for_the_next_ack_while_the_queue_is_full() {
    let mut s = socket_with_gso(4000, 100_000);
    let mss = s.data_mss();
    assert_eq!(s.send_slice(&[2u8; 4000]).unwrap(), 4000);
    let full = 4000 / mss;
    let (_, lens, _) = dispatch_run(&mut s, 0).expect("a run");
    assert_eq!(lens.len(), full);
    // One frame acknowledged; the application fills the queue again.
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + mss),
            window_len: 60_000,
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.send_slice(&[3u8; 4000]).unwrap(), mss);
    assert!(s.tx_buffer.is_full());
    assert!(dispatch_run(&mut s, 0).is_none(), "a short run waits");
    // Without super-segments the same data goes now, one segment per pass.
    let mut plain = core::mem::replace(&mut s.cx, test_context());
    let (seq, lens, _) = dispatch_run(&mut s, 0).expect("a segment");
    assert_eq!((seq, lens), (LOCAL_SEQ + 1 + full * mss, std::vec![mss]));
    // Offered again, and everything acknowledged: the rest goes, whatever its size.
    core::mem::swap(&mut s.cx, &mut plain);
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + (full + 1) * mss),
            window_len: 60_000,
            ..SEND_TEMPL
        }
    );
    let (seq, lens, _) = dispatch_run(&mut s, 0).expect("the rest");
    assert_eq!(seq, LOCAL_SEQ + 1 + (full + 1) * mss);
    assert_eq!(lens.iter().sum::<usize>(), 4000 + mss - (full + 1) * mss);
}
