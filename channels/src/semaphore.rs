//! Semaphores: monotonic 64-bit counters in registered memory (MSCCL++ semantics).
//!
//! A semaphore is a u64 *inbound counter* (8 bytes, 8-byte aligned) in the waiter's
//! registered memory. The peer (through its mapping of our memory, or its proxy through a
//! port) adds 1 per signal. The waiter keeps `expected` — the number of signals it has
//! consumed, host-side in the channel and copied into device handles — and a wait
//! succeeds once the counter has reached `expected + 1`, then advances `expected`.
//!
//! **Ordering.** `signal` is a `fetch_add(1, Release)` on the peer's counter; `wait` and
//! `poll` load the counter with `Acquire`. So everything the signalling thread wrote
//! before `signal` is visible to the thread whose `wait` returned (and, through the
//! release sequence of the read-modify-writes, this holds for every signaller of the
//! counter). `relaxed_signal` / `relaxed_wait` use `Relaxed` and order nothing but the
//! counter itself. Work done by *other* threads before the signal is covered only if
//! those threads synchronised with the signalling thread first (a block barrier) —
//! the caller's job, as on a GPU.
//!
//! **Counting.** Counters compare wrap-safely ([`reached`]), so a counter starting near
//! 2^64 keeps working. A successful wait consumes exactly one signal by a
//! compare-exchange on `expected`, so concurrent waiters never consume the same signal,
//! and a timed-out wait consumes nothing (the semaphore stays usable).
//!
//! **Blocking.** Waits block as their [`WaitPolicy`] says; with `futex: true` they
//! sleep in `FUTEX_WAIT` on the counter, and `signal` / `relaxed_signal` of a semaphore
//! whose policy has `futex: true` wake them after the add ([`wake_sleepers`]). Give
//! both ends the same policy (a sleeper whose signaller does not wake it still sees
//! the signal, one [`crate::wait::FUTEX_SLICE`] late).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64};

use commhal_hal::bootstrap::{Bootstrap, recv_export, send_export};
use commhal_hal::error::{check_aligned, check_range};
use commhal_hal::{Device, HalError, MemoryMapped, Rank, Region, Result};

use crate::handles::error_code;
use crate::raw::HostView;
use crate::sync::Ordering;
use crate::wait::{WaitPolicy, wake_sleepers};

pub use crate::counter::reached;
use crate::counter::{signal_word, try_consume};

/// Bytes of one semaphore counter.
pub const SEMAPHORE_BYTES: u64 = 8;

/// Record `code` in a device error flag unless an error is already there.
pub(crate) fn set_error_once(flag: Option<&AtomicU32>, code: u32) {
    if let Some(f) = flag {
        let _ = f.compare_exchange(0, code, Ordering::AcqRel, Ordering::Relaxed);
    }
}

/// A semaphore resolved to host atomics: the executor of the semaphore device
/// functions. Get one from [`MemorySemaphore::device`] / [`SemaphoreSlot::device`].
#[derive(Debug, Clone, Copy)]
pub struct SemaphoreDevice<'a> {
    inbound: &'a AtomicU64,
    expected: &'a AtomicU64,
    remote: Option<&'a AtomicU64>,
    error_flag: Option<&'a AtomicU32>,
    policy: WaitPolicy,
}

impl<'a> SemaphoreDevice<'a> {
    pub(crate) fn new(
        inbound: &'a AtomicU64,
        expected: &'a AtomicU64,
        remote: Option<&'a AtomicU64>,
        error_flag: Option<&'a AtomicU32>,
        policy: WaitPolicy,
    ) -> Self {
        SemaphoreDevice {
            inbound,
            expected,
            remote,
            error_flag,
            policy,
        }
    }

    pub(crate) fn with_error_flag(mut self, flag: Option<&'a AtomicU32>) -> Self {
        self.error_flag = flag;
        self
    }

    fn remote(&self) -> Result<&'a AtomicU64> {
        self.remote.ok_or_else(|| {
            HalError::invalid(
                "this semaphore has no peer counter (port channels signal through the proxy)",
            )
        })
    }

    /// Add 1 to the peer's counter with `Release`: earlier writes of this thread are
    /// visible to the peer once its wait returns.
    pub fn signal(&self) -> Result<()> {
        let remote = self.remote()?;
        signal_word(remote, Ordering::Release);
        if self.policy.futex {
            wake_sleepers(remote, None);
        }
        Ok(())
    }

    /// Add 1 to the peer's counter with `Relaxed`: orders nothing else.
    pub fn relaxed_signal(&self) -> Result<()> {
        let remote = self.remote()?;
        signal_word(remote, Ordering::Relaxed);
        if self.policy.futex {
            wake_sleepers(remote, None);
        }
        Ok(())
    }

    /// Consume one signal if available (`Acquire`); never blocks.
    pub fn poll(&self) -> bool {
        try_consume(self.inbound, self.expected, Ordering::Acquire)
    }

    /// Wait (bounded by the policy) for one signal, with `Acquire`.
    pub fn wait(&self) -> Result<()> {
        self.wait_with(Ordering::Acquire, "semaphore wait")
    }

    /// Wait (bounded) for one signal with `Relaxed`: orders execution only.
    pub fn relaxed_wait(&self) -> Result<()> {
        self.wait_with(Ordering::Relaxed, "semaphore relaxed wait")
    }

    fn wait_with(&self, order: Ordering, what: &str) -> Result<()> {
        let r = self.policy.wait_on(
            self.inbound,
            None,
            || {
                let e = self.expected.load(Ordering::Relaxed);
                format!(
                    "{what}: counter is {} but signal #{} was expected; is the peer alive and signalling this channel?",
                    self.inbound.load(Ordering::Relaxed),
                    e.wrapping_add(1),
                )
            },
            |_| try_consume(self.inbound, self.expected, order),
        );
        if r.is_err() {
            set_error_once(self.error_flag, error_code::WAIT_TIMEOUT);
        }
        r
    }

    /// Current value of the local inbound counter (diagnostics).
    pub fn inbound_value(&self) -> u64 {
        self.inbound.load(Ordering::Acquire)
    }

    /// Number of signals consumed so far (the expected value).
    pub fn expected_value(&self) -> u64 {
        self.expected.load(Ordering::Relaxed)
    }
}

fn check_counter(region: &dyn Region, off: u64, what: &str) -> Result<()> {
    check_range(what, off, SEMAPHORE_BYTES, region.len())?;
    let at = region.addr().wrapping_add(off);
    check_aligned(format_args!("{what} address (offset {off})"), at, 8)
}

/// The waiting half of a semaphore: our inbound counter (8 bytes of registered memory
/// that a peer signals through a mapping or a port) and the count consumed so far.
#[derive(Debug)]
pub struct SemaphoreSlot {
    region: Arc<dyn Region>,
    off: u64,
    expected: AtomicU64,
    policy: WaitPolicy,
}

impl SemaphoreSlot {
    /// The counter at `region + off` (8-byte aligned, inside the region), expecting
    /// signals from 0 on (fresh, zeroed memory).
    pub fn new(region: Arc<dyn Region>, off: u64) -> Result<Self> {
        Self::with_expected(region, off, 0)
    }

    /// As [`SemaphoreSlot::new`], but `expected` signals are taken as already consumed:
    /// for a counter that is reused (pass its current value, read while no signal can
    /// be in flight) or deliberately started elsewhere (e.g. near 2^64).
    pub fn with_expected(region: Arc<dyn Region>, off: u64, expected: u64) -> Result<Self> {
        check_counter(region.as_ref(), off, "semaphore counter")?;
        Ok(SemaphoreSlot {
            region,
            off,
            expected: AtomicU64::new(expected),
            policy: WaitPolicy::default(),
        })
    }

    /// Set how waits spin and time out.
    pub fn set_policy(&mut self, policy: WaitPolicy) {
        self.policy = policy;
    }

    /// The wait policy in use.
    pub fn policy(&self) -> WaitPolicy {
        self.policy
    }

    /// The region holding the counter (register it with the port so the peer can signal).
    pub fn region(&self) -> &Arc<dyn Region> {
        &self.region
    }

    /// Offset of the counter in [`SemaphoreSlot::region`].
    pub fn offset(&self) -> u64 {
        self.off
    }

    /// Device address of the counter (for handles).
    pub fn counter_addr(&self) -> u64 {
        self.region.addr() + self.off
    }

    /// Signals consumed so far (copied into handles as `expected`).
    pub fn expected(&self) -> u64 {
        self.expected.load(Ordering::Relaxed)
    }

    /// Host executor view (fails for device memory).
    pub fn device(&self) -> Result<SemaphoreDevice<'_>> {
        let v = HostView::of(self.region.as_ref(), "semaphore counter")?;
        Ok(SemaphoreDevice::new(
            v.word(self.off)?,
            &self.expected,
            None,
            None,
            self.policy,
        ))
    }

    /// See [`SemaphoreDevice::wait`].
    pub fn wait(&self) -> Result<()> {
        self.device()?.wait()
    }

    /// See [`SemaphoreDevice::poll`].
    pub fn poll(&self) -> Result<bool> {
        Ok(self.device()?.poll())
    }
}

/// A device-to-device semaphore of a memory channel: our counter (the peer signals it
/// through its mapping) plus the peer's counter mapped here (we signal it).
#[derive(Debug)]
pub struct MemorySemaphore {
    slot: SemaphoreSlot,
    remote: Arc<dyn Region>,
    remote_off: u64,
}

impl MemorySemaphore {
    /// From our counter at `local + local_off` and the peer's counter mapped at
    /// `remote + remote_off`. Both must be 8-byte aligned and inside their regions.
    pub fn new(
        local: Arc<dyn Region>,
        local_off: u64,
        remote: Arc<dyn Region>,
        remote_off: u64,
    ) -> Result<Self> {
        Self::from_slot(SemaphoreSlot::new(local, local_off)?, remote, remote_off)
    }

    /// From an inbound slot built by the caller (e.g. [`SemaphoreSlot::with_expected`]
    /// for a counter that does not start at 0) and the peer's counter mapped at
    /// `remote + remote_off`.
    pub fn from_slot(
        slot: SemaphoreSlot,
        remote: Arc<dyn Region>,
        remote_off: u64,
    ) -> Result<Self> {
        check_counter(remote.as_ref(), remote_off, "peer semaphore counter")?;
        Ok(MemorySemaphore {
            slot,
            remote,
            remote_off,
        })
    }

    /// Set up a semaphore with `peer`: allocate an 8-byte counter on `device`, exchange
    /// exports through `bootstrap` under `tag` (both ranks call this with the same tag)
    /// and map the peer's counter.
    pub fn connect<M: MemoryMapped>(
        transport: &M,
        bootstrap: &dyn Bootstrap,
        peer: Rank,
        tag: u64,
        device: Device,
    ) -> Result<Self> {
        let local = transport.alloc(device, SEMAPHORE_BYTES)?;
        send_export(bootstrap, peer, tag, &transport.export(&local)?)?;
        let remote = transport.map(recv_export(bootstrap, peer, tag)?)?;
        MemorySemaphore::new(Arc::new(local), 0, Arc::new(remote), 0)
    }

    /// Set how waits spin and time out.
    pub fn set_policy(&mut self, policy: WaitPolicy) {
        self.slot.set_policy(policy);
    }

    /// The wait policy in use.
    pub fn policy(&self) -> WaitPolicy {
        self.slot.policy
    }

    /// Our half (counter + consumed count).
    pub fn slot(&self) -> &SemaphoreSlot {
        &self.slot
    }

    /// Device address of the peer's counter as mapped here.
    pub fn remote_counter_addr(&self) -> u64 {
        self.remote.addr() + self.remote_off
    }

    /// Host executor view (fails for device memory).
    pub fn device(&self) -> Result<SemaphoreDevice<'_>> {
        let local = HostView::of(self.slot.region.as_ref(), "semaphore counter")?;
        let remote = HostView::of(self.remote.as_ref(), "peer semaphore counter")?;
        Ok(SemaphoreDevice::new(
            local.word(self.slot.off)?,
            &self.slot.expected,
            Some(remote.word(self.remote_off)?),
            None,
            self.slot.policy,
        ))
    }

    /// See [`SemaphoreDevice::signal`].
    pub fn signal(&self) -> Result<()> {
        self.device()?.signal()
    }

    /// See [`SemaphoreDevice::relaxed_signal`].
    pub fn relaxed_signal(&self) -> Result<()> {
        self.device()?.relaxed_signal()
    }

    /// See [`SemaphoreDevice::wait`].
    pub fn wait(&self) -> Result<()> {
        self.device()?.wait()
    }

    /// See [`SemaphoreDevice::relaxed_wait`].
    pub fn relaxed_wait(&self) -> Result<()> {
        self.device()?.relaxed_wait()
    }

    /// See [`SemaphoreDevice::poll`].
    pub fn poll(&self) -> Result<bool> {
        Ok(self.device()?.poll())
    }
}
