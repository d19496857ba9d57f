//! The proxy FIFO: a lock-free ring of fixed-size 16-byte triggers, many producers
//! (device threads pushing requests), one consumer (the host proxy).
//!
//! ## Trigger encoding
//!
//! A trigger is two u64 words, laid out as `device-src/include/commhal/handles.h`
//! specifies ([`crate::handles::RawTrigger`]):
//!
//! | word | bits | field |
//! |---|---|---|
//! | w0 | 0..32 | `size` (bytes, < 4 GiB) |
//! | w0 | 32..64 | `src_offset` (< 4 GiB) |
//! | w1 | 0..32 | `dst_offset` (< 4 GiB) |
//! | w1 | 32..41 | `src_memory` id (< 512) |
//! | w1 | 41..50 | `dst_memory` id (< 512) |
//! | w1 | 50..53 | `flags`: DATA (put) = 1, SIGNAL = 2, FLUSH = 4 |
//! | w1 | 53..63 | `semaphore` id (< 1024): selects the port and the peer's semaphore |
//! | w1 | 63 | valid: 1 = the slot holds a trigger |
//!
//! ## Protocol
//!
//! * `head` counts tickets handed out, `tail` counts tickets the consumer has finished.
//! * **push** (this crate's producers): read `head` = h and `tail` (Acquire); if
//!   `h - tail ≥ depth` the ring is full (back off, never drop); else claim ticket h
//!   with a compare-exchange on `head`. A claimed slot is always free, so a producer
//!   never waits after claiming and a timed-out push leaves nothing behind. Then store
//!   w0 (Relaxed) and w1 with the valid bit (Release) into slot `h mod depth`.
//!   (CUDA device code claims with a fetch-add and then waits for room; both kinds of
//!   producer can share a ring, since the compare-exchange never claims past room.)
//! * **pop** (single consumer): load w1 of slot `tail mod depth` (Acquire); no valid
//!   bit means "not yet written". After handling the trigger (for FLUSH: after the
//!   port's flush returned) the consumer zeroes w1 and stores `tail + 1` (Release) —
//!   which both frees the slot for the producer that will reuse it (the Acquire load
//!   of `tail` in push orders the reuse after the clear) and tells flushers that the
//!   ticket is complete.
//!
//! Tickets are consumed in ticket order, so the triggers of one producer are handled
//! in the order it pushed them.

use commhal_hal::{HalError, Result};

use crate::sync::{AtomicU64, Ordering, Word};

/// Trigger flag: copy `size` bytes.
pub const FLAG_DATA: u8 = 1;
/// Trigger flag: signal the peer's semaphore.
pub const FLAG_SIGNAL: u8 = 2;
/// Trigger flag: flush the port.
pub const FLAG_FLUSH: u8 = 4;

/// The valid bit of w1.
pub const VALID: u64 = 1 << 63;

/// Proxy status bit: a port error happened (the first one is stored by the proxy).
pub const STATUS_ERROR: u64 = 1;
/// Proxy status bit: the proxy stopped.
pub const STATUS_STOPPED: u64 = 2;

/// Largest memory id a trigger can carry + 1.
pub const MAX_MEMORIES: u32 = 1 << 9;
/// Largest semaphore id a trigger can carry + 1.
pub const MAX_SEMAPHORES: u32 = 1 << 10;
/// Largest offset or size a trigger can carry + 1.
pub const MAX_TRIGGER_BYTES: u64 = 1 << 32;

/// One request from device code to the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Trigger {
    /// `FLAG_DATA | FLAG_SIGNAL | FLAG_FLUSH` combination (non-zero).
    pub flags: u8,
    /// Proxy id of the destination memory (peer).
    pub dst_memory: u32,
    /// Proxy id of the source memory (local).
    pub src_memory: u32,
    /// Proxy semaphore id (port + peer semaphore).
    pub semaphore: u32,
    /// Destination offset.
    pub dst_offset: u64,
    /// Source offset.
    pub src_offset: u64,
    /// Bytes to copy (0 for pure signal/flush; a 0-byte put is a no-op copy).
    pub size: u64,
}

impl Trigger {
    /// A `put` trigger.
    pub fn put(sem: u32, dst: u32, dst_off: u64, src: u32, src_off: u64, size: u64) -> Self {
        Trigger {
            flags: FLAG_DATA,
            dst_memory: dst,
            src_memory: src,
            semaphore: sem,
            dst_offset: dst_off,
            src_offset: src_off,
            size,
        }
    }

    /// A pure `signal` trigger.
    pub fn signal(sem: u32) -> Self {
        Trigger {
            flags: FLAG_SIGNAL,
            semaphore: sem,
            ..Trigger::default()
        }
    }

    /// A pure `flush` trigger.
    pub fn flush(sem: u32) -> Self {
        Trigger {
            flags: FLAG_FLUSH,
            semaphore: sem,
            ..Trigger::default()
        }
    }

    /// Does the trigger copy data?
    pub fn has_data(&self) -> bool {
        self.flags & FLAG_DATA != 0
    }
    /// Does the trigger signal?
    pub fn has_signal(&self) -> bool {
        self.flags & FLAG_SIGNAL != 0
    }
    /// Does the trigger flush?
    pub fn has_flush(&self) -> bool {
        self.flags & FLAG_FLUSH != 0
    }

    /// Encode into the two FIFO words, checking every field fits.
    pub fn encode(&self) -> Result<[u64; 2]> {
        let fits = |what: &str, v: u64, max: u64| {
            if v < max {
                Ok(())
            } else {
                Err(HalError::invalid(format!(
                    "trigger {what} = {v} does not fit (must be < {max}): split the transfer or use fewer proxy ids"
                )))
            }
        };
        if self.flags == 0 || self.flags > 7 {
            return Err(HalError::invalid(format!(
                "trigger flags {:#x} must be a non-zero combination of DATA=1, SIGNAL=2, FLUSH=4",
                self.flags
            )));
        }
        fits("size", self.size, MAX_TRIGGER_BYTES)?;
        fits("dst offset", self.dst_offset, MAX_TRIGGER_BYTES)?;
        fits("src offset", self.src_offset, MAX_TRIGGER_BYTES)?;
        fits("dst memory id", self.dst_memory as u64, MAX_MEMORIES as u64)?;
        fits("src memory id", self.src_memory as u64, MAX_MEMORIES as u64)?;
        fits("semaphore id", self.semaphore as u64, MAX_SEMAPHORES as u64)?;
        let w0 = self.size | self.src_offset << 32;
        let w1 = self.dst_offset
            | (self.src_memory as u64) << 32
            | (self.dst_memory as u64) << 41
            | (self.flags as u64) << 50
            | (self.semaphore as u64) << 53
            | VALID;
        Ok([w0, w1])
    }

    /// Decode the two FIFO words.
    pub fn decode(w: [u64; 2]) -> Trigger {
        let [w0, w1] = w;
        Trigger {
            size: w0 & 0xffff_ffff,
            src_offset: w0 >> 32,
            dst_offset: w1 & 0xffff_ffff,
            src_memory: ((w1 >> 32) & 0x1ff) as u32,
            dst_memory: ((w1 >> 41) & 0x1ff) as u32,
            flags: ((w1 >> 50) & 0x7) as u8,
            semaphore: ((w1 >> 53) & 0x3ff) as u32,
        }
    }
}

/// Check a FIFO depth: a power of two ≥ 2.
pub fn check_depth(depth: u64) -> Result<()> {
    if depth < 2 || !depth.is_power_of_two() {
        return Err(HalError::invalid(format!(
            "FIFO depth {depth} must be a power of two and at least 2 (e.g. 512)"
        )));
    }
    Ok(())
}

/// Why a push did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PushRefused {
    /// Ring full: back off and retry.
    Full,
    /// The proxy reported an error or stopped (status bits).
    Status(u64),
}

/// One 16-byte ring slot: `[w0, w1]`, 16-byte aligned as the device header requires.
#[repr(C, align(16))]
#[derive(Debug)]
pub(crate) struct Slot<W>(pub(crate) [W; 2]);

/// The FIFO algorithm over any atomic words: shared by the owned [`Fifo`], the
/// device-handle executor and the loom models.
#[derive(Debug)]
pub(crate) struct Ring<'a, W: Word> {
    pub(crate) slots: &'a [Slot<W>],
    pub(crate) head: &'a W,
    pub(crate) tail: &'a W,
    /// Proxy status bits; absent for rings resolved from a bare device handle.
    pub(crate) status: Option<&'a W>,
    pub(crate) depth: u64,
}

impl<W: Word> Clone for Ring<'_, W> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<W: Word> Copy for Ring<'_, W> {}

impl<W: Word> Ring<'_, W> {
    /// Proxy status bits (0 when unknown).
    pub(crate) fn status(&self) -> u64 {
        self.status.map_or(0, |s| s.load(Ordering::Acquire))
    }

    fn slot(&self, ticket: u64) -> &Slot<W> {
        &self.slots[(ticket & (self.depth - 1)) as usize]
    }

    /// Producer: push if there is room; returns the ticket.
    pub(crate) fn try_push(&self, w: [u64; 2]) -> std::result::Result<u64, PushRefused> {
        loop {
            let status = self.status();
            if status != 0 {
                return Err(PushRefused::Status(status));
            }
            let h = self.head.load(Ordering::Relaxed);
            let t = self.tail.load(Ordering::Acquire);
            if (h.wrapping_sub(t) as i64) >= self.depth as i64 {
                return Err(PushRefused::Full);
            }
            if self
                .head
                .compare_exchange(h, h.wrapping_add(1), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                let s = self.slot(h);
                s.0[0].store(w[0], Ordering::Relaxed);
                s.0[1].store(w[1], Ordering::Release);
                return Ok(h);
            }
        }
    }

    /// Consumer: the next trigger in ticket order, if it has been written.
    pub(crate) fn peek(&self) -> Option<(u64, [u64; 2])> {
        let t = self.tail.load(Ordering::Relaxed); // only the consumer writes tail
        let s = self.slot(t);
        let w1 = s.0[1].load(Ordering::Acquire);
        if w1 & VALID == 0 {
            return None;
        }
        Some((t, [s.0[0].load(Ordering::Relaxed), w1]))
    }

    /// Consumer: the trigger returned by `peek` is handled; free its slot.
    pub(crate) fn complete(&self) {
        let t = self.tail.load(Ordering::Relaxed);
        self.slot(t).0[1].store(0, Ordering::Relaxed);
        self.tail.store(t.wrapping_add(1), Ordering::Release);
    }

    /// Has the consumer finished `ticket`?
    pub(crate) fn is_done(&self, ticket: u64) -> bool {
        crate::counter::reached(self.tail.load(Ordering::Acquire), ticket.wrapping_add(1))
    }
}

/// A FIFO that owns its ring (host memory). The proxy consumes it; producers push
/// through [`Fifo::try_push`] or a device handle.
#[derive(Debug)]
pub struct Fifo {
    slots: Box<[Slot<AtomicU64>]>,
    head: AtomicU64,
    tail: AtomicU64,
    status: AtomicU64,
    depth: u64,
}

impl Fifo {
    /// An empty FIFO of `depth` triggers (a power of two ≥ 2).
    pub fn new(depth: u64) -> Result<Fifo> {
        check_depth(depth)?;
        let slots = (0..depth)
            .map(|_| Slot([AtomicU64::new(0), AtomicU64::new(0)]))
            .collect();
        Ok(Fifo {
            slots,
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
            status: AtomicU64::new(0),
            depth,
        })
    }

    /// Number of trigger slots.
    pub fn depth(&self) -> u64 {
        self.depth
    }

    pub(crate) fn ring(&self) -> Ring<'_, AtomicU64> {
        Ring {
            slots: &self.slots,
            head: &self.head,
            tail: &self.tail,
            status: Some(&self.status),
            depth: self.depth,
        }
    }

    /// Push one trigger if there is room: `Ok(Some(ticket))`, `Ok(None)` when full,
    /// an error when the proxy stopped or failed.
    pub fn try_push(&self, t: &Trigger) -> Result<Option<u64>> {
        match self.ring().try_push(t.encode()?) {
            Ok(ticket) => Ok(Some(ticket)),
            Err(PushRefused::Full) => Ok(None),
            Err(PushRefused::Status(s)) => Err(status_error(s)),
        }
    }

    /// Consumer side: the next trigger and its ticket, if written. Call
    /// [`Fifo::complete`] after handling it. Only one thread may consume.
    pub fn peek(&self) -> Option<(u64, Trigger)> {
        self.ring().peek().map(|(t, w)| (t, Trigger::decode(w)))
    }

    /// Consumer side: the trigger from [`Fifo::peek`] is handled.
    pub fn complete(&self) {
        self.ring().complete()
    }

    /// Has the proxy finished `ticket`?
    pub fn is_done(&self, ticket: u64) -> bool {
        self.ring().is_done(ticket)
    }

    /// Proxy status bits ([`STATUS_ERROR`], [`STATUS_STOPPED`]).
    pub fn status(&self) -> u64 {
        self.status.load(Ordering::Acquire)
    }

    /// Set status bits (the proxy does this).
    pub fn set_status(&self, bits: u64) {
        self.status.fetch_or(bits, Ordering::AcqRel);
    }

    /// Host address of the ring (`PortChannelHandle::fifo`).
    #[cfg(not(loom))]
    pub fn ring_addr(&self) -> u64 {
        self.slots.as_ptr() as usize as u64
    }

    /// Host address of the head counter (`PortChannelHandle::head`).
    #[cfg(not(loom))]
    pub fn head_addr(&self) -> u64 {
        &self.head as *const AtomicU64 as usize as u64
    }

    /// Host address of the tail counter (`PortChannelHandle::tail`).
    #[cfg(not(loom))]
    pub fn tail_addr(&self) -> u64 {
        &self.tail as *const AtomicU64 as usize as u64
    }
}

/// The error for a refused push or wait, from the proxy status bits.
pub(crate) fn status_error(status: u64) -> HalError {
    if status & STATUS_ERROR != 0 {
        HalError::invalid(
            "the proxy reported a port error and stopped accepting triggers: see the proxy's error (ProxyService::error)",
        )
    } else {
        HalError::invalid(
            "the proxy service has stopped: keep the ProxyService alive while its channels are used",
        )
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn trigger_round_trip_and_limits() {
        let t = Trigger {
            flags: FLAG_DATA | FLAG_SIGNAL | FLAG_FLUSH,
            dst_memory: 511,
            src_memory: 3,
            semaphore: 1000,
            dst_offset: u32::MAX as u64,
            src_offset: 12345,
            size: 4099,
        };
        assert_eq!(Trigger::decode(t.encode().unwrap()), t);
        assert!(Trigger { size: 1 << 32, ..t }.encode().is_err());
        assert!(
            Trigger {
                dst_memory: 512,
                ..t
            }
            .encode()
            .is_err()
        );
        assert!(Trigger { flags: 0, ..t }.encode().is_err());
        assert_ne!(Trigger::flush(0).encode().unwrap()[1] & VALID, 0);
        // Same bits as the device header's make_trigger.
        let raw = crate::handles::RawTrigger::encode(&crate::handles::TriggerFields {
            kind: 7,
            dst_offset: u32::MAX,
            src_offset: 12345,
            len: 4099,
            dst_memory_id: 511,
            src_memory_id: 3,
            semaphore_id: 1023,
        })
        .unwrap();
        let t = Trigger {
            semaphore: 1023,
            ..t
        };
        assert_eq!(t.encode().unwrap(), [raw.w0, raw.w1]);
    }

    #[test]
    fn depth_must_be_power_of_two_at_least_two() {
        for bad in [0, 1, 3, 6, 100] {
            let e = Fifo::new(bad).unwrap_err().to_string();
            assert!(e.contains("power of two"), "{e}");
        }
        assert!(Fifo::new(2).is_ok());
        assert!(Fifo::new(512).is_ok());
    }

    #[test]
    fn full_ring_refuses_then_accepts_after_consume_and_wraps() {
        let f = Fifo::new(2).unwrap();
        let mut next = 0u64;
        for round in 0..50u64 {
            assert_eq!(f.try_push(&Trigger::signal(1)).unwrap(), Some(2 * round));
            assert_eq!(
                f.try_push(&Trigger::signal(2)).unwrap(),
                Some(2 * round + 1)
            );
            assert_eq!(f.try_push(&Trigger::signal(3)).unwrap(), None);
            for want in [1, 2] {
                let (ticket, t) = f.peek().unwrap();
                assert_eq!((ticket, t.semaphore), (next, want));
                assert!(!f.is_done(ticket));
                f.complete();
                assert!(f.is_done(ticket));
                next += 1;
            }
            assert!(f.peek().is_none());
        }
        f.set_status(STATUS_STOPPED);
        assert!(f.try_push(&Trigger::signal(1)).is_err());
    }
}
