//! How a rank hands its peers the pieces of a cuMem VMM buffer (PyTorch's expandable
//! segments; [`commhal_cuda_rt::pieces`]): one `SOCK_SEQPACKET` Unix socket per pair of
//! ranks, made at setup and handed over through the bootstrap, over which the owner
//! sends the list of pieces and one POSIX fd per piece.
//!
//! The call table says who sends what ([`crate::peers::Where::Vmm`]'s `to` mask), so
//! after a call's exchange every rank knows which messages to send and which to
//! receive, in which order (each rank's input before its output, a list sent once per
//! call). A message carries at most [`PIECES_PER_MESSAGE`] pieces; longer lists take
//! several. A send or receive waits at most the communicator's wait bound.

use std::os::fd::OwnedFd;
use std::sync::Mutex;
use std::time::Duration;

use commhal_cuda_rt::pieces::Piece;
use commhal_hal::bootstrap::Bootstrap;
use commhal_hal::bootstrap::fdpass::{recv_with_fds, send_with_fds, seqpacket_pair, set_timeouts};

use crate::error::{CollError, Result};

/// Pieces (and fds) in one message, well under the kernel's 253 fds.
pub const PIECES_PER_MESSAGE: usize = 128;
const MAGIC: u32 = 0x5056_4843; // "CHVP"
const HEADER: usize = 4 + 8 + 4 + 4 + 4;
const PIECE: usize = 24;
/// Tag of the sockets' hand-over at setup.
const TAG_LINKS: u64 = 0x5049_4543_0000;

/// The header and pieces of one message: list `key`, `total` pieces in all, this
/// message holding `pieces` from index `first`.
fn encode(key: u64, total: u32, first: u32, pieces: &[Piece]) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER + PIECE * pieces.len());
    v.extend_from_slice(&MAGIC.to_le_bytes());
    v.extend_from_slice(&key.to_le_bytes());
    v.extend_from_slice(&total.to_le_bytes());
    v.extend_from_slice(&first.to_le_bytes());
    v.extend_from_slice(&(pieces.len() as u32).to_le_bytes());
    for p in pieces {
        for w in [p.base, p.size, p.block_id] {
            v.extend_from_slice(&w.to_le_bytes());
        }
    }
    v
}

/// Inverse of [`encode`]: (key, total, first, pieces), or `None` when malformed.
fn decode(b: &[u8]) -> Option<(u64, u32, u32, Vec<Piece>)> {
    let word = |at: usize, n: usize| b.get(at..at + n);
    let u32_at = |at| word(at, 4).map(|s| u32::from_le_bytes(s.try_into().unwrap_or([0; 4])));
    let u64_at = |at| word(at, 8).map(|s| u64::from_le_bytes(s.try_into().unwrap_or([0; 8])));
    if u32_at(0)? != MAGIC {
        return None;
    }
    let (key, total, first, count) = (u64_at(4)?, u32_at(12)?, u32_at(16)?, u32_at(20)?);
    if b.len() != HEADER + PIECE * count as usize {
        return None;
    }
    let pieces = (0..count as usize)
        .map(|i| {
            let at = HEADER + PIECE * i;
            Some(Piece {
                base: u64_at(at)?,
                size: u64_at(at + 8)?,
                block_id: u64_at(at + 16)?,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some((key, total, first, pieces))
}

/// One socket per peer (none to itself).
#[derive(Debug)]
pub struct PieceLinks {
    rank: u32,
    socks: Vec<Option<Mutex<OwnedFd>>>,
}

impl PieceLinks {
    /// Make the sockets: for each pair, the lower rank creates the pair and sends one
    /// end to the higher. Collective over `boot` (every rank calls it); every
    /// receive later waits at most `timeout`.
    pub fn new(boot: &dyn Bootstrap, timeout: Duration) -> Result<PieceLinks> {
        let (rank, n) = (boot.rank(), boot.size());
        let mut socks: Vec<Option<Mutex<OwnedFd>>> = (0..n).map(|_| None).collect();
        for q in rank + 1..n {
            let (mine, theirs) = seqpacket_pair(timeout)?;
            boot.send_fds(q, TAG_LINKS, &[theirs])?;
            socks[q as usize] = Some(Mutex::new(mine));
        }
        for q in 0..rank {
            let mut fds = boot.recv_fds(q, TAG_LINKS)?;
            let Some(fd) = fds.pop().filter(|_| fds.is_empty()) else {
                return Err(CollError::invalid(format!(
                    "rank {q} handed over {} sockets for VMM buffers instead of one: every rank must run the same commhal build",
                    fds.len() + 1
                )));
            };
            set_timeouts(&fd, timeout)?;
            socks[q as usize] = Some(Mutex::new(fd));
        }
        Ok(PieceLinks { rank, socks })
    }

    fn sock(&self, peer: u32) -> Result<std::sync::MutexGuard<'_, OwnedFd>> {
        self.socks
            .get(peer as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| {
                CollError::invalid(format!("rank {} has no VMM link to rank {peer}", self.rank))
            })?
            .lock()
            .map_err(|_| CollError::invalid("VMM link lock poisoned"))
    }

    /// Send list `key` (`pieces`, with `fds[i]` the export of `pieces[i]`) to `peer`.
    pub fn send(&self, peer: u32, key: u64, pieces: &[Piece], fds: &[OwnedFd]) -> Result<()> {
        if pieces.is_empty() || pieces.len() != fds.len() {
            return Err(CollError::invalid(format!(
                "{} VMM pieces with {} fds",
                pieces.len(),
                fds.len()
            )));
        }
        let sock = self.sock(peer)?;
        let total = pieces.len() as u32;
        for (i, (p, f)) in pieces
            .chunks(PIECES_PER_MESSAGE)
            .zip(fds.chunks(PIECES_PER_MESSAGE))
            .enumerate()
        {
            let first = (i * PIECES_PER_MESSAGE) as u32;
            send_with_fds(&*sock, &encode(key, total, first, p), f).map_err(|e| {
                CollError::invalid(format!(
                    "sending rank {peer} the pieces of a VMM buffer: {e}"
                ))
            })?;
        }
        Ok(())
    }

    /// Receive the next list from `peer`: its key, pieces and one fd per piece.
    pub fn recv(&self, peer: u32) -> Result<(u64, Vec<Piece>, Vec<OwnedFd>)> {
        let sock = self.sock(peer)?;
        let mut pieces = Vec::new();
        let mut fds = Vec::new();
        let mut buf = vec![0u8; HEADER + PIECE * PIECES_PER_MESSAGE + 1];
        let mut key0 = None;
        loop {
            let (n, got) = recv_with_fds(&*sock, &mut buf).map_err(|e| {
                CollError::invalid(format!(
                    "waiting for rank {peer}'s VMM buffer pieces (it failed, or left, before sending them?): {e}"
                ))
            })?;
            if n == 0 {
                return Err(CollError::Peers(format!(
                    "rank {peer} closed its VMM link: it is gone"
                )));
            }
            let parsed = decode(&buf[..n]).filter(|(key, total, first, p)| {
                key0.is_none_or(|k| k == *key)
                    && *first as usize == pieces.len()
                    && p.len() == got.len()
                    && pieces.len() + p.len() <= *total as usize
            });
            let Some((key, total, _, p)) = parsed else {
                return Err(CollError::invalid(format!(
                    "rank {peer} sent a malformed VMM piece message ({n} bytes, {} fds): every rank must run the same commhal build",
                    got.len()
                )));
            };
            key0 = Some(key);
            pieces.extend(p);
            fds.extend(got);
            if pieces.len() == total as usize {
                return Ok((key, pieces, fds));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use commhal_hal::bootstrap::InProcBootstrap;

    fn piece(i: u64) -> Piece {
        Piece {
            base: 0x7000_0000 + i * (2 << 20),
            size: 2 << 20,
            block_id: 100 + i,
        }
    }

    #[test]
    fn messages_round_trip_and_refuse_garbage() {
        let p: Vec<_> = (0..3).map(piece).collect();
        let m = encode(9, 5, 2, &p);
        assert_eq!(decode(&m), Some((9, 5, 2, p)));
        assert_eq!(decode(&m[..m.len() - 1]), None);
        let mut bad = m.clone();
        bad[0] ^= 1;
        assert_eq!(decode(&bad), None);
    }

    /// Lists longer than one message arrive whole and in order, with a working fd
    /// per piece, between ranks that are threads.
    #[test]
    fn long_lists_pass_with_their_fds() {
        let n = 3;
        let count = PIECES_PER_MESSAGE + 5;
        InProcBootstrap::run(n, |b| {
            let links = PieceLinks::new(&b, Duration::from_secs(5)).unwrap();
            let pieces: Vec<_> = (0..count as u64).map(piece).collect();
            if b.rank() == 0 {
                let fds: Vec<OwnedFd> = (0..count)
                    .map(|_| std::fs::File::open("/dev/null").unwrap().into())
                    .collect();
                for q in 1..n {
                    links.send(q, 42, &pieces, &fds).unwrap();
                }
            } else {
                let (key, got, fds) = links.recv(0).unwrap();
                assert_eq!((key, got), (42, pieces));
                assert_eq!(fds.len(), count);
                let f = std::fs::File::from(fds.into_iter().next().unwrap());
                assert!(f.metadata().is_ok());
            }
        });
    }

    #[test]
    fn a_silent_peer_ends_the_wait() {
        InProcBootstrap::run(2, |b| {
            let links = PieceLinks::new(&b, Duration::from_millis(50)).unwrap();
            if b.rank() == 1 {
                let e = links.recv(0).unwrap_err().to_string();
                assert!(e.contains("rank 0"), "{e}");
            }
            b.barrier().unwrap();
        });
    }
}
