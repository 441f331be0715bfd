//! Blind in-window attacks on an established connection (RFC 5961), made over
//! the in-memory wire with crafted frames. An attacker off the path who guessed the four-tuple
//! and landed a sequence number somewhere in the receive window:
//!
//! * a reset not at exactly RCV.NXT gets a challenge ACK, the connection lives on (§3.2);
//! * a SYN gets a challenge ACK, the connection lives on (§4.2);
//! * an ACK of data never sent gets a challenge ACK and the segment, data and all, is dropped
//!   (§5.2);
//!
//! and the peer's own reset, at RCV.NXT, still ends the connection.
//!
//! The stack runs on a virtual clock, with a secret made from a fixed seed, so every run
//! repeats.

use std::time::Duration;

use smoltcp::wire::{TcpControl, TcpRepr, TcpSeqNumber};
use zcnet_stack::tcp::{TcpBuffers, TcpListener};
use zcnet_tests::craft::{arp_request, peer_segment, tcp_in, WireTarget, PEER, STACK};

/// The port the stack listens on, and the peer's.
const PORT: u16 = 80;
const PEER_PORT: u16 = 40000;

/// The peer's initial sequence number.
const PEER_ISN: u32 = 1000;

/// A stack with one connection from [`PEER`] established (handshake done by the test).
struct Conn {
    wire: WireTarget,
    /// Kept so the connection has its listener.
    _listener: TcpListener,
    /// One past the stack's ISN: its SND.NXT (it sends nothing of its own).
    snd: u32,
    /// The peer's next sequence number: the stack's RCV.NXT once it took everything.
    rcv: u32,
}

impl Conn {
    fn new() -> Conn {
        let mut wire = WireTarget::new::<8>(0x5961, 256);
        let listener = TcpListener::bind(wire.stack, PORT, 2, || {
            Some(TcpBuffers::with_capacity(4096, 4096))
        })
        .expect("listener");
        wire.send(&arp_request(PEER, STACK.ip));
        let mut c = Conn {
            wire,
            _listener: listener,
            snd: 0,
            rcv: PEER_ISN,
        };
        c.send(TcpControl::Syn, PEER_ISN, None, &[]);
        let synack = c.next().expect("a SYN-ACK");
        assert_eq!(synack.control, TcpControl::Syn);
        assert_eq!(synack.ack_number, Some(seq(PEER_ISN + 1)));
        c.snd = (synack.seq_number.0 as u32).wrapping_add(1);
        c.rcv = PEER_ISN + 1;
        let ack = Some(c.snd);
        c.send(TcpControl::None, c.rcv, ack, &[]);
        assert_eq!(c.next(), None, "the handshake's ACK needs no answer");
        c
    }

    /// Sends a segment from the peer's four-tuple.
    fn send(&mut self, control: TcpControl, seq_no: u32, ack: Option<u32>, payload: &[u8]) {
        let frame = peer_segment(PEER, (PEER_PORT, PORT), control, seq_no, ack, payload);
        self.wire.send(&frame);
    }

    /// The header of the next segment the stack sends within a second of virtual time.
    fn next(&mut self) -> Option<TcpRepr<'static>> {
        loop {
            let frame = self.wire.recv(Duration::from_secs(1))?;
            if let Some(s) = tcp_in(&frame) {
                assert_eq!(s.tcp.dst_port, PEER_PORT);
                return Some(TcpRepr {
                    payload: &[],
                    ..s.tcp
                });
            }
        }
    }

    /// Expects a bare ACK of `rcv` from the stack (a challenge ACK or the ACK of data).
    #[track_caller]
    fn expect_ack(&mut self, rcv: u32, what: &str) {
        let got = self.next().unwrap_or_else(|| panic!("{what}: no ACK"));
        assert_eq!(got.control.quash_psh(), TcpControl::None, "{what}: {got:?}");
        assert_eq!(got.seq_number, seq(self.snd), "{what}");
        assert_eq!(got.ack_number, Some(seq(rcv)), "{what}");
    }

    /// Shows the connection alive: data at RCV.NXT is acknowledged.
    #[track_caller]
    fn alive(&mut self, what: &str) {
        let ack = Some(self.snd);
        self.send(TcpControl::Psh, self.rcv, ack, b"ping");
        self.rcv += 4;
        let rcv = self.rcv;
        self.expect_ack(rcv, what);
    }

    /// Lets the connection's own challenge ACK limit (one a second) pass.
    fn wait(&self) {
        let exec = self.wire.exec;
        exec.block_on(exec.sleep(Duration::from_millis(1100)));
    }
}

fn seq(n: u32) -> TcpSeqNumber {
    TcpSeqNumber(n as i32)
}

/// The attacker's guesses land in the window but not on RCV.NXT: each gets a challenge ACK
/// (telling the real peer where the connection is) and the connection carries data after
/// each. The peer's reset at RCV.NXT then closes it: a segment after it gets a reset.
#[test]
fn in_window_resets_syns_and_acks_get_challenge_acks() {
    let mut c = Conn::new();
    c.alive("after the handshake");

    // A reset 100 bytes into the window.
    c.wait();
    let (rcv, snd) = (c.rcv, c.snd);
    c.send(TcpControl::Rst, rcv + 100, Some(snd), &[]);
    c.expect_ack(rcv, "the in-window reset");
    c.alive("after the in-window reset");

    // A SYN, in the window and far outside it.
    for guess in [c.rcv + 10, c.rcv.wrapping_add(1 << 30)] {
        c.wait();
        let rcv = c.rcv;
        c.send(TcpControl::Syn, guess, None, &[]);
        c.expect_ack(rcv, "the SYN");
        c.alive("after the SYN");
    }

    // An ACK of 1000 bytes the stack never sent, with data at RCV.NXT: dropped, data and all.
    c.wait();
    let (rcv, snd) = (c.rcv, c.snd);
    c.send(TcpControl::Psh, rcv, Some(snd + 1000), b"forged");
    c.expect_ack(rcv, "the ACK beyond SND.MAX");
    c.alive("after the ACK beyond SND.MAX");

    // The peer's reset, at RCV.NXT exactly: the connection is gone.
    let (rcv, snd) = (c.rcv, c.snd);
    c.send(TcpControl::Rst, rcv, Some(snd), &[]);
    assert_eq!(c.next(), None, "no answer to a reset");
    c.send(TcpControl::Psh, rcv, Some(snd), b"late");
    let rst = c.next().expect("an answer");
    assert_eq!(rst.control, TcpControl::Rst, "no connection any more");
}

/// A burst of guesses within one second gets one challenge ACK: the connection's own limit.
#[test]
fn challenge_acks_are_limited_per_connection() {
    let mut c = Conn::new();
    c.wait();
    let (rcv, snd) = (c.rcv, c.snd);
    for k in 0..20 {
        c.send(TcpControl::Rst, rcv + 1 + 50 * k, Some(snd), &[]);
    }
    c.expect_ack(rcv, "the first reset");
    assert_eq!(c.next(), None, "one challenge ACK for the burst");
    c.alive("after the burst");
}
