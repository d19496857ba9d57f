//! cuda-nvlink's entry in the built-in backend registry, and its probe.

use std::sync::Arc;

use commhal_hal::registry::{Availability, Backend, BackendDescriptor, BackendOptions};
use commhal_hal::{Guarantees, Result, TransportKinds};

use crate::BACKEND;
use crate::driver;
use crate::transport::{CudaNvlink, GUARANTEES};

/// Can cuda-nvlink run here? The cuda-rt probe (driver loads, `cuInit`, a device),
/// then, with two or more devices, at least one pair with peer access. Never panics;
/// touches no device state.
pub fn probe() -> Availability {
    match commhal_cuda_rt::probe() {
        Availability::Available => {}
        other => return other,
    }
    peer_probe(BACKEND)
}

/// The peer-access part of [`probe`] (shared with cuda-dma).
pub fn peer_probe(backend: &str) -> Availability {
    let n = match driver::device_count(backend) {
        Ok(n) => n,
        Err(e) => return Availability::Unavailable(e.to_string()),
    };
    if n < 2 {
        // One device: processes still share its memory (VMM fd / IPC), no P2P needed.
        return Availability::Available;
    }
    for a in 0..n {
        for b in 0..n {
            if a != b && matches!(driver::can_access_peer(backend, a, b), Ok(true)) {
                return Availability::Available;
            }
        }
    }
    Availability::Unavailable(format!(
        "no device supports peer access: cuDeviceCanAccessPeer is 0 for every pair of the {n} GPUs (no NVLink/P2P; see `nvidia-smi topo -m`)"
    ))
}

fn create(options: &BackendOptions) -> Result<Backend> {
    let t = Arc::new(CudaNvlink::from_options(options)?);
    Ok(Backend {
        name: BACKEND.into(),
        memory: Some(t),
        port: None,
        switch: None,
    })
}

inventory::submit! {
    BackendDescriptor {
        name: BACKEND,
        description: "CUDA peer memory over NVLink/P2P: cuMem VMM + POSIX fd export (legacy CUDA IPC fallback); device threads copy",
        kinds: TransportKinds { memory: true, port: false, switch: false },
        guarantees: || -> Guarantees { GUARANTEES },
        probe,
        create,
    }
}

#[cfg(test)]
mod tests {
    use commhal_hal::registry::{self, Availability};

    #[test]
    fn registered_with_its_guarantees() {
        let d = registry::builtin()
            .into_iter()
            .find(|d| d.name == "cuda-nvlink")
            .expect("cuda-nvlink is registered");
        assert!(d.kinds.memory && !d.kinds.port && !d.kinds.switch);
        assert_eq!((d.guarantees)(), crate::GUARANTEES);
    }

    /// On a machine without a driver (CI) the probe names the reason exactly as
    /// `commhal info` shows it; with a GPU it must agree with cuda-rt's probe.
    #[test]
    fn probe_reason_without_a_gpu() {
        let rt = commhal_cuda_rt::probe();
        let ours = super::probe();
        match (&rt, &ours) {
            (Availability::Unavailable(a), Availability::Unavailable(b)) => {
                assert_eq!(a, b);
                if !commhal_cuda_rt::driver::driver_present() {
                    assert!(
                        b.starts_with("no CUDA driver (libcuda.so not found)"),
                        "{b}"
                    );
                }
            }
            (Availability::Available, _) => {}
            (Availability::Unavailable(_), Availability::Available) => {
                panic!("cuda-nvlink available while cuda-rt is not")
            }
        }
    }

    #[test]
    fn create_refuses_when_unavailable() {
        let d = registry::builtin()
            .into_iter()
            .find(|d| d.name == "cuda-nvlink")
            .unwrap();
        let entry = registry::BackendEntry::Builtin(d);
        if let Availability::Unavailable(reason) = entry.probe() {
            let e = entry.create(&Default::default()).unwrap_err().to_string();
            assert!(e.contains(&reason), "{e}");
        }
    }
}
