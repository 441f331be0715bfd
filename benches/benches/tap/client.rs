//! The Linux client, the same for every peer: this very binary run inside the peer's namespace
//! (`ip netns exec <ns> <bench> --client <mode> ..`), plain blocking `std::net` sockets on the
//! kernel's stack. It prints one `result ..` line (and `ready` / `open` where the parent must
//! wait for it).

use std::io::{BufRead, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use crate::common::{rusage, SINK_PORT};
use crate::raw::{BLAST_PAYLOAD, BLAST_PORT};
use zcnet_tests::netns::{LINUX_ADDR, ZCNET_ADDR};

const CLIENT_BUF: usize = 256 * 1024;

/// Connects to the stack, retrying for 10 s (the stack may still be resolving our MAC, or the
/// link may have just come up).
pub(crate) fn connect(port: u16) -> TcpStream {
    let addr = SocketAddr::from((ZCNET_ADDR, port));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
            Ok(s) => {
                s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                s.set_write_timeout(Some(Duration::from_secs(60))).unwrap();
                return s;
            }
            Err(e) if Instant::now() < deadline => {
                eprintln!("connect {addr}: {e}; retrying");
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("connect {addr}: {e}"),
        }
    }
}

fn print_result(bytes: u64, start: Instant) {
    let ns = start.elapsed().as_nanos();
    let (cpu, _, _) = rusage(libc::RUSAGE_SELF);
    println!("result bytes={bytes} ns={ns} client_cpu_ns={cpu}");
}

/// Runs client `mode` with `args`; exits the process.
pub fn main(mode: &str, args: &[String]) -> ! {
    let num = |i: usize| -> u64 { args[i].parse().expect("number") };
    match mode {
        // Linux -> stack: send `bytes`, half-close, wait for the server's close (it has read
        // everything by then).
        "sink" => {
            let bytes = num(0);
            let buf = vec![0xa5u8; CLIENT_BUF];
            let mut s = connect(SINK_PORT);
            let start = Instant::now();
            let mut left = bytes;
            while left > 0 {
                let n = s
                    .write(&buf[..left.min(CLIENT_BUF as u64) as usize])
                    .expect("write");
                left -= n as u64;
            }
            s.shutdown(Shutdown::Write).expect("shutdown");
            let mut b = [0u8; 64];
            assert_eq!(s.read(&mut b).expect("read the server's close"), 0);
            print_result(bytes, start);
        }
        // stack -> Linux: ask for `bytes`, read them all, then close first.
        "source" => {
            let bytes = num(0);
            let mut buf = vec![0u8; CLIENT_BUF];
            let mut s = connect(crate::common::SOURCE_PORT);
            let start = Instant::now();
            s.write_all(&bytes.to_le_bytes()).expect("write count");
            let mut got = 0u64;
            while got < bytes {
                let n = s.read(&mut buf).expect("read");
                assert!(n > 0, "server closed after {got} of {bytes} bytes");
                got += n as u64;
            }
            print_result(got, start);
        }
        // `n` connections to the sink, held open until stdin closes.
        "idle" => {
            let n = num(0) as usize;
            let conns: Vec<TcpStream> = (0..n).map(|_| connect(SINK_PORT)).collect();
            println!("open {}", conns.len());
            std::io::stdout().flush().unwrap();
            for _ in std::io::stdin().lock().lines() {}
            for c in &conns {
                let _ = c.shutdown(Shutdown::Both);
            }
            println!("result bytes=0 ns=0 client_cpu_ns=0");
        }
        // Receives the frame blaster's datagrams until 500 ms pass without one (or 30 s
        // without any); counts them between the first and the last.
        "udp-sink" => {
            let s = UdpSocket::bind((LINUX_ADDR, BLAST_PORT)).expect("bind");
            let size: libc::c_int = 8 << 20;
            // SAFETY: a valid socket fd and a pointer to an int of the size given.
            unsafe {
                libc::setsockopt(
                    s.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_RCVBUFFORCE,
                    (&size as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            println!("ready");
            std::io::stdout().flush().unwrap();
            let mut buf = vec![0u8; 2048];
            let mut n = 0u64;
            let mut first = None;
            let mut last = Instant::now();
            while s.recv(&mut buf).is_ok() {
                let now = Instant::now();
                first.get_or_insert(now);
                last = now;
                n += 1;
                s.set_read_timeout(Some(Duration::from_millis(500)))
                    .unwrap();
            }
            let ns = first.map_or(0, |f| (last - f).as_nanos());
            println!("result frames={n} ns={ns}");
        }
        // Sends full-size datagrams to the blaster for `ms` milliseconds.
        "udp-blast" => {
            let ms = num(0);
            let s = UdpSocket::bind((LINUX_ADDR, 0)).expect("bind");
            // UDP GSO: each send hands the kernel 44 datagrams, which it segments in software
            // (the TAP offers no offload), so the sender's system calls do not cap the rate
            // the way one send per datagram would; Linux's TCP sender segments the same way.
            let segment: libc::c_int = BLAST_PAYLOAD as libc::c_int;
            // SAFETY: a valid socket fd and a pointer to an int of the size given.
            let r = unsafe {
                libc::setsockopt(
                    s.as_raw_fd(),
                    libc::SOL_UDP,
                    libc::UDP_SEGMENT,
                    (&segment as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            assert_eq!(r, 0, "UDP_SEGMENT: {}", std::io::Error::last_os_error());
            const BURST: usize = 44;
            let payload = vec![0x5au8; BLAST_PAYLOAD * BURST];
            let dst = SocketAddr::from((ZCNET_ADDR, BLAST_PORT));
            let start = Instant::now();
            let mut n = 0u64;
            while start.elapsed() < Duration::from_millis(ms) {
                for _ in 0..8 {
                    if s.send_to(&payload, dst).is_ok() {
                        n += BURST as u64;
                    }
                }
            }
            println!("result frames={n} ns={}", start.elapsed().as_nanos());
        }
        // The loss benchmark's echo client: `echo <secs> <seed> <ifname>`.
        "echo" => crate::echo::client(Duration::from_secs(num(0)), num(1), &args[2]),
        // The Linux echo server of the loss benchmark's Linux <-> Linux path.
        "echo-server" => crate::echo::server(),
        _ => panic!("unknown client mode {mode}"),
    }
    std::process::exit(0)
}
