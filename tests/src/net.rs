//! Two stacks linked by an in-memory [`wire`](crate::wire), running on one executor.

use zcnet_buffer::{Driver, FramePool, PoolConfig};
use zcnet_executor::linux::LinuxPlatform;
use zcnet_executor::Executor;
use zcnet_stack::{
    Config, Ipv4Address, Ipv4Cidr, Ipv4Config, Ipv6Address, Ipv6Cidr, Stack, StackResources,
    StaticV4, StaticV6,
};

use sha2::{Digest, Sha256};
use zcnet_stack::tcp::TcpSocket;

use crate::audit::assert_slots_back;
use crate::wire::{wire_pair_one_thread, wire_pair_with, Delivery, Faults, WireEnd, WireHandle};

/// Address of stack A (10.0.0.1) and stack B (10.0.0.2).
pub const ADDR: [Ipv4Address; 2] = [Ipv4Address::new(10, 0, 0, 1), Ipv4Address::new(10, 0, 0, 2)];

/// Unique local IPv6 addresses of stack A (`fd00::1`) and stack B (`fd00::2`), on one /64:
/// what [`with_ula`] gives them.
pub const ULA: [Ipv6Address; 2] = [
    Ipv6Address::new(0xfd00, 0, 0, 0, 0, 0, 0, 1),
    Ipv6Address::new(0xfd00, 0, 0, 0, 0, 0, 0, 2),
];

/// The configuration step of an IPv6 pair (for [`pair_with`] and its kin): gives stack `i` the
/// static address [`ULA`]`[i]`/64 without a gateway, besides its IPv4 address.
pub fn with_ula(i: usize, c: &mut Config) {
    c.ipv6 = Some(StaticV6 {
        address: Ipv6Cidr::new(ULA[i], 64),
        gateway: None,
    });
}

/// Two stacks, their executor, and read access to the wire ends' counters.
#[derive(Debug)]
pub struct Pair {
    /// The executor both stacks (and the test's tasks) run on.
    pub exec: &'static Executor,
    /// Stack A (10.0.0.1) and stack B (10.0.0.2).
    pub stacks: [Stack; 2],
    /// Handles to the wire ends (the ends themselves are owned by the stacks).
    pub ends: [&'static WireHandle; 2],
    /// The pools.
    pub pools: [&'static FramePool; 2],
}

impl Pair {
    /// The end-of-test pool audit of both pools ([`assert_slots_back`]): every slot back, none
    /// posted (the wire keeps no RX ring). Call it once the test's sockets are closed and
    /// dropped and the stacks have run out their connections.
    pub fn assert_slots_back(&self) {
        for pool in self.pools {
            assert_slots_back(pool, 0);
        }
    }
}

/// Sockets per stack in [`pair`].
pub const SOCKETS: usize = 160;

/// Side `i`'s starting configuration in a pair: static [`ADDR`]`[i]`/24, no gateway, and the
/// secret [`seeded`](crate::secret::seeded) from `secret_seed` (the pair's tests pick fixed
/// seeds so runs repeat).
pub fn side_config(i: usize, secret_seed: u64) -> Config {
    Config {
        ipv4: Ipv4Config::Static(StaticV4 {
            address: Ipv4Cidr::new(ADDR[i], 24),
            gateway: None,
        }),
        ..Config::new(crate::secret::seeded(secret_seed))
    }
}

/// Builds two stacks over a wire with `faults`, each with a pool of `slots` slots, on a new
/// executor with the Linux platform (real time), and spawns their runners.
pub fn pair(faults: Faults, slots: usize) -> Pair {
    pair_on(
        Executor::leak(LinuxPlatform::leak().expect("epoll")),
        faults,
        slots,
    )
}

/// [`pair`] on an executor of the caller's (e.g. over a
/// [`VirtualClock`](crate::clock::VirtualClock) for simulated time).
pub fn pair_on(exec: &'static Executor, faults: Faults, slots: usize) -> Pair {
    pair_on_with(exec, faults, slots, |_, _| {})
}

/// [`pair`], with `configure(i, &mut config)` adjusting stack `i`'s configuration (which starts
/// as in [`pair`]: static [`ADDR`]`[i]`/24) before the stack is built.
pub fn pair_with(faults: Faults, slots: usize, configure: impl FnMut(usize, &mut Config)) -> Pair {
    pair_on_with(
        Executor::leak(LinuxPlatform::leak().expect("epoll")),
        faults,
        slots,
        configure,
    )
}

/// [`pair_on`] with a `configure` hook as in [`pair_with`].
pub fn pair_on_with(
    exec: &'static Executor,
    faults: Faults,
    slots: usize,
    configure: impl FnMut(usize, &mut Config),
) -> Pair {
    pair_sized::<SOCKETS>(exec, faults, slots, configure)
}

/// [`pair_on_with`] with `S` socket slots per stack instead of [`SOCKETS`]: smoltcp walks every
/// slot, empty or not, on each egress pass and deadline query, so benchmarks size the table to
/// what they use.
pub fn pair_sized<const S: usize>(
    exec: &'static Executor,
    faults: Faults,
    slots: usize,
    configure: impl FnMut(usize, &mut Config),
) -> Pair {
    pair_sizes_with::<S, S>(exec, faults, Delivery::Copy, slots, configure)
}

/// [`pair_sized`] with frames crossing the wire by `delivery` ([`Delivery::Lend`]: the
/// receiver gets the sender's slot, no copy, like smoltcp's `Loopback`).
pub fn pair_sized_with<const S: usize>(
    exec: &'static Executor,
    faults: Faults,
    delivery: Delivery,
    slots: usize,
    configure: impl FnMut(usize, &mut Config),
) -> Pair {
    pair_sizes_with::<S, S>(exec, faults, delivery, slots, configure)
}

/// [`pair_sized`] with `A` socket slots in stack A and `B` in stack B (a client side with room
/// for more connections than a small server's table, say).
pub fn pair_sizes<const A: usize, const B: usize>(
    exec: &'static Executor,
    faults: Faults,
    slots: usize,
    configure: impl FnMut(usize, &mut Config),
) -> Pair {
    pair_sizes_with::<A, B>(exec, faults, Delivery::Copy, slots, configure)
}

/// [`pair_sizes`] with frames crossing the wire by `delivery`.
pub fn pair_sizes_with<const A: usize, const B: usize>(
    exec: &'static Executor,
    faults: Faults,
    delivery: Delivery,
    slots: usize,
    configure: impl FnMut(usize, &mut Config),
) -> Pair {
    pair_pools_with::<A, B>(exec, faults, delivery, [slots, slots], configure)
}

/// [`pair_sizes_with`] with pools of different sizes: `slots[i]` for stack `i` (a receiver
/// short of slots beside a sender with plenty, say).
pub fn pair_pools_with<const A: usize, const B: usize>(
    exec: &'static Executor,
    faults: Faults,
    delivery: Delivery,
    slots: [usize; 2],
    configure: impl FnMut(usize, &mut Config),
) -> Pair {
    pair_drivers::<A, B>(
        exec,
        faults,
        delivery,
        slots,
        |a, b| [Box::new(a), Box::new(b)],
        configure,
    )
}

/// A driver a stack of a pair runs on: a wire end, or a driver of the test's around one.
pub type PairDriver = Box<dyn Driver + Send>;

/// [`pair_pools_with`] with each stack on the driver `drivers(end_a, end_b)` makes of the wire
/// ends: a test's wrapper around an end (recording what crosses, say), or the end itself.
pub fn pair_drivers<const A: usize, const B: usize>(
    exec: &'static Executor,
    faults: Faults,
    delivery: Delivery,
    slots: [usize; 2],
    drivers: impl FnOnce(WireEnd, WireEnd) -> [PairDriver; 2],
    configure: impl FnMut(usize, &mut Config),
) -> Pair {
    let pools = [
        FramePool::leak(PoolConfig::new(slots[0])).expect("pool"),
        FramePool::leak(PoolConfig::new(slots[1])).expect("pool"),
    ];
    pair_drivers_on::<A, B>(exec, pools, faults, delivery, drivers, configure)
}

/// [`pair_drivers`] over pools the test made (slots of another size, say).
pub fn pair_drivers_on<const A: usize, const B: usize>(
    exec: &'static Executor,
    pools: [&'static FramePool; 2],
    faults: Faults,
    delivery: Delivery,
    drivers: impl FnOnce(WireEnd, WireEnd) -> [PairDriver; 2],
    configure: impl FnMut(usize, &mut Config),
) -> Pair {
    let (a, b) = wire_pair_with(exec, pools, faults, delivery);
    pair_over::<A, B>(exec, pools, (a, b), drivers, configure)
}

/// [`pair_sized_with`] over a one-thread wire ([`wire_pair_one_thread`]: no lock per
/// direction), for a pair driven only on the calling thread, as the stack benchmark's is.
pub fn pair_one_thread_with<const S: usize>(
    exec: &'static Executor,
    faults: Faults,
    delivery: Delivery,
    slots: usize,
    configure: impl FnMut(usize, &mut Config),
) -> Pair {
    let pools = [
        FramePool::leak(PoolConfig::new(slots)).expect("pool"),
        FramePool::leak(PoolConfig::new(slots)).expect("pool"),
    ];
    let ends = wire_pair_one_thread(exec, pools, faults, delivery);
    pair_over::<S, S>(
        exec,
        pools,
        ends,
        |a, b| [Box::new(a), Box::new(b)],
        configure,
    )
}

/// Two stacks on `drivers(ends)`, over `pools`.
fn pair_over<const A: usize, const B: usize>(
    exec: &'static Executor,
    pools: [&'static FramePool; 2],
    (a, b): (WireEnd, WireEnd),
    drivers: impl FnOnce(WireEnd, WireEnd) -> [PairDriver; 2],
    mut configure: impl FnMut(usize, &mut Config),
) -> Pair {
    let handles: [&'static WireHandle; 2] = [
        Box::leak(Box::new(a.handle())),
        Box::leak(Box::new(b.handle())),
    ];
    let mut config = |i: usize| {
        let mut c = side_config(i, 0x1234 + i as u64);
        configure(i, &mut c);
        c
    };
    let [da, db] = drivers(a, b);
    let sa = side::<A>(exec, pools[0], da, config(0));
    let sb = side::<B>(exec, pools[1], db, config(1));
    Pair {
        exec,
        stacks: [sa, sb],
        ends: handles,
        pools,
    }
}

/// [`pair_drivers`] with [`SOCKETS`] socket slots and `slots` pool slots per stack, frames
/// crossing by [`Delivery::Copy`].
pub fn pair_wrapped(
    exec: &'static Executor,
    faults: Faults,
    slots: usize,
    drivers: impl FnOnce(WireEnd, WireEnd) -> [PairDriver; 2],
    configure: impl FnMut(usize, &mut Config),
) -> Pair {
    pair_drivers::<SOCKETS, SOCKETS>(
        exec,
        faults,
        Delivery::Copy,
        [slots, slots],
        drivers,
        configure,
    )
}

/// One stack of a pair, with `S` socket slots, on `driver` (boxed: [`Stack::shutdown`] gives
/// it back), its runner spawned.
fn side<const S: usize>(
    exec: &'static Executor,
    pool: &'static FramePool,
    driver: PairDriver,
    config: Config,
) -> Stack {
    let resources: &'static StackResources<S> = StackResources::leak();
    let (stack, runner) = Stack::new(exec, pool, driver, config, resources).expect("stack");
    runner.spawn(exec.local_spawner());
    stack
}

/// Reads `len` bytes from `s` in place (`read_with`) and returns their SHA-256, calling
/// `after_read` with the socket after each read (to sample its statistics).
///
/// # Panics
/// If the connection fails or ends before `len` bytes.
pub async fn read_sha256(
    s: &mut TcpSocket,
    len: usize,
    mut after_read: impl FnMut(&TcpSocket),
) -> [u8; 32] {
    let mut h = Sha256::new();
    let mut got = 0;
    while got < len {
        got += s
            .read_with(|d| {
                h.update(&*d);
                (d.len(), d.len())
            })
            .await
            .unwrap()
            .expect("data until the end");
        after_read(s);
    }
    h.finalize().into()
}
