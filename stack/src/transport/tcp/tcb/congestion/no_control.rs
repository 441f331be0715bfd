//! No congestion control.

use super::Controller;

/// An unlimited congestion window.
#[derive(Debug)]
pub(crate) struct NoControl;

impl Controller for NoControl {
    fn window(&self) -> usize {
        usize::MAX
    }
}
