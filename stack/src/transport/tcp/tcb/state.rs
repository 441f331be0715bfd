//! The connection states of RFC 793.

use core::fmt;

/// The state of a TCP connection, according to [RFC 793].
///
/// [RFC 793]: https://tools.ietf.org/html/rfc793
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum State {
    /// No connection.
    Closed,
    /// Waiting for a SYN.
    Listen,
    /// SYN sent, waiting for the SYN|ACK.
    SynSent,
    /// SYN received and SYN|ACK sent, waiting for its ACK.
    SynReceived,
    /// Open both ways.
    Established,
    /// We closed (FIN sent), waiting for its ACK.
    FinWait1,
    /// Our FIN acknowledged, waiting for the remote's FIN.
    FinWait2,
    /// The remote closed (FIN received); we may still send.
    CloseWait,
    /// Both closed at once, waiting for the ACK of our FIN.
    Closing,
    /// The remote closed, then we did: waiting for the ACK of our FIN.
    LastAck,
    /// Both closed: waiting for stray segments to die out.
    TimeWait,
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match *self {
            State::Closed => write!(f, "CLOSED"),
            State::Listen => write!(f, "LISTEN"),
            State::SynSent => write!(f, "SYN-SENT"),
            State::SynReceived => write!(f, "SYN-RECEIVED"),
            State::Established => write!(f, "ESTABLISHED"),
            State::FinWait1 => write!(f, "FIN-WAIT-1"),
            State::FinWait2 => write!(f, "FIN-WAIT-2"),
            State::CloseWait => write!(f, "CLOSE-WAIT"),
            State::Closing => write!(f, "CLOSING"),
            State::LastAck => write!(f, "LAST-ACK"),
            State::TimeWait => write!(f, "TIME-WAIT"),
        }
    }
}
