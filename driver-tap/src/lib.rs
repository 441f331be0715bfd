//! # zcnet-tap: a Linux TAP device as a zcnet driver
//!
//! ```text
//!  /dev/net/tun (IFF_TAP | IFF_NO_PI, non-blocking, in the executor's epoll reactor)
//!    read(fd, PostedSlot) ─► RxFrame        (the kernel's copy is this device's "DMA",
//!    write(fd, TxFrame)   ◄─ egress          counted as CopySite::KernelFd)
//! ```
//!
//! Status: the driver arrives with issue 6 ("zcnet-tap and zcnet against Linux"). It will
//! implement [`zcnet_buffer::Driver`] and use only `zcnet-buffer` and the executor's std reactor.

#![deny(missing_docs)]
