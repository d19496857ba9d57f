//! # commhal-backend-ib-verbs — `PortMapped` over RDMA verbs (host side)
//!
//! **Status: never run on RDMA hardware.** Everything here has run only against the
//! stub provider in `stub/` (shared memory between processes of one host); the ABI
//! layouts follow rdma-core's `infiniband/verbs.h` but were not checked against a
//! real `libibverbs.so.1` and NIC.
//!
//! The host proxy turns each trigger into a verbs request on one RC queue pair:
//!
//! | trigger | verbs |
//! |---|---|
//! | put | `IBV_WR_RDMA_WRITE` (split at the port's `max_msg_sz`) |
//! | `Port::read` (get; not a FIFO trigger) | `IBV_WR_RDMA_READ` (split at `max_msg_sz`), complete at the next flush |
//! | signal | `IBV_WR_ATOMIC_FETCH_AND_ADD` on the peer's 8-byte word, fenced; without device atomics an 8-byte RDMA WRITE of a shadow counter |
//! | flush | poll the CQ until every request completed (bounded) |
//!
//! | module | holds |
//! |---|---|
//! | [`transport`] | [`IbVerbs`]: `Transport` (name, [`GUARANTEES`], reach) and `PortMapped` (register = `ibv_reg_mr`, or `ibv_reg_dmabuf_mr` for device memory, connect = RC QP set-up through the bootstrap) |
//! | [`region`] | [`IbLocal`], [`IbRemote`], the export format (address + rkey) |
//! | [`port`] | [`IbPort`]: write / read / signal / flush, completion errors mapped to what to check |
//! | [`device`] | device, port and GID discovery (InfiniBand LID, RoCE v2 GID) |
//! | `sys` | every `unsafe` line: libloading, the verbs objects, the ops-table calls |
//! | `register` | the `inventory` registration and `probe` |
//!
//! **Library.** `libibverbs.so.1` is opened with `libloading` at run time (path
//! overridable with `COMMHAL_IBVERBS_LIB` or the `library` option), so the build needs
//! no vendor package. `ibv_post_send` / `ibv_poll_cq` are called through the
//! context's ops table as the real header's inline functions do.
//!
//! **Memory.** Whatever a region offers through
//! [`Region::registrable`](commhal_hal::Region::registrable), so this crate knows no
//! other backend's types: host memory (host-emu shared memory and
//! [`commhal_backend_host_emu::HostRegion`]) with `ibv_reg_mr`; device memory
//! (cuda-nvlink and cuda-dma allocations) with `ibv_reg_dmabuf_mr`: the region's
//! exporter (the CUDA driver, `cuMemGetHandleForAddressRange`) exports the
//! page-aligned range enclosing the region as a dma-buf, registered with the device
//! address as IOVA;
//! [`IbVerbs::register_dmabuf`] registers any dma-buf fd. `ibv_reg_dmabuf_mr` is
//! optional (rdma-core >= 34). Checked only against the stub, with a memfd standing
//! in for the dma-buf: the CUDA export and a real NIC have never run. Ports still
//! serve host ranks only ([`IbVerbs`]'s `reach`); peermem is not used.
#![warn(missing_docs)]

pub mod device;
#[doc(hidden)]
pub mod fuzzing;
pub mod port;
pub mod region;
mod register;
mod sys;
pub mod transport;

pub use port::IbPort;
pub use region::{IbLocal, IbRemote};
pub use register::probe;
pub use sys::DEFAULT_LIB;
pub use transport::{DmabufRange, FIFO_DEPTH, GUARANTEES, IbOptions, IbVerbs};

/// The backend's name, as in [`commhal_hal::Export::backend`] and the registry.
pub const BACKEND: &str = "ib-verbs";

/// Called by `commhal-backends` so the linker keeps this crate (and its registration).
pub fn link() {}
