//! [`InProcBootstrap`]: ranks that are threads of one process. Same contract as the
//! TCP bootstrap: (peer, tag) FIFO order, every wait bounded by the timeout, and a
//! rank whose bootstrap was dropped is [`HalError::PeerDead`] to its peers.
//! Descriptors are passed by duplicating them (`dup`), so sender and receiver each
//! own a descriptor for the same open file.

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::bootstrap::collectives::{self, Exchange};
use crate::bootstrap::mailbox::Mailbox;
use crate::bootstrap::{Bootstrap, check_peer, check_user_tag, default_timeout};
use crate::error::{HalError, Result};
use crate::topology::Rank;

/// One rank of an in-process group. Move each to its own thread.
#[derive(Debug)]
pub struct InProcBootstrap {
    rank: Rank,
    size: u32,
    timeout: Duration,
    boxes: Arc<Vec<Mailbox>>,
}

impl InProcBootstrap {
    /// `n` connected ranks (index = rank) with the default timeout
    /// ([`crate::bootstrap::default_timeout`]).
    pub fn create(n: u32) -> Vec<InProcBootstrap> {
        Self::create_with_timeout(n, default_timeout())
    }

    /// `n` connected ranks whose blocking calls give up after `timeout`.
    pub fn create_with_timeout(n: u32, timeout: Duration) -> Vec<InProcBootstrap> {
        let boxes: Arc<Vec<Mailbox>> = Arc::new((0..n).map(|_| Mailbox::default()).collect());
        (0..n)
            .map(|rank| InProcBootstrap {
                rank,
                size: n,
                timeout,
                boxes: boxes.clone(),
            })
            .collect()
    }

    /// Run `f` on every rank of an in-process world of `n`, one thread each; the
    /// results in rank order. A rank that panics fails the call with that panic.
    pub fn run<T: Send>(n: u32, f: impl Fn(InProcBootstrap) -> T + Sync) -> Vec<T> {
        std::thread::scope(|s| {
            let f = &f;
            let hs: Vec<_> = Self::create(n)
                .into_iter()
                .map(|b| s.spawn(move || f(b)))
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        })
    }

    fn check_alive(&self, peer: Rank) -> Result<()> {
        // Our own mailbox records which peers have dropped out.
        match self.boxes[self.rank as usize].dead_reason(peer) {
            Some(why) if peer != self.rank => Err(HalError::PeerDead {
                rank: peer,
                detail: why,
            }),
            _ => Ok(()),
        }
    }
}

impl Drop for InProcBootstrap {
    fn drop(&mut self) {
        for (r, b) in self.boxes.iter().enumerate() {
            if r as u32 != self.rank {
                b.mark_dead(self.rank, "its InProcBootstrap was dropped");
            }
        }
    }
}

impl Exchange for InProcBootstrap {
    fn me(&self) -> Rank {
        self.rank
    }
    fn n(&self) -> u32 {
        self.size
    }
    fn limit(&self) -> Duration {
        self.timeout
    }
    fn raw_send(&self, peer: Rank, tag: u64, data: &[u8]) -> Result<()> {
        check_peer(peer, self.size)?;
        self.check_alive(peer)?;
        self.boxes[peer as usize].put(self.rank, tag, data.to_vec());
        Ok(())
    }
    fn raw_recv(
        &self,
        peer: Rank,
        tag: u64,
        deadline: Instant,
        what: &dyn Fn() -> String,
    ) -> Result<Vec<u8>> {
        check_peer(peer, self.size)?;
        self.boxes[self.rank as usize].take(
            peer,
            tag,
            deadline,
            self.timeout.as_millis() as u64,
            what,
        )
    }
}

impl Bootstrap for InProcBootstrap {
    fn rank(&self) -> Rank {
        self.rank
    }
    fn size(&self) -> u32 {
        self.size
    }
    fn timeout(&self) -> Duration {
        self.timeout
    }
    fn send(&self, peer: Rank, tag: u64, data: &[u8]) -> Result<()> {
        collectives::send(self, peer, tag, data)
    }
    fn recv(&self, peer: Rank, tag: u64) -> Result<Vec<u8>> {
        collectives::recv(self, peer, tag)
    }
    fn all_gather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        collectives::all_gather(self, data)
    }
    fn broadcast(&self, root: Rank, data: &[u8]) -> Result<Vec<u8>> {
        collectives::broadcast(self, root, data)
    }
    fn barrier(&self) -> Result<()> {
        collectives::barrier(self)
    }
    fn send_fds(&self, peer: Rank, tag: u64, fds: &[OwnedFd]) -> Result<()> {
        check_user_tag(tag)?;
        check_peer(peer, self.size)?;
        self.check_alive(peer)?;
        let dups = fds
            .iter()
            .map(|fd| fd.try_clone())
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(|e| HalError::io(format!("duplicating descriptors for rank {peer}"), e))?;
        self.boxes[peer as usize].put_fds(self.rank, tag, dups);
        Ok(())
    }
    fn recv_fds(&self, peer: Rank, tag: u64) -> Result<Vec<OwnedFd>> {
        collectives::recv_fds(self, &self.boxes[self.rank as usize], peer, tag)
    }
}
