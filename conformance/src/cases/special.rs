//! Cases specific to one channel kind: the proxy FIFO (13), LL packets (14),
//! registration lifecycle (17).

use std::sync::Arc;
use std::time::Duration;

use commhal_channels::fifo::{Fifo, Trigger};
use commhal_channels::packet::{LlFormat, PacketEpoch};
use commhal_channels::proxy::ProxyBuilder;
use commhal_hal::bootstrap::{recv_export, send_export};
use commhal_hal::dynamic::{self, DynMemoryMapped};
use commhal_hal::{HalError, PortMapped};

use super::p2p::ForeignRegion;
use super::setup::{Opts, P2p, PortP2p, check_fill, open_memory, open_port, read_vec, up64};
use crate::case::{CaseResult, Failure};
use crate::world::Ctx;
use crate::{ensure, hostmem};

/// 13: more triggers in flight than the FIFO depth (back-pressure, no loss), the ring
/// wrapping many times, a zero-size trigger, bad depths rejected.
pub fn proxy_fifo(ctx: &Ctx, depth: u64) -> CaseResult {
    for d in [0u64, 1, 3, 6, 100] {
        ensure!(
            Fifo::new(d).is_err(),
            "a FIFO of depth {d} was accepted (must be a power of two >= 2)"
        );
        ensure!(
            ProxyBuilder::<Arc<dyn dynamic::DynPortMapped>>::new(&ctx.backend.name, d).is_err(),
            "a proxy with FIFO depth {d} was accepted"
        );
    }
    let Some((peer, a)) = ctx.pair() else {
        return Ok(None);
    };
    let count = ctx.plan.count((8 * depth).max(256), (64 * depth).max(4096));
    let r = count * 8;
    let zero = 2 * r;
    let o = Opts {
        depth,
        ..Opts::len(2 * r + 128)
    };
    let ch = open_port(ctx, peer, 0, o, 1)?
        .pop()
        .ok_or_else(|| Failure::Fail("no channel".into()))?;
    if a {
        let words: Vec<u8> = (0..count).flat_map(|i| (i + 1).to_le_bytes()).collect();
        hostmem::write(ch.local(), 0, &words)?;
        for i in 0..count {
            ch.put_with_signal(r + 8 * i, 8 * i, 8)
                .map_err(|e| Failure::Fail(format!("trigger {} of {count}: {e}", i + 1)))?;
        }
        ch.put_with_signal(zero, 0, 0)?;
        ch.flush()?;
        ch.wait()?;
        // the peer keeps its port until here: with host-tcp a flush still in flight
        // when the peer closes its connection fails with "rank … is gone"
        ctx.send(peer, 1, b"done")?;
    } else {
        for i in 0..=count {
            ch.wait().map_err(|e| {
                Failure::Fail(format!(
                    "signal {} of {} never arrived ({e}): a trigger was lost (FIFO depth {depth})",
                    i + 1,
                    count + 1
                ))
            })?;
        }
        ensure!(!ch.poll()?, "more signals than triggers arrived");
        let got = read_vec(ch.local(), r, r)?;
        for (i, w) in got.chunks_exact(8).enumerate().rev() {
            let v = u64::from_le_bytes(w.try_into().unwrap_or_default());
            ensure!(
                v == i as u64 + 1,
                "word {i} of {count} is {v}, expected {}: a put was lost or misplaced",
                i + 1
            );
        }
        check_fill(
            &read_vec(ch.local(), zero, 64)?,
            0,
            "zero-size trigger target",
        )?;
        ch.signal()?;
        ctx.recv(peer, 1)?;
    }
    Ok(Some(format!(
        "{count} triggers through a FIFO of depth {depth}"
    )))
}

/// 14: LL packets — every element read comes with its flag from the same write,
/// across the flag-epoch wrap.
pub fn ll_packets(ctx: &Ctx, fmt: LlFormat) -> CaseResult {
    let Some((peer, a)) = ctx.pair() else {
        return Ok(None);
    };
    let n = 1001u64;
    let half = up64(fmt.scratch_bytes(n));
    let pkt = up64(n);
    let ch = open_memory(ctx, peer, 0, Opts::len(pkt + 2 * half + 64))?;
    let rounds = ctx.plan.count(16, 256);
    // Start just before the wrap of the flag so it wraps mid-run.
    let mut e = PacketEpoch::starting_at(u32::MAX as u64 - rounds / 2);
    let pattern = |r: u64, i: u64| (i.wrapping_mul(13).wrapping_add(r.wrapping_mul(7)) % 251) as u8;
    let mut out = vec![0u8; n as usize];
    let mut wrapped = false;
    for r in 0..rounds {
        wrapped |= e.flag() == 1;
        let at = pkt + e.offset(half);
        if a {
            let src: Vec<u8> = (0..n).map(|i| pattern(r, i)).collect();
            ch.0.write_local(0, &src)?;
            ch.0.put_packets(fmt, at, 0, n, e.flag())?;
            ch.wait()?;
        } else {
            ch.0.read_packets(fmt, at, &mut out, e.flag())
                .map_err(|err| Failure::Fail(format!("round {r} (flag {}): {err}", e.flag())))?;
            for i in (0..n).rev() {
                ensure!(
                    out[i as usize] == pattern(r, i),
                    "round {r} (flag {}): payload byte {i} is {}, expected {}: data arrived without its flag",
                    e.flag(),
                    out[i as usize],
                    pattern(r, i)
                );
            }
            ch.signal()?;
        }
        e.advance();
    }
    ensure!(wrapped, "the flag epoch did not wrap (suite bug)");
    Ok(None)
}

fn open_fds() -> Option<usize> {
    std::fs::read_dir("/proc/self/fd").ok().map(|d| d.count())
}

/// Teardown after a failure frees everything: `setup_and_fail` builds, fails and drops
/// channels with `peer`; after a warm-up round the process's descriptor count must not
/// grow. Counted only where this rank has its process to itself (ranks as processes):
/// with ranks as threads the count also sees the other ranks — and, under `cargo test`,
/// other tests of the same binary — opening and closing descriptors.
fn leak_check(
    ctx: &Ctx,
    peer: u32,
    mut setup_and_fail: impl FnMut(u64) -> CaseResult,
) -> CaseResult {
    let me = &ctx.endpoints[ctx.rank as usize];
    let alone = ctx.endpoints.iter().filter(|e| e.pid == me.pid).count() == 1;
    let mut counts = Vec::new();
    for i in 0..4u64 {
        setup_and_fail(100 + 16 * i)?;
        ctx.handshake(peer, 99 + 16 * i)?;
        counts.push(open_fds());
        ctx.handshake(peer, 98 + 16 * i)?;
    }
    if let (true, Some(&Some(first)), Some(&Some(last))) = (alone, counts.get(1), counts.last()) {
        // A backend may close a connection's descriptors from its own thread shortly
        // after the teardown returns (host-tcp's receiver ends within its 200 ms read
        // tick, later on a loaded machine): give that a bounded settle; a leak stays.
        let mut now = last;
        let deadline = std::time::Instant::now() + LEAK_SETTLE;
        while now > first && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
            now = open_fds().unwrap_or(now);
        }
        ensure!(
            now <= first,
            "open descriptors grew from {first} to {now} over repeated setup/failure/teardown (still after {LEAK_SETTLE:?}): something is not freed"
        );
    }
    Ok(None)
}

/// How long [`leak_check`] waits for descriptors a backend frees asynchronously.
const LEAK_SETTLE: std::time::Duration = std::time::Duration::from_secs(3);

/// 17 (memory): export/import round trip (across processes in process mode), the
/// owner releasing memory a peer still maps, tampered exports rejected, teardown
/// after a failure frees everything.
pub fn lifecycle_memory(ctx: &Ctx) -> CaseResult {
    let arc = ctx.memory()?;
    let t: &dyn DynMemoryMapped = &*arc;
    let b = ctx.boot.as_ref();
    let n = 4099u64;
    // Tampered and foreign exports are rejected, on every rank.
    let mine = t.alloc(ctx.device, 64)?;
    let mut e = t.export(&*mine)?;
    e.backend.push_str("-other");
    ensure!(
        t.map(e).is_err(),
        "an export naming another backend was mapped"
    );
    let mut e = t.export(&*mine)?;
    if let Some(x) = e.bytes.first_mut() {
        *x ^= 0xFF;
    }
    ensure!(
        t.map(e).is_err(),
        "an export with corrupted bytes was mapped"
    );
    ensure!(
        t.export(&ForeignRegion(vec![0u64; 8].into_boxed_slice()))
            .is_err(),
        "memory the backend never allocated was exported"
    );
    if let Some((peer, a)) = ctx.pair() {
        let pat = |i: u64| (i % 253) as u8;
        if a {
            let region = t.alloc(ctx.device, n)?;
            let data: Vec<u8> = (0..n).map(pat).collect();
            hostmem::write(&*region, 0, &data)?;
            send_export(b, peer, ctx.t(0), &t.export(&*region)?)?;
            ctx.recv(peer, 1)?;
            check_fill(
                &read_vec(&*region, 4000, n - 4000)?,
                0x77,
                "the peer's write through its mapping",
            )?;
            drop(region);
            ctx.send(peer, 2, b"released")?;
            ctx.recv(peer, 3)?;
        } else {
            let m = t.map(recv_export(b, peer, ctx.t(0))?)?;
            ensure!(m.len() == n, "mapped length {} != exported {n}", m.len());
            let got = read_vec(&*m, 0, n)?;
            for i in (0..n).rev() {
                ensure!(
                    got[i as usize] == pat(i),
                    "mapped byte {i} is {}, expected {}",
                    got[i as usize],
                    pat(i)
                );
            }
            hostmem::fill(&*m, 4000, n - 4000, 0x77)?;
            ctx.send(peer, 1, b"written")?;
            ctx.recv(peer, 2)?;
            // The owner dropped its handle: our mapping must still be valid memory.
            let again = read_vec(&*m, 0, 8)?;
            ensure!(
                again == (0..8).map(pat).collect::<Vec<_>>(),
                "mapping changed after the owner released its handle"
            );
            ctx.send(peer, 3, b"ok")?;
        }
        leak_check(ctx, peer, |k| {
            let mut ch = open_memory(ctx, peer, k, Opts::len(4096))?;
            ch.set_wait_timeout(Duration::from_millis(10));
            ensure!(
                matches!(ch.wait(), Err(HalError::Timeout { .. })),
                "a wait with no signal did not time out"
            );
            Ok(None)
        })?;
    }
    Ok(None)
}

/// 17 (port): the same buffer registered twice, release (proxy stopped) while a
/// channel is in use gives errors, teardown after a proxy failure frees everything.
pub fn lifecycle_port(ctx: &Ctx) -> CaseResult {
    let t = ctx.port()?;
    let buf = super::setup::alloc(ctx, 4096)?;
    match (t.register(&*buf), t.register(&*buf)) {
        (Ok(r1), Ok(r2)) => {
            let (e1, e2) = (PortMapped::export(&t, &r1)?, PortMapped::export(&t, &r2)?);
            ensure!(
                e1.len == 4096 && e2.len == 4096,
                "double registration exported wrong lengths"
            );
        }
        (Err(_), _) | (_, Err(_)) => {} // refusing the second registration is fine too
    }
    ensure!(
        t.register(&ForeignRegion(vec![0u64; 8].into_boxed_slice()))
            .is_err(),
        "memory of another allocator was registered"
    );
    let Some((peer, _)) = ctx.pair() else {
        return Ok(None);
    };
    let PortP2p { ch, local, proxy } = open_port(ctx, peer, 0, Opts::len(4096), 1)?
        .pop()
        .ok_or_else(|| Failure::Fail("no channel".into()))?;
    let svc = Arc::try_unwrap(proxy).map_err(|_| Failure::Fail("proxy still shared".into()))?;
    svc.stop()?;
    ensure!(
        ch.put(0, 0, 8).is_err(),
        "a put on a channel whose proxy was stopped was accepted"
    );
    ensure!(
        ch.flush().is_err(),
        "a flush on a channel whose proxy was stopped succeeded"
    );
    drop((ch, local));
    ctx.handshake(peer, 90)?;
    leak_check(ctx, peer, |k| {
        let p = open_port(ctx, peer, k, Opts::len(4096), 1)?
            .pop()
            .ok_or_else(|| Failure::Fail("no channel".into()))?;
        // A trigger naming a memory the proxy does not have makes the proxy fail.
        p.ch.push(&Trigger::put(0, 500, 0, 0, 0, 8))?;
        ensure!(
            p.ch.flush().is_err(),
            "flush succeeded after the proxy hit a bad trigger"
        );
        ensure!(
            p.ch.proxy_error().is_some(),
            "the proxy did not report its error"
        );
        Ok(None)
    })
}
