//! [`StackDriver`]: how a stack holds its driver, and how [`Stack::shutdown`](crate::Stack::shutdown)
//! gives it back.
//!
//! A stack takes its driver either as a `&'static mut` (a driver in a `static`, the usual case
//! in a kernel without an allocator) or boxed (feature `alloc`). The box is what makes a driver
//! closable: shutting the stack down hands the box back, and dropping it drops the driver (a TAP
//! device closes its file descriptor; the RX slots it had posted and the TX frames it still
//! carried go back to the pool).
//!
//! After shutdown the stack holds a *detached* driver in its place: one that receives nothing,
//! has no TX frame and reports the link down, so a code path that still reaches the driver finds
//! it idle instead of an absent value.

use core::ops::{Deref, DerefMut};
use core::task::{Context, Poll};

use zcnet_buffer::{Capabilities, Driver, HardwareAddress, LinkState, RxFrame, TxError, TxFrame};

/// The driver a stack runs on: what [`Stack::new`](crate::Stack::new) takes and
/// [`Stack::shutdown`](crate::Stack::shutdown) gives back.
///
/// Made with `From` (so `Stack::new` takes either form directly): from a `&'static mut` driver
/// (`&'static mut D` or `&'static mut (dyn Driver + Send)`), or, with the `alloc` feature, from
/// a `Box<D>` or a `Box<dyn Driver + Send>`. It derefs to the driver.
pub struct StackDriver(Held);

enum Held {
    Static(&'static mut (dyn Driver + Send)),
    #[cfg(feature = "alloc")]
    Boxed(alloc::boxed::Box<dyn Driver + Send>),
    /// In a stack that was shut down; never handed out.
    Detached(Detached),
}

impl StackDriver {
    /// The placeholder a shut-down stack keeps (see the module docs).
    pub(crate) fn detached(caps: Capabilities, hw: HardwareAddress) -> Self {
        Self(Held::Detached(Detached { caps, hw }))
    }

    /// The driver, if it was given as a `&'static mut` (else `Err(self)`).
    pub fn into_static(self) -> Result<&'static mut (dyn Driver + Send), Self> {
        match self.0 {
            Held::Static(d) => Ok(d),
            other => Err(Self(other)),
        }
    }

    /// The driver, if it was given boxed (else `Err(self)`).
    #[cfg(feature = "alloc")]
    pub fn into_boxed(self) -> Result<alloc::boxed::Box<dyn Driver + Send>, Self> {
        match self.0 {
            Held::Boxed(d) => Ok(d),
            other => Err(Self(other)),
        }
    }
}

impl core::fmt::Debug for StackDriver {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self.0 {
            Held::Static(_) => "StackDriver::Static",
            #[cfg(feature = "alloc")]
            Held::Boxed(_) => "StackDriver::Boxed",
            Held::Detached(_) => "StackDriver::Detached",
        })
    }
}

impl Deref for StackDriver {
    type Target = dyn Driver + Send;

    fn deref(&self) -> &Self::Target {
        match &self.0 {
            Held::Static(d) => &**d,
            #[cfg(feature = "alloc")]
            Held::Boxed(d) => &**d,
            Held::Detached(d) => d,
        }
    }
}

impl DerefMut for StackDriver {
    fn deref_mut(&mut self) -> &mut Self::Target {
        match &mut self.0 {
            Held::Static(d) => &mut **d,
            #[cfg(feature = "alloc")]
            Held::Boxed(d) => &mut **d,
            Held::Detached(d) => d,
        }
    }
}

impl<D: Driver + Send + 'static> From<&'static mut D> for StackDriver {
    fn from(d: &'static mut D) -> Self {
        Self(Held::Static(d))
    }
}

impl From<&'static mut (dyn Driver + Send)> for StackDriver {
    fn from(d: &'static mut (dyn Driver + Send)) -> Self {
        Self(Held::Static(d))
    }
}

#[cfg(feature = "alloc")]
impl<D: Driver + Send + 'static> From<alloc::boxed::Box<D>> for StackDriver {
    fn from(d: alloc::boxed::Box<D>) -> Self {
        Self(Held::Boxed(d))
    }
}

#[cfg(feature = "alloc")]
impl From<alloc::boxed::Box<dyn Driver + Send>> for StackDriver {
    fn from(d: alloc::boxed::Box<dyn Driver + Send>) -> Self {
        Self(Held::Boxed(d))
    }
}

/// The driver of a shut-down stack: idle for good, with the capabilities and address of the
/// driver it replaced.
struct Detached {
    caps: Capabilities,
    hw: HardwareAddress,
}

impl Driver for Detached {
    fn poll_receive(&mut self, _cx: &mut Context<'_>) -> Poll<RxFrame> {
        Poll::Pending
    }

    fn poll_transmit_frame(&mut self, _cx: &mut Context<'_>) -> Poll<TxFrame> {
        Poll::Pending
    }

    fn poll_transmit_ready(&mut self, _cx: &mut Context<'_>) -> Poll<()> {
        Poll::Pending
    }

    fn transmit(&mut self, _frame: TxFrame) -> Result<(), TxError> {
        Err(TxError::LinkDown)
    }

    fn capabilities(&self) -> Capabilities {
        self.caps
    }

    fn hardware_address(&self) -> HardwareAddress {
        self.hw
    }

    fn poll_link_state(&mut self, _cx: &mut Context<'_>) -> LinkState {
        LinkState::Down
    }
}
