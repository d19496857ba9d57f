//! cuda-dma (`port` channel) cases: device code pushes triggers into a
//! [`DeviceFifo`]; this rank's [`GpuProxy`] performs them with a cuda-dma port into the
//! partner's buffer (mapped through the cuda-dma import of its VMM fd export).
//!
//! Proxy ids: local memory 0 = this rank's data region; remote memory 0 = the partner's
//! data region, 1 = its semaphore region; semaphore `s` = counter at `64 s` of remote
//! memory 1, through port 0.

use std::sync::Arc;

use commhal_backend_cuda_dma::{CudaDma, DmaLocal, DmaPort, DmaRemote};
use commhal_backend_cuda_nvlink::{CudaNvlink, NvlinkMemory};
use commhal_channels::proxy::{ProxyContext, ProxySemaphore};
use commhal_cuda_rt::{KernelArg, LaunchConfig};
use commhal_device_src::layout::{PortChannelHandle, error_code};
use commhal_hal::transport::PeerContext;
use commhal_hal::{
    Device, DeviceKind, Guarantees, HalError, MemoryMapped, Port, PortMapped, Region, Result,
    Transport,
};

use crate::gpu::kernels::{self, GpuOp, validate_ops};
use crate::gpu::memory::{SIZES, legacy_from_env, seed, swap_exports};
use crate::gpu::world::{Peer, Recorder, Scratch, Verdict, World};
use commhal_cuda_coll::gpu_proxy::{DeviceFifo, GpuProxy};

const MIB: u64 = 1 << 20;
const BACKEND: &str = "cuda-dma";
const SEM_REGION: u64 = 64 * 1024;
/// Proxy semaphores (ids 0..N_SEMS, counters at 64 s).
const N_SEMS: u64 = 1000;
/// Semaphore slots whose counters start near a wrap, with their start values.
const WRAP_SLOTS: [(u64, u64, &str); 2] = [
    (N_SEMS - 2, (1 << 32) - 3, "near-2^32"),
    (N_SEMS - 1, u64::MAX - 8, "near-2^64"),
];
/// Signals of the wrap cases (fixed: the start value must leave room for them).
const WRAP_K: u32 = 8;
/// FIFO depth: small, so every case exercises back-pressure and wrap-around.
pub const FIFO_DEPTH: u64 = 64;

/// A connected port pair with its proxy running.
#[derive(Debug)]
pub struct PortPair<'w> {
    /// Messages with the partner.
    pub p: Peer<'w>,
    /// The transport.
    pub dma: CudaDma,
    /// Send area at 0, receive area at `area`.
    pub data: NvlinkMemory,
    /// Inbound semaphores.
    pub sems: NvlinkMemory,
    /// Partner's data length.
    pub remote_len: u64,
    /// Size of each area.
    pub area: u64,
    /// Device FIFO (shared with the proxy).
    pub fifo: Arc<DeviceFifo>,
    /// The running proxy.
    pub proxy: Option<GpuProxy>,
    /// A second port and the imports, for host-side cases.
    pub spare: (DmaPort, DmaLocal, DmaRemote, DmaRemote),
    /// Per-case scratch.
    pub scratch: Scratch,
    next_slot: u64,
}

impl<'w> PortPair<'w> {
    /// Allocate (cuda-nvlink), register/export/import (cuda-dma), connect, start the
    /// proxy.
    pub fn connect(mut p: Peer<'w>, area: u64) -> Result<PortPair<'w>> {
        p.next_case();
        let w = p.w;
        let nv = CudaNvlink::new(w.device, legacy_from_env())?;
        let dma = CudaDma::new(w.device, std::time::Duration::from_secs(30))?;
        let dev = Device {
            kind: DeviceKind::Cuda,
            ordinal: w.device,
        };
        let data = nv.alloc(dev, 2 * area)?;
        let sems = nv.alloc(dev, SEM_REGION)?;
        let (ldata, lsems) = (dma.register(&data)?, dma.register(&sems)?);
        let exports = vec![dma.export(&ldata)?, dma.export(&lsems)?];
        let mut got = swap_exports(&p, 0, exports, 2)?.into_iter();
        let (Some(ed), Some(es)) = (got.next(), got.next()) else {
            return Err(HalError::Bootstrap("partner sent too few exports".into()));
        };
        let (rdata, rsems) = (dma.import(ed)?, dma.import(es)?);
        if rdata.len() < 2 * area || rsems.len() < SEM_REGION {
            return Err(HalError::invalid("partner's regions are too small"));
        }
        // Wrap slots: our inbound counters start near the wrap, the partner's proxy
        // shadows for ours start at the same values.
        for (slot, base, _) in WRAP_SLOTS {
            sems.write(64 * slot, &base.to_ne_bytes())?;
        }
        let ctx = PeerContext {
            bootstrap: &w.boot,
            local: p.local(),
            remote: p.remote(),
            tag: p.tag(8),
        };
        let mut port = dma.connect(&ctx)?;
        for (slot, base, _) in WRAP_SLOTS {
            port.set_semaphore_value(&rsems, 64 * slot, base)?;
        }
        let spare_port = dma.connect(&ctx)?;
        let spare = (spare_port, ldata.clone(), rdata.clone(), rsems.clone());
        let fifo = Arc::new(DeviceFifo::new(&w.ctx, FIFO_DEPTH)?);
        let remote_len = rdata.len();
        let proxy_ctx = ProxyContext::<CudaDma> {
            ports: vec![port],
            locals: vec![ldata],
            remotes: vec![rdata, rsems],
            semaphores: (0..N_SEMS)
                .map(|s| ProxySemaphore {
                    port: 0,
                    remote: 1,
                    offset: 64 * s,
                })
                .collect(),
        };
        let proxy = GpuProxy::start_ports(fifo.clone(), proxy_ctx)?;
        p.barrier(10)?;
        Ok(PortPair {
            scratch: Scratch::new(&w.ctx)?,
            p,
            dma,
            data,
            sems,
            remote_len,
            area,
            fifo,
            proxy: Some(proxy),
            spare,
            next_slot: 1,
        })
    }

    fn w(&self) -> &'w World {
        self.p.w
    }

    /// A fresh semaphore id (both sides allocate in the same order).
    pub fn slot(&mut self) -> Result<u64> {
        let s = self.next_slot;
        if s >= WRAP_SLOTS[0].0 {
            return Err(HalError::invalid("out of proxy semaphores for this pair"));
        }
        self.next_slot += 1;
        Ok(s)
    }

    /// The port handle for semaphore `slot` with `expected` consumed signals.
    pub fn handle(&self, slot: u64, expected: u64) -> PortChannelHandle {
        PortChannelHandle {
            fifo: self.fifo.ring_addr(),
            fifo_depth: self.fifo.depth(),
            head: self.fifo.head_addr(),
            tail: self.fifo.tail_addr(),
            semaphore_id: slot as u32,
            local_memory_id: 0,
            remote_memory_id: 0,
            reserved: 0,
            local_semaphore: self.sems.addr() + 64 * slot,
            expected,
            error_flag: self.scratch.error_addr(),
            wait_ns: self.w().spin,
        }
    }

    /// Queue a port script (handle slot 0, op list `li`) on `blocks` blocks.
    pub fn script(&self, li: u64, blocks: u32, ops: &[GpuOp]) -> Result<()> {
        let (addr, n) = self.prepare(li, ops)?;
        self.launch_script(addr, n, blocks)
    }

    /// Validate and upload op list `li`; returns `(address, count)` for
    /// [`PortPair::launch_script`].
    pub fn prepare(&self, li: u64, ops: &[GpuOp]) -> Result<(u64, u32)> {
        validate_ops(ops, self.data.len(), self.remote_len)?;
        for o in ops {
            if o.dst > u64::from(u32::MAX)
                || o.src > u64::from(u32::MAX)
                || o.len > u64::from(u32::MAX)
            {
                return Err(HalError::invalid(
                    "port op offsets and lengths must fit 32 bits",
                ));
            }
        }
        Ok((self.scratch.put_ops(li, ops)?, ops.len() as u32))
    }

    /// Queue the port script at `ops_addr` (from [`PortPair::prepare`]) on handle slot
    /// 0, `blocks` blocks.
    pub fn launch_script(&self, ops_addr: u64, nops: u32, blocks: u32) -> Result<()> {
        let w = self.w();
        // SAFETY: matches commhal_gpu_port_script(h, local, ops, nops, status,
        // mismatches); the handle's FIFO, head, tail and semaphores are live (held by
        // `self`), `local` is this rank's data region and `prepare` validated every op
        // range against it and the partner's region; scratch lives in `self`.
        unsafe {
            kernels::launch(
                &w.k.port_script,
                &w.stream,
                LaunchConfig::linear(blocks, 512),
                &[
                    KernelArg::Ptr(self.scratch.handle_addr(0)),
                    KernelArg::Ptr(self.data.addr()),
                    KernelArg::Ptr(ops_addr),
                    KernelArg::U32(nops),
                    KernelArg::Ptr(self.scratch.status_addr()),
                    KernelArg::Ptr(self.scratch.mismatches_addr()),
                ],
            )
        }
    }

    /// Zero `len` local bytes at `off` (queued).
    pub fn clear(&self, off: u64, len: u64) -> Result<()> {
        commhal_hal::error::check_range("clear", off, len, self.data.len())?;
        // SAFETY: range checked against the live local region held by `self`.
        unsafe { kernels::memset_async(&self.w().stream, self.data.addr() + off, 0, len) }
    }

    /// Start a case.
    pub fn begin(&mut self) -> Result<()> {
        self.p.next_case();
        if let Some(e) = self.proxy.as_ref().and_then(GpuProxy::error) {
            return Err(HalError::backend(
                BACKEND,
                format!("the proxy failed earlier: {e}"),
            ));
        }
        self.scratch.reset()
    }

    /// Lower rank runs `lo`, the other `hi`, on handle `h`; synchronise; verdict.
    fn both(
        &self,
        h: &PortChannelHandle,
        lo: &[GpuOp],
        hi: &[GpuOp],
        what: &str,
        allowed: (u32, u32),
    ) -> Result<Verdict> {
        self.scratch.put_handle(0, h)?;
        let (ops, err) = if self.p.lo {
            (lo, allowed.0)
        } else {
            (hi, allowed.1)
        };
        self.script(0, 1, ops)?;
        self.w().sync(what)?;
        let v = self.scratch.script_verdict(what, err)?;
        Ok(match (v, self.proxy.as_ref().and_then(GpuProxy::error)) {
            (Verdict::Pass(_), Some(e)) => Verdict::Fail(format!("{what}: proxy error: {e}")),
            (v, _) => v,
        })
    }

    /// Stop the proxy (reports its error, if any).
    pub fn finish(mut self) -> Result<()> {
        match self.proxy.take() {
            Some(p) => p.stop(),
            None => Ok(()),
        }
    }
}

fn not_claimed(what: &str, why: &str) -> Verdict {
    Verdict::NotSupported(format!("{BACKEND} does not claim {what}: {why}"))
}

/// Run every port case of this pair into `rec`.
pub fn run_cases(pair: &mut PortPair<'_>, rec: &mut Recorder, suffix: &str) {
    let g: Guarantees = Transport::guarantees(&pair.dma);
    let quick = pair.w().quick;
    let rounds = if quick { 2 } else { 5 };
    let id = |s: &str| format!("{BACKEND}/port/{s}{suffix}");

    for &(n, label) in &SIZES {
        for &(so, doff, align) in &[(0u64, 0u64, "aligned"), (3, 5, "unaligned")] {
            for dir in ["lo-to-hi", "hi-to-lo"] {
                rec.case(
                    id(&format!("message-passing/{label}/{align}/{dir}")),
                    1,
                    "put; signal; wait => every byte visible",
                    || {
                        one_way(
                            pair,
                            n,
                            so,
                            doff,
                            dir == "lo-to-hi",
                            rounds,
                            Kind::PutThenSignal,
                        )
                    },
                );
            }
        }
    }
    for (label, kind) in [
        ("put-with-signal", Kind::Fused),
        ("put-with-signal-and-flush", Kind::FusedFlush),
    ] {
        rec.case(
            id(&format!("{label}/1MiB+1")),
            2,
            "fused put+signal: signal => its data visible",
            || one_way(pair, MIB + 1, 0, 0, true, rounds, kind),
        );
    }
    rec.case(
        id("strong-signal"),
        3,
        "put(A); put_with_signal(B); wait => A visible",
        || {
            if g.signal != commhal_hal::SignalStrength::Strong {
                return Ok(not_claimed("strong signals", "claims weak"));
            }
            strong(pair, rounds)
        },
    );
    rec.case(
        id("signal-counting/from-0"),
        4,
        "k signals pushed by k blocks satisfy exactly k waits; the next poll is false; a bounded wait fails cleanly",
        || counting(pair, None, if quick { 8 } else { 64 }),
    );
    for (slot, base, label) in WRAP_SLOTS {
        rec.case(
            id(&format!("signal-counting/{label}")),
            4,
            "no lost or doubled signal across the counter wrap",
            || counting(pair, Some((slot, base)), WRAP_K),
        );
    }
    rec.case(id("relaxed-signal"), 5, "relaxed signal/wait", || {
        Ok(Verdict::NotSupported(
            "port channels have no relaxed signal (every port signal is stream-ordered)".into(),
        ))
    });
    rec.case(
        id("flush-source-reusable"),
        6,
        "put; flush; overwrite source; signal => old values",
        || {
            if !g.flush.source_reusable {
                return Ok(not_claimed("flush => source reusable", "see GUARANTEES"));
            }
            flush_source(pair, rounds)
        },
    );
    rec.case(
        id("flush-remote-visible"),
        7,
        "put; flush; out-of-band barrier => new values, no signal",
        || {
            if !g.flush.remote_visible {
                return Ok(not_claimed("flush => remote visible", "see GUARANTEES"));
            }
            flush_remote(pair, rounds)
        },
    );
    rec.case(
        id("put-put-ordering"),
        8,
        "put(X); put(Y); Y seen => X seen",
        || {
            if !g.put_put_ordered {
                return Ok(not_claimed("put->put ordering", "see GUARANTEES"));
            }
            put_put(pair, if quick { 4 } else { 20 })
        },
    );
    rec.case(id("get-after-signal"), 10, "get", || {
        Ok(not_claimed("get", "the copy engine port only writes"))
    });
    rec.case(
        id("ping-pong"),
        11,
        "round trips both ways without deadlock",
        || {
            let (ok, us, n) = ping_pong_us(pair, if quick { 4 } else { 40 })?;
            Ok(if ok {
                Verdict::Pass(Some(format!("{n} round trips, {us:.2} us per round trip")))
            } else {
                Verdict::Fail(format!(
                    "a wait timed out (device error {})",
                    pair.scratch.error_code()?
                ))
            })
        },
    );
    rec.case(
        id("proxy-fifo/back-pressure-wrap"),
        13,
        "more triggers than the FIFO depth, pushed concurrently: none lost, ring wraps",
        || fifo_flood(pair, if quick { 4 } else { 16 }),
    );
    rec.case(
        id("proxy-fifo/zero-size"),
        13,
        "a zero-size put trigger is a no-op",
        || zero_size(pair),
    );
    for l in ["ll8", "ll16"] {
        rec.case(id(&format!("ll-packets/{l}")), 14, "LL packets", || {
            Ok(not_claimed(
                l,
                "the copy engine does not give 8/16-byte single stores",
            ))
        });
    }
    rec.case(
        id("edges/host-rejections"),
        16,
        "out-of-range, unaligned and unregistered rejected on the host",
        || edges(pair),
    );
    rec.case(
        id("export-import/registered-twice"),
        17,
        "a buffer registered and exported twice is written through the second import",
        || registered_twice(pair),
    );
    rec.case(id("graph-capture"), 18, "graph capture", || {
        Ok(not_claimed(
            "graph capture",
            "the proxy is a host thread; not tested",
        ))
    });
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    PutThenSignal,
    Fused,
    FusedFlush,
}

fn one_way(
    pair: &mut PortPair<'_>,
    n: u64,
    so: u64,
    doff: u64,
    lo_sends: bool,
    rounds: u32,
    kind: Kind,
) -> Result<Verdict> {
    let area = pair.area;
    let slot = pair.slot()?;
    let sender = pair.p.lo == lo_sends;
    for round in 0..rounds {
        pair.begin()?;
        let h = pair.handle(slot, u64::from(round));
        let s = seed(&[n, so, doff, round.into(), kind as u64, u64::from(lo_sends)]);
        if !sender {
            pair.clear(area + doff, n)?;
            pair.w().sync("clear")?;
        }
        pair.p.barrier(round.into())?;
        let send: Vec<GpuOp> = match kind {
            Kind::PutThenSignal => vec![
                GpuOp::fill(so, n, s),
                GpuOp::put(area + doff, so, n),
                GpuOp::signal(),
            ],
            Kind::Fused => vec![GpuOp::fill(so, n, s), GpuOp::put_signal(area + doff, so, n)],
            Kind::FusedFlush => vec![
                GpuOp::fill(so, n, s),
                GpuOp::put_signal_flush(area + doff, so, n),
            ],
        };
        let recv = [GpuOp::wait(), GpuOp::check(area + doff, n, s)];
        // `both` runs lo's list on the lower rank: map sender/receiver onto lo/hi.
        let (lo, hi): (&[GpuOp], &[GpuOp]) = if lo_sends {
            (&send, &recv)
        } else {
            (&recv, &send)
        };
        let v = pair.both(&h, lo, hi, &format!("round {round}"), (0, 0))?;
        pair.p.barrier(32 + u64::from(round))?;
        if v != Verdict::Pass(None) {
            return Ok(v);
        }
    }
    Ok(Verdict::Pass(None))
}

fn strong(pair: &mut PortPair<'_>, rounds: u32) -> Result<Verdict> {
    let (a, b) = (MIB, 4099u64);
    let area = pair.area;
    for round in 0..rounds {
        pair.begin()?;
        let slot = pair.slot()?;
        let h = pair.handle(slot, 0);
        let (s1, s2) = (seed(&[31, round.into()]), seed(&[32, round.into()]));
        if !pair.p.lo {
            pair.clear(area, a + b)?;
            pair.w().sync("clear")?;
        }
        pair.p.barrier(0)?;
        let lo = [
            GpuOp::fill(0, a, s1),
            GpuOp::fill(a, b, s2),
            GpuOp::put(area, 0, a),
            GpuOp::put_signal(area + a, a, b),
        ];
        let hi = [
            GpuOp::wait(),
            GpuOp::check(area, a, s1),
            GpuOp::check(area + a, b, s2),
        ];
        let v = pair.both(&h, &lo, &hi, "strong signal", (0, 0))?;
        pair.p.barrier(1)?;
        if v != Verdict::Pass(None) {
            return Ok(v);
        }
    }
    Ok(Verdict::Pass(None))
}

fn counting(pair: &mut PortPair<'_>, wrap: Option<(u64, u64)>, k: u32) -> Result<Verdict> {
    pair.begin()?;
    let (slot, base) = match wrap {
        Some(sb) => sb,
        None => (pair.slot()?, 0),
    };
    let h = pair.handle(slot, base);
    pair.scratch.put_handle(0, &h)?;
    pair.p.barrier(0)?;
    let w = pair.w();
    let v = if pair.p.lo {
        // k blocks push one SIGNAL each, concurrently.
        pair.script(0, k, &[GpuOp::signal()])?;
        w.sync("k signalling blocks")?;
        pair.scratch
            .script_verdict("k concurrent signal pushes", 0)?
    } else {
        let mut ops: Vec<GpuOp> = (0..k).map(|_| GpuOp::wait()).collect();
        ops.extend([
            GpuOp::poll(false),
            GpuOp::set_wait(2000),
            GpuOp::wait_times_out(),
        ]);
        pair.script(0, 1, &ops)?;
        w.sync("k waits, a poll and a bounded wait")?;
        pair.scratch
            .script_verdict("signal counting", error_code::WAIT_TIMEOUT)?
    };
    pair.p.barrier(1)?;
    Ok(v)
}

fn flush_source(pair: &mut PortPair<'_>, rounds: u32) -> Result<Verdict> {
    let n = 4 * MIB + 1;
    let area = pair.area;
    for round in 0..rounds {
        pair.begin()?;
        let slot = pair.slot()?;
        let h = pair.handle(slot, 0);
        let (s1, s2) = (seed(&[61, round.into()]), seed(&[62, round.into()]));
        if !pair.p.lo {
            pair.clear(area, n)?;
            pair.w().sync("clear")?;
        }
        pair.p.barrier(0)?;
        let lo = [
            GpuOp::fill(0, n, s1),
            GpuOp::put(area, 0, n),
            GpuOp::flush(),
            GpuOp::fill(0, n, s2),
            GpuOp::signal(),
        ];
        let hi = [GpuOp::wait(), GpuOp::check(area, n, s1)];
        let v = pair.both(&h, &lo, &hi, "flush => source reusable", (0, 0))?;
        pair.p.barrier(1)?;
        if v != Verdict::Pass(None) {
            return Ok(v);
        }
    }
    Ok(Verdict::Pass(None))
}

fn flush_remote(pair: &mut PortPair<'_>, rounds: u32) -> Result<Verdict> {
    let n = 4 * MIB + 3;
    let area = pair.area;
    for round in 0..rounds {
        pair.begin()?;
        let slot = pair.slot()?;
        let h = pair.handle(slot, 0);
        pair.scratch.put_handle(0, &h)?;
        let s = seed(&[71, round.into()]);
        if !pair.p.lo {
            pair.clear(area, n)?;
            pair.w().sync("clear")?;
        }
        pair.p.barrier(0)?;
        if pair.p.lo {
            pair.script(
                0,
                1,
                &[GpuOp::fill(0, n, s), GpuOp::put(area, 0, n), GpuOp::flush()],
            )?;
            pair.w().sync("put+flush")?;
        }
        pair.p.barrier(1)?; // the out-of-band barrier: no signal
        if !pair.p.lo {
            pair.script(0, 1, &[GpuOp::check(area, n, s)])?;
            pair.w().sync("check")?;
        }
        let v = pair.scratch.script_verdict("flush => remote visible", 0)?;
        pair.p.barrier(2)?;
        if v != Verdict::Pass(None) {
            return Ok(v);
        }
    }
    Ok(Verdict::Pass(None))
}

fn put_put(pair: &mut PortPair<'_>, rounds: u32) -> Result<Verdict> {
    let x = 8 * MIB + 5;
    let area = pair.area;
    for round in 0..rounds {
        pair.begin()?;
        let slot = pair.slot()?;
        let h = pair.handle(slot, 0);
        let (sx, sy) = (seed(&[81, round.into()]), seed(&[82, round.into()]));
        let marker = (sy & 0xff) as u8; // pattern byte 0 of seed sy (seeds are odd: != 0)
        if !pair.p.lo {
            pair.clear(area, x + 8)?;
            pair.w().sync("clear")?;
        }
        pair.p.barrier(0)?;
        let lo = [
            GpuOp::fill(0, x, sx),
            GpuOp::fill(x, 8, sy),
            GpuOp::put(area, 0, x),
            GpuOp::put(area + x, x, 8),
            GpuOp::flush(),
        ];
        let hi = [
            GpuOp::wait_byte(area + x, marker),
            GpuOp::check(area, x, sx),
        ];
        let v = pair.both(&h, &lo, &hi, "put->put ordering", (0, 0))?;
        pair.p.barrier(1)?;
        if v != Verdict::Pass(None) {
            return Ok(v);
        }
    }
    Ok(Verdict::Pass(None))
}

/// Port ping-pong: `launches` launches of 60 round trips of 8-byte put_with_signal.
/// Returns (ok, microseconds per round trip on this rank, round trips).
pub fn ping_pong_us(pair: &mut PortPair<'_>, launches: u32) -> Result<(bool, f64, u64)> {
    const TRIPS: usize = 60;
    pair.begin()?;
    let slot = pair.slot()?;
    let h = pair.handle(slot, 0);
    pair.scratch.put_handle(0, &h)?;
    let mut ops = Vec::with_capacity(2 * TRIPS);
    for _ in 0..TRIPS {
        let pair_ops = [GpuOp::put_signal(pair.area, 0, 8), GpuOp::wait()];
        if pair.p.lo {
            ops.extend(pair_ops);
        } else {
            ops.extend([pair_ops[1], pair_ops[0]]);
        }
    }
    pair.p.barrier(0)?;
    let w = pair.w();
    let (addr, n) = pair.prepare(0, &ops)?;
    let start = std::time::Instant::now();
    for _ in 0..launches {
        pair.launch_script(addr, n, 1)?;
    }
    w.sync("port ping-pong")?;
    let secs = start.elapsed().as_secs_f64();
    let (ok, _) = pair.scratch.status()?;
    pair.p.barrier(1)?;
    let trips = (launches as usize * TRIPS) as u64;
    Ok((ok, secs * 1e6 / trips.max(1) as f64, trips))
}

fn fifo_flood(pair: &mut PortPair<'_>, per_thread: u64) -> Result<Verdict> {
    pair.begin()?;
    let (blocks, threads, len) = (4u32, 64u32, 1024u64);
    let total = u64::from(blocks * threads) * per_thread * len;
    let slot = pair.slot()?;
    let h = pair.handle(slot, 0);
    let haddr = pair.scratch.put_handle(0, &h)?;
    let s = seed(&[13, per_thread]);
    let before = pair.proxy.as_ref().map_or(0, GpuProxy::completed);
    if pair.p.lo {
        pair.script(0, 1, &[GpuOp::fill(0, total, s)])?;
    } else {
        pair.clear(0, total)?;
    }
    pair.w().sync("setup")?;
    pair.p.barrier(0)?;
    let w = pair.w();
    let v = if pair.p.lo {
        pair.scratch.set_ok(0, 1)?;
        // SAFETY: matches commhal_conf_fifo_push(h, per_thread, len, ok); the handle's
        // FIFO and counters are live; the pushed offsets cover [0, total) of both data
        // regions (total < area) and the proxy bounds-checks every trigger again.
        unsafe {
            kernels::launch(
                &w.k.fifo_push,
                &w.stream,
                LaunchConfig::linear(blocks, threads),
                &[
                    KernelArg::Ptr(haddr),
                    KernelArg::U64(per_thread),
                    KernelArg::U64(len),
                    KernelArg::Ptr(pair.scratch.ok_addr(0)),
                ],
            )?;
        }
        w.sync("concurrent FIFO pushes")?;
        let pushed = u64::from(blocks * threads) * per_thread + 2 * u64::from(blocks);
        let done = pair.proxy.as_ref().map_or(0, GpuProxy::completed) - before;
        let ok = pair.scratch.ok(0)?;
        let mut problems = Vec::new();
        if ok != 1 {
            problems.push(format!(
                "a push or flush failed on the device (error {})",
                pair.scratch.error_code()?
            ));
        }
        if done < pushed {
            problems.push(format!("the proxy completed {done} of {pushed} triggers"));
        }
        if pushed <= FIFO_DEPTH {
            problems.push("not more triggers than the FIFO depth".into());
        }
        if problems.is_empty() {
            Verdict::Pass(Some(format!(
                "{pushed} triggers through a {FIFO_DEPTH}-slot ring ({} wraps)",
                pushed / FIFO_DEPTH
            )))
        } else {
            Verdict::Fail(problems.join("; "))
        }
    } else {
        let mut ops: Vec<GpuOp> = (0..blocks).map(|_| GpuOp::wait()).collect();
        ops.push(GpuOp::check(0, total, s));
        pair.script(0, 1, &ops)?;
        w.sync("wait for every block's signal, check")?;
        pair.scratch.script_verdict("FIFO flood receiver", 0)?
    };
    pair.p.barrier(1)?;
    Ok(v)
}

fn zero_size(pair: &mut PortPair<'_>) -> Result<Verdict> {
    pair.begin()?;
    let slot = pair.slot()?;
    let h = pair.handle(slot, 0);
    pair.p.barrier(0)?;
    let area = pair.area;
    let v = pair.both(
        &h,
        &[GpuOp::put(area, 0, 0), GpuOp::signal(), GpuOp::flush()],
        &[GpuOp::wait()],
        "zero-size put",
        (0, 0),
    )?;
    pair.p.barrier(1)?;
    Ok(v)
}

fn edges(pair: &mut PortPair<'_>) -> Result<Verdict> {
    pair.begin()?;
    let dma = pair.dma.clone();
    let (port, local, rdata, rsems) = &mut pair.spare;
    let checks = [
        (
            "a write past the partner's region",
            port.write(rdata, rdata.len() - 4, local, 0, 8),
        ),
        (
            "a write from past the local region",
            port.write(rdata, 0, local, local.len() - 4, 8),
        ),
        (
            "a write at an overflowing offset",
            port.write(rdata, u64::MAX, local, 0, 2),
        ),
        ("an unaligned semaphore", port.signal(rsems, 4, 1)),
        (
            "a semaphore past the region",
            port.signal(rsems, rsems.len(), 1),
        ),
    ];
    let mut problems: Vec<String> = checks
        .iter()
        .filter(|(_, r)| r.is_ok())
        .map(|(what, _)| format!("{what} was accepted"))
        .collect();
    #[derive(Debug)]
    struct Foreign;
    impl Region for Foreign {
        fn addr(&self) -> u64 {
            0x1000
        }
        fn len(&self) -> u64 {
            64
        }
        fn device(&self) -> Device {
            Device::HOST
        }
        fn kind(&self) -> commhal_hal::MemoryKind {
            commhal_hal::MemoryKind::HostShared
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    }
    match dma.register(&Foreign) {
        Err(HalError::Unregistered { .. }) => {}
        other => problems.push(format!("registering foreign memory gave {other:?}")),
    }
    let foreign = commhal_hal::Export {
        backend: "cuda-nvlink".into(),
        ..Default::default()
    };
    if dma.import(foreign).is_ok() {
        problems.push("an export of another backend was imported".into());
    }
    if let Err(e) = port
        .write(rdata, 0, local, 0, 0)
        .and_then(|()| port.flush())
    {
        problems.push(format!("a 0-byte write then flush failed: {e}"));
    }
    if DeviceFifo::new(&pair.p.w.ctx, 0).is_ok() {
        problems.push("a FIFO of depth 0 was accepted".into());
    }
    let host = commhal_hal::Endpoint::this_process(pair.p.w.rank(), Device::HOST);
    let ctx = PeerContext {
        bootstrap: &pair.p.w.boot,
        local: &host,
        remote: pair.p.remote(),
        tag: pair.p.tag(9),
    };
    if dma.connect(&ctx).is_ok() {
        problems.push("a port from a host endpoint was connected".into());
    }
    Ok(Verdict::from_check(problems.is_empty(), || {
        problems.join("; ")
    }))
}

fn registered_twice(pair: &mut PortPair<'_>) -> Result<Verdict> {
    pair.begin()?;
    let n = 64 * 1024 + 3;
    let s = seed(&[17, 2]);
    let dma = pair.dma.clone();
    let area = pair.area;
    let again = dma.register(&pair.data)?;
    let e = dma.export(&again)?;
    let mut got = swap_exports(&pair.p, 20, vec![e], 1)?;
    let second = dma.import(
        got.pop()
            .ok_or_else(|| HalError::Bootstrap("no export".into()))?,
    )?;
    if !pair.p.lo {
        pair.clear(area + 3 * MIB, n)?;
        pair.w().sync("clear")?;
    } else {
        pair.script(0, 1, &[GpuOp::fill(3 * MIB, n, s)])?;
        pair.w().sync("fill")?;
    }
    pair.p.barrier(0)?;
    if pair.p.lo {
        let (port, local, _, _) = &mut pair.spare;
        port.write(&second, area + 3 * MIB, local, 3 * MIB, n)?;
        port.flush()?;
    }
    pair.p.barrier(1)?;
    let v = if pair.p.lo {
        Verdict::Pass(None)
    } else {
        pair.script(0, 1, &[GpuOp::check(area + 3 * MIB, n, s)])?;
        pair.w().sync("check")?;
        pair.scratch
            .script_verdict("write through the second import", 0)?
    };
    pair.p.barrier(2)?;
    Ok(v)
}
