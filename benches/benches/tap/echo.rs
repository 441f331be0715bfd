//! The loss benchmark's two Linux programs, both this binary run inside a namespace: the echo
//! client (`--client echo <secs> <seed> <ifname>`), the same for every server, and the Linux
//! echo server of the Linux ↔ Linux path (`--client echo-server`).

use std::io::{BufRead, ErrorKind, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::capture::Capture;
use crate::client::connect;
use crate::common::{APP_BUF, ECHO_PORT};
use zcnet_benches::retx::Counts;
use zcnet_benches::Rng;

/// The client's bytes: a seeded pseudo-random stream, produced in 64 KiB blocks. The writer
/// sends it; the reader replays it from the same seed to check every echoed byte.
struct Stream {
    rng: Rng,
    block: Vec<u8>,
    pos: usize,
}

impl Stream {
    fn new(seed: u64) -> Stream {
        Stream {
            rng: Rng::new(seed),
            block: vec![0; APP_BUF],
            pos: APP_BUF,
        }
    }

    /// The stream's next `out.len()` bytes.
    fn fill(&mut self, out: &mut [u8]) {
        let mut done = 0;
        while done < out.len() {
            if self.pos == self.block.len() {
                for w in self.block.chunks_exact_mut(8) {
                    w.copy_from_slice(&self.rng.next_u64().to_le_bytes());
                }
                self.pos = 0;
            }
            let n = (self.block.len() - self.pos).min(out.len() - done);
            out[done..done + n].copy_from_slice(&self.block[self.pos..self.pos + n]);
            self.pos += n;
            done += n;
        }
    }
}

fn timed_out(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

/// Writes the stream until `deadline`.
fn write_until(mut s: TcpStream, seed: u64, deadline: Instant) {
    s.set_write_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let mut stream = Stream::new(seed);
    let mut chunk = vec![0u8; APP_BUF];
    let mut at = chunk.len();
    while Instant::now() < deadline {
        if at == chunk.len() {
            stream.fill(&mut chunk);
            at = 0;
        }
        match s.write(&chunk[at..]) {
            Ok(n) => at += n,
            Err(e) if timed_out(&e) => {}
            Err(e) => panic!("echo client write: {e}"),
        }
    }
}

/// Reads and checks the echo until `deadline`; returns the bytes checked. Panics on the first
/// byte that differs from what was sent.
fn check_until(s: &mut TcpStream, seed: u64, deadline: Instant) -> u64 {
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let mut expect = Stream::new(seed);
    let mut got = vec![0u8; APP_BUF];
    let mut want = vec![0u8; APP_BUF];
    let mut checked = 0u64;
    while Instant::now() < deadline {
        let n = match s.read(&mut got) {
            Ok(0) => panic!("the server closed the echo after {checked} bytes"),
            Ok(n) => n,
            Err(e) if timed_out(&e) => continue,
            Err(e) => panic!("echo client read after {checked} bytes: {e}"),
        };
        expect.fill(&mut want[..n]);
        if let Some(i) = (0..n).find(|&i| got[i] != want[i]) {
            panic!(
                "echo byte {} differs: sent {:#04x}, got {:#04x}",
                checked + i as u64,
                want[i],
                got[i]
            );
        }
        checked += n as u64;
    }
    checked
}

/// Captures on `ifname` (segments of [`ECHO_PORT`]) from before the connection opens until
/// `stop`; returns the counts.
fn capture(ifname: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Counts> {
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        let mut cap = Capture::open(&ifname).unwrap_or_else(|e| panic!("capture on {ifname}: {e}"));
        ready_tx.send(()).unwrap();
        let mut counts = Counts::default();
        loop {
            let stopping = stop.load(Ordering::Acquire);
            if cap.drain(&mut counts, ECHO_PORT) == 0 {
                if stopping {
                    break;
                }
                cap.wait(20);
            }
        }
        counts.drops = cap.drops();
        counts
    });
    ready.recv().expect("the capture thread started");
    h
}

/// The echo client: for `run`, writes the stream from `seed` to the server's echo port and
/// checks what comes back; the wire is watched on `ifname`. Prints `result bytes=<checked>
/// ns=<run> client_segs= client_retx= server_segs= server_retx= drops=`, then resets the
/// connection.
pub fn client(run: Duration, seed: u64, ifname: &str) {
    let stop = Arc::new(AtomicBool::new(false));
    let cap = capture(ifname.to_string(), stop.clone());
    let mut s = connect(ECHO_PORT);
    let start = Instant::now();
    let deadline = start + run;
    let w = s.try_clone().expect("clone the socket");
    let writer = std::thread::spawn(move || write_until(w, seed, deadline));
    let checked = check_until(&mut s, seed, deadline);
    let ns = start.elapsed().as_nanos();
    stop.store(true, Ordering::Release);
    writer.join().expect("the writer");
    let c = cap.join().expect("the capture");
    // Linger 0: close resets the connection instead of waiting for the rest of the echo.
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid socket fd and a pointer to a linger of the size given.
    unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&s),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    drop(s);
    println!(
        "result bytes={checked} ns={ns} client_segs={} client_retx={} server_segs={} server_retx={} drops={}",
        c.client.segments, c.client.retransmitted, c.server.segments, c.server.retransmitted, c.drops
    );
}

/// The Linux echo server: accepts on [`ECHO_PORT`], a thread per connection writing back what
/// it reads ([`APP_BUF`] at a time). Says `ready` once listening; exits when stdin closes (the
/// parent is gone).
pub fn server() -> ! {
    let l = TcpListener::bind((Ipv4Addr::UNSPECIFIED, ECHO_PORT)).expect("bind the echo port");
    std::thread::spawn(|| {
        for _ in std::io::stdin().lock().lines() {}
        std::process::exit(0);
    });
    println!("ready");
    std::io::stdout().flush().unwrap();
    for c in l.incoming() {
        let Ok(mut c) = c else { continue };
        std::thread::spawn(move || {
            let mut buf = vec![0u8; APP_BUF];
            while let Ok(n @ 1..) = c.read(&mut buf) {
                if c.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        });
    }
    unreachable!("incoming() never ends")
}
