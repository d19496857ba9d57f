//! Out-of-band exchange between ranks: setup data, exports, barriers.
//!
//! Contract of every [`Bootstrap`]:
//! * `send(peer, tag, ..)` / `recv(peer, tag)` match by (peer, tag); messages with the
//!   same (peer, tag) arrive in send order; different tags never block each other.
//! * every blocking call is bounded by [`Bootstrap::timeout`] and fails with an error
//!   naming the rank that did not answer, on every rank that waits for it.
//! * collectives (`all_gather`, `broadcast`, `barrier`) must be called by every rank
//!   in the same order.
//! * tags at or above [`RESERVED_TAGS`] belong to the bootstrap's own collectives;
//!   `send`/`recv` reject them.
//!
//! Implementations:
//! * [`TcpBootstrap`]: one rank per process, any number of hosts, rendezvous at a
//!   root named by a [`UniqueId`] (address + random secret); descriptors pass over an
//!   abstract Unix socket ([`fdpass`]) between processes of one host.
//! * [`InProcBootstrap`]: ranks that are threads of one process.
//! * [`env`](mod@env): where rank, world size and rendezvous come from (torchrun, Open MPI,
//!   Slurm, `commhal launch`).

mod collectives;
pub mod env;
pub mod fdpass;
mod gate;
mod inproc;
mod mailbox;
mod rendezvous;
mod split;
mod tcp;
pub(crate) mod unique_id;
pub(crate) mod wire;

pub use env::{LaunchEnv, Launcher, Rendezvous};
pub use inproc::InProcBootstrap;
pub use split::{SPLIT_USER_TAGS, SplitBootstrap, split};
pub use tcp::TcpBootstrap;
pub use unique_id::UniqueId;
pub use wire::MAX_MESSAGE;

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use crate::abort::AbortFlag;
use crate::error::Result;
use crate::memory::Export;
use crate::settings::Env;
use crate::settings::launch::BOOTSTRAP_TIMEOUT_MS;
use crate::topology::Rank;

/// Tags at or above this value are reserved for the bootstrap's own collectives.
pub const RESERVED_TAGS: u64 = 0xFFFF_FFFF_0000_0000;

/// Default bound on every blocking bootstrap step (`COMMHAL_BOOTSTRAP_TIMEOUT_MS`'s
/// declared default).
pub fn default_timeout() -> Duration {
    BOOTSTRAP_TIMEOUT_MS.default_duration()
}

/// The bootstrap timeout from `COMMHAL_BOOTSTRAP_TIMEOUT_MS`, else [`default_timeout`].
pub fn timeout_from_env() -> Result<Duration> {
    timeout_in(&crate::settings::process_env)
}

/// [`timeout_from_env`] with `env` answering for each variable.
pub fn timeout_in(env: Env<'_>) -> Result<Duration> {
    Ok(BOOTSTRAP_TIMEOUT_MS.duration_or_default_in(env)?)
}

/// Reject user tags in the reserved range.
pub(crate) fn check_user_tag(tag: u64) -> Result<()> {
    if tag >= RESERVED_TAGS {
        Err(crate::HalError::invalid(format!(
            "tag {tag:#x} is reserved for the bootstrap's own collectives (tags >= {RESERVED_TAGS:#x}): use a smaller tag"
        )))
    } else {
        Ok(())
    }
}

/// Reject a peer outside the communicator.
pub(crate) fn check_peer(peer: Rank, size: u32) -> Result<()> {
    if peer >= size {
        Err(crate::HalError::invalid(format!(
            "peer rank {peer} does not exist: the communicator has {size} ranks (0..{size})"
        )))
    } else {
        Ok(())
    }
}

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
    /// The flag this bootstrap raises when it learns that a peer is gone (its
    /// connection closed, or it aborted the job), for communicators to poll in their
    /// waits; `None` when the bootstrap cannot tell (ranks that are threads).
    fn peer_failure(&self) -> Option<Arc<AbortFlag>> {
        None
    }
    /// Tell every peer, best effort and without blocking, that this rank gives up the
    /// job because of `why`: their [`Bootstrap::peer_failure`] flags are raised naming
    /// `origin` (the rank whose failure caused this, when known) or else this rank.
    /// A no-op where peers cannot be told.
    fn abort_job(&self, origin: Option<Rank>, why: &str) {
        let _ = (origin, why);
    }
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
    let (backend, len, nfds, bytes) = parse_export_message(peer, &msg)?;
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

/// Split an export message from `peer` into (backend, length, descriptor count,
/// backend bytes).
pub(crate) fn parse_export_message(
    peer: Rank,
    msg: &[u8],
) -> Result<(String, u64, usize, Vec<u8>)> {
    let bad = || crate::HalError::Bootstrap(format!("malformed export message from rank {peer}"));
    let field = |at: usize, n: usize| -> Result<&[u8]> {
        at.checked_add(n)
            .and_then(|end| msg.get(at..end))
            .ok_or_else(bad)
    };
    let u32_at = |at: usize| -> Result<u32> {
        let b = field(at, 4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let name_len = u32_at(0)? as usize;
    let backend = String::from_utf8(field(4, name_len)?.to_vec()).map_err(|_| bad())?;
    let at = 4 + name_len;
    let mut len = [0u8; 8];
    len.copy_from_slice(field(at, 8)?);
    let nfds = u32_at(at + 8)? as usize;
    let bytes = msg[at + 12..].to_vec();
    Ok((backend, u64::from_le_bytes(len), nfds, bytes))
}
