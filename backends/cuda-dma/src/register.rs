//! cuda-dma's entry in the built-in backend registry, and its probe.

use std::sync::Arc;

use commhal_hal::registry::{Availability, Backend, BackendDescriptor, BackendOptions};
use commhal_hal::{Guarantees, Result, TransportKinds};

use crate::BACKEND;
use crate::stream_ops::WRITE_VALUE_SYMBOL;
use crate::transport::{CudaDma, GUARANTEES};

/// Can cuda-dma run here? The cuda-rt probe, the driver's stream write-value entry
/// point (signals), and peer access between some pair of devices (as cuda-nvlink).
pub fn probe() -> Availability {
    match commhal_cuda_rt::probe() {
        Availability::Available => {}
        other => return other,
    }
    if !commhal_backend_cuda_nvlink::driver::symbol_present(WRITE_VALUE_SYMBOL) {
        return Availability::Unavailable(format!(
            "the CUDA driver lacks {WRITE_VALUE_SYMBOL} (stream memory operations): update the NVIDIA driver"
        ));
    }
    commhal_backend_cuda_nvlink::register_probe::peer_probe(BACKEND)
}

fn create(options: &BackendOptions) -> Result<Backend> {
    let t = Arc::new(CudaDma::from_options(options)?);
    Ok(Backend {
        name: BACKEND.into(),
        memory: None,
        port: Some(t),
        switch: None,
    })
}

inventory::submit! {
    BackendDescriptor {
        name: BACKEND,
        description: "CUDA copy engines: cuMemcpyAsync into peer mappings and stream-ordered semaphore writes, driven by the host proxy",
        kinds: TransportKinds { memory: false, port: true, switch: false },
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
            .find(|d| d.name == "cuda-dma")
            .expect("cuda-dma is registered");
        assert!(d.kinds.port && !d.kinds.memory && !d.kinds.switch);
        assert_eq!((d.guarantees)(), crate::GUARANTEES);
    }

    #[test]
    fn probe_reason_without_a_gpu() {
        if let Availability::Unavailable(rt) = commhal_cuda_rt::probe() {
            assert_eq!(super::probe(), Availability::Unavailable(rt));
            if !commhal_cuda_rt::driver::driver_present() {
                let Availability::Unavailable(r) = super::probe() else {
                    unreachable!()
                };
                assert!(
                    r.starts_with("no CUDA driver (libcuda.so not found)"),
                    "{r}"
                );
            }
        }
    }
}
