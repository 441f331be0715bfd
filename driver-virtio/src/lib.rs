//! # zcnet-virtio: virtio-net without copies
//!
//! ```text
//!  FramePool ─PostedSlot─► receive_begin (RX virtqueue, kept full) ─► completion ─► RxFrame
//!  TxFrame (virtio-net header written into its headroom) ─► transmit_begin ─► InFlight ─► drop
//! ```
//!
//! The driver keeps the RX virtqueue full from the pool, re-posting a free slot after every
//! completion, turns completions into [`zcnet_buffer::RxFrame`]s, writes the virtio-net header
//! into a TX frame's headroom, and reclaims TX slots on completion. It implements
//! [`zcnet_buffer::Driver`] and depends on nothing else of zcnet's.
//!
//! Status: the driver itself is not written yet; no issue has taken it on so far (the QEMU
//! boot recipe it will be tested with is in `shared/notes/qemu-x86_64-pvh.md`).

#![no_std]
#![deny(missing_docs)]
