//! Out-of-band exchange between ranks: setup data, exports, barriers.
//!
//! Contract of every [`Bootstrap`]:
//! * `send(peer, tag, ..)` / `recv(peer, tag)` match by (peer, tag); messages with the
//!   same (peer, tag) arrive in send order; different tags never block each other.
//! * every blocking call is bounded by [`Bootstrap::timeout`] and fails with an error
//!   naming the rank that did not answer, on every rank that waits for it.
//! * collectives (`all_gather`, `broadcast`, `barrier`) must be called by every rank
//!   in the same order.

use std::os::fd::OwnedFd;
use std::time::Duration;

use crate::error::Result;
use crate::memory::Export;
use crate::topology::Rank;

/// Out-of-band messaging between the ranks of one communicator.
pub trait Bootstrap: Send + Sync + std::fmt::Debug {
    /// This rank.
    fn rank(&self) -> Rank;
    /// Number of ranks.
    fn size(&self) -> u32;
    /// Bound on every blocking call.
    fn timeout(&self) -> Duration;
    /// Send `data` to `peer` under `tag`.
    fn send(&self, peer: Rank, tag: u64, data: &[u8]) -> Result<()>;
    /// Receive the next message from `peer` under `tag`.
    fn recv(&self, peer: Rank, tag: u64) -> Result<Vec<u8>>;
    /// Every rank contributes `data`; returns all contributions indexed by rank.
    fn all_gather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>>;
    /// `root`'s `data` to every rank (non-roots' `data` is ignored).
    fn broadcast(&self, root: Rank, data: &[u8]) -> Result<Vec<u8>>;
    /// Returns when every rank has entered.
    fn barrier(&self) -> Result<()>;
    /// Pass file descriptors to a peer on the same host (`SCM_RIGHTS`).
    fn send_fds(&self, peer: Rank, tag: u64, fds: &[OwnedFd]) -> Result<()>;
    /// Receive file descriptors sent with [`Bootstrap::send_fds`].
    fn recv_fds(&self, peer: Rank, tag: u64) -> Result<Vec<OwnedFd>>;
}

/// Send an [`Export`] (bytes and descriptors) to `peer`.
pub fn send_export(b: &dyn Bootstrap, peer: Rank, tag: u64, export: &Export) -> Result<()> {
    let mut msg = Vec::with_capacity(16 + export.backend.len() + export.bytes.len());
    msg.extend_from_slice(&(export.backend.len() as u32).to_le_bytes());
    msg.extend_from_slice(export.backend.as_bytes());
    msg.extend_from_slice(&export.len.to_le_bytes());
    msg.extend_from_slice(&(export.fds.len() as u32).to_le_bytes());
    msg.extend_from_slice(&export.bytes);
    b.send(peer, tag, &msg)?;
    if !export.fds.is_empty() {
        b.send_fds(peer, tag, &export.fds)?;
    }
    Ok(())
}

/// Receive an [`Export`] sent with [`send_export`].
pub fn recv_export(b: &dyn Bootstrap, peer: Rank, tag: u64) -> Result<Export> {
    let msg = b.recv(peer, tag)?;
    let bad = || crate::HalError::Bootstrap(format!("malformed export message from rank {peer}"));
    let take = |m: &[u8], at: usize, n: usize| m.get(at..at + n).map(|s| s.to_vec());
    let name_len = u32::from_le_bytes(
        take(&msg, 0, 4)
            .ok_or_else(bad)?
            .try_into()
            .map_err(|_| bad())?,
    ) as usize;
    let backend = String::from_utf8(take(&msg, 4, name_len).ok_or_else(bad)?).map_err(|_| bad())?;
    let mut at = 4 + name_len;
    let len = u64::from_le_bytes(
        take(&msg, at, 8)
            .ok_or_else(bad)?
            .try_into()
            .map_err(|_| bad())?,
    );
    at += 8;
    let nfds = u32::from_le_bytes(
        take(&msg, at, 4)
            .ok_or_else(bad)?
            .try_into()
            .map_err(|_| bad())?,
    ) as usize;
    at += 4;
    let bytes = msg[at..].to_vec();
    let fds = if nfds > 0 {
        b.recv_fds(peer, tag)?
    } else {
        Vec::new()
    };
    if fds.len() != nfds {
        return Err(crate::HalError::Bootstrap(format!(
            "rank {peer} announced {nfds} descriptors but sent {}",
            fds.len()
        )));
    }
    Ok(Export {
        backend,
        len,
        bytes,
        fds,
    })
}
