//! [`Gate`]: a host-released stream wait, so queued work starts all at once.

use std::sync::Arc;

use crate::context::Context;
use crate::error::Result;
use crate::memop;
use crate::memory::PinnedHostBuffer;
use crate::stream::Stream;

/// A host-released gate: [`Gate::close`] queues a stream wait on a pinned host word,
/// [`Gate::open`] releases it. A timed loop queues every launch behind a closed gate,
/// so the GPU runs them back to back and events measure device time, not the host's
/// submission rate. Keep the queued work short (well under the driver's queue depth)
/// or the host blocks in a launch before it can open the gate.
#[derive(Debug)]
pub struct Gate {
    word: PinnedHostBuffer,
    value: u32,
    /// False when the driver lacks `cuStreamWaitValue32`: no gate, the launches are
    /// queued as the host submits them.
    usable: bool,
}

impl Gate {
    /// A gate on `ctx` (one pinned page).
    pub fn new(ctx: &Arc<Context>) -> Result<Gate> {
        Ok(Gate {
            word: PinnedHostBuffer::new(ctx, 64)?,
            value: 0,
            usable: crate::driver::symbol_present(memop::WAIT_VALUE32),
        })
    }

    /// Queue "wait until the word reaches the next value" on `stream` (nothing when
    /// the driver has no stream waits).
    pub fn close(&mut self, stream: &Stream) -> Result<()> {
        if !self.usable {
            return Ok(());
        }
        self.value = self.value.wrapping_add(1).max(1);
        // SAFETY: the word is pinned, device-mapped host memory owned by `self`, which
        // outlives the wait (the owner opens the gate and synchronises before drop);
        // the symbol exists (`usable`).
        unsafe { memop::wait_value32(stream, self.word.device_addr(), self.value) }
    }

    /// Release everything queued behind the last [`Gate::close`].
    pub fn open(&self) {
        let p = self.word.host_ptr() as *mut u32;
        // SAFETY: the buffer is 64 bytes, 4-byte aligned (page-aligned allocation), and
        // only this gate writes it; a volatile store makes it visible to the GPU's poll.
        unsafe { std::ptr::write_volatile(p, self.value) };
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }
}
