//! When an all-peers packet kernel needs the `peers_done` fence first.
//!
//! Those kernels (all-gather, all-to-all, reduce-scatter, one-shot all-reduce over
//! LL16; the all-gather, reduce-scatter and all-reduce over LL63) write the parity
//! slots (LL63: the parity half of the small region) of launch e − 2 in every peer, so
//! every peer must have finished e − 2. A launch e − 1 that heard from every peer (a
//! barrier, or packets from each) shows it; a one-way kernel does not (LL16 broadcast /
//! reduce / send/recv, the chains, the all-pairs LL63 all-reduce with fewer 16-byte
//! vectors than ranks: [`Kernel::hears_every_peer`](super::Kernel::hears_every_peer)),
//! and neither does an unknown predecessor: the first kernel of a graph capture (a
//! replay follows whatever ran before it) or the first after one. Once a captured
//! graph ended with a one-way kernel, its replays may precede any later kernel unseen,
//! so every kernel queued outside a capture counts as after one (for the Comm's life: it
//! does not see whether such a graph is still replayed). The fence itself: `peers_done`
//! in `coll/protocol.cuh`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The communicator's record of the last kernel it queued.
#[derive(Debug, Default)]
pub(crate) struct SlotOrder {
    /// The last kernel did not hear from every peer.
    prev_one_way: AtomicBool,
    /// The graph capture the last kernel was queued into (0: none).
    capture: AtomicU64,
    /// A captured graph ended with a kernel that did not hear from every peer.
    graph_ends_one_way: AtomicBool,
}

impl SlotOrder {
    /// Whether the last kernel queued may not have heard from every peer, for a kernel
    /// about to be queued into `capture` (0: none): an all-peers packet kernel then needs
    /// the fence first.
    pub(crate) fn after_one_way(&self, capture: u64) -> bool {
        let prev_capture = self.capture.load(Ordering::Relaxed);
        self.prev_one_way.load(Ordering::Relaxed)
            || prev_capture != capture
            || (capture == 0 && self.graph_ends_one_way.load(Ordering::Relaxed))
    }

    /// Record a kernel queued into `capture` that hears from every peer or not. Only
    /// once it is queued: after a failed launch the last kernel stays what it was.
    pub(crate) fn record(&self, hears_every_peer: bool, capture: u64) {
        let prev_capture = self.capture.swap(capture, Ordering::Relaxed);
        let prev_one_way = self.prev_one_way.swap(!hears_every_peer, Ordering::Relaxed);
        if prev_capture != 0 && prev_capture != capture && prev_one_way {
            self.graph_ends_one_way.store(true, Ordering::Relaxed);
        }
    }

    /// `after_one_way`, then `record`: one kernel queued.
    #[cfg(test)]
    fn queue(&self, hears_every_peer: bool, capture: u64) -> bool {
        let fence = self.after_one_way(capture);
        self.record(hears_every_peer, capture);
        fence
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_launches_need_it_only_after_a_one_way_kernel() {
        let o = SlotOrder::default();
        assert!(!o.queue(true, 0));
        assert!(!o.queue(true, 0));
        assert!(!o.queue(false, 0)); // the one-way kernel itself
        assert!(o.queue(true, 0));
        assert!(!o.queue(true, 0));
    }

    #[test]
    fn the_first_kernel_of_a_capture_and_the_first_after_one_need_it() {
        let o = SlotOrder::default();
        assert!(!o.queue(true, 0));
        assert!(o.queue(true, 7));
        assert!(!o.queue(true, 7));
        assert!(o.queue(true, 0));
        assert!(!o.queue(true, 0));
        // a graph that ends hearing from every peer leaves plain launches alone
        assert!(o.queue(true, 8));
        assert!(o.queue(true, 0));
        assert!(!o.queue(true, 0));
    }

    #[test]
    fn a_kernel_that_failed_to_queue_is_not_recorded() {
        let o = SlotOrder::default();
        assert!(!o.queue(false, 0)); // one-way
        assert!(o.after_one_way(0)); // an all-peers kernel asks, then fails to launch
        assert!(o.queue(true, 0)); // the next one still needs the fence
        assert!(!o.queue(true, 0));
    }

    #[test]
    fn after_a_graph_that_ends_one_way_every_plain_launch_needs_it() {
        let o = SlotOrder::default();
        assert!(o.queue(true, 3));
        assert!(!o.queue(false, 3)); // the graph ends with a one-way kernel
        assert!(o.queue(true, 0));
        assert!(o.queue(true, 0));
        assert!(o.queue(true, 0));
        // inside later captures only the usual rules
        assert!(o.queue(true, 4));
        assert!(!o.queue(true, 4));
    }
}
