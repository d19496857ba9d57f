//! Bounded waiting: spin briefly, then yield, then block, then time out.
//!
//! Every wait of the stack goes through a [`WaitPolicy`] — the channels' semaphores and
//! FIFOs here, and the host-emu plan executor's semaphores and packet doorbell. Spinning
//! keeps latency low when a rank has a core to itself; yielding and blocking keep
//! waiting ranks from burning the cores that other ranks need when ranks outnumber
//! cores (8 ranks on a 2-core machine); the timeout turns a lost peer into an error
//! instead of a hang.
//!
//! **Blocking.** A wait on a counter word ([`WaitPolicy::wait_on`]) blocks either in
//! short sleeps (`futex: false`, and always under loom) or in `FUTEX_WAIT` on the
//! counter's low 32 bits ([`crate::futex`], `futex: true`), in slices of at most
//! [`FUTEX_SLICE`], re-checking the condition after each. A futex sleeper is woken by
//! its signaller's [`wake_sleepers`] after the add it waits for; a missed wake costs at
//! most one slice, never correctness.

use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use commhal_hal::HalError;
use commhal_hal::settings::Setting;
use commhal_hal::settings::host::{WAIT_SPIN_US, WAIT_TIMEOUT_MS, WAIT_YIELD_US};

use crate::sync;

/// Longest single `FUTEX_WAIT` of a futex-blocking wait (it then re-checks).
pub const FUTEX_SLICE: Duration = Duration::from_millis(50);

/// How a wait spins, backs off and gives up.
///
/// Phases: spin (at least `spins` iterations *and* at least `spin_for`), then yield (at
/// least `yields` calls *and* at least `yield_for`), then block (futex or `sleep`) until
/// the condition holds or `timeout` — counted from the end of the spin phase — passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitPolicy {
    /// Busy-spin iterations (with a spin hint) before yielding.
    pub spins: u32,
    /// Keep spinning at least this long (clock read every 64 spins; zero: count only).
    pub spin_for: Duration,
    /// `std::thread::yield_now` calls after spinning, before blocking.
    pub yields: u32,
    /// Keep yielding at least this long (zero: count only).
    pub yield_for: Duration,
    /// Length of each sleep of the blocking phase when not using the futex.
    pub sleep: Duration,
    /// Block in `FUTEX_WAIT` on the counter ([`WaitPolicy::wait_on`] only; ignored
    /// under loom). The signallers must then call [`wake_sleepers`].
    pub futex: bool,
    /// Total time after which the wait fails with [`HalError::Timeout`].
    pub timeout: Duration,
}

/// The wait timeout when `COMMHAL_WAIT_TIMEOUT_MS` is not set (its declared default).
pub fn default_timeout() -> Duration {
    WAIT_TIMEOUT_MS.default_duration()
}

/// Parse a `COMMHAL_WAIT_TIMEOUT_MS` value (`None` or empty: [`default_timeout`]).
/// Anything but a positive whole number of milliseconds is an error: `0` would make
/// every wait fail at once, and a typo silently meaning "30 s" hides the mistake.
pub fn timeout_from_value(value: Option<&str>) -> Result<Duration, HalError> {
    let value = value.map(str::to_string);
    Ok(WAIT_TIMEOUT_MS.duration_or_default_in(&|_| value.clone())?)
}

/// The wait timeout from `COMMHAL_WAIT_TIMEOUT_MS` (see [`timeout_from_value`]).
pub fn timeout_from_env() -> Result<Duration, HalError> {
    Ok(WAIT_TIMEOUT_MS.duration_or_default()?)
}

impl Default for WaitPolicy {
    /// 1000 spins, 100 yields, 20 µs sleeps, no futex, timeout 30 s (or
    /// `COMMHAL_WAIT_TIMEOUT_MS`; an invalid value is logged and ignored here:
    /// callers that can fail check it with [`timeout_from_env`] first, as
    /// `Communicator::new` does).
    fn default() -> Self {
        static WARNED: std::sync::Once = std::sync::Once::new();
        let timeout = timeout_from_env().unwrap_or_else(|e| {
            WARNED.call_once(|| tracing::warn!("{e}; using the default"));
            default_timeout()
        });
        WaitPolicy {
            spins: 1000,
            spin_for: Duration::ZERO,
            yields: 100,
            yield_for: Duration::ZERO,
            sleep: Duration::from_micros(20),
            futex: false,
            timeout,
        }
    }
}

impl WaitPolicy {
    /// The default policy with another timeout.
    pub fn with_timeout(timeout: Duration) -> Self {
        WaitPolicy {
            timeout,
            ..WaitPolicy::default()
        }
    }

    /// The policy for `local_ranks` ranks sharing this host's cores, blocking on the
    /// futex: spin 100 µs when every rank has a core; else check once, then yield for
    /// 200 µs before blocking (ranks with work get the core without a futex wake, the
    /// "yield only when oversubscribed" rule). Oversubscribed, any spin costs the rank
    /// that would signal its core: 8 ranks on 2 cores took 53–111 µs per 1–16 KiB
    /// all-reduce with 2 µs of spin (at least 64 pause hints), 114–188 with 10 µs and
    /// 26–57 with none (Open MPI 40–165). `COMMHAL_WAIT_SPIN_US` /
    /// `COMMHAL_WAIT_YIELD_US` override the two times; timeout as [`Default`].
    pub fn for_host(local_ranks: u32) -> Self {
        let cores = std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1);
        let over = local_ranks > cores;
        // an invalid value is logged and the default used: the policy has no error path
        let us = |s: &Setting, default: u64| {
            let default = Duration::from_micros(default);
            s.duration()
                .unwrap_or_else(|e| {
                    tracing::warn!("{e}; using {default:?}");
                    None
                })
                .unwrap_or(default)
        };
        WaitPolicy {
            spins: 0,
            spin_for: us(&WAIT_SPIN_US, if over { 0 } else { 100 }),
            yields: 0,
            yield_for: us(&WAIT_YIELD_US, if over { 200 } else { 0 }),
            futex: true,
            ..WaitPolicy::default()
        }
    }

    /// Wait until `ready` holds, blocking on `word` (the counter the condition depends
    /// on, which signallers add to) once spinning and yielding are used up.
    ///
    /// `ready(None)` is asked while spinning and yielding (it loads what it needs
    /// itself, with the ordering it needs). In the blocking phase `ready(Some(v))` gets
    /// `v` = `word` loaded `SeqCst` (so also an acquire) just before; when it returns
    /// false the wait sleeps until `word`'s low half moves away from `v` (or a slice
    /// ends) and asks again. `waiters`, when given, is incremented (`SeqCst`) for the
    /// whole blocking phase, before the first such load: a signaller that adds to
    /// `word` (`SeqCst`) and then reads `waiters` (see [`wake_sleepers`]) either is
    /// seen by the load or sees the sleeper. Past the timeout: [`HalError::Timeout`]
    /// naming `what()`.
    pub fn wait_on(
        &self,
        word: &AtomicU64,
        waiters: Option<&AtomicU64>,
        what: impl FnOnce() -> String,
        mut ready: impl FnMut(Option<u64>) -> bool,
    ) -> Result<(), HalError> {
        use std::sync::atomic::Ordering::SeqCst;
        let p = self;
        // Spin.
        let spin_start = (!p.spin_for.is_zero()).then(Instant::now);
        let mut spun = 0u32;
        loop {
            if ready(None) {
                return Ok(());
            }
            sync::spin_hint();
            spun = spun.saturating_add(1);
            if spun >= p.spins
                && spin_start.is_none_or(|t| spun.is_multiple_of(64) && t.elapsed() >= p.spin_for)
            {
                break;
            }
        }
        // Yield.
        let start = Instant::now();
        let timed_out = || HalError::Timeout {
            what: what(),
            millis: p.timeout.as_millis() as u64,
        };
        let mut yielded = 0u32;
        while yielded < p.yields || (!p.yield_for.is_zero() && start.elapsed() < p.yield_for) {
            if start.elapsed() >= p.timeout {
                return Err(timed_out());
            }
            sync::yield_now();
            yielded = yielded.saturating_add(1);
            if ready(None) {
                return Ok(());
            }
        }
        // Block.
        let deadline = start.checked_add(p.timeout);
        if let Some(w) = waiters {
            w.fetch_add(1, SeqCst);
        }
        let r = loop {
            let v = word.load(SeqCst);
            if ready(Some(v)) {
                break Ok(());
            }
            let now = Instant::now();
            let left = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(now));
            if left.is_zero() {
                break Err(timed_out());
            }
            block(p, word, v, left);
        };
        if let Some(w) = waiters {
            w.fetch_sub(1, SeqCst);
        }
        r
    }

    /// Call `ready` until it returns `Ok(true)`, backing off between calls. An `Err`
    /// from `ready` ends the wait with that error; running past the timeout gives
    /// [`HalError::Timeout`] naming `what()`.
    pub fn wait_until(
        &self,
        what: impl FnOnce() -> String,
        mut ready: impl FnMut() -> Result<bool, HalError>,
    ) -> Result<(), HalError> {
        let mut backoff = Backoff::new(self);
        loop {
            if ready()? {
                return Ok(());
            }
            if backoff.snooze().is_err() {
                return Err(HalError::Timeout {
                    what: what(),
                    millis: self.timeout.as_millis() as u64,
                });
            }
        }
    }
}

/// One step of the blocking phase: sleep on `word` (futex, while its low half is
/// `seen`) or for `p.sleep`, at most `left`.
#[inline]
fn block(p: &WaitPolicy, word: &AtomicU64, seen: u64, left: Duration) {
    #[cfg(not(loom))]
    if p.futex {
        crate::futex::wait(word, seen as u32, left.min(FUTEX_SLICE));
        return;
    }
    let _ = (word, seen);
    std::thread::sleep(p.sleep.min(left));
}

/// After adding to `word`: wake the threads blocked on it in [`WaitPolicy::wait_on`]
/// with `futex: true`, in any process. With `waiters` (the count those waits keep,
/// read here `SeqCst`; the add must be `SeqCst` too) the wake is skipped when nobody
/// sleeps; without, it is a `FUTEX_WAKE` system call every time. No-op under loom.
#[inline]
pub fn wake_sleepers(word: &AtomicU64, waiters: Option<&AtomicU64>) {
    #[cfg(not(loom))]
    if waiters.is_none_or(|w| w.load(std::sync::atomic::Ordering::SeqCst) != 0) {
        crate::futex::wake(word);
    }
    #[cfg(loom)]
    let _ = (word, waiters);
}

/// The state of one wait under a [`WaitPolicy`].
#[derive(Debug)]
pub struct Backoff<'a> {
    policy: &'a WaitPolicy,
    round: u32,
    start: Option<Instant>,
}

/// Returned by [`Backoff::snooze`] once the policy's timeout has passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed;

impl<'a> Backoff<'a> {
    /// A fresh wait.
    pub fn new(policy: &'a WaitPolicy) -> Self {
        Backoff {
            policy,
            round: 0,
            start: None,
        }
    }

    /// Wait a little (spin, yield or sleep depending on how long we have waited).
    /// Fails once the timeout has passed. The clock is read only after the spin phase.
    pub fn snooze(&mut self) -> Result<(), Elapsed> {
        let p = self.policy;
        self.round = self.round.saturating_add(1);
        if self.round <= p.spins {
            sync::spin_hint();
            return Ok(());
        }
        let start = *self.start.get_or_insert_with(Instant::now);
        if start.elapsed() >= p.timeout {
            return Err(Elapsed);
        }
        if self.round <= p.spins.saturating_add(p.yields) {
            sync::yield_now();
        } else {
            std::thread::sleep(p.sleep);
        }
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::counter::reached;
    use std::sync::atomic::Ordering;

    fn policy(futex: bool, timeout: Duration) -> WaitPolicy {
        WaitPolicy {
            spins: 10,
            yields: 10,
            futex,
            timeout,
            ..WaitPolicy::default()
        }
    }

    /// A counter wait sees a signal added after it started blocking, in both blocking
    /// modes, and leaves the waiters count as it found it.
    #[test]
    fn wait_on_sees_a_later_signal() {
        for futex in [true, false] {
            let counter = AtomicU64::new(u64::MAX); // the target wraps past 2^64
            let waiters = AtomicU64::new(0);
            let p = policy(futex, Duration::from_secs(20));
            std::thread::scope(|s| {
                let h = s.spawn(|| {
                    p.wait_on(
                        &counter,
                        Some(&waiters),
                        || "test".into(),
                        |seen| reached(seen.unwrap_or(counter.load(Ordering::Acquire)), 1),
                    )
                });
                // Signal once the waiter is in its blocking phase (it cannot finish
                // before the add).
                while waiters.load(Ordering::SeqCst) == 0 {
                    std::thread::yield_now();
                }
                counter.fetch_add(2, Ordering::SeqCst);
                wake_sleepers(&counter, Some(&waiters));
                h.join().unwrap().unwrap();
            });
            assert_eq!(waiters.load(Ordering::SeqCst), 0);
        }
    }

    #[test]
    fn timeout_values() {
        assert_eq!(timeout_from_value(None).unwrap(), default_timeout());
        assert_eq!(
            timeout_from_value(Some(" 250 ")).unwrap(),
            Duration::from_millis(250)
        );
        for bad in ["abc", "-5", "0", "1.5"] {
            let e = timeout_from_value(Some(bad)).unwrap_err().to_string();
            assert!(e.contains(WAIT_TIMEOUT_MS.env) && e.contains(bad), "{e}");
        }
    }

    /// A wait that never gets its signal times out with an error naming `what`, and
    /// `ready` saw the counter's value in the blocking phase.
    #[test]
    fn wait_on_times_out_with_what() {
        for futex in [true, false] {
            let counter = AtomicU64::new(7);
            let waiters = AtomicU64::new(0);
            let mut seen_in_block = None;
            let e = policy(futex, Duration::from_millis(30))
                .wait_on(
                    &counter,
                    Some(&waiters),
                    || "signal #8 of the test".into(),
                    |seen| {
                        seen_in_block = seen.or(seen_in_block);
                        false
                    },
                )
                .unwrap_err();
            assert!(
                matches!(&e, HalError::Timeout { what, millis: 30 } if what.contains("signal #8")),
                "{e}"
            );
            assert_eq!(seen_in_block, Some(7));
            assert_eq!(waiters.load(Ordering::SeqCst), 0);
        }
    }
}
