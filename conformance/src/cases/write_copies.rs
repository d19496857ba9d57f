//! 24: a port `write` that claims `write-copies-source` has read its source when it
//! returns. On the raw [`Port`] of the backend's `PortMapped` transport (through the
//! proxy FIFO a put returns before the proxy calls `write`, so only the trait itself
//! can show when the source was read).
//!
//! Each rank's buffer: its inbound semaphore word at 0, then `SRC` (the write's source)
//! and two landing areas of `up64(off + n)` bytes, used in alternate rounds: a rank
//! writes round r + 2 into an area only after the peer's signal of round r + 1, which
//! the peer sends once it checked round r there.

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use commhal_hal::Region;
use commhal_hal::bootstrap::{recv_export, send_export};
use commhal_hal::dynamic::DynPort;
use commhal_hal::transport::{PeerContext, Port, PortMapped};

use super::setup::{alloc, up64};
use crate::case::{CaseResult, Failure};
use crate::world::Ctx;
use crate::{fail, hostmem};

/// Byte `i` of what `rank` writes in round `round`; never equal to its [`over`].
fn byte(round: u64, rank: u32, i: u64) -> u8 {
    ((i % 251) as u8) ^ (round as u8).wrapping_mul(29) ^ (rank as u8).wrapping_mul(101)
}

/// What the source is overwritten with right after `write` returned: every byte
/// differs from the one written.
fn over(b: u8) -> u8 {
    !b
}

fn data(round: u64, rank: u32, n: u64) -> Vec<u8> {
    (0..n).map(|i| byte(round, rank, i)).collect()
}

/// One rank's buffers: its own and the peer's, as the port knows them.
struct Side {
    buf: Box<dyn Region>,
    local: Box<dyn Region>,
    remote: Box<dyn Any + Send + Sync>,
    /// Size of the source and of each landing area.
    area: u64,
}

impl Side {
    const SRC: u64 = 64;

    fn landing(&self, round: u64) -> u64 {
        Self::SRC + self.area * (1 + round % 2)
    }

    /// Write this round's bytes to the peer, overwrite the source at once, then signal
    /// and flush.
    fn send(
        &self,
        port: &mut Box<dyn DynPort>,
        (ctx, round): (&Ctx, u64),
        off: u64,
        n: u64,
    ) -> Result<(), Failure> {
        let mine = data(round, ctx.rank, n);
        let src = Self::SRC + off;
        hostmem::write(&*self.buf, src, &mine)?;
        let dst = self.landing(round) + off;
        port.write(&self.remote, dst, &self.local, src, n)?;
        let overwritten: Vec<u8> = mine.iter().map(|&b| over(b)).collect();
        hostmem::write(&*self.buf, src, &overwritten)?;
        port.signal(&self.remote, 0, 1)?;
        port.flush()?;
        Ok(())
    }

    /// The peer's bytes of `round` must be the ones it wrote, not what it stored over
    /// its source after `write` returned.
    fn check(&self, round: u64, peer: u32, off: u64, n: u64) -> Result<(), Failure> {
        let want = data(round, peer, n);
        let mut got = vec![0u8; want.len()];
        hostmem::read(&*self.buf, self.landing(round) + off, &mut got)?;
        let Some(i) = (0..want.len()).rev().find(|&i| got[i] != want[i]) else {
            return Ok(());
        };
        let why = if got[i] == over(want[i]) {
            format!(
                "what rank {peer} stored over its source after `write` returned: the write read its source late"
            )
        } else {
            "not this round's byte: the write had not landed when the signal arrived".into()
        };
        fail!(
            "round {round}: byte {i} of {n} from rank {peer} is {:#04x}, expected {:#04x} ({why})",
            got[i],
            want[i]
        )
    }
}

fn wait_for(ctx: &Ctx, counter: &AtomicU64, want: u64, peer: u32) -> Result<(), Failure> {
    let deadline = Instant::now() + ctx.plan.wait_timeout();
    while counter.load(Ordering::Acquire) < want {
        if Instant::now() > deadline {
            fail!(
                "round {}: rank {peer}'s signal did not arrive within {} ms",
                want - 1,
                ctx.plan.wait_timeout_ms
            );
        }
        std::thread::yield_now();
    }
    Ok(())
}

fn open(ctx: &Ctx, peer: u32, area: u64) -> Result<(Box<dyn DynPort>, Side), Failure> {
    let t = ctx.port()?;
    let b = ctx.boot.as_ref();
    let port = t.connect(&PeerContext {
        bootstrap: b,
        local: &ctx.endpoints[ctx.rank as usize],
        remote: &ctx.endpoints[peer as usize],
        tag: ctx.t(0),
    })?;
    let buf = alloc(ctx, Side::SRC + 3 * area + 64)?;
    let local = t.register(&*buf)?;
    send_export(b, peer, ctx.t(1), &PortMapped::export(&t, &local)?)?;
    let remote = t.import(recv_export(b, peer, ctx.t(1))?)?;
    ctx.handshake(peer, 2)?;
    let side = Side {
        buf,
        local,
        remote,
        area,
    };
    Ok((port, side))
}

/// 24: rounds in which both ranks write `n` bytes at `off` to each other, overwrite the
/// source as soon as `write` returned, signal and flush; after the peer's signal every
/// byte that landed must be the peer's original one.
pub fn write_copies_source(ctx: &Ctx, n: u64, off: u64) -> CaseResult {
    let Some((peer, a)) = ctx.pair() else {
        return Ok(None);
    };
    let (mut port, side) = open(ctx, peer, up64(off + n))?;
    let counter = hostmem::atomic_u64(&*side.buf, 0)?;
    let rounds = if n >= 1 << 20 {
        ctx.plan.count(3, 20)
    } else {
        ctx.plan.count(20, 500)
    };
    for r in 0..rounds {
        side.send(&mut port, (ctx, r), off, n)?;
        wait_for(ctx, counter, r + 1, peer)?;
        side.check(r, peer, off, n)?;
    }
    // Neither side drops its buffer or port while the other may still write to it.
    ctx.handshake(peer, 3)?;
    Ok(a.then(|| format!("{rounds} rounds: the peer got every original byte")))
}
