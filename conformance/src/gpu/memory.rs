//! cuda-nvlink (`memory` channel) cases, run by the two ranks of a pair with real
//! kernels: device-src's conformance kernels and `script.cu`.
//!
//! Each rank exports a data region (send area at 0, receive area at [`AREA`]) and a
//! semaphore region (slot `s` at `64 s`) with cuda-nvlink, passes the exports (fds over
//! the bootstrap), and maps its partner's. One-way cases send from the lower rank.

use commhal_backend_cuda_nvlink::{CudaNvlink, NvlinkMapping, NvlinkMemory};
use commhal_cuda_rt::{Event, KernelArg, LaunchConfig};
use commhal_device_src::layout::{MemoryChannelHandle, error_code};
use commhal_hal::bootstrap::{recv_export, send_export};
use commhal_hal::{Device, DeviceKind, Guarantees, HalError, MemoryMapped, Result, Transport};

use crate::gpu::kernels::{self, GpuOp, validate_ops};
use crate::gpu::world::{Peer, Recorder, Scratch, Verdict, World};

const MIB: u64 = 1 << 20;
/// Bytes of each of the send and receive areas in the conformance run.
pub const AREA: u64 = 64 * MIB + 2 * MIB;
/// Message sizes of case 1.
pub const SIZES: [(u64, &str); 6] = [
    (1, "1B"),
    (7, "7B"),
    (16, "16B"),
    (4096 + 3, "4KiB+3"),
    (MIB, "1MiB"),
    (64 * MIB, "64MiB"),
];
const SEM_REGION: u64 = 64 * 1024;
const BACKEND: &str = "cuda-nvlink";

/// A connected pair: local regions, the partner's mapped, scratch, stream.
#[derive(Debug)]
pub struct MemPair<'w> {
    /// Messages with the partner.
    pub p: Peer<'w>,
    /// The transport.
    pub nv: CudaNvlink,
    /// Send area at 0, receive area at `area`.
    pub data: NvlinkMemory,
    /// Inbound semaphores.
    pub sems: NvlinkMemory,
    /// Partner's data, mapped.
    pub rdata: NvlinkMapping,
    /// Partner's semaphores, mapped.
    pub rsems: NvlinkMapping,
    /// Size of each area.
    pub area: u64,
    /// Per-case device scratch.
    pub scratch: Scratch,
    next_slot: u64,
}

/// Swap exports: the lower rank sends first.
pub fn swap_exports(
    p: &Peer<'_>,
    purpose: u64,
    mine: Vec<commhal_hal::Export>,
    expect: usize,
) -> Result<Vec<commhal_hal::Export>> {
    let n = expect;
    let boot = &p.w.boot;
    let send = |mine: &[commhal_hal::Export]| -> Result<()> {
        for (i, e) in mine.iter().enumerate() {
            send_export(boot, p.peer, p.tag(purpose + i as u64), e)?;
        }
        Ok(())
    };
    let recv = || -> Result<Vec<commhal_hal::Export>> {
        (0..n)
            .map(|i| recv_export(boot, p.peer, p.tag(purpose + i as u64)))
            .collect()
    };
    if p.lo {
        send(&mine)?;
        recv()
    } else {
        let got = recv()?;
        send(&mine)?;
        Ok(got)
    }
}

impl<'w> MemPair<'w> {
    /// Allocate, export, swap, map.
    pub fn connect(mut p: Peer<'w>, area: u64) -> Result<MemPair<'w>> {
        p.next_case();
        let w = p.w;
        let nv = CudaNvlink::new(w.device, legacy_from_env())?;
        let dev = Device {
            kind: DeviceKind::Cuda,
            ordinal: w.device,
        };
        let data = nv.alloc(dev, 2 * area)?;
        let sems = nv.alloc(dev, SEM_REGION)?;
        let exports = vec![nv.export(&data)?, nv.export(&sems)?];
        let mut got = swap_exports(&p, 0, exports, 2)?.into_iter();
        let (Some(ed), Some(es)) = (got.next(), got.next()) else {
            return Err(HalError::Bootstrap("partner sent too few exports".into()));
        };
        let rdata = nv.map(ed)?;
        let rsems = nv.map(es)?;
        if rdata.len() < 2 * area || rsems.len() < SEM_REGION {
            return Err(HalError::invalid(format!(
                "partner's regions are too small ({} / {} bytes)",
                rdata.len(),
                rsems.len()
            )));
        }
        p.barrier(10)?;
        Ok(MemPair {
            scratch: Scratch::new(&w.ctx)?,
            p,
            nv,
            data,
            sems,
            rdata,
            rsems,
            area,
            next_slot: 1,
        })
    }

    fn w(&self) -> &'w World {
        self.p.w
    }

    /// A fresh semaphore slot (both sides allocate in the same order).
    pub fn slot(&mut self) -> u64 {
        let s = self.next_slot;
        self.next_slot += 1;
        s
    }

    /// The handle for semaphore `slot`, `expected` consumed signals.
    pub fn handle(&self, slot: u64, expected: u64) -> MemoryChannelHandle {
        MemoryChannelHandle {
            local_buf: self.data.addr(),
            remote_buf: self.rdata.addr(),
            local_semaphore: self.sems.addr() + 64 * slot,
            remote_semaphore: self.rsems.addr() + 64 * slot,
            expected,
            error_flag: self.scratch.error_addr(),
            wait_ns: self.w().spin,
        }
    }

    /// Set this rank's inbound semaphore `slot` (before the partner signals it).
    pub fn set_local_semaphore(&self, slot: u64, value: u64) -> Result<()> {
        self.sems.write(64 * slot, &value.to_ne_bytes())
    }

    /// Queue a memory script on handle slot `hi` with op list `li`.
    pub fn script(&self, hi: u64, li: u64, ops: &[GpuOp]) -> Result<()> {
        let (addr, n) = self.prepare(li, ops)?;
        self.launch_script(hi, addr, n)
    }

    /// Validate and upload op list `li` (not allowed during a graph capture: it is a
    /// synchronous copy); returns `(address, count)` for [`MemPair::launch_script`].
    pub fn prepare(&self, li: u64, ops: &[GpuOp]) -> Result<(u64, u32)> {
        validate_ops(ops, self.data.len(), self.rdata.len())?;
        Ok((self.scratch.put_ops(li, ops)?, ops.len() as u32))
    }

    /// Queue the memory script at `ops_addr` (from [`MemPair::prepare`]) on handle
    /// slot `hi`.
    pub fn launch_script(&self, hi: u64, ops_addr: u64, nops: u32) -> Result<()> {
        let w = self.w();
        // SAFETY: matches commhal_gpu_memory_script(h, ops, nops, status, mismatches);
        // the handle points into this pair's live regions (data, sems and their
        // mappings, held by `self`), `ops_addr` came from `prepare`, which validated
        // every op range against them, and scratch lives in `self` until the caller
        // synchronises.
        unsafe {
            kernels::launch(
                &w.k.memory_script,
                &w.stream,
                LaunchConfig::linear(1, 512),
                &[
                    KernelArg::Ptr(self.scratch.handle_addr(hi)),
                    KernelArg::Ptr(ops_addr),
                    KernelArg::U32(nops),
                    KernelArg::Ptr(self.scratch.status_addr()),
                    KernelArg::Ptr(self.scratch.mismatches_addr()),
                ],
            )
        }
    }

    /// Zero `len` bytes of the local data region at `off` (queued).
    pub fn clear(&self, off: u64, len: u64) -> Result<()> {
        commhal_hal::error::check_range("clear", off, len, self.data.len())?;
        // SAFETY: the range was checked against the live local region held by `self`.
        unsafe { kernels::memset_async(&self.w().stream, self.data.addr() + off, 0, len) }
    }

    fn fill(&self, off: u64, len: u64, seed: u32) -> Result<()> {
        commhal_hal::error::check_range("fill", off, len, self.data.len())?;
        let w = self.w();
        // SAFETY: matches commhal_conf_fill(u8*, u64, u32); range checked against the
        // live local region.
        unsafe {
            kernels::launch(
                &w.k.fill,
                &w.stream,
                grid_for(len),
                &[
                    KernelArg::Ptr(self.data.addr() + off),
                    KernelArg::U64(len),
                    KernelArg::U32(seed),
                ],
            )
        }
    }

    fn check(&self, off: u64, len: u64, seed: u32) -> Result<()> {
        commhal_hal::error::check_range("check", off, len, self.data.len())?;
        let w = self.w();
        // SAFETY: matches commhal_conf_check(const u8*, u64, u32, u64*); range checked
        // against the live local region; the counter is in scratch.
        unsafe {
            kernels::launch(
                &w.k.check,
                &w.stream,
                grid_for(len),
                &[
                    KernelArg::Ptr(self.data.addr() + off),
                    KernelArg::U64(len),
                    KernelArg::U32(seed),
                    KernelArg::Ptr(self.scratch.mismatches_addr()),
                ],
            )
        }
    }

    /// Start a case: fresh tags, zeroed scratch.
    pub fn begin(&mut self) -> Result<()> {
        self.p.next_case();
        self.scratch.reset()
    }
}

/// `COMMHAL_CUDA_LEGACY_IPC=1`: the pairs allocate with legacy CUDA IPC (to exercise
/// cuda-nvlink's fallback on machines where VMM fds work).
pub fn legacy_from_env() -> bool {
    std::env::var(commhal_backend_cuda_nvlink::transport::LEGACY_ENV).is_ok_and(|v| v.trim() == "1")
}

/// A grid for a byte-parallel kernel over `len` bytes.
pub fn grid_for(len: u64) -> LaunchConfig {
    LaunchConfig::linear((len / (256 * 16)).clamp(1, 1024) as u32, 256)
}

/// Case seed from a few numbers (never 0 in the low byte).
pub fn seed(parts: &[u64]) -> u32 {
    let mut h: u64 = 0x9e37_79b9_7f4a_7c15;
    for &p in parts {
        h ^= p.wrapping_add(0x632b_e59b_d9b4_e019);
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 29;
    }
    (h as u32) | 1
}

fn not_claimed(what: &str, why: &str) -> Verdict {
    Verdict::NotSupported(format!("{BACKEND} does not claim {what}: {why}"))
}

/// Run every memory case of this pair into `rec`.
pub fn run_cases(pair: &mut MemPair<'_>, rec: &mut Recorder, suffix: &str) {
    let g: Guarantees = Transport::guarantees(&pair.nv);
    let quick = pair.w().quick;
    let rounds = if quick { 2 } else { 5 };
    let id = |s: &str| format!("{BACKEND}/memory/{s}{suffix}");

    // 1. message passing
    for &(n, label) in &SIZES {
        for &(so, doff, align) in &[(0u64, 0u64, "aligned"), (3, 5, "unaligned")] {
            for dir in ["lo-to-hi", "hi-to-lo"] {
                rec.case(
                    id(&format!("message-passing/{label}/{align}/{dir}")),
                    1,
                    "signal seen => every byte of the put is visible",
                    || message_passing(pair, n, so, doff, dir == "lo-to-hi", rounds),
                );
            }
        }
    }
    rec.case(
        id("strong-signal"),
        3,
        "put(A); put(B); signal; wait => A and B visible",
        || {
            if g.signal != commhal_hal::SignalStrength::Strong {
                return Ok(not_claimed("strong signals", "claims weak"));
            }
            strong_signal(pair, rounds)
        },
    );
    for (label, base) in [
        ("from-0", 0u64),
        ("near-2^32", (1u64 << 32) - 3),
        ("near-2^64", u64::MAX - 8),
    ] {
        rec.case(
            id(&format!("signal-counting/{label}")),
            4,
            "k signals from k blocks satisfy exactly k waits; the next poll is false; a bounded wait fails cleanly",
            || signal_counting(pair, base, if label == "near-2^64" || quick { 8 } else { 64 }),
        );
    }
    rec.case(
        id("relaxed-signal"),
        5,
        "relaxed signals are counted like signals",
        || relaxed(pair, 16),
    );
    rec.case(
        id("flush-source-reusable"),
        6,
        "put; flush; overwrite source; signal => peer sees old values",
        || {
            if !g.flush.source_reusable {
                return Ok(not_claimed("flush => source reusable", "see GUARANTEES"));
            }
            flush_source_reusable(pair, rounds)
        },
    );
    rec.case(id("flush-remote-visible"), 7, "put; flush; out-of-band barrier => peer sees the data", || {
        Ok(if g.flush.remote_visible {
            Verdict::Fail("claimed but this suite has no memory-channel test for it".into())
        } else {
            not_claimed(
                "flush => remote visible",
                "the memory channel's device flush() has no system fence; visibility comes from signal/wait",
            )
        })
    });
    rec.case(id("put-put-ordering"), 8, "put(X); put(Y); Y seen => X seen", || {
        Ok(if g.put_put_ordered {
            Verdict::Fail("claimed but this suite has no memory-channel test for it".into())
        } else {
            not_claimed(
                "put->put ordering",
                "a put is many threads' weak stores; two puts are unordered without a fence or signal",
            )
        })
    });
    rec.case(
        id("get-after-signal"),
        10,
        "peer writes, signals; get returns the new data",
        || {
            if !g.get {
                return Ok(not_claimed("get", "see GUARANTEES"));
            }
            get_after_signal(pair, rounds)
        },
    );
    rec.case(
        id("ping-pong"),
        11,
        "10^5 round trips both ways without deadlock",
        || ping_pong(pair, if quick { 10_000 } else { 100_000 }),
    );
    for (label, ll16) in [("ll8", false), ("ll16", true)] {
        rec.case(
            id(&format!("ll-packets/{label}")),
            14,
            "every element arrives with its own flag, across flag wrap",
            || {
                if (ll16 && !g.ll16) || (!ll16 && !g.ll8) {
                    return Ok(not_claimed(label, "see GUARANTEES"));
                }
                ll_packets(pair, ll16)
            },
        );
    }
    rec.case(
        id("edges/host-rejections"),
        16,
        "bad sizes, foreign and malformed exports are rejected on the host",
        || edges(pair),
    );
    for (label, legacy) in [("vmm-fd", false), ("legacy-ipc", true)] {
        rec.case(
            id(&format!("export-import/{label}")),
            17,
            "export/import round trip across processes",
            || export_import(pair, legacy),
        );
    }
    rec.case(
        id("graph-capture"),
        18,
        "a captured put+signal / wait+check graph replays N times",
        || {
            if !g.graph_capture {
                return Ok(not_claimed("graph capture", "see GUARANTEES"));
            }
            graph_capture(pair, if quick { 20 } else { 200 })
        },
    );
}

fn message_passing(
    pair: &mut MemPair<'_>,
    n: u64,
    so: u64,
    doff: u64,
    lo_sends: bool,
    rounds: u32,
) -> Result<Verdict> {
    pair.begin()?;
    let slot = pair.slot();
    let h = pair.handle(slot, 0);
    let haddr = pair.scratch.put_handle(0, &h)?;
    let sender = pair.p.lo == lo_sends;
    let area = pair.area;
    let w = pair.w();
    for round in 0..rounds {
        let s = seed(&[n, so, doff, u64::from(round), u64::from(lo_sends)]);
        if !sender {
            pair.clear(area + doff, n)?;
            w.sync("clearing the receive area")?;
        }
        pair.p.barrier(u64::from(round) % 32)?;
        if sender {
            pair.fill(so, n, s)?;
            // SAFETY: matches commhal_conf_put_signal(h, dst, src, bytes); src range
            // [so, so+n) and dst range [area+doff, +n) lie in the local/partner regions
            // (2*area bytes each, n + 5 <= area); the handle is in scratch.
            unsafe {
                kernels::launch(
                    &w.k.put_signal,
                    &w.stream,
                    LaunchConfig::linear(1, 1024),
                    &[
                        KernelArg::Ptr(haddr),
                        KernelArg::U64(area + doff),
                        KernelArg::U64(so),
                        KernelArg::U64(n),
                    ],
                )?;
            }
            w.sync("the sender's put+signal")?;
        } else {
            // SAFETY: matches commhal_conf_wait(h, ok); ok word in scratch.
            unsafe {
                kernels::launch(
                    &w.k.wait,
                    &w.stream,
                    LaunchConfig::linear(1, 32),
                    &[
                        KernelArg::Ptr(haddr),
                        KernelArg::Ptr(pair.scratch.ok_addr(0)),
                    ],
                )?;
            }
            pair.check(area + doff, n, s)?;
            w.sync("the receiver's wait+check")?;
            if pair.scratch.ok(0)? != 1 {
                return Ok(Verdict::Fail(format!(
                    "round {round}: the signal never arrived (device error {})",
                    pair.scratch.error_code()?
                )));
            }
            let bad = pair.scratch.mismatches()?;
            if bad > 0 {
                return Ok(Verdict::Fail(format!(
                    "round {round}: {bad} of {n} bytes wrong after the signal"
                )));
            }
        }
    }
    pair.p.barrier(40)?;
    Ok(Verdict::Pass(None))
}

/// Run `mine_lo` on the lower rank and `mine_hi` on the other (handle slot 0, op list
/// 0), synchronise, and return the script verdict.
fn both_scripts(
    pair: &MemPair<'_>,
    h: &MemoryChannelHandle,
    lo_ops: &[GpuOp],
    hi_ops: &[GpuOp],
    what: &str,
    allowed_error: (u32, u32),
) -> Result<Verdict> {
    pair.scratch.put_handle(0, h)?;
    let (ops, err) = if pair.p.lo {
        (lo_ops, allowed_error.0)
    } else {
        (hi_ops, allowed_error.1)
    };
    pair.script(0, 0, ops)?;
    pair.w().sync(what)?;
    pair.scratch.script_verdict(what, err)
}

fn strong_signal(pair: &mut MemPair<'_>, rounds: u32) -> Result<Verdict> {
    let (a, b) = (MIB, 4096u64);
    let area = pair.area;
    for round in 0..rounds {
        pair.begin()?;
        let slot = pair.slot();
        let h = pair.handle(slot, 0);
        let (s1, s2) = (seed(&[3, round.into()]), seed(&[4, round.into()]));
        if !pair.p.lo {
            pair.clear(area, a + b)?;
            pair.w().sync("clear")?;
        }
        pair.p.barrier(0)?;
        let lo = [
            GpuOp::fill(0, a, s1),
            GpuOp::fill(a, b, s2),
            GpuOp::put(area, 0, a),
            GpuOp::put(area + a, a, b),
            GpuOp::signal(),
        ];
        let hi = [
            GpuOp::wait(),
            GpuOp::check(area, a, s1),
            GpuOp::check(area + a, b, s2),
        ];
        let v = both_scripts(pair, &h, &lo, &hi, "strong signal", (0, 0))?;
        pair.p.barrier(1)?;
        if v != Verdict::Pass(None) {
            return Ok(v);
        }
    }
    Ok(Verdict::Pass(None))
}

fn signal_counting(pair: &mut MemPair<'_>, base: u64, k: u32) -> Result<Verdict> {
    pair.begin()?;
    let slot = pair.slot();
    let h = pair.handle(slot, base);
    if !pair.p.lo {
        pair.set_local_semaphore(slot, base)?;
    }
    pair.scratch.put_handle(0, &h)?;
    pair.p.barrier(0)?;
    let w = pair.w();
    if pair.p.lo {
        // k blocks, each signals once after a 0-byte put: k concurrent signals.
        // SAFETY: matches commhal_conf_put_signal(h, dst, src, bytes) with 0 bytes; the
        // handle's semaphores are live.
        unsafe {
            kernels::launch(
                &w.k.put_signal,
                &w.stream,
                LaunchConfig::linear(k, 64),
                &[
                    KernelArg::Ptr(pair.scratch.handle_addr(0)),
                    KernelArg::U64(0),
                    KernelArg::U64(0),
                    KernelArg::U64(0),
                ],
            )?;
        }
        w.sync("k signalling blocks")?;
        pair.p.barrier(1)?;
        return Ok(Verdict::Pass(None));
    }
    let mut ops: Vec<GpuOp> = (0..k).map(|_| GpuOp::wait()).collect();
    ops.extend([
        GpuOp::poll(false),
        GpuOp::set_wait(2000),
        GpuOp::wait_times_out(),
    ]);
    pair.script(0, 0, &ops)?;
    w.sync("k waits, a poll and a bounded wait")?;
    let v = pair
        .scratch
        .script_verdict("signal counting", error_code::WAIT_TIMEOUT)?;
    pair.p.barrier(1)?;
    Ok(v)
}

fn relaxed(pair: &mut MemPair<'_>, k: usize) -> Result<Verdict> {
    pair.begin()?;
    let slot = pair.slot();
    let h = pair.handle(slot, 0);
    pair.p.barrier(0)?;
    let lo = vec![GpuOp::relaxed_signal(); k];
    let mut hi = vec![GpuOp::relaxed_wait(); k];
    hi.push(GpuOp::poll(false));
    let v = both_scripts(pair, &h, &lo, &hi, "relaxed signal/wait", (0, 0))?;
    pair.p.barrier(1)?;
    Ok(v)
}

fn flush_source_reusable(pair: &mut MemPair<'_>, rounds: u32) -> Result<Verdict> {
    let n = MIB + 13;
    let area = pair.area;
    for round in 0..rounds {
        pair.begin()?;
        let slot = pair.slot();
        let h = pair.handle(slot, 0);
        let (s1, s2) = (seed(&[6, round.into()]), seed(&[7, round.into()]));
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
        let v = both_scripts(pair, &h, &lo, &hi, "flush => source reusable", (0, 0))?;
        pair.p.barrier(1)?;
        if v != Verdict::Pass(None) {
            return Ok(v);
        }
    }
    Ok(Verdict::Pass(None))
}

fn get_after_signal(pair: &mut MemPair<'_>, rounds: u32) -> Result<Verdict> {
    let n = MIB + 7;
    let area = pair.area;
    for round in 0..rounds {
        pair.begin()?;
        let slot = pair.slot();
        let h = pair.handle(slot, 0);
        let s = seed(&[10, round.into()]);
        pair.scratch.put_handle(0, &h)?;
        if pair.p.lo {
            pair.clear(area, n)?;
            pair.w().sync("clear")?;
        }
        pair.p.barrier(0)?;
        let w = pair.w();
        let v = if pair.p.lo {
            // SAFETY: matches commhal_conf_wait_get(h, dst, src, bytes, ok): dst
            // [area, area+n) local, src [0, n) in the partner's mapped region.
            unsafe {
                kernels::launch(
                    &w.k.wait_get,
                    &w.stream,
                    LaunchConfig::linear(1, 1024),
                    &[
                        KernelArg::Ptr(pair.scratch.handle_addr(0)),
                        KernelArg::U64(area),
                        KernelArg::U64(0),
                        KernelArg::U64(n),
                        KernelArg::Ptr(pair.scratch.ok_addr(0)),
                    ],
                )?;
            }
            pair.check(area, n, s)?;
            w.sync("wait+get+check")?;
            let (ok, bad) = (pair.scratch.ok(0)?, pair.scratch.mismatches()?);
            Verdict::from_check(ok == 1 && bad == 0, || {
                format!(
                    "round {round}: signal arrived = {}, {bad} byte(s) wrong",
                    ok == 1
                )
            })
        } else {
            pair.script(0, 0, &[GpuOp::fill(0, n, s), GpuOp::signal()])?;
            w.sync("fill+signal")?;
            pair.scratch.script_verdict("fill+signal", 0)?
        };
        pair.p.barrier(1)?;
        if v != Verdict::Pass(None) {
            return Ok(v);
        }
    }
    Ok(Verdict::Pass(None))
}

/// Ping-pong of 8-byte puts with release/acquire signals; returns the round-trip time
/// in microseconds as measured on this rank.
pub fn ping_pong_us(pair: &mut MemPair<'_>, iters: u64) -> Result<(bool, f64)> {
    pair.begin()?;
    let slot = pair.slot();
    let h = pair.handle(slot, 0);
    let haddr = pair.scratch.put_handle(0, &h)?;
    let w = pair.w();
    let (e0, e1) = (Event::new(&w.ctx)?, Event::new(&w.ctx)?);
    pair.p.barrier(0)?;
    e0.record(&w.stream)?;
    // SAFETY: matches commhal_conf_ping_pong(h, iters, initiator, bytes, relaxed, ok);
    // puts 8 bytes at offset 0 of both regions (live); ok word in scratch.
    unsafe {
        kernels::launch(
            &w.k.ping_pong,
            &w.stream,
            LaunchConfig::linear(1, 32),
            &[
                KernelArg::Ptr(haddr),
                KernelArg::U64(iters),
                KernelArg::U32(u32::from(pair.p.lo)),
                KernelArg::U64(8),
                KernelArg::U32(0),
                KernelArg::Ptr(pair.scratch.ok_addr(0)),
            ],
        )?;
    }
    e1.record(&w.stream)?;
    w.sync("ping-pong")?;
    let ms = e1.elapsed_ms_since(&e0)?;
    let ok = pair.scratch.ok(0)? == 1;
    pair.p.barrier(1)?;
    Ok((ok, f64::from(ms) * 1e3 / iters.max(1) as f64))
}

fn ping_pong(pair: &mut MemPair<'_>, iters: u64) -> Result<Verdict> {
    let (ok, us) = ping_pong_us(pair, iters)?;
    Ok(if ok {
        Verdict::Pass(Some(format!(
            "{iters} round trips, {us:.2} us per round trip"
        )))
    } else {
        Verdict::Fail(format!(
            "a wait timed out during {iters} round trips (device error {})",
            pair.scratch.error_code()?
        ))
    })
}

fn ll_packets(pair: &mut MemPair<'_>, ll16: bool) -> Result<Verdict> {
    pair.begin()?;
    let n: u64 = 40_000; // multiple of 8
    let area = pair.area;
    let pkt = area + MIB; // packets at recv + 1 MiB (2n bytes)
    let slot = pair.slot();
    let h = pair.handle(slot, 0);
    let haddr = pair.scratch.put_handle(0, &h)?;
    let (put, read) = if ll16 {
        (&pair.w().k.ll16_put, &pair.w().k.ll16_read)
    } else {
        (&pair.w().k.ll8_put, &pair.w().k.ll8_read)
    };
    if !pair.p.lo {
        pair.clear(pkt, 2 * n)?;
    }
    // Flag epochs on one packet buffer, never cleared in between: the flag wraps.
    let flags = [1u32, 2, 0xFFFF_FFFE, 0xFFFF_FFFF, 0, 1];
    let w = pair.w();
    for (round, &flag) in flags.iter().enumerate() {
        let s = seed(&[14, round as u64, u64::from(ll16)]);
        if !pair.p.lo {
            pair.clear(area, n)?;
            w.sync("clear")?;
        }
        pair.p.barrier(round as u64)?;
        if pair.p.lo {
            pair.fill(0, n, s)?;
            // SAFETY: matches commhal_conf_ll*_put(h, dst, src, bytes, flag): 2n packet
            // bytes at `pkt` in the partner's region (pkt + 2n < 2*area), n data bytes at
            // 0 locally.
            unsafe {
                kernels::launch(
                    put,
                    &w.stream,
                    LaunchConfig::linear(1, 256),
                    &[
                        KernelArg::Ptr(haddr),
                        KernelArg::U64(pkt),
                        KernelArg::U64(0),
                        KernelArg::U64(n),
                        KernelArg::U32(flag),
                    ],
                )?;
            }
            w.sync("packet writer")?;
        } else {
            pair.scratch.set_ok(0, 0)?;
            // SAFETY: matches commhal_conf_ll*_read(h, pkt, dst, bytes, flag, ok): packets
            // and data ranges lie in the local region; ok word in scratch.
            unsafe {
                kernels::launch(
                    read,
                    &w.stream,
                    LaunchConfig::linear(1, 256),
                    &[
                        KernelArg::Ptr(haddr),
                        KernelArg::U64(pkt),
                        KernelArg::U64(area),
                        KernelArg::U64(n),
                        KernelArg::U32(flag),
                        KernelArg::Ptr(pair.scratch.ok_addr(0)),
                    ],
                )?;
            }
            pair.check(area, n, s)?;
            w.sync("packet reader")?;
            let (ok, bad) = (pair.scratch.ok(0)?, pair.scratch.mismatches()?);
            if ok != 1 || bad != 0 {
                return Ok(Verdict::Fail(format!(
                    "flag {flag:#x}: every packet arrived = {}, {bad} byte(s) wrong",
                    ok == 1
                )));
            }
        }
    }
    pair.p.barrier(60)?;
    Ok(Verdict::Pass(None))
}

fn edges(pair: &mut MemPair<'_>) -> Result<Verdict> {
    pair.begin()?;
    let nv = &pair.nv;
    let dev = Device {
        kind: DeviceKind::Cuda,
        ordinal: pair.w().device,
    };
    let mut problems = Vec::new();
    if nv.alloc(dev, 0).is_ok() {
        problems.push("alloc of 0 bytes was accepted");
    }
    if nv.alloc(Device::HOST, 4096).is_ok() {
        problems.push("alloc on the host device was accepted");
    }
    let foreign = commhal_hal::Export {
        backend: "host-emu".into(),
        len: 4096,
        bytes: vec![0; 40],
        fds: Vec::new(),
    };
    if nv.map(foreign).is_ok() {
        problems.push("an export of another backend was mapped");
    }
    let mut bad = nv.export(&pair.sems)?;
    bad.bytes[0] ^= 0xff;
    if nv.map(bad).is_ok() {
        problems.push("an export with a corrupt header was mapped");
    }
    let mut wrong_len = nv.export(&pair.sems)?;
    wrong_len.len += 1;
    if nv.map(wrong_len).is_ok() {
        problems.push("an export whose length disagrees with its header was mapped");
    }
    if pair.data.write(pair.data.len() - 3, &[0; 4]).is_ok() {
        problems.push("a host write past the end of a region was accepted");
    }
    if pair.rdata.read(u64::MAX, &mut [0; 1]).is_ok() {
        problems.push("a read at an overflowing offset was accepted");
    }
    if validate_ops(
        &[GpuOp::put(pair.rdata.len(), 0, 1)],
        pair.data.len(),
        pair.rdata.len(),
    )
    .is_ok()
    {
        problems.push("a script put past the partner's region passed validation");
    }
    Ok(Verdict::from_check(problems.is_empty(), || {
        problems.join("; ")
    }))
}

fn export_import(pair: &mut MemPair<'_>, legacy: bool) -> Result<Verdict> {
    pair.begin()?;
    let w = pair.w();
    let nv = CudaNvlink::new(w.device, legacy)?;
    let request = 3 * MIB + 5;
    let dev = Device {
        kind: DeviceKind::Cuda,
        ordinal: w.device,
    };
    let pat = |n: usize, s: u32| -> Vec<u8> {
        (0..n)
            .map(|i| ((i as u64 * 131 + u64::from(s)) & 0xff) as u8)
            .collect()
    };
    let (n1, n2) = (request as usize, 4099usize);
    if pair.p.lo {
        let mem = nv.alloc(dev, request)?;
        if mem.len() < request {
            return Ok(Verdict::Fail(format!(
                "asked for {request} bytes, got {}",
                mem.len()
            )));
        }
        if !legacy {
            let g = commhal_cuda_rt::vmm::granularity(&w.ctx)?;
            if !mem.len().is_multiple_of(g) {
                return Ok(Verdict::Fail(format!(
                    "VMM length {} is not a multiple of the granularity {g}",
                    mem.len()
                )));
            }
        } else if !mem.is_legacy_ipc() {
            return Ok(Verdict::Fail(
                "legacy IPC was forced but the allocation is VMM".into(),
            ));
        }
        mem.write(0, &pat(n1, 17))?;
        let e = nv.export(&mem)?;
        if e.len != mem.len() {
            return Ok(Verdict::Fail(format!(
                "Export::len {} != region length {}",
                e.len,
                mem.len()
            )));
        }
        swap_exports(&pair.p, 0, vec![e], 0)?;
        pair.p.barrier(20)?; // partner read ours and wrote its pattern
        let mut back = vec![0u8; n2];
        mem.read(MIB + 1, &mut back)?;
        pair.p.barrier(21)?;
        Ok(Verdict::from_check(back == pat(n2, 99), || {
            "the partner's write through its mapping is not in our memory".into()
        }))
    } else {
        let mut got = swap_exports(&pair.p, 0, Vec::new(), 1)?;
        let e = got
            .pop()
            .ok_or_else(|| HalError::Bootstrap("no export received".into()))?;
        let m = nv.map(e)?;
        let want = if legacy { "legacy-ipc" } else { "vmm-fd" };
        let mut seen = vec![0u8; n1];
        m.read(0, &mut seen)?;
        m.write(MIB + 1, &pat(n2, 99))?;
        pair.p.barrier(20)?;
        pair.p.barrier(21)?;
        let mut problems = Vec::new();
        if m.method() != want {
            problems.push(format!("mapped with {} instead of {want}", m.method()));
        }
        if seen != pat(n1, 17) {
            problems.push("the owner's data is not visible through the mapping".into());
        }
        Ok(Verdict::from_check(problems.is_empty(), || {
            problems.join("; ")
        }))
    }
}

fn graph_capture(pair: &mut MemPair<'_>, replays: u32) -> Result<Verdict> {
    pair.begin()?;
    let n = 256 * 1024 + 3;
    let area = pair.area;
    let (sd, sa) = (pair.slot(), pair.slot());
    let (hd, ha) = (pair.handle(sd, 0), pair.handle(sa, 0));
    pair.scratch.put_handle(0, &hd)?;
    pair.scratch.put_handle(1, &ha)?;
    let s = seed(&[18]);
    let w = pair.w();
    if !pair.p.lo {
        pair.clear(area, n)?;
    } else {
        pair.script(0, 0, &[GpuOp::fill(0, n, s)])?;
    }
    w.sync("graph setup")?;
    pair.p.barrier(0)?;
    let graph = if pair.p.lo {
        // Each replay: wait for the partner's "ready", put + signal.
        let (wait, nw) = pair.prepare(1, &[GpuOp::wait()])?;
        let (put, np) = pair.prepare(2, &[GpuOp::put(area, 0, n), GpuOp::signal()])?;
        kernels::Graph::capture::<HalError>(&w.stream, || {
            pair.launch_script(1, wait, nw)?;
            pair.launch_script(0, put, np)
        })?
    } else {
        // Initial "ready", then per replay: wait, check, clear, "ready".
        pair.script(1, 3, &[GpuOp::signal()])?;
        w.sync("initial ready signal")?;
        let (recv, nr) = pair.prepare(
            1,
            &[
                GpuOp::wait(),
                GpuOp::check(area, n, s),
                GpuOp::zero(area, n),
            ],
        )?;
        let (ready, nd) = pair.prepare(2, &[GpuOp::signal()])?;
        kernels::Graph::capture::<HalError>(&w.stream, || {
            pair.launch_script(0, recv, nr)?;
            pair.launch_script(1, ready, nd)
        })?
    };
    for _ in 0..replays {
        graph.launch(&w.stream)?;
    }
    w.sync("graph replays")?;
    let v = pair
        .scratch
        .script_verdict(&format!("{replays} graph replays"), 0)?;
    pair.p.barrier(1)?;
    Ok(v)
}
