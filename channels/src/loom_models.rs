//! loom models of the FIFO and the semaphore (run with
//! `RUSTFLAGS="--cfg loom" cargo test -p commhal-channels --release --lib loom`).
//!
//! They run the crate's own algorithms ([`crate::fifo::Fifo`] over loom atomics, and
//! [`crate::counter`]) under every interleaving loom explores, with a preemption
//! bound that keeps each model to seconds on 2 cores.

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;

use crate::counter::{signal_word, try_consume};
use crate::fifo::{Fifo, Trigger};
use crate::sync::{AtomicU64, Ordering};

fn builder() -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.max_branches = 100_000;
    b
}

/// Depth 2, 2 producers × 2 triggers, 1 consumer. Producers give up after a bounded
/// number of full-ring retries (spinning forever makes loom's search explode), the
/// consumer polls a bounded number of times and the rest is drained after the joins.
/// Every trigger a push accepted arrives exactly once, in push order per producer;
/// a refused push leaves nothing behind.
#[test]
fn loom_fifo_no_loss_no_dup_per_producer_order() {
    builder().check(|| {
        let fifo = Arc::new(Fifo::new(2).unwrap());
        let producers: Vec<_> = (0..2u32)
            .map(|p| {
                let fifo = Arc::clone(&fifo);
                thread::spawn(move || {
                    let mut pushed = 0u64;
                    'seqs: for seq in 0..2u64 {
                        let t = Trigger::put(p, 0, 0, 0, 0, seq);
                        for _attempt in 0..2 {
                            match fifo.try_push(&t) {
                                Ok(Some(_)) => {
                                    pushed += 1;
                                    continue 'seqs;
                                }
                                Ok(None) => thread::yield_now(),
                                Err(e) => panic!("push refused: {e}"),
                            }
                        }
                        break; // back-pressure: stop here, so pushes form a prefix
                    }
                    pushed
                })
            })
            .collect();
        let mut got: Vec<(u32, u64)> = Vec::new();
        let take = |fifo: &Fifo, got: &mut Vec<(u32, u64)>| match fifo.peek() {
            Some((ticket, t)) => {
                assert_eq!(ticket, got.len() as u64, "tickets are consumed in order");
                got.push((t.semaphore, t.size));
                fifo.complete();
                true
            }
            None => false,
        };
        for _ in 0..3 {
            if !take(&fifo, &mut got) {
                thread::yield_now();
            }
        }
        let pushed: Vec<u64> = producers.into_iter().map(|p| p.join().unwrap()).collect();
        while take(&fifo, &mut got) {}
        for (p, &n) in pushed.iter().enumerate() {
            let seqs: Vec<u64> = got
                .iter()
                .filter(|g| g.0 == p as u32)
                .map(|g| g.1)
                .collect();
            let want: Vec<u64> = (0..n).collect();
            assert_eq!(seqs, want, "producer {p}: no loss, no duplicate, in order");
        }
        assert!(
            pushed.iter().sum::<u64>() >= 2,
            "an empty ring of depth 2 takes 2 pushes"
        );
    });
}

/// Two signallers, each writing its own data before a release signal; one waiter
/// consumes two signals: no signal is lost, and after the k-th wait the data of (at
/// least) k signallers is visible — checked by loom's race detector on the cells.
/// Counters start just below 2^64 so the wrap is exercised.
#[test]
fn loom_semaphore_no_lost_signal_and_release_acquire() {
    builder().check(|| {
        let start = u64::MAX;
        let inbound = Arc::new(AtomicU64::new(start));
        let data: Arc<[UnsafeCell<u64>; 2]> = Arc::new([UnsafeCell::new(0), UnsafeCell::new(0)]);
        let signallers: Vec<_> = (0..2usize)
            .map(|i| {
                let inbound = Arc::clone(&inbound);
                let data = Arc::clone(&data);
                thread::spawn(move || {
                    data[i].with_mut(|p| {
                        // SAFETY: each signaller writes only its own cell, before its
                        // release signal; readers read it only after acquiring it.
                        unsafe { *p = 10 + i as u64 }
                    });
                    signal_word(&*inbound, Ordering::Release);
                })
            })
            .collect();
        let expected = AtomicU64::new(start);
        for _ in 0..2 {
            while !try_consume(&*inbound, &expected, Ordering::Acquire) {
                thread::yield_now();
            }
        }
        // Both signals consumed: both writes happened-before (loom checks the race).
        for (i, cell) in data.iter().enumerate() {
            // SAFETY: both signallers released their write before their signal and we
            // acquired both signals; loom flags this read if that were not so.
            let v = cell.with(|p| unsafe { *p });
            assert_eq!(v, 10 + i as u64);
        }
        assert!(
            !try_consume(&*inbound, &expected, Ordering::Acquire),
            "no extra signal"
        );
        assert_eq!(expected.load(Ordering::Relaxed), start.wrapping_add(2));
        for s in signallers {
            s.join().unwrap();
        }
    });
}

/// Two signallers and two waiters at once (each waiter polls a bounded number of
/// times; the rest is drained after the joins): exactly two signals are consumed in
/// total — none lost, none handed to two waiters.
#[test]
fn loom_semaphore_concurrent_waiters_never_share_a_signal() {
    builder().check(|| {
        let inbound = Arc::new(AtomicU64::new(0));
        let expected = Arc::new(AtomicU64::new(0));
        let signallers: Vec<_> = (0..2)
            .map(|_| {
                let inbound = Arc::clone(&inbound);
                thread::spawn(move || signal_word(&*inbound, Ordering::Release))
            })
            .collect();
        let waiter = {
            let inbound = Arc::clone(&inbound);
            let expected = Arc::clone(&expected);
            thread::spawn(move || {
                let mut n = 0u64;
                for _ in 0..2 {
                    if try_consume(&*inbound, &*expected, Ordering::Acquire) {
                        n += 1;
                    }
                }
                n
            })
        };
        let mut mine = 0u64;
        for _ in 0..2 {
            if try_consume(&*inbound, &*expected, Ordering::Acquire) {
                mine += 1;
            }
        }
        for s in signallers {
            s.join().unwrap();
        }
        let theirs = waiter.join().unwrap();
        while try_consume(&*inbound, &*expected, Ordering::Acquire) {
            mine += 1;
        }
        assert_eq!(mine + theirs, 2, "every signal consumed exactly once");
        assert_eq!(expected.load(Ordering::Relaxed), 2);
    });
}
