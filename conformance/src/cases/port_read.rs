//! 23: one-sided port reads ([`Port::read`]), on the raw port of the backend's
//! `PortMapped` transport: the proxy FIFO has no read trigger, so this case drives the
//! HAL trait itself, as the proxy drives writes. Needs the `get` claim.
//!
//! Each rank's buffer: its inbound semaphore word at 0, then four areas of
//! `up64(off + n)` bytes: `SRC` (write source), `EXP` (where the peer writes and then
//! reads back), `PUB` (filled with host stores for the peer to read) and `DST` (where
//! this rank's reads land).

use std::time::Instant;

use commhal_hal::bootstrap::{recv_export, send_export};
use commhal_hal::transport::{PeerContext, Port, PortMapped};
use commhal_hal::{HalError, Region};

use super::setup::{alloc, up64};
use crate::case::{CaseResult, Failure};
use crate::world::Ctx;
use crate::{ensure, fail, hostmem};

/// Byte `i` of the data rank `rank` provides in round `round` for area `area`: differs
/// from its neighbours, from round to round, between ranks and between areas.
fn byte(round: u64, rank: u32, area: u8, i: u64) -> u8 {
    ((i % 251) as u8)
        ^ (round as u8).wrapping_mul(29)
        ^ (rank as u8).wrapping_mul(101)
        ^ area.wrapping_mul(53)
}

fn data(round: u64, rank: u32, area: u8, n: u64) -> Vec<u8> {
    (0..n).map(|i| byte(round, rank, area, i)).collect()
}

/// Bytes that no round writes where a read must land: a read that did not land
/// leaves them.
const POISON: u8 = 0xee;

/// Check that `n` bytes at `DST + off` are `want`, and that the byte after them was
/// not written.
fn check_landed(
    local: &dyn Region,
    at: u64,
    want: &[u8],
    after_ok: bool,
    what: &str,
) -> Result<(), Failure> {
    let mut got = vec![0u8; want.len() + usize::from(after_ok)];
    hostmem::read(local, at, &mut got)?;
    if let Some(i) = (0..want.len()).rev().find(|&i| got[i] != want[i]) {
        fail!(
            "{what}: byte {i} of {} is {:#04x}, expected {:#04x}{}",
            want.len(),
            got[i],
            want[i],
            if got[i] == POISON {
                " (never written: the read had not landed when flush returned)"
            } else {
                ""
            }
        );
    }
    ensure!(
        !after_ok || got[want.len()] == POISON,
        "{what}: the byte after the read's destination was written"
    );
    Ok(())
}

/// 23: rounds of (a) write then read back the same range on one port, no flush between
/// (both ranks at once), and (b) the peer stores into its buffer and signals, this rank
/// waits and reads (roles alternate); every byte checked after the flush. Then the
/// edges: a 0-byte read is a no-op, reads past either region are refused, and the port
/// still works.
pub fn port_read(ctx: &Ctx, n: u64, off: u64) -> CaseResult {
    let Some((peer, a)) = ctx.pair() else {
        return Ok(None);
    };
    let t = ctx.port()?;
    let area = up64(off + n);
    let (src, exp, publ, dst) = (64, 64 + area, 64 + 2 * area, 64 + 3 * area);
    let len = dst + area + 64;
    // The byte after a read's destination is inside the area (checked untouched).
    let after_ok = off + n < area;
    let b = ctx.boot.as_ref();
    let mut port = t.connect(&PeerContext {
        bootstrap: b,
        local: &ctx.endpoints[ctx.rank as usize],
        remote: &ctx.endpoints[peer as usize],
        tag: ctx.t(0),
    })?;
    let buf = alloc(ctx, len)?;
    let local = t.register(&*buf)?;
    send_export(b, peer, ctx.t(1), &PortMapped::export(&t, &local)?)?;
    let remote = t.import(recv_export(b, peer, ctx.t(1))?)?;
    ctx.handshake(peer, 2)?;

    let counter = hostmem::atomic_u64(&*buf, 0)?;
    let wait_for = |want: u64, round: u64| -> Result<(), Failure> {
        let deadline = Instant::now() + ctx.plan.wait_timeout();
        while counter.load(std::sync::atomic::Ordering::Acquire) < want {
            if Instant::now() > deadline {
                fail!(
                    "round {round}: rank {peer}'s signal did not arrive within {} ms",
                    ctx.plan.wait_timeout_ms
                );
            }
            std::thread::yield_now();
        }
        Ok(())
    };

    let rounds = if n >= 1 << 20 {
        ctx.plan.count(2, 10)
    } else {
        ctx.plan.count(10, 100)
    };
    for r in 0..rounds {
        // (a) Write then read back the same range of the peer's buffer.
        let mine = data(r, ctx.rank, 1, n);
        hostmem::write(&*buf, src + off, &mine)?;
        hostmem::fill(&*buf, dst, area, POISON)?;
        port.write(&remote, exp + off, &local, src + off, n)?;
        port.read(&local, dst + off, &remote, exp + off, n)?;
        port.flush()?;
        check_landed(
            &*buf,
            dst + off,
            &mine,
            after_ok,
            &format!("round {r}, a read of the range this port had just written"),
        )?;

        // (b) The publisher stores and signals; the reader waits, reads, signals back.
        hostmem::fill(&*buf, dst, area, POISON)?;
        if (r % 2 == 0) == a {
            hostmem::write(&*buf, publ + off, &data(r, ctx.rank, 2, n))?;
            port.signal(&remote, 0, 1)?;
            port.flush()?;
            wait_for(r + 1, r)?;
        } else {
            wait_for(r + 1, r)?;
            port.read(&local, dst + off, &remote, publ + off, n)?;
            port.flush()?;
            check_landed(
                &*buf,
                dst + off,
                &data(r, peer, 2, n),
                after_ok,
                &format!("round {r}, a read after rank {peer}'s signal"),
            )?;
            port.signal(&remote, 0, 1)?;
            port.flush()?;
        }
    }

    // Edges.
    port.read(&local, dst, &remote, publ, 0)?;
    let refused = |r: commhal_hal::Result<()>, what: &str| -> Result<(), Failure> {
        match r {
            Err(HalError::OutOfRange { .. }) => Ok(()),
            Err(e) => fail!("{what} was refused, but not as out of range: {e}"),
            Ok(()) => fail!("{what} was accepted"),
        }
    };
    refused(
        port.read(&local, dst, &remote, len - 4, 8),
        "a read past the end of the peer's buffer",
    )?;
    refused(
        port.read(&local, len - 4, &remote, publ, 8),
        "a read past the end of the local buffer",
    )?;
    refused(
        port.read(&local, dst, &remote, u64::MAX, 2),
        "a read at an offset that overflows",
    )?;
    hostmem::fill(&*buf, dst, area, POISON)?;
    port.read(&local, dst + off, &remote, src + off, n)?;
    port.flush()?;
    check_landed(
        &*buf,
        dst + off,
        &data(rounds - 1, peer, 1, n),
        after_ok,
        "a read after refused ones",
    )?;
    // Neither side drops its buffer or port while the other may still read it.
    ctx.handshake(peer, 3)?;
    Ok(a.then(|| format!("{rounds} rounds of write-then-read and read-after-signal")))
}
