//! The errors of the application-side calls.

use core::fmt;

/// Error returned by [`Tcb::listen`](super::socket::Tcb::listen).
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub(crate) enum ListenError {
    /// The connection is open (and not listening on the same endpoint).
    InvalidState,
    /// The port is zero.
    Unaddressable,
}

impl fmt::Display for ListenError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match *self {
            ListenError::InvalidState => write!(f, "invalid state"),
            ListenError::Unaddressable => write!(f, "unaddressable destination"),
        }
    }
}

impl core::error::Error for ListenError {}

/// Error returned by [`Tcb::connect`](super::socket::Tcb::connect).
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub(crate) enum ConnectError {
    /// The connection is open.
    InvalidState,
    /// A port is zero, the remote or given local address is unspecified, no local address
    /// could be chosen, or the two addresses are of different families.
    Unaddressable,
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match *self {
            ConnectError::InvalidState => write!(f, "invalid state"),
            ConnectError::Unaddressable => write!(f, "unaddressable destination"),
        }
    }
}

impl core::error::Error for ConnectError {}

/// Error returned by [`Tcb::send_slice`](super::socket::Tcb::send_slice) and friends.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub(crate) enum SendError {
    /// The transmit half of the connection is not open.
    InvalidState,
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match *self {
            SendError::InvalidState => write!(f, "invalid state"),
        }
    }
}

impl core::error::Error for SendError {}

/// Error returned by [`Tcb::recv`](super::socket::Tcb::recv) and friends.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub(crate) enum RecvError {
    /// The receive half of the connection is not open (or not yet open); data received so
    /// far may be incomplete.
    InvalidState,
    /// The remote closed the connection with a FIN: the data received is complete.
    Finished,
}

impl fmt::Display for RecvError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match *self {
            RecvError::InvalidState => write!(f, "invalid state"),
            RecvError::Finished => write!(f, "operation finished"),
        }
    }
}

impl core::error::Error for RecvError {}
