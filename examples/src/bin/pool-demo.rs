//! The zero-copy frame path, step by step, on a simulated ring NIC (no root, no setup):
//!
//! ```text
//! cargo run -p zcnet-examples --bin pool-demo
//! ```
//!
//! It shows what zcnet-buffer promises: received frames are leases on pool slots; an application
//! that holds frames drains the pool's spare slots, never the driver's ring; a frame dropped on
//! another thread returns its slot and wakes the driver; transmit frames are written once, headers
//! in front; and zcnet itself copies no payload byte on the way.

use std::task::{Context, Poll};

use zcnet_buffer::ledger::LEDGER;
use zcnet_buffer::sim::{CountingWaker, SimNic};
use zcnet_buffer::{Driver, RxFrame, StaticPool, DEFAULT_HEADROOM};

const SLOTS: usize = 12;
const RING: usize = 8;

static POOL: StaticPool<SLOTS, 2048> = StaticPool::new();

fn show(step: &str, nic: &SimNic) {
    let pool = POOL.get().expect("initialised in main");
    println!("{step:<52} ring={:<2} {}", nic.posted(), pool.occupancy());
}

fn receive(nic: &mut SimNic, cx: &mut Context<'_>) -> Option<RxFrame> {
    match nic.poll_receive(cx) {
        Poll::Ready(f) => Some(f),
        Poll::Pending => None,
    }
}

fn main() {
    let pool = POOL.init(DEFAULT_HEADROOM).expect("pool geometry is valid");
    let ledger_before = LEDGER.snapshot();
    println!(
        "pool: {} slots x {} B, {} B TX headroom, in a static (.bss); a simulated NIC with a {}-slot RX ring\n",
        pool.slot_count(),
        pool.slot_size(),
        pool.headroom(),
        RING
    );

    let mut nic = SimNic::new(pool, RING, 4);
    let (driver_wakes, waker) = CountingWaker::new();
    let mut cx = Context::from_waker(&waker);

    assert!(receive(&mut nic, &mut cx).is_none());
    show("driver filled its RX ring", &nic);

    // The application receives frames and keeps them (zero-copy datagrams it has not read yet).
    let mut held = Vec::new();
    for i in 0..(SLOTS - RING) as u8 {
        let payload = [b'a' + i; 64];
        nic.device_receive(&payload);
        let mut frame = receive(&mut nic, &mut cx).expect("completed");
        frame.advance(14).expect("64 > 14"); // strip an "Ethernet header", no copy
        frame.lend_to_app();
        held.push(frame);
        show(&format!("app holds {} frame(s)", held.len()), &nic);
    }
    println!("  -> the ring stayed full while spare slots lasted; now the ring itself shrinks:");
    for _ in 0..2 {
        nic.device_receive(&[b'z'; 64]);
        let mut frame = receive(&mut nic, &mut cx).expect("completed");
        frame.lend_to_app();
        held.push(frame);
        show(&format!("app holds {} frame(s)", held.len()), &nic);
    }
    println!(
        "  -> pool exhausted {} time(s); the driver waits on the pool's waker\n",
        pool.stats().rx_exhausted
    );

    // The application drops four frames on another thread: the driver is woken and refills.
    let wakes = driver_wakes.wakes();
    let four: Vec<RxFrame> = held.drain(..4).collect();
    let first_payload = four[0][0] as char;
    std::thread::spawn(move || drop(four))
        .join()
        .expect("dropper thread");
    println!(
        "app dropped 4 frames (payload '{first_payload}...') on another thread: driver woken {} time(s)",
        driver_wakes.wakes() - wakes
    );
    assert!(receive(&mut nic, &mut cx).is_none());
    show("driver's next poll re-posted the returned slots", &nic);

    // Transmit: payload written in place once, headers pushed in front.
    let Poll::Ready(mut tx) = nic.poll_transmit_frame(&mut cx) else {
        unreachable!("the pool has free slots")
    };
    let payload_at = {
        let p = tx.append(5).expect("fits");
        p.copy_from_slice(b"hello");
        p.as_ptr()
    };
    tx.push_header(8)
        .expect("headroom")
        .copy_from_slice(b"UDPHDR::");
    tx.push_header(14)
        .expect("headroom")
        .copy_from_slice(b"ETHERNET-HDR::");
    println!(
        "\nTX frame: {} B of headers pushed in front of the payload, {} B headroom left",
        tx.len() - 5,
        tx.headroom()
    );
    let same_memory = tx[22..].as_ptr() == payload_at;
    nic.transmit(tx).expect("valid frame");
    show("frame handed to the device", &nic);
    let sent = nic.device_complete_tx(1);
    println!(
        "device sent {:?}; payload never moved: {same_memory}",
        String::from_utf8_lossy(&sent[0])
    );
    show("TX completion returned the slot", &nic);

    drop(held);
    drop(nic);
    let occ = pool.audit().expect("no slot lost or returned twice");
    println!("\nall leases dropped: {occ}  (audit: free list exact)");
    let copies = LEDGER.snapshot().since(&ledger_before);
    println!(
        "payload bytes copied by zcnet: {} in {} copies (device writes are the device's DMA)",
        copies.user_bytes(),
        copies.user_calls()
    );
    assert_eq!(occ.free, SLOTS);
}
