//! Where a rank's incoming messages wait for `recv`: one FIFO per (peer, tag) for
//! bytes and one for descriptors, plus what is known about each peer's liveness.
//!
//! Producers (TCP receiver threads, in-process senders, the descriptor socket's
//! readers) `put`; consumers `take` with a deadline. A message that arrived before its
//! sender died is still delivered; only an empty queue from a dead peer is
//! [`HalError::PeerDead`].

use std::collections::{HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use crate::abort::AbortFlag;
use crate::error::{HalError, Result};
use crate::topology::Rank;

#[derive(Debug, Default)]
struct State {
    msgs: HashMap<(Rank, u64), VecDeque<Vec<u8>>>,
    fds: HashMap<(Rank, u64), VecDeque<Vec<OwnedFd>>>,
    /// Peers whose message connection is gone, and why.
    dead: HashMap<Rank, String>,
    /// Open descriptor connections per peer (descriptors may still be in flight
    /// on them after the message connection closed).
    fd_links: HashMap<Rank, u32>,
}

/// Incoming messages of one rank.
#[derive(Debug, Default)]
pub(crate) struct Mailbox {
    state: Mutex<State>,
    cv: Condvar,
    /// Raised with the first peer found dead, for the waits of communicators.
    pub(crate) failure: Arc<AbortFlag>,
}

impl Mailbox {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every critical section leaves `State` consistent, so a poisoned lock is usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// File a message from `from` under `tag`.
    pub fn put(&self, from: Rank, tag: u64, data: Vec<u8>) {
        self.lock()
            .msgs
            .entry((from, tag))
            .or_default()
            .push_back(data);
        self.cv.notify_all();
    }

    /// File descriptors from `from` under `tag`.
    pub fn put_fds(&self, from: Rank, tag: u64, fds: Vec<OwnedFd>) {
        self.lock()
            .fds
            .entry((from, tag))
            .or_default()
            .push_back(fds);
        self.cv.notify_all();
    }

    /// `from`'s message connection is gone. The first reason is kept; the first dead
    /// peer raises [`Mailbox::failure`].
    pub fn mark_dead(&self, from: Rank, detail: impl Into<String>) {
        let detail = detail.into();
        self.failure.peer_dead(from, detail.clone());
        self.lock().dead.entry(from).or_insert(detail);
        self.cv.notify_all();
    }

    /// `from` left on purpose (it dropped its bootstrap after its work): messages to
    /// and from it fail with `detail`, but it is not a failure of the job.
    pub fn mark_left(&self, from: Rank, detail: impl Into<String>) {
        self.lock().dead.entry(from).or_insert(detail.into());
        self.cv.notify_all();
    }

    /// Whether `peer` is known dead, and why.
    pub fn dead_reason(&self, peer: Rank) -> Option<String> {
        self.lock().dead.get(&peer).cloned()
    }

    /// A descriptor connection from `from` opened (`+1`) or closed (`-1`).
    pub fn fd_link(&self, from: Rank, open: bool) {
        let mut s = self.lock();
        let n = s.fd_links.entry(from).or_default();
        *n = if open { *n + 1 } else { n.saturating_sub(1) };
        drop(s);
        self.cv.notify_all();
    }

    /// Next message from `from` under `tag`, waiting until `deadline`. On timeout the
    /// error says it was waiting for `what()` for `millis` ms.
    pub fn take(
        &self,
        from: Rank,
        tag: u64,
        deadline: Instant,
        millis: u64,
        what: &dyn Fn() -> String,
    ) -> Result<Vec<u8>> {
        self.wait(from, deadline, millis, what, false, |s| {
            s.msgs.get_mut(&(from, tag)).and_then(VecDeque::pop_front)
        })
    }

    /// Next descriptor batch from `from` under `tag`, like [`Mailbox::take`].
    pub fn take_fds(
        &self,
        from: Rank,
        tag: u64,
        deadline: Instant,
        millis: u64,
        what: &dyn Fn() -> String,
    ) -> Result<Vec<OwnedFd>> {
        self.wait(from, deadline, millis, what, true, |s| {
            s.fds.get_mut(&(from, tag)).and_then(VecDeque::pop_front)
        })
    }

    fn wait<T>(
        &self,
        from: Rank,
        deadline: Instant,
        millis: u64,
        what: &dyn Fn() -> String,
        fds: bool,
        mut pick: impl FnMut(&mut State) -> Option<T>,
    ) -> Result<T> {
        let mut s = self.lock();
        loop {
            if let Some(v) = pick(&mut s) {
                return Ok(v);
            }
            // Descriptors may still be in flight on an open descriptor link.
            let in_flight = fds && s.fd_links.get(&from).copied().unwrap_or(0) > 0;
            if let (Some(why), false) = (s.dead.get(&from), in_flight) {
                return Err(HalError::PeerDead {
                    rank: from,
                    detail: format!("{why} (while waiting for {})", what()),
                });
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(HalError::Timeout {
                    what: what(),
                    millis,
                });
            }
            s = self
                .cv
                .wait_timeout(s, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    #[test]
    fn fifo_per_peer_and_tag() {
        let m = Mailbox::default();
        m.put(1, 7, b"a".to_vec());
        m.put(1, 8, b"x".to_vec());
        m.put(1, 7, b"b".to_vec());
        let w = || "test".to_string();
        assert_eq!(m.take(1, 8, soon(), 1, &w).unwrap(), b"x");
        assert_eq!(m.take(1, 7, soon(), 1, &w).unwrap(), b"a");
        assert_eq!(m.take(1, 7, soon(), 1, &w).unwrap(), b"b");
    }

    #[test]
    fn queued_before_death_is_delivered_then_peer_dead() {
        let m = Mailbox::default();
        m.put(2, 1, b"last words".to_vec());
        m.mark_dead(2, "closed");
        let w = || "test".to_string();
        assert_eq!(m.take(2, 1, soon(), 1, &w).unwrap(), b"last words");
        match m.take(2, 1, soon(), 1, &w) {
            Err(HalError::PeerDead { rank: 2, .. }) => {}
            other => panic!("expected PeerDead, got {other:?}"),
        }
    }

    #[test]
    fn timeout_names_what() {
        let m = Mailbox::default();
        let w = || "rank 3 of 4 to say hi".to_string();
        let e = m.take(3, 0, Instant::now(), 5, &w).unwrap_err();
        assert!(e.to_string().contains("rank 3 of 4"), "{e}");
    }

    #[test]
    fn wakes_waiter() {
        let m = Arc::new(Mailbox::default());
        let m2 = m.clone();
        let t = std::thread::spawn(move || {
            let w = || "x".to_string();
            m2.take(0, 0, soon(), 1, &w)
        });
        m.put(0, 0, b"hi".to_vec());
        assert_eq!(t.join().unwrap().unwrap(), b"hi");
    }
}
