//! A connection opened from a SYN cookie (`transport/tcp/cookie.rs`): the state a listening
//! socket would have had after the SYN and its SYN-ACK, rebuilt from the final ACK.

use smoltcp::wire::{IpEndpoint, TcpSeqNumber};

use super::{State, Tcb, Tuple, MIN_REMOTE_MSS};
use crate::transport::tcp::tcb::congestion::Controller;
use crate::transport::tcp::tcb::context::TcpContext;

/// What the final ACK of a cookie handshake and its cookie gave back.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CookieOpen {
    /// Our end (the ACK's destination).
    pub(crate) local: IpEndpoint,
    /// The peer (the ACK's source).
    pub(crate) remote: IpEndpoint,
    /// The cookie: our initial sequence number.
    pub(crate) local_isn: TcpSeqNumber,
    /// The peer's initial sequence number.
    pub(crate) remote_isn: TcpSeqNumber,
    /// The peer's MSS, from the cookie's table.
    pub(crate) remote_mss: u16,
    /// The peer's window scale (`None`: no window scaling).
    pub(crate) remote_wscale: Option<u8>,
    /// Our window scale, as the SYN-ACK announced it (used only with `remote_wscale`).
    pub(crate) local_wscale: u8,
    /// The peer permitted SACK.
    pub(crate) sack: bool,
    /// The peer's TSval in the ACK, if the handshake carried timestamps.
    pub(crate) tsval: Option<u32>,
    /// The (unscaled) window the SYN-ACK announced.
    pub(crate) window: u16,
}

impl Tcb<'_> {
    /// Puts this closed or listening connection in SYN-RECEIVED as if it had taken the SYN
    /// and sent the SYN-ACK `open` describes; [`process`](Self::process) with the final ACK
    /// then establishes it (and takes the ACK's data and FIN). A reset in SYN-RECEIVED sends a
    /// listening socket back to listening and closes a closed one, as for any handshake.
    pub(crate) fn open_from_cookie(&mut self, cx: &mut TcpContext<'_>, open: CookieOpen) {
        debug_assert!(matches!(self.state, State::Closed | State::Listen));
        self.remote_mss = usize::from(open.remote_mss).max(MIN_REMOTE_MSS);
        self.congestion_controller
            .inner_mut()
            .set_mss(self.remote_mss);
        self.set_tuple(Some(Tuple {
            local: open.local,
            remote: open.remote,
        }));
        self.local_seq_no = open.local_isn;
        self.remote_seq_no = open.remote_isn + 1;
        // The SYN-ACK was sent: its SYN is the one sequence number in flight.
        self.remote_last_seq = open.local_isn + 1;
        self.sent_max = Some(open.local_isn + 1);
        self.max_remote_win = 0;
        self.remote_has_sack = open.sack;
        self.remote_win_scale = open.remote_wscale;
        self.remote_win_shift = match open.remote_wscale {
            Some(_) => open.local_wscale,
            None => 0,
        };
        self.arm_timestamps(cx);
        match open.tsval {
            Some(tsval) => self.last_remote_tsval = tsval,
            None => self.tsval_generator = None,
        }
        // The SYN-ACK acknowledged the SYN and announced `window` (a SYN's is not scaled).
        self.note_advertised(Some(self.remote_seq_no), open.window, 0);
        self.set_state(State::SynReceived);
        self.timer.set_for_idle(cx.now, self.keep_alive);
    }
}
