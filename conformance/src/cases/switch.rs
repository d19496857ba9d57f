//! Switch cases (15 and the switch edges of 16): reduce against a host reference on
//! exact inputs, broadcast from every root, many repeated barriers, bad offsets.

use std::sync::Arc;

use commhal_channels::{Element, ReduceOp, SwitchChannel};
use commhal_hal::dynamic;

use crate::case::{CaseResult, Failure};
use crate::ensure;
use crate::world::Ctx;

fn channel(
    ctx: &Ctx,
    bytes: u64,
) -> Result<SwitchChannel<Arc<dyn dynamic::DynSwitchMapped>>, Failure> {
    let t = ctx.switch()?;
    let members: Vec<u32> = (0..ctx.size).collect();
    let mut ch = SwitchChannel::create(&t, ctx.boot.as_ref(), &members, bytes, ctx.t(0))?;
    ch.set_policy(ctx.policy());
    Ok(ch)
}

fn to_bytes<T: Element>(v: &[T]) -> Vec<u8> {
    let mut b = vec![0u8; v.len() * T::BYTES];
    for (x, c) in v.iter().zip(b.chunks_exact_mut(T::BYTES)) {
        x.to_le(c);
    }
    b
}

/// 15: reduce (sum, min, max) equals the host reference; `make(rank, i)` must give
/// values whose reduction is exact in any order.
pub fn reduce<T: Element>(ctx: &Ctx, make: fn(u32, usize) -> T) -> CaseResult {
    let count = 1000usize;
    let ch = channel(ctx, (count * T::BYTES) as u64)?;
    for op in [ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max] {
        let mine: Vec<T> = (0..count).map(|i| make(ctx.rank, i)).collect();
        ch.write_local(0, &to_bytes(&mine))?;
        ch.barrier()?;
        let mut out = vec![make(0, 0); count];
        ch.reduce(op, 0, &mut out)?;
        for i in (0..count).rev() {
            let want = (1..ctx.size).fold(make(0, i), |acc, r| T::combine(op, acc, make(r, i)));
            ensure!(
                out[i] == want,
                "{op:?} of {} element {i} over {} ranks is {:?}, expected {want:?}",
                T::NAME,
                ctx.size,
                out[i]
            );
        }
        ch.barrier()?;
    }
    Ok(None)
}

/// 15: a broadcast from each root is visible in every member after the barrier.
pub fn broadcast(ctx: &Ctx) -> CaseResult {
    let n = 1001u64;
    let src = 1024u64;
    let ch = channel(ctx, src + n)?;
    let pat = |root: u32, i: u64| ((i * 17 + u64::from(root) * 29) % 251 + 1) as u8;
    for root in 0..ctx.size {
        if ctx.rank == root {
            let data: Vec<u8> = (0..n).map(|i| pat(root, i)).collect();
            ch.write_local(src, &data)?;
            ch.broadcast(0, src, n)?;
        }
        ch.barrier()?;
        let mut got = vec![0u8; n as usize];
        ch.read_local(0, &mut got)?;
        for i in (0..n).rev() {
            ensure!(
                got[i as usize] == pat(root, i),
                "broadcast from rank {root}: byte {i} is {}, expected {} after the barrier",
                got[i as usize],
                pat(root, i)
            );
        }
        ch.barrier()?;
    }
    Ok(None)
}

/// 15: many repeated barriers; every 50th round each member publishes the round number
/// and min/max reduce must both equal it (no member ran ahead or lagged).
pub fn barriers(ctx: &Ctx) -> CaseResult {
    let ch = channel(ctx, 64)?;
    let rounds = ctx.plan.count(500, 10_000);
    for r in 0..rounds {
        ch.barrier()
            .map_err(|e| Failure::Fail(format!("barrier {r} of {rounds}: {e}")))?;
        if r % 50 == 0 {
            ch.write_local(0, &r.to_le_bytes())?;
            ch.barrier()?;
            for op in [ReduceOp::Min, ReduceOp::Max] {
                let mut out = [0u64];
                ch.reduce(op, 0, &mut out)?;
                ensure!(
                    out[0] == r,
                    "round {r}: {op:?} over the members' round numbers is {}",
                    out[0]
                );
            }
            ch.barrier()?;
        }
    }
    Ok(Some(format!("{rounds} barriers")))
}

/// 16 (switch): out-of-range and misaligned reduce/broadcast offsets are errors.
pub fn edges(ctx: &Ctx) -> CaseResult {
    let ch = channel(ctx, 4096)?;
    let size = ch.size();
    let mut one = [0u32];
    ensure!(
        ch.reduce(ReduceOp::Sum, size, &mut one).is_err(),
        "reduce at the end of the data area was accepted"
    );
    ensure!(
        ch.reduce(ReduceOp::Sum, 2, &mut one).is_err(),
        "reduce of u32 at a misaligned offset was accepted"
    );
    ensure!(
        ch.reduce(ReduceOp::Sum, u64::MAX - 3, &mut one).is_err(),
        "reduce at offset u64::MAX-3 was accepted"
    );
    ensure!(
        ch.broadcast(size, 0, 1).is_err(),
        "broadcast past the end was accepted"
    );
    ensure!(
        ch.broadcast(0, size - 1, 2).is_err(),
        "broadcast from past the end was accepted"
    );
    let mut none: [u32; 0] = [];
    ch.reduce(ReduceOp::Sum, 0, &mut none)?;
    ch.barrier()?;
    Ok(None)
}
