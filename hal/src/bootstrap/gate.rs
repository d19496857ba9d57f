//! A cap on connections that have not proven they belong to the job yet.
//!
//! The bootstrap root, every rank's mesh listener and every rank's descriptor socket
//! (an abstract Unix socket any local user can reach) read each new connection's hello
//! on a thread of its own. Without a cap, anyone able to connect could make a rank
//! start one thread and hold one descriptor per connection until the hello times out.
//! A [`Gate`] lets at most a fixed number of hellos be pending; extra connections are
//! closed at once, and each pending hello is bounded by [`HELLO_WAIT`].

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Pending hellos allowed beyond the ranks that may legitimately connect at once.
pub(crate) const SPARE_HELLOS: usize = 64;

/// Longest one connection may take to present its hello (real ranks send it at once).
pub(crate) const HELLO_WAIT: Duration = Duration::from_secs(10);

/// Counts pending (unauthenticated) connections against a cap.
#[derive(Debug)]
pub(crate) struct Gate {
    pending: AtomicUsize,
    cap: usize,
}

/// One admitted pending connection; dropping it frees the place.
#[derive(Debug)]
pub(crate) struct Pass(Arc<Gate>);

impl Gate {
    /// A gate for `ranks` legitimate connectors plus [`SPARE_HELLOS`].
    pub(crate) fn new(ranks: u32) -> Arc<Gate> {
        Arc::new(Gate {
            pending: AtomicUsize::new(0),
            cap: ranks as usize + SPARE_HELLOS,
        })
    }

    /// A place for one more pending connection, unless the gate is full.
    pub(crate) fn enter(self: &Arc<Self>) -> Option<Pass> {
        self.pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.cap).then_some(n + 1)
            })
            .ok()
            .map(|_| Pass(self.clone()))
    }

    /// The cap.
    pub(crate) fn cap(&self) -> usize {
        self.cap
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        self.0.pending.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_up_to_the_cap_and_frees_places() {
        let g = Gate::new(1);
        let passes: Vec<Pass> = (0..g.cap()).map(|_| g.enter().unwrap()).collect();
        assert!(g.enter().is_none());
        drop(passes);
        assert!(g.enter().is_some());
    }
}
