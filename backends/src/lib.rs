//! Links every enabled backend crate (one cargo feature each) so its `inventory`
//! registration reaches the final binary, and re-exports the registry.

#[cfg(feature = "cuda-dma")]
pub use commhal_backend_cuda_dma as cuda_dma;
#[cfg(feature = "cuda-nvlink")]
pub use commhal_backend_cuda_nvlink as cuda_nvlink;
#[cfg(feature = "host-emu")]
pub use commhal_backend_host_emu as host_emu;
#[cfg(feature = "ib-verbs")]
pub use commhal_backend_ib_verbs as ib_verbs;

pub use commhal_hal::registry;

/// Force the linker to keep every enabled backend. Call once at start-up (the CLI and
/// the conformance runner do); it is cheap.
pub fn link_all() {
    #[cfg(feature = "host-emu")]
    commhal_backend_host_emu::link();
    #[cfg(feature = "cuda-nvlink")]
    commhal_backend_cuda_nvlink::link();
    #[cfg(feature = "cuda-dma")]
    commhal_backend_cuda_dma::link();
    #[cfg(feature = "ib-verbs")]
    commhal_backend_ib_verbs::link();
}
