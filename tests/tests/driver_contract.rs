//! The Driver contract, shown on the simulated ring NIC: frames an application holds drain the
//! pool's spare slots, never the ring; when the pool runs dry the device drops and counts; a
//! returned slot wakes the driver, whose next poll refills the ring.

use std::task::{Context, Poll};

use zcnet_buffer::{Driver, FramePool, PoolConfig, TxError};
use zcnet_tests::sim_nic::SimNic;
use zcnet_tests::wakers::CountingWaker;

fn receive(nic: &mut SimNic, cx: &mut Context<'_>) -> zcnet_buffer::RxFrame {
    match nic.poll_receive(cx) {
        Poll::Ready(f) => f,
        Poll::Pending => panic!("a frame was completed"),
    }
}

#[test]
fn held_frames_drain_spares_not_the_ring() {
    const RING: usize = 4;
    const SPARE: usize = 4;
    let pool = FramePool::leak(PoolConfig::new(RING + SPARE)).unwrap();
    let mut nic = SimNic::new(pool, RING, 4);
    let (count, waker) = CountingWaker::new();
    let mut cx = Context::from_waker(&waker);

    assert!(nic.poll_receive(&mut cx).is_pending());
    assert_eq!(nic.posted(), RING);

    // The application holds every frame it gets: the ring stays full while spares last.
    let mut held = Vec::new();
    for i in 0..SPARE {
        assert!(nic.device_receive(&[i as u8; 60]));
        held.push(receive(&mut nic, &mut cx));
        assert_eq!(nic.posted(), RING, "ring refilled after completion {i}");
    }
    let occ = pool.occupancy();
    assert_eq!((occ.posted, occ.stack, occ.free), (RING, SPARE, 0));

    // Spares gone: each further completion shrinks the ring, and the driver waits on the pool.
    for i in 0..RING {
        assert!(nic.device_receive(&[0xA0 + i as u8; 60]));
        let mut f = receive(&mut nic, &mut cx);
        f.lend_to_app();
        held.push(f);
        assert_eq!(nic.posted(), RING - 1 - i);
    }
    assert_eq!(pool.occupancy().lent, RING);
    assert!(nic.stats().refill_stalls > 0);
    assert!(pool.stats().rx_exhausted > 0);

    // The ring is empty: the device drops and counts, nothing queues without bound.
    assert!(!nic.device_receive(&[0xFF; 60]));
    assert_eq!(nic.stats().rx_dropped_no_buffer, 1);

    // The application lets go of one frame on another thread: the driver is woken.
    let wakes_before = count.wakes();
    let one = held.pop().unwrap();
    std::thread::spawn(move || drop(one)).join().unwrap();
    assert_eq!(
        count.wakes(),
        wakes_before + 1,
        "returned slot wakes the driver"
    );
    assert!(nic.poll_receive(&mut cx).is_pending());
    assert_eq!(nic.posted(), 1, "the next poll re-posted the returned slot");

    // Frames kept their contents throughout.
    assert!(held[..SPARE]
        .iter()
        .enumerate()
        .all(|(i, f)| f[..] == [i as u8; 60]));
    drop(held);
    assert!(nic.poll_receive(&mut cx).is_pending());
    assert_eq!(nic.posted(), RING);
    drop(nic);
    assert_eq!(pool.audit().unwrap().free, RING + SPARE);
}

#[test]
fn transmit_checks_length_headroom_and_queue() {
    let pool = FramePool::leak(PoolConfig::new(4)).unwrap();
    let mut nic = SimNic::new(pool, 0, 1).with_tx_headroom(12);
    let (count, waker) = CountingWaker::new();
    let mut cx = Context::from_waker(&waker);
    let max = nic.capabilities().max_frame_len();
    assert_eq!(max, 1514);

    let Poll::Ready(mut f) = nic.poll_transmit_frame(&mut cx) else {
        panic!("pool has slots")
    };
    f.set_len(max + 1).unwrap();
    assert_eq!(nic.transmit(f), Err(TxError::TooLong { len: max + 1, max }));

    let Poll::Ready(mut f) = nic.poll_transmit_frame(&mut cx) else {
        panic!()
    };
    f.set_headroom(4).unwrap();
    f.set_len(60).unwrap();
    assert_eq!(nic.transmit(f), Err(TxError::NoHeadroom));

    let Poll::Ready(mut f) = nic.poll_transmit_frame(&mut cx) else {
        panic!()
    };
    f.append(3).unwrap().copy_from_slice(b"abc");
    f.push_header(2).unwrap().copy_from_slice(b"HD");
    nic.transmit(f).unwrap();
    assert_eq!(pool.occupancy().device, 1);

    // The TX queue (1 entry) is full: the next frame waits for the completion's wake.
    assert!(nic.poll_transmit_frame(&mut cx).is_pending());
    assert_eq!(count.wakes(), 0);
    assert_eq!(nic.device_complete_tx(1), vec![b"HDabc".to_vec()]);
    assert_eq!(count.wakes(), 1);
    assert!(nic.poll_transmit_frame(&mut cx).is_ready());
    assert_eq!(nic.in_flight(), 0);
    assert_eq!(pool.audit().unwrap().free, 4);
}
