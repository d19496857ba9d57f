//! Cross-rank synchronisation in shared memory: semaphores and the packet doorbell.
//!
//! Every rank owns one *sync region* (registered memory every peer maps):
//!
//! | bytes | what |
//! |---|---|
//! | `0..8` | doorbell counter: bumped after every packet write into this rank |
//! | `8..16` | number of this rank's threads asleep on the doorbell |
//! | `16..24` | doorbell count the sleeper needs before it is worth waking |
//! | `64 + 16·slot` | semaphore `slot`: inbound counter `u64`, sleeping waiters `u64` |
//!
//! `slot = (src · KINDS + kind) · MAX_TAGS + tag` for the plan's semaphore key
//! `(src → this rank, channel kind, tag)`; kind `KIND_PACKETS` counts LL packet writes
//! that arrived over a port from a far peer (tag = the sender's block).
//!
//! **Far peers** (another node, see [`super::port`]): their regions are not mapped here;
//! a signal to one is a port signal on the same word of its region, applied by its
//! host-tcp receiver thread, which also wakes sleepers (futex) on the word, or by the
//! peer's NIC (ib-verbs: an RDMA atomic), which wakes nobody: then the communicator's
//! waits sleep in short slices instead of on the futex (`WaitPolicy::futex` off).
//!
//! **Signal** = `fetch_add(1)` on the counter in the *peer's* region (SeqCst, so a
//! release), then [`wake_sleepers`] (`FUTEX_WAKE` on the counter's low 32 bits if a
//! waiter sleeps there). **Wait** = [`WaitPolicy::wait_on`] (channels crate, the one
//! counter wait of the stack): spin on the counter (acquire) for the policy's
//! `spin_for`, yield for `yield_for`, then announce itself in the waiters word and
//! `FUTEX_WAIT` on the counter's low 32 bits in bounded slices until the signal
//! arrives or the policy's `timeout` passes. The SeqCst
//! increment/load pairs (waiter: waiters++ then counter load; signaller: counter++ then
//! waiters load) ensure that either the waiter sees the signal or the signaller sees the
//! waiter and wakes it. Counters are compared wrap-safely
//! ([`commhal_channels::counter::reached`]) and consumed one signal at a time.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use commhal_channels::WaitPolicy;
use commhal_channels::counter::reached;
use commhal_channels::wait::wake_sleepers;
use commhal_hal::{AbortFlag, HalError};

use super::port::{PortBuf, Ports};
use super::raw::{self, Span};
use crate::comm::CommError;
use crate::plan::ChannelKind;

/// Semaphore kinds: the plan's three channel kinds, the point-to-point protocol, and
/// packet writes from far peers.
pub(crate) const KINDS: usize = 5;
/// Kind index of the send/recv protocol's semaphores.
pub(crate) const KIND_P2P: usize = 3;
/// Kind index of the counters of LL packet writes from far peers (tag: sender block).
pub(crate) const KIND_PACKETS: usize = 4;
/// P2P-kind tag of the progress signals of one-way packet receivers
/// ([`SyncTable::await_credit`]; 0-1 send/recv, 2 the entry handshake, 3 the farewell).
pub(crate) const CREDIT_TAG: u32 = 4;
/// Tags per (peer, kind) a plan may use.
pub const MAX_TAGS: usize = 64;
/// First semaphore byte.
const SLOTS_AT: usize = 64;

/// Bytes of a sync region for `n` ranks.
pub(crate) fn region_bytes(n: u32) -> u64 {
    (SLOTS_AT + n as usize * KINDS * MAX_TAGS * 16) as u64
}

pub(crate) fn kind_index(k: ChannelKind) -> usize {
    match k {
        ChannelKind::Memory => 0,
        ChannelKind::Port => 1,
        ChannelKind::Switch => 2,
    }
}

/// What every wait of a communicator polls besides its condition: the communicator's
/// own abort flag ([`crate::comm::AbortHandle`]) and the bootstrap's peer-failure
/// flag (raised when a peer's bootstrap connection closes, i.e. at once when its
/// process dies). A raised flag ends a wait within one blocking slice
/// ([`commhal_channels::wait::FUTEX_SLICE`]) with an error naming the dead rank.
#[derive(Debug, Clone, Default)]
pub(crate) struct Stop {
    pub(crate) local: Arc<AbortFlag>,
    pub(crate) peers: Option<Arc<AbortFlag>>,
}

impl Stop {
    /// Whether a wait must give up (two relaxed loads).
    #[inline]
    pub(crate) fn is_set(&self) -> bool {
        self.local.is_set() || self.peers.as_ref().is_some_and(|p| p.is_set())
    }

    /// The reason to give up, as an error (this rank's abort first).
    pub(crate) fn check(&self) -> Result<(), HalError> {
        self.local.check()?;
        if let Some(p) = &self.peers {
            p.check()?;
        }
        Ok(())
    }
}

/// One rank's view of every rank's sync region.
#[derive(Debug)]
pub(crate) struct SyncTable {
    me: u32,
    /// Sync region of every rank as mapped here (own region at `me`).
    regions: Vec<Span>,
    /// Signals consumed so far, per local slot.
    expected: Vec<AtomicU64>,
    /// Per peer: invocations in which this rank wrote packets into it one way.
    credit_calls: Vec<AtomicU64>,
    /// How every wait of this rank spins, blocks and times out.
    pub(crate) tuning: WaitPolicy,
    /// Ports to far peers (`None`: every rank is on this node).
    pub(crate) ports: Option<Arc<Ports>>,
    /// Every far peer's sync region as a port target (`None` for near ranks).
    remote: Vec<Option<Arc<dyn std::any::Any + Send + Sync>>>,
    /// When waits give up early.
    pub(crate) stop: Stop,
}

impl SyncTable {
    /// `areas`: every rank's sync region as reached from here (far peers: port only).
    pub(crate) fn new(
        me: u32,
        areas: &[super::port::Area],
        tuning: WaitPolicy,
        ports: Option<Arc<Ports>>,
        stop: Stop,
    ) -> SyncTable {
        let n = areas.len();
        SyncTable {
            me,
            regions: areas
                .iter()
                .map(|a| a.span.unwrap_or(Span::EMPTY))
                .collect(),
            expected: (0..n * KINDS * MAX_TAGS)
                .map(|_| AtomicU64::new(0))
                .collect(),
            credit_calls: (0..n).map(|_| AtomicU64::new(0)).collect(),
            tuning,
            remote: areas
                .iter()
                .map(|a| match a.port.as_ref().map(|p| &p.buf) {
                    Some(PortBuf::Remote(r)) if a.span.is_none() => Some(r.clone()),
                    _ => None,
                })
                .collect(),
            ports,
            stop,
        }
    }

    /// True when `rank` is on another node (reached by port only).
    #[inline]
    pub(crate) fn is_far(&self, rank: u32) -> bool {
        self.ports.as_ref().is_some_and(|p| p.is_far(rank))
    }

    fn slot(src: u32, kind: usize, tag: u32) -> usize {
        (src as usize * KINDS + kind) * MAX_TAGS + tag as usize
    }

    fn sem(&self, owner: u32, slot: usize) -> (&AtomicU64, &AtomicU64) {
        let at = SLOTS_AT + slot * 16;
        let w = raw::words(
            self.regions[owner as usize]
                .sub(at, 16)
                .unwrap_or(Span::EMPTY),
        );
        (&w[0], &w[1])
    }

    fn doorbell(&self, owner: u32) -> (&AtomicU64, &AtomicU64, &AtomicU64) {
        let w = raw::words(
            self.regions[owner as usize]
                .sub(0, 24)
                .unwrap_or(Span::EMPTY),
        );
        (&w[0], &w[1], &w[2])
    }

    /// Signal `(me → peer, kind, tag)`: everything this thread wrote before is visible to
    /// the peer once its matching wait returns.
    /// To a far peer this is a port signal (ordered after this rank's earlier port
    /// writes to it).
    pub(crate) fn signal(&self, peer: u32, kind: usize, tag: u32) -> Result<(), CommError> {
        if let (Some(ports), Some((sem, off))) = (&self.ports, self.far_sem(peer, kind, tag)) {
            return ports.signal(peer, sem, off);
        }
        let (counter, waiters) = self.sem(peer, Self::slot(self.me, kind, tag));
        counter.fetch_add(1, Ordering::SeqCst);
        wake_sleepers(counter, Some(waiters));
        Ok(())
    }

    /// Where a signal `(me → peer, kind, tag)` goes over the port when `peer` is far:
    /// the peer's sync region and the word's offset (for a write fused with it,
    /// [`Ports::write_signal`]); `None` for a rank of this node.
    pub(crate) fn far_sem(
        &self,
        peer: u32,
        kind: usize,
        tag: u32,
    ) -> Option<(&Arc<dyn std::any::Any + Send + Sync>, u64)> {
        let sem = self.remote.get(peer as usize)?.as_ref()?;
        if !self.is_far(peer) {
            return None;
        }
        let slot = Self::slot(self.me, kind, tag);
        Some((sem, (SLOTS_AT + slot * 16) as u64))
    }

    /// Wait for and consume one signal on `(peer → me, kind, tag)`.
    pub(crate) fn wait(&self, peer: u32, kind: usize, tag: u32) -> Result<(), HalError> {
        let slot = Self::slot(peer, kind, tag);
        let expected = &self.expected[slot];
        let target = expected.load(Ordering::Relaxed).wrapping_add(1);
        self.wait_for(peer, kind, tag, target)?;
        expected.store(target, Ordering::Relaxed);
        Ok(())
    }

    /// Wait until `(peer → me, kind, tag)` has counted `k` signals beyond those consumed
    /// so far, without consuming any (see [`SyncTable::consume`]).
    pub(crate) fn wait_ahead(
        &self,
        peer: u32,
        kind: usize,
        tag: u32,
        k: u64,
    ) -> Result<(), HalError> {
        let slot = Self::slot(peer, kind, tag);
        let target = self.expected[slot].load(Ordering::Relaxed).wrapping_add(k);
        self.wait_for(peer, kind, tag, target)
    }

    /// Mark `k` more signals on `(peer → me, kind, tag)` consumed.
    pub(crate) fn consume(&self, peer: u32, kind: usize, tag: u32, k: u64) {
        let slot = Self::slot(peer, kind, tag);
        self.expected[slot].fetch_add(k, Ordering::Relaxed);
    }

    /// Wait until the counter of `(peer → me, kind, tag)` reaches `target`.
    fn wait_for(&self, peer: u32, kind: usize, tag: u32, target: u64) -> Result<(), HalError> {
        let slot = Self::slot(peer, kind, tag);
        let (counter, waiters) = self.sem(self.me, slot);
        let me = self.me;
        let stop = &self.stop;
        let mut stopped = false;
        self.tuning.wait_on(
            counter,
            Some(waiters),
            || {
                let v = counter.load(Ordering::Relaxed);
                format!(
                    "rank {me}: signal #{target} from rank {peer} (channel kind {kind}, tag {tag}; counter is {v}): is rank {peer} alive and running the same collective?"
                )
            },
            |seen| {
                if reached(seen.unwrap_or_else(|| counter.load(Ordering::Acquire)), target) {
                    return true;
                }
                stopped = stop.is_set();
                stopped
            },
        )?;
        if stopped {
            stop.check()?;
        }
        Ok(())
    }

    /// Before an invocation that writes LL packets into `peer` one way
    /// ([`crate::plan::Plan::one_way_packet_pairs`]; the m-th such invocation of this
    /// rank, 0-based, counted here): wait until `peer` completed its invocation
    /// m − `rotation`, i.e. sent `m − rotation + 1` signals on [`CREDIT_TAG`] (the
    /// receiver sends one at the end of each such invocation, in the same order, as
    /// collectives are called in the same order everywhere). The copy of scratch this
    /// invocation writes was last read by the receiver `rotation` invocations of this
    /// plan before, which is at most its invocation m − `rotation` of this kind.
    pub(crate) fn await_credit(&self, peer: u32, rotation: u64) -> Result<(), HalError> {
        let m = self.credit_calls[peer as usize].fetch_add(1, Ordering::Relaxed);
        let need = (m + 1).saturating_sub(rotation.max(1));
        let slot = Self::slot(peer, KIND_P2P, CREDIT_TAG);
        if need == 0 || self.expected[slot].load(Ordering::Relaxed) >= need {
            return Ok(());
        }
        self.wait_for(peer, KIND_P2P, CREDIT_TAG, need)?;
        self.expected[slot].store(need, Ordering::Relaxed);
        Ok(())
    }

    /// Consume one signal on `(peer → me, kind, tag)` if it has arrived; never blocks.
    pub(crate) fn poll(&self, peer: u32, kind: usize, tag: u32) -> bool {
        let slot = Self::slot(peer, kind, tag);
        let (counter, _) = self.sem(self.me, slot);
        let expected = &self.expected[slot];
        let target = expected.load(Ordering::Relaxed).wrapping_add(1);
        if reached(counter.load(Ordering::Acquire), target) {
            expected.store(target, Ordering::Relaxed);
            true
        } else {
            false
        }
    }

    /// After writing packets into `peer`'s memory: ring its doorbell. Wakes the peer
    /// only when the ring reaches the count its sleeper asked for (`wake_at`), or when
    /// several of its threads sleep.
    pub(crate) fn ring(&self, peer: u32) {
        let (bell, sleepers, wake_at) = self.doorbell(peer);
        let v = bell.fetch_add(1, Ordering::SeqCst).wrapping_add(1);
        let s = sleepers.load(Ordering::SeqCst);
        if s >= 2 || (s == 1 && reached(v, wake_at.load(Ordering::SeqCst))) {
            wake_sleepers(bell, None);
        }
    }

    /// Wait until `missing()` (packet sources whose data has not arrived) is 0, sleeping
    /// on this rank's doorbell after the spin budget until enough rings came for every
    /// missing source. `what` describes the packets for the timeout error.
    pub(crate) fn wait_packets(
        &self,
        mut missing: impl FnMut() -> usize,
        what: impl FnOnce() -> String,
    ) -> Result<(), HalError> {
        let (bell, sleepers, wake_at) = self.doorbell(self.me);
        let me = self.me;
        let stop = &self.stop;
        let mut stopped = false;
        self.tuning.wait_on(
            bell,
            Some(sleepers),
            || format!("rank {me}: {}", what()),
            |seen| {
                let m = missing();
                if m == 0 {
                    return true;
                }
                if stop.is_set() {
                    stopped = true;
                    return true;
                }
                if let Some(d) = seen {
                    // About to sleep: every missing source rings after `d` was read (its
                    // ring would otherwise have made its packets visible), so the bell
                    // reaches d + m; ask `ring` to wake us then.
                    wake_at.store(d.wrapping_add(m as u64), Ordering::SeqCst);
                }
                false
            },
        )?;
        if stopped {
            stop.check()?;
        }
        Ok(())
    }
}
