//! The blocking stage of a counter wait: `FUTEX_WAIT` / `FUTEX_WAKE` on the low 32 bits
//! of a 64-bit counter in (possibly shared, cross-process) memory. The only `unsafe`
//! of the crate outside `raw.rs`.
//!
//! The futexes are *not* private (`FUTEX_PRIVATE_FLAG` is left off): the counters live
//! in memory mapped by several processes, and the kernel then keys waiters by the
//! physical page, so a wake in one process reaches a sleeper in another.
//!
//! Only the kernel reads the 32-bit half; Rust code keeps accessing the counter as a
//! whole `AtomicU64`. Waits may return spuriously (a wake, a signal, the low half
//! having changed, the timeout): callers always re-check their condition.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// The counter's low 32 bits as the kernel sees them (little-endian: the first 4 bytes).
#[inline]
fn low_half(word: &AtomicU64) -> *mut u32 {
    #[cfg(not(target_endian = "little"))]
    compile_error!("futex waits assume the low half of a u64 is its first 4 bytes");
    word.as_ptr() as *mut u32
}

/// Block until the low 32 bits of `word` differ from `expected`, a [`wake`] on `word`,
/// or `timeout` — whichever comes first. Returns nothing: re-check the condition.
pub fn wait(word: &AtomicU64, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `low_half` points at the first 4 bytes of a valid, 8-byte-aligned atomic
    // word that outlives the call (it is borrowed); FUTEX_WAIT only reads them
    // (atomically, in the kernel) to compare with `expected`; `ts` is a valid timespec
    // on our stack; the remaining arguments are unused by FUTEX_WAIT.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            low_half(word),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wake every thread blocked in [`wait`] on `word`, in any process mapping it. Call it
/// after the add that the sleepers wait for (so a woken sleeper sees it).
pub fn wake(word: &AtomicU64) {
    // SAFETY: `low_half` is the address of a valid, aligned atomic word; FUTEX_WAKE does
    // not access memory, it only looks up the waiters queued on that address.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            low_half(word),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn wait_returns_at_once_when_the_low_half_already_differs() {
        let w = AtomicU64::new(5);
        // Would block for an hour if the kernel compared against the wrong half.
        wait(&w, 4, Duration::from_secs(3600));
    }

    #[test]
    fn wake_releases_a_sleeper_after_the_add() {
        let w = AtomicU64::new(1 << 32); // the high half must not matter
        std::thread::scope(|s| {
            let h = s.spawn(|| {
                while w.load(Ordering::Acquire) == 1 << 32 {
                    wait(&w, 0, Duration::from_secs(3600));
                }
            });
            w.fetch_add(1, Ordering::Release);
            wake(&w);
            h.join().unwrap();
        });
    }
}
