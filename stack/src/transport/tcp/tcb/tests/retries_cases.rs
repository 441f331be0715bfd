// =========================================================================================//
// zcnet: connections that give up on a silent peer (`retries.rs`), over the helpers of
// `cases.rs`.
// =========================================================================================//

/// What one `dispatch` sent: when, the control flag (PSH quashed), the sequence number and
/// the payload's length.
type Sent = (i64, TcpControl, TcpSeqNumber, usize);

/// Runs the connection's timers, one `dispatch` at each deadline `poll_at` gives (calling
/// `answer` after each segment it sends, with the segment), until it sends a RST or
/// `limit_ms` passes. Returns what it sent.
fn run_timers(
    s: &mut TestSocket,
    limit_ms: i64,
    mut answer: impl FnMut(&mut TestSocket, &Sent),
) -> Vec<Sent> {
    let mut sent = Vec::new();
    let mut idle = 0;
    loop {
        let at = match s.socket.poll_at(&mut s.cx) {
            PollAt::Now => s.cx.now,
            PollAt::Time(t) => t,
            PollAt::Ingress => panic!("no deadline; sent {sent:?}"),
        };
        if at.total_millis() > limit_ms {
            return sent;
        }
        s.cx.set_now(at);
        let mut this = None;
        let r = s.socket.dispatch(&mut s.cx, |_, (_, r), zc| {
            let len = zc.as_ref().map_or(r.payload.len(), |f| f.len());
            this = Some((at.total_millis(), r.control.quash_psh(), r.seq_number, len));
            Ok::<(), ()>(())
        });
        assert_eq!(r, Ok(()));
        let Some(this) = this else {
            // Only timers ran (the first call starts the silence clock): nothing sent.
            idle += 1;
            assert!(idle < 3, "dispatch due but sending nothing; sent {sent:?}");
            continue;
        };
        idle = 0;
        sent.push(this);
        if this.1 == TcpControl::Rst {
            return sent;
        }
        answer(s, &this);
    }
}

/// The remote's ACK of nothing new, its window zero.
fn zero_window() -> TcpRepr<'static> {
    TcpRepr {
        window_len: 0,
        ..remote_data_at(0, b"")
    }
}

/// Data nobody acknowledges: sent again on each timeout (1 s, doubling to 60 s), and at the
/// first timeout past the bound (102.2 s for 8 retries) the connection sends a RST, closes
/// and reports that it gave up.
#[test]
fn test_retries_unacknowledged_data_gives_up_past_the_bound() {
    let mut s = socket_established();
    s.set_retries(8);
    s.send_slice(b"abcdef").unwrap();
    let sent = run_timers(&mut s, 1_000_000, |_, _| {});
    let times: Vec<i64> = sent.iter().map(|x| x.0).collect();
    // The first transmission, six timeouts, then the seventh timeout (123 s) is past 102.2 s.
    assert_eq!(
        times,
        [0, 1_000, 3_000, 7_000, 15_000, 31_000, 63_000, 123_000]
    );
    for x in &sent[..7] {
        assert_eq!(
            (x.1, x.2, x.3),
            (TcpControl::None, LOCAL_SEQ + 1, 6),
            "{sent:?}"
        );
    }
    assert_eq!(sent[7].1, TcpControl::Rst);
    assert_eq!(sent[7].2, LOCAL_SEQ + 1 + 6);
    assert_eq!(s.state, State::Closed);
    assert!(s.gave_up());
    // Nothing more: the RST went once.
    assert_eq!(s.socket.poll_at(&mut s.cx), PollAt::Ingress);
}

/// The default limit, Linux's `tcp_retries2` of 15: 522.2 s, reached at the timeout of 543 s.
/// An acknowledgement of some of the data on the way starts the count over.
#[test]
fn test_retries_default_bound_and_an_ack_starts_over() {
    let mut s = socket_established();
    assert_eq!(s.retries(), crate::transport::tcp::tcb::retries::TCP_RETRIES);
    s.send_slice(b"abcdef").unwrap();
    let sent = run_timers(&mut s, 2_000_000, |_, _| {});
    let last = sent.last().unwrap();
    assert_eq!((last.0, last.1), (543_000, TcpControl::Rst), "{sent:?}");
    assert!(sent[..sent.len() - 1].iter().all(|x| x.0 < 522_200));

    // Again with the first three bytes acknowledged at 63.5 s: the count starts at the timer
    // then started (RTO 60 s, its first expiry at 123.5 s), so the end comes at the first
    // timeout past 63.5 + 522.2 s.
    let mut s = socket_established();
    s.send_slice(b"abcdef").unwrap();
    let sent = run_timers(&mut s, 63_000, |_, _| {});
    assert_eq!(sent.last().unwrap().0, 63_000);
    send!(
        s,
        time 63_500,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 3),
            ..SEND_TEMPL
        }
    );
    let sent = run_timers(&mut s, 2_000_000, |_, _| {});
    let last = sent.last().unwrap();
    assert_eq!(last.1, TcpControl::Rst, "{sent:?}");
    assert!(
        (63_500 + 522_200..63_500 + 522_200 + 60_000).contains(&last.0),
        "{sent:?}"
    );
    assert!(s.gave_up());
}

/// A FIN nobody acknowledges gives up the same way (FIN-WAIT-1).
#[test]
fn test_retries_unacknowledged_fin_gives_up() {
    let mut s = socket_established();
    s.set_retries(8);
    s.close();
    let sent = run_timers(&mut s, 1_000_000, |_, _| {});
    assert_eq!(sent[0].1, TcpControl::Fin);
    let last = sent.last().unwrap();
    assert_eq!((last.0, last.1), (123_000, TcpControl::Rst), "{sent:?}");
    assert_eq!(s.state, State::Closed);
}

/// A zero window and no answer to the probes: `retries` probes (1 s, doubling to 60 s apart),
/// then, when the next is due, a RST and the end.
#[test]
fn test_retries_unanswered_zero_window_probes_give_up() {
    let mut s = socket_established();
    s.set_retries(8);
    send!(s, zero_window());
    s.send_slice(b"abcdef").unwrap();
    let sent = run_timers(&mut s, 1_000_000, |_, _| {});
    let probes: Vec<i64> = sent
        .iter()
        .filter(|x| x.1 == TcpControl::None && x.3 == 1)
        .map(|x| x.0)
        .collect();
    assert_eq!(
        probes,
        [1_000, 3_000, 7_000, 15_000, 31_000, 63_000, 123_000, 183_000],
        "{sent:?}"
    );
    let last = sent.last().unwrap();
    assert_eq!((last.0, last.1), (243_000, TcpControl::Rst), "{sent:?}");
    assert!(s.gave_up());
}

/// A peer that answers every probe with its window still zero keeps the connection, as on
/// Linux (the application bounds that with a deadline on its writes).
#[test]
fn test_retries_answered_zero_window_probes_go_on() {
    let mut s = socket_established();
    s.set_retries(8);
    let zero_window = zero_window();
    send!(s, zero_window);
    s.send_slice(b"abcdef").unwrap();
    let sent = run_timers(&mut s, 3_600_000, |s, x| {
        let at = Instant::from_millis(x.0 + 10);
        let _ = send(s, at, &zero_window);
    });
    assert!(sent.iter().all(|x| x.1 != TcpControl::Rst), "{sent:?}");
    assert!(sent.len() > 60, "probes for an hour: {}", sent.len());
    assert_eq!(s.state, State::Established);
    assert!(!s.gave_up());
}
