//! TCP and UDP echo on port 7 over plain smoltcp sockets: `recv_slice` into a buffer,
//! `send_slice` back.
//!
//! [`TCP_SOCKETS`] sockets listen (one connection each); a connection's unsent echo waits in
//! its buffer (at most [`CHUNK`] bytes), and the socket is read again only once that is sent, so
//! a client that does not read is slowed down by TCP, never buffered without bound. UDP echoes
//! each datagram to its sender; a reply that does not fit the send buffer is dropped, as UDP
//! may.

use alloc::vec;
use alloc::vec::Vec;

use smoltcp::iface::{SocketHandle, SocketSet};
use smoltcp::socket::{tcp, udp};
use smoltcp::storage::PacketMetadata;

/// The port.
pub const PORT: u16 = 7;
/// TCP echo connections at once.
pub const TCP_SOCKETS: usize = 4;
/// Socket buffers (each direction) and the largest chunk echoed at once.
pub const CHUNK: usize = 4096;
/// Datagrams each UDP buffer holds.
const UDP_PACKETS: usize = 16;
/// Largest datagram echoed.
const UDP_MAX: usize = 2048;

struct TcpEcho {
    handle: SocketHandle,
    pending: Vec<u8>,
    sent: usize,
}

/// The echo server.
pub struct EchoServer {
    tcp: Vec<TcpEcho>,
    udp: SocketHandle,
    udp_buf: Vec<u8>,
    /// Bytes echoed over TCP.
    pub tcp_bytes: u64,
    /// Datagrams echoed.
    pub udp_datagrams: u64,
}

impl EchoServer {
    /// Adds the listening TCP sockets and the bound UDP socket to `set`.
    pub fn new(set: &mut SocketSet<'static>) -> EchoServer {
        let tcp = (0..TCP_SOCKETS)
            .map(|_| {
                let mut s = tcp::Socket::new(
                    tcp::SocketBuffer::new(vec![0; CHUNK]),
                    tcp::SocketBuffer::new(vec![0; CHUNK]),
                );
                let _ = s.listen(PORT);
                TcpEcho {
                    handle: set.add(s),
                    pending: Vec::with_capacity(CHUNK),
                    sent: 0,
                }
            })
            .collect();
        let mut u = udp::Socket::new(
            udp::PacketBuffer::new(
                vec![PacketMetadata::EMPTY; UDP_PACKETS],
                vec![0; UDP_PACKETS * UDP_MAX],
            ),
            udp::PacketBuffer::new(
                vec![PacketMetadata::EMPTY; UDP_PACKETS],
                vec![0; UDP_PACKETS * UDP_MAX],
            ),
        );
        let _ = u.bind(PORT);
        EchoServer {
            tcp,
            udp: set.add(u),
            udp_buf: vec![0; UDP_MAX],
            tcp_bytes: 0,
            udp_datagrams: 0,
        }
    }

    /// Echoes what arrived.
    pub fn poll(&mut self, set: &mut SocketSet<'static>) {
        for e in &mut self.tcp {
            let s = set.get_mut::<tcp::Socket>(e.handle);
            match s.state() {
                tcp::State::Closed => {
                    e.sent = 0;
                    e.pending.clear();
                    let _ = s.listen(PORT);
                    continue;
                }
                tcp::State::Listen | tcp::State::SynReceived => continue,
                _ => {}
            }
            loop {
                if e.sent < e.pending.len() {
                    match s.send_slice(&e.pending[e.sent..]) {
                        Ok(n) if n > 0 => e.sent += n,
                        Ok(_) => break,
                        Err(_) => {
                            s.abort();
                            break;
                        }
                    }
                    continue;
                }
                e.sent = 0;
                e.pending.resize(CHUNK, 0);
                match s.recv_slice(&mut e.pending) {
                    Ok(n) if n > 0 => {
                        e.pending.truncate(n);
                        self.tcp_bytes += n as u64;
                    }
                    Ok(_) => {
                        e.pending.clear();
                        break;
                    }
                    Err(_) => {
                        // The client finished sending: finish ours.
                        e.pending.clear();
                        s.close();
                        break;
                    }
                }
            }
        }
        let u = set.get_mut::<udp::Socket>(self.udp);
        while u.can_send() {
            let Ok((n, meta)) = u.recv_slice(&mut self.udp_buf) else {
                break;
            };
            if u.send_slice(&self.udp_buf[..n], meta.endpoint).is_ok() {
                self.udp_datagrams += 1;
            }
        }
    }
}
