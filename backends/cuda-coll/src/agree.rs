//! The call table: one page of host shared memory per communicator where every rank
//! publishes, for each collective that needs its peers' buffers, what it passes (the
//! call's signature and where its buffers live) and reads everyone else's.
//!
//! Every rank of a cuda-coll communicator is a process on the same host, so the table
//! is a memfd that rank 0 creates and passes to the others through the bootstrap; no
//! socket is touched per call. Rank r's entry for its k-th exchange lives in slot
//! `[r][k % 2]`: the payload first, then the sequence number `k` with release order.
//! A reader waits (bounded) until a peer's sequence word for its slot reads `k`, with
//! acquire order, then copies the payload.
//!
//! **Why two slots suffice.** Rank r writes its slot for call k + 1 only after its call
//! k exchange saw every peer's sequence reach k, and a peer publishes k only after it
//! finished reading everybody's entries of call k - 1 — the contents of the slot rank r
//! now overwrites. A peer that still waits for call k finds r's call-k entry intact in
//! the other slot (r cannot be at call k + 2 before that peer published k + 1).
//!
//! **Agreement.** After an exchange every rank holds the same vector of entries, so
//! any decision computed from it (which buffers are new, whether the signatures agree)
//! comes out the same on every rank without another round.
//!
//! **A peer that never publishes** fails the exchange: at once when the bootstrap
//! learns that the peer is gone (its [`Bootstrap::peer_failure`] flag: the peer's
//! connection closed or it aborted), otherwise after the timeout, naming the rank.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use commhal_backend_host_emu::{ShmBuf, ShmMapping, ShmRegion};
use commhal_hal::bootstrap::Bootstrap;
use commhal_hal::{AbortFlag, Export};

use crate::error::{CollError, Result};

/// Bytes of one slot: the sequence word, the payload length, the payload.
pub const SLOT_BYTES: u64 = 512;
/// Largest payload of one entry.
pub const MAX_PAYLOAD: usize = (SLOT_BYTES - 16) as usize;
/// Tag of the memfd's hand-over at setup.
const TAG_TABLE: u64 = 0x4147_5245_0000;

/// One communicator's call table.
#[derive(Debug)]
pub struct CallTable {
    shm: Arc<ShmBuf>,
    rank: u32,
    n: u32,
    /// Exchanges made so far by this rank (the next one is `done + 1`).
    done: AtomicU64,
    timeout: Duration,
    /// The bootstrap's peer-failure flag, where it has one.
    failure: Option<Arc<AbortFlag>>,
}

fn slot_off(rank: u32, seq: u64) -> u64 {
    (u64::from(rank) * 2 + (seq & 1)) * SLOT_BYTES
}

impl CallTable {
    /// Create (rank 0) or map (the others) the table. Collective over `boot`. Waits for
    /// a peer's entry end after `timeout` with an error naming that peer.
    pub fn new(boot: &dyn Bootstrap, timeout: Duration) -> Result<CallTable> {
        let (rank, n) = (boot.rank(), boot.size());
        let bytes = SLOT_BYTES * 2 * u64::from(n.max(1));
        let shm = if rank == 0 {
            let region = ShmRegion::alloc(bytes)?;
            let export = region.export()?;
            let _ = boot.all_gather(&export.bytes)?;
            for p in 1..n {
                let e = region.export()?;
                boot.send_fds(p, TAG_TABLE, &e.fds)?;
            }
            region.buf().clone()
        } else {
            let all = boot.all_gather(&[])?;
            let header = all.first().cloned().unwrap_or_default();
            let fds = boot.recv_fds(0, TAG_TABLE)?;
            let mapping = ShmMapping::map(Export {
                backend: commhal_backend_host_emu::BACKEND.to_string(),
                len: bytes,
                bytes: header,
                fds,
            })?;
            mapping.buf().clone()
        };
        boot.barrier()?;
        Ok(CallTable {
            shm,
            rank,
            n,
            done: AtomicU64::new(0),
            timeout,
            failure: boot.peer_failure(),
        })
    }

    fn seq_word(&self, rank: u32, seq: u64) -> Result<&AtomicU64> {
        Ok(self.shm.atomic_u64(slot_off(rank, seq))?)
    }

    /// Publish `mine` as this rank's entry of the next exchange and return every
    /// rank's entry of it (this rank's included, in rank order). Fails, naming the
    /// rank, when a peer does not publish within the timeout.
    pub fn exchange(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        if mine.len() > MAX_PAYLOAD {
            return Err(CollError::invalid(format!(
                "call-table entry of {} bytes exceeds the slot's {MAX_PAYLOAD}",
                mine.len()
            )));
        }
        let seq = self.done.load(Ordering::Relaxed) + 1;
        let off = slot_off(self.rank, seq);
        self.shm
            .write(off + 8, &(mine.len() as u64).to_le_bytes())?;
        self.shm.write(off + 16, mine)?;
        self.seq_word(self.rank, seq)?.store(seq, Ordering::Release);
        let mut out = Vec::with_capacity(self.n as usize);
        let start = Instant::now();
        for p in 0..self.n {
            let word = self.seq_word(p, seq)?;
            let mut spins = 0u32;
            while word.load(Ordering::Acquire) != seq {
                spins = spins.saturating_add(1);
                if spins > 256 {
                    std::thread::yield_now();
                    if let Some(e) = self.failure.as_ref().and_then(|f| f.check().err()) {
                        return Err(CollError::invalid(format!(
                            "collective #{seq} of this communicator: {e}"
                        )));
                    }
                    if start.elapsed() > self.timeout {
                        return Err(CollError::invalid(format!(
                            "rank {p} did not reach collective #{seq} of this communicator within {:?}: it died, hangs, or called a different sequence of collectives than rank {}",
                            self.timeout, self.rank
                        )));
                    }
                } else {
                    std::hint::spin_loop();
                }
            }
            let o = slot_off(p, seq);
            let mut len = [0u8; 8];
            self.shm.read(o + 8, &mut len)?;
            let len = (u64::from_le_bytes(len) as usize).min(MAX_PAYLOAD);
            let mut entry = vec![0u8; len];
            self.shm.read(o + 16, &mut entry)?;
            out.push(entry);
        }
        self.done.store(seq, Ordering::Relaxed);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use commhal_hal::bootstrap::InProcBootstrap;

    /// Every rank's table, one thread per rank; `f(rank, table)` on each.
    fn on_ranks<T: Send>(
        n: u32,
        timeout: Duration,
        f: impl Fn(u32, CallTable) -> T + Sync,
    ) -> Vec<T> {
        let boots = InProcBootstrap::create(n);
        std::thread::scope(|s| {
            let hs: Vec<_> = boots
                .into_iter()
                .map(|b| {
                    let f = &f;
                    s.spawn(move || {
                        let t = CallTable::new(&b, timeout).expect("table");
                        f(b.rank(), t)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().expect("rank")).collect()
        })
    }

    #[test]
    fn every_rank_sees_every_entry_of_every_call_in_order() {
        let calls = 300u32;
        let got = on_ranks(4, Duration::from_secs(20), |r, t| {
            let mut seen = Vec::new();
            for k in 0..calls {
                // entries of different lengths, so a stale length would show
                let mine = vec![(r * 7 + k) as u8; (1 + (r + k) % 40) as usize];
                seen.push(t.exchange(&mine).expect("exchange"));
            }
            seen
        });
        for seen in &got {
            for (k, all) in seen.iter().enumerate() {
                for (p, e) in all.iter().enumerate() {
                    let (p, k) = (p as u32, k as u32);
                    assert_eq!(e, &vec![(p * 7 + k) as u8; (1 + (p + k) % 40) as usize]);
                }
            }
        }
        assert_eq!(got[0], got[3], "every rank holds the same entries");
    }

    #[test]
    fn a_missing_peer_is_named_after_the_timeout() {
        let got = on_ranks(3, Duration::from_millis(300), |r, t| {
            t.exchange(b"first").expect("first call");
            if r == 2 {
                return String::new(); // rank 2 never makes the second call
            }
            t.exchange(b"second").unwrap_err().to_string()
        });
        for e in &got[..2] {
            assert!(e.contains("rank 2 did not reach collective #2"), "{e}");
        }
    }

    #[test]
    fn oversized_entries_are_refused() {
        let got = on_ranks(1, Duration::from_secs(1), |_, t| {
            t.exchange(&vec![0u8; MAX_PAYLOAD + 1])
                .unwrap_err()
                .to_string()
        });
        assert!(got[0].contains("exceeds"), "{}", got[0]);
    }
}
