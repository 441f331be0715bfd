//! zcnet on the virtio-net device: the frame pool, the driver, its interrupts, the stack.
//!
//! ```text
//!  StaticPool (.bss, identity mapped = DMA memory) ─► VirtioNet (zcnet-virtio) ─► Stack
//!        ▲ slots posted to the RX ring, TX frames sent in place      │ ingress / egress tasks
//!  MSI-X: RX vector ─► NET_IRQ.handle_rx_interrupt ─► wakes ingress  │ on the executor
//!         TX vector ─► NET_IRQ.handle_tx_interrupt ─► wakes egress ◄─┘
//!         config vector ─► NET_IRQ.handle_config_interrupt ─► wakes the stack's link task
//!  INTx / virtio-mmio line: status bit 0 ─► NET_IRQ.handle_interrupt, bit 1 ─► config
//! ```
//!
//! The transport (PCI on q35, virtio-mmio on microvm: `nic.rs` finds it, as one
//! `SomeTransport`) goes to the driver, which initialises the device itself (features,
//! queues) and reads the link status through it. It is wrapped in zcnet-virtio's `Doorbells`
//! first: on PCI a doorbell is then one register write (virtio-drivers' transport makes three),
//! and every doorbell is counted for `/stats` (`kernel.nic.kicks`).
//!
//! The order matters: `VirtioNet::new` initialises the device, which resets its MSI-X vectors,
//! so the interrupts are routed (`nic.rs`) only after the driver exists.

use alloc::boxed::Box;
use core::fmt;

use zcnet_buffer::{FramePool, PoolError, StaticPool, DEFAULT_HEADROOM};
use zcnet_executor::LocalSpawner;
use zcnet_stack::{Config, Ipv4Cidr, Ipv4Config, Stack, StackError, StackResources, StaticV4};
use zcnet_virtio::{VirtioConfig, VirtioError, VirtioIrq, VirtioNet};

use crate::cmdline::{BootInfo, IpSetting};
use crate::hal::KernelHal;
use crate::nic::{self, Handlers, NicError, NicTransport};
use crate::nic_irq::Routing;

/// Frames in the pool (16 MiB): the RX ring (256) stays full, the rest is for frames in flight,
/// held by sockets, or being built. Each TCP socket reserves its buffers' frame budget when it
/// opens, out of three quarters of the pool (the stack's default TCP share): the services'
/// listeners (iperf3's four armed sockets alone reserve 4 x 512 frames for their 256 KiB
/// buffers), an iperf3 test of five connections and the HTTP connections fit at once.
pub const POOL_SLOTS: usize = 8192;
/// Bytes per frame slot: headroom plus a full Ethernet frame fits.
pub const SLOT_SIZE: usize = 2048;
/// Entries per virtqueue.
pub const QUEUE_SIZE: usize = 256;
/// Socket slots of the stack: the services' listeners' backlogs plus their connections (HTTP
/// 16 + 64, echo 4 + 8 and the UDP socket, iperf3 4 + a control connection and 16 streams) and
/// DHCP, with a few to spare. smoltcp walks every slot on each egress pass and `poll_at`, so
/// the table is sized to what the services can use, not larger.
pub const SOCKETS: usize = 128;

/// The zcnet driver type this kernel uses.
pub type Nic = VirtioNet<KernelHal, NicTransport, QUEUE_SIZE>;

/// Shared between the driver and the NIC's interrupt handlers.
pub static NET_IRQ: VirtioIrq = VirtioIrq::new();
static POOL: StaticPool<POOL_SLOTS, SLOT_SIZE> = StaticPool::new();
static RESOURCES: StackResources<SOCKETS> = StackResources::new();

/// The running network: the stack and what `/stats` and the test checks look at.
#[derive(Clone, Copy, Debug)]
pub struct Net {
    /// The stack handle.
    pub stack: Stack,
    /// The frame pool.
    pub pool: &'static FramePool,
    /// How the NIC's interrupts are routed.
    pub routing: Routing,
}

/// Why the network could not be started.
#[derive(Debug)]
pub enum NetError {
    /// The frame pool could not be built.
    Pool(PoolError),
    /// No usable virtio-net device, or no route for its interrupts.
    Nic(NicError),
    /// zcnet's driver could not initialise the device, or refused it or the pool.
    Driver(VirtioError),
    /// The stack could not be built.
    Stack(StackError),
}

impl fmt::Display for NetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetError::Pool(e) => write!(f, "frame pool: {e:?}"),
            NetError::Nic(e) => write!(f, "{e}"),
            NetError::Driver(e) => write!(f, "zcnet-virtio: {e}"),
            NetError::Stack(e) => write!(f, "stack: {e}"),
        }
    }
}

fn rx_interrupt() {
    NET_IRQ.handle_rx_interrupt();
}

fn tx_interrupt() {
    NET_IRQ.handle_tx_interrupt();
}

/// INTx or virtio-mmio: `isr` is the interrupt status the handler acknowledged (bit 0: a queue,
/// bit 1: a configuration change).
fn shared_interrupt(isr: u8) {
    if isr & 1 != 0 {
        NET_IRQ.handle_interrupt();
    }
    if isr & 2 != 0 {
        NET_IRQ.handle_config_interrupt();
    }
}

/// Configuration changes: the link went up or down.
fn config_interrupt() {
    NET_IRQ.handle_config_interrupt();
}

/// The handlers `nic::route_interrupts` wires up.
const HANDLERS: Handlers = Handlers {
    rx: rx_interrupt,
    tx: tx_interrupt,
    config: config_interrupt,
    shared: shared_interrupt,
};

/// Builds the pool, finds the NIC and initialises it with zcnet's driver, routes its
/// interrupts and starts the stack's tasks on `exec`.
pub fn start(spawner: LocalSpawner, boot: &BootInfo) -> Result<Net, NetError> {
    let cmdline = &boot.cmdline;
    let exec = spawner.executor();
    let pool = POOL.init(DEFAULT_HEADROOM).map_err(NetError::Pool)?;
    let (transport, nic) = nic::find_virtio_net(boot).map_err(NetError::Nic)?;
    let transport = nic::doorbells(transport, &nic, true);
    let config = VirtioConfig::new()
        .with_checksum_offload(cmdline.csum)
        .with_rx_recheck(cmdline.rx_recheck)
        .with_large_receive(cmdline.lro)
        .with_rx_defer(
            core::time::Duration::from_micros(cmdline.rx_defer_us as u64),
            cmdline.rx_defer_bytes,
        );
    let driver: Nic =
        VirtioNet::with_config(transport, pool, &NET_IRQ, config).map_err(NetError::Driver)?;
    nic::note_doorbells(driver.transport());
    nic::note_features(driver.features());
    let routing = nic::route_interrupts(&nic, cmdline.irq, HANDLERS).map_err(NetError::Nic)?;
    let ipv4 = match cmdline.ip {
        IpSetting::Dhcp => Ipv4Config::Dhcp,
        IpSetting::Static { address, prefix } => Ipv4Config::Static(StaticV4 {
            address: Ipv4Cidr::new(address, prefix),
            gateway: cmdline.gateway,
        }),
    };
    let config = Config {
        ipv4,
        ..Config::new(boot.secret)
    };
    let driver: &'static mut Nic = Box::leak(Box::new(driver));
    let (stack, runner) =
        Stack::new(exec, pool, driver, config, &RESOURCES).map_err(NetError::Stack)?;
    runner.spawn(spawner);
    Ok(Net {
        stack,
        pool,
        routing,
    })
}
