//! Tests that need a CUDA GPU (and NVRTC). NOT run in CPU-only CI: without a device
//! each prints "SKIPPED" to stderr; with `COMMHAL_REQUIRE_GPU=1` they fail instead.
//! Run on a GPU machine with:
//!   LD_LIBRARY_PATH=$(scripts/install-nvrtc.sh) COMMHAL_REQUIRE_GPU=1 \
//!     cargo test -p commhal-cuda-rt --test gpu

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use commhal_cuda_rt::staging::Staging;
use commhal_cuda_rt::{
    Context, DeviceBuffer, Event, KernelArg, LaunchConfig, Module, PinnedHostBuffer, Stream,
    VmmAllocation, jit, probe,
};
use commhal_device_src::layout::{
    MemoryChannelHandle, PortChannelHandle, Trigger, error_code, trigger_type,
};
use commhal_device_src::{CONFORMANCE, KERNEL_UNITS};

fn gpu_or_skip(test: &str) -> Option<Arc<Context>> {
    let a = probe();
    if a.is_available() {
        let local = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../.cache/nvrtc/nvidia/cu13/lib");
        if !commhal_cuda_rt::nvrtc_available() && local.join("libnvrtc.so.13").exists() {
            commhal_cuda_rt::nvrtc::loader::preload_nvrtc_from(&local).expect("preload NVRTC");
        }
        return Some(Context::new(0).expect("context on device 0"));
    }
    let require = commhal_hal::settings::tests::REQUIRE_GPU
        .flag()
        .unwrap_or_else(|e| panic!("{test}: {e}"));
    if require {
        panic!("{test}: COMMHAL_REQUIRE_GPU=1 but {a:?}");
    }
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED {test}: {a:?}");
    None
}

fn bytes_of<T: Copy>(v: &T) -> Vec<u8> {
    // Plain-old-data handle structs (repr(C), integer fields only).
    let p = v as *const T as *const u8;
    (0..std::mem::size_of::<T>())
        // SAFETY: reading size_of::<T>() bytes of a live, fully initialised T whose
        // fields are all integers (no padding in these handles: checked by layout tests).
        .map(|i| unsafe { *p.add(i) })
        .collect()
}

fn pattern(n: usize, seed: u32) -> Vec<u8> {
    (0..n)
        .map(|i| ((i as u64 * 131 + seed as u64) & 0xff) as u8)
        .collect()
}

fn read_u32(b: &DeviceBuffer, off: u64) -> u32 {
    let mut x = [0u8; 4];
    b.read(off, &mut x).unwrap();
    u32::from_ne_bytes(x)
}

fn conformance(ctx: &Arc<Context>) -> Arc<Module> {
    jit::load_unit(ctx, &CONFORMANCE).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn every_unit_loads_and_kernels_resolve() {
    let Some(ctx) = gpu_or_skip("every_unit_loads_and_kernels_resolve") else {
        return;
    };
    for unit in KERNEL_UNITS {
        let m = jit::load_unit(&ctx, unit).unwrap_or_else(|e| panic!("{e}"));
        for k in unit.kernels {
            m.kernel(k).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

#[test]
fn device_buffer_and_event_round_trip() {
    let Some(ctx) = gpu_or_skip("device_buffer_and_event_round_trip") else {
        return;
    };
    let b = DeviceBuffer::new(&ctx, 4096).unwrap();
    let data = pattern(1000, 7);
    b.write(17, &data).unwrap();
    let mut back = vec![0u8; 1000];
    b.read(17, &mut back).unwrap();
    assert_eq!(back, data);
    assert!(
        b.write(4000, &data).is_err(),
        "out of range write must fail"
    );
    let s = Stream::new(&ctx).unwrap();
    let (e0, e1) = (Event::new(&ctx).unwrap(), Event::new(&ctx).unwrap());
    e0.record(&s).unwrap();
    e1.record(&s).unwrap();
    e1.synchronize().unwrap();
    assert!(e1.elapsed_ms_since(&e0).unwrap() >= 0.0);
}

/// Staged writes through the landing chunks (more writes than chunks, pieces larger
/// than one chunk) and through the pageable path land in call order, and a flag store
/// lands behind them; a fill that fails is returned and the next write still works.
#[test]
fn staged_writes_land_through_pinned_chunks_in_order() {
    let Some(ctx) = gpu_or_skip("staged_writes_land_through_pinned_chunks_in_order") else {
        return;
    };
    use commhal_hal::StagedAccess;
    const N: u64 = 24 << 20;
    let b = Arc::new(DeviceBuffer::new(&ctx, N).unwrap());
    let staged = Staging::new("test", &ctx, b.addr(), N, b.clone()).unwrap();
    let data = pattern(N as usize, 3);
    let mut sizes = vec![(1u64 << 20) * 3 + 5, 4096, 70_000];
    sizes.extend(std::iter::repeat_n(1 << 20, 16));
    let mut heap = Vec::new();
    let mut off = 0u64;
    for n in sizes {
        let mut at = off as usize;
        staged
            .write_with(off, n, &mut heap, &mut |buf: &mut [u8]| {
                buf.copy_from_slice(&data[at..at + buf.len()]);
                at += buf.len();
                Ok(())
            })
            .unwrap();
        off += n;
    }
    // Overwrite the first word behind everything: it lands last.
    staged.store_u64(0, 0x0123_4567_89ab_cdef).unwrap();
    let failed = staged.write_with(off, 1 << 20, &mut heap, &mut |_: &mut [u8]| {
        Err(commhal_hal::HalError::invalid("socket gone"))
    });
    assert!(failed.unwrap_err().to_string().contains("socket gone"));
    assert!(
        staged
            .write_with(N - 8, 16, &mut heap, &mut |_: &mut [u8]| Ok(()))
            .is_err()
    );
    staged.settle().unwrap();
    let mut back = vec![0u8; off as usize];
    b.read(0, &mut back).unwrap();
    assert_eq!(&back[..8], &0x0123_4567_89ab_cdefu64.to_le_bytes());
    assert!(back[8..] == data[8..off as usize], "staged bytes differ");
}

#[test]
fn vmm_export_import_same_process() {
    let Some(ctx) = gpu_or_skip("vmm_export_import_same_process") else {
        return;
    };
    if !ctx.supports_vmm_fd().unwrap() {
        panic!("device 0 lacks cuMem VMM with POSIX fd handles");
    }
    let a = VmmAllocation::new(&ctx, 12345).unwrap();
    assert!(a.size() >= 12345);
    let fd = a.export_fd().unwrap();
    let b = VmmAllocation::import(&ctx, std::os::fd::AsFd::as_fd(&fd), a.size()).unwrap();
    drop(fd);
    assert_ne!(a.addr(), b.addr(), "import maps at its own address");
    let data = pattern(12345, 3);
    a.write(0, &data).unwrap();
    let mut back = vec![0u8; 12345];
    b.read(0, &mut back).unwrap();
    assert_eq!(
        back, data,
        "write through one mapping, read through the other"
    );
    assert!(
        VmmAllocation::import(&ctx, std::os::fd::AsFd::as_fd(&a.export_fd().unwrap()), 1).is_err()
    );
}

/// Loopback memory channel on one GPU: remote_buf is a second buffer, and signal
/// increments the semaphore this side waits on.
#[test]
fn memory_channel_put_signal_wait_loopback() {
    let Some(ctx) = gpu_or_skip("memory_channel_put_signal_wait_loopback") else {
        return;
    };
    let m = conformance(&ctx);
    let s = Stream::new(&ctx).unwrap();
    let local = DeviceBuffer::new(&ctx, 1 << 20).unwrap();
    let remote = DeviceBuffer::new(&ctx, 1 << 20).unwrap();
    let misc = DeviceBuffer::new(&ctx, 4096).unwrap(); // sem @0, error flag @64, ok @128
    let hbuf = DeviceBuffer::new(&ctx, 256).unwrap();
    // (src_off, dst_off, bytes): aligned, mutually aligned mod 16 but odd, mod 4 only,
    // and not even mod 4 (byte copies only; this once copied nothing).
    for (i, &(so, d, n)) in [
        (0u64, 0u64, 65536u64),
        (3, 19, 100_003),
        (5, 1, 4097),
        (3, 5, 1001),
        (1, 2, 7),
    ]
    .iter()
    .enumerate()
    {
        local.write(so, &pattern(n as usize, i as u32)).unwrap();
        let h = MemoryChannelHandle {
            local_buf: local.addr(),
            remote_buf: remote.addr(),
            local_semaphore: misc.addr(),
            remote_semaphore: misc.addr(),
            expected: i as u64,
            error_flag: misc.addr() + 64,
            wait_ns: 10_000_000_000,
        };
        hbuf.write(0, &bytes_of(&h)).unwrap();
        // SAFETY: argument list matches commhal_conf_put_signal / commhal_conf_wait;
        // every pointer is a live device buffer of sufficient size.
        unsafe {
            m.kernel("commhal_conf_put_signal")
                .unwrap()
                .launch(
                    &s,
                    LaunchConfig::linear(1, 256),
                    &[
                        KernelArg::Ptr(hbuf.addr()),
                        KernelArg::U64(d),
                        KernelArg::U64(so),
                        KernelArg::U64(n),
                    ],
                )
                .unwrap();
            m.kernel("commhal_conf_wait")
                .unwrap()
                .launch(
                    &s,
                    LaunchConfig::linear(1, 32),
                    &[
                        KernelArg::Ptr(hbuf.addr()),
                        KernelArg::Ptr(misc.addr() + 128),
                    ],
                )
                .unwrap();
        }
        s.synchronize().unwrap();
        assert_eq!(read_u32(&misc, 128), 1, "case {i}: wait timed out");
        let mut got = vec![0u8; n as usize];
        remote.read(d, &mut got).unwrap();
        assert!(
            got == pattern(n as usize, i as u32),
            "case {i}: data differs"
        );
    }
    assert_eq!(read_u32(&misc, 64), error_code::NONE);
}

#[test]
fn wait_without_signal_times_out_with_error_flag() {
    let Some(ctx) = gpu_or_skip("wait_without_signal_times_out_with_error_flag") else {
        return;
    };
    let m = conformance(&ctx);
    let s = Stream::new(&ctx).unwrap();
    let misc = DeviceBuffer::new(&ctx, 4096).unwrap();
    let hbuf = DeviceBuffer::new(&ctx, 256).unwrap();
    let h = MemoryChannelHandle {
        local_buf: misc.addr() + 1024,
        remote_buf: misc.addr() + 2048,
        local_semaphore: misc.addr(),
        remote_semaphore: misc.addr(),
        expected: 0,
        error_flag: misc.addr() + 64,
        wait_ns: 1000,
    };
    hbuf.write(0, &bytes_of(&h)).unwrap();
    misc.write(128, &7u32.to_ne_bytes()).unwrap();
    // SAFETY: matches commhal_conf_wait(MemoryChannelHandle*, u32*).
    unsafe {
        m.kernel("commhal_conf_wait")
            .unwrap()
            .launch(
                &s,
                LaunchConfig::linear(1, 1),
                &[
                    KernelArg::Ptr(hbuf.addr()),
                    KernelArg::Ptr(misc.addr() + 128),
                ],
            )
            .unwrap();
    }
    s.synchronize().unwrap();
    assert_eq!(read_u32(&misc, 128), 0, "wait must report failure");
    assert_eq!(read_u32(&misc, 64), error_code::WAIT_TIMEOUT);
}

#[test]
fn ll8_and_ll16_packets_loopback() {
    let Some(ctx) = gpu_or_skip("ll8_and_ll16_packets_loopback") else {
        return;
    };
    let m = conformance(&ctx);
    let s = Stream::new(&ctx).unwrap();
    let buf = DeviceBuffer::new(&ctx, 1 << 20).unwrap(); // data @0, packets @256K, out @512K
    let misc = DeviceBuffer::new(&ctx, 4096).unwrap();
    let hbuf = DeviceBuffer::new(&ctx, 256).unwrap();
    let n = 40_000u64;
    buf.write(0, &pattern(n as usize, 9)).unwrap();
    let h = MemoryChannelHandle {
        local_buf: buf.addr(),
        remote_buf: buf.addr(),
        local_semaphore: misc.addr(),
        remote_semaphore: misc.addr(),
        expected: 0,
        error_flag: misc.addr() + 64,
        wait_ns: 10_000_000_000,
    };
    hbuf.write(0, &bytes_of(&h)).unwrap();
    for (put, read, flag) in [
        ("commhal_conf_ll8_put", "commhal_conf_ll8_read", 1u32),
        ("commhal_conf_ll16_put", "commhal_conf_ll16_read", 2),
    ] {
        buf.write(512 << 10, &vec![0u8; n as usize]).unwrap();
        // SAFETY: matches the ll*_put / ll*_read signatures; buffers are large enough
        // (packets take 2 × n bytes from offset 256K).
        unsafe {
            m.kernel(put)
                .unwrap()
                .launch(
                    &s,
                    LaunchConfig::linear(1, 256),
                    &[
                        KernelArg::Ptr(hbuf.addr()),
                        KernelArg::U64(256 << 10),
                        KernelArg::U64(0),
                        KernelArg::U64(n),
                        KernelArg::U32(flag),
                    ],
                )
                .unwrap();
            m.kernel(read)
                .unwrap()
                .launch(
                    &s,
                    LaunchConfig::linear(1, 256),
                    &[
                        KernelArg::Ptr(hbuf.addr()),
                        KernelArg::U64(256 << 10),
                        KernelArg::U64(512 << 10),
                        KernelArg::U64(n),
                        KernelArg::U32(flag),
                        KernelArg::Ptr(misc.addr() + 128),
                    ],
                )
                .unwrap();
        }
        s.synchronize().unwrap();
        assert_eq!(read_u32(&misc, 128), 1, "{read}: packets missing");
        let mut got = vec![0u8; n as usize];
        buf.read(512 << 10, &mut got).unwrap();
        assert!(got == pattern(n as usize, 9), "{read}: data differs");
    }
}

/// FIFO push from 64 threads into a 16-slot ring drained by a host "proxy" thread.
#[test]
fn fifo_push_with_host_proxy() {
    let Some(ctx) = gpu_or_skip("fifo_push_with_host_proxy") else {
        return;
    };
    let m = conformance(&ctx);
    let s = Stream::new(&ctx).unwrap();
    const DEPTH: u64 = 16;
    let (blocks, threads, per_thread, len) = (2u32, 32u32, 4u64, 8u64);
    let total = (blocks * threads) as u64 * per_thread + 2 * blocks as u64; // + SIGNAL, FLUSH per block
    let fifo = Arc::new(PinnedHostBuffer::new(&ctx, DEPTH * 16).unwrap());
    let tail = Arc::new(PinnedHostBuffer::new(&ctx, 64).unwrap());
    let dev = DeviceBuffer::new(&ctx, 4096).unwrap(); // head @0, error @64, ok @128
    dev.write(128, &1u32.to_ne_bytes()).unwrap();
    let h = PortChannelHandle {
        fifo: fifo.device_addr(),
        fifo_depth: DEPTH,
        head: dev.addr(),
        tail: tail.device_addr(),
        semaphore_id: 5,
        local_memory_id: 1,
        remote_memory_id: 2,
        reserved: 0,
        local_semaphore: dev.addr() + 256,
        expected: 0,
        error_flag: dev.addr() + 64,
        wait_ns: 10_000_000_000,
    };
    let hbuf = DeviceBuffer::new(&ctx, 256).unwrap();
    hbuf.write(0, &bytes_of(&h)).unwrap();
    let (f2, t2) = (fifo.clone(), tail.clone());
    let proxy = std::thread::spawn(move || {
        let mut seen = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        for seq in 0..total {
            let slot = f2.host_ptr() as usize + ((seq % DEPTH) * 16) as usize;
            // SAFETY: slot lies inside the pinned ring (seq % DEPTH < DEPTH), 8-byte
            // aligned; the device writes it with system-scope atomics.
            let (w0, w1) = unsafe {
                (
                    &*(slot as *const AtomicU64),
                    &*((slot + 8) as *const AtomicU64),
                )
            };
            let v1 = loop {
                let v = w1.load(Ordering::Acquire);
                if v & Trigger::VALID != 0 {
                    break v;
                }
                if Instant::now() > deadline {
                    return Err(format!("proxy: slot {seq} never filled"));
                }
                std::hint::spin_loop();
            };
            let t = Trigger {
                w0: w0.load(Ordering::Relaxed),
                w1: v1,
            };
            seen.push(t.decode().unwrap());
            w1.store(0, Ordering::Relaxed);
            // SAFETY: the tail counter is the first 8 bytes of the pinned `tail` buffer.
            let tail = unsafe { &*(t2.host_ptr() as *const AtomicU64) };
            tail.store(seq + 1, Ordering::Release);
        }
        Ok(seen)
    });
    // SAFETY: matches commhal_conf_fifo_push(PortChannelHandle*, u64, u64, u32*).
    unsafe {
        m.kernel("commhal_conf_fifo_push")
            .unwrap()
            .launch(
                &s,
                LaunchConfig::linear(blocks, threads),
                &[
                    KernelArg::Ptr(hbuf.addr()),
                    KernelArg::U64(per_thread),
                    KernelArg::U64(len),
                    KernelArg::Ptr(dev.addr() + 128),
                ],
            )
            .unwrap();
    }
    s.synchronize().unwrap();
    let seen = proxy.join().unwrap().unwrap();
    assert_eq!(
        read_u32(&dev, 128),
        1,
        "kernel reported a failed push/flush"
    );
    assert_eq!(read_u32(&dev, 64), error_code::NONE);
    let mut puts: Vec<u32> = seen
        .iter()
        .filter(|f| f.kind == trigger_type::PUT)
        .map(|f| {
            assert_eq!(
                (f.len as u64, f.src_offset, f.src_memory_id, f.dst_memory_id),
                (len, f.dst_offset, 1, 2)
            );
            f.dst_offset
        })
        .collect();
    puts.sort();
    let expect: Vec<u32> = (0..(blocks * threads) as u64 * per_thread)
        .map(|k| (k * len) as u32)
        .collect();
    assert_eq!(puts, expect, "every PUT trigger exactly once");
    assert_eq!(
        seen.iter()
            .filter(|f| f.kind == trigger_type::SIGNAL && f.semaphore_id == 5)
            .count(),
        blocks as usize
    );
    assert_eq!(
        seen.iter()
            .filter(|f| f.kind == trigger_type::FLUSH)
            .count(),
        blocks as usize
    );
}
