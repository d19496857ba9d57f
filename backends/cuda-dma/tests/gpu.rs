//! cuda-nvlink + cuda-dma on ONE GPU in one process (ranks as threads sharing device 0):
//! allocation, export/map (same-process pointer reuse), port write/signal/flush, host
//! rejections. Needs a CUDA GPU: without one each test prints "SKIPPED" to stderr;
//! with `COMMHAL_REQUIRE_GPU=1` it fails instead. Cross-process and cross-GPU paths
//! are exercised by the GPU conformance suite (`commhal-gpu-conformance`).

use std::io::Write;
use std::time::Duration;

use commhal_backend_cuda_dma::CudaDma;
use commhal_backend_cuda_nvlink::CudaNvlink;
use commhal_hal::bootstrap::InProcBootstrap;
use commhal_hal::transport::PeerContext;
use commhal_hal::{
    Device, DeviceKind, Endpoint, HalError, MemoryMapped, Port, PortMapped, Region, Transport,
};

fn gpu_or_skip(test: &str) -> bool {
    let a = commhal_cuda_rt::probe();
    if a.is_available() {
        return true;
    }
    let require = commhal_hal::settings::tests::REQUIRE_GPU
        .flag()
        .unwrap_or_else(|e| panic!("{test}: {e}"));
    if require {
        panic!("{test}: COMMHAL_REQUIRE_GPU=1 but {a:?}");
    }
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED {test}: {a:?}");
    false
}

const DEV0: Device = Device {
    kind: DeviceKind::Cuda,
    ordinal: 0,
};

fn pattern(n: usize, seed: u32) -> Vec<u8> {
    (0..n)
        .map(|i| ((i as u64 * 131 + u64::from(seed)) & 0xff) as u8)
        .collect()
}

#[test]
fn nvlink_alloc_export_map_same_process() {
    if !gpu_or_skip("nvlink_alloc_export_map_same_process") {
        return;
    }
    for legacy in [false, true] {
        let nv = CudaNvlink::new(0, legacy).unwrap();
        let mem = nv.alloc(DEV0, 3 * 1024 * 1024 + 5).unwrap();
        assert!(mem.len() >= 3 * 1024 * 1024 + 5);
        assert_eq!(mem.is_legacy_ipc(), legacy);
        let mut zero = vec![1u8; 4096];
        mem.read(0, &mut zero).unwrap();
        assert!(zero.iter().all(|&b| b == 0), "alloc must zero");
        let data = pattern(10_000, 7);
        mem.write(123, &data).unwrap();
        let e = nv.export(&mem).unwrap();
        assert_eq!(e.len, mem.len());
        assert_eq!(e.fds.len(), usize::from(!legacy));
        let m = nv.map(e).unwrap();
        assert_eq!(m.method(), "same-process");
        assert_eq!(m.addr(), mem.addr(), "same process reuses the pointer");
        let mut back = vec![0u8; 10_000];
        m.read(123, &mut back).unwrap();
        assert_eq!(back, data);
        assert!(m.write(m.len() - 1, &[0, 0]).is_err());
        drop(mem);
        // The mapping keeps the allocation alive.
        m.read(123, &mut back).unwrap();
        assert_eq!(back, data);
    }
}

#[test]
fn nvlink_rejects_bad_inputs() {
    if !gpu_or_skip("nvlink_rejects_bad_inputs") {
        return;
    }
    let nv = CudaNvlink::new(0, false).unwrap();
    assert!(nv.alloc(DEV0, 0).is_err());
    assert!(nv.alloc(Device::HOST, 64).is_err());
    assert!(CudaNvlink::new(9999, false).is_err());
    let mem = nv.alloc(DEV0, 4096).unwrap();
    let mut e = nv.export(&mem).unwrap();
    e.bytes[0] ^= 1;
    assert!(nv.map(e).is_err());
}

#[test]
fn dma_port_write_signal_flush_loopback() {
    if !gpu_or_skip("dma_port_write_signal_flush_loopback") {
        return;
    }
    let nv = CudaNvlink::new(0, false).unwrap();
    let dma = CudaDma::new(0, Duration::from_secs(20)).unwrap();
    let src = nv.alloc(DEV0, 8 << 20).unwrap();
    let dst = nv.alloc(DEV0, 8 << 20).unwrap();
    let sem = nv.alloc(DEV0, 4096).unwrap();
    let data = pattern(5 << 20, 11);
    src.write(3, &data).unwrap();
    let local = dma.register(&src).unwrap();
    let rdst = dma
        .import(dma.export(&dma.register(&dst).unwrap()).unwrap())
        .unwrap();
    let rsem = dma
        .import(dma.export(&dma.register(&sem).unwrap()).unwrap())
        .unwrap();
    let boots = InProcBootstrap::create(2);
    let (a, b) = (
        Endpoint::this_process(0, DEV0),
        Endpoint::this_process(1, DEV0),
    );
    assert!(Transport::reach(&dma, &a, &b).is_yes());
    let ctx = PeerContext {
        bootstrap: &boots[0],
        local: &a,
        remote: &b,
        tag: 1,
    };
    let mut port = dma.connect(&ctx).unwrap();
    port.write(&rdst, 17, &local, 3, data.len() as u64).unwrap();
    port.signal(&rsem, 8, 1).unwrap();
    port.signal(&rsem, 8, 2).unwrap();
    port.set_semaphore_value(&rsem, 16, u64::MAX).unwrap();
    port.signal(&rsem, 16, 1).unwrap();
    port.flush().unwrap();
    let mut back = vec![0u8; data.len()];
    dst.read(17, &mut back).unwrap();
    assert!(back == data, "copied bytes differ");
    let mut w = [0u8; 16];
    sem.read(8, &mut w).unwrap();
    assert_eq!(u64::from_ne_bytes(w[..8].try_into().unwrap()), 3);
    assert_eq!(u64::from_ne_bytes(w[8..].try_into().unwrap()), 0, "wraps");

    // Host-side rejections.
    assert!(matches!(
        port.write(&rdst, rdst.len() - 1, &local, 0, 2),
        Err(HalError::OutOfRange { .. })
    ));
    assert!(matches!(
        port.write(&rdst, 0, &local, local.len(), 1),
        Err(HalError::OutOfRange { .. })
    ));
    assert!(matches!(
        port.signal(&rsem, 3, 1),
        Err(HalError::Unaligned { .. })
    ));
    assert!(port.signal(&rsem, rsem.len(), 1).is_err());
    port.write(&rdst, 0, &local, 0, 0).unwrap();
    port.flush().unwrap();
}
