//! Sockets over the stack.

mod io;
pub mod tcp;
mod tcp_listener;
pub mod udp;
