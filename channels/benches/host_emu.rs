//! Channel micro-benchmarks on host-emu, ranks as threads of this process:
//! ping-pong latency (signal → wait → signal back) and put bandwidth, per channel kind.
//! Run: `cargo bench -p commhal-channels --bench host_emu -- --quick`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use commhal_backend_host_emu::HostEmu;
use commhal_channels::proxy::{ProxyBuilder, ProxyService};
use commhal_channels::{MemoryChannel, PortChannel, ReduceOp, SemaphoreSlot, SwitchChannel};
use commhal_hal::bootstrap::InProcBootstrap;
use commhal_hal::transport::PeerContext;
use commhal_hal::{Device, Endpoint, MemoryMapped, Region};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const BIG: u64 = 1 << 20;

/// Build one value per rank on two threads (setup needs both sides at once).
fn pair<T: Send>(f: impl Fn(u32, &InProcBootstrap) -> T + Sync) -> (T, T) {
    let boots = InProcBootstrap::create(2);
    std::thread::scope(|s| {
        let a = s.spawn(|| f(0, &boots[0]));
        let b = s.spawn(|| f(1, &boots[1]));
        (a.join().unwrap(), b.join().unwrap())
    })
}

/// Time `iters` round trips: `ping` on this thread, `pong` on a helper thread.
fn round_trips(iters: u64, ping: impl Fn(), pong: impl Fn() + Sync) -> Duration {
    std::thread::scope(|s| {
        s.spawn(|| (0..iters).for_each(|_| pong()));
        let t0 = Instant::now();
        (0..iters).for_each(|_| ping());
        t0.elapsed()
    })
}

fn memory(c: &mut Criterion) {
    let (a, b) = pair(|r, boot| {
        let t = HostEmu::new();
        let local = MemoryMapped::alloc(&t, Device::HOST, BIG).unwrap();
        MemoryChannel::<HostEmu>::connect(&t, boot, 1 - r, 1, local).unwrap()
    });
    let mut g = c.benchmark_group("memory_channel");
    g.bench_function("ping_pong", |bch| {
        bch.iter_custom(|iters| {
            round_trips(
                iters,
                || {
                    a.signal().unwrap();
                    a.wait().unwrap();
                },
                || {
                    b.wait().unwrap();
                    b.signal().unwrap();
                },
            )
        })
    });
    g.throughput(Throughput::Bytes(BIG));
    g.bench_function("put_1MiB", |bch| bch.iter(|| a.put(0, 0, BIG).unwrap()));
    g.finish();
}

type Port = (PortChannel<HostEmu>, ProxyService<HostEmu>, Arc<dyn Region>);

fn port(c: &mut Criterion) {
    let ((a, _pa, _da), (b, _pb, _db)): (Port, Port) = pair(|r, boot| {
        let t = HostEmu::new();
        let mut builder = ProxyBuilder::<HostEmu>::new("host-emu", 512).unwrap();
        let data: Arc<dyn Region> = Arc::new(MemoryMapped::alloc(&t, Device::HOST, BIG).unwrap());
        let sem: Arc<dyn Region> = Arc::new(MemoryMapped::alloc(&t, Device::HOST, 8).unwrap());
        let (l, rm) = (
            Endpoint::this_process(r, Device::HOST),
            Endpoint::this_process(1 - r, Device::HOST),
        );
        let ctx = PeerContext {
            bootstrap: boot,
            local: &l,
            remote: &rm,
            tag: 1,
        };
        let slot = SemaphoreSlot::new(sem, 0).unwrap();
        let ch = PortChannel::connect(&mut builder, &t, &ctx, data.as_ref(), slot).unwrap();
        (ch, builder.start().unwrap(), data)
    });
    let mut g = c.benchmark_group("port_channel");
    g.bench_function("ping_pong", |bch| {
        bch.iter_custom(|iters| {
            round_trips(
                iters,
                || {
                    a.signal().unwrap();
                    a.wait().unwrap();
                },
                || {
                    b.wait().unwrap();
                    b.signal().unwrap();
                },
            )
        })
    });
    g.throughput(Throughput::Bytes(BIG));
    g.bench_function("put_1MiB_flush", |bch| {
        bch.iter(|| {
            a.put(0, 0, BIG).unwrap();
            a.flush().unwrap();
        })
    });
    g.finish();
}

fn switch(c: &mut Criterion) {
    let (a, b) = pair(|r, boot| {
        let t = HostEmu::new();
        let _ = r;
        SwitchChannel::<HostEmu>::create(&t, boot, &[0, 1], BIG, 3).unwrap()
    });
    let mut g = c.benchmark_group("switch_channel");
    g.bench_function("barrier_2_members", |bch| {
        bch.iter_custom(|iters| {
            round_trips(iters, || a.barrier().unwrap(), || b.barrier().unwrap())
        })
    });
    g.throughput(Throughput::Bytes(BIG));
    let mut out = vec![0f32; (BIG / 4) as usize];
    g.bench_function("reduce_f32_1MiB_2_members", |bch| {
        bch.iter(|| a.reduce(ReduceOp::Sum, 0, &mut out).unwrap())
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);
    targets = memory, port, switch
}
criterion_main!(benches);
