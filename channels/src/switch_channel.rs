//! [`SwitchChannel`]: reduce and broadcast through a multicast group
//! ([`commhal_hal::SwitchMapped`]), plus a group barrier.
//!
//! Contract (the `SwitchMapped` one): a `reduce` returns the element-wise reduction of
//! every member's buffer as of each member's last write before the group barrier; a
//! `broadcast` is visible in every member's buffer after the next group barrier. So
//! the pattern is: write → `barrier` → `reduce` / `broadcast` → `barrier` → read.
//!
//! **Barrier words.** The channel reserves the last [`SWITCH_RESERVED_BYTES`] of the
//! bound region: one u64 barrier counter per member at the same offset. Each barrier
//! round every member adds 1 (`Release`) to every member's counter and waits (bounded,
//! `Acquire`) until its own counter reaches `members × round`. The data area is the
//! rest ([`SwitchChannel::size`], also `SwitchChannelHandle::size`).
//!
//! **Host executor.** On host-emu the multicast address points at the backend's member
//! descriptor `[MCAST_MAGIC, n, len, base_0, …, base_{n-1}]` (every member's buffer as
//! mapped in this process); the executor reduces by reading every base and broadcasts by
//! storing to every base. It is used only when the transport is host-emu.

use std::sync::atomic::{AtomicU64, Ordering};

use commhal_hal::bootstrap::Bootstrap;
use commhal_hal::{HalError, Rank, Result, SwitchGroup, SwitchMapped};

use crate::handles::SwitchChannelHandle;
use crate::raw::HostView;
use crate::wait::WaitPolicy;

/// Bytes reserved at the end of the bound region for the barrier counter.
pub const SWITCH_RESERVED_BYTES: u64 = 64;

/// First word of host-emu's multicast descriptor ("HEMUMCST").
pub const HOST_EMU_MCAST_MAGIC: u64 = u64::from_le_bytes(*b"HEMUMCST");

/// An element type the switch can reduce.
pub trait Element: Copy + Send + Sync + PartialEq + std::fmt::Debug + 'static {
    /// Size in bytes.
    const BYTES: usize;
    /// Name for messages.
    const NAME: &'static str;
    /// Read one element from little-endian bytes (`b.len() == BYTES`).
    fn from_le(b: &[u8]) -> Self;
    /// Write one element as little-endian bytes.
    fn to_le(self, b: &mut [u8]);
    /// Combine two elements.
    fn combine(op: ReduceOp, a: Self, b: Self) -> Self;
}

/// A reduction operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum (integers wrap).
    Sum,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
}

macro_rules! int_element {
    ($($t:ty),*) => {$(
        impl Element for $t {
            const BYTES: usize = std::mem::size_of::<$t>();
            const NAME: &'static str = stringify!($t);
            fn from_le(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(b);
                <$t>::from_le_bytes(a)
            }
            fn to_le(self, b: &mut [u8]) {
                b.copy_from_slice(&self.to_le_bytes());
            }
            fn combine(op: ReduceOp, a: Self, b: Self) -> Self {
                match op {
                    ReduceOp::Sum => a.wrapping_add(b),
                    ReduceOp::Min => a.min(b),
                    ReduceOp::Max => a.max(b),
                }
            }
        }
    )*};
}
int_element!(i32, u32, i64, u64);

macro_rules! float_element {
    ($($t:ty),*) => {$(
        impl Element for $t {
            const BYTES: usize = std::mem::size_of::<$t>();
            const NAME: &'static str = stringify!($t);
            fn from_le(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(b);
                <$t>::from_le_bytes(a)
            }
            fn to_le(self, b: &mut [u8]) {
                b.copy_from_slice(&self.to_le_bytes());
            }
            fn combine(op: ReduceOp, a: Self, b: Self) -> Self {
                match op {
                    ReduceOp::Sum => a + b,
                    ReduceOp::Min => a.min(b),
                    ReduceOp::Max => a.max(b),
                }
            }
        }
    )*};
}
float_element!(f32, f64);

/// Executor of the switch device functions (host-emu): every member's buffer, mapped.
#[derive(Debug)]
pub struct SwitchDevice<'a> {
    members: Vec<HostView<'a>>,
    me: usize,
    size: u64,
    barrier_off: u64,
    rounds: &'a AtomicU64,
    policy: WaitPolicy,
}

impl SwitchDevice<'_> {
    fn check<T: Element>(&self, what: &str, off: u64, count: u64) -> Result<u64> {
        let bytes = count.checked_mul(T::BYTES as u64).ok_or_else(|| {
            HalError::invalid(format!("{what}: {count} elements of {} overflow", T::NAME))
        })?;
        commhal_hal::error::check_range(what, off, bytes, self.size)?;
        commhal_hal::error::check_aligned(
            format_args!("{what} offset for {}", T::NAME),
            off,
            T::BYTES as u64,
        )?;
        Ok(bytes)
    }

    /// Reduce `out.len()` elements at `off` across every member into `out`
    /// (members folded in group order).
    pub fn reduce<T: Element>(&self, op: ReduceOp, off: u64, out: &mut [T]) -> Result<()> {
        self.check::<T>("switch reduce", off, out.len() as u64)?;
        let mut buf = [0u8; 512];
        let per = 512 / T::BYTES;
        for (c, chunk) in out.chunks_mut(per).enumerate() {
            let at = off + (c * per * T::BYTES) as u64;
            let bytes = &mut buf[..chunk.len() * T::BYTES];
            for (m, view) in self.members.iter().enumerate() {
                view.read(at, bytes)?;
                for (x, b) in chunk.iter_mut().zip(bytes.chunks_exact(T::BYTES)) {
                    let v = T::from_le(b);
                    *x = if m == 0 { v } else { T::combine(op, *x, v) };
                }
            }
        }
        Ok(())
    }

    /// Reduce this thread's share of `count` elements at `src_off` across every member
    /// and store the result at `dst_off` of this member's own buffer.
    #[allow(clippy::too_many_arguments)]
    pub fn reduce_to_local<T: Element>(
        &self,
        op: ReduceOp,
        dst_off: u64,
        src_off: u64,
        count: u64,
        tid: u32,
        nthreads: u32,
    ) -> Result<()> {
        self.check::<T>("switch reduce destination", dst_off, count)?;
        self.each_share::<T>(op, src_off, count, tid, nthreads, |at, bytes| {
            self.members[self.me].write(dst_off + (at - src_off), bytes)
        })
    }

    /// Reduce this thread's share of `count` elements at `off` and broadcast the result
    /// to `off` in every member (the switch all-reduce step).
    pub fn all_reduce<T: Element>(
        &self,
        op: ReduceOp,
        off: u64,
        count: u64,
        tid: u32,
        nthreads: u32,
    ) -> Result<()> {
        self.each_share::<T>(op, off, count, tid, nthreads, |at, bytes| {
            self.members.iter().try_for_each(|m| m.write(at, bytes))
        })
    }

    fn each_share<T: Element>(
        &self,
        op: ReduceOp,
        off: u64,
        count: u64,
        tid: u32,
        nthreads: u32,
        mut sink: impl FnMut(u64, &[u8]) -> Result<()>,
    ) -> Result<()> {
        self.check::<T>("switch reduce source", off, count)?;
        let (first, n) = crate::device::share(count, 16, tid, nthreads)?;
        let per = (512 / T::BYTES) as u64;
        let mut vals = vec![T::from_le(&[0u8; 8][..T::BYTES]); per as usize];
        let mut bytes = [0u8; 512];
        let mut i = first;
        while i < first + n {
            let k = (first + n - i).min(per);
            let at = off + i * T::BYTES as u64;
            self.reduce(op, at, &mut vals[..k as usize])?;
            let b = &mut bytes[..k as usize * T::BYTES];
            for (v, dst) in vals.iter().zip(b.chunks_exact_mut(T::BYTES)) {
                v.to_le(dst);
            }
            sink(at, b)?;
            i += k;
        }
        Ok(())
    }

    /// Copy this thread's share of `bytes` from `src_off` of our own buffer to `dst_off`
    /// of every member's buffer (own included).
    pub fn broadcast(
        &self,
        dst_off: u64,
        src_off: u64,
        bytes: u64,
        tid: u32,
        nthreads: u32,
    ) -> Result<()> {
        commhal_hal::error::check_range("switch broadcast destination", dst_off, bytes, self.size)?;
        commhal_hal::error::check_range("switch broadcast source", src_off, bytes, self.size)?;
        let (s, n) = crate::device::share(bytes, 64, tid, nthreads)?;
        let me = &self.members[self.me];
        for (i, m) in self.members.iter().enumerate() {
            if i != self.me {
                HostView::copy(m, dst_off + s, me, src_off + s, n)?;
            }
        }
        // Own copy last, so an in-place broadcast (dst == src) reads the source first.
        HostView::copy(me, dst_off + s, me, src_off + s, n)
    }

    /// Group barrier (one thread per member): returns once every member has entered
    /// this round; writes before it are visible to every member after it.
    pub fn barrier(&self) -> Result<()> {
        let round = self.rounds.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        for m in &self.members {
            m.word(self.barrier_off)?.fetch_add(1, Ordering::Release);
        }
        let own = self.members[self.me].word(self.barrier_off)?;
        let target = round.wrapping_mul(self.members.len() as u64);
        self.policy.wait_until(
            || {
                format!(
                    "switch barrier round {round}: {} of {target} arrivals; is every member calling barrier?",
                    own.load(Ordering::Relaxed)
                )
            },
            || Ok(crate::counter::reached(own.load(Ordering::Acquire), target)),
        )
    }

    /// Read bytes of our own buffer.
    pub fn read_local(&self, off: u64, out: &mut [u8]) -> Result<()> {
        commhal_hal::error::check_range("switch local read", off, out.len() as u64, self.size)?;
        self.members[self.me].read(off, out)
    }

    /// Write bytes into our own buffer.
    pub fn write_local(&self, off: u64, data: &[u8]) -> Result<()> {
        commhal_hal::error::check_range("switch local write", off, data.len() as u64, self.size)?;
        self.members[self.me].write(off, data)
    }
}

/// One member's switch channel.
#[derive(Debug)]
pub struct SwitchChannel<S: SwitchMapped> {
    group: S::Group,
    host_emu: bool,
    size: u64,
    barrier_off: u64,
    rounds: AtomicU64,
    policy: WaitPolicy,
}

impl<S: SwitchMapped> SwitchChannel<S> {
    /// Create the group (every member calls this with the same `members` and `tag`)
    /// binding `size` data bytes plus [`SWITCH_RESERVED_BYTES`] for the barrier.
    pub fn create(
        transport: &S,
        bootstrap: &dyn Bootstrap,
        members: &[Rank],
        size: u64,
        tag: u64,
    ) -> Result<Self> {
        let len = size
            .div_ceil(8)
            .checked_mul(8)
            .and_then(|v| v.checked_add(SWITCH_RESERVED_BYTES))
            .ok_or_else(|| HalError::invalid(format!("switch channel size {size} is too large")))?;
        let group = transport.create_group(bootstrap, members, len, tag)?;
        Self::new(transport, group)
    }

    /// Wrap an existing group. Its last [`SWITCH_RESERVED_BYTES`] become the barrier
    /// area; the group must bind more than that.
    pub fn new(transport: &S, group: S::Group) -> Result<Self> {
        let len = group.unicast().len();
        if len <= SWITCH_RESERVED_BYTES {
            return Err(HalError::invalid(format!(
                "switch group binds {len} bytes; a switch channel needs more than {SWITCH_RESERVED_BYTES} (barrier area)"
            )));
        }
        let barrier_off = (len - SWITCH_RESERVED_BYTES).div_ceil(8) * 8;
        Ok(SwitchChannel {
            host_emu: transport.name() == "host-emu",
            group,
            size: len - SWITCH_RESERVED_BYTES,
            barrier_off,
            rounds: AtomicU64::new(0),
            policy: WaitPolicy::default(),
        })
    }

    /// Set how barrier waits spin and time out.
    pub fn set_policy(&mut self, policy: WaitPolicy) {
        self.policy = policy;
    }

    /// Data bytes usable by reduce/broadcast.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The group.
    pub fn group(&self) -> &S::Group {
        &self.group
    }

    /// The `#[repr(C)]` handle for device code. Valid while `self` lives.
    pub fn device_handle(&self) -> SwitchChannelHandle {
        SwitchChannelHandle {
            multicast: self.group.multicast_addr(),
            unicast: self.group.unicast().addr(),
            size: self.size,
        }
    }

    /// The host executor (host-emu groups only).
    pub fn device(&self) -> Result<SwitchDevice<'_>> {
        if !self.host_emu {
            return Err(HalError::invalid(
                "the host switch executor understands host-emu multicast groups only: run switch operations in device code for this backend",
            ));
        }
        let unicast = HostView::of(self.group.unicast(), "switch unicast buffer")?;
        // SAFETY: on host-emu, multicast_addr points at the group's descriptor, owned
        // by the group (alive while `self` is): a header of 3 words, then one word per
        // member. We read the header first, then view exactly that many words.
        let header =
            unsafe { HostView::from_raw(self.group.multicast_addr(), 24, "multicast descriptor") }?;
        let h = header.words(0, 3)?;
        let (magic, n, len) = (
            h[0].load(Ordering::Relaxed),
            h[1].load(Ordering::Relaxed),
            h[2].load(Ordering::Relaxed),
        );
        if magic != HOST_EMU_MCAST_MAGIC || n == 0 || n > 1 << 16 || len != unicast.len() {
            return Err(HalError::invalid(
                "multicast descriptor is not host-emu's (bad magic, member count or length)",
            ));
        }
        // SAFETY: as above — the descriptor has 3 + n words.
        let desc = unsafe {
            HostView::from_raw(
                self.group.multicast_addr(),
                24 + 8 * n,
                "multicast descriptor",
            )
        }?;
        let words = desc.words(24, n)?;
        let mut members = Vec::with_capacity(n as usize);
        let mut me = None;
        for (i, w) in words.iter().enumerate() {
            let base = w.load(Ordering::Relaxed);
            if base == unicast.addr() {
                me = Some(i);
            }
            // SAFETY: host-emu's descriptor lists every member's buffer of `len` bytes
            // as mapped in this process; the group keeps the mappings alive.
            members.push(unsafe { HostView::from_raw(base, len, "switch member buffer") }?);
        }
        let me = me.ok_or_else(|| {
            HalError::invalid("our unicast buffer is not in the group's multicast descriptor")
        })?;
        Ok(SwitchDevice {
            members,
            me,
            size: self.size,
            barrier_off: self.barrier_off,
            rounds: &self.rounds,
            policy: self.policy,
        })
    }

    /// See [`SwitchDevice::reduce`].
    pub fn reduce<T: Element>(&self, op: ReduceOp, off: u64, out: &mut [T]) -> Result<()> {
        self.device()?.reduce(op, off, out)
    }

    /// See [`SwitchDevice::broadcast`] (one thread).
    pub fn broadcast(&self, dst_off: u64, src_off: u64, bytes: u64) -> Result<()> {
        self.device()?.broadcast(dst_off, src_off, bytes, 0, 1)
    }

    /// See [`SwitchDevice::all_reduce`] (one thread).
    pub fn all_reduce<T: Element>(&self, op: ReduceOp, off: u64, count: u64) -> Result<()> {
        self.device()?.all_reduce::<T>(op, off, count, 0, 1)
    }

    /// See [`SwitchDevice::barrier`].
    pub fn barrier(&self) -> Result<()> {
        self.device()?.barrier()
    }

    /// Write bytes into our own buffer.
    pub fn write_local(&self, off: u64, data: &[u8]) -> Result<()> {
        self.device()?.write_local(off, data)
    }

    /// Read bytes of our own buffer.
    pub fn read_local(&self, off: u64, out: &mut [u8]) -> Result<()> {
        self.device()?.read_local(off, out)
    }
}
