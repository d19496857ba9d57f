//! Point-to-point cases (`docs/conformance.md` 1–12, 16, 20), written once over [`P2p`] and
//! run on memory and port channels. Ranks pair up as (0,1), (2,3), …; an odd last rank
//! idles. "a" is the pair's first rank.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use commhal_channels::WaitPolicy;
use commhal_hal::{HalError, Region, SignalStrength};

use super::setup::{Opts, P2p, check_fill, open, read_vec, up64};
use crate::case::{CaseResult, ChannelKind, Failure};
use crate::rng::Rng;
use crate::world::Ctx;
use crate::{ensure, fail, hostmem};

/// How data and signal travel in message passing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fused {
    /// `put` then a separate `signal` (needs strong signals).
    Separate,
    /// `put_with_signal`.
    WithSignal,
    /// `put_with_signal_and_flush`.
    WithSignalAndFlush,
}

fn seed(ctx: &Ctx) -> u64 {
    0x5EED ^ (u64::from(ctx.rank) << 32) ^ ctx.tag
}

/// Run `f` while two threads hammer an unrelated buffer (stress tier only).
fn with_hammer<T>(ctx: &Ctx, on: bool, f: impl FnOnce() -> T) -> Result<T, Failure> {
    if !on {
        return Ok(f());
    }
    let junk = super::setup::alloc(ctx, 1 << 16)?;
    let stop = AtomicBool::new(false);
    let out = std::thread::scope(|s| {
        for t in 0..2u8 {
            let (junk, stop) = (&junk, &stop);
            s.spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let _ = hostmem::fill(&**junk, (i * 512) % (1 << 16), 512, t ^ i as u8);
                    i += 1;
                    if i.is_multiple_of(64) {
                        std::thread::yield_now();
                    }
                }
            });
        }
        let r = f();
        stop.store(true, Ordering::Relaxed);
        r
    });
    Ok(out)
}

/// 1, 2, 20: message passing, alternating direction each round.
pub fn message_passing(
    ctx: &Ctx,
    kind: ChannelKind,
    n: u64,
    off: u64,
    rounds: u64,
    fused: Fused,
    stress: bool,
) -> CaseResult {
    let Some((peer, a)) = ctx.pair() else {
        return Ok(None);
    };
    let rx = up64(off + n) + off;
    let ch = open(ctx, kind, peer, 0, Opts::len(rx + n + 64))?;
    let mut buf = vec![0u8; n as usize];
    let mut rng = Rng::new(seed(ctx));
    let mut weak = 0u64;
    let r = with_hammer(ctx, stress, || -> CaseResult {
        for r in 0..rounds {
            let v = (r % 250 + 1) as u8;
            if stress {
                rng.delay();
            }
            if (r % 2 == 0) == a {
                hostmem::fill(ch.local(), off, n, v)?;
                match fused {
                    Fused::Separate => {
                        ch.put(rx, off, n)?;
                        if stress {
                            rng.delay();
                        }
                        ch.signal()?;
                    }
                    Fused::WithSignal => ch.put_with_signal(rx, off, n)?,
                    Fused::WithSignalAndFlush => ch.put_with_signal_and_flush(rx, off, n)?,
                }
                ch.wait()?;
            } else {
                ch.wait()?;
                hostmem::read(ch.local(), rx, &mut buf)?;
                if let Err(Failure::Fail(m)) = check_fill(&buf, v, &format!("round {r}")) {
                    if !stress {
                        fail!("{m}: the signal was seen before the data it orders");
                    }
                    weak += 1;
                }
                ch.signal()?;
            }
        }
        Ok(None)
    })?;
    r?;
    ensure!(
        weak == 0,
        "{weak} weak-behaviour observations in {rounds} rounds: a signal was seen before the data it orders"
    );
    Ok(stress.then(|| format!("0 weak-behaviour observations in {rounds} rounds")))
}

/// 3, 20: put(A); put_with_signal(B); the peer's wait ⇒ B visible, and A visible if the
/// transport claims strong signals (else reorders are only counted).
pub fn signal_strength(ctx: &Ctx, kind: ChannelKind, rounds: u64, stress: bool) -> CaseResult {
    let Some((peer, a)) = ctx.pair() else {
        return Ok(None);
    };
    let strong = ctx
        .guarantees(kind)
        .is_some_and(|g| g.signal == SignalStrength::Strong);
    let n = 4099;
    let s = up64(n);
    let (src_a, src_b, rx_a, rx_b) = (0, s, 2 * s, 3 * s);
    let ch = open(ctx, kind, peer, 0, Opts::len(4 * s + 64))?;
    let mut rng = Rng::new(seed(ctx));
    let mut reorders = 0u64;
    let r = with_hammer(ctx, stress, || -> CaseResult {
        for r in 0..rounds {
            let v = (r % 250 + 1) as u8;
            if a {
                hostmem::fill(ch.local(), src_a, n, v)?;
                hostmem::fill(ch.local(), src_b, n, v)?;
                ch.put(rx_a, src_a, n)?;
                if stress {
                    rng.delay();
                }
                ch.put_with_signal(rx_b, src_b, n)?;
                ch.wait()?;
            } else {
                ch.wait()?;
                let b = read_vec(ch.local(), rx_b, n)?;
                check_fill(&b, v, &format!("round {r}, fused data B")).map_err(|f| match f {
                    Failure::Fail(m) => Failure::Fail(format!(
                        "{m}: put_with_signal's own data was not visible after its signal"
                    )),
                    o => o,
                })?;
                let a_data = read_vec(ch.local(), rx_a, n)?;
                if let Err(Failure::Fail(m)) =
                    check_fill(&a_data, v, &format!("round {r}, earlier put A"))
                {
                    if strong && !stress {
                        fail!(
                            "{m}: the transport claims strong signals but an earlier put was not visible"
                        );
                    }
                    reorders += 1;
                }
                ch.signal()?;
            }
        }
        Ok(None)
    })?;
    r?;
    if strong {
        ensure!(
            reorders == 0,
            "{reorders} reorders in {rounds} rounds although the transport claims strong signals"
        );
    }
    Ok((!a).then(|| {
        format!(
            "{reorders} reorders observed in {rounds} rounds ({} signal)",
            if strong { "strong" } else { "weak" }
        )
    }))
}

/// 4: k signals from several threads satisfy exactly k waits; the next poll is false;
/// a bounded wait then fails cleanly and consumes nothing. The counter starts at `start`.
pub fn signal_counting(ctx: &Ctx, kind: ChannelKind, start: u64) -> CaseResult {
    let Some((peer, a)) = ctx.pair() else {
        return Ok(None);
    };
    let threads = 4u64;
    let k = ctx.plan.count(64, 1024) / threads * threads;
    let mut ch = open(
        ctx,
        kind,
        peer,
        0,
        Opts {
            start,
            ..Opts::len(64)
        },
    )?;
    if a {
        let errors: Vec<String> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads)
                .map(|_| {
                    let ch = &ch;
                    s.spawn(move || -> Result<(), HalError> {
                        for _ in 0..k / threads {
                            ch.signal()?;
                        }
                        Ok(())
                    })
                })
                .collect();
            hs.into_iter()
                .filter_map(|h| match h.join() {
                    Ok(Ok(())) => None,
                    Ok(Err(e)) => Some(e.to_string()),
                    Err(_) => Some("a signalling thread panicked".into()),
                })
                .collect()
        });
        ensure!(
            errors.is_empty(),
            "signalling failed: {}",
            errors.join("; ")
        );
        ctx.recv(peer, 1)?;
        ch.signal()?;
        ctx.recv(peer, 2)?;
        return Ok(None);
    }
    for i in 0..k {
        ch.wait().map_err(|e| {
            Failure::Fail(format!(
                "wait {} of {k} failed ({e}): a signal was lost (counter started at {start:#x})",
                i + 1
            ))
        })?;
    }
    ensure!(
        !ch.poll()?,
        "poll after {k} waits for {k} signals returned true: a signal was doubled"
    );
    ch.set_wait_timeout(Duration::from_millis(50));
    match ch.wait() {
        Err(HalError::Timeout { .. }) => {}
        Ok(()) => fail!(
            "wait {} succeeded after only {k} signals: a signal was doubled",
            k + 1
        ),
        Err(e) => fail!("a bounded wait with no signal should time out, but failed with: {e}"),
    }
    ch.set_wait_timeout(ctx.plan.wait_timeout());
    ctx.send(peer, 1, b"timed out")?;
    ch.wait().map_err(|e| {
        Failure::Fail(format!("the wait after a timed-out wait failed ({e}): the timeout consumed a signal or broke the semaphore"))
    })?;
    ensure!(
        !ch.poll()?,
        "poll returned true after the last signal was consumed"
    );
    ctx.send(peer, 2, b"done")?;
    Ok(None)
}

/// 5: relaxed signals and relaxed waits pair up one to one (execution order only).
pub fn relaxed(ctx: &Ctx, kind: ChannelKind) -> CaseResult {
    let Some((peer, a)) = ctx.pair() else {
        return Ok(None);
    };
    let k = ctx.plan.count(64, 1024);
    let ch = open(ctx, kind, peer, 0, Opts::len(64))?;
    if a {
        for _ in 0..k {
            ch.relaxed_signal()?;
        }
        ch.wait()?;
    } else {
        for i in 0..k {
            ch.relaxed_wait()
                .map_err(|e| Failure::Fail(format!("relaxed wait {} of {k}: {e}", i + 1)))?;
        }
        ensure!(!ch.poll()?, "poll after {k} relaxed waits returned true");
        ch.signal()?;
    }
    Ok(None)
}

/// 6: put; flush; overwrite the source; signal ⇒ the peer sees the old values.
pub fn flush_source_reusable(ctx: &Ctx, kind: ChannelKind) -> CaseResult {
    let Some((peer, a)) = ctx.pair() else {
        return Ok(None);
    };
    let n = 4099;
    let rx = up64(n);
    let ch = open(ctx, kind, peer, 0, Opts::len(2 * rx + 64))?;
    for r in 0..ctx.plan.count(20, 200) {
        let v = (r % 250 + 1) as u8;
        if a {
            hostmem::fill(ch.local(), 0, n, v)?;
            ch.put(rx, 0, n)?;
            ch.flush()?;
            hostmem::fill(ch.local(), 0, n, !v)?;
            ch.signal()?;
            ch.wait()?;
        } else {
            ch.wait()?;
            check_fill(&read_vec(ch.local(), rx, n)?, v, &format!("round {r}")).map_err(|f| match f {
                Failure::Fail(m) => Failure::Fail(format!("{m}: the peer got what was written into the source after flush returned, so flush returned before the source was read")),
                o => o,
            })?;
            ch.signal()?;
        }
    }
    Ok(None)
}

/// 7: put; flush; out-of-band barrier (no signal) ⇒ the peer reads the new values.
pub fn flush_remote_visible(ctx: &Ctx, kind: ChannelKind) -> CaseResult {
    let Some((peer, a)) = ctx.pair() else {
        return Ok(None);
    };
    let n = 4099;
    let rx = up64(n);
    let ch = open(ctx, kind, peer, 0, Opts::len(2 * rx + 64))?;
    for r in 0..ctx.plan.count(20, 200) {
        let v = (r % 250 + 1) as u8;
        if a {
            hostmem::fill(ch.local(), 0, n, v)?;
            ch.put(rx, 0, n)?;
            ch.flush()?;
            ctx.send(peer, 1, b"flushed")?;
            ctx.recv(peer, 2)?;
        } else {
            ctx.recv(peer, 1)?;
            check_fill(&read_vec(ch.local(), rx, n)?, v, &format!("round {r}")).map_err(|f| match f {
                Failure::Fail(m) => Failure::Fail(format!("{m}: data was not visible at the peer after flush returned (checked after an out-of-band barrier, no signal)")),
                o => o,
            })?;
            ctx.send(peer, 2, b"checked")?;
        }
    }
    Ok(None)
}

/// 8, 20: put(X); put(Y); the peer polls Y, then reads X.
pub fn put_put(ctx: &Ctx, kind: ChannelKind, rounds: u64, stress: bool) -> CaseResult {
    let Some((peer, a)) = ctx.pair() else {
        return Ok(None);
    };
    let n = 4099;
    let s = up64(n);
    let (src_x, src_y, rx_x, rx_y) = (0, s, s + 64, 2 * s + 64);
    let ch = open(ctx, kind, peer, 0, Opts::len(2 * s + 192))?;
    let policy = WaitPolicy::with_timeout(ctx.plan.wait_timeout());
    let mut rng = Rng::new(seed(ctx));
    let mut weak = 0u64;
    let r = with_hammer(ctx, stress, || -> CaseResult {
        for r in 0..rounds {
            let v = (r % 250 + 1) as u8;
            if a {
                hostmem::fill(ch.local(), src_x, n, v)?;
                hostmem::write(ch.local(), src_y, &(r + 1).to_le_bytes())?;
                ch.put(rx_x, src_x, n)?;
                if stress {
                    rng.delay();
                }
                ch.put(rx_y, src_y, 8)?;
                ch.wait()?;
            } else {
                let y = hostmem::atomic_u64(ch.local(), rx_y)?;
                policy.wait_until(
                    || {
                        format!(
                            "round {r}: the second put (Y = {}) never became visible",
                            r + 1
                        )
                    },
                    || Ok(y.load(Ordering::Acquire) == r + 1),
                )?;
                if let Err(Failure::Fail(m)) =
                    check_fill(&read_vec(ch.local(), rx_x, n)?, v, &format!("round {r}, X"))
                {
                    if !stress {
                        fail!("{m}: the second put was visible before the first");
                    }
                    weak += 1;
                }
                ch.signal()?;
            }
        }
        Ok(None)
    })?;
    r?;
    ensure!(
        weak == 0,
        "{weak} weak-behaviour observations in {rounds} rounds: put Y visible before put X"
    );
    Ok(stress.then(|| format!("0 weak-behaviour observations in {rounds} rounds")))
}

/// 9: with ranks 0, 1, 2: signals to 1 say nothing to 2; puts to both, a flush of
/// both and a signal each reach both.
pub fn peers_independent(ctx: &Ctx, kind: ChannelKind) -> CaseResult {
    if ctx.rank > 2 {
        return Ok(None);
    }
    let n = 4099;
    let rx = up64(n);
    let o = Opts::len(2 * rx + 64);
    let k = 8;
    match ctx.rank {
        0 => {
            let c1 = open(ctx, kind, 1, 0, o)?;
            let c2 = open(ctx, kind, 2, 16, o)?;
            for _ in 0..k {
                c1.signal()?;
            }
            ctx.send(2, 100, b"signalled rank 1")?;
            ctx.recv(2, 102)?;
            for c in [&c1, &c2] {
                hostmem::fill(c.local(), 0, n, 0x5A)?;
                c.put(rx, 0, n)?;
            }
            c1.flush()?;
            c2.flush()?;
            c1.signal()?;
            c2.signal()?;
            c1.wait()?;
            c2.wait()?;
        }
        r => {
            let ch = open(ctx, kind, 0, if r == 1 { 0 } else { 16 }, o)?;
            if r == 1 {
                for i in 0..k {
                    ch.wait()
                        .map_err(|e| Failure::Fail(format!("rank 1 wait {} of {k}: {e}", i + 1)))?;
                }
                ctx.send(2, 101, b"got them")?;
            } else {
                ctx.recv(0, 100)?;
                ctx.recv(1, 101)?;
                ensure!(
                    !ch.poll()?,
                    "rank 2 saw a signal although rank 0 only signalled rank 1"
                );
                ctx.send(0, 102, b"checked")?;
            }
            ch.wait()?;
            check_fill(&read_vec(ch.local(), rx, n)?, 0x5A, &format!("rank {r}"))?;
            ensure!(!ch.poll()?, "rank {r} has an extra signal");
            ch.signal()?;
        }
    }
    Ok(None)
}

/// 10: the peer writes its buffer, then signals; get returns the new data.
pub fn get_after_signal(ctx: &Ctx, kind: ChannelKind) -> CaseResult {
    let Some((peer, a)) = ctx.pair() else {
        return Ok(None);
    };
    let n = 4099;
    let rx = up64(n);
    let ch = open(ctx, kind, peer, 0, Opts::len(2 * rx + 64))?;
    for r in 0..ctx.plan.count(20, 200) {
        let v = (r % 250 + 1) as u8;
        if (r % 2 == 0) == a {
            hostmem::fill(ch.local(), 0, n, v)?;
            ch.signal()?;
            ch.wait()?;
        } else {
            ch.wait()?;
            ch.get(rx, 0, n)?;
            check_fill(&read_vec(ch.local(), rx, n)?, v, &format!("round {r}")).map_err(
                |f| match f {
                    Failure::Fail(m) => Failure::Fail(format!(
                        "{m}: get after the peer's signal returned stale data"
                    )),
                    o => o,
                },
            )?;
            ch.signal()?;
        }
    }
    Ok(None)
}

/// 11: ping-pong both ways; reports the mean round trip.
pub fn ping_pong(ctx: &Ctx, kind: ChannelKind, rounds: u64) -> CaseResult {
    let Some((peer, a)) = ctx.pair() else {
        return Ok(None);
    };
    let ch = open(ctx, kind, peer, 0, Opts::len(64))?;
    let half = rounds / 2;
    let t0 = Instant::now();
    for r in 0..rounds {
        if (r < half) == a {
            ch.signal()?;
            ch.wait()
        } else {
            ch.wait()?;
            ch.signal()
        }
        .map_err(|e| Failure::Fail(format!("round {r} of {rounds}: {e}")))?;
    }
    ensure!(!ch.poll()?, "an extra signal arrived after {rounds} rounds");
    let us = t0.elapsed().as_secs_f64() * 1e6 / rounds.max(1) as f64;
    Ok(a.then(|| format!("round trip {us:.1} us mean over {rounds} rounds ({half} each way)")))
}

/// 12: two channels on one connection stay independent; concurrent flushes on one
/// channel from several threads are safe.
pub fn shared_connection(ctx: &Ctx, kind: ChannelKind) -> CaseResult {
    let Some((peer, a)) = ctx.pair() else {
        return Ok(None);
    };
    let n = 4099;
    let rx = up64(n);
    let threads = 4u64;
    let slots = 2 * rx; // threads' source slots at slots + t*64, destinations at slots + 512 + t*64
    let o = Opts::len(slots + 1024 + 64);
    let chans: Vec<Box<dyn P2p>> = match kind {
        ChannelKind::Port => super::setup::open_port(ctx, peer, 0, o, 2)?
            .into_iter()
            .map(|p| Box::new(p) as Box<dyn P2p>)
            .collect(),
        _ => vec![open(ctx, kind, peer, 0, o)?, open(ctx, kind, peer, 32, o)?],
    };
    for (i, (c, other)) in [(0usize, 1usize), (1, 0)].into_iter().enumerate() {
        let v = i as u8 + 1;
        if a {
            hostmem::fill(chans[c].local(), 0, n, v)?;
            chans[c].put(rx, 0, n)?;
            chans[c].signal()?;
            chans[c].wait()?;
        } else {
            chans[c].wait()?;
            ensure!(
                !chans[other].poll()?,
                "channel {other} saw a signal sent on channel {c}"
            );
            check_fill(
                &read_vec(chans[c].local(), rx, n)?,
                v,
                &format!("channel {c}"),
            )?;
            let untouched = read_vec(chans[other].local(), rx, n)?;
            ensure!(
                untouched.iter().all(|&b| b == if c == 0 { 0 } else { 1 }),
                "channel {other}'s buffer changed by a put on channel {c}"
            );
            chans[c].signal()?;
        }
    }
    let iters = ctx.plan.count(50, 1000);
    let ch = &chans[0];
    if a {
        for t in 0..threads {
            hostmem::fill(ch.local(), slots + t * 64, 64, t as u8 + 10)?;
        }
        let errs: Vec<String> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads)
                .map(|t| {
                    s.spawn(move || -> Result<(), HalError> {
                        for _ in 0..iters {
                            ch.put(slots + 512 + t * 64, slots + t * 64, 64)?;
                            ch.flush()?;
                        }
                        Ok(())
                    })
                })
                .collect();
            hs.into_iter()
                .filter_map(|h| match h.join() {
                    Ok(Ok(())) => None,
                    Ok(Err(e)) => Some(e.to_string()),
                    Err(_) => Some("a flushing thread panicked".into()),
                })
                .collect()
        });
        ensure!(
            errs.is_empty(),
            "concurrent put+flush failed: {}",
            errs.join("; ")
        );
        ch.signal()?;
        ch.wait()?;
    } else {
        ch.wait()?;
        for t in 0..threads {
            check_fill(
                &read_vec(ch.local(), slots + 512 + t * 64, 64)?,
                t as u8 + 10,
                &format!("thread {t}'s slot"),
            )?;
        }
        ch.signal()?;
    }
    Ok(None)
}

/// A region no backend registered (host memory of this process).
#[derive(Debug)]
pub struct ForeignRegion(pub Box<[u64]>);

impl Region for ForeignRegion {
    fn addr(&self) -> u64 {
        self.0.as_ptr() as usize as u64
    }
    fn len(&self) -> u64 {
        self.0.len() as u64 * 8
    }
    fn device(&self) -> commhal_hal::Device {
        commhal_hal::Device::HOST
    }
    fn kind(&self) -> commhal_hal::MemoryKind {
        commhal_hal::MemoryKind::HostShared
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// 16: 0 bytes, 1 byte, non-multiples of 16, region boundaries, the whole region;
/// out-of-range offsets and unregistered memory rejected with an error.
pub fn edges(ctx: &Ctx, kind: ChannelKind) -> CaseResult {
    let Some((peer, a)) = ctx.pair() else {
        return Ok(None);
    };
    let len = 4096 + 64;
    let ch = open(ctx, kind, peer, 0, Opts::len(len))?;
    let pat = |i: u64| (i.wrapping_mul(31).wrapping_add(7) % 255 + 1) as u8;
    // Unregistered memory is rejected on every rank.
    let foreign = ForeignRegion(vec![0u64; 64].into_boxed_slice());
    match kind {
        ChannelKind::Memory => {
            let t = ctx.memory()?;
            ensure!(
                commhal_hal::dynamic::DynMemoryMapped::export(&*t, &foreign).is_err(),
                "exporting memory the backend never allocated succeeded"
            );
        }
        _ => {
            let t = ctx.port()?;
            ensure!(
                commhal_hal::PortMapped::register(&t, &foreign).is_err(),
                "registering memory of another allocator succeeded; the backend must reject what it cannot address"
            );
        }
    }
    let puts = [(len - 1, 1), (100, 17), (len - 33, 33), (1000, 0)];
    if a {
        let all: Vec<u8> = (0..len).map(pat).collect();
        hostmem::write(ch.local(), 0, &all)?;
        for (what, r) in [
            ("dst offset + len past the end", ch.put(len - 1, 0, 2)),
            ("dst offset u64::MAX", ch.put(u64::MAX, 0, 1)),
            ("src offset past the end", ch.put(0, len, 1)),
            ("length past the end", ch.put(0, 0, len + 1)),
            ("src range overflowing u64", ch.put(0, u64::MAX - 1, 4)),
        ] {
            ensure!(r.is_err(), "an out-of-range put was accepted ({what})");
        }
        ch.put(0, 0, 0)?;
        ch.put(len, len, 0)?;
        for (off, n) in puts {
            ch.put(off, off, n)?;
        }
        ch.signal()?;
        ch.wait()?;
        ch.put_with_signal(0, 0, len)?;
        ch.wait()?;
    } else {
        ch.wait()?;
        let got = read_vec(ch.local(), 0, len)?;
        for (off, n) in puts {
            for i in off..off + n {
                ensure!(
                    got[i as usize] == pat(i),
                    "byte {i} (put of {n} bytes at {off}) is {}, expected {}",
                    got[i as usize],
                    pat(i)
                );
            }
        }
        for i in [99u64, 117, 1000, len - 34, 0] {
            ensure!(
                got[i as usize] == 0,
                "byte {i} was written although no put covered it (0-byte put or an overrun)"
            );
        }
        ch.signal()?;
        ch.wait()?;
        let got = read_vec(ch.local(), 0, len)?;
        for i in (0..len).rev() {
            ensure!(
                got[i as usize] == pat(i),
                "whole-region put: byte {i} is {}, expected {}",
                got[i as usize],
                pat(i)
            );
        }
        ch.signal()?;
    }
    Ok(None)
}
