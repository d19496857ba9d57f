//! The semaphore algorithm on bare atomic words (no memory mapping), shared by
//! [`crate::semaphore`] and the loom models.

use crate::sync::{Ordering, Word};

/// Wrap-safe "has `counter` reached `target`": true when `counter - target`, read as a
/// signed 64-bit number, is ≥ 0 (valid while the two are less than 2^63 apart).
#[inline]
pub fn reached(counter: u64, target: u64) -> bool {
    (counter.wrapping_sub(target) as i64) >= 0
}

/// Add one to a counter (`Release` for `signal`, `Relaxed` for `relaxed_signal`).
#[inline]
pub(crate) fn signal_word<W: Word>(counter: &W, order: Ordering) {
    counter.fetch_add(1, order);
}

/// Consume one signal if one is available: the non-blocking step of every wait.
/// `load` is `Acquire` (wait/poll) or `Relaxed` (relaxed_wait).
#[inline]
pub(crate) fn try_consume<W: Word>(inbound: &W, expected: &W, load: Ordering) -> bool {
    loop {
        let e = expected.load(Ordering::Relaxed);
        let target = e.wrapping_add(1);
        if !reached(inbound.load(load), target) {
            return false;
        }
        // Only the winner of this exchange consumes the signal; a loser re-reads
        // `expected` (another waiter took that signal) and tries for the next one.
        if expected
            .compare_exchange(e, target, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            return true;
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn reached_is_wrap_safe() {
        assert!(reached(5, 5));
        assert!(reached(6, 5));
        assert!(!reached(4, 5));
        assert!(reached(2, u64::MAX - 1)); // counter wrapped past the target
        assert!(!reached(u64::MAX - 1, 2));
        assert!(reached(0, u64::MAX));
    }

    #[test]
    fn try_consume_counts_exactly_across_wrap() {
        let start = u64::MAX - 2;
        let inbound = AtomicU64::new(start);
        let expected = AtomicU64::new(start);
        assert!(!try_consume(&inbound, &expected, Ordering::Acquire));
        for _ in 0..5 {
            signal_word(&inbound, Ordering::Release);
        }
        for _ in 0..5 {
            assert!(try_consume(&inbound, &expected, Ordering::Acquire));
        }
        assert!(!try_consume(&inbound, &expected, Ordering::Acquire));
        assert_eq!(expected.load(Ordering::Relaxed), start.wrapping_add(5));
    }
}
