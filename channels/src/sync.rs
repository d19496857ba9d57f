//! The atomics shim: `std::sync::atomic` normally, `loom::sync::atomic` under
//! `--cfg loom`, so the loom models check the same code that runs in production.
//!
//! Counters that live in *registered memory* (semaphores, packets) are always
//! `std` atomics viewed through a raw pointer ([`crate::raw`]); the algorithms on them
//! are written against [`Word`] so the loom models can run them on loom atomics.
//! Memory the crate owns itself (the proxy FIFO) uses the shim types directly.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};

/// Give the CPU (or, under loom, the model's scheduler) to someone else.
pub(crate) fn yield_now() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::yield_now();
}

/// Hint that we are spinning.
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}

/// The 64-bit atomic operations the semaphore and FIFO algorithms use.
pub(crate) trait Word {
    fn load(&self, o: Ordering) -> u64;
    fn store(&self, v: u64, o: Ordering);
    fn fetch_add(&self, v: u64, o: Ordering) -> u64;
    fn compare_exchange(&self, cur: u64, new: u64, ok: Ordering, err: Ordering)
    -> Result<u64, u64>;
}

macro_rules! impl_word {
    ($t:ty) => {
        impl Word for $t {
            #[inline]
            fn load(&self, o: Ordering) -> u64 {
                <$t>::load(self, o)
            }
            #[inline]
            fn store(&self, v: u64, o: Ordering) {
                <$t>::store(self, v, o)
            }
            #[inline]
            fn fetch_add(&self, v: u64, o: Ordering) -> u64 {
                <$t>::fetch_add(self, v, o)
            }
            #[inline]
            fn compare_exchange(
                &self,
                cur: u64,
                new: u64,
                ok: Ordering,
                err: Ordering,
            ) -> Result<u64, u64> {
                <$t>::compare_exchange(self, cur, new, ok, err)
            }
        }
    };
}

// Registered memory is always viewed as std atomics, loom build or not.
impl_word!(std::sync::atomic::AtomicU64);
#[cfg(loom)]
impl_word!(loom::sync::atomic::AtomicU64);
