//! `all_gather`, `broadcast` and `barrier` on top of point-to-point messages, shared by
//! every bootstrap. Each uses its own reserved tag; because messages of one
//! (peer, tag) stay in order, consecutive calls match up as long as every rank calls
//! the collectives in the same order. Direct all-to-all: O(n²) small messages, fine
//! for setup traffic; bulk data belongs to a transport.

use std::time::{Duration, Instant};

use std::os::fd::OwnedFd;

use crate::bootstrap::mailbox::Mailbox;
use crate::bootstrap::{RESERVED_TAGS, check_peer, check_user_tag};
use crate::error::{HalError, Result};
use crate::topology::Rank;

pub(crate) const TAG_ALL_GATHER: u64 = RESERVED_TAGS | 1;
pub(crate) const TAG_BROADCAST: u64 = RESERVED_TAGS | 2;
pub(crate) const TAG_BARRIER: u64 = RESERVED_TAGS | 3;

/// Point-to-point messaging without the user-tag check, with explicit deadlines.
pub(crate) trait Exchange {
    fn me(&self) -> Rank;
    fn n(&self) -> u32;
    fn limit(&self) -> Duration;
    fn raw_send(&self, peer: Rank, tag: u64, data: &[u8]) -> Result<()>;
    fn raw_recv(
        &self,
        peer: Rank,
        tag: u64,
        deadline: Instant,
        what: &dyn Fn() -> String,
    ) -> Result<Vec<u8>>;
}

/// [`crate::bootstrap::Bootstrap::send`] for every bootstrap: user tags only.
pub(crate) fn send(x: &impl Exchange, peer: Rank, tag: u64, data: &[u8]) -> Result<()> {
    check_user_tag(tag)?;
    x.raw_send(peer, tag, data)
}

/// [`crate::bootstrap::Bootstrap::recv`] for every bootstrap: user tags only, waits at
/// most the bootstrap's timeout.
pub(crate) fn recv(x: &impl Exchange, peer: Rank, tag: u64) -> Result<Vec<u8>> {
    check_user_tag(tag)?;
    let n = x.n();
    x.raw_recv(peer, tag, Instant::now() + x.limit(), &|| {
        format!("a message from rank {peer} of {n} (tag {tag})")
    })
}

/// [`crate::bootstrap::Bootstrap::recv_fds`] for every bootstrap: the next descriptor
/// batch from `peer` under a user `tag`, taken from this rank's `mailbox`, waiting at
/// most the bootstrap's timeout.
pub(crate) fn recv_fds(
    x: &impl Exchange,
    mailbox: &Mailbox,
    peer: Rank,
    tag: u64,
) -> Result<Vec<OwnedFd>> {
    check_user_tag(tag)?;
    let n = x.n();
    check_peer(peer, n)?;
    let limit = x.limit();
    mailbox.take_fds(
        peer,
        tag,
        Instant::now() + limit,
        limit.as_millis() as u64,
        &|| format!("descriptors from rank {peer} of {n} (tag {tag})"),
    )
}

/// Every rank's `data`, indexed by rank.
pub(crate) fn all_gather(x: &impl Exchange, data: &[u8]) -> Result<Vec<Vec<u8>>> {
    gather_with(x, TAG_ALL_GATHER, data, "contribute to all_gather")
}

/// Returns once every rank has entered.
pub(crate) fn barrier(x: &impl Exchange) -> Result<()> {
    gather_with(x, TAG_BARRIER, &[], "enter the barrier").map(|_| ())
}

/// `root`'s data on every rank.
pub(crate) fn broadcast(x: &impl Exchange, root: Rank, data: &[u8]) -> Result<Vec<u8>> {
    let n = x.n();
    if root >= n {
        return Err(HalError::invalid(format!(
            "broadcast root {root} does not exist: the communicator has {n} ranks"
        )));
    }
    if x.me() == root {
        for p in (0..n).filter(|&p| p != root) {
            x.raw_send(p, TAG_BROADCAST, data)?;
        }
        Ok(data.to_vec())
    } else {
        let deadline = Instant::now() + x.limit();
        x.raw_recv(root, TAG_BROADCAST, deadline, &|| {
            format!("rank {root} of {n} to broadcast")
        })
    }
}

fn gather_with(x: &impl Exchange, tag: u64, data: &[u8], doing: &str) -> Result<Vec<Vec<u8>>> {
    let (me, n) = (x.me(), x.n());
    for p in (0..n).filter(|&p| p != me) {
        x.raw_send(p, tag, data)?;
    }
    let deadline = Instant::now() + x.limit();
    let mut out = Vec::with_capacity(n as usize);
    for p in 0..n {
        if p == me {
            out.push(data.to_vec());
        } else {
            out.push(x.raw_recv(p, tag, deadline, &|| format!("rank {p} of {n} to {doing}"))?);
        }
    }
    Ok(out)
}
