//! Benchmarks between ranks 0 and 1 (other ranks wait): ping-pong latency and put
//! bandwidth of cuda-nvlink and cuda-dma, and `cuMemcpyPeerAsync` bandwidth between the
//! same two GPUs from rank 0's process, measured in the same run. Medians of several
//! repetitions; printed by rank 0 (table or JSON). Numbers are measurements, never
//! assertions.

use commhal_cuda_rt::{DeviceBuffer, Event, KernelArg, LaunchConfig};
use commhal_hal::bootstrap::Bootstrap;
use commhal_hal::{HalError, Port, Result};
use serde::Serialize;

use crate::gpu::kernels;
use crate::gpu::memory::MemPair;
use crate::gpu::port::{self, PortPair};
use crate::gpu::world::{Peer, World};

const MIB: u64 = 1 << 20;

/// One measurement.
#[derive(Debug, Clone, Serialize)]
pub struct BenchRow {
    /// `cuda-nvlink`, `cuda-dma` or `cuMemcpyPeer`.
    pub backend: String,
    /// `latency` or `bandwidth`.
    pub metric: String,
    /// Message size in bytes.
    pub bytes: u64,
    /// Median value.
    pub value: f64,
    /// `us` (round trip) or `GB/s`.
    pub unit: String,
    /// Repetitions / iterations behind the median.
    pub samples: String,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn sizes(max: u64) -> Vec<u64> {
    let mut v = Vec::new();
    let mut s = MIB;
    while s <= max {
        v.push(s);
        s *= 4;
    }
    v
}

fn row(
    backend: &str,
    metric: &str,
    bytes: u64,
    value: f64,
    unit: &str,
    samples: String,
) -> BenchRow {
    BenchRow {
        backend: backend.into(),
        metric: metric.into(),
        bytes,
        value,
        unit: unit.into(),
        samples,
    }
}

/// Run the benchmarks on this rank; rank 0 prints. Returns the exit code.
pub fn run(quick: bool, json: bool) -> i32 {
    let w = match World::init(quick) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("gpu bench: cannot start: {e}");
            return 1;
        }
    };
    let result = if w.rank() < 2 && w.size() >= 2 {
        measure(&w)
    } else {
        Ok(Vec::new())
    };
    let code = match &result {
        Ok(rows) if w.rank() == 0 => {
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(rows).unwrap_or_else(|e| format!("\"{e}\""))
                );
            } else {
                print_table(rows);
            }
            0
        }
        Ok(_) => 0,
        Err(e) => {
            eprintln!("gpu bench: rank {}: {e}", w.rank());
            1
        }
    };
    if let Err(e) = w.boot.barrier() {
        eprintln!("gpu bench: final barrier: {e}");
        return 1;
    }
    code
}

fn print_table(rows: &[BenchRow]) {
    println!(
        "{:<14} {:<10} {:>12} {:>12} {:<6} samples",
        "backend", "metric", "bytes", "median", "unit"
    );
    for r in rows {
        println!(
            "{:<14} {:<10} {:>12} {:>12.3} {:<6} {}",
            r.backend, r.metric, r.bytes, r.value, r.unit, r.samples
        );
    }
}

fn measure(w: &World) -> Result<Vec<BenchRow>> {
    let peer = 1 - w.rank();
    let area = if w.quick { 256 * MIB } else { 1024 * MIB };
    let reps = if w.quick { 3 } else { 5 };
    let mut rows = Vec::new();

    // ---- cuda-nvlink ----
    {
        let mut pair = MemPair::connect(Peer::new(w, peer, 0), area)?;
        let (trials, iters) = if w.quick { (3, 2_000) } else { (7, 20_000) };
        memory_ping(&mut pair, 500)?; // warm-up
        let mut rtts = Vec::new();
        for _ in 0..trials {
            rtts.push(memory_ping(&mut pair, iters)?);
        }
        rows.push(row(
            "cuda-nvlink",
            "latency",
            8,
            median(rtts),
            "us",
            format!("{trials}x{iters} round trips"),
        ));
        for s in sizes(area) {
            let mut gbs = Vec::new();
            for _ in 0..reps {
                gbs.push(memory_put_bw(&mut pair, s)?);
            }
            if pair.p.lo {
                rows.push(row(
                    "cuda-nvlink",
                    "bandwidth",
                    s,
                    median(gbs),
                    "GB/s",
                    format!("{reps} puts"),
                ));
            }
        }
    }

    // ---- cuda-dma ----
    {
        let mut pair = PortPair::connect(Peer::new(w, peer, 0), area)?;
        let launches = if w.quick { 5 } else { 50 };
        port::ping_pong_us(&mut pair, 2)?; // warm-up
        let mut rtts = Vec::new();
        for _ in 0..3 {
            let (ok, us, _) = port::ping_pong_us(&mut pair, launches)?;
            if !ok {
                return Err(HalError::backend("cuda-dma", "port ping-pong timed out"));
            }
            rtts.push(us);
        }
        rows.push(row(
            "cuda-dma",
            "latency",
            8,
            median(rtts),
            "us",
            format!("3x{} round trips", launches * 60),
        ));
        for s in sizes(area) {
            let mut gbs = Vec::new();
            for _ in 0..reps {
                gbs.push(dma_put_bw(&mut pair, s)?);
            }
            if pair.p.lo {
                rows.push(row(
                    "cuda-dma",
                    "bandwidth",
                    s,
                    median(gbs),
                    "GB/s",
                    format!("{reps} writes+flush"),
                ));
            }
        }
        pair.finish()?;
    }

    // ---- cuMemcpyPeerAsync from rank 0's process ----
    if w.rank() == 0 {
        let n = commhal_cuda_rt::driver::device_count()?;
        if n >= 2 {
            let other = (w.device + 1) % n;
            let octx = commhal_backend_cuda_nvlink::driver::context("gpu-bench", other)?;
            // Without peer access cuMemcpyPeer stages through the host (~38 GB/s measured
            // on H200s); the reference figure (397 GB/s) is with it, as in NCCL/nccl-tests.
            commhal_backend_cuda_nvlink::driver::enable_peer_access("gpu-bench", &w.ctx, &octx)?;
            commhal_backend_cuda_nvlink::driver::enable_peer_access("gpu-bench", &octx, &w.ctx)?;
            w.ctx
                .bind()
                .map_err(|e| commhal_hal::HalError::backend("gpu-bench", e.to_string()))?;
            let max = sizes(area).last().copied().unwrap_or(MIB);
            let src = DeviceBuffer::new(&w.ctx, max)?;
            let dst = DeviceBuffer::new(&octx, max)?;
            for s in sizes(area) {
                let mut gbs = Vec::new();
                for _ in 0..reps {
                    let (e0, e1) = (Event::new(&w.ctx)?, Event::new(&w.ctx)?);
                    e0.record(&w.stream)?;
                    // SAFETY: both buffers are live allocations of at least `max >= s`
                    // bytes in their contexts, kept until after the sync below.
                    unsafe {
                        kernels::memcpy_peer_async(
                            &w.stream,
                            dst.addr(),
                            &octx,
                            src.addr(),
                            &w.ctx,
                            s,
                        )?;
                    }
                    e1.record(&w.stream)?;
                    w.sync("cuMemcpyPeerAsync")?;
                    let ms = f64::from(e1.elapsed_ms_since(&e0)?);
                    gbs.push(s as f64 / (ms * 1e-3) / 1e9);
                }
                rows.push(row(
                    "cuMemcpyPeer",
                    "bandwidth",
                    s,
                    median(gbs),
                    "GB/s",
                    format!("{reps} copies dev {} -> dev {other}", w.device),
                ));
            }
        }
    }
    Ok(rows)
}

fn memory_ping(pair: &mut MemPair<'_>, iters: u64) -> Result<f64> {
    let (ok, us) = crate::gpu::memory::ping_pong_us(pair, iters)?;
    if !ok {
        return Err(HalError::backend("cuda-nvlink", "ping-pong wait timed out"));
    }
    Ok(us)
}

/// The lower rank times a grid-wide put of `bytes` into the partner's receive area.
fn memory_put_bw(pair: &mut MemPair<'_>, bytes: u64) -> Result<f64> {
    pair.begin()?;
    let slot = pair.slot();
    let h = pair.handle(slot, 0);
    let haddr = pair.scratch.put_handle(0, &h)?;
    pair.p.barrier(0)?;
    let mut gbs = 0.0;
    if pair.p.lo {
        let w = pair.p.w;
        commhal_hal::error::check_range("bandwidth put", pair.area, bytes, pair.rdata.len())?;
        let (e0, e1) = (Event::new(&w.ctx)?, Event::new(&w.ctx)?);
        e0.record(&w.stream)?;
        // SAFETY: matches commhal_gpu_put_bw(h, dst, src, bytes); source [0, bytes) and
        // destination [area, area+bytes) lie in the live local / mapped regions
        // (checked above: bytes <= area, regions are 2*area).
        unsafe {
            kernels::launch(
                &w.k.put_bw,
                &w.stream,
                LaunchConfig::linear(256, 512),
                &[
                    KernelArg::Ptr(haddr),
                    KernelArg::U64(pair.area),
                    KernelArg::U64(0),
                    KernelArg::U64(bytes),
                ],
            )?;
        }
        e1.record(&w.stream)?;
        w.sync("bandwidth put")?;
        let ms = f64::from(e1.elapsed_ms_since(&e0)?);
        gbs = bytes as f64 / (ms * 1e-3) / 1e9;
    }
    pair.p.barrier(1)?;
    Ok(gbs)
}

/// The lower rank times `write` + `flush` of `bytes` on a cuda-dma port.
fn dma_put_bw(pair: &mut PortPair<'_>, bytes: u64) -> Result<f64> {
    pair.begin()?;
    pair.p.barrier(0)?;
    let mut gbs = 0.0;
    if pair.p.lo {
        let area = pair.area;
        let (port, local, rdata, _) = &mut pair.spare;
        let start = std::time::Instant::now();
        port.write(rdata, area, local, 0, bytes)?;
        port.flush()?;
        gbs = bytes as f64 / start.elapsed().as_secs_f64() / 1e9;
    }
    pair.p.barrier(1)?;
    Ok(gbs)
}
