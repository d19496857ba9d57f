//! Bounded waiting: spin briefly, then yield, then sleep, then time out.
//!
//! Every wait in this crate goes through a [`WaitPolicy`]. Spinning keeps latency low
//! when a rank has a core to itself; yielding and short sleeps keep waiting ranks from
//! burning the cores that other ranks need when ranks outnumber cores (8 ranks on a
//! 2-core machine); the timeout turns a lost peer into an error instead of a hang.

use std::time::{Duration, Instant};

use commhal_hal::HalError;

use crate::sync;

/// Environment variable overriding the default timeout, in milliseconds.
pub const TIMEOUT_ENV: &str = "COMMHAL_WAIT_TIMEOUT_MS";

/// How a wait spins, backs off and gives up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitPolicy {
    /// Busy-spin iterations (with a spin hint) before yielding.
    pub spins: u32,
    /// `std::thread::yield_now` calls after spinning, before sleeping.
    pub yields: u32,
    /// Length of each sleep once spinning and yielding are used up.
    pub sleep: Duration,
    /// Total time after which the wait fails with [`HalError::Timeout`].
    pub timeout: Duration,
}

impl Default for WaitPolicy {
    /// 1000 spins, 100 yields, 20 µs sleeps, timeout 30 s (or `COMMHAL_WAIT_TIMEOUT_MS`).
    fn default() -> Self {
        let timeout = std::env::var(TIMEOUT_ENV)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map(Duration::from_millis)
            .unwrap_or(Duration::from_secs(30));
        WaitPolicy {
            spins: 1000,
            yields: 100,
            sleep: Duration::from_micros(20),
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
