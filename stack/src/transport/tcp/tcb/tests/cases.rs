// =========================================================================================//
// Constants
// =========================================================================================//

const LOCAL_PORT: u16 = 80;
const REMOTE_PORT: u16 = 49500;
const LISTEN_END: IpListenEndpoint = IpListenEndpoint {
    addr: None,
    port: LOCAL_PORT,
};
const TUPLE: Tuple = Tuple {
    local: LOCAL_END,
    remote: REMOTE_END,
};
const LOCAL_SEQ: TcpSeqNumber = TcpSeqNumber(10000);
const REMOTE_SEQ: TcpSeqNumber = TcpSeqNumber(-10001);

const SEND_IP_TEMPL: IpRepr = IpReprIpvX(IpvXRepr {
    src_addr: LOCAL_ADDR,
    dst_addr: REMOTE_ADDR,
    next_header: IpProtocol::Tcp,
    payload_len: 20,
    hop_limit: 64,
});
const SEND_TEMPL: TcpRepr<'static> = TcpRepr {
    src_port: REMOTE_PORT,
    dst_port: LOCAL_PORT,
    control: TcpControl::None,
    seq_number: TcpSeqNumber(0),
    ack_number: Some(TcpSeqNumber(0)),
    window_len: 256,
    window_scale: None,
    max_seg_size: None,
    sack_permitted: false,
    sack_ranges: [None, None, None],
    timestamp: None,
    payload: &[],
};
const _RECV_IP_TEMPL: IpRepr = IpReprIpvX(IpvXRepr {
    src_addr: LOCAL_ADDR,
    dst_addr: REMOTE_ADDR,
    next_header: IpProtocol::Tcp,
    payload_len: 20,
    hop_limit: 64,
});
const RECV_TEMPL: TcpRepr<'static> = TcpRepr {
    src_port: LOCAL_PORT,
    dst_port: REMOTE_PORT,
    control: TcpControl::None,
    seq_number: TcpSeqNumber(0),
    ack_number: Some(TcpSeqNumber(0)),
    window_len: 64,
    window_scale: None,
    max_seg_size: None,
    sack_permitted: false,
    sack_ranges: [None, None, None],
    timestamp: None,
    payload: &[],
};

// =========================================================================================//
// Helper functions
// =========================================================================================//

/// A connection and the context its calls get.
struct TestSocket {
    /// The connection.
    socket: Tcb<'static>,
    /// The context (its clock is set by each helper).
    cx: TcpContext<'static>,
}

impl Deref for TestSocket {
    type Target = Tcb<'static>;
    fn deref(&self) -> &Self::Target {
        &self.socket
    }
}

impl DerefMut for TestSocket {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.socket
    }
}

#[track_caller]
fn send(socket: &mut TestSocket, timestamp: Instant, repr: &TcpRepr) -> Option<TcpRepr<'static>> {
    socket.cx.set_now(timestamp);

    let ip_repr = IpReprIpvX(IpvXRepr {
        src_addr: REMOTE_ADDR,
        dst_addr: LOCAL_ADDR,
        next_header: IpProtocol::Tcp,
        payload_len: repr.buffer_len(),
        hop_limit: 64,
    });

    assert!(socket.socket.accepts(&ip_repr, repr));

    // The payload in a frame, as ingress hands it over.
    let frame = (!repr.payload.is_empty()).then(|| test_frame(repr.payload));
    socket
        .socket
        .process(&mut socket.cx, &ip_repr, repr, frame)
        .map(|(_ip_repr, repr)| repr)
}

#[track_caller]
fn recv<F>(socket: &mut TestSocket, timestamp: Instant, mut f: F)
where
    F: FnMut(Result<TcpRepr, ()>),
{
    socket.cx.set_now(timestamp);

    let mut sent = 0;
    let result = socket
        .socket
        .dispatch(&mut socket.cx, |_, (ip_repr, tcp_repr), zc| {
            // A payload sent in place is the frame's data; show it in the repr as smoltcp does.
            let tcp_repr = match &zc {
                Some(frame) => TcpRepr {
                    payload: &frame[..],
                    ..*tcp_repr
                },
                None => *tcp_repr,
            };
            assert_eq!(ip_repr.next_header(), IpProtocol::Tcp);
            assert_eq!(ip_repr.src_addr(), LOCAL_ADDR.into());
            assert_eq!(ip_repr.dst_addr(), REMOTE_ADDR.into());
            assert_eq!(ip_repr.payload_len(), tcp_repr.buffer_len());

            sent += 1;
            f(Ok(tcp_repr));
            Ok(())
        });
    match result {
        Ok(()) => assert_eq!(sent, 1, "Exactly one packet should be sent"),
        Err(e) => f(Err(e)),
    }
}

#[track_caller]
fn recv_nothing(socket: &mut TestSocket, timestamp: Instant) {
    socket.cx.set_now(timestamp);

    let mut fail = false;
    let result: Result<(), ()> = socket.socket.dispatch(&mut socket.cx, |_, _, _| {
        fail = true;
        Ok(())
    });
    if fail {
        panic!("Should not send a packet")
    }

    assert_eq!(result, Ok(()))
}

#[collapse_debuginfo(yes)]
macro_rules! send {
    ($socket:ident, $repr:expr) =>
        (send!($socket, time 0, $repr));
    ($socket:ident, $repr:expr, $result:expr) =>
        (send!($socket, time 0, $repr, $result));
    ($socket:ident, time $time:expr, $repr:expr) =>
        (send!($socket, time $time, $repr, None));
    ($socket:ident, time $time:expr, $repr:expr, $result:expr) =>
        (assert_eq!(send(&mut $socket, Instant::from_millis($time), &$repr), $result));
}

#[collapse_debuginfo(yes)]
macro_rules! recv {
    ($socket:ident, [$( $repr:expr ),*]) => ({
        $( recv!($socket, Ok($repr)); )*
        recv_nothing!($socket)
    });
    ($socket:ident, time $time:expr, [$( $repr:expr ),*]) => ({
        $( recv!($socket, time $time, Ok($repr)); )*
        recv_nothing!($socket, time $time)
    });
    ($socket:ident, $result:expr) =>
        (recv!($socket, time 0, $result));
    ($socket:ident, time $time:expr, $result:expr) =>
        (recv(&mut $socket, Instant::from_millis($time), |result| {
            // Most of the time we don't care about the PSH flag.
            let result = result.map(|mut repr| {
                repr.control = repr.control.quash_psh();
                repr
            });
            assert_eq!(result, $result)
        }));
    ($socket:ident, time $time:expr, $result:expr, exact) =>
        (recv(&mut $socket, Instant::from_millis($time), |repr| assert_eq!(repr, $result)));
}

#[collapse_debuginfo(yes)]
macro_rules! recv_nothing {
    ($socket:ident) => (recv_nothing!($socket, time 0));
    ($socket:ident, time $time:expr) => (recv_nothing(&mut $socket, Instant::from_millis($time)));
}

#[collapse_debuginfo(yes)]
macro_rules! sanity {
    ($socket1:expr, $socket2:expr) => {{
        let (s1, s2) = ($socket1, $socket2);
        assert_eq!(s1.state, s2.state, "state");
        assert_eq!(s1.tuple, s2.tuple, "tuple");
        assert_eq!(s1.local_seq_no, s2.local_seq_no, "local_seq_no");
        assert_eq!(s1.remote_seq_no, s2.remote_seq_no, "remote_seq_no");
        assert_eq!(s1.remote_last_seq, s2.remote_last_seq, "remote_last_seq");
        assert_eq!(s1.remote_last_ack, s2.remote_last_ack, "remote_last_ack");
        assert_eq!(s1.remote_last_win, s2.remote_last_win, "remote_last_win");
        assert_eq!(s1.remote_win_len, s2.remote_win_len, "remote_win_len");
        assert_eq!(s1.timer, s2.timer, "timer");
    }};
}

fn socket() -> TestSocket {
    socket_with_buffer_sizes(64, 64)
}

fn socket_with_buffer_sizes(tx_len: usize, rx_len: usize) -> TestSocket {
    let rx_buffer = RecvBuffer::new(rx_len);
    let tx_buffer = send_buffer(tx_len);
    let mut socket = Tcb::new(rx_buffer, tx_buffer);
    socket.set_ack_delay(None);
    TestSocket {
        socket,
        cx: test_context(),
    }
}

fn socket_syn_received_with_buffer_sizes(tx_len: usize, rx_len: usize) -> TestSocket {
    let mut s = socket_with_buffer_sizes(tx_len, rx_len);
    s.state = State::SynReceived;
    s.tuple = Some(TUPLE);
    s.local_seq_no = LOCAL_SEQ;
    s.remote_seq_no = REMOTE_SEQ + 1;
    s.remote_last_seq = LOCAL_SEQ;
    s.remote_win_len = 256;
    s
}

fn socket_syn_received() -> TestSocket {
    socket_syn_received_with_buffer_sizes(64, 64)
}

fn socket_syn_sent_with_buffer_sizes(tx_len: usize, rx_len: usize) -> TestSocket {
    let mut s = socket_with_buffer_sizes(tx_len, rx_len);
    s.state = State::SynSent;
    s.tuple = Some(TUPLE);
    s.local_seq_no = LOCAL_SEQ;
    s.remote_last_seq = LOCAL_SEQ;
    s
}

fn socket_syn_sent() -> TestSocket {
    socket_syn_sent_with_buffer_sizes(64, 64)
}

fn socket_established_with_buffer_sizes(tx_len: usize, rx_len: usize) -> TestSocket {
    let mut s = socket_syn_received_with_buffer_sizes(tx_len, rx_len);
    s.state = State::Established;
    s.local_seq_no = LOCAL_SEQ + 1;
    s.remote_last_seq = LOCAL_SEQ + 1;
    let window = s.scaled_window();
    let shift = s.remote_win_shift;
    s.note_advertised(Some(REMOTE_SEQ + 1), window, shift);
    s
}

fn socket_established() -> TestSocket {
    socket_established_with_buffer_sizes(64, 64)
}

fn socket_fin_wait_1() -> TestSocket {
    let mut s = socket_established();
    s.state = State::FinWait1;
    s
}

fn socket_fin_wait_2() -> TestSocket {
    let mut s = socket_fin_wait_1();
    s.state = State::FinWait2;
    s.local_seq_no = LOCAL_SEQ + 1 + 1;
    s.remote_last_seq = LOCAL_SEQ + 1 + 1;
    s
}

fn socket_closing() -> TestSocket {
    let mut s = socket_fin_wait_1();
    s.state = State::Closing;
    s.remote_last_seq = LOCAL_SEQ + 1 + 1;
    s.remote_seq_no = REMOTE_SEQ + 1 + 1;
    s.timer = Timer::Retransmit {
        expires_at: Instant::from_millis_const(1000),
    };
    s
}

fn socket_time_wait(from_closing: bool) -> TestSocket {
    let mut s = socket_fin_wait_2();
    s.state = State::TimeWait;
    s.remote_seq_no = REMOTE_SEQ + 1 + 1;
    if from_closing {
        s.remote_last_ack = Some(REMOTE_SEQ + 1 + 1);
    }
    s.timer = Timer::Close {
        expires_at: Instant::from_secs(1) + CLOSE_DELAY,
    };
    s
}

fn socket_close_wait() -> TestSocket {
    let mut s = socket_established();
    s.state = State::CloseWait;
    s.remote_seq_no = REMOTE_SEQ + 1 + 1;
    s.remote_last_ack = Some(REMOTE_SEQ + 1 + 1);
    s
}

fn socket_last_ack() -> TestSocket {
    let mut s = socket_close_wait();
    s.state = State::LastAck;
    s
}

fn socket_recved() -> TestSocket {
    let mut s = socket_established();
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abcdef"[..],
            ..SEND_TEMPL
        }
    );
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 6),
            window_len: 58,
            ..RECV_TEMPL
        }]
    );
    s
}

// =========================================================================================//
// Tests for the CLOSED state.
// =========================================================================================//
#[test]
fn test_closed_reject() {
    let s = socket();
    assert_eq!(s.state, State::Closed);

    let tcp_repr = TcpRepr {
        control: TcpControl::Syn,
        ..SEND_TEMPL
    };
    assert!(!s.socket.accepts(&SEND_IP_TEMPL, &tcp_repr));
}

#[test]
fn test_closed_reject_after_listen() {
    let mut s = socket();
    s.listen(LOCAL_END).unwrap();
    s.close();

    let tcp_repr = TcpRepr {
        control: TcpControl::Syn,
        ..SEND_TEMPL
    };
    assert!(!s.socket.accepts(&SEND_IP_TEMPL, &tcp_repr));
}

#[test]
fn test_closed_close() {
    let mut s = socket();
    s.close();
    assert_eq!(s.state, State::Closed);
}

// =========================================================================================//
// Tests for the LISTEN state.
// =========================================================================================//
fn socket_listen() -> TestSocket {
    let mut s = socket();
    s.state = State::Listen;
    s.listen_endpoint = LISTEN_END;
    s
}

#[test]
fn test_listen_sack_option() {
    let mut s = socket_listen();
    send!(
        s,
        TcpRepr {
            control: TcpControl::Syn,
            seq_number: REMOTE_SEQ,
            ack_number: None,
            sack_permitted: false,
            ..SEND_TEMPL
        }
    );
    assert!(!s.remote_has_sack);
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: Some(REMOTE_SEQ + 1),
            max_seg_size: Some(BASE_MSS),
            ..RECV_TEMPL
        }]
    );

    let mut s = socket_listen();
    send!(
        s,
        TcpRepr {
            control: TcpControl::Syn,
            seq_number: REMOTE_SEQ,
            ack_number: None,
            sack_permitted: true,
            ..SEND_TEMPL
        }
    );
    assert!(s.remote_has_sack);
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: Some(REMOTE_SEQ + 1),
            max_seg_size: Some(BASE_MSS),
            sack_permitted: true,
            ..RECV_TEMPL
        }]
    );
}

#[test]
fn test_listen_syn_win_scale_buffers() {
    for (buffer_size, shift_amt) in &[
        (64, 0),
        (128, 0),
        (1024, 0),
        (65535, 0),
        (65536, 1),
        (65537, 1),
        (131071, 1),
        (131072, 2),
        (524287, 3),
        (524288, 4),
        (655350, 4),
        (1048576, 5),
    ] {
        let mut s = socket_with_buffer_sizes(64, *buffer_size);
        s.state = State::Listen;
        s.listen_endpoint = LISTEN_END;
        assert_eq!(s.remote_win_shift, *shift_amt);
        send!(
            s,
            TcpRepr {
                control: TcpControl::Syn,
                seq_number: REMOTE_SEQ,
                ack_number: None,
                window_scale: Some(0),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.remote_win_shift, *shift_amt);
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Syn,
                seq_number: LOCAL_SEQ,
                ack_number: Some(REMOTE_SEQ + 1),
                max_seg_size: Some(BASE_MSS),
                window_scale: Some(*shift_amt),
                window_len: u16::try_from(*buffer_size).unwrap_or(u16::MAX),
                ..RECV_TEMPL
            }]
        );
    }
}

#[test]
fn test_listen_syn_tiny_mss_is_clamped() {
    let mut s = socket_listen();
    send!(
        s,
        TcpRepr {
            control: TcpControl::Syn,
            seq_number: REMOTE_SEQ,
            ack_number: None,
            max_seg_size: Some(10),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::SynReceived);
    assert_eq!(s.remote_mss, MIN_REMOTE_MSS);
}

#[test]
fn test_listen_syn_zero_mss_is_ignored() {
    let mut s = socket_listen();
    send!(
        s,
        TcpRepr {
            control: TcpControl::Syn,
            seq_number: REMOTE_SEQ,
            ack_number: None,
            max_seg_size: Some(0),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::SynReceived);
    assert_eq!(s.remote_mss, DEFAULT_MSS);
}

#[test]
fn test_listen_sanity() {
    let mut s = socket();
    s.listen(LOCAL_PORT).unwrap();
    sanity!(s, socket_listen());
}

#[test]
fn test_listen_validation() {
    let mut s = socket();
    assert_eq!(s.listen(0), Err(ListenError::Unaddressable));
}

#[test]
fn test_listen_twice() {
    let mut s = socket();
    assert_eq!(s.listen(80), Ok(()));
    // multiple calls to listen are okay if its the same local endpoint and the state is still in listening
    assert_eq!(s.listen(80), Ok(()));
    s.set_state(State::SynReceived); // state change, simulate incoming connection
    assert_eq!(s.listen(80), Err(ListenError::InvalidState));
}

#[test]
fn test_listen_syn() {
    let mut s = socket_listen();
    send!(
        s,
        TcpRepr {
            control: TcpControl::Syn,
            seq_number: REMOTE_SEQ,
            ack_number: None,
            ..SEND_TEMPL
        }
    );
    sanity!(s, socket_syn_received());
}

#[test]
fn test_listen_syn_reject_ack() {
    let s = socket_listen();

    let tcp_repr = TcpRepr {
        control: TcpControl::Syn,
        seq_number: REMOTE_SEQ,
        ack_number: Some(LOCAL_SEQ),
        ..SEND_TEMPL
    };
    assert!(!s.socket.accepts(&SEND_IP_TEMPL, &tcp_repr));

    assert_eq!(s.state, State::Listen);
}

#[test]
fn test_listen_rst() {
    let s = socket_listen();
    let tcp_repr = TcpRepr {
        control: TcpControl::Rst,
        seq_number: REMOTE_SEQ,
        ack_number: None,
        ..SEND_TEMPL
    };
    assert!(!s.socket.accepts(&SEND_IP_TEMPL, &tcp_repr));
    assert_eq!(s.state, State::Listen);
}

#[test]
fn test_listen_close() {
    let mut s = socket_listen();
    s.close();
    assert_eq!(s.state, State::Closed);
}

// =========================================================================================//
// Tests for the SYN-RECEIVED state.
// =========================================================================================//

#[test]
fn test_syn_received_ack() {
    let mut s = socket_syn_received();
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: Some(REMOTE_SEQ + 1),
            max_seg_size: Some(BASE_MSS),
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::Established);
    sanity!(s, socket_established());
}

#[test]
fn test_syn_paused_ack() {
    let mut s = socket_syn_received();

    s.pause_synack(true);
    recv_nothing!(s);
    assert_eq!(s.state, State::SynReceived);

    s.pause_synack(false);
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: Some(REMOTE_SEQ + 1),
            max_seg_size: Some(BASE_MSS),
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::Established);
}

#[test]
fn test_syn_received_ack_too_low() {
    let mut s = socket_syn_received();
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: Some(REMOTE_SEQ + 1),
            max_seg_size: Some(BASE_MSS),
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ), // wrong
            ..SEND_TEMPL
        },
        Some(TcpRepr {
            control: TcpControl::Rst,
            seq_number: LOCAL_SEQ,
            ack_number: None,
            window_len: 0,
            ..RECV_TEMPL
        })
    );
    assert_eq!(s.state, State::SynReceived);
}

#[test]
fn test_syn_received_ack_too_high() {
    let mut s = socket_syn_received();
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: Some(REMOTE_SEQ + 1),
            max_seg_size: Some(BASE_MSS),
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 2), // wrong
            ..SEND_TEMPL
        },
        Some(TcpRepr {
            control: TcpControl::Rst,
            seq_number: LOCAL_SEQ + 2,
            ack_number: None,
            window_len: 0,
            ..RECV_TEMPL
        })
    );
    assert_eq!(s.state, State::SynReceived);
}

#[test]
fn test_syn_received_fin() {
    let mut s = socket_syn_received();
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: Some(REMOTE_SEQ + 1),
            max_seg_size: Some(BASE_MSS),
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            control: TcpControl::Fin,
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abcdef"[..],
            ..SEND_TEMPL
        }
    );
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 6 + 1),
            window_len: 58,
            ..RECV_TEMPL
        }]
    );
    assert_eq!(s.state, State::CloseWait);

    let mut s2 = socket_close_wait();
    s2.remote_last_ack = Some(REMOTE_SEQ + 1 + 6 + 1);
    s2.remote_last_win = 58;
    sanity!(s, s2);
}

#[test]
fn test_syn_received_rst() {
    let mut s = socket_syn_received();
    s.listen_endpoint = LISTEN_END;
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: Some(REMOTE_SEQ + 1),
            max_seg_size: Some(BASE_MSS),
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            control: TcpControl::Rst,
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::Listen);
    assert_eq!(s.listen_endpoint, LISTEN_END);
    assert_eq!(s.tuple, None);
}

#[test]
fn test_syn_received_no_window_scaling() {
    let mut s = socket_listen();
    send!(
        s,
        TcpRepr {
            control: TcpControl::Syn,
            seq_number: REMOTE_SEQ,
            ack_number: None,
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state(), State::SynReceived);
    assert_eq!(s.tuple, Some(TUPLE));
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: Some(REMOTE_SEQ + 1),
            max_seg_size: Some(BASE_MSS),
            window_scale: None,
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            window_scale: None,
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.remote_win_shift, 0);
    assert_eq!(s.remote_win_scale, None);
}

#[test]
fn test_syn_received_window_scaling() {
    for scale in 0..14 {
        let mut s = socket_listen();
        send!(
            s,
            TcpRepr {
                control: TcpControl::Syn,
                seq_number: REMOTE_SEQ,
                ack_number: None,
                window_scale: Some(scale),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.state(), State::SynReceived);
        assert_eq!(s.tuple, Some(TUPLE));
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Syn,
                seq_number: LOCAL_SEQ,
                ack_number: Some(REMOTE_SEQ + 1),
                max_seg_size: Some(BASE_MSS),
                window_scale: Some(0),
                ..RECV_TEMPL
            }]
        );
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1),
                window_scale: None,
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.remote_win_scale, Some(scale));
    }
}

#[test]
fn test_syn_received_close() {
    let mut s = socket_syn_received();
    s.close();
    assert_eq!(s.state, State::FinWait1);
}

// =========================================================================================//
// Tests for the SYN-SENT state.
// =========================================================================================//

#[test]
fn test_connect_validation() {
    let mut s = socket();
    assert_eq!(
        s.socket
            .connect(&mut s.cx, REMOTE_END, (IpvXAddress::UNSPECIFIED, 0)),
        Err(ConnectError::Unaddressable)
    );
    assert_eq!(
        s.socket
            .connect(&mut s.cx, REMOTE_END, (IpvXAddress::UNSPECIFIED, 1024)),
        Err(ConnectError::Unaddressable)
    );
    assert_eq!(
        s.socket
            .connect(&mut s.cx, (IpvXAddress::UNSPECIFIED, 0), LOCAL_END),
        Err(ConnectError::Unaddressable)
    );
    s.socket
        .connect(&mut s.cx, REMOTE_END, LOCAL_END)
        .expect("Connect failed with valid parameters");
    assert_eq!(s.tuple, Some(TUPLE));
}

#[test]
fn test_connect() {
    let mut s = socket();
    s.local_seq_no = LOCAL_SEQ;
    s.socket
        .connect(&mut s.cx, REMOTE_END, LOCAL_END.port)
        .unwrap();
    assert_eq!(s.tuple, Some(TUPLE));
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: None,
            max_seg_size: Some(BASE_MSS),
            window_scale: Some(0),
            sack_permitted: true,
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            control: TcpControl::Syn,
            seq_number: REMOTE_SEQ,
            ack_number: Some(LOCAL_SEQ + 1),
            max_seg_size: Some(BASE_MSS - 80),
            window_scale: Some(0),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.tuple, Some(TUPLE));
}

#[test]
fn test_connect_synack_tiny_mss_is_clamped() {
    let mut s = socket();
    s.local_seq_no = LOCAL_SEQ;
    s.socket
        .connect(&mut s.cx, REMOTE_END, LOCAL_END.port)
        .unwrap();
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: None,
            max_seg_size: Some(BASE_MSS),
            window_scale: Some(0),
            sack_permitted: true,
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            control: TcpControl::Syn,
            seq_number: REMOTE_SEQ,
            ack_number: Some(LOCAL_SEQ + 1),
            max_seg_size: Some(10),
            window_scale: Some(0),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::Established);
    assert_eq!(s.remote_mss, MIN_REMOTE_MSS);
}

#[test]
fn test_connect_synack_zero_mss_is_ignored() {
    let mut s = socket();
    s.local_seq_no = LOCAL_SEQ;
    s.socket
        .connect(&mut s.cx, REMOTE_END, LOCAL_END.port)
        .unwrap();
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: None,
            max_seg_size: Some(BASE_MSS),
            window_scale: Some(0),
            sack_permitted: true,
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            control: TcpControl::Syn,
            seq_number: REMOTE_SEQ,
            ack_number: Some(LOCAL_SEQ + 1),
            max_seg_size: Some(0),
            window_scale: Some(0),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::Established);
    assert_eq!(s.remote_mss, DEFAULT_MSS);
}

#[test]
fn test_connect_unspecified_local() {
    let mut s = socket();
    assert_eq!(s.socket.connect(&mut s.cx, REMOTE_END, 80), Ok(()));
}

#[test]
fn test_connect_specified_local() {
    let mut s = socket();
    assert_eq!(
        s.socket.connect(&mut s.cx, REMOTE_END, (REMOTE_ADDR, 80)),
        Ok(())
    );
}

#[test]
fn test_connect_twice() {
    let mut s = socket();
    assert_eq!(s.socket.connect(&mut s.cx, REMOTE_END, 80), Ok(()));
    assert_eq!(
        s.socket.connect(&mut s.cx, REMOTE_END, 80),
        Err(ConnectError::InvalidState)
    );
}

#[test]
fn test_syn_sent_sanity() {
    let mut s = socket();
    s.local_seq_no = LOCAL_SEQ;
    s.socket.connect(&mut s.cx, REMOTE_END, LOCAL_END).unwrap();
    sanity!(s, socket_syn_sent());
}

#[test]
fn test_syn_sent_syn_ack() {
    let mut s = socket_syn_sent();
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: None,
            max_seg_size: Some(BASE_MSS),
            window_scale: Some(0),
            sack_permitted: true,
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            control: TcpControl::Syn,
            seq_number: REMOTE_SEQ,
            ack_number: Some(LOCAL_SEQ + 1),
            max_seg_size: Some(BASE_MSS - 80),
            window_scale: Some(0),
            ..SEND_TEMPL
        }
    );
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            ..RECV_TEMPL
        }]
    );
    recv_nothing!(s, time 1000);
    assert_eq!(s.state, State::Established);
    sanity!(s, socket_established());
}

#[test]
fn test_syn_sent_syn_received_ack() {
    let mut s = socket_syn_sent();
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: None,
            max_seg_size: Some(BASE_MSS),
            window_scale: Some(0),
            sack_permitted: true,
            ..RECV_TEMPL
        }]
    );

    // A SYN packet changes the SYN-SENT state to SYN-RECEIVED.
    send!(
        s,
        TcpRepr {
            control: TcpControl::Syn,
            seq_number: REMOTE_SEQ,
            ack_number: None,
            max_seg_size: Some(BASE_MSS - 80),
            window_scale: Some(0),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::SynReceived);

    // The socket will then send a SYN|ACK packet.
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: Some(REMOTE_SEQ + 1),
            max_seg_size: Some(BASE_MSS),
            window_scale: Some(0),
            ..RECV_TEMPL
        }]
    );
    recv_nothing!(s);

    // The socket may retransmit the SYN|ACK packet.
    recv!(
        s,
        time 1001,
        Ok(TcpRepr {
            control: TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: Some(REMOTE_SEQ + 1),
            max_seg_size: Some(BASE_MSS),
            window_scale: Some(0),
            ..RECV_TEMPL
        })
    );

    // An ACK packet changes the SYN-RECEIVED state to ESTABLISHED.
    send!(
        s,
        TcpRepr {
            control: TcpControl::None,
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::Established);
    sanity!(s, socket_established());
}

#[test]
fn test_syn_sent_syn_ack_not_incremented() {
    let mut s = socket_syn_sent();
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: None,
            max_seg_size: Some(BASE_MSS),
            window_scale: Some(0),
            sack_permitted: true,
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            control: TcpControl::Syn,
            seq_number: REMOTE_SEQ,
            ack_number: Some(LOCAL_SEQ), // WRONG
            max_seg_size: Some(BASE_MSS - 80),
            window_scale: Some(0),
            ..SEND_TEMPL
        },
        Some(TcpRepr {
            control: TcpControl::Rst,
            seq_number: LOCAL_SEQ,
            ack_number: None,
            window_len: 0,
            ..RECV_TEMPL
        })
    );
    assert_eq!(s.state, State::SynSent);
}

#[test]
fn test_syn_sent_syn_received_rst() {
    let mut s = socket_syn_sent();
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: None,
            max_seg_size: Some(BASE_MSS),
            window_scale: Some(0),
            sack_permitted: true,
            ..RECV_TEMPL
        }]
    );

    // A SYN packet changes the SYN-SENT state to SYN-RECEIVED.
    send!(
        s,
        TcpRepr {
            control: TcpControl::Syn,
            seq_number: REMOTE_SEQ,
            ack_number: None,
            max_seg_size: Some(BASE_MSS - 80),
            window_scale: Some(0),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::SynReceived);

    // A RST packet changes the SYN-RECEIVED state to CLOSED.
    send!(
        s,
        TcpRepr {
            control: TcpControl::Rst,
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::Closed);
}

#[test]
fn test_syn_sent_rst() {
    let mut s = socket_syn_sent();
    send!(
        s,
        TcpRepr {
            control: TcpControl::Rst,
            seq_number: REMOTE_SEQ,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::Closed);
}

#[test]
fn test_syn_sent_rst_no_ack() {
    let mut s = socket_syn_sent();
    send!(
        s,
        TcpRepr {
            control: TcpControl::Rst,
            seq_number: REMOTE_SEQ,
            ack_number: None,
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::SynSent);
}

#[test]
fn test_syn_sent_rst_bad_ack() {
    let mut s = socket_syn_sent();
    send!(
        s,
        TcpRepr {
            control: TcpControl::Rst,
            seq_number: REMOTE_SEQ,
            ack_number: Some(TcpSeqNumber(1234)),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::SynSent);
}

#[test]
fn test_syn_sent_bad_ack() {
    let mut s = socket_syn_sent();
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: None,
            max_seg_size: Some(BASE_MSS),
            window_scale: Some(0),
            sack_permitted: true,
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            control: TcpControl::None, // Unexpected
            seq_number: REMOTE_SEQ,
            ack_number: Some(LOCAL_SEQ + 1), // Correct
            ..SEND_TEMPL
        }
    );

    // It should trigger no response and change no state
    recv!(s, []);
    assert_eq!(s.state, State::SynSent);
}

#[test]
fn test_syn_sent_bad_ack_seq_1() {
    let mut s = socket_syn_sent();
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: None,
            max_seg_size: Some(BASE_MSS),
            window_scale: Some(0),
            sack_permitted: true,
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            control: TcpControl::None,
            seq_number: REMOTE_SEQ,
            ack_number: Some(LOCAL_SEQ), // WRONG
            ..SEND_TEMPL
        },
        Some(TcpRepr {
            control: TcpControl::Rst,
            seq_number: LOCAL_SEQ, // matching the ack_number of the unexpected ack
            ack_number: None,
            window_len: 0,
            ..RECV_TEMPL
        })
    );

    // It should trigger a RST, and change no state
    assert_eq!(s.state, State::SynSent);
}

#[test]
fn test_syn_sent_bad_ack_seq_2() {
    let mut s = socket_syn_sent();
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: None,
            max_seg_size: Some(BASE_MSS),
            window_scale: Some(0),
            sack_permitted: true,
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            control: TcpControl::None,
            seq_number: REMOTE_SEQ,
            ack_number: Some(LOCAL_SEQ + 123456), // WRONG
            ..SEND_TEMPL
        },
        Some(TcpRepr {
            control: TcpControl::Rst,
            seq_number: LOCAL_SEQ + 123456, // matching the ack_number of the unexpected ack
            ack_number: None,
            window_len: 0,
            ..RECV_TEMPL
        })
    );

    // It should trigger a RST, and change no state
    assert_eq!(s.state, State::SynSent);
}

#[test]
fn test_syn_sent_close() {
    let mut s = socket();
    s.close();
    assert_eq!(s.state, State::Closed);
}

#[test]
fn test_syn_sent_sack_option() {
    let mut s = socket_syn_sent();
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: None,
            max_seg_size: Some(BASE_MSS),
            window_scale: Some(0),
            sack_permitted: true,
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            control: TcpControl::Syn,
            seq_number: REMOTE_SEQ,
            ack_number: Some(LOCAL_SEQ + 1),
            max_seg_size: Some(BASE_MSS - 80),
            window_scale: Some(0),
            sack_permitted: true,
            ..SEND_TEMPL
        }
    );
    assert!(s.remote_has_sack);

    let mut s = socket_syn_sent();
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: None,
            max_seg_size: Some(BASE_MSS),
            window_scale: Some(0),
            sack_permitted: true,
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            control: TcpControl::Syn,
            seq_number: REMOTE_SEQ,
            ack_number: Some(LOCAL_SEQ + 1),
            max_seg_size: Some(BASE_MSS - 80),
            window_scale: Some(0),
            sack_permitted: false,
            ..SEND_TEMPL
        }
    );
    assert!(!s.remote_has_sack);
}

#[test]
fn test_syn_sent_win_scale_buffers() {
    for (buffer_size, shift_amt) in &[
        (64, 0),
        (128, 0),
        (1024, 0),
        (65535, 0),
        (65536, 1),
        (65537, 1),
        (131071, 1),
        (131072, 2),
        (524287, 3),
        (524288, 4),
        (655350, 4),
        (1048576, 5),
    ] {
        let mut s = socket_with_buffer_sizes(64, *buffer_size);
        s.local_seq_no = LOCAL_SEQ;
        assert_eq!(s.remote_win_shift, *shift_amt);
        s.socket.connect(&mut s.cx, REMOTE_END, LOCAL_END).unwrap();
        recv!(
            s,
            [TcpRepr {
                control: TcpControl::Syn,
                seq_number: LOCAL_SEQ,
                ack_number: None,
                max_seg_size: Some(BASE_MSS),
                window_scale: Some(*shift_amt),
                window_len: u16::try_from(*buffer_size).unwrap_or(u16::MAX),
                sack_permitted: true,
                ..RECV_TEMPL
            }]
        );
    }
}

#[test]
fn test_syn_sent_syn_ack_no_window_scaling() {
    let mut s = socket_syn_sent_with_buffer_sizes(1048576, 1048576);
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: None,
            max_seg_size: Some(BASE_MSS),
            // scaling does NOT apply to the window value in SYN packets
            window_len: 65535,
            window_scale: Some(5),
            sack_permitted: true,
            ..RECV_TEMPL
        }]
    );
    assert_eq!(s.remote_win_shift, 5);
    send!(
        s,
        TcpRepr {
            control: TcpControl::Syn,
            seq_number: REMOTE_SEQ,
            ack_number: Some(LOCAL_SEQ + 1),
            max_seg_size: Some(BASE_MSS - 80),
            window_scale: None,
            window_len: 42,
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::Established);
    assert_eq!(s.remote_win_shift, 0);
    assert_eq!(s.remote_win_scale, None);
    assert_eq!(s.remote_win_len, 42);
}

#[test]
fn test_syn_sent_syn_ack_window_scaling() {
    let mut s = socket_syn_sent();
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: None,
            max_seg_size: Some(BASE_MSS),
            window_scale: Some(0),
            sack_permitted: true,
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            control: TcpControl::Syn,
            seq_number: REMOTE_SEQ,
            ack_number: Some(LOCAL_SEQ + 1),
            max_seg_size: Some(BASE_MSS - 80),
            window_scale: Some(7),
            window_len: 42,
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::Established);
    assert_eq!(s.remote_win_scale, Some(7));
    // scaling does NOT apply to the window value in SYN packets
    assert_eq!(s.remote_win_len, 42);
}

// =========================================================================================//
// Tests for the ESTABLISHED state.
// =========================================================================================//

#[test]
fn test_established_recv() {
    let mut s = socket_established();
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abcdef"[..],
            ..SEND_TEMPL
        }
    );
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 6),
            window_len: 58,
            ..RECV_TEMPL
        }]
    );
    // smoltcp: `assert_eq!(s.rx_buffer.dequeue_many(6), &b"abcdef"[..])`.
    assert_eq!(s.rx_buffer.peek(6), &b"abcdef"[..]);
    s.rx_buffer.dequeue_with(|_| (6, ()));
}

#[test]
fn test_peek_slice() {
    const BUF_SIZE: usize = 10;

    let send_buf = b"0123456";

    let mut s = socket_established_with_buffer_sizes(BUF_SIZE, BUF_SIZE);

    // Populate the recv buffer
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &send_buf[..],
            ..SEND_TEMPL
        }
    );

    // Peek into the recv buffer
    let mut peeked_buf = [0u8; BUF_SIZE];
    let actually_peeked = s.peek_slice(&mut peeked_buf[..]).unwrap();
    let mut recv_buf = [0u8; BUF_SIZE];
    let actually_recvd = s.recv_slice(&mut recv_buf[..]).unwrap();
    assert_eq!(
        &mut peeked_buf[..actually_peeked],
        &mut recv_buf[..actually_recvd]
    );
}

#[test]
fn test_peek_slice_buffer_wrap() {
    const BUF_SIZE: usize = 10;

    let send_buf = b"0123456789";

    let mut s = socket_established_with_buffer_sizes(BUF_SIZE, BUF_SIZE);

    // smoltcp: `enqueue_slice(&send_buf[..8])`, `dequeue_many(6)`, `enqueue_slice(&send_buf[..5])`.
    s.rx_buffer.push_bytes(&send_buf[..8]);
    s.rx_buffer.dequeue_with(|b| (b.len().min(6), ()));
    s.rx_buffer.push_bytes(&send_buf[..5]);

    let mut peeked_buf = [0u8; BUF_SIZE];
    let actually_peeked = s.peek_slice(&mut peeked_buf[..]).unwrap();
    let mut recv_buf = [0u8; BUF_SIZE];
    let actually_recvd = s.recv_slice(&mut recv_buf[..]).unwrap();
    assert_eq!(
        &mut peeked_buf[..actually_peeked],
        &mut recv_buf[..actually_recvd]
    );
}

fn setup_rfc2018_cases() -> (TestSocket, Vec<u8>) {
    // This is a utility function used by the tests for RFC 2018 cases. It configures a socket
    // in a particular way suitable for those cases.
    //
    // RFC 2018: Assume the left window edge is 5000 and that the data transmitter sends [...]
    // segments, each containing 500 data bytes.
    let mut s = socket_established_with_buffer_sizes(4000, 4000);
    s.remote_has_sack = true;
    // zcnet: a slot for each of the eight 500-byte segments of RFC 2018's window (the budget
    // derived from 4000 bytes, four slots, assumes segments near the MSS).
    s.rx_buffer.set_budget(8);

    // create a segment that is 500 bytes long
    let mut segment: Vec<u8> = Vec::with_capacity(500);

    // move the last ack to 5000 by sending ten of them
    for _ in 0..50 {
        segment.extend_from_slice(b"abcdefghij")
    }
    for offset in (0..5000).step_by(500) {
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1 + offset,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &segment,
                ..SEND_TEMPL
            }
        );
        recv!(
            s,
            [TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + offset + 500),
                window_len: 3500,
                ..RECV_TEMPL
            }]
        );
        s.recv(|data| {
            assert_eq!(data.len(), 500);
            assert_eq!(data, segment.as_slice());
            (500, ())
        })
        .unwrap();
    }
    assert_eq!(s.remote_last_win, 3500);
    (s, segment)
}

#[test]
fn test_established_rfc2018_cases() {
    // This test case verifies the exact scenarios described on pages 8-9 of RFC 2018. Please
    // ensure its behavior does not deviate from those scenarios.

    let (mut s, segment) = setup_rfc2018_cases();
    // RFC 2018:
    //
    // Case 2: The first segment is dropped but the remaining 7 are received.
    //
    // Upon receiving each of the last seven packets, the data receiver will return a TCP ACK
    // segment that acknowledges sequence number 5000 and contains a SACK option specifying one
    // block of queued data:
    //
    //   Triggering   ACK      Left Edge  Right Edge
    //   Segment
    //
    //   5000         (lost)
    //   5500         5000     5500       6000
    //   6000         5000     5500       6500
    //   6500         5000     5500       7000
    //   7000         5000     5500       7500
    //   7500         5000     5500       8000
    //   8000         5000     5500       8500
    //   8500         5000     5500       9000
    //
    for offset in (500..3500).step_by(500) {
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1 + offset + 5000,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &segment,
                ..SEND_TEMPL
            },
            Some(TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1 + 5000),
                window_len: 4000,
                sack_ranges: [
                    Some((
                        REMOTE_SEQ.0 as u32 + 1 + 5500,
                        REMOTE_SEQ.0 as u32 + 1 + 5500 + offset as u32
                    )),
                    None,
                    None
                ],
                ..RECV_TEMPL
            })
        );
    }
}

#[test]
fn test_established_sack_no_overflow_on_near_max_seqnumber() {
    let mut s = socket_established();
    s.remote_has_sack = true;
    s.remote_seq_no = TcpSeqNumber(-4);
    s.remote_last_ack = Some(TcpSeqNumber(-4));

    // Send an out-of-order segment 10 bytes past the expected sequence,
    // creating a 10-byte hole at the front of the assembler.
    send!(
        s,
        TcpRepr {
            seq_number: TcpSeqNumber(-4 + 10),
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"AAAAAAAAAA"[..],
            ..SEND_TEMPL
        },
        Some(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(TcpSeqNumber(-4)),
            window_len: 64,
            sack_ranges: [
                Some(((-4_i32 + 10) as u32, (-4_i32 + 20) as u32,)),
                None,
                None,
            ],
            ..RECV_TEMPL
        })
    );
}

#[test]
fn test_established_sliding_window_recv() {
    let mut s = socket_established();
    // Update our scaling parameters for a TCP with a scaled buffer.
    assert_eq!(s.rx_buffer.len(), 0);
    s.rx_buffer = RecvBuffer::new(262143);
    s.assembler = Assembler::new();
    s.remote_win_scale = Some(0);
    s.remote_last_win = 65535;
    s.remote_win_shift = 2;

    // Create a TCP segment that will mostly fill an IP frame.
    let mut segment: Vec<u8> = Vec::with_capacity(1400);
    for _ in 0..100 {
        segment.extend_from_slice(b"abcdefghijklmn")
    }
    assert_eq!(segment.len(), 1400);

    // Send the frame
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &segment,
            ..SEND_TEMPL
        }
    );

    // Ensure that the received window size is shifted right by 2.
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 1400),
            window_len: 65185,
            ..RECV_TEMPL
        }]
    );
}

#[test]
fn test_established_send() {
    let mut s = socket_established();
    // First roundtrip after establishing.
    s.send_slice(b"abcdef").unwrap();
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"abcdef"[..],
            ..RECV_TEMPL
        }]
    );
    assert_eq!(s.tx_buffer.len(), 6);
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 6),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.tx_buffer.len(), 0);
    // Second roundtrip.
    s.send_slice(b"foobar").unwrap();
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 6,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"foobar"[..],
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 6 + 6),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.tx_buffer.len(), 0);
}

#[test]
fn test_established_send_no_ack_send() {
    let mut s = socket_established();
    s.set_nagle_enabled(false);
    s.send_slice(b"abcdef").unwrap();
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"abcdef"[..],
            ..RECV_TEMPL
        }]
    );
    s.send_slice(b"foobar").unwrap();
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 6,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"foobar"[..],
            ..RECV_TEMPL
        }]
    );
}

#[test]
fn test_established_send_buf_gt_win() {
    let mut data = [0; 32];
    for (i, elem) in data.iter_mut().enumerate() {
        *elem = i as u8
    }

    let mut s = socket_established();
    s.remote_win_len = 16;
    s.send_slice(&data[..]).unwrap();
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &data[0..16],
            ..RECV_TEMPL
        }]
    );
}

#[test]
fn test_established_send_window_shrink() {
    let mut s = socket_established();

    // 6 octets fit on the remote side's window, so we send them.
    s.send_slice(b"abcdef").unwrap();
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"abcdef"[..],
            ..RECV_TEMPL
        }]
    );
    assert_eq!(s.tx_buffer.len(), 6);

    println!(
        "local_seq_no={} remote_win_len={} remote_last_seq={}",
        s.local_seq_no, s.remote_win_len, s.remote_last_seq
    );

    // - Peer doesn't ack them yet
    // - Sends data so we need to reply with an ACK
    // - ...AND and sends a window announcement that SHRINKS the window, so data we've
    //   previously sent is now outside the window. Yes, this is allowed by TCP.
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            window_len: 3,
            payload: &b"xyzxyz"[..],
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.tx_buffer.len(), 6);

    println!(
        "local_seq_no={} remote_win_len={} remote_last_seq={}",
        s.local_seq_no, s.remote_win_len, s.remote_last_seq
    );

    // More data should not get sent since it doesn't fit in the window
    s.send_slice(b"foobar").unwrap();
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 6,
            ack_number: Some(REMOTE_SEQ + 1 + 6),
            window_len: 64 - 6,
            ..RECV_TEMPL
        }]
    );
}

#[test]
fn test_established_receive_partially_outside_window() {
    let mut s = socket_established();

    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abc"[..],
            ..SEND_TEMPL
        }
    );

    s.recv(|data| {
        assert_eq!(data, b"abc");
        (3, ())
    })
    .unwrap();

    // Peer decides to retransmit (perhaps because the ACK was lost)
    // and also pushed data.
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abcdef"[..],
            ..SEND_TEMPL
        }
    );

    s.recv(|data| {
        assert_eq!(data, b"def");
        (3, ())
    })
    .unwrap();
}

#[test]
fn test_established_receive_partially_outside_window_fin() {
    let mut s = socket_established();

    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abc"[..],
            ..SEND_TEMPL
        }
    );

    s.recv(|data| {
        assert_eq!(data, b"abc");
        (3, ())
    })
    .unwrap();

    // Peer decides to retransmit (perhaps because the ACK was lost)
    // and also pushed data, and sent a FIN.
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            control: TcpControl::Fin,
            payload: &b"abcdef"[..],
            ..SEND_TEMPL
        }
    );

    s.recv(|data| {
        assert_eq!(data, b"def");
        (3, ())
    })
    .unwrap();

    // We should accept the FIN, because even though the last packet was partially
    // outside the receive window, there is no hole after adding its data to the assembler.
    assert_eq!(s.state, State::CloseWait);
}

#[test]
fn test_established_send_wrap() {
    let mut s = socket_established();
    let local_seq_start = TcpSeqNumber(i32::MAX - 1);
    s.local_seq_no = local_seq_start + 1;
    s.remote_last_seq = local_seq_start + 1;
    s.send_slice(b"abc").unwrap();
    recv!(s, time 1000, Ok(TcpRepr {
        seq_number: local_seq_start + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"abc"[..],
        ..RECV_TEMPL
    }));
}

#[test]
fn test_established_no_ack() {
    let mut s = socket_established();
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: None,
            ..SEND_TEMPL
        }
    );
}

#[test]
fn test_established_bad_ack() {
    let mut s = socket_established();
    // Already acknowledged data.
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(TcpSeqNumber(LOCAL_SEQ.0 - 1)),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.local_seq_no, LOCAL_SEQ + 1);
    // Data not yet transmitted.
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 10),
            ..SEND_TEMPL
        },
        Some(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            ..RECV_TEMPL
        })
    );
    assert_eq!(s.local_seq_no, LOCAL_SEQ + 1);
}

#[test]
fn test_established_bad_seq() {
    let mut s = socket_established();
    // Data outside of receive window.
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1 + 256,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        },
        Some(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            ..RECV_TEMPL
        })
    );
    assert_eq!(s.remote_seq_no, REMOTE_SEQ + 1);

    // Challenge ACKs are rate-limited, we don't get a second one immediately.
    send!(
        s,
        time 100,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1 + 256,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        }
    );

    // If we wait a bit, we do get a new one.
    send!(
        s,
        time 2000,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1 + 256,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        },
        Some(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            ..RECV_TEMPL
        })
    );
    assert_eq!(s.remote_seq_no, REMOTE_SEQ + 1);
}

#[test]
fn test_old_data_ack_not_rate_limited() {
    let mut s = socket_established();
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abcdef"[..],
            ..SEND_TEMPL
        }
    );
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 6),
            window_len: 58,
            ..RECV_TEMPL
        }]
    );
    s.recv(|data| {
        assert_eq!(data, b"abcdef");
        (6, ())
    })
    .unwrap();
    // The remote retransmits data we already acknowledged, e.g. because
    // the ACK above was lost. Each retransmission must elicit a duplicate
    // ACK, even within the challenge ACK rate limit window: withholding it
    // strands the remote in retransmission backoff.
    send!(
        s,
        time 100,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abcdef"[..],
            ..SEND_TEMPL
        },
        Some(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 6),
            ..RECV_TEMPL
        })
    );
    send!(
        s,
        time 200,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abcdef"[..],
            ..SEND_TEMPL
        },
        Some(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 6),
            ..RECV_TEMPL
        })
    );
}

#[test]
fn test_bad_seq_rst_dropped_silently() {
    let mut s = socket_established();
    // Out-of-window RSTs are silently dropped, per RFC 9293 (3.10.7.4)
    // and RFC 5961 (3.2): no challenge ACK, no state change.
    send!(
        s,
        TcpRepr {
            control: TcpControl::Rst,
            seq_number: REMOTE_SEQ + 1 + 256,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::Established);

    // A payload doesn't make it eligible for the data segment exemption
    // from challenge ACK rate limiting either: still no reply.
    send!(
        s,
        time 100,
        TcpRepr {
            control: TcpControl::Rst,
            seq_number: REMOTE_SEQ + 1 + 256,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abcdef"[..],
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::Established);
}

#[test]
fn test_bad_seq_syn_with_data_rate_limited() {
    let mut s = socket_established();
    // An out-of-window SYN carrying data must not be exempt from challenge
    // ACK rate limiting: RFC 5961 (4.2) says challenge ACKs sent in
    // response to SYNs should be throttled.
    send!(
        s,
        TcpRepr {
            control: TcpControl::Syn,
            seq_number: REMOTE_SEQ + 1 + 256,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abcdef"[..],
            ..SEND_TEMPL
        },
        Some(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            ..RECV_TEMPL
        })
    );

    // The second one within the rate limit window gets no reply.
    send!(
        s,
        time 100,
        TcpRepr {
            control: TcpControl::Syn,
            seq_number: REMOTE_SEQ + 1 + 256,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abcdef"[..],
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::Established);
}

#[test]
fn test_established_options_reduce_payload_when_local_mss_limited() {
    const EFFECTIVE_MSS: usize = 64;

    // construct socket where remote MSS is less than local MSS
    let mut s = socket_established();
    s.set_tsval_generator(Some(|| 1));
    s.remote_mss = EFFECTIVE_MSS;

    // Payload should contain 12 bytes less due to timestamp
    s.send_slice(&[0; EFFECTIVE_MSS]).unwrap();
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &[0; EFFECTIVE_MSS - 12],
            timestamp: Some(TcpTimestampRepr::new(1, 0)),
            ..RECV_TEMPL
        }]
    );
}

#[test]
fn test_established_options_reduce_payload_when_remote_mss_limited() {
    const EFFECTIVE_MSS: usize = BASE_MSS as usize;

    // construct socket where remote MSS is more than local MSS
    let mut s = socket_established_with_buffer_sizes(EFFECTIVE_MSS, 64);
    s.set_tsval_generator(Some(|| 1));
    s.remote_mss = 9999;
    s.remote_win_len = 9999;

    // Payload should contain 12 bytes less due to timestamp
    s.send_slice(&[0; EFFECTIVE_MSS]).unwrap();
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &[0; EFFECTIVE_MSS - 12],
            timestamp: Some(TcpTimestampRepr::new(1, 0)),
            ..RECV_TEMPL
        }]
    );
}

#[test]
fn test_established_tiny_mss_with_options_makes_progress() {
    // Connect with timestamps enabled to a remote advertising an absurdly
    // small MSS. Without the MIN_SND_MSS clamp, an MSS smaller than the
    // options length would result in an effective MSS of zero, sending
    // empty segments in a loop without ever making progress.
    let mut s = socket();
    s.set_tsval_generator(Some(|| 1));
    s.local_seq_no = LOCAL_SEQ;
    s.socket
        .connect(&mut s.cx, REMOTE_END, LOCAL_END.port)
        .unwrap();
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: None,
            max_seg_size: Some(BASE_MSS),
            window_scale: Some(0),
            sack_permitted: true,
            timestamp: Some(TcpTimestampRepr::new(1, 0)),
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            control: TcpControl::Syn,
            seq_number: REMOTE_SEQ,
            ack_number: Some(LOCAL_SEQ + 1),
            max_seg_size: Some(10),
            window_scale: Some(0),
            timestamp: Some(TcpTimestampRepr::new(500, 1)),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::Established);
    assert_eq!(s.remote_mss, MIN_REMOTE_MSS);

    s.send_slice(&[0; 64]).unwrap();
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &[0; MIN_REMOTE_MSS - 12],
            timestamp: Some(TcpTimestampRepr::new(1, 500)),
            ..RECV_TEMPL
        }]
    );
}

#[test]
fn test_established_fin() {
    let mut s = socket_established();
    send!(
        s,
        TcpRepr {
            control: TcpControl::Fin,
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        }
    );
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 1),
            ..RECV_TEMPL
        }]
    );
    assert_eq!(s.state, State::CloseWait);
    sanity!(s, socket_close_wait());
}

#[test]
fn test_established_fin_after_missing() {
    let mut s = socket_established();
    send!(
        s,
        TcpRepr {
            control: TcpControl::Fin,
            seq_number: REMOTE_SEQ + 1 + 6,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"123456"[..],
            ..SEND_TEMPL
        },
        Some(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            ..RECV_TEMPL
        })
    );
    assert_eq!(s.state, State::Established);
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abcdef"[..],
            ..SEND_TEMPL
        },
        Some(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 6 + 6),
            window_len: 52,
            ..RECV_TEMPL
        })
    );
    assert_eq!(s.state, State::Established);
}

#[test]
fn test_established_send_fin() {
    let mut s = socket_established();
    s.send_slice(b"abcdef").unwrap();
    send!(
        s,
        TcpRepr {
            control: TcpControl::Fin,
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::CloseWait);
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 1),
            payload: &b"abcdef"[..],
            ..RECV_TEMPL
        }]
    );
}

#[test]
fn test_established_rst() {
    let mut s = socket_established();
    send!(
        s,
        TcpRepr {
            control: TcpControl::Rst,
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::Closed);
}

#[test]
fn test_established_rst_no_ack() {
    let mut s = socket_established();
    send!(
        s,
        TcpRepr {
            control: TcpControl::Rst,
            seq_number: REMOTE_SEQ + 1,
            ack_number: None,
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::Closed);
}

#[test]
fn test_established_close() {
    let mut s = socket_established();
    s.close();
    assert_eq!(s.state, State::FinWait1);
    sanity!(s, socket_fin_wait_1());
}

#[test]
fn test_established_abort() {
    let mut s = socket_established();
    s.abort();
    assert_eq!(s.state, State::Closed);
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Rst,
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            ..RECV_TEMPL
        }]
    );
}

#[test]
fn test_established_rst_bad_seq() {
    let mut s = socket_established();
    // Out-of-window RSTs are dropped silently, per RFC 9293 (3.10.7.4)
    // and RFC 5961 (3.2).
    send!(
        s,
        TcpRepr {
            control: TcpControl::Rst,
            seq_number: REMOTE_SEQ, // Wrong seq
            ack_number: None,
            ..SEND_TEMPL
        }
    );

    assert_eq!(s.state, State::Established);

    // An in-window RST still resets the connection.
    send!(
        s,
        time 2000,
        TcpRepr {
            control: TcpControl::Rst,
            seq_number: REMOTE_SEQ + 1, // Correct seq
            ack_number: None,
            ..SEND_TEMPL
        }
    );

    assert_eq!(s.state, State::Closed);
}

#[test]
fn test_established_bad_seq_challenge_ack_updated() {
    let mut s = socket_established();
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ, // Wrong seq
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        },
        Some(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            ..RECV_TEMPL
        })
    );

    assert_eq!(s.state, State::Established);

    // Send something to advance seq by 1
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1, // correct seq
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"a"[..],
            ..SEND_TEMPL
        }
    );

    // Send the wrong seq again, check that the challenge ack is correctly updated
    // The ack number must be updated even if we don't call dispatch on the socket
    // See https://github.com/smoltcp-rs/smoltcp/issues/338
    send!(
        s,
        time 2000,
        TcpRepr {
            seq_number: REMOTE_SEQ, // Wrong seq
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        },
        Some(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 2), // this has changed
            window_len: 63,
            ..RECV_TEMPL
        })
    );
}

// =========================================================================================//
// Tests for the FIN-WAIT-1 state.
// =========================================================================================//

#[test]
fn test_fin_wait_1_fin_ack() {
    let mut s = socket_fin_wait_1();
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Fin,
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 1),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::FinWait2);
    sanity!(s, socket_fin_wait_2());
}

#[test]
fn test_fin_wait_1_fin_fin() {
    let mut s = socket_fin_wait_1();
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Fin,
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            control: TcpControl::Fin,
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::Closing);
    sanity!(s, socket_closing());
}

#[test]
fn test_fin_wait_1_fin_with_data_queued() {
    let mut s = socket_established();
    s.remote_win_len = 6;
    s.send_slice(b"abcdef123456").unwrap();
    s.close();
    recv!(
        s,
        Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"abcdef"[..],
            ..RECV_TEMPL
        })
    );
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 6),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::FinWait1);
}

#[test]
fn test_fin_wait_1_recv() {
    let mut s = socket_fin_wait_1();
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abc"[..],
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::FinWait1);
    s.recv(|data| {
        assert_eq!(data, b"abc");
        (3, ())
    })
    .unwrap();
}

#[test]
fn test_fin_wait_1_close() {
    let mut s = socket_fin_wait_1();
    s.close();
    assert_eq!(s.state, State::FinWait1);
}

// =========================================================================================//
// Tests for the FIN-WAIT-2 state.
// =========================================================================================//

#[test]
fn test_fin_wait_2_fin() {
    let mut s = socket_fin_wait_2();
    send!(s, time 1_000, TcpRepr {
        control: TcpControl::Fin,
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1 + 1),
        ..SEND_TEMPL
    });
    assert_eq!(s.state, State::TimeWait);
    sanity!(s, socket_time_wait(false));
}

#[test]
fn test_fin_wait_2_recv() {
    let mut s = socket_fin_wait_2();
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 1),
            payload: &b"abc"[..],
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::FinWait2);
    s.recv(|data| {
        assert_eq!(data, b"abc");
        (3, ())
    })
    .unwrap();
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 3),
            ..RECV_TEMPL
        }]
    );
}

#[test]
fn test_fin_wait_2_close() {
    let mut s = socket_fin_wait_2();
    s.close();
    assert_eq!(s.state, State::FinWait2);
}

// =========================================================================================//
// Tests for the CLOSING state.
// =========================================================================================//

#[test]
fn test_closing_ack_fin() {
    let mut s = socket_closing();
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 1),
            ..RECV_TEMPL
        }]
    );
    send!(s, time 1_000, TcpRepr {
        seq_number: REMOTE_SEQ + 1 + 1,
        ack_number: Some(LOCAL_SEQ + 1 + 1),
        ..SEND_TEMPL
    });
    assert_eq!(s.state, State::TimeWait);
    sanity!(s, socket_time_wait(true));
}

#[test]
fn test_closing_close() {
    let mut s = socket_closing();
    s.close();
    assert_eq!(s.state, State::Closing);
}

// =========================================================================================//
// Tests for the TIME-WAIT state.
// =========================================================================================//

#[test]
fn test_time_wait_from_fin_wait_2_ack() {
    let mut s = socket_time_wait(false);
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 1),
            ..RECV_TEMPL
        }]
    );
}

#[test]
fn test_time_wait_from_closing_no_ack() {
    let mut s = socket_time_wait(true);
    recv!(s, []);
}

#[test]
fn test_time_wait_close() {
    let mut s = socket_time_wait(false);
    s.close();
    assert_eq!(s.state, State::TimeWait);
}

#[test]
fn test_time_wait_retransmit() {
    let mut s = socket_time_wait(false);
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 1),
            ..RECV_TEMPL
        }]
    );
    send!(s, time 5_000, TcpRepr {
        control: TcpControl::Fin,
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1 + 1),
        ..SEND_TEMPL
    }, Some(TcpRepr {
        seq_number: LOCAL_SEQ + 1 + 1,
        ack_number: Some(REMOTE_SEQ + 1 + 1),
        ..RECV_TEMPL
    }));
    assert_eq!(
        s.timer,
        Timer::Close {
            expires_at: Instant::from_secs(5) + CLOSE_DELAY
        }
    );
}

#[test]
fn test_time_wait_timeout() {
    let mut s = socket_time_wait(false);
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 1),
            ..RECV_TEMPL
        }]
    );
    assert_eq!(s.state, State::TimeWait);
    recv_nothing!(s, time 60_000);
    assert_eq!(s.state, State::Closed);
}

// =========================================================================================//
// Tests for the CLOSE-WAIT state.
// =========================================================================================//

#[test]
fn test_close_wait_ack() {
    let mut s = socket_close_wait();
    s.send_slice(b"abcdef").unwrap();
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 1),
            payload: &b"abcdef"[..],
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1 + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 6),
            ..SEND_TEMPL
        }
    );
}

#[test]
fn test_close_wait_close() {
    let mut s = socket_close_wait();
    s.close();
    assert_eq!(s.state, State::LastAck);
    sanity!(s, socket_last_ack());
}

// =========================================================================================//
// Tests for the LAST-ACK state.
// =========================================================================================//
#[test]
fn test_last_ack_fin_ack() {
    let mut s = socket_last_ack();
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Fin,
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 1),
            ..RECV_TEMPL
        }]
    );
    assert_eq!(s.state, State::LastAck);
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1 + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 1),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::Closed);
}

#[test]
fn test_last_ack_ack_not_of_fin() {
    let mut s = socket_last_ack();
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Fin,
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 1),
            ..RECV_TEMPL
        }]
    );
    assert_eq!(s.state, State::LastAck);

    // A duplicate ACK (ack_number == SND.UNA, not the FIN ACK) must elicit a
    // challenge ACK per RFC 9293 §3.10.7.4 and must keep the state in LAST-ACK.
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1 + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        },
        Some(TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 1),
            ..RECV_TEMPL
        })
    );
    assert_eq!(s.state, State::LastAck);

    // ACK received of fin: socket should change to Closed.
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1 + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 1),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::Closed);
}

// RFC 9293 §3.10.7.4: duplicate ACK in LAST-ACK must elicit a challenge ACK,
// not be silently dropped.
#[test]
fn test_last_ack_duplicate_ack_challenge_ack() {
    let mut s = socket_last_ack();
    // Trigger dispatch so our FIN is sent and remote_last_seq advances.
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Fin,
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 1),
            ..RECV_TEMPL
        }]
    );
    assert_eq!(s.state, State::LastAck);

    // Remote re-sends an ACK for SND.UNA (not the FIN).  RFC 9293 requires a
    // challenge ACK in response so the remote can learn the current state.
    let challenge = send(
        &mut s,
        Instant::from_millis(0),
        &TcpRepr {
            seq_number: REMOTE_SEQ + 1 + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        },
    );
    assert_eq!(
        challenge,
        Some(TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 1),
            ..RECV_TEMPL
        }),
        "expected challenge ACK in response to duplicate ACK in LAST-ACK"
    );
    // State must remain LAST-ACK: we have not received the FIN ACK.
    assert_eq!(s.state, State::LastAck);

    // A second duplicate in the same second is rate-limited; the FIN ACK
    // must still be correctly accepted regardless.
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1 + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 1),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::Closed);
}

// A partial ACK in LAST-ACK (ack_len > 0 but not FIN ACK) advances SND.UNA
// without a challenge ACK; the FIN will be retransmitted by the timer.
#[test]
fn test_last_ack_partial_ack_no_challenge_ack() {
    // Build a LAST-ACK socket that has one byte of data still unacknowledged
    // before the FIN.  We manually wire the state so we can send a partial ACK.
    let mut s = socket_last_ack();
    // Push one byte into the tx buffer to simulate data that preceded the FIN.
    let _ = s.tx_buffer.enqueue_slice(None, b"x");
    // Mark it as already sent (remote_last_seq is past the data byte and the FIN).
    s.remote_last_seq = LOCAL_SEQ + 1 + 1 + 1; // data(1) + FIN(1)

    // Remote ACKs just the data byte, not the FIN (partial ACK).
    // ack_number = local_seq_no + 1  =>  ack_len = 1, ack_of_fin = false.
    // Per RFC 9293, a valid partial ACK should advance SND.UNA normally;
    // no challenge ACK should be emitted.
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1 + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 1), // acks the data byte, not FIN
            ..SEND_TEMPL
        }
    );
    // State remains LAST-ACK; FIN retransmission is handled by the timer.
    assert_eq!(s.state, State::LastAck);
    // SND.UNA has advanced to the partial ACK number.
    assert_eq!(s.local_seq_no, LOCAL_SEQ + 1 + 1);
}

#[test]
fn test_last_ack_close() {
    let mut s = socket_last_ack();
    s.close();
    assert_eq!(s.state, State::LastAck);
}

// =========================================================================================//
// Tests for transitioning through multiple states.
// =========================================================================================//

#[test]
fn test_listen() {
    let mut s = socket();
    s.listen(LISTEN_END).unwrap();
    assert_eq!(s.state, State::Listen);
}

#[test]
fn test_three_way_handshake() {
    let mut s = socket_listen();
    send!(
        s,
        TcpRepr {
            control: TcpControl::Syn,
            seq_number: REMOTE_SEQ,
            ack_number: None,
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state(), State::SynReceived);
    assert_eq!(s.tuple, Some(TUPLE));
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: Some(REMOTE_SEQ + 1),
            max_seg_size: Some(BASE_MSS),
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state(), State::Established);
    assert_eq!(s.local_seq_no, LOCAL_SEQ + 1);
    assert_eq!(s.remote_seq_no, REMOTE_SEQ + 1);
}

#[test]
fn test_remote_close() {
    let mut s = socket_established();
    send!(
        s,
        TcpRepr {
            control: TcpControl::Fin,
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::CloseWait);
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 1),
            ..RECV_TEMPL
        }]
    );
    s.close();
    assert_eq!(s.state, State::LastAck);
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Fin,
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 1),
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1 + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 1),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::Closed);
}

#[test]
fn test_local_close() {
    let mut s = socket_established();
    s.close();
    assert_eq!(s.state, State::FinWait1);
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Fin,
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 1),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::FinWait2);
    send!(
        s,
        TcpRepr {
            control: TcpControl::Fin,
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 1),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::TimeWait);
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 1),
            ..RECV_TEMPL
        }]
    );
}

#[test]
fn test_simultaneous_close() {
    let mut s = socket_established();
    s.close();
    assert_eq!(s.state, State::FinWait1);
    recv!(
        s,
        [TcpRepr {
            // due to reordering, this is logically located...
            control: TcpControl::Fin,
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            control: TcpControl::Fin,
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::Closing);
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 1),
            ..RECV_TEMPL
        }]
    );
    // ... at this point
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1 + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 1),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::TimeWait);
    recv!(s, []);
}

#[test]
fn test_simultaneous_close_combined_fin_ack() {
    let mut s = socket_established();
    s.close();
    assert_eq!(s.state, State::FinWait1);
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Fin,
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            control: TcpControl::Fin,
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 1),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::TimeWait);
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 1),
            ..RECV_TEMPL
        }]
    );
}

#[test]
fn test_simultaneous_close_raced() {
    let mut s = socket_established();
    s.close();
    assert_eq!(s.state, State::FinWait1);

    // Socket receives FIN before it has a chance to send its own FIN
    send!(
        s,
        TcpRepr {
            control: TcpControl::Fin,
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::Closing);

    // FIN + ack-of-FIN
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Fin,
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 1),
            ..RECV_TEMPL
        }]
    );
    assert_eq!(s.state, State::Closing);

    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1 + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 1),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::TimeWait);
    recv!(s, []);
}

#[test]
fn test_simultaneous_close_raced_with_data() {
    let mut s = socket_established();
    s.send_slice(b"abcdef").unwrap();
    s.close();
    assert_eq!(s.state, State::FinWait1);

    // Socket receives FIN before it has a chance to send its own data+FIN
    send!(
        s,
        TcpRepr {
            control: TcpControl::Fin,
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::Closing);

    // data + FIN + ack-of-FIN
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Fin,
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 1),
            payload: &b"abcdef"[..],
            ..RECV_TEMPL
        }]
    );
    assert_eq!(s.state, State::Closing);

    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1 + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 6 + 1),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::TimeWait);
    recv!(s, []);
}

#[test]
fn test_fin_with_data() {
    let mut s = socket_established();
    s.send_slice(b"abcdef").unwrap();
    s.close();
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Fin,
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"abcdef"[..],
            ..RECV_TEMPL
        }]
    )
}

#[test]
fn test_mutual_close_with_data_1() {
    let mut s = socket_established();
    s.send_slice(b"abcdef").unwrap();
    s.close();
    assert_eq!(s.state, State::FinWait1);
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Fin,
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"abcdef"[..],
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            control: TcpControl::Fin,
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 6 + 1),
            ..SEND_TEMPL
        }
    );
}

#[test]
fn test_mutual_close_with_data_2() {
    let mut s = socket_established();
    s.send_slice(b"abcdef").unwrap();
    s.close();
    assert_eq!(s.state, State::FinWait1);
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Fin,
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"abcdef"[..],
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 6 + 1),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::FinWait2);
    send!(
        s,
        TcpRepr {
            control: TcpControl::Fin,
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 6 + 1),
            ..SEND_TEMPL
        }
    );
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 6 + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 1),
            ..RECV_TEMPL
        }]
    );
    assert_eq!(s.state, State::TimeWait);
}

// =========================================================================================//
// Tests for retransmission on packet loss.
// =========================================================================================//

#[test]
fn test_duplicate_seq_ack() {
    let mut s = socket_recved();
    // remote retransmission
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abcdef"[..],
            ..SEND_TEMPL
        },
        Some(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 6),
            window_len: 58,
            ..RECV_TEMPL
        })
    );
}

/// zcnet: with SACK, the ACK of data received twice reports it in a D-SACK block first
/// (RFC 2883), ahead of the SACK blocks of data held past a hole.
#[test]
fn test_duplicate_data_is_reported_in_a_dsack_block() {
    let mut s = socket_recved();
    s.remote_has_sack = true;
    // "ghi" arrives past a hole ("xyz" is missing).
    send!(
        s,
        remote_data_at(9, b"ghi"),
        Some(our_ack_with_sack(6, [remote_block(9, 12), None, None]))
    );
    // The remote sends "abcdef" again.
    send!(
        s,
        remote_data_at(0, b"abcdef"),
        Some(our_ack_with_sack(
            6,
            [remote_block(0, 6), remote_block(9, 12), None]
        ))
    );
}

#[test]
fn test_data_retransmit() {
    let mut s = socket_established();
    s.send_slice(b"abcdef").unwrap();
    recv!(s, time 1000, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"abcdef"[..],
        ..RECV_TEMPL
    }));
    recv_nothing!(s, time 1050);
    recv!(s, time 2000, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"abcdef"[..],
        ..RECV_TEMPL
    }));
}

#[test]
fn test_congestion_window_limits_data_in_flight() {
    let mut s = socket_established_with_buffer_sizes(8192, 64);
    s.set_congestion_control(CongestionControl::Reno);
    s.remote_win_len = 65535;
    s.remote_mss = 1024;

    let data = [b'x'; 8192];
    s.send_slice(&data[..]).unwrap();

    // Reno's initial congestion window is 2048 bytes: only two
    // 1024-byte segments may be in flight, the rest must wait for ACKs.
    recv!(s, time 0, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload: &data[..1024],
        ..RECV_TEMPL
    }));
    recv!(s, time 0, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1 + 1024,
        ack_number: Some(REMOTE_SEQ + 1),
        payload: &data[..1024],
        ..RECV_TEMPL
    }));
    recv_nothing!(s, time 0);

    // ACKing one segment frees congestion window space and grows
    // cwnd (slow start), allowing further segments out.
    send!(s, time 10, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1 + 1024),
        window_len: 65535,
        ..SEND_TEMPL
    });
    recv!(s, time 10, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1 + 2048,
        ack_number: Some(REMOTE_SEQ + 1),
        payload: &data[..1024],
        ..RECV_TEMPL
    }));
}

#[test]
fn test_congestion_window_doesnt_limit_fast_retransmit() {
    let mut s = socket_established_with_buffer_sizes(8192, 64);
    s.set_congestion_control(CongestionControl::Reno);
    s.remote_win_len = 65535;
    s.remote_mss = 1024;

    // Normal ACK of previously received segment
    send!(s, time 0, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1),
        window_len: 65535,
        ..SEND_TEMPL
    });

    let data = [b'x'; 8192];
    s.send_slice(&data[..]).unwrap();

    // Reno's initial congestion window is 2048 bytes, allowing 2 segments
    recv!(s, time 0, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload: &data[..1024],
        ..RECV_TEMPL
    }));

    recv!(s, time 0, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1 + 1024,
        ack_number: Some(REMOTE_SEQ + 1),
        payload: &data[..1024],
        ..RECV_TEMPL
    }));
    recv_nothing!(s, time 0);

    // Send three duplicate ACKS, treating the first segment as lost
    send!(s, time 10, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1),
        window_len: 65535,
        ..SEND_TEMPL
    });
    send!(s, time 10, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1),
        window_len: 65535,
        ..SEND_TEMPL
    });
    send!(s, time 10, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1),
        window_len: 65535,
        ..SEND_TEMPL
    });

    // A fast retrnasmit should be sent and not be blocked by congestion control
    recv!(s, time 20, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload: &data[..1024],
        ..RECV_TEMPL
    }));
}

#[test]
fn test_data_retransmit_bursts() {
    let mut s = socket_established();
    s.remote_mss = 6;
    s.send_slice(b"abcdef012345").unwrap();

    recv!(s, time 0, Ok(TcpRepr {
        control:    TcpControl::None,
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"abcdef"[..],
        ..RECV_TEMPL
    }), exact);
    recv!(s, time 0, Ok(TcpRepr {
        control:    TcpControl::Psh,
        seq_number: LOCAL_SEQ + 1 + 6,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"012345"[..],
        ..RECV_TEMPL
    }), exact);
    recv_nothing!(s, time 0);

    recv_nothing!(s, time 50);

    recv!(s, time 1000, Ok(TcpRepr {
        control:    TcpControl::None,
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"abcdef"[..],
        ..RECV_TEMPL
    }), exact);
    recv!(s, time 1500, Ok(TcpRepr {
        control:    TcpControl::Psh,
        seq_number: LOCAL_SEQ + 1 + 6,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"012345"[..],
        ..RECV_TEMPL
    }), exact);
    recv_nothing!(s, time 1550);
}

#[test]
fn test_data_retransmit_bursts_half_ack() {
    let mut s = socket_established();
    s.remote_mss = 6;
    s.send_slice(b"abcdef012345").unwrap();

    recv!(s, time 0, Ok(TcpRepr {
        control:    TcpControl::None,
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"abcdef"[..],
        ..RECV_TEMPL
    }), exact);
    recv!(s, time 0, Ok(TcpRepr {
        control:    TcpControl::Psh,
        seq_number: LOCAL_SEQ + 1 + 6,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"012345"[..],
        ..RECV_TEMPL
    }), exact);
    // Acknowledge the first packet
    send!(s, time 5, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1 + 6),
        window_len: 6,
        ..SEND_TEMPL
    });
    // The second packet should be re-sent.
    recv!(s, time 1500, Ok(TcpRepr {
        control:    TcpControl::Psh,
        seq_number: LOCAL_SEQ + 1 + 6,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"012345"[..],
        ..RECV_TEMPL
    }), exact);

    recv_nothing!(s, time 1550);
}

#[test]
fn test_retransmit_timer_restart_on_partial_ack() {
    let mut s = socket_established();
    s.remote_mss = 6;
    s.send_slice(b"abcdef012345").unwrap();

    recv!(s, time 0, Ok(TcpRepr {
        control:    TcpControl::None,
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"abcdef"[..],
        ..RECV_TEMPL
    }), exact);
    recv!(s, time 0, Ok(TcpRepr {
        control:    TcpControl::Psh,
        seq_number: LOCAL_SEQ + 1 + 6,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"012345"[..],
        ..RECV_TEMPL
    }), exact);
    // Acknowledge the first packet
    send!(s, time 600, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1 + 6),
        window_len: 6,
        ..SEND_TEMPL
    });
    // The ACK of the first packet should restart the retransmit timer and delay a retransmission.
    recv_nothing!(s, time 2399);
    // The second packet should be re-sent.
    recv!(s, time 2400, Ok(TcpRepr {
        control:    TcpControl::Psh,
        seq_number: LOCAL_SEQ + 1 + 6,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"012345"[..],
        ..RECV_TEMPL
    }), exact);
}

#[test]
fn test_data_retransmit_bursts_half_ack_close() {
    let mut s = socket_established();
    s.remote_mss = 6;
    s.send_slice(b"abcdef012345").unwrap();
    s.close();

    recv!(s, time 0, Ok(TcpRepr {
        control:    TcpControl::None,
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"abcdef"[..],
        ..RECV_TEMPL
    }), exact);
    recv!(s, time 0, Ok(TcpRepr {
        control:    TcpControl::Fin,
        seq_number: LOCAL_SEQ + 1 + 6,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"012345"[..],
        ..RECV_TEMPL
    }), exact);
    // Acknowledge the first packet
    send!(s, time 5, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1 + 6),
        window_len: 6,
        ..SEND_TEMPL
    });
    // The second packet should be re-sent.
    recv!(s, time 1500, Ok(TcpRepr {
        control:    TcpControl::Fin,
        seq_number: LOCAL_SEQ + 1 + 6,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"012345"[..],
        ..RECV_TEMPL
    }), exact);

    recv_nothing!(s, time 1550);
}

#[test]
fn test_send_data_after_syn_ack_retransmit() {
    let mut s = socket_syn_received();
    recv!(s, time 50, Ok(TcpRepr {
        control:    TcpControl::Syn,
        seq_number: LOCAL_SEQ,
        ack_number: Some(REMOTE_SEQ + 1),
        max_seg_size: Some(BASE_MSS),
        ..RECV_TEMPL
    }));
    recv!(s, time 1050, Ok(TcpRepr { // retransmit
        control:    TcpControl::Syn,
        seq_number: LOCAL_SEQ,
        ack_number: Some(REMOTE_SEQ + 1),
        max_seg_size: Some(BASE_MSS),
        ..RECV_TEMPL
    }));
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state(), State::Established);
    s.send_slice(b"abcdef").unwrap();
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"abcdef"[..],
            ..RECV_TEMPL
        }]
    )
}

#[test]
fn test_established_retransmit_for_dup_ack() {
    let mut s = socket_established();
    // Duplicate ACKs do not replace the retransmission timer
    s.send_slice(b"abc").unwrap();
    recv!(s, time 1000, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"abc"[..],
        ..RECV_TEMPL
    }));
    // Retransmit timer is on because all data was sent
    assert_eq!(s.tx_buffer.len(), 3);
    // ACK nothing new
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        }
    );
    // Retransmit
    recv!(s, time 4000, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"abc"[..],
        ..RECV_TEMPL
    }));
}

#[test]
fn test_established_retransmit_reset_after_ack() {
    let mut s = socket_established();
    s.remote_win_len = 6;
    s.send_slice(b"abcdef").unwrap();
    s.send_slice(b"123456").unwrap();
    s.send_slice(b"ABCDEF").unwrap();
    recv!(s, time 1000, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"abcdef"[..],
        ..RECV_TEMPL
    }));
    send!(s, time 1005, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1 + 6),
        window_len: 6,
        ..SEND_TEMPL
    });
    recv!(s, time 1010, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1 + 6,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"123456"[..],
        ..RECV_TEMPL
    }));
    send!(s, time 1015, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1 + 6 + 6),
        window_len: 6,
        ..SEND_TEMPL
    });
    recv!(s, time 1020, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1 + 6 + 6,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"ABCDEF"[..],
        ..RECV_TEMPL
    }));
}

#[test]
fn test_established_queue_during_retransmission() {
    let mut s = socket_established();
    s.remote_mss = 6;
    s.send_slice(b"abcdef123456ABCDEF").unwrap();
    recv!(s, time 1000, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"abcdef"[..],
        ..RECV_TEMPL
    })); // this one is dropped
    recv!(s, time 1005, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1 + 6,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"123456"[..],
        ..RECV_TEMPL
    })); // this one is received
    recv!(s, time 1010, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1 + 6 + 6,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"ABCDEF"[..],
        ..RECV_TEMPL
    })); // also dropped
    recv!(s, time 3000, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"abcdef"[..],
        ..RECV_TEMPL
    })); // retransmission
    send!(s, time 3005, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1 + 6 + 6),
        ..SEND_TEMPL
    }); // acknowledgement of both segments
    recv!(s, time 3010, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1 + 6 + 6,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"ABCDEF"[..],
        ..RECV_TEMPL
    })); // retransmission of only unacknowledged data
}

#[test]
fn test_close_wait_retransmit_reset_after_ack() {
    let mut s = socket_close_wait();
    s.remote_win_len = 6;
    s.send_slice(b"abcdef").unwrap();
    s.send_slice(b"123456").unwrap();
    s.send_slice(b"ABCDEF").unwrap();
    recv!(s, time 1000, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1 + 1),
        payload:    &b"abcdef"[..],
        ..RECV_TEMPL
    }));
    send!(s, time 1005, TcpRepr {
        seq_number: REMOTE_SEQ + 1 + 1,
        ack_number: Some(LOCAL_SEQ + 1 + 6),
        window_len: 6,
        ..SEND_TEMPL
    });
    recv!(s, time 1010, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1 + 6,
        ack_number: Some(REMOTE_SEQ + 1 + 1),
        payload:    &b"123456"[..],
        ..RECV_TEMPL
    }));
    send!(s, time 1015, TcpRepr {
        seq_number: REMOTE_SEQ + 1 + 1,
        ack_number: Some(LOCAL_SEQ + 1 + 6 + 6),
        window_len: 6,
        ..SEND_TEMPL
    });
    recv!(s, time 1020, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1 + 6 + 6,
        ack_number: Some(REMOTE_SEQ + 1 + 1),
        payload:    &b"ABCDEF"[..],
        ..RECV_TEMPL
    }));
}

#[test]
fn test_fin_wait_1_retransmit_reset_after_ack() {
    let mut s = socket_established();
    s.remote_win_len = 6;
    s.send_slice(b"abcdef").unwrap();
    s.send_slice(b"123456").unwrap();
    s.send_slice(b"ABCDEF").unwrap();
    s.close();
    recv!(s, time 1000, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"abcdef"[..],
        ..RECV_TEMPL
    }));
    send!(s, time 1005, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1 + 6),
        window_len: 6,
        ..SEND_TEMPL
    });
    recv!(s, time 1010, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1 + 6,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"123456"[..],
        ..RECV_TEMPL
    }));
    send!(s, time 1015, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1 + 6 + 6),
        window_len: 6,
        ..SEND_TEMPL
    });
    recv!(s, time 1020, Ok(TcpRepr {
        control:    TcpControl::Fin,
        seq_number: LOCAL_SEQ + 1 + 6 + 6,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"ABCDEF"[..],
        ..RECV_TEMPL
    }));
}

#[test]
fn test_fast_retransmit_after_triple_duplicate_ack() {
    let mut s = socket_established();
    s.remote_mss = 3;

    // Normal ACK of previously received segment
    send!(s, time 0, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1),
        ..SEND_TEMPL
    });

    // Send a long string of text divided into several packets
    // because of previously received "window_len"
    s.send_slice(b"aaaBBBcccDDDeeeFFF").unwrap();

    // This packet is lost
    recv!(s, time 1000, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"aaa"[..],
        ..RECV_TEMPL
    }));

    // These packets arrive
    recv!(s, time 1005, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1 + 3,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"BBB"[..],
        ..RECV_TEMPL
    }));
    recv!(s, time 1010, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1 + (3 * 2),
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"ccc"[..],
        ..RECV_TEMPL
    }));
    recv!(s, time 1015, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1 + (3 * 3),
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"DDD"[..],
        ..RECV_TEMPL
    }));

    // Duplicate ACKs trigger fast rentramsit after 3rd successive one
    send!(s, time 1050, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1),
        ..SEND_TEMPL
    });
    send!(s, time 1055, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1),
        ..SEND_TEMPL
    });
    send!(s, time 1060, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1),
        ..SEND_TEMPL
    });

    // Fast retransmit should have triggered
    recv!(s, time 1100, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"aaa"[..],
        ..RECV_TEMPL
    }));

    // Transmission should continue as normal after re-transitting the first segment
    recv!(s, time 1105, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1 + (3 * 4),
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"eee"[..],
        ..RECV_TEMPL
    }));
    recv!(s, time 1110, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1 + (3 * 5),
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"FFF"[..],
        ..RECV_TEMPL
    }));

    // ACK all received segments
    send!(s, time 1120, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1 + (3 * 5)),
        ..SEND_TEMPL
    });
}

/// zcnet: a SACK block, `[from, to)` bytes past `base`.
fn block_past(base: TcpSeqNumber, from: usize, to: usize) -> Option<(u32, u32)> {
    Some(((base + from).0 as u32, (base + to).0 as u32))
}

/// zcnet: a SACK block as the ACK carries it, `[from, to)` bytes past `LOCAL_SEQ + 1`.
fn sack_block(from: usize, to: usize) -> Option<(u32, u32)> {
    block_past(LOCAL_SEQ + 1, from, to)
}

/// zcnet: a SACK block of the remote's bytes, `[from, to)` past `REMOTE_SEQ + 1`.
fn remote_block(from: usize, to: usize) -> Option<(u32, u32)> {
    block_past(REMOTE_SEQ + 1, from, to)
}

/// zcnet: a segment like `templ` at `seq` acknowledging `ack`, carrying `payload` and `sack`.
fn segment<'a>(
    templ: TcpRepr<'static>,
    seq: TcpSeqNumber,
    ack: TcpSeqNumber,
    payload: &'a [u8],
    sack: [Option<(u32, u32)>; 3],
) -> TcpRepr<'a> {
    TcpRepr {
        seq_number: seq,
        ack_number: Some(ack),
        payload,
        sack_ranges: sack,
        ..templ
    }
}

/// zcnet: the remote's ACK of the bytes before `LOCAL_SEQ + 1 + to`, with SACK blocks.
fn ack_with_sack(to: usize, sack: [Option<(u32, u32)>; 3]) -> TcpRepr<'static> {
    segment(SEND_TEMPL, REMOTE_SEQ + 1, LOCAL_SEQ + 1 + to, &[], sack)
}

/// zcnet: our segment carrying `payload` at `LOCAL_SEQ + 1 + at`.
fn data_at(at: usize, payload: &[u8]) -> TcpRepr<'_> {
    segment(RECV_TEMPL, LOCAL_SEQ + 1 + at, REMOTE_SEQ + 1, payload, [None; 3])
}

/// zcnet: the remote's segment carrying `payload` at `REMOTE_SEQ + 1 + at`.
fn remote_data_at(at: usize, payload: &[u8]) -> TcpRepr<'_> {
    segment(SEND_TEMPL, REMOTE_SEQ + 1 + at, LOCAL_SEQ + 1, payload, [None; 3])
}

/// zcnet: our ACK (window 58) of the remote's bytes before `REMOTE_SEQ + 1 + to`, with SACK
/// blocks.
fn our_ack_with_sack(to: usize, sack: [Option<(u32, u32)>; 3]) -> TcpRepr<'static> {
    TcpRepr {
        window_len: 58,
        ..segment(RECV_TEMPL, LOCAL_SEQ + 1, REMOTE_SEQ + 1 + to, &[], sack)
    }
}

/// zcnet: the eight 3-byte segments the tests below send.
const EIGHT_SEGMENTS: &[u8; 24] = b"aaaBBBcccDDDeeeFFFgggHHH";

/// zcnet: an established socket (with SACK or not) that sent [`EIGHT_SEGMENTS`], none
/// acknowledged yet.
fn socket_sent_eight_segments(sack: bool) -> TestSocket {
    let mut s = socket_established();
    s.remote_has_sack = sack;
    s.remote_mss = 3;
    // An ACK of nothing new: the duplicates counted later are of it.
    send!(s, time 0, ack_with_sack(0, [None; 3]));
    s.send_slice(EIGHT_SEGMENTS).unwrap();
    for (i, chunk) in EIGHT_SEGMENTS.chunks(3).enumerate() {
        recv!(s, time 1000, Ok(data_at(3 * i, chunk)));
    }
    recv_nothing!(s, time 1000);
    s
}

/// zcnet: SACK-based recovery (RFC 6675) sends again exactly the segments the SACK blocks show
/// missing (the first and the fourth), without waiting for duplicate ACKs, and nothing the
/// remote holds.
#[test]
fn test_sack_recovery_retransmits_only_the_holes() {
    let mut s = socket_sent_eight_segments(true);
    // "aaa" and "DDD" lost; the remote holds 3..9 and 12..24.
    send!(s, time 1050, ack_with_sack(0, [sack_block(3, 9), sack_block(12, 24), None]));
    recv!(s, time 1050, [data_at(0, b"aaa"), data_at(9, b"DDD")]);
    // Both arrive: everything is acknowledged, recovery is over.
    send!(s, time 1060, ack_with_sack(24, [None; 3]));
    assert!(!s.recovery.in_recovery());
    assert_eq!(s.retransmissions(), 2);
    recv_nothing!(s, time 1060);
}

/// zcnet: after a retransmission timeout the sender goes back to the first unacknowledged
/// byte but skips what the remote SACKed: one segment goes again, not eight.
#[test]
fn test_retransmission_timeout_skips_sacked_data() {
    let mut s = socket_sent_eight_segments(true);
    // Only "aaa" is missing, but 21 SACKed bytes make it lost: recovery sends it again ...
    send!(s, time 1050, ack_with_sack(0, [sack_block(3, 24), None, None]));
    recv!(s, time 1050, [data_at(0, b"aaa")]);
    // ... and that is lost too: the timeout sends it once more, and nothing after it.
    let rto = s.rtte.retransmission_timeout().total_millis() as i64;
    recv_nothing!(s, time 1050 + rto - 1);
    recv!(s, time 1050 + rto, [data_at(0, b"aaa")]);
}

/// zcnet: RACK-TLP's tail loss probe. The last two segments are lost: no duplicate ACK
/// comes, and two round trips after the last ACK the last segment goes again; its ACK (SACKing
/// it) shows RACK that the one before it, sent earlier, is lost: sent again long before the
/// retransmission timeout.
#[test]
fn test_tail_loss_probe_and_rack_recover_a_lost_tail() {
    let mut s = socket_sent_eight_segments(true);
    s.rtte.sample(50);
    // All but "gggHHH" arrive.
    send!(s, time 1050, ack_with_sack(18, [None; 3]));
    let rto_at = s.timer.retransmit_at().unwrap().total_millis();
    // Two smoothed RTTs after the ACK, sooner than the timeout.
    assert_eq!(s.rack.poll_at(), Some(Instant::from_millis(1150)));
    assert!(rto_at > 1150);
    recv_nothing!(s, time 1149);
    recv!(s, time 1150, [data_at(21, b"HHH")]);
    // One probe: nothing more until an ACK.
    recv_nothing!(s, time 1200);
    send!(s, time 1210, ack_with_sack(18, [sack_block(21, 24), None, None]));
    recv!(s, time 1210, [data_at(18, b"ggg")]);
    assert!(1210 < rto_at);
    send!(s, time 1260, ack_with_sack(24, [None; 3]));
    assert!(!s.recovery.in_recovery());
}

/// zcnet: a socket (RTT 50 ms) that sent [`EIGHT_SEGMENTS`], resent the two the SACK blocks
/// showed missing ("aaa" and "DDD") at 1050 ms, then sent "iii" at 1060 ms.
fn socket_resent_two_holes_then_sent_more() -> TestSocket {
    let mut s = socket_sent_eight_segments(true);
    s.rtte.sample(50);
    send!(s, time 1050, ack_with_sack(0, [sack_block(3, 9), sack_block(12, 24), None]));
    recv!(s, time 1050, [data_at(0, b"aaa"), data_at(9, b"DDD")]);
    s.send_slice(b"iii").unwrap();
    recv!(s, time 1060, [data_at(24, b"iii")]);
    s
}

/// zcnet: RACK finds a lost retransmission: new data sent after it is SACKed while it is not,
/// and once a round trip (and the reordering window) has passed since it was sent, it goes a
/// third time, without a timeout. RFC 6675 alone sends a hole once per recovery.
#[test]
fn test_rack_resends_a_lost_retransmission() {
    let mut s = socket_resent_two_holes_then_sent_more();
    // "DDD" and "iii" arrive, the second "aaa" does not.
    send!(s, time 1120, ack_with_sack(0, [sack_block(3, 27), None, None]));
    // Lost once 1050 + RACK's RTT (60, of "iii") + a quarter of the least RTT (50) passed.
    assert_eq!(s.rack.poll_at(), Some(Instant::from_micros(1_122_500)));
    recv_nothing!(s, time 1122);
    recv!(s, time 1123, [data_at(0, b"aaa")]);
    send!(s, time 1180, ack_with_sack(27, [None; 3]));
    assert!(!s.recovery.in_recovery());
}

/// zcnet: a D-SACK widens RACK's reordering window (RFC 8985 section 6.2 step 4). As in the
/// test above, but the ACK that SACKs "iii" also reports the first "DDD" received twice (a
/// D-SACK block inside the second block, RFC 2883): the resent "DDD" was spurious, the path
/// reorders, and the lost "aaa" waits half the least RTT on top of RACK's RTT, not a quarter.
#[test]
fn test_dsack_widens_the_reordering_window() {
    let mut s = socket_resent_two_holes_then_sent_more();
    send!(s, time 1120, ack_with_sack(0, [sack_block(9, 12), sack_block(3, 27), None]));
    // 1050 + RACK's RTT (60) + two quarters of the least RTT (50).
    assert_eq!(s.rack.poll_at(), Some(Instant::from_millis(1135)));
    recv_nothing!(s, time 1134);
    recv!(s, time 1135, [data_at(0, b"aaa")]);
    send!(s, time 1190, ack_with_sack(27, [None; 3]));
    assert!(!s.recovery.in_recovery());
}

/// zcnet: during recovery, when nothing answers for two round trips after the holes were sent
/// again, the loss probe sends the left edge again (the send queue may hold nothing new to
/// show RACK a lost retransmission); one probe, then the retransmission timeout.
#[test]
fn test_loss_probe_in_recovery_resends_the_left_edge() {
    let mut s = socket_sent_eight_segments(true);
    s.rtte.sample(50);
    send!(s, time 1050, ack_with_sack(0, [sack_block(3, 24), None, None]));
    recv!(s, time 1050, [data_at(0, b"aaa")]);
    let rto_at = s.timer.retransmit_at().unwrap().total_millis();
    assert_eq!(rto_at, 1250);
    recv_nothing!(s, time 1149);
    recv!(s, time 1150, [data_at(0, b"aaa")]);
    recv_nothing!(s, time 1249);
    recv!(s, time 1250, [data_at(0, b"aaa")]);
    recv_nothing!(s, time 1251);
}

/// zcnet: without SACK, NewReno (RFC 6582): a partial ACK during recovery sends the next
/// missing segment at once instead of waiting for three more duplicate ACKs or the timeout.
#[test]
fn test_newreno_partial_ack_retransmits_the_next_hole() {
    let mut s = socket_sent_eight_segments(false);
    for t in [1050, 1055, 1060] {
        send!(s, time t, ack_with_sack(0, [None; 3]));
    }
    recv!(s, time 1100, [data_at(0, b"aaa")]);
    // "DDD" was lost too: the ACK stops at it.
    send!(s, time 1110, ack_with_sack(9, [None; 3]));
    recv!(s, time 1110, [data_at(9, b"DDD")]);
    send!(s, time 1120, ack_with_sack(24, [None; 3]));
    assert!(!s.recovery.in_recovery());
}

#[test]
fn test_fast_retransmit_duplicate_detection_with_data() {
    let mut s = socket_established();

    s.send_slice(b"abc").unwrap(); // This is lost
    recv!(s, time 1000, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"abc"[..],
        ..RECV_TEMPL
    }));

    // Normal ACK of previously received segment
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        }
    );
    // First duplicate
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        }
    );
    // Second duplicate
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        }
    );

    assert_eq!(s.local_rx_dup_acks, 2, "duplicate ACK counter is not set");

    // This packet has content, hence should not be detected
    // as a duplicate ACK and should reset the duplicate ACK count
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"xxxxxx"[..],
            ..SEND_TEMPL
        }
    );

    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 3,
            ack_number: Some(REMOTE_SEQ + 1 + 6),
            window_len: 58,
            ..RECV_TEMPL
        }]
    );

    assert_eq!(
        s.local_rx_dup_acks, 0,
        "duplicate ACK counter is not reset when receiving data"
    );
}

#[test]
fn test_fast_retransmit_duplicate_detection_with_window_update() {
    let mut s = socket_established();

    s.send_slice(b"abc").unwrap(); // This is lost
    recv!(s, time 1000, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"abc"[..],
        ..RECV_TEMPL
    }));

    // Normal ACK of previously received segment
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        }
    );
    // First duplicate
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        }
    );
    // Second duplicate
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        }
    );

    assert_eq!(s.local_rx_dup_acks, 2, "duplicate ACK counter is not set");

    // This packet has a window update, hence should not be detected
    // as a duplicate ACK and should reset the duplicate ACK count
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            window_len: 400,
            ..SEND_TEMPL
        }
    );

    assert_eq!(
        s.local_rx_dup_acks, 0,
        "duplicate ACK counter is not reset when receiving a window update"
    );
}

#[test]
fn test_fast_retransmit_duplicate_detection() {
    let mut s = socket_established();
    s.remote_mss = 6;

    // Normal ACK of previously received segment
    send!(s, time 0, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1),
        ..SEND_TEMPL
    });

    // First duplicate, should not be counted as there is nothing to resend
    send!(s, time 0, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1),
        ..SEND_TEMPL
    });

    assert_eq!(
        s.local_rx_dup_acks, 0,
        "duplicate ACK counter is set but wound not transmit data"
    );

    // Send a long string of text divided into several packets
    // because of small remote_mss
    s.send_slice(b"xxxxxxyyyyyywwwwwwzzzzzz").unwrap();

    // This packet is reordered in network
    recv!(s, time 1000, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"xxxxxx"[..],
        ..RECV_TEMPL
    }));
    recv!(s, time 1005, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1 + 6,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"yyyyyy"[..],
        ..RECV_TEMPL
    }));
    recv!(s, time 1010, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1 + (6 * 2),
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"wwwwww"[..],
        ..RECV_TEMPL
    }));
    recv!(s, time 1015, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1 + (6 * 3),
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"zzzzzz"[..],
        ..RECV_TEMPL
    }));

    // First duplicate ACK
    send!(s, time 1050, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1),
        ..SEND_TEMPL
    });
    // Second duplicate ACK
    send!(s, time 1055, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1),
        ..SEND_TEMPL
    });
    // Reordered packet arrives which should reset duplicate ACK count
    send!(s, time 1060, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1 + (6 * 3)),
        ..SEND_TEMPL
    });

    assert_eq!(
        s.local_rx_dup_acks, 0,
        "duplicate ACK counter is not reset when receiving ACK which updates send window"
    );

    // ACK all received segments
    send!(s, time 1120, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1 + (6 * 4)),
        ..SEND_TEMPL
    });
}

#[test]
fn test_fast_retransmit_dup_acks_counter() {
    let mut s = socket_established();

    s.send_slice(b"abc").unwrap(); // This is lost
    recv!(s, time 0, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"abc"[..],
        ..RECV_TEMPL
    }));

    send!(s, time 0, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1),
        ..SEND_TEMPL
    });

    // A lot of retransmits happen here
    s.local_rx_dup_acks = u8::MAX - 1;

    // Send 3 more ACKs, which could overflow local_rx_dup_acks,
    // but intended behaviour is that we saturate the bounds
    // of local_rx_dup_acks
    send!(s, time 0, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1),
        ..SEND_TEMPL
    });
    send!(s, time 0, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1),
        ..SEND_TEMPL
    });
    send!(s, time 0, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1),
        ..SEND_TEMPL
    });
    assert_eq!(
        s.local_rx_dup_acks,
        u8::MAX,
        "duplicate ACK count should not overflow but saturate"
    );
}

#[test]
fn test_fast_retransmit_zero_window() {
    let mut s = socket_established();

    send!(s, time 1000, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1),
        ..SEND_TEMPL
    });

    s.send_slice(b"abc").unwrap();

    recv!(s, time 0, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"abc"[..],
        ..RECV_TEMPL
    }));

    // 3 dup acks
    send!(s, time 1050, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1),
        ..SEND_TEMPL
    });
    send!(s, time 1050, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1),
        ..SEND_TEMPL
    });
    send!(s, time 1050, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1),
        window_len: 0, // boom
        ..SEND_TEMPL
    });

    // even though we're in "fast retransmit", we shouldn't
    // force-send anything because the remote's window is full.
    recv_nothing!(s);
}

#[test]
fn test_retransmit_exponential_backoff() {
    let mut s = socket_established();
    s.send_slice(b"abcdef").unwrap();
    recv!(s, time 0, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"abcdef"[..],
        ..RECV_TEMPL
    }));

    let expected_retransmission_instant = s.rtte.retransmission_timeout().total_millis() as i64;
    recv_nothing!(s, time expected_retransmission_instant - 1);
    recv!(s, time expected_retransmission_instant, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"abcdef"[..],
        ..RECV_TEMPL
    }));

    // "current time" is expected_retransmission_instant, and we want to wait 2 * retransmission timeout
    let expected_retransmission_instant = 3 * expected_retransmission_instant;

    recv_nothing!(s, time expected_retransmission_instant - 1);
    recv!(s, time expected_retransmission_instant, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"abcdef"[..],
        ..RECV_TEMPL
    }));
}

#[test]
fn test_data_retransmit_ack_more_than_expected() {
    let mut s = socket_established();
    s.remote_mss = 6;
    s.send_slice(b"aaaaaabbbbbbcccccc").unwrap();

    recv!(s, time 0, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"aaaaaa"[..],
        ..RECV_TEMPL
    }));
    recv!(s, time 0, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1 + 6,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"bbbbbb"[..],
        ..RECV_TEMPL
    }));
    recv!(s, time 0, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1 + 12,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"cccccc"[..],
        ..RECV_TEMPL
    }));
    recv_nothing!(s, time 0);

    recv_nothing!(s, time 50);

    // retransmit timer expires, we want to retransmit all 3 packets
    // but we only manage to retransmit 2 (due to e.g. lack of device buffer space)
    assert!(s.timer.is_retransmit());
    recv!(s, time 1000, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"aaaaaa"[..],
        ..RECV_TEMPL
    }));
    recv!(s, time 1000, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1 + 6,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"bbbbbb"[..],
        ..RECV_TEMPL
    }));

    // ack first packet.
    send!(
        s,
        time 3000,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 6),
            ..SEND_TEMPL
        }
    );

    // this should keep retransmit timer on, because there's
    // still unacked data.
    assert!(s.timer.is_retransmit());

    // ack all three packets.
    // This might confuse the TCP stack because after the retransmit
    // it "thinks" the 3rd packet hasn't been transmitted yet, but it is getting acked.
    send!(
        s,
        time 3000,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 18),
            ..SEND_TEMPL
        }
    );

    // this should exit retransmit mode.
    assert!(!s.timer.is_retransmit());
    // and consider all data ACKed.
    assert!(s.tx_buffer.is_empty());
    recv_nothing!(s, time 5000);
}

#[test]
fn test_retransmit_fin() {
    let mut s = socket_established();
    s.close();
    recv!(s, time 0, Ok(TcpRepr {
        control: TcpControl::Fin,
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        ..RECV_TEMPL
    }));

    recv_nothing!(s, time 999);
    recv!(s, time 1000, Ok(TcpRepr {
        control: TcpControl::Fin,
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        ..RECV_TEMPL
    }));
}

#[test]
fn test_retransmit_fin_wait() {
    let mut s = socket_fin_wait_1();
    // we send FIN
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Fin,
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            ..RECV_TEMPL
        }]
    );
    // remote also sends FIN, does NOT ack ours.
    send!(
        s,
        TcpRepr {
            control: TcpControl::Fin,
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        }
    );
    // we ack it
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::None,
            seq_number: LOCAL_SEQ + 2,
            ack_number: Some(REMOTE_SEQ + 2),
            ..RECV_TEMPL
        }]
    );

    // we haven't got an ACK for our FIN, we should retransmit.
    recv_nothing!(s, time 999);
    recv!(
        s,
        time 1000,
        [TcpRepr {
            control: TcpControl::Fin,
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 2),
            ..RECV_TEMPL
        }]
    );
    recv_nothing!(s, time 2999);
    recv!(
        s,
        time 3000,
        [TcpRepr {
            control: TcpControl::Fin,
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 2),
            ..RECV_TEMPL
        }]
    );
}

// =========================================================================================//
// Tests for window management.
// =========================================================================================//

#[test]
fn test_maximum_segment_size() {
    let mut s = socket_listen();
    s.tx_buffer = send_buffer(32767);
    send!(
        s,
        TcpRepr {
            control: TcpControl::Syn,
            seq_number: REMOTE_SEQ,
            ack_number: None,
            max_seg_size: Some(1000),
            ..SEND_TEMPL
        }
    );
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: Some(REMOTE_SEQ + 1),
            max_seg_size: Some(BASE_MSS),
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            window_len: 32767,
            ..SEND_TEMPL
        }
    );
    s.send_slice(&[0; 1200][..]).unwrap();
    recv!(
        s,
        Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &[0; 1000][..],
            ..RECV_TEMPL
        })
    );
}

#[test]
fn test_recv_out_of_recv_win() {
    let mut s = socket_established();
    s.set_ack_delay(Some(ACK_DELAY_DEFAULT));
    s.remote_mss = 32;

    // No ACKs are sent due to the ACK delay.
    send!(
        s,
        TcpRepr {
            control: TcpControl::Psh,
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &[0; 32],
            ..SEND_TEMPL
        }
    );
    recv_nothing!(s);

    // RMSS+1 bytes of data has been received, so ACK is sent without delay.
    send!(
        s,
        TcpRepr {
            control: TcpControl::Psh,
            seq_number: REMOTE_SEQ + 33,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &[0; 1],
            ..SEND_TEMPL
        }
    );
    recv!(
        s,
        Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 34),
            window_len: 31,
            ..RECV_TEMPL
        })
    );

    // This frees up a byte in the receive buffer. However, the remote shouldn't be aware of
    // this since no ACKs are sent.
    s.recv_slice(&mut [0; 1]).unwrap();
    recv_nothing!(s);

    // Now, if the remote wants to send one byte outside of the receive window that we
    // previously advertised, it should not succeed.
    send!(
        s,
        TcpRepr {
            control: TcpControl::Psh,
            seq_number: REMOTE_SEQ + 34,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &[0; 32],
            ..SEND_TEMPL
        }
    );
    recv!(
        s,
        Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 65),
            window_len: 1, // The last byte isn't accepted.
            ..RECV_TEMPL
        })
    );
}

#[test]
fn test_close_wait_no_window_update() {
    let mut s = socket_established();
    send!(
        s,
        TcpRepr {
            control: TcpControl::Fin,
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &[1, 2, 3, 4],
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::CloseWait);

    // we ack the FIN, with the reduced window size.
    recv!(
        s,
        Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 6),
            window_len: 60,
            ..RECV_TEMPL
        })
    );

    let rx_buf = &mut [0; 32];
    assert_eq!(s.recv_slice(rx_buf), Ok(4));

    // check that we do NOT send a window update even if it has changed.
    recv_nothing!(s);
}

#[test]
fn test_time_wait_no_window_update() {
    let mut s = socket_fin_wait_2();
    send!(
        s,
        TcpRepr {
            control: TcpControl::Fin,
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 2),
            payload: &[1, 2, 3, 4],
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::TimeWait);

    // we ack the FIN, with the reduced window size.
    recv!(
        s,
        Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 2,
            ack_number: Some(REMOTE_SEQ + 6),
            window_len: 60,
            ..RECV_TEMPL
        })
    );

    let rx_buf = &mut [0; 32];
    assert_eq!(s.recv_slice(rx_buf), Ok(4));

    // check that we do NOT send a window update even if it has changed.
    recv_nothing!(s);
}

// =========================================================================================//
// Tests for flow control.
// =========================================================================================//

#[test]
fn test_psh_transmit() {
    let mut s = socket_established();
    s.remote_mss = 6;
    s.send_slice(b"abcdef").unwrap();
    s.send_slice(b"123456").unwrap();
    recv!(s, time 0, Ok(TcpRepr {
        control:    TcpControl::None,
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"abcdef"[..],
        ..RECV_TEMPL
    }), exact);
    recv!(s, time 0, Ok(TcpRepr {
        control:    TcpControl::Psh,
        seq_number: LOCAL_SEQ + 1 + 6,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"123456"[..],
        ..RECV_TEMPL
    }), exact);
}

#[test]
fn test_psh_receive() {
    let mut s = socket_established();
    send!(
        s,
        TcpRepr {
            control: TcpControl::Psh,
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abcdef"[..],
            ..SEND_TEMPL
        }
    );
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 6),
            window_len: 58,
            ..RECV_TEMPL
        }]
    );
}

#[test]
fn test_zero_window_ack() {
    let mut s = socket_established();
    s.rx_buffer = RecvBuffer::new(6);
    s.assembler = Assembler::new();
    // zcnet: as if the socket had been opened with 6 bytes (its window never retreats).
    s.remote_last_win = 6;
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abcdef"[..],
            ..SEND_TEMPL
        }
    );
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 6),
            window_len: 0,
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1 + 6,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"123456"[..],
            ..SEND_TEMPL
        },
        Some(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 6),
            window_len: 0,
            ..RECV_TEMPL
        })
    );
}

#[test]
fn test_zero_window_ack_not_rate_limited() {
    let mut s = socket_established();
    s.rx_buffer = RecvBuffer::new(6);
    s.assembler = Assembler::new();
    // zcnet: as if the socket had been opened with 6 bytes (its window never retreats).
    s.remote_last_win = 6;
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abcdef"[..],
            ..SEND_TEMPL
        }
    );
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 6),
            window_len: 0,
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1 + 6,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"123456"[..],
            ..SEND_TEMPL
        },
        Some(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 6),
            window_len: 0,
            ..RECV_TEMPL
        })
    );
    // The remote retransmits into the zero window again within a second,
    // e.g. because the ACK above was lost. The ACK must not be withheld by
    // challenge ACK rate limiting: it is the remote's only way to learn
    // the window state, and a data segment cannot cause an ACK loop.
    send!(
        s,
        time 100,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1 + 6,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"123456"[..],
            ..SEND_TEMPL
        },
        Some(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 6),
            window_len: 0,
            ..RECV_TEMPL
        })
    );
}

#[test]
fn test_zero_window_fin() {
    let mut s = socket_established();
    s.rx_buffer = RecvBuffer::new(6);
    s.assembler = Assembler::new();
    // zcnet: as if the socket had been opened with 6 bytes (its window never retreats).
    s.remote_last_win = 6;
    s.ack_delay = None;

    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abcdef"[..],
            ..SEND_TEMPL
        }
    );
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 6),
            window_len: 0,
            ..RECV_TEMPL
        }]
    );

    // Even though the sequence space for the FIN itself is outside the window,
    // it is not data, so FIN must be accepted when window full.
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1 + 6,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &[],
            control: TcpControl::Fin,
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::CloseWait);

    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 7),
            window_len: 0,
            ..RECV_TEMPL
        }]
    );
}

#[test]
fn test_zero_window_ack_on_window_growth() {
    let mut s = socket_established();
    s.rx_buffer = RecvBuffer::new(6);
    s.assembler = Assembler::new();
    // zcnet: as if the socket had been opened with 6 bytes (its window never retreats).
    s.remote_last_win = 6;
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abcdef"[..],
            ..SEND_TEMPL
        }
    );
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 6),
            window_len: 0,
            ..RECV_TEMPL
        }]
    );
    recv_nothing!(s, time 0);
    s.recv(|buffer| {
        assert_eq!(&buffer[..3], b"abc");
        (3, ())
    })
    .unwrap();
    recv!(s, time 0, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1 + 6),
        window_len: 3,
        ..RECV_TEMPL
    }));
    recv_nothing!(s, time 0);
    s.recv(|buffer| {
        assert_eq!(buffer, b"def");
        (buffer.len(), ())
    })
    .unwrap();
    recv!(s, time 0, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1 + 6),
        window_len: 6,
        ..RECV_TEMPL
    }));
}

#[test]
fn test_window_update_with_delay_ack() {
    let mut s = socket_established_with_buffer_sizes(6, 6);
    s.ack_delay = Some(Duration::from_millis(10));

    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abcdef"[..],
            ..SEND_TEMPL
        }
    );

    recv_nothing!(s, time 5);

    s.recv(|buffer| {
        assert_eq!(&buffer[..2], b"ab");
        (2, ())
    })
    .unwrap();
    recv!(
        s,
        time 5,
        Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 6),
            window_len: 2,
            ..RECV_TEMPL
        })
    );

    s.recv(|buffer| {
        assert_eq!(&buffer[..1], b"c");
        (1, ())
    })
    .unwrap();
    recv_nothing!(s, time 5);

    s.recv(|buffer| {
        assert_eq!(&buffer[..1], b"d");
        (1, ())
    })
    .unwrap();
    recv!(
        s,
        time 5,
        Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 6),
            window_len: 4,
            ..RECV_TEMPL
        })
    );
}

#[test]
fn test_fill_peer_window() {
    let mut s = socket_established();
    s.remote_mss = 6;
    s.send_slice(b"abcdef123456!@#$%^").unwrap();
    recv!(
        s,
        [
            TcpRepr {
                seq_number: LOCAL_SEQ + 1,
                ack_number: Some(REMOTE_SEQ + 1),
                payload: &b"abcdef"[..],
                ..RECV_TEMPL
            },
            TcpRepr {
                seq_number: LOCAL_SEQ + 1 + 6,
                ack_number: Some(REMOTE_SEQ + 1),
                payload: &b"123456"[..],
                ..RECV_TEMPL
            },
            TcpRepr {
                seq_number: LOCAL_SEQ + 1 + 6 + 6,
                ack_number: Some(REMOTE_SEQ + 1),
                payload: &b"!@#$%^"[..],
                ..RECV_TEMPL
            }
        ]
    );
}

#[test]
fn test_announce_window_after_read() {
    let mut s = socket_established();
    s.rx_buffer = RecvBuffer::new(6);
    s.assembler = Assembler::new();
    // zcnet: as if the socket had been opened with 6 bytes (its window never retreats).
    s.remote_last_win = 6;
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abc"[..],
            ..SEND_TEMPL
        }
    );
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 3),
            window_len: 3,
            ..RECV_TEMPL
        }]
    );
    // Test that `dispatch` updates `remote_last_win`
    assert_eq!(s.remote_last_win, s.rx_window() as u16);
    s.recv(|buffer| (buffer.len(), ())).unwrap();
    assert!(s.window_to_update());
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 3),
            window_len: 6,
            ..RECV_TEMPL
        }]
    );
    assert_eq!(s.remote_last_win, s.rx_window() as u16);
    // Provoke immediate ACK to test that `process` updates `remote_last_win`
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1 + 6,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"def"[..],
            ..SEND_TEMPL
        },
        Some(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 3),
            window_len: 6,
            ..RECV_TEMPL
        })
    );
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1 + 3,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abc"[..],
            ..SEND_TEMPL
        },
        Some(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 9),
            window_len: 0,
            ..RECV_TEMPL
        })
    );
    assert_eq!(s.remote_last_win, s.rx_window() as u16);
    s.recv(|buffer| (buffer.len(), ())).unwrap();
    assert!(s.window_to_update());
}

// =========================================================================================//
// Tests for zero-window probes.
// =========================================================================================//

#[test]
fn test_zero_window_probe_enter_on_win_update() {
    let mut s = socket_established();

    assert!(!s.timer.is_zero_window_probe());

    s.send_slice(b"abcdef123456!@#$%^").unwrap();

    assert!(!s.timer.is_zero_window_probe());

    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            window_len: 0,
            ..SEND_TEMPL
        }
    );

    assert!(s.timer.is_zero_window_probe());
}

#[test]
fn test_zero_window_probe_enter_on_send() {
    let mut s = socket_established();

    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            window_len: 0,
            ..SEND_TEMPL
        }
    );

    assert!(!s.timer.is_zero_window_probe());

    s.send_slice(b"abcdef123456!@#$%^").unwrap();

    assert!(s.timer.is_zero_window_probe());
}

#[test]
fn test_zero_window_probe_exit() {
    let mut s = socket_established();

    s.send_slice(b"abcdef123456!@#$%^").unwrap();

    assert!(!s.timer.is_zero_window_probe());

    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            window_len: 0,
            ..SEND_TEMPL
        }
    );

    assert!(s.timer.is_zero_window_probe());

    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            window_len: 6,
            ..SEND_TEMPL
        }
    );

    assert!(!s.timer.is_zero_window_probe());
}

#[test]
fn test_zero_window_probe_exit_ack() {
    let mut s = socket_established();

    s.send_slice(b"abcdef123456!@#$%^").unwrap();
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            window_len: 0,
            ..SEND_TEMPL
        }
    );

    recv!(
        s,
        time 1000,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"a"[..],
            ..RECV_TEMPL
        }]
    );

    send!(
        s,
        time 1010,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 2),
            window_len: 6,
            ..SEND_TEMPL
        }
    );

    recv!(
        s,
        time 1010,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 2,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"bcdef1"[..],
            ..RECV_TEMPL
        }]
    );
}

#[test]
fn test_zero_window_probe_not_capped_by_cwnd() {
    let mut s = socket_established_with_buffer_sizes(8192, 64);
    s.set_congestion_control(CongestionControl::Reno);
    s.remote_win_len = 65535;
    s.remote_mss = 1024;

    let data = [b'x'; 4096];
    s.send_slice(&data[..]).unwrap();

    // Reno's initial cwnd is 2048: two segments fill the congestion window
    // exactly, leaving cwnd_remaining() == 0.
    recv!(s, time 0, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload: &data[..1024],
        ..RECV_TEMPL
    }));
    recv!(s, time 0, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1 + 1024,
        ack_number: Some(REMOTE_SEQ + 1),
        payload: &data[..1024],
        ..RECV_TEMPL
    }));
    recv_nothing!(s, time 0);

    // The remote closes its window without acknowledging anything new, so
    // no congestion window space is freed either.
    send!(s, time 10, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1),
        window_len: 0,
        ..SEND_TEMPL
    });

    // Arm the probe timer. (Set directly because the ACK above carries no
    // new data; in real traffic this state is reached e.g. when the
    // controller shrinks cwnd below the flight size while probing.)
    s.timer
        .set_for_zero_window_probe(Instant::from_millis(10), Duration::from_millis(100));

    // The probe must carry 1 byte of data past the window edge even though
    // the congestion window is exhausted: an empty probe occupies no
    // sequence space and elicits no reply, so the connection would stall
    // if the remote's window update got lost.
    //
    // zcnet: the window shrank to zero below the 2048 bytes in flight, so they are no longer
    // in flight (RFC 9293 MUST-34) and the probe is the byte at the window's edge, the first
    // unacknowledged one (smoltcp probes past the data in flight, at + 2048).
    recv!(s, time 110, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload: &data[..1],
        ..RECV_TEMPL
    }));
}

#[test]
fn test_zero_window_probe_backoff_nack_reply() {
    let mut s = socket_established();
    s.send_slice(b"abcdef123456!@#$%^").unwrap();
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            window_len: 0,
            ..SEND_TEMPL
        }
    );

    recv_nothing!(s, time 999);
    recv!(
        s,
        time 1000,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"a"[..],
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        time 1100,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            window_len: 0,
            ..SEND_TEMPL
        }
    );

    recv_nothing!(s, time 2999);
    recv!(
        s,
        time 3000,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"a"[..],
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        time 3100,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            window_len: 0,
            ..SEND_TEMPL
        }
    );

    recv_nothing!(s, time 6999);
    recv!(
        s,
        time 7000,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"a"[..],
            ..RECV_TEMPL
        }]
    );
}

#[test]
fn test_zero_window_probe_backoff_no_reply() {
    let mut s = socket_established();
    s.send_slice(b"abcdef123456!@#$%^").unwrap();
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            window_len: 0,
            ..SEND_TEMPL
        }
    );

    recv_nothing!(s, time 999);
    recv!(
        s,
        time 1000,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"a"[..],
            ..RECV_TEMPL
        }]
    );

    recv_nothing!(s, time 2999);
    recv!(
        s,
        time 3000,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"a"[..],
            ..RECV_TEMPL
        }]
    );
}

/// zcnet: a sender whose data lies past a window that shrank to zero probes the window (one
/// byte at its edge, on the probe timer) instead of retransmitting the data on the timeout, and
/// sends that data again once the window opens.
#[test]
fn test_zero_window_probe_when_the_window_shrinks_below_sent_data() {
    let mut s = socket_established();
    s.send_slice(b"abcdef123456").unwrap();
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"abcdef123456"[..],
            ..RECV_TEMPL
        }]
    );
    // The peer takes six bytes, and its window shrinks to zero below the other six.
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 6),
            window_len: 0,
            ..SEND_TEMPL
        }
    );
    assert!(s.timer.is_zero_window_probe());
    recv_nothing!(s, time 999);
    recv!(
        s,
        time 1000,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 6,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"1"[..],
            ..RECV_TEMPL
        }]
    );
    // The window opens: the six bytes go again, at once.
    send!(
        s,
        time 1100,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 6),
            window_len: 64,
            ..SEND_TEMPL
        }
    );
    recv!(
        s,
        time 1100,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 6,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"123456"[..],
            ..RECV_TEMPL
        }]
    );
}

/// zcnet: the remote sends `MIN_SEGMENTS` segments of 6 bytes into the 64-byte window of
/// `socket_established` and the application holds each (`recv_segment`): every slot of the
/// budget is taken, and the window, 64 bytes after each of the first ones (one MSS per free
/// slot), is zero after the last although 40 bytes of the edge advertised before remain. Each
/// is acknowledged by a segment at `our_seq`. Returns the held segments and the next sequence
/// number expected.
fn spend_slot_budget(mut s: &mut TestSocket, our_seq: TcpSeqNumber) -> (Vec<RxFrame>, TcpSeqNumber) {
    let mut held = Vec::new();
    for i in 0..MIN_SEGMENTS {
        send!(
            s,
            TcpRepr {
                seq_number: REMOTE_SEQ + 1 + 6 * i,
                ack_number: Some(LOCAL_SEQ + 1),
                payload: &b"abcdef"[..],
                ..SEND_TEMPL
            }
        );
        held.push(s.recv_segment().unwrap().expect("a segment"));
        let window = if i + 1 < MIN_SEGMENTS { 64 } else { 0 };
        recv!(
            s,
            [TcpRepr {
                seq_number: our_seq,
                ack_number: Some(REMOTE_SEQ + 1 + 6 * (i + 1)),
                window_len: window,
                ..RECV_TEMPL
            }]
        );
    }
    (held, REMOTE_SEQ + 1 + 6 * MIN_SEGMENTS)
}

/// zcnet: once the application holds the whole slot budget, the window is zero, although the
/// right edge advertised before lay further on (each small segment took a slot of the budget,
/// which counts one MSS per slot); a probe at the edge is answered with the zero window, and a
/// released segment opens the window again.
#[test]
fn test_window_shrinks_to_zero_when_the_slot_budget_is_spent() {
    let mut s = socket_established();
    let (mut held, edge) = spend_slot_budget(&mut s, LOCAL_SEQ + 1);
    send!(
        s,
        TcpRepr {
            seq_number: edge,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"g"[..],
            ..SEND_TEMPL
        },
        Some(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(edge),
            window_len: 0,
            ..RECV_TEMPL
        })
    );
    drop(held.pop());
    assert!(s.release_segments(1));
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(edge),
            window_len: 64,
            ..RECV_TEMPL
        }]
    );
}

/// zcnet: a window that shrank to zero still takes the acknowledgements of a remote that sent
/// up to the right edge advertised before: its pure ACK, whose sequence number lies past the
/// zero window (a segment of it was dropped for want of a slot), acknowledges our data; its
/// data segment there is answered with an ACK, its data dropped but its acknowledgement taken;
/// a FIN there is answered and ignored.
/// Without that, a connection whose application waits for send room before it reads would
/// wait for ever (the remote's ACKs of our data all lie past the window).
#[test]
fn test_shrunk_window_takes_acks_past_it() {
    let mut s = socket_established();
    s.send_slice(b"abcdef123456").unwrap();
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"abcdef123456"[..],
            ..RECV_TEMPL
        }]
    );
    let (_held, edge) = spend_slot_budget(&mut s, LOCAL_SEQ + 1 + 12);
    // Our ACK of everything up to the edge, with the zero window, sent at `seq`.
    let zero_window_ack = |seq| TcpRepr {
        seq_number: seq,
        ack_number: Some(edge),
        window_len: 0,
        ..RECV_TEMPL
    };
    // The remote sent 6 bytes more before it saw the zero window; they were dropped. Its
    // next sequence number lies past the window.
    send!(
        s,
        TcpRepr {
            seq_number: edge + 6,
            ack_number: Some(LOCAL_SEQ + 1 + 6),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.tx_buffer.len(), 6, "the pure ACK's acknowledgement is taken");
    send!(
        s,
        TcpRepr {
            seq_number: edge + 6,
            ack_number: Some(LOCAL_SEQ + 1 + 12),
            payload: &b"ghijkl"[..],
            ..SEND_TEMPL
        },
        Some(zero_window_ack(LOCAL_SEQ + 1 + 12))
    );
    assert_eq!(s.tx_buffer.len(), 0, "the data segment's acknowledgement is taken");
    assert!(matches!(s.recv_segment(), Ok(None)), "its data is not");
    // A FIN past the window is answered, not taken.
    send!(
        s,
        TcpRepr {
            control: TcpControl::Fin,
            seq_number: edge + 12,
            ack_number: Some(LOCAL_SEQ + 1 + 12),
            ..SEND_TEMPL
        },
        Some(zero_window_ack(LOCAL_SEQ + 1 + 12))
    );
    assert_eq!(s.state, State::Established);
    // Past the furthest edge ever advertised (64 bytes past the third segment), a segment is
    // not acceptable at all.
    s.send_slice(b"mn").unwrap();
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 12,
            ack_number: Some(edge),
            window_len: 0,
            payload: &b"mn"[..],
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1 + 6 * (MIN_SEGMENTS - 1) + 64 + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 14),
            ..SEND_TEMPL
        },
        Some(zero_window_ack(LOCAL_SEQ + 1 + 14))
    );
    assert_eq!(s.tx_buffer.len(), 2);
}

/// zcnet: with timestamps on, the window counts a full segment per free slot as the MSS less
/// the timestamp option (what the remote's segments carry), so that full-sized segments
/// never run out of slots before the advertised edge.
#[test]
fn test_window_per_slot_leaves_out_the_timestamp_option() {
    let mut s = socket_established_with_buffer_sizes(64, 64 * 1024);
    s.rx_buffer.set_budget(4);
    // No right edge to keep: the window is what the free slots take.
    s.note_advertised(Some(REMOTE_SEQ + 1), 0, 0);
    assert_eq!(s.rx_window(), 4 * s.rx_mss);
    s.set_tsval_generator(Some(|| 1));
    assert_eq!(s.rx_window(), 4 * (s.rx_mss - 12));
}

#[test]
fn test_zero_window_probe_shift() {
    let mut s = socket_established();

    s.send_slice(b"abcdef123456!@#$%^").unwrap();
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            window_len: 0,
            ..SEND_TEMPL
        }
    );

    recv_nothing!(s, time 999);
    recv!(
        s,
        time 1000,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"a"[..],
            ..RECV_TEMPL
        }]
    );

    recv_nothing!(s, time 2999);
    recv!(
        s,
        time 3000,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"a"[..],
            ..RECV_TEMPL
        }]
    );

    // ack the ZWP byte, but still advertise zero window.
    // this should restart the ZWP timer.
    send!(
        s,
        time 3100,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 2),
            window_len: 0,
            ..SEND_TEMPL
        }
    );

    // ZWP should be sent at 3100+1000 = 4100
    recv_nothing!(s, time 4099);
    recv!(
        s,
        time 4100,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 2,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"b"[..],
            ..RECV_TEMPL
        }]
    );
}

// =========================================================================================//
// Tests for timeouts.
// =========================================================================================//

#[test]
fn test_listen_timeout() {
    let mut s = socket_listen();
    s.set_timeout(Some(Duration::from_millis(100)));
    assert_eq!(s.socket.poll_at(&mut s.cx), PollAt::Ingress);
}

#[test]
fn test_connect_timeout() {
    let mut s = socket();
    s.local_seq_no = LOCAL_SEQ;
    s.socket
        .connect(&mut s.cx, REMOTE_END, LOCAL_END.port)
        .unwrap();
    s.set_timeout(Some(Duration::from_millis(100)));
    recv!(s, time 150, Ok(TcpRepr {
        control:    TcpControl::Syn,
        seq_number: LOCAL_SEQ,
        ack_number: None,
        max_seg_size: Some(BASE_MSS),
        window_scale: Some(0),
        sack_permitted: true,
        ..RECV_TEMPL
    }));
    assert_eq!(s.state, State::SynSent);
    assert_eq!(
        s.socket.poll_at(&mut s.cx),
        PollAt::Time(Instant::from_millis(250))
    );
    recv!(s, time 250, Ok(TcpRepr {
        control:    TcpControl::Rst,
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(TcpSeqNumber(0)),
        window_scale: None,
        ..RECV_TEMPL
    }));
    assert_eq!(s.state, State::Closed);
}

#[test]
fn test_established_timeout() {
    let mut s = socket_established();
    s.set_timeout(Some(Duration::from_millis(2000)));
    recv_nothing!(s, time 250);
    assert_eq!(
        s.socket.poll_at(&mut s.cx),
        PollAt::Time(Instant::from_millis(2250))
    );
    s.send_slice(b"abcdef").unwrap();
    assert_eq!(s.socket.poll_at(&mut s.cx), PollAt::Now);
    recv!(s, time 255, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"abcdef"[..],
        ..RECV_TEMPL
    }));
    assert_eq!(
        s.socket.poll_at(&mut s.cx),
        PollAt::Time(Instant::from_millis(1255))
    );
    recv!(s, time 1255, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"abcdef"[..],
        ..RECV_TEMPL
    }));
    assert_eq!(
        s.socket.poll_at(&mut s.cx),
        PollAt::Time(Instant::from_millis(2255))
    );
    recv!(s, time 2255, Ok(TcpRepr {
        control:    TcpControl::Rst,
        seq_number: LOCAL_SEQ + 1 + 6,
        ack_number: Some(REMOTE_SEQ + 1),
        ..RECV_TEMPL
    }));
    assert_eq!(s.state, State::Closed);
}

#[test]
fn test_established_keep_alive_timeout() {
    let mut s = socket_established();
    s.set_keep_alive(Some(Duration::from_millis(50)), Instant::from_millis(0));
    s.set_timeout(Some(Duration::from_millis(100)));
    recv!(s, time 100, Ok(TcpRepr {
        seq_number: LOCAL_SEQ,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &[0],
        ..RECV_TEMPL
    }));
    recv_nothing!(s, time 100);
    assert_eq!(
        s.socket.poll_at(&mut s.cx),
        PollAt::Time(Instant::from_millis(150))
    );
    send!(s, time 105, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1),
        ..SEND_TEMPL
    });
    assert_eq!(
        s.socket.poll_at(&mut s.cx),
        PollAt::Time(Instant::from_millis(155))
    );
    recv!(s, time 155, Ok(TcpRepr {
        seq_number: LOCAL_SEQ,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &[0],
        ..RECV_TEMPL
    }));
    recv_nothing!(s, time 155);
    assert_eq!(
        s.socket.poll_at(&mut s.cx),
        PollAt::Time(Instant::from_millis(205))
    );
    recv_nothing!(s, time 200);
    recv!(s, time 205, Ok(TcpRepr {
        control:    TcpControl::Rst,
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        ..RECV_TEMPL
    }));
    recv_nothing!(s, time 205);
    assert_eq!(s.state, State::Closed);
}

#[test]
fn test_fin_wait_1_timeout() {
    let mut s = socket_fin_wait_1();
    s.set_timeout(Some(Duration::from_millis(1000)));
    recv!(s, time 100, Ok(TcpRepr {
        control:    TcpControl::Fin,
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        ..RECV_TEMPL
    }));
    recv!(s, time 1100, Ok(TcpRepr {
        control:    TcpControl::Rst,
        seq_number: LOCAL_SEQ + 1 + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        ..RECV_TEMPL
    }));
    assert_eq!(s.state, State::Closed);
}

#[test]
fn test_last_ack_timeout() {
    let mut s = socket_last_ack();
    s.set_timeout(Some(Duration::from_millis(1000)));
    recv!(s, time 100, Ok(TcpRepr {
        control:    TcpControl::Fin,
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1 + 1),
        ..RECV_TEMPL
    }));
    recv!(s, time 1100, Ok(TcpRepr {
        control:    TcpControl::Rst,
        seq_number: LOCAL_SEQ + 1 + 1,
        ack_number: Some(REMOTE_SEQ + 1 + 1),
        ..RECV_TEMPL
    }));
    assert_eq!(s.state, State::Closed);
}

#[test]
fn test_closed_timeout() {
    let mut s = socket_established();
    s.set_timeout(Some(Duration::from_millis(200)));
    s.remote_last_ts = Some(Instant::from_millis(100));
    s.abort();
    assert_eq!(s.socket.poll_at(&mut s.cx), PollAt::Now);
    recv!(s, time 100, Ok(TcpRepr {
        control:    TcpControl::Rst,
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        ..RECV_TEMPL
    }));
    assert_eq!(s.socket.poll_at(&mut s.cx), PollAt::Ingress);
}

// =========================================================================================//
// Tests for keep-alive.
// =========================================================================================//

#[test]
fn test_responds_to_keep_alive() {
    let mut s = socket_established();
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        },
        Some(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            ..RECV_TEMPL
        })
    );
}

#[test]
fn test_sends_keep_alive() {
    let mut s = socket_established();
    s.set_keep_alive(Some(Duration::from_millis(100)), Instant::from_millis(0));

    // No probe when keep-alive is set: the first one after an idle interval.
    recv_nothing!(s, time 0);
    assert_eq!(
        s.socket.poll_at(&mut s.cx),
        PollAt::Time(Instant::from_millis(100))
    );
    recv_nothing!(s, time 95);
    recv!(s, time 100, Ok(TcpRepr {
        seq_number: LOCAL_SEQ,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &[0],
        ..RECV_TEMPL
    }));

    assert_eq!(
        s.socket.poll_at(&mut s.cx),
        PollAt::Time(Instant::from_millis(200))
    );
    recv_nothing!(s, time 195);
    recv!(s, time 200, Ok(TcpRepr {
        seq_number: LOCAL_SEQ,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &[0],
        ..RECV_TEMPL
    }));

    send!(s, time 250, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1),
        ..SEND_TEMPL
    });
    assert_eq!(
        s.socket.poll_at(&mut s.cx),
        PollAt::Time(Instant::from_millis(350))
    );
    recv_nothing!(s, time 345);
    recv!(s, time 350, Ok(TcpRepr {
        seq_number: LOCAL_SEQ,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"\x00"[..],
        ..RECV_TEMPL
    }));
}

// =========================================================================================//
// Tests for time-to-live configuration.
// =========================================================================================//

#[test]
fn test_set_hop_limit() {
    let mut s = socket_syn_received();

    s.set_hop_limit(Some(0x2a));
    assert_eq!(
        s.socket.dispatch(&mut s.cx, |_, (ip_repr, _), _| {
            assert_eq!(ip_repr.hop_limit(), 0x2a);
            Ok::<_, ()>(())
        }),
        Ok(())
    );

    // assert that user-configurable settings are kept,
    // see https://github.com/smoltcp-rs/smoltcp/issues/601.
    s.reset();
    assert_eq!(s.hop_limit(), Some(0x2a));
}

#[test]
#[should_panic(expected = "the time-to-live value of a packet must not be zero")]
fn test_set_hop_limit_zero() {
    let mut s = socket_syn_received();
    s.set_hop_limit(Some(0));
}

// =========================================================================================//
// Tests for reassembly.
// =========================================================================================//

#[test]
fn test_out_of_order() {
    let mut s = socket_established();
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1 + 3,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"def"[..],
            ..SEND_TEMPL
        },
        Some(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            ..RECV_TEMPL
        })
    );
    s.recv(|buffer| {
        assert_eq!(buffer, b"");
        (buffer.len(), ())
    })
    .unwrap();
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abcdef"[..],
            ..SEND_TEMPL
        },
        Some(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 6),
            window_len: 58,
            ..RECV_TEMPL
        })
    );
    s.recv(|buffer| {
        assert_eq!(buffer, b"abcdef");
        (buffer.len(), ())
    })
    .unwrap();
}

#[test]
fn test_buffer_wraparound_rx() {
    let mut s = socket_established();
    s.rx_buffer = RecvBuffer::new(6);
    s.assembler = Assembler::new();
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abc"[..],
            ..SEND_TEMPL
        }
    );
    s.recv(|buffer| {
        assert_eq!(buffer, b"abc");
        (buffer.len(), ())
    })
    .unwrap();
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1 + 3,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"defghi"[..],
            ..SEND_TEMPL
        }
    );
    let mut data = [0; 6];
    assert_eq!(s.recv_slice(&mut data[..]), Ok(6));
    assert_eq!(data, &b"defghi"[..]);
}

#[test]
fn test_buffer_wraparound_tx() {
    let mut s = socket_established();
    s.set_nagle_enabled(false);

    s.tx_buffer = send_buffer(9);
    // zcnet: the send buffer is a queue of frames of one segment each, and a segment stops at
    // the end of a frame as smoltcp's stops at the ring's wrap point. With 6-byte segments the
    // frame boundary falls where smoltcp's 9-byte ring wraps.
    s.remote_mss = 6;
    assert_eq!(s.send_slice(b"xxxyyy"), Ok(6));
    // smoltcp: `assert_eq!(s.tx_buffer.dequeue_many(3), &b"xxx"[..])`.
    assert_eq!(s.tx_buffer.bytes(0, 0, 3), &b"xxx"[..]);
    s.tx_buffer.dequeue(3);
    assert_eq!(s.tx_buffer.len(), 3);

    // "abcdef" not contiguous in tx buffer (split over two frames)
    assert_eq!(s.send_slice(b"abcdef"), Ok(6));
    recv!(
        s,
        Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"yyyabc"[..],
            ..RECV_TEMPL
        })
    );
    recv!(
        s,
        Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 6,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"def"[..],
            ..RECV_TEMPL
        })
    );
}

// =========================================================================================//
// Tests for graceful vs ungraceful rx close
// =========================================================================================//

#[test]
fn test_rx_close_fin() {
    let mut s = socket_established();
    send!(
        s,
        TcpRepr {
            control: TcpControl::Fin,
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abc"[..],
            ..SEND_TEMPL
        }
    );
    s.recv(|data| {
        assert_eq!(data, b"abc");
        (3, ())
    })
    .unwrap();
    assert_eq!(s.recv(|_| (0, ())), Err(RecvError::Finished));
}

#[test]
fn test_rx_close_fin_in_fin_wait_1() {
    let mut s = socket_fin_wait_1();
    send!(
        s,
        TcpRepr {
            control: TcpControl::Fin,
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abc"[..],
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::Closing);
    s.recv(|data| {
        assert_eq!(data, b"abc");
        (3, ())
    })
    .unwrap();
    assert_eq!(s.recv(|_| (0, ())), Err(RecvError::Finished));
}

#[test]
fn test_rx_close_fin_in_fin_wait_2() {
    let mut s = socket_fin_wait_2();
    send!(
        s,
        TcpRepr {
            control: TcpControl::Fin,
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 1),
            payload: &b"abc"[..],
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::TimeWait);
    s.recv(|data| {
        assert_eq!(data, b"abc");
        (3, ())
    })
    .unwrap();
    assert_eq!(s.recv(|_| (0, ())), Err(RecvError::Finished));
}

/// zcnet: how the hole tests end under RFC 5961 §3.2 (data at REMOTE_SEQ + 1 + 6 past a hole,
/// RCV.NXT at REMOTE_SEQ + 1 + 3): a reset past the hole is not at RCV.NXT, so it gets a
/// challenge ACK (advertising `window_len`) and the connection stays; the reset at RCV.NXT
/// closes it.
fn reset_past_the_hole_then_at_rcv_nxt(s: &mut TestSocket, window_len: u16) {
    let rst = |seq| TcpRepr {
        control: TcpControl::Rst,
        seq_number: seq,
        ack_number: Some(LOCAL_SEQ + 1),
        ..SEND_TEMPL
    };
    let reply = send(s, Instant::ZERO, &rst(REMOTE_SEQ + 1 + 9));
    assert_eq!(reply, challenge_ack(REMOTE_SEQ + 1 + 3, window_len));
    assert_eq!(s.state, State::Established);
    assert_eq!(send(s, Instant::ZERO, &rst(REMOTE_SEQ + 1 + 3)), None);
    assert_eq!(s.state, State::Closed);
}

#[test]
fn test_rx_close_fin_with_hole() {
    let mut s = socket_established();
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abc"[..],
            ..SEND_TEMPL
        }
    );
    send!(
        s,
        TcpRepr {
            control: TcpControl::Fin,
            seq_number: REMOTE_SEQ + 1 + 6,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"ghi"[..],
            ..SEND_TEMPL
        },
        Some(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 3),
            window_len: 61,
            ..RECV_TEMPL
        })
    );
    s.recv(|data| {
        assert_eq!(data, b"abc");
        (3, ())
    })
    .unwrap();
    s.recv(|data| {
        assert_eq!(data, b"");
        (0, ())
    })
    .unwrap();
    reset_past_the_hole_then_at_rcv_nxt(&mut s, 64);
    // Error must be `Illegal` even if we've received a FIN,
    // because we are missing data.
    assert_eq!(s.recv(|_| (0, ())), Err(RecvError::InvalidState));
}

/// A FIN that first arrived out of order (ignored: a hole before it) is accepted when the peer
/// retransmits its segment after the hole filled, although all of that segment's data is
/// already here: the FIN occupies the next sequence number we expect.
#[test]
fn test_rx_fin_retransmitted_with_data_already_received() {
    let mut s = socket_established();
    send!(
        s,
        TcpRepr {
            control: TcpControl::Fin,
            seq_number: REMOTE_SEQ + 1 + 3,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"def"[..],
            ..SEND_TEMPL
        },
        Some(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            window_len: 64,
            ..RECV_TEMPL
        })
    );
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abc"[..],
            ..SEND_TEMPL
        },
        Some(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 6),
            window_len: 58,
            ..RECV_TEMPL
        })
    );
    assert_eq!(s.state, State::Established, "the FIN was ignored");
    send!(
        s,
        TcpRepr {
            control: TcpControl::Fin,
            seq_number: REMOTE_SEQ + 1 + 3,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"def"[..],
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::CloseWait);
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 6 + 1),
            window_len: 58,
            ..RECV_TEMPL
        }]
    );
    let mut buf = [0u8; 8];
    assert_eq!(s.recv_slice(&mut buf), Ok(6));
    assert_eq!(&buf[..6], b"abcdef");
}

#[test]
fn test_rx_close_rst() {
    let mut s = socket_established();
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abc"[..],
            ..SEND_TEMPL
        }
    );
    send!(
        s,
        TcpRepr {
            control: TcpControl::Rst,
            seq_number: REMOTE_SEQ + 1 + 3,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        }
    );
    s.recv(|data| {
        assert_eq!(data, b"abc");
        (3, ())
    })
    .unwrap();
    assert_eq!(s.recv(|_| (0, ())), Err(RecvError::InvalidState));
}

#[test]
fn test_rx_close_rst_with_hole() {
    let mut s = socket_established();
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abc"[..],
            ..SEND_TEMPL
        }
    );
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1 + 6,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"ghi"[..],
            ..SEND_TEMPL
        },
        Some(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 3),
            window_len: 61,
            ..RECV_TEMPL
        })
    );
    reset_past_the_hole_then_at_rcv_nxt(&mut s, 61);
    s.recv(|data| {
        assert_eq!(data, b"abc");
        (3, ())
    })
    .unwrap();
    assert_eq!(s.recv(|_| (0, ())), Err(RecvError::InvalidState));
}

// =========================================================================================//
// zcnet: RFC 5961 (blind in-window attacks)
// =========================================================================================//

/// RCV.NXT: the next sequence number expected (data received but not yet acknowledged
/// included).
fn rcv_nxt(s: &TestSocket) -> TcpSeqNumber {
    s.remote_seq_no + s.rx_buffer.len()
}

/// The challenge ACK an established test socket sends: our SND.NXT, RCV.NXT, our window.
fn challenge_ack(ack: TcpSeqNumber, window_len: u16) -> Option<TcpRepr<'static>> {
    Some(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(ack),
        window_len,
        ..RECV_TEMPL
    })
}

/// zcnet: an in-window reset not at RCV.NXT gets a challenge ACK and leaves the connection
/// open (RFC 5961 §3.2); a second one within the second gets nothing (the per-connection
/// limit); one at exactly RCV.NXT closes it, whatever its ACK field says.
#[test]
fn test_rfc5961_rst_in_window_not_exact() {
    let mut s = socket_established();
    let rst = |seq| TcpRepr {
        control: TcpControl::Rst,
        seq_number: seq,
        ack_number: None,
        ..SEND_TEMPL
    };
    send!(s, rst(REMOTE_SEQ + 1 + 5), challenge_ack(REMOTE_SEQ + 1, 64));
    assert_eq!(s.state, State::Established);
    send!(s, time 500, rst(REMOTE_SEQ + 1 + 63));
    assert_eq!(s.state, State::Established);
    // The connection still works: data at RCV.NXT is taken.
    send!(
        s,
        time 600,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abc"[..],
            ..SEND_TEMPL
        }
    );
    assert_eq!(rcv_nxt(&s), REMOTE_SEQ + 1 + 3);
    // RCV.NXT moved: the old exact number is below the window now, dropped silently.
    send!(s, time 2000, rst(REMOTE_SEQ + 1), None);
    assert_eq!(s.state, State::Established);
    // Exactly RCV.NXT, with an ACK field beyond anything sent: the reset is taken.
    send!(
        s,
        time 2100,
        TcpRepr {
            ack_number: Some(LOCAL_SEQ + 1000),
            ..rst(REMOTE_SEQ + 1 + 3)
        }
    );
    assert_eq!(s.state, State::Closed);
}

/// zcnet: RFC 5961 §3.2 in SYN-RECEIVED too: an in-window reset not at RCV.NXT gets a challenge
/// ACK and the handshake goes on.
#[test]
fn test_rfc5961_rst_in_window_not_exact_syn_received() {
    let mut s = socket_syn_received();
    s.listen_endpoint = LISTEN_END;
    // The SYN-ACK goes out: the window it advertises is open.
    recv(&mut s, Instant::ZERO, |r| assert!(r.is_ok()));
    let reply = send(
        &mut s,
        Instant::ZERO,
        &TcpRepr {
            control: TcpControl::Rst,
            seq_number: REMOTE_SEQ + 1 + 10,
            ack_number: None,
            ..SEND_TEMPL
        },
    )
    .expect("a challenge ACK");
    assert_eq!(reply.control, TcpControl::None);
    assert_eq!(reply.ack_number, Some(REMOTE_SEQ + 1));
    assert_eq!(s.state, State::SynReceived);
    send!(
        s,
        time 2000,
        TcpRepr {
            control: TcpControl::Rst,
            seq_number: REMOTE_SEQ + 1,
            ack_number: None,
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::Listen);
}

/// zcnet: a SYN on a synchronized connection, in the window or not, with an ACK or without,
/// gets a challenge ACK and is otherwise ignored (RFC 5961 §4.2).
#[test]
fn test_rfc5961_syn_on_established() {
    let syn = |seq, ack| TcpRepr {
        control: TcpControl::Syn,
        seq_number: seq,
        ack_number: ack,
        max_seg_size: Some(1400),
        ..SEND_TEMPL
    };
    for (seq, ack) in [
        (REMOTE_SEQ + 1, None),
        (REMOTE_SEQ + 1 + 10, None),
        (REMOTE_SEQ + 1 + 100_000, None),
        (REMOTE_SEQ + 1 + 10, Some(LOCAL_SEQ + 1)),
        (REMOTE_SEQ - 100_000, Some(LOCAL_SEQ + 1)),
    ] {
        let mut s = socket_established();
        send!(s, syn(seq, ack), challenge_ack(REMOTE_SEQ + 1, 64));
        assert_eq!(s.state, State::Established);
        assert_eq!(s.remote_seq_no, REMOTE_SEQ + 1);
        assert_eq!(s.remote_mss, DEFAULT_MSS, "the SYN's options are ignored");
        // Rate-limited per connection.
        send!(s, time 10, syn(seq, ack), None);
        assert_eq!(s.state, State::Established);
    }
}

/// zcnet: the same in the other synchronized states, TIME-WAIT included (its timer is not
/// restarted by the SYN).
#[test]
fn test_rfc5961_syn_on_other_synchronized_states() {
    for mut s in [
        socket_fin_wait_1(),
        socket_fin_wait_2(),
        socket_close_wait(),
        socket_closing(),
        socket_last_ack(),
        socket_time_wait(false),
    ] {
        let state = s.state;
        let timer = s.timer;
        let reply = send(
            &mut s,
            Instant::from_millis(5),
            &TcpRepr {
                control: TcpControl::Syn,
                seq_number: REMOTE_SEQ + 1 + 20,
                ack_number: None,
                ..SEND_TEMPL
            },
        )
        .unwrap_or_else(|| panic!("no challenge ACK in {state}"));
        assert_eq!(reply.control, TcpControl::None, "{state}");
        assert_eq!(reply.ack_number, Some(s.remote_seq_no), "{state}");
        assert_eq!(s.state, state);
        if state == State::TimeWait {
            assert_eq!(s.timer, timer);
        }
    }
}

/// zcnet: an ACK beyond SND.MAX (here of data queued but not yet sent) gets a challenge ACK and
/// the whole segment is dropped, its data too (RFC 5961 §5.2); once the data is sent, the same
/// ACK is taken.
#[test]
fn test_rfc5961_ack_beyond_snd_max() {
    let mut s = socket_established();
    s.send_slice(b"abcdef").unwrap();
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 3),
            payload: &b"xyz"[..],
            ..SEND_TEMPL
        },
        challenge_ack(REMOTE_SEQ + 1, 64)
    );
    assert_eq!(s.state, State::Established);
    assert_eq!(s.local_seq_no, LOCAL_SEQ + 1);
    assert_eq!(s.tx_buffer.len(), 6);
    assert_eq!(rcv_nxt(&s), REMOTE_SEQ + 1, "the data was not taken");
    recv!(
        s,
        time 1000,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"abcdef"[..],
            ..RECV_TEMPL
        }]
    );
    assert_eq!(s.sent_max, Some(LOCAL_SEQ + 1 + 6));
    // One past what was sent is still beyond SND.MAX (the per-connection limit has passed).
    send!(
        s,
        time 1100,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 7),
            ..SEND_TEMPL
        },
        Some(TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 6,
            ack_number: Some(REMOTE_SEQ + 1),
            window_len: 64,
            ..RECV_TEMPL
        })
    );
    assert_eq!(s.tx_buffer.len(), 6);
    send!(
        s,
        time 1200,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 3),
            payload: &b"xyz"[..],
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.local_seq_no, LOCAL_SEQ + 1 + 3);
    assert_eq!(s.tx_buffer.len(), 3);
    assert_eq!(rcv_nxt(&s), REMOTE_SEQ + 1 + 3);
}

/// zcnet: a FIN queued by `close` but not yet sent cannot be acknowledged: an ACK of it is
/// beyond SND.MAX.
#[test]
fn test_rfc5961_ack_of_unsent_fin() {
    let mut s = socket_established();
    s.close();
    assert_eq!(s.state, State::FinWait1);
    let reply = send(
        &mut s,
        Instant::ZERO,
        &TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 1),
            ..SEND_TEMPL
        },
    );
    assert!(reply.is_some(), "a challenge ACK");
    assert_eq!(s.state, State::FinWait1);
}

/// zcnet: an old duplicate ACK (below SND.UNA, within the largest window the remote advertised)
/// still brings its data and FIN; its acknowledgement and window are ignored.
#[test]
fn test_rfc5961_old_ack_with_data() {
    let mut s = socket_established();
    s.send_slice(b"abcdef").unwrap();
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"abcdef"[..],
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 6),
            window_len: 200,
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.local_seq_no, LOCAL_SEQ + 1 + 6);
    assert_eq!(s.remote_win_len, 200);
    send!(
        s,
        TcpRepr {
            control: TcpControl::Fin,
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 2),
            window_len: 10,
            payload: &b"xyz"[..],
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.local_seq_no, LOCAL_SEQ + 1 + 6, "SND.UNA does not move back");
    assert_eq!(s.remote_win_len, 200, "the old window is ignored");
    assert_eq!(rcv_nxt(&s), REMOTE_SEQ + 1 + 3 + 1, "data and FIN taken");
    assert_eq!(s.state, State::CloseWait);
    let mut buf = [0u8; 8];
    assert_eq!(s.recv_slice(&mut buf), Ok(3));
    assert_eq!(&buf[..3], b"xyz");
}

/// zcnet: an ACK further below SND.UNA than the largest window the remote advertised gets a
/// challenge ACK and the segment is dropped, data included (RFC 5961 §5.2).
#[test]
fn test_rfc5961_ack_too_old() {
    let mut s = socket_established();
    // 1000 bytes were sent and acknowledged; the remote never advertised more than 256.
    s.local_seq_no = LOCAL_SEQ + 1 + 1000;
    s.remote_last_seq = LOCAL_SEQ + 1 + 1000;
    s.max_remote_win = 256;
    let reply = send(
        &mut s,
        Instant::ZERO,
        &TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 1000 - 257),
            payload: &b"xyz"[..],
            ..SEND_TEMPL
        },
    )
    .expect("a challenge ACK");
    assert_eq!(reply.ack_number, Some(REMOTE_SEQ + 1));
    assert_eq!(rcv_nxt(&s), REMOTE_SEQ + 1, "the data was not taken");
    assert_eq!(s.local_seq_no, LOCAL_SEQ + 1 + 1000);
    // At the largest window's edge it is an old duplicate: its data is taken.
    send!(
        s,
        time 10,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 1000 - 256),
            payload: &b"xyz"[..],
            ..SEND_TEMPL
        }
    );
    assert_eq!(rcv_nxt(&s), REMOTE_SEQ + 1 + 3);
    assert_eq!(s.local_seq_no, LOCAL_SEQ + 1 + 1000);
}

/// zcnet: an ACK exactly 2^31 from SND.UNA with nothing in flight (below SND.UNA and not above
/// SND.MAX, in sequence-number order): a challenge ACK, no underflow.
#[test]
fn test_rfc5961_ack_half_the_sequence_space_away() {
    let mut s = socket_established();
    let far = TcpSeqNumber((LOCAL_SEQ + 1).0.wrapping_add(i32::MIN));
    let reply = send(
        &mut s,
        Instant::ZERO,
        &TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(far),
            payload: &b"xyz"[..],
            ..SEND_TEMPL
        },
    );
    assert_eq!(reply, challenge_ack(REMOTE_SEQ + 1, 64));
    assert_eq!(s.local_seq_no, LOCAL_SEQ + 1);
    assert_eq!(rcv_nxt(&s), REMOTE_SEQ + 1, "the data was not taken");
}

/// zcnet: an acknowledgement is never accepted past the send buffer and the SYN and FIN in
/// flight, whatever `sent_max` says (here a wrong one, 100 bytes past an empty buffer).
#[test]
fn test_rfc5961_ack_bounded_by_the_send_buffer() {
    let mut s = socket_established();
    s.sent_max = Some(LOCAL_SEQ + 1 + 100);
    let reply = send(
        &mut s,
        Instant::ZERO,
        &TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 50),
            ..SEND_TEMPL
        },
    );
    assert_eq!(reply, challenge_ack(REMOTE_SEQ + 1, 64));
    assert_eq!(s.local_seq_no, LOCAL_SEQ + 1);
}

/// zcnet: a listening socket that went back to LISTEN after a failed handshake forgets that
/// handshake's SND.MAX and largest window when the next SYN arrives: an ACK up to the old
/// SND.MAX is not acceptable in the new connection.
#[test]
fn test_rfc5961_listen_again_forgets_the_old_snd_max() {
    let mut s = socket_listen();
    s.sent_max = Some(TcpSeqNumber(i32::MAX));
    s.max_remote_win = 1 << 20;
    send!(
        s,
        TcpRepr {
            control: TcpControl::Syn,
            seq_number: REMOTE_SEQ,
            ack_number: None,
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state, State::SynReceived);
    assert_eq!(s.sent_max, None);
    assert_eq!(s.max_remote_win, 256, "the SYN's window");
}

/// zcnet: the stack-wide budget (RFC 5961 §7): with it spent, a connection whose own limit
/// allows a challenge ACK sends none, and the withheld one is counted.
#[test]
fn test_rfc5961_stack_wide_challenge_ack_limit() {
    let secret = crate::config::Secret::new([0; crate::config::Secret::LEN]);
    let prf = crate::keys::Prf::new(&secret);
    let budget: &'static mut ChallengeAcks = Box::leak(Box::new(ChallengeAcks::new(&prf)));
    let mut s = socket_established();
    let cx = core::mem::replace(&mut s.cx, test_context());
    s.cx = cx.with_challenge_acks(budget);
    let rst = TcpRepr {
        control: TcpControl::Rst,
        seq_number: REMOTE_SEQ + 1 + 5,
        ack_number: None,
        ..SEND_TEMPL
    };
    // Other connections spent the budget of the second that began at 0 (at least half the
    // average, at most one and a half times).
    let b = s.cx.challenge_acks.as_deref_mut().unwrap();
    let mut spent = 0;
    while b.take(Instant::ZERO) {
        spent += 1;
    }
    let bounds = CHALLENGE_ACKS_PER_SECOND / 2..CHALLENGE_ACKS_PER_SECOND * 3 / 2;
    assert!(bounds.contains(&spent), "{spent}");
    assert_eq!(b.take_withheld(), 1);
    // This connection has sent none: its own limit allows one, the stack's does not.
    send!(s, time 500, rst, None);
    assert_eq!(s.state, State::Established);
    assert_eq!(s.cx.challenge_acks.as_deref_mut().unwrap().take_withheld(), 1);
    // A new second: a new budget.
    send!(s, time 1000, rst, challenge_ack(REMOTE_SEQ + 1, 64));
    assert_eq!(s.cx.challenge_acks.as_deref_mut().unwrap().take_withheld(), 0);
}

// =========================================================================================//
// Tests for delayed ACK
// =========================================================================================//

#[test]
fn test_delayed_ack() {
    let mut s = socket_established();
    s.set_ack_delay(Some(ACK_DELAY_DEFAULT));
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abc"[..],
            ..SEND_TEMPL
        }
    );

    // No ACK is immediately sent.
    recv_nothing!(s);

    // After 10ms, it is sent.
    recv!(s, time 11, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1 + 3),
        window_len: 61,
        ..RECV_TEMPL
    }));
}

#[test]
fn test_delayed_ack_win() {
    let mut s = socket_established();
    s.set_ack_delay(Some(ACK_DELAY_DEFAULT));
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abc"[..],
            ..SEND_TEMPL
        }
    );

    // Reading the data off the buffer should cause a window update.
    s.recv(|data| {
        assert_eq!(data, b"abc");
        (3, ())
    })
    .unwrap();

    // However, no ACK or window update is immediately sent.
    recv_nothing!(s);

    // After 10ms, it is sent.
    recv!(s, time 11, Ok(TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1 + 3),
        ..RECV_TEMPL
    }));
}

#[test]
fn test_delayed_ack_reply() {
    let mut s = socket_established();
    s.set_ack_delay(Some(ACK_DELAY_DEFAULT));
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"abc"[..],
            ..SEND_TEMPL
        }
    );

    s.recv(|data| {
        assert_eq!(data, b"abc");
        (3, ())
    })
    .unwrap();

    s.send_slice(&b"xyz"[..]).unwrap();

    // Writing data to the socket causes ACK to not be delayed,
    // because it is immediately sent with the data.
    recv!(
        s,
        Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + 3),
            payload: &b"xyz"[..],
            ..RECV_TEMPL
        })
    );
}

#[test]
fn test_delayed_ack_every_rmss() {
    let mut s = socket_established_with_buffer_sizes(DEFAULT_MSS * 2, DEFAULT_MSS * 2);
    s.set_ack_delay(Some(ACK_DELAY_DEFAULT));
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &[0; DEFAULT_MSS - 1],
            ..SEND_TEMPL
        }
    );

    // No ACK is immediately sent.
    recv_nothing!(s);

    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1 + (DEFAULT_MSS - 1),
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"a"[..],
            ..SEND_TEMPL
        }
    );

    // No ACK is immediately sent.
    recv_nothing!(s);

    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1 + DEFAULT_MSS,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"a"[..],
            ..SEND_TEMPL
        }
    );

    // RMSS+1 bytes of data has been received, so ACK is sent without delay.
    recv!(
        s,
        Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + (DEFAULT_MSS + 1)),
            window_len: (DEFAULT_MSS - 1) as u16,
            ..RECV_TEMPL
        })
    );
}

#[test]
fn test_delayed_ack_every_rmss_or_more() {
    let mut s = socket_established_with_buffer_sizes(DEFAULT_MSS * 2, DEFAULT_MSS * 2);
    s.set_ack_delay(Some(ACK_DELAY_DEFAULT));
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &[0; DEFAULT_MSS],
            ..SEND_TEMPL
        }
    );

    // No ACK is immediately sent.
    recv_nothing!(s);

    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1 + DEFAULT_MSS,
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"a"[..],
            ..SEND_TEMPL
        }
    );

    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1 + (DEFAULT_MSS + 1),
            ack_number: Some(LOCAL_SEQ + 1),
            payload: &b"b"[..],
            ..SEND_TEMPL
        }
    );

    // RMSS+2 bytes of data has been received, so ACK is sent without delay.
    recv!(
        s,
        Ok(TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1 + (DEFAULT_MSS + 2)),
            window_len: (DEFAULT_MSS - 2) as u16,
            ..RECV_TEMPL
        })
    );
}

// =========================================================================================//
// Tests for Nagle's Algorithm
// =========================================================================================//

#[test]
fn test_nagle() {
    let mut s = socket_established();
    s.remote_mss = 6;

    s.send_slice(b"abcdef").unwrap();
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"abcdef"[..],
            ..RECV_TEMPL
        }]
    );

    // If there's data in flight, full segments get sent.
    s.send_slice(b"foobar").unwrap();
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 6,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"foobar"[..],
            ..RECV_TEMPL
        }]
    );

    s.send_slice(b"aaabbbccc").unwrap();
    // If there's data in flight, not-full segments don't get sent.
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 6 + 6,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"aaabbb"[..],
            ..RECV_TEMPL
        }]
    );

    // Data gets ACKd, so there's no longer data in flight
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 6 + 6 + 6),
            ..SEND_TEMPL
        }
    );

    // Now non-full segment gets sent.
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 6 + 6 + 6,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"ccc"[..],
            ..RECV_TEMPL
        }]
    );
}

#[test]
fn test_nagle_works_with_reduced_payload_from_options() {
    const EFFECTIVE_MSS: usize = 64;

    let mut s = socket_established_with_buffer_sizes(256, 64);
    s.set_nagle_enabled(true);
    s.set_tsval_generator(Some(|| 1));
    s.remote_mss = EFFECTIVE_MSS;

    // Send small segment to "arm" Nagle's
    s.send_slice(b"abcdef").unwrap();
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"abcdef"[..],
            timestamp: Some(TcpTimestampRepr::new(1, 0)),
            ..RECV_TEMPL
        }]
    );

    // A full segment (once options are accounted for) should not be delayed and contain 12 bytes less due to timestamp
    s.send_slice(&[0; EFFECTIVE_MSS - 12]).unwrap();
    recv!(
        s,
        time 0,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 6,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &[0; EFFECTIVE_MSS - 12],
            timestamp: Some(TcpTimestampRepr::new(1, 0)),
            ..RECV_TEMPL
        }]
    );
}

#[test]
fn test_final_packet_in_stream_doesnt_wait_for_nagle() {
    let mut s = socket_established();
    s.remote_mss = 6;
    s.send_slice(b"abcdef0").unwrap();
    s.socket.close();

    recv!(s, time 0, Ok(TcpRepr {
        control:    TcpControl::None,
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"abcdef"[..],
        ..RECV_TEMPL
    }), exact);
    recv!(s, time 0, Ok(TcpRepr {
        control:    TcpControl::Fin,
        seq_number: LOCAL_SEQ + 1 + 6,
        ack_number: Some(REMOTE_SEQ + 1),
        payload:    &b"0"[..],
        ..RECV_TEMPL
    }), exact);
}

// =========================================================================================//
// Tests for packet filtering.
// =========================================================================================//

#[test]
fn test_doesnt_accept_wrong_port() {
    let mut s = socket_established();
    s.rx_buffer = RecvBuffer::new(6);
    s.assembler = Assembler::new();

    let tcp_repr = TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1),
        dst_port: LOCAL_PORT + 1,
        ..SEND_TEMPL
    };
    assert!(!s.socket.accepts(&SEND_IP_TEMPL, &tcp_repr));

    let tcp_repr = TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1),
        src_port: REMOTE_PORT + 1,
        ..SEND_TEMPL
    };
    assert!(!s.socket.accepts(&SEND_IP_TEMPL, &tcp_repr));
}

#[test]
fn test_doesnt_accept_wrong_ip() {
    let s = socket_established();

    let tcp_repr = TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1),
        payload: &b"abcdef"[..],
        ..SEND_TEMPL
    };

    let ip_repr = IpReprIpvX(IpvXRepr {
        src_addr: REMOTE_ADDR,
        dst_addr: LOCAL_ADDR,
        next_header: IpProtocol::Tcp,
        payload_len: tcp_repr.buffer_len(),
        hop_limit: 64,
    });
    assert!(s.socket.accepts(&ip_repr, &tcp_repr));

    let ip_repr_wrong_src = IpReprIpvX(IpvXRepr {
        src_addr: OTHER_ADDR,
        dst_addr: LOCAL_ADDR,
        next_header: IpProtocol::Tcp,
        payload_len: tcp_repr.buffer_len(),
        hop_limit: 64,
    });
    assert!(!s.socket.accepts(&ip_repr_wrong_src, &tcp_repr));

    let ip_repr_wrong_dst = IpReprIpvX(IpvXRepr {
        src_addr: REMOTE_ADDR,
        dst_addr: OTHER_ADDR,
        next_header: IpProtocol::Tcp,
        payload_len: tcp_repr.buffer_len(),
        hop_limit: 64,
    });
    assert!(!s.socket.accepts(&ip_repr_wrong_dst, &tcp_repr));
}

// =========================================================================================//
// Timer tests
// =========================================================================================//

#[test]
fn test_timer_retransmit() {
    const RTO: Duration = Duration::from_millis(100);
    let mut r = Timer::new();
    assert!(!r.should_retransmit(Instant::from_secs(1)));
    r.set_for_retransmit(Instant::from_millis(1000), RTO);
    assert!(!r.should_retransmit(Instant::from_millis(1000)));
    assert!(!r.should_retransmit(Instant::from_millis(1050)));
    assert!(r.should_retransmit(Instant::from_millis(1101)));
    r.set_for_retransmit(Instant::from_millis(1101), RTO);
    assert!(!r.should_retransmit(Instant::from_millis(1101)));
    assert!(!r.should_retransmit(Instant::from_millis(1150)));
    assert!(!r.should_retransmit(Instant::from_millis(1200)));
    assert!(r.should_retransmit(Instant::from_millis(1301)));
    r.set_for_idle(Instant::from_millis(1301), None);
    assert!(!r.should_retransmit(Instant::from_millis(1350)));
}

#[test]
fn test_rtt_estimator() {
    let mut r = RttEstimator::default();

    let rtos = &[
        6000, 5000, 4252, 3692, 3272, 2956, 2720, 2540, 2408, 2308, 2232, 2176, 2132, 2100, 2076,
        2060, 2048, 2036, 2028, 2024, 2020, 2016, 2012, 2012,
    ];

    for &rto in rtos {
        r.sample(2000);
        assert_eq!(r.retransmission_timeout(), Duration::from_millis(rto));
    }
}

#[test]
fn test_set_get_congestion_control() {
    let mut s = socket_established();

    {
        s.set_congestion_control(CongestionControl::Reno);
        assert_eq!(s.congestion_control(), CongestionControl::Reno);
    }

    {
        s.set_congestion_control(CongestionControl::Cubic);
        assert_eq!(s.congestion_control(), CongestionControl::Cubic);
    }

    s.set_congestion_control(CongestionControl::None);
    assert_eq!(s.congestion_control(), CongestionControl::None);
}

// =========================================================================================//
// Timestamp tests
// =========================================================================================//

/// zcnet: an established connection with timestamps from the clock (offset 0: TSval is the
/// time in milliseconds) whose TS.Recent is 100.
fn socket_established_with_clock_timestamps() -> TestSocket {
    let mut s = socket_established();
    s.tsval_generator = Some(TsvalSource::Clock { offset: 0 });
    s.last_remote_tsval = 100;
    s
}

/// zcnet: the peer's segment carrying `payload` at `REMOTE_SEQ + 1 + at`, with TSval `tsval`.
fn peer_data_ts(at: usize, payload: &[u8], tsval: u32) -> TcpRepr<'_> {
    TcpRepr {
        seq_number: REMOTE_SEQ + 1 + at,
        ack_number: Some(LOCAL_SEQ + 1),
        payload,
        timestamp: Some(TcpTimestampRepr::new(tsval, 0)),
        ..SEND_TEMPL
    }
}

/// zcnet: our pure ACK of everything in order so far, with timestamps `(tsval, tsecr)`.
fn our_ack_ts(tsval: u32, tsecr: u32) -> TcpRepr<'static> {
    TcpRepr {
        seq_number: LOCAL_SEQ + 1,
        ack_number: Some(REMOTE_SEQ + 1),
        timestamp: Some(TcpTimestampRepr::new(tsval, tsecr)),
        ..RECV_TEMPL
    }
}

/// zcnet: PAWS (RFC 7323 section 5): a data segment whose TSval is older than TS.Recent is
/// acknowledged (echoing TS.Recent) and dropped; a newer one is taken and moves TS.Recent.
#[test]
fn test_paws_drops_an_old_duplicate() {
    let mut s = socket_established_with_clock_timestamps();
    send!(s, time 10, peer_data_ts(0, b"old", 90), Some(our_ack_ts(10, 100)));
    assert!(s.rx_buffer.is_empty());
    assert_eq!(s.last_remote_tsval, 100);
    send!(s, time 20, peer_data_ts(0, b"new", 101));
    assert_eq!(s.rx_buffer.len(), 3);
    assert_eq!(s.last_remote_tsval, 101);
}

/// zcnet: an out-of-order segment does not move TS.Recent (RFC 7323 section 4.3: only a
/// segment at the left edge of the window does), and its immediate ACK echoes TS.Recent.
#[test]
fn test_ts_recent_ignores_out_of_order_segments() {
    let mut s = socket_established_with_clock_timestamps();
    send!(s, time 10, peer_data_ts(3, b"def", 150), Some(our_ack_ts(10, 100)));
    assert_eq!(s.last_remote_tsval, 100);
}

/// zcnet: with timestamps, the ACK's echoed TSval gives the RTT: sent at 1000 ms, echoed in an
/// ACK at 1250 ms, a first sample of 250 ms.
#[test]
fn test_rtt_from_the_echoed_timestamp() {
    let mut s = socket_established_with_clock_timestamps();
    s.send_slice(b"abcdef").unwrap();
    recv!(
        s,
        time 1000,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"abcdef"[..],
            timestamp: Some(TcpTimestampRepr::new(1000, 100)),
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        time 1250,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 6),
            timestamp: Some(TcpTimestampRepr::new(120, 1000)),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.rtte.smoothed_rtt(), 250);
}

#[test]
fn test_tsval_established_connection() {
    let mut s = socket_established();
    s.set_tsval_generator(Some(|| 1));

    assert!(s.timestamp_enabled());

    // First roundtrip after establishing.
    s.send_slice(b"abcdef").unwrap();
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"abcdef"[..],
            timestamp: Some(TcpTimestampRepr::new(1, 0)),
            ..RECV_TEMPL
        }]
    );
    assert_eq!(s.tx_buffer.len(), 6);
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 6),
            timestamp: Some(TcpTimestampRepr::new(500, 1)),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.tx_buffer.len(), 0);
    // Second roundtrip.
    s.send_slice(b"foobar").unwrap();
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1 + 6,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"foobar"[..],
            timestamp: Some(TcpTimestampRepr::new(1, 500)),
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + 6 + 6),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.tx_buffer.len(), 0);
}

#[test]
fn test_tsval_disabled_in_remote_client() {
    let mut s = socket_listen();
    s.set_tsval_generator(Some(|| 1));
    assert!(s.timestamp_enabled());
    send!(
        s,
        TcpRepr {
            control: TcpControl::Syn,
            seq_number: REMOTE_SEQ,
            ack_number: None,
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state(), State::SynReceived);
    assert_eq!(s.tuple, Some(TUPLE));
    assert!(!s.timestamp_enabled());
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: Some(REMOTE_SEQ + 1),
            max_seg_size: Some(BASE_MSS),
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state(), State::Established);
    assert_eq!(s.local_seq_no, LOCAL_SEQ + 1);
    assert_eq!(s.remote_seq_no, REMOTE_SEQ + 1);
}

#[test]
fn test_tsval_disabled_in_local_server() {
    let mut s = socket_listen();
    // s.set_timestamp(false); // commented to alert if the default state changes
    assert!(!s.timestamp_enabled());
    send!(
        s,
        TcpRepr {
            control: TcpControl::Syn,
            seq_number: REMOTE_SEQ,
            ack_number: None,
            timestamp: Some(TcpTimestampRepr::new(500, 0)),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state(), State::SynReceived);
    assert_eq!(s.tuple, Some(TUPLE));
    assert!(!s.timestamp_enabled());
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: Some(REMOTE_SEQ + 1),
            max_seg_size: Some(BASE_MSS),
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.state(), State::Established);
    assert_eq!(s.local_seq_no, LOCAL_SEQ + 1);
    assert_eq!(s.remote_seq_no, REMOTE_SEQ + 1);
}

#[test]
fn test_tsval_disabled_in_remote_server() {
    let mut s = socket();
    s.set_tsval_generator(Some(|| 1));
    assert!(s.timestamp_enabled());
    s.local_seq_no = LOCAL_SEQ;
    s.socket
        .connect(&mut s.cx, REMOTE_END, LOCAL_END.port)
        .unwrap();
    assert_eq!(s.tuple, Some(TUPLE));
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: None,
            max_seg_size: Some(BASE_MSS),
            window_scale: Some(0),
            sack_permitted: true,
            timestamp: Some(TcpTimestampRepr::new(1, 0)),
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            control: TcpControl::Syn,
            seq_number: REMOTE_SEQ,
            ack_number: Some(LOCAL_SEQ + 1),
            max_seg_size: Some(BASE_MSS - 80),
            window_scale: Some(0),
            timestamp: None,
            ..SEND_TEMPL
        }
    );
    assert!(!s.timestamp_enabled());
    s.send_slice(b"abcdef").unwrap();
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"abcdef"[..],
            timestamp: None,
            ..RECV_TEMPL
        }]
    );
}

#[test]
fn test_tsval_disabled_in_local_client() {
    let mut s = socket();
    // s.set_timestamp(false); // commented to alert if the default state changes
    assert!(!s.timestamp_enabled());
    s.local_seq_no = LOCAL_SEQ;
    s.socket
        .connect(&mut s.cx, REMOTE_END, LOCAL_END.port)
        .unwrap();
    assert_eq!(s.tuple, Some(TUPLE));
    recv!(
        s,
        [TcpRepr {
            control: TcpControl::Syn,
            seq_number: LOCAL_SEQ,
            ack_number: None,
            max_seg_size: Some(BASE_MSS),
            window_scale: Some(0),
            sack_permitted: true,
            ..RECV_TEMPL
        }]
    );
    send!(
        s,
        TcpRepr {
            control: TcpControl::Syn,
            seq_number: REMOTE_SEQ,
            ack_number: Some(LOCAL_SEQ + 1),
            max_seg_size: Some(BASE_MSS - 80),
            window_scale: Some(0),
            timestamp: Some(TcpTimestampRepr::new(500, 0)),
            ..SEND_TEMPL
        }
    );
    assert!(!s.timestamp_enabled());
    s.send_slice(b"abcdef").unwrap();
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"abcdef"[..],
            timestamp: None,
            ..RECV_TEMPL
        }]
    );
}

// =========================================================================================//
// Tests for source IP address change.
// =========================================================================================//

#[test]
fn test_established_close_on_src_ip_change() {
    let mut s = socket_established();

    // Verify socket is working normally
    s.send_slice(b"abc").unwrap();
    recv!(
        s,
        [TcpRepr {
            seq_number: LOCAL_SEQ + 1,
            ack_number: Some(REMOTE_SEQ + 1),
            payload: &b"abc"[..],
            ..RECV_TEMPL
        }]
    );

    // Simulate interface IP change - remove the socket's source IP
    // and add a different one.
    s.cx.addrs = test_iface(&[IpCidr::new(OTHER_ADDR.into(), 24)]);

    // The socket's source IP is no longer on the interface.
    // When dispatch() runs, it should detect this and reset the socket
    // silently (no RST sent, since that would use the invalid source IP).
    s.send_slice(b"def").unwrap();
    recv_nothing!(s);
    assert_eq!(s.state, State::Closed);
}

// =========================================================================================//
// zcnet: the handshake gives up after SYN_RETRIES / SYNACK_RETRIES retransmissions.
// =========================================================================================//

/// Runs `s` from `from` for 10 simulated minutes in 100 ms steps, or until `done` holds;
/// returns the SYN segments it sent (with or without ACK) and the time it stopped.
fn run_handshake(
    s: &mut TestSocket,
    from: i64,
    done: impl Fn(&TestSocket) -> bool,
) -> (usize, Instant) {
    let mut syns = 0;
    let mut t = Instant::from_millis(from);
    let end = t + Duration::from_secs(600);
    while t < end && !done(s) {
        s.cx.set_now(t);
        let _ = s.socket.dispatch(&mut s.cx, |_, (_, repr), _| {
            if repr.control == TcpControl::Syn {
                syns += 1;
            }
            Ok::<(), ()>(())
        });
        t += Duration::from_millis(100);
    }
    (syns, t)
}

/// The remote's SYN, opening a handshake with a listening socket.
const SYN_FROM_REMOTE: TcpRepr<'static> = TcpRepr {
    control: TcpControl::Syn,
    seq_number: REMOTE_SEQ,
    ack_number: None,
    ..SEND_TEMPL
};

#[test]
fn test_syn_sent_gives_up_after_syn_retries() {
    let mut s = socket_syn_sent();
    let (syns, t) = run_handshake(&mut s, 0, |s| s.state == State::Closed);
    assert_eq!(s.state, State::Closed, "given up by {t}");
    assert_eq!(syns, 1 + usize::from(SYN_RETRIES));
    assert!(s.gave_up(), "a timeout for the caller");
    // 1 + 2 + 4 + 8 + 16 + 32 s of doubling timeouts, then the 60 s ceiling: 123 s.
    assert!(t >= Instant::from_secs(123) && t < Instant::from_secs(124), "{t}");
    // A new connection starts afresh.
    s.reset();
    assert!(!s.gave_up());
}

#[test]
fn test_syn_received_listens_again_after_synack_retries() {
    let mut s = socket_listen();
    send!(s, SYN_FROM_REMOTE);
    assert_eq!(s.state, State::SynReceived);
    let (synacks, t) = run_handshake(&mut s, 0, |s| s.state != State::SynReceived);
    assert_eq!(s.state, State::Listen, "listening again by {t}");
    assert_eq!(synacks, 1 + usize::from(SYNACK_RETRIES));
    // 1 + 2 + 4 + 8 + 16 + 32 s.
    assert!(t >= Instant::from_secs(63) && t < Instant::from_secs(64), "{t}");
    assert!(!s.gave_up(), "a listener's handshake is no caller's timeout");
    // Quiet afterwards, and a new SYN is answered at once.
    recv_nothing!(s, time 700_000);
    send!(s, time 700_000, SYN_FROM_REMOTE);
    assert_eq!(s.state, State::SynReceived);
    let (synacks, _) = run_handshake(&mut s, 700_000, |s| s.state != State::SynReceived);
    assert_eq!(synacks, 1 + usize::from(SYNACK_RETRIES), "the count starts over");
}

// zcnet: path MTU discovery (`Tcb::path_mtu_reduced`, `path_mtu.rs`).

/// Every segment `dispatch` sends at `t` until it has nothing more: `(sequence number,
/// payload, sent in place)`.
fn drain(s: &mut TestSocket, t: Instant) -> Vec<(TcpSeqNumber, Vec<u8>, bool)> {
    s.cx.set_now(t);
    let mut out = Vec::new();
    loop {
        let mut got = None;
        let r: Result<(), ()> = s.socket.dispatch(&mut s.cx, |_, (_, repr), zc| {
            let mut payload = repr.payload.to_vec();
            if let Some(f) = &zc {
                payload.extend_from_slice(&f[..]);
            }
            got = Some((repr.seq_number, payload, zc.is_some()));
            Ok(())
        });
        assert_eq!(r, Ok(()));
        match got {
            Some(seg) => out.push(seg),
            None => return out,
        }
    }
}

/// zcnet: a "too big" message about a segment in flight (SND.UNA ..< SND.MAX) lowers the path
/// MTU: at once, without a timeout's backoff, everything in flight goes again from SND.UNA in
/// segments that fit, the bytes unchanged; data written afterwards goes in frames of the new
/// segment size, sent in place. The estimate ages out after `PATH_MTU_AGE`, and then data goes
/// out full-sized again.
#[test]
fn test_path_mtu_reduced_resends_in_flight_cut_to_the_path() {
    let mut s = socket_established_with_buffer_sizes(8192, 64);
    s.remote_mss = 1460;
    s.remote_win_len = 8192;
    s.set_nagle_enabled(false);
    let link = s.cx.ip_mtu;
    let full = mss_for(link, LOCAL_END.addr);
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 7 + i / 256) as u8).collect();
    s.send_slice(&data).unwrap();
    let first = drain(&mut s, Instant::from_millis(0));
    assert_eq!(first[0].0, LOCAL_SEQ + 1);
    assert_eq!(first[0].1.len(), full);
    let sent: usize = first.iter().map(|seg| seg.1.len()).sum();
    assert_eq!(sent, data.len());

    // RFC 5927: only SND.UNA ..< SND.MAX is in flight.
    assert!(!s.in_flight(LOCAL_SEQ));
    assert!(s.in_flight(LOCAL_SEQ + 1));
    assert!(s.in_flight(LOCAL_SEQ + data.len()));
    assert!(!s.in_flight(LOCAL_SEQ + 1 + data.len()));
    // Not below the MTU in use: nothing changes.
    let t = Instant::from_millis(10);
    assert!(!s.path_mtu_reduced(link, link, t));
    assert!(drain(&mut s, t).is_empty());

    let mtu = 1000;
    let mss = mss_for(mtu, LOCAL_END.addr);
    assert!(s.path_mtu_reduced(mtu, link, t));
    let rto = s.rtte.retransmission_timeout();
    let again = drain(&mut s, t);
    assert_eq!(again[0].0, LOCAL_SEQ + 1, "from SND.UNA");
    let mut bytes = Vec::new();
    for (seq, payload, _) in &again {
        assert_eq!(*seq, LOCAL_SEQ + 1 + bytes.len(), "contiguous");
        assert!(payload.len() <= mss, "{} > {mss}", payload.len());
        bytes.extend_from_slice(payload);
    }
    assert!(bytes == data, "the same bytes again");
    assert!(again.iter().any(|seg| seg.1.len() == mss), "full segments of the new size");
    assert_eq!(s.rtte.retransmission_timeout(), rto, "no backoff");
    assert_eq!(s.stats().counters.timeouts, 0);
    assert!(s.stats().counters.bytes_retransmitted >= data.len() as u64);

    // New data: frames of the new size, sent in place.
    s.send_slice(&[b'n'; 2 * 1000]).unwrap();
    let new = drain(&mut s, t);
    assert!(!new.is_empty());
    for (_, payload, in_place) in &new {
        assert!(payload.len() <= mss);
        assert!(*in_place, "a whole frame of the new size");
    }

    // Everything acknowledged; the estimate's age is the only deadline left.
    let acked = LOCAL_SEQ + 1 + data.len() + 2 * 1000;
    send!(s, time 20, TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(acked),
        window_len: 8192,
        ..SEND_TEMPL
    });
    let aged = t + Duration::from_secs(crate::transport::tcp::tcb::path_mtu::PATH_MTU_AGE.as_secs());
    assert_eq!(s.socket.poll_at(&mut s.cx), PollAt::Time(aged));
    assert!(drain(&mut s, aged).is_empty());
    assert_eq!(s.socket.poll_at(&mut s.cx), PollAt::Ingress);
    s.send_slice(&data).unwrap();
    let later = drain(&mut s, aged);
    assert_eq!(later[0].0, acked);
    assert_eq!(later[0].1.len(), full, "full-sized again");
}
