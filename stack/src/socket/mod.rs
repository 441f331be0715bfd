//! Sockets over the stack.

pub mod tcp;
pub mod udp;
