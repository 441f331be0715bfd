//! The plain smoltcp 0.14 peer, in its canonical loop (as smoltcp's `examples/server.rs`):
//! `phy::TunTapInterface`, `iface.poll()`, service every socket, `phy::wait` for
//! `iface.poll_delay()`. Each socket serves one connection and listens again once closed.

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::Relaxed;

use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{wait as phy_wait, Medium, TunTapInterface};
use smoltcp::socket::tcp;
use smoltcp::time::Instant;
use smoltcp::wire::{EthernetAddress, IpCidr};
use zcnet_tests::netns::ZCNET_ADDR;

use crate::common::{
    self, parse_request, sock_buf, Class, APP_BUF, ECHO_PORT, HTTP_PORT, PATTERN, RESPONSE_CLOSE,
    RESPONSE_KEEP, SINK_PORT, SOURCE_PORT, STACK_MAC,
};

/// What one socket's connection is doing.
enum Phase {
    /// Sink: reading until end of stream. Source: reading the 8-byte count.
    Reading,
    /// Source: this many bytes left to write.
    Writing(usize),
    /// Waiting for the client's FIN, then close.
    Draining,
}

struct Slot {
    handle: SocketHandle,
    port: u16,
    phase: Phase,
    /// Bytes of a partial request (HTTP) or count (source) in `buf`.
    len: usize,
    buf: Vec<u8>,
}

/// Opens the TAP `tap`, serves `class`'s ports forever.
pub fn serve(tap: &str, class: Class) -> ! {
    let mut device = TunTapInterface::new(tap, Medium::Ethernet)
        .unwrap_or_else(|e| panic!("cannot open TAP {tap}: {e}"));
    let fd = device.as_raw_fd();
    let mut config = Config::new(EthernetAddress(STACK_MAC).into());
    config.random_seed = u64::from(std::process::id());
    let mut iface = Interface::new(config, &mut device, Instant::now());
    iface.update_ip_addrs(|a| {
        a.push(IpCidr::new(ZCNET_ADDR.into(), 24)).expect("address");
    });
    let mut sockets = SocketSet::new(vec![]);
    let mut slots = Vec::new();
    for &(port, n) in class.ports() {
        for _ in 0..n {
            let rx = tcp::SocketBuffer::new(vec![0; sock_buf()]);
            let tx = tcp::SocketBuffer::new(vec![0; sock_buf()]);
            let handle = sockets.add(tcp::Socket::new(rx, tx));
            slots.push(Slot {
                handle,
                port,
                phase: Phase::Reading,
                len: 0,
                buf: vec![0; APP_BUF],
            });
        }
    }
    common::start_stats_thread();
    common::ready();
    loop {
        let now = Instant::now();
        iface.poll(now, &mut device, &mut sockets);
        common::POLLS.fetch_add(1, Relaxed);
        for slot in &mut slots {
            service(sockets.get_mut::<tcp::Socket>(slot.handle), slot);
        }
        phy_wait(fd, iface.poll_delay(now, &sockets)).expect("wait");
        common::WAKEUPS.fetch_add(1, Relaxed);
    }
}

fn service(s: &mut tcp::Socket, slot: &mut Slot) {
    if !s.is_open() {
        s.listen(slot.port).expect("listen");
        slot.phase = Phase::Reading;
        slot.len = 0;
        return;
    }
    match slot.port {
        SINK_PORT if common::sink_in_place() => {
            while s.can_recv() {
                if s.recv(|b| (b.len(), b.len())).unwrap_or(0) == 0 {
                    break;
                }
            }
        }
        SINK_PORT => {
            while s.can_recv() {
                if s.recv_slice(&mut slot.buf).unwrap_or(0) == 0 {
                    break;
                }
            }
        }
        // What fits in the send ring is read and written back at once, so nothing waits in
        // the application between polls.
        ECHO_PORT => {
            while s.can_recv() && s.can_send() {
                let room = (s.send_capacity() - s.send_queue()).min(slot.buf.len());
                let n = s.recv_slice(&mut slot.buf[..room]).unwrap_or(0);
                if n == 0 {
                    break;
                }
                let sent = s.send_slice(&slot.buf[..n]).unwrap_or(0);
                assert_eq!(sent, n, "the send ring had room for {room} bytes");
            }
        }
        SOURCE_PORT => loop {
            match slot.phase {
                Phase::Reading => {
                    while slot.len < 8 && s.can_recv() {
                        slot.len += s.recv_slice(&mut slot.buf[slot.len..8]).unwrap_or(0);
                    }
                    if slot.len < 8 {
                        break;
                    }
                    let n = u64::from_le_bytes(slot.buf[..8].try_into().unwrap());
                    slot.phase = Phase::Writing(n as usize);
                }
                Phase::Writing(0) => slot.phase = Phase::Draining,
                Phase::Writing(left) => {
                    if !s.can_send() {
                        break;
                    }
                    let n = s.send_slice(&PATTERN[..left.min(APP_BUF)]).unwrap_or(0);
                    slot.phase = Phase::Writing(left - n);
                    if n == 0 {
                        break;
                    }
                }
                Phase::Draining => {
                    while s.can_recv() {
                        if s.recv_slice(&mut slot.buf).unwrap_or(0) == 0 {
                            break;
                        }
                    }
                    break;
                }
            }
        },
        HTTP_PORT => {
            while s.can_recv() && slot.len < slot.buf.len() {
                let n = s.recv_slice(&mut slot.buf[slot.len..]).unwrap_or(0);
                if n == 0 {
                    break;
                }
                slot.len += n;
            }
            if matches!(slot.phase, Phase::Draining) {
                slot.len = 0;
            }
            let mut start = 0;
            while let Some((used, close)) = parse_request(&slot.buf[start..slot.len]) {
                start += used;
                common::REQUESTS.fetch_add(1, Relaxed);
                let resp = if close { RESPONSE_CLOSE } else { RESPONSE_KEEP };
                // 64 KiB of send ring against 100-byte responses: a short write means the
                // client stopped reading; drop the connection rather than buffer without bound.
                if s.send_slice(resp).unwrap_or(0) != resp.len() {
                    s.abort();
                    return;
                }
                if close {
                    slot.phase = Phase::Draining;
                    start = slot.len;
                    break;
                }
            }
            slot.buf.copy_within(start..slot.len, 0);
            slot.len -= start;
            if slot.len == slot.buf.len() {
                s.abort();
                return;
            }
        }
        _ => unreachable!(),
    }
    // The client's FIN, and everything it sent read: close our half.
    if !s.may_recv() && !s.can_recv() && s.may_send() && !matches!(slot.phase, Phase::Writing(1..))
    {
        s.close();
    }
}
