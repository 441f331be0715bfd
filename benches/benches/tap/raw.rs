//! The raw TAP frame ceiling: no stack, a frame blaster on the same kind of TAP fd
//! (`smoltcp::phy::TunTapInterface`'s, read and written directly). Commands from the parent
//! on stdin, one answer line each on stdout:
//!
//! * `tx <ms>`: write full-size frames (1514 bytes: Ethernet + IPv4 + UDP with 1472 bytes of
//!   payload, to the Linux side's UDP port [`BLAST_PORT`]) as fast as `write` takes them, for
//!   `ms` milliseconds. Answer: `done frames=<written> ns=<elapsed>`. What Linux delivered is
//!   counted by the UDP sink in the namespace.
//! * `rx <ms>`: read frames (Linux's UDP blaster sends them) until `ms` after the first one or
//!   300 ms without one; counts full-size IPv4/UDP frames to [`BLAST_PORT`]. Answer:
//!   `done frames=<n> ns=<first to last>`.
//!
//! Both answers also carry `cpu_ns`: the blaster thread's CPU time (user + system) for the
//! command, so frames per CPU-second (the rate one core doing only this would reach) can be
//! reported beside the wall-clock rate, which on a 2-core machine also depends on how much CPU
//! the Linux side's sender or receiver takes from the blaster.

use std::io::{BufRead, Write};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use smoltcp::phy::{Medium, TunTapInterface};
use zcnet_tests::netns::{LINUX_ADDR, ZCNET_ADDR};

use crate::common::{self, LINUX_MAC, STACK_MAC};

/// The UDP port both blasters send to.
pub const BLAST_PORT: u16 = 9999;
/// UDP payload of a full-size frame at MTU 1500.
pub const BLAST_PAYLOAD: usize = 1472;
const FRAME: usize = 14 + 20 + 8 + BLAST_PAYLOAD;

fn frame() -> Vec<u8> {
    let mut f = vec![0u8; FRAME];
    f[0..6].copy_from_slice(&LINUX_MAC);
    f[6..12].copy_from_slice(&STACK_MAC);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&((20 + 8 + BLAST_PAYLOAD) as u16).to_be_bytes());
    ip[6] = 0x40; // don't fragment
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&ZCNET_ADDR.octets());
    ip[16..20].copy_from_slice(&LINUX_ADDR.octets());
    let mut sum = 0u32;
    for w in ip.chunks(2) {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    let udp = &mut f[34..42];
    udp[0..2].copy_from_slice(&BLAST_PORT.to_be_bytes());
    udp[2..4].copy_from_slice(&BLAST_PORT.to_be_bytes());
    udp[4..6].copy_from_slice(&((8 + BLAST_PAYLOAD) as u16).to_be_bytes());
    // UDP checksum 0: none (allowed over IPv4).
    f
}

fn is_blast(f: &[u8]) -> bool {
    f.len() == FRAME
        && f[12..14] == [0x08, 0x00]
        && f[23] == 17
        && f[36..38] == BLAST_PORT.to_be_bytes()
}

fn wait_readable(fd: i32, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `p` is one valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut p, 1, ms) > 0 }
}

/// Opens the TAP `tap` and answers the parent's commands until stdin closes.
pub fn serve(tap: &str) -> ! {
    let device = TunTapInterface::new(tap, Medium::Ethernet)
        .unwrap_or_else(|e| panic!("cannot open TAP {tap}: {e}"));
    let fd = device.as_raw_fd();
    let out_frame = frame();
    let mut buf = vec![0u8; 65536];
    common::ready();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let mut words = line.split_whitespace();
        let (Some(cmd), Some(ms)) = (words.next(), words.next()) else {
            continue;
        };
        let ms: u64 = ms.parse().expect("milliseconds");
        let (cpu0, _, _) = common::rusage(libc::RUSAGE_THREAD);
        let (frames, ns) = match cmd {
            "tx" => {
                let start = Instant::now();
                let mut n = 0u64;
                while start.elapsed() < Duration::from_millis(ms) {
                    for _ in 0..64 {
                        // SAFETY: `out_frame` is valid for reads of its length.
                        let r =
                            unsafe { libc::write(fd, out_frame.as_ptr().cast(), out_frame.len()) };
                        if r == out_frame.len() as isize {
                            n += 1;
                        }
                    }
                }
                (n, start.elapsed().as_nanos() as u64)
            }
            "rx" => {
                let mut n = 0u64;
                let mut first = None;
                let mut last = Instant::now();
                let limit = Duration::from_millis(ms);
                loop {
                    // SAFETY: `buf` is valid for writes of its length.
                    let r = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
                    if r > 0 {
                        if is_blast(&buf[..r as usize]) {
                            let now = Instant::now();
                            let f = *first.get_or_insert(now);
                            n += 1;
                            last = now;
                            if now - f > limit {
                                break;
                            }
                        }
                        continue;
                    }
                    let timeout = if first.is_some() { 300 } else { 10_000 };
                    if !wait_readable(fd, timeout) {
                        break;
                    }
                }
                let ns = first.map_or(0, |f| (last - f).as_nanos() as u64);
                (n, ns)
            }
            _ => continue,
        };
        let (cpu1, _, _) = common::rusage(libc::RUSAGE_THREAD);
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "done frames={frames} ns={ns} cpu_ns={}", cpu1 - cpu0);
        let _ = out.flush();
    }
    std::process::exit(0)
}
