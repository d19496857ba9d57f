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
//! **The signature log** catches calls that differ between ranks on the path that needs
//! no exchange (the packet kernels): every call appends its signature to this rank's
//! ring of [`SIG_RING`] entries without waiting for anyone, and later calls (and the
//! stream sync) compare what the peers have appended since with this rank's own
//! history. A mismatch is reported from the next call or sync on every rank that sees
//! it, naming the call, the rank and the field; the mismatched call itself is already
//! queued, and its kernels time out against the device wait bound. Entries carry a
//! sequence stamp written before and after the bytes (a seqlock), so a reader skips an
//! entry its owner overwrote meanwhile rather than reading it torn.
//!
//! **A peer that never publishes** fails the exchange: at once when the bootstrap
//! learns that the peer is gone (its [`Bootstrap::peer_failure`] flag: the peer's
//! connection closed or it aborted), otherwise after the timeout, naming the rank.

use std::sync::atomic::{AtomicU64, Ordering, fence};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use commhal_backend_host_emu::{ShmBuf, ShmMapping, ShmRegion};
use commhal_hal::bootstrap::Bootstrap;
use commhal_hal::{AbortFlag, Export};

use crate::error::{CollError, Result};
use crate::peers::{SIGNATURE_BYTES, Signature};

/// Bytes of one slot: the sequence word, the payload length, the payload.
pub const SLOT_BYTES: u64 = 512;
/// Largest payload of one entry.
pub const MAX_PAYLOAD: usize = (SLOT_BYTES - 16) as usize;
/// Signatures each rank's log keeps (a peer more than this many calls behind is
/// checked only on the calls still in the log).
pub const SIG_RING: u64 = 64;
/// Bytes of one log entry: the stamp, the signature.
const SIG_ENTRY: u64 = 8 + SIGNATURE_BYTES as u64;
/// Bytes of one rank's log: its call count, then the ring.
const SIG_LOG: u64 = 8 + SIG_RING * SIG_ENTRY;
/// Receives a receiver may post ahead of its sender's sends, per ordered pair.
pub const POST_RING: u64 = 16;
/// Bytes of one posting: the stamp, the length, the payload.
const POST_SLOT: u64 = 256;
/// Largest posting payload.
pub const MAX_POST: usize = (POST_SLOT - 16) as usize;
/// Bytes of one ordered pair's postings: the sender's consumed count, then the ring.
const POST_PAIR: u64 = 8 + POST_RING * POST_SLOT;
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
    /// The flags every wait watches: the bootstrap's peer-failure flag (where it has
    /// one) and the communicator's own abort flag.
    failure: Vec<Arc<AbortFlag>>,
    /// This rank's side of the signature log.
    log: Mutex<SigLog>,
}

/// What this rank remembers of its own signatures and of what it checked.
#[derive(Debug)]
struct SigLog {
    /// Calls recorded so far.
    calls: u64,
    /// Its last [`SIG_RING`] signatures, by call number modulo the ring.
    mine: Vec<[u8; SIGNATURE_BYTES]>,
    /// Per rank: the last call of that rank compared (0: none).
    checked: Vec<u64>,
}

fn slot_off(rank: u32, seq: u64) -> u64 {
    (u64::from(rank) * 2 + (seq & 1)) * SLOT_BYTES
}

impl CallTable {
    /// Create (rank 0) or map (the others) the table. Collective over `boot`. Waits for
    /// a peer's entry end after `timeout` with an error naming that peer, or at once
    /// when the bootstrap sees a peer die or `abort` (this communicator's) is raised.
    pub fn new(
        boot: &dyn Bootstrap,
        timeout: Duration,
        abort: Arc<AbortFlag>,
    ) -> Result<CallTable> {
        let (rank, n) = (boot.rank(), boot.size());
        let n64 = u64::from(n.max(1));
        let bytes = (SLOT_BYTES * 2 + SIG_LOG) * n64 + POST_PAIR * n64 * n64;
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
            failure: boot.peer_failure().into_iter().chain([abort]).collect(),
            log: Mutex::new(SigLog {
                calls: 0,
                mine: vec![[0; SIGNATURE_BYTES]; SIG_RING as usize],
                checked: vec![0; n as usize],
            }),
        })
    }

    /// Why the bootstrap gave up on a peer, once it did.
    pub fn peer_failure(&self) -> Option<String> {
        self.failure
            .iter()
            .find_map(|f| f.error())
            .map(|e| e.to_string())
    }

    /// Offset of rank `r`'s signature log.
    fn log_off(&self, r: u32) -> u64 {
        SLOT_BYTES * 2 * u64::from(self.n) + u64::from(r) * SIG_LOG
    }

    fn log_lock(&self) -> Result<std::sync::MutexGuard<'_, SigLog>> {
        self.log
            .lock()
            .map_err(|_| CollError::invalid("call-table signature log poisoned by a panic"))
    }

    /// Offset of the postings of the pair `sender -> receiver`.
    fn pair_off(&self, sender: u32, receiver: u32) -> u64 {
        (SLOT_BYTES * 2 + SIG_LOG) * u64::from(self.n)
            + (u64::from(sender) * u64::from(self.n) + u64::from(receiver)) * POST_PAIR
    }

    /// Wait (bounded, watching the peer-failure flag) until `ready()`; `who` says what
    /// is waited for, in the error.
    fn wait_until(&self, who: &str, mut ready: impl FnMut() -> Result<bool>) -> Result<()> {
        let start = Instant::now();
        let mut spins = 0u32;
        while !ready()? {
            spins = spins.saturating_add(1);
            if spins > 256 {
                std::thread::yield_now();
                if let Some(e) = self.failure.iter().find_map(|f| f.check().err()) {
                    return Err(CollError::Peers(format!("waiting for {who}: {e}")));
                }
                if start.elapsed() > self.timeout {
                    return Err(CollError::Peers(format!(
                        "waited {:?} for {who}: that rank died, hangs, or called a different sequence of collectives, sends and receives than rank {}",
                        self.timeout, self.rank
                    )));
                }
            } else {
                std::hint::spin_loop();
            }
        }
        Ok(())
    }

    /// As the receiver of the pair `sender -> this rank`, post receive number `seq`
    /// (1, 2, ... per pair) with `payload` (where the data goes). Waits (bounded) while
    /// the sender is [`POST_RING`] receives behind.
    pub fn post(&self, sender: u32, seq: u64, payload: &[u8]) -> Result<()> {
        if payload.len() > MAX_POST {
            return Err(CollError::invalid(format!(
                "posting of {} bytes exceeds the slot's {MAX_POST}",
                payload.len()
            )));
        }
        let pair = self.pair_off(sender, self.rank);
        let consumed = self.shm.atomic_u64(pair)?;
        self.wait_until(
            &format!("rank {sender} to take this rank's earlier receives"),
            || Ok(consumed.load(Ordering::Acquire) + POST_RING >= seq),
        )?;
        let slot = pair + 8 + (seq % POST_RING) * POST_SLOT;
        let stamp = self.shm.atomic_u64(slot)?;
        stamp.store(2 * seq - 1, Ordering::Relaxed);
        fence(Ordering::Release);
        self.shm
            .write(slot + 8, &(payload.len() as u64).to_le_bytes())?;
        self.shm.write(slot + 16, payload)?;
        stamp.store(2 * seq, Ordering::Release);
        Ok(())
    }

    /// As the sender of the pair `this rank -> receiver`, take the receiver's posting
    /// number `seq` (waits, bounded, until it is there).
    pub fn take_post(&self, receiver: u32, seq: u64) -> Result<Vec<u8>> {
        let pair = self.pair_off(self.rank, receiver);
        let slot = pair + 8 + (seq % POST_RING) * POST_SLOT;
        let stamp = self.shm.atomic_u64(slot)?;
        self.wait_until(
            &format!("rank {receiver} to post its receive #{seq} from this rank"),
            || Ok(stamp.load(Ordering::Acquire) == 2 * seq),
        )?;
        let mut len = [0u8; 8];
        self.shm.read(slot + 8, &mut len)?;
        let len = (u64::from_le_bytes(len) as usize).min(MAX_POST);
        let mut payload = vec![0u8; len];
        self.shm.read(slot + 16, &mut payload)?;
        self.shm.atomic_u64(pair)?.store(seq, Ordering::Release);
        Ok(payload)
    }

    /// Append this call's signature to this rank's log (no waiting).
    pub fn record(&self, sig: &Signature) -> Result<()> {
        let mut log = self.log_lock()?;
        log.calls += 1;
        let k = log.calls;
        let bytes = sig.to_bytes();
        log.mine[(k % SIG_RING) as usize] = bytes;
        let base = self.log_off(self.rank);
        let entry = base + 8 + (k % SIG_RING) * SIG_ENTRY;
        let stamp = self.shm.atomic_u64(entry)?;
        // seqlock: odd while the bytes change, 2k once they hold call k
        stamp.store(2 * k - 1, Ordering::Relaxed);
        fence(Ordering::Release);
        self.shm.write(entry + 8, &bytes)?;
        stamp.store(2 * k, Ordering::Release);
        self.shm.atomic_u64(base)?.store(k, Ordering::Release);
        Ok(())
    }

    /// Compare every call the peers recorded since the last check (and this rank has
    /// recorded too) with this rank's: the first difference as an error naming the
    /// call, the rank and the field.
    pub fn check_signatures(&self) -> Result<()> {
        let mut log = self.log_lock()?;
        let calls = log.calls;
        for p in (0..self.n).filter(|&p| p != self.rank) {
            let base = self.log_off(p);
            let theirs = self.shm.atomic_u64(base)?.load(Ordering::Acquire);
            let upto = theirs.min(calls);
            let from = log.checked[p as usize] + 1;
            for k in from.max(calls.saturating_sub(SIG_RING - 1)).max(1)..=upto {
                let entry = base + 8 + (k % SIG_RING) * SIG_ENTRY;
                let stamp = self.shm.atomic_u64(entry)?;
                if stamp.load(Ordering::Acquire) != 2 * k {
                    continue; // overwritten by a later call of that rank, or being written
                }
                let mut b = [0u8; SIGNATURE_BYTES];
                self.shm.read(entry + 8, &mut b)?;
                fence(Ordering::Acquire);
                if stamp.load(Ordering::Relaxed) != 2 * k {
                    continue;
                }
                let mine = Signature::from_bytes(&log.mine[(k % SIG_RING) as usize]);
                if let Some(m) = mine.mismatch(&Signature::from_bytes(&b), p, self.rank) {
                    return Err(CollError::invalid(format!(
                        "collective #{k} on the caller's buffers: {m}"
                    )));
                }
            }
            log.checked[p as usize] = log.checked[p as usize].max(upto);
        }
        Ok(())
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
        for p in 0..self.n {
            let word = self.seq_word(p, seq)?;
            self.wait_until(
                &format!("rank {p} to reach collective #{seq} of this communicator"),
                || Ok(word.load(Ordering::Acquire) == seq),
            )?;
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
        InProcBootstrap::run(n, |b| {
            let t = CallTable::new(&b, timeout, Arc::new(AbortFlag::new())).expect("table");
            f(b.rank(), t)
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
            assert!(e.contains("for rank 2 to reach collective #2"), "{e}");
        }
    }

    #[test]
    fn this_communicators_abort_ends_its_waits_and_no_other() {
        let got = InProcBootstrap::run(2, |b| {
            let (mine, sibling) = (Arc::new(AbortFlag::new()), Arc::new(AbortFlag::new()));
            let t = CallTable::new(&b, Duration::from_secs(20), mine.clone()).expect("table");
            let u = CallTable::new(&b, Duration::from_secs(20), sibling).expect("sibling");
            t.exchange(b"first").expect("first call");
            if b.rank() == 1 {
                return (String::new(), None); // never makes the second call
            }
            let t0 = Instant::now();
            let aborter = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                mine.abort("ncclCommAbort");
            });
            let e = t.exchange(b"second").unwrap_err().to_string();
            aborter.join().expect("aborter");
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "ended by the abort, not the bound"
            );
            (e, u.peer_failure())
        });
        assert!(got[0].0.contains("ncclCommAbort"), "{}", got[0].0);
        assert_eq!(got[0].1, None, "the sibling communicator is not aborted");
    }

    fn sig(count: u64) -> Signature {
        Signature {
            coll: 0,
            dtype: 6,
            op: 0,
            in_place: false,
            root: 0,
            count,
            scalar: 0,
        }
    }

    #[test]
    fn matching_signatures_pass_past_the_ring() {
        on_ranks(3, Duration::from_secs(20), |_, t| {
            for k in 0..(3 * SIG_RING) {
                t.record(&sig(k)).expect("record");
                t.check_signatures().expect("same calls everywhere");
                if k % 17 == 0 {
                    t.exchange(b"step").expect("keep the ranks close");
                }
            }
        });
    }

    #[test]
    fn a_different_count_is_named_on_every_rank() {
        let got = on_ranks(2, Duration::from_secs(20), |r, t| {
            t.record(&sig(64)).expect("record");
            t.record(&sig(if r == 1 { 8 } else { 16 })).expect("record");
            t.exchange(b"both recorded").expect("exchange");
            t.check_signatures().unwrap_err().to_string()
        });
        assert!(
            got[0].contains("collective #2") && got[0].contains("rank 1"),
            "{}",
            got[0]
        );
        assert!(
            got[0].contains("count 8 while rank 0 passed 16"),
            "{}",
            got[0]
        );
        assert!(
            got[1].contains("rank 0") && got[1].contains("count 16"),
            "{}",
            got[1]
        );
    }

    #[test]
    fn postings_reach_their_sender_in_order_past_the_ring() {
        let n = 3u32;
        let got = on_ranks(n, Duration::from_secs(20), |r, t| {
            let mut seen = Vec::new();
            for seq in 1..=(3 * POST_RING) {
                // every rank receives from every other: post first, then take
                for p in (0..n).filter(|&p| p != r) {
                    t.post(p, seq, &[r as u8, p as u8, seq as u8])
                        .expect("post");
                }
                for p in (0..n).filter(|&p| p != r) {
                    seen.push(t.take_post(p, seq).expect("take"));
                }
            }
            seen
        });
        for (r, seen) in got.iter().enumerate() {
            let mut i = 0;
            for seq in 1..=(3 * POST_RING) {
                for p in (0..n).filter(|&p| p != r as u32) {
                    assert_eq!(
                        seen[i],
                        vec![p as u8, r as u8, seq as u8],
                        "rank {r} seq {seq}"
                    );
                    i += 1;
                }
            }
        }
    }

    #[test]
    fn a_receiver_that_never_posts_is_named() {
        let got = on_ranks(2, Duration::from_millis(300), |r, t| {
            if r == 0 {
                t.take_post(1, 1).unwrap_err().to_string()
            } else {
                String::new()
            }
        });
        assert!(
            got[0].contains("rank 1 to post its receive #1"),
            "{}",
            got[0]
        );
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
