//! The link state: two stacks over the in-memory wire with a "cable" that can be pulled
//! (`zcnet_tests::cable`). While
//! it is out the drivers refuse to transmit (`TxError::LinkDown`) and deliver nothing, as a
//! NIC without carrier does. The stacks must notice (only when the driver says so), hold what
//! they would send, tell the application, and carry on where they stopped once the cable is
//! back: no TCP byte lost.

use std::sync::atomic::Ordering;
use std::time::Duration;

use zcnet_buffer::{LinkState, TxError};
use zcnet_executor::time::{sleep, timeout};
use zcnet_stack::datagram::{DatagramError, DatagramQueue, DatagramSocket};
use zcnet_stack::tcp::{TcpBuffers, TcpSocket};
use zcnet_stack::{DropReason, IpEndpoint};
use zcnet_tests::cable::cable_pair;
use zcnet_tests::net::ADDR;

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(31).wrapping_add(seed) % 251) as u8)
        .collect()
}

#[test]
fn a_pulled_cable_holds_tcp_data_and_tells_the_application_then_resumes() {
    let s = cable_pair();
    let [a, b] = s.stacks;
    let cable = s.cable;
    let first = pattern(200_000, 1);
    let second = pattern(300_000, 2);
    let expected: Vec<u8> = first.iter().chain(&second).copied().collect();

    let server = s.exec.local_spawner().spawn(async move {
        let mut sock = TcpSocket::new(b, TcpBuffers::with_capacity(16384, 16384)).unwrap();
        sock.accept(7100).await.unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            let n = sock.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        got
    });

    let exec = s.exec;
    let (polls_while_up, drops_link_down) = s.exec.block_on(async move {
        let mut c = TcpSocket::new(a, TcpBuffers::with_capacity(16384, 65536)).unwrap();
        c.connect_timeout(
            IpEndpoint::new(ADDR[1].into(), 7100),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        c.write_all(&first).await.unwrap();
        c.flush().await.unwrap();
        // Hundreds of frames went by: the link was asked once at start, never per frame.
        let polls_while_up = cable.link_polls[0].load(Ordering::SeqCst);
        assert_eq!(a.link_state(), LinkState::Up);

        cable.set(false);
        timeout(Duration::from_secs(2), a.wait_link(LinkState::Down))
            .await
            .expect("stack A sees the link go down");
        timeout(Duration::from_secs(2), b.wait_link(LinkState::Down))
            .await
            .expect("stack B sees the link go down");
        assert_eq!(a.stats().link_downs, 1);

        // While down: the application's writes are kept (the send buffer takes 64 KiB), nothing
        // goes to the driver, and a zero-copy datagram is refused with the reason.
        let out_before = a.stats().frames_out;
        let n = c.write(&second).await.unwrap();
        assert!(n > 0, "the send buffer takes data while the link is down");
        let zc = DatagramSocket::bind(a, 7200, DatagramQueue::with_capacity(4)).unwrap();
        let mut f = zc.tx_frame().await;
        f.append(4).unwrap().copy_from_slice(b"ping");
        assert_eq!(
            zc.send_to(f, (ADDR[1], 7201)).await,
            Err(DatagramError::Driver(TxError::LinkDown))
        );
        sleep(Duration::from_millis(300)).await;
        assert_eq!(
            a.stats().frames_out,
            out_before,
            "egress transmits nothing while the link is down"
        );
        let drops_link_down = a.stats().dropped(DropReason::LinkDown);

        // Back in: both stacks see it (a TAP-like driver would be re-asked within a second
        // anyway), and the connection carries on from where it stopped.
        cable.set(true);
        timeout(Duration::from_secs(2), a.wait_link(LinkState::Up))
            .await
            .expect("stack A sees the link come back");
        c.write_all(&second[n..]).await.unwrap();
        c.shutdown();
        c.flush().await.unwrap();
        (polls_while_up, drops_link_down)
    });
    let got = s
        .exec
        .block_on(timeout(Duration::from_secs(20), server))
        .expect("server finished");
    assert_eq!(got.len(), expected.len());
    assert!(got == expected, "every byte arrives, in order, once");
    assert!(
        polls_while_up <= 2,
        "the link task asks the driver only when woken: {polls_while_up} polls"
    );
    assert_eq!(drops_link_down, 1, "the refused datagram is counted");
    let _ = exec;
    for pool in s.pools {
        pool.audit().expect("pool audit");
    }
}

#[test]
fn a_link_that_stays_down_is_asked_again_every_second() {
    let s = cable_pair();
    let a = s.stacks[0];
    let cable = s.cable;
    s.exec.block_on(async move {
        cable.set(false);
        timeout(Duration::from_secs(2), a.wait_link(LinkState::Down))
            .await
            .expect("down seen");
        let before = cable.link_polls[0].load(Ordering::SeqCst);
        sleep(Duration::from_millis(2600)).await;
        let asked = cable.link_polls[0].load(Ordering::SeqCst) - before;
        assert!(
            (2..=4).contains(&asked),
            "about one query per second while down, got {asked} in 2.6 s"
        );
        // A driver that cannot wake on its own (a TAP) is caught by the recheck: plug the
        // cable back without waking anybody.
        cable.plugged.store(true, Ordering::SeqCst);
        timeout(Duration::from_secs(3), a.wait_link(LinkState::Up))
            .await
            .expect("the recheck sees the link back");
    });
}
