//! The transport trait family.
//!
//! Three ways to move bytes between ranks, after MSCCL++:
//!
//! | trait | who moves the bytes | device code needs |
//! |---|---|---|
//! | [`MemoryMapped`] | device threads load/store into a peer mapping ("thread copy") | the mapped peer address |
//! | [`PortMapped`] | a host proxy drives a copy engine / NIC | one thread to push a trigger into a FIFO |
//! | [`SwitchMapped`] | the switch reduces/broadcasts a multicast address | the multicast address |
//!
//! These traits are static (associated types) so hot paths — the proxy loop, channel
//! construction — monomorphise. [`crate::dynamic`] has object-safe mirrors with a
//! blanket impl, for backends chosen at run time.
//!
//! ## How each backend implements them
//!
//! * **host-emu** — memory is a `memfd` mapped `MAP_SHARED`; `export` hands out the
//!   fd, `map` mmaps it in the peer process (or reuses the pointer in-process).
//!   `PortMapped`: the host proxy `memcpy`s into the peer's shared memory (`read`: out
//!   of it), `signal` is an atomic add with release, `flush` waits for queued copies.
//!   `SwitchMapped`: each member's buffer is mapped by all; "multicast" reduce reads
//!   every member. A TCP port transport carries the same operations across hosts or
//!   virtual nodes (`read` is a request the peer's receiver answers with the bytes).
//! * **cuda-nvlink** (`MemoryMapped`) — `alloc` uses cuMem VMM
//!   (`cuMemCreate` with `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`, granularity-aligned);
//!   `export` is `cuMemExportToShareableHandle` → fd in [`Export::fds`]; `map` is
//!   `cuMemImportFromShareableHandle` + `cuMemAddressReserve` + `cuMemMap` +
//!   `cuMemSetAccess` for the local device. Fallback: legacy `cuIpcGetMemHandle`
//!   (64 bytes in [`Export::bytes`]) / `cuIpcOpenMemHandle`. Ranks in one process
//!   use peer access instead (`cuCtxEnablePeerAccess`, same pointer).
//! * **cuda-dma** (`PortMapped`) — `register` records a device buffer; `export`/`import`
//!   reuse the cuda-nvlink mapping so the copy engine can address the peer buffer;
//!   `write` is `cuMemcpyDtoDAsync` on the proxy's stream; `signal` is a stream-ordered
//!   write of the semaphore's next value (`cuStreamWriteValue64`) after the copies;
//!   `flush` synchronises the stream (source reusable *and* remote visible); `read` is
//!   refused as unsupported (not written: it would be the same copy reversed). The same
//!   operations on a caller's stream are `StreamPort` (cuda-dma), which the GPU
//!   communicator's copy-engine path uses; `remote_region` gives an import's device
//!   address.
//! * **cuda-nvls** (`SwitchMapped`) — `create_group`: rank 0 `cuMulticastCreate`s,
//!   exports the fd to members over the bootstrap, every member `cuMulticastAddDevice`s,
//!   binds its cuMem allocation (`cuMulticastBindMem`) and maps the multicast handle;
//!   device code uses `multimem.ld_reduce` / `multimem.st` on that address.
//!   Refuses to start unless `COMMHAL_ALLOW_MULTICAST=1` and `NCCL_NVLS_ENABLE != 0`.
//! * **hip-xgmi** (`MemoryMapped` + `PortMapped`) — `hipExtMallocWithFlags` fine-grained
//!   (uncached) memory; `export` = `hipIpcGetMemHandle` bytes; `map` =
//!   `hipIpcOpenMemHandle`; the port uses `hipMemcpyAsync` like cuda-dma.
//! * **ib-verbs** (`PortMapped`; never run on RDMA hardware, only on a stub provider)
//!   — `register` = `ibv_reg_mr` of host memory (GPU memory through dma-buf/peermem is
//!   not done); `export` = address + rkey in [`Export::bytes`], no fds;
//!   `connect` creates an RC queue pair and exchanges QPN/PSN/LID/GID through the
//!   bootstrap; `write` = `IBV_WR_RDMA_WRITE`; `read` = `IBV_WR_RDMA_READ` (run against
//!   the stub provider only); `signal` = `IBV_WR_ATOMIC_FETCH_AND_ADD` on the 8-byte
//!   semaphore (fenced after earlier writes); `flush` polls the CQ until every posted
//!   work request completed.

use std::fmt::Debug;

use serde::{Deserialize, Serialize};

use crate::bootstrap::Bootstrap;
use crate::error::Result;
use crate::guarantees::Guarantees;
use crate::memory::{Export, Region};
use crate::topology::{Device, Endpoint, Rank, Reach};

/// Which of the three transport kinds a backend provides.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransportKinds {
    /// Implements [`MemoryMapped`].
    pub memory: bool,
    /// Implements [`PortMapped`].
    pub port: bool,
    /// Implements [`SwitchMapped`].
    pub switch: bool,
}

impl std::fmt::Display for TransportKinds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut v = Vec::new();
        if self.memory {
            v.push("memory");
        }
        if self.port {
            v.push("port");
        }
        if self.switch {
            v.push("switch");
        }
        write!(f, "{}", v.join("+"))
    }
}

/// What every transport provides: identity, promises and reach.
pub trait Transport: Send + Sync + Debug + 'static {
    /// Backend name, e.g. `host-emu`, `cuda-nvlink`.
    fn name(&self) -> &str;
    /// What this transport promises; asserted by the conformance suite.
    fn guarantees(&self) -> Guarantees;
    /// Can this transport join `local` (this process) and `remote`?
    /// Must be cheap and must not communicate.
    fn reach(&self, local: &Endpoint, remote: &Endpoint) -> Reach;
}

/// Everything a backend may need to set up a connection with one peer. Both sides
/// call the connecting method with mirrored contexts (same `tag`).
#[derive(Debug)]
pub struct PeerContext<'a> {
    /// Out-of-band channel to exchange setup data (QP numbers, fds, ...).
    pub bootstrap: &'a dyn Bootstrap,
    /// This rank's endpoint.
    pub local: &'a Endpoint,
    /// The peer's endpoint.
    pub remote: &'a Endpoint,
    /// Tag reserved for this connection's setup messages; unique per (pair, connection).
    pub tag: u64,
}

/// Memory-mapped I/O: a peer's memory becomes addressable by local device code, which
/// copies with its own threads.
///
/// **Ordering/visibility contract** (what device code may rely on, given the
/// [`Guarantees`]): stores into a mapping become visible to the owner when the writer
/// performs a release at system scope (a semaphore signal) and the owner an acquire
/// (the matching wait). Without that pair nothing is promised.
///
/// **Caller's job**: keep a `Memory` alive while any peer has it mapped; exchange
/// [`Export`]s through the bootstrap; never map an export twice for one channel.
pub trait MemoryMapped: Transport {
    /// A local registered buffer.
    type Memory: Region;
    /// A peer's buffer mapped into this process.
    type Mapping: Region;

    /// Allocate `len` bytes of exportable memory on `device` (zeroed).
    fn alloc(&self, device: Device, len: u64) -> Result<Self::Memory>;
    /// Describe `mem` so a peer can map it.
    fn export(&self, mem: &Self::Memory) -> Result<Export>;
    /// Map a peer's exported buffer for local device code.
    fn map(&self, export: Export) -> Result<Self::Mapping>;
}

/// Port-mapped I/O: a host proxy issues transfers for device code. Device code pushes
/// triggers into a FIFO; the proxy (generic over `P: PortMapped`) pops them and calls a
/// [`Port`].
///
/// **Ordering contract**: operations on one `Port` are issued in call order. What
/// completes in which order is given by [`Guarantees`]: `signal` strength (strong ⇒
/// the signal lands after every earlier `write` on the port), `put_put_ordered`,
/// what `flush` means, and `get` (whether [`Port::read`] works; a read is always
/// ordered after the port's earlier writes and signals).
///
/// **Caller's job**: register every buffer used with [`PortMapped::register`] and
/// keep it alive until a `flush` after its last use; semaphores are 8-byte aligned
/// locations in registered memory.
pub trait PortMapped: Transport {
    /// A local buffer registered for port I/O.
    type Local: Region;
    /// A peer buffer the port can write to and read from (address + key, or mapped
    /// pointer).
    type Remote: Send + Sync + Debug + 'static;
    /// A connection to one peer.
    type Port: Port<Local = Self::Local, Remote = Self::Remote>;

    /// Register an existing buffer (any allocator the backend can address) for port
    /// I/O. The returned handle must not outlive `region`'s memory.
    fn register(&self, region: &dyn Region) -> Result<Self::Local>;
    /// Describe a registered buffer so a peer can target it.
    fn export(&self, local: &Self::Local) -> Result<Export>;
    /// Turn a peer's export into a write target.
    fn import(&self, export: Export) -> Result<Self::Remote>;
    /// Connect to one peer; both sides call this with mirrored contexts.
    fn connect(&self, ctx: &PeerContext<'_>) -> Result<Self::Port>;
    /// An imported peer buffer as a [`Region`] this process's device addresses, for
    /// backends whose imports are mappings (cuda-dma: a peer allocation mapped for the
    /// local GPU). Callers that queue their own device work on the peer's memory take
    /// its address from here (the GPU communicator's copy-engine path, whose regions
    /// come from a port backend when no memory backend is selected). `None`, the
    /// default, for backends whose remote buffers are keys rather than addresses
    /// (host-tcp, ib-verbs).
    fn remote_region<'a>(&self, remote: &'a Self::Remote) -> Option<&'a dyn Region> {
        let _ = remote;
        None
    }
}

/// One connection of a port-mapped transport. Called only by the proxy thread.
pub trait Port: Send + Debug {
    /// Local buffer type.
    type Local;
    /// Remote buffer type.
    type Remote;
    /// Start copying `len` bytes from `src+src_off` to `dst+dst_off`. Returns when the
    /// transfer is issued, not completed. Bounds are checked against both regions.
    fn write(
        &mut self,
        dst: &Self::Remote,
        dst_off: u64,
        src: &Self::Local,
        src_off: u64,
        len: u64,
    ) -> Result<()>;
    /// One-sided read, the port's `get`: start copying `len` bytes from the peer's
    /// `src+src_off` to the local `dst+dst_off` (the mirror of [`Port::write`]).
    /// Returns when the transfer is issued, not completed. Bounds are checked against
    /// both regions before anything is issued: an out-of-range read is an error that
    /// issues nothing. `len == 0` is a no-op.
    ///
    /// **Completion**: the bytes are in `dst` no later than the next [`Port::flush`]
    /// returns `Ok` (a flush that fails promises nothing about them). Until then the
    /// caller neither reads nor writes `dst+dst_off..+len`, and keeps `dst`
    /// registered (the peer keeps `src` registered).
    ///
    /// **Ordering**: a read is ordered after every earlier `write` and `signal` on the
    /// same port: it returns the bytes of earlier writes to the range it reads, whatever
    /// [`Guarantees::put_put_ordered`] says about two writes. It also sees every store
    /// the peer made before a release that this side acquired before issuing the read
    /// (the peer writes its memory and signals; we wait, then read). Nothing orders a
    /// read before *later* operations on the port: a later `write` or `signal` may land
    /// before the read has fetched its source or filled `dst`, so `flush` in between when
    /// a later operation depends on the read (a write whose source is `dst`, a signal
    /// telling the peer it may overwrite `src`).
    ///
    /// **Support** is advertised by [`Guarantees::get`]. A backend that does not claim
    /// it returns [`crate::HalError::Unsupported`] naming itself and saying what to do
    /// instead. The method is required rather than defaulted: the trait cannot name the
    /// backend in that error, and each backend states in its own error why it has no
    /// read path, as it states in its `Guarantees` why it has no other claim.
    fn read(
        &mut self,
        dst: &Self::Local,
        dst_off: u64,
        src: &Self::Remote,
        src_off: u64,
        len: u64,
    ) -> Result<()>;
    /// Atomically add `add` to the 64-bit semaphore at `sem+off` on the peer, ordered
    /// as [`Guarantees::signal`] says.
    fn signal(&mut self, sem: &Self::Remote, off: u64, add: u64) -> Result<()>;
    /// [`Port::write`] of `len` bytes, then [`Port::signal`] of `add` on the semaphore
    /// `signal = (sem, off)`, as one call (MSCCL++'s `putWithSignal`): exactly the
    /// promises of the two calls in that order, so a backend may fuse them (host-tcp:
    /// one socket send, which its peer's receiver takes in one wake-up; it checks both
    /// before it issues anything). The default makes the two calls, so there a signal
    /// that fails its checks returns its error after the write was issued.
    fn write_signal(
        &mut self,
        dst: &Self::Remote,
        dst_off: u64,
        src: &Self::Local,
        src_off: u64,
        len: u64,
        signal: (&Self::Remote, u64, u64),
    ) -> Result<()> {
        self.write(dst, dst_off, src, src_off, len)?;
        let (sem, off, add) = signal;
        self.signal(sem, off, add)
    }
    /// Wait until every earlier `write`/`read`/`signal` completed in the sense of
    /// [`Guarantees::flush`] (for a `read`: its bytes are in the local destination).
    /// Bounded: times out with an error.
    fn flush(&mut self) -> Result<()>;
}

/// Switch-mapped I/O: memory bound into a multicast group; device code reduces from
/// and broadcasts to the group through one address.
///
/// **Contract**: a `reduce` read of the multicast address returns the element-wise
/// reduction of every member's unicast buffer *as of* each member's last release
/// before the group barrier; a `broadcast` store is visible in every member's unicast
/// buffer after the next group barrier.
pub trait SwitchMapped: Transport {
    /// A multicast group with memory bound.
    type Group: SwitchGroup;
    /// Create a group of `members` (every member calls this, same `tag`), each
    /// binding `len` bytes.
    fn create_group(
        &self,
        bootstrap: &dyn Bootstrap,
        members: &[Rank],
        len: u64,
        tag: u64,
    ) -> Result<Self::Group>;
}

/// A multicast group as seen by one member.
pub trait SwitchGroup: Send + Sync + Debug {
    /// This member's own (unicast) buffer.
    fn unicast(&self) -> &dyn Region;
    /// The multicast address device code reduces from / broadcasts to.
    fn multicast_addr(&self) -> u64;
    /// The members, in group order.
    fn members(&self) -> &[Rank];
}
