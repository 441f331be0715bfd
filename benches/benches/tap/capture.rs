//! The wire the loss benchmark counts retransmissions on ([`zcnet_benches::retx`]): an
//! `AF_PACKET` socket on the Linux side's interface (the TAP's kernel side, or the client's end
//! of a veth), opened inside the client's namespace, sees every frame the interface sends or
//! receives.
//!
//! What it sees: a frame arriving from the other end is seen before the namespace's `input`
//! hook, so the server's segments are all counted, dropped ones included. A frame leaving is
//! seen after the `output` hook: what is dropped there never reaches the interface. (Linux's
//! TCP learns of such a drop, a send error, and sends the data again as if it had never left,
//! so that is no retransmission on the wire either.) Window probes carrying a byte already sent
//! count as retransmissions; probes without data (Linux's) are not data segments.
//!
//! Frames reach the socket through a `PACKET_RX_RING` (`TPACKET_V2`) of 256-byte slots: the
//! kernel copies the first ~190 bytes of each frame (Ethernet, IPv4 and TCP headers) and the
//! reader needs no system call per frame. Frames the ring had no room for are counted by the
//! kernel (`PACKET_STATISTICS`) and reported as `drops`.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

use zcnet_benches::retx::Counts;

/// Bytes per ring slot: the `tpacket2_hdr`, the address, and the frame's first bytes.
const FRAME_SIZE: usize = 256;
/// Bytes per ring block (a whole number of slots).
const BLOCK_SIZE: usize = 1 << 16;
/// Blocks in the ring: 16 MiB, 65,536 slots.
const BLOCKS: usize = 256;
const SLOTS: usize = BLOCK_SIZE / FRAME_SIZE * BLOCKS;

/// An `AF_PACKET` socket with its receive ring, bound to one interface.
pub struct Capture {
    fd: OwnedFd,
    ring: *mut u8,
    next: usize,
}

fn check(r: libc::c_int, what: &str) -> io::Result<()> {
    if r < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("{what}: {e}")));
    }
    Ok(())
}

fn set_opt<T>(fd: &OwnedFd, level: libc::c_int, name: libc::c_int, v: &T) -> libc::c_int {
    // SAFETY: `v` points to a live `T` of the size given, as the option expects.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    }
}

impl Capture {
    /// Opens the capture on interface `ifname` (of the calling process's namespace; needs
    /// `CAP_NET_RAW`).
    pub fn open(ifname: &str) -> io::Result<Capture> {
        let name = CString::new(ifname).expect("interface name without NUL");
        // SAFETY: `name` is a valid NUL-terminated string.
        let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if index == 0 {
            return Err(io::Error::other(format!("no interface {ifname}")));
        }
        // Protocol 0: nothing is delivered until `bind` names the interface and ETH_P_ALL.
        // SAFETY: plain socket creation.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
        check(raw, "socket(AF_PACKET)")?;
        // SAFETY: `raw` is a new socket nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let version = libc::tpacket_versions::TPACKET_V2 as libc::c_int;
        check(
            set_opt(&fd, libc::SOL_PACKET, libc::PACKET_VERSION, &version),
            "PACKET_VERSION",
        )?;
        let req = libc::tpacket_req {
            tp_block_size: BLOCK_SIZE as libc::c_uint,
            tp_block_nr: BLOCKS as libc::c_uint,
            tp_frame_size: FRAME_SIZE as libc::c_uint,
            tp_frame_nr: SLOTS as libc::c_uint,
        };
        check(
            set_opt(&fd, libc::SOL_PACKET, libc::PACKET_RX_RING, &req),
            "PACKET_RX_RING",
        )?;
        // SAFETY: maps the ring the kernel just allocated for this socket, its whole length.
        let ring = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                BLOCK_SIZE * BLOCKS,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ring == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let cap = Capture {
            fd,
            ring: ring.cast(),
            next: 0,
        };
        // SAFETY: an all-zero sockaddr_ll is valid; the fields that matter are set below.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        addr.sll_ifindex = index as i32;
        // SAFETY: `addr` is a valid sockaddr_ll of the length given.
        let r = unsafe {
            libc::bind(
                cap.fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        check(r, "bind(AF_PACKET)")?;
        Ok(cap)
    }

    /// Counts every frame the ring holds now into `counts` (segments of `port`); returns how
    /// many it took.
    pub fn drain(&mut self, counts: &mut Counts, port: u16) -> usize {
        let mut n = 0;
        loop {
            // SAFETY: `next < SLOTS`, so the slot lies inside the mapped ring; slots are
            // FRAME_SIZE-aligned, so the header's status word is aligned for an AtomicU32. The
            // kernel and this reader hand a slot over through that word only.
            let slot = unsafe { self.ring.add(self.next * FRAME_SIZE) };
            let hdr = slot.cast::<libc::tpacket2_hdr>();
            // SAFETY: as above; `tp_status` is the header's first field.
            let status = unsafe { AtomicU32::from_ptr(std::ptr::addr_of_mut!((*hdr).tp_status)) };
            if status.load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
                return n;
            }
            // SAFETY: the slot is ours until its status goes back to the kernel; the frame's
            // bytes lie at `tp_mac`, `tp_snaplen` long, inside the slot.
            let frame = unsafe {
                std::slice::from_raw_parts(
                    slot.add(usize::from((*hdr).tp_mac)),
                    (*hdr).tp_snaplen as usize,
                )
            };
            counts.frame(frame, port);
            status.store(libc::TP_STATUS_KERNEL, Ordering::Release);
            self.next = (self.next + 1) % SLOTS;
            n += 1;
        }
    }

    /// Waits up to `ms` milliseconds for a frame.
    pub fn wait(&self, ms: i32) {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `p` is one valid pollfd for the duration of the call.
        unsafe { libc::poll(&mut p, 1, ms) };
    }

    /// Frames dropped for want of ring space since the last call.
    pub fn drops(&self) -> u64 {
        let mut st = libc::tpacket_stats {
            tp_packets: 0,
            tp_drops: 0,
        };
        let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: `st` and `len` are valid for writes; `len` is `st`'s size.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut st as *mut libc::tpacket_stats).cast(),
                &mut len,
            )
        };
        assert_eq!(r, 0, "PACKET_STATISTICS: {}", io::Error::last_os_error());
        u64::from(st.tp_drops)
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        // SAFETY: `ring` is the mapping `open` made, of this length, unmapped once.
        unsafe { libc::munmap(self.ring.cast(), BLOCK_SIZE * BLOCKS) };
    }
}
