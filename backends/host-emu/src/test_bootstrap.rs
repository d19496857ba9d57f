//! A tiny in-process [`Bootstrap`] for this crate's tests: one mailbox per
//! (from, to, tag), fds moved as they are. Collectives are not needed here.

use std::collections::{HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use commhal_hal::bootstrap::Bootstrap;
use commhal_hal::{HalError, Rank, Result};

enum Msg {
    Bytes(Vec<u8>),
    Fds(Vec<OwnedFd>),
}

#[derive(Default)]
struct Boxes {
    q: Mutex<HashMap<(Rank, Rank, u64), VecDeque<Msg>>>,
    cv: Condvar,
}

/// One rank's view of a shared set of mailboxes.
#[derive(Clone)]
pub(crate) struct TestBootstrap {
    rank: Rank,
    size: u32,
    boxes: Arc<Boxes>,
}

impl std::fmt::Debug for TestBootstrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TestBootstrap({}/{})", self.rank, self.size)
    }
}

impl TestBootstrap {
    /// `size` connected bootstraps, index = rank.
    pub(crate) fn group(size: u32) -> Vec<TestBootstrap> {
        let boxes = Arc::new(Boxes::default());
        (0..size)
            .map(|rank| TestBootstrap {
                rank,
                size,
                boxes: boxes.clone(),
            })
            .collect()
    }

    fn push(&self, peer: Rank, tag: u64, m: Msg) {
        let mut q = self.boxes.q.lock().unwrap();
        q.entry((self.rank, peer, tag)).or_default().push_back(m);
        self.boxes.cv.notify_all();
    }

    fn pop(&self, peer: Rank, tag: u64) -> Result<Msg> {
        let deadline = Instant::now() + self.timeout();
        let mut q = self.boxes.q.lock().unwrap();
        loop {
            if let Some(m) = q
                .get_mut(&(peer, self.rank, tag))
                .and_then(VecDeque::pop_front)
            {
                return Ok(m);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(HalError::Timeout {
                    what: format!("message from rank {peer} tag {tag}"),
                    millis: self.timeout().as_millis() as u64,
                });
            }
            q = self.boxes.cv.wait_timeout(q, deadline - now).unwrap().0;
        }
    }
}

impl Bootstrap for TestBootstrap {
    fn rank(&self) -> Rank {
        self.rank
    }
    fn size(&self) -> u32 {
        self.size
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(10)
    }
    fn send(&self, peer: Rank, tag: u64, data: &[u8]) -> Result<()> {
        self.push(peer, tag, Msg::Bytes(data.to_vec()));
        Ok(())
    }
    fn recv(&self, peer: Rank, tag: u64) -> Result<Vec<u8>> {
        match self.pop(peer, tag)? {
            Msg::Bytes(b) => Ok(b),
            Msg::Fds(_) => Err(HalError::Bootstrap("expected bytes, got fds".into())),
        }
    }
    fn all_gather(&self, _data: &[u8]) -> Result<Vec<Vec<u8>>> {
        Err(HalError::unsupported("test-bootstrap", "all_gather"))
    }
    fn broadcast(&self, _root: Rank, _data: &[u8]) -> Result<Vec<u8>> {
        Err(HalError::unsupported("test-bootstrap", "broadcast"))
    }
    fn barrier(&self) -> Result<()> {
        Err(HalError::unsupported("test-bootstrap", "barrier"))
    }
    fn send_fds(&self, peer: Rank, tag: u64, fds: &[OwnedFd]) -> Result<()> {
        let dup = fds
            .iter()
            .map(|f| f.try_clone().map_err(|e| HalError::io("dup", e)))
            .collect::<Result<Vec<_>>>()?;
        self.push(peer, tag, Msg::Fds(dup));
        Ok(())
    }
    fn recv_fds(&self, peer: Rank, tag: u64) -> Result<Vec<OwnedFd>> {
        match self.pop(peer, tag)? {
            Msg::Fds(f) => Ok(f),
            Msg::Bytes(_) => Err(HalError::Bootstrap("expected fds, got bytes".into())),
        }
    }
}
