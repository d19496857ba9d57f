//! `host-tcp`: a port-mapped transport over TCP, so host ranks on different machines —
//! or on different *virtual nodes* of one machine ([`Endpoint::node`]) — can talk.
//! Multi-node algorithms use it on CPU-only machines.
//!
//! | module | holds |
//! |---|---|
//! | this one | [`HostTcp`]: `Transport` (name, [`HostTcp::GUARANTEES`], reach) and `PortMapped` |
//! | [`regions`] | [`TcpLocal`] / [`TcpRemote`], the export format, the per-transport region table |
//! | [`hostmem`] | [`HostRegion`]: plain host memory for ranks without shared memory |
//! | [`handshake`] | connection setup through the bootstrap (address + per-connection token) |
//! | [`wire`] | the frame format |
//! | `link`, `port` | the receiver thread (polls after traffic, then blocks) and [`TcpPort`], the sender |
//!
//! **How it works.** `register` files a buffer (host-emu [`crate::ShmRegion`] /
//! [`crate::ShmMapping`], or a [`HostRegion`]) under an id in this transport's region
//! table; `export` is (instance, id, length) — bytes only, no descriptors, so it works
//! across hosts; `import` turns that into a [`TcpRemote`]. `connect` opens one TCP
//! connection per (pair, tag) and starts a receiver thread on each side that applies the
//! peer's `WRITE`/`SIGNAL` frames to the local registered buffers (bounds-checked),
//! answers `READ` with the bytes (`READ_DATA`, written by a writer thread) and `FLUSH`
//! with `ACK`. Register buffers and connect with the **same** `HostTcp`
//! (clones share the table): a connection's receiver only sees its transport's regions.
//! Frames go out on the caller's thread, in one send per frame (a `write_signal`'s
//! last chunk and its signal in one). The receiver polls its socket for a while after
//! the last bytes arrived, yielding its core between polls, before it blocks in a read
//! ([`HostTcp::with_receive_spin`], `COMMHAL_HOST_TCP_SPIN_US`): the frames of a burst
//! are then applied without waking a thread, which cost the sender and the receiver
//! several µs per frame (measured in `link`'s docs).
//!
//! **Device memory.** A region whose memory the host cannot address but can copy
//! ([`Region::staged`]: CUDA device memory) registers too: `write` copies the source
//! out chunk by chunk before sending; the receiver queues each `WRITE`'s copy in
//! arrival order, and a `SIGNAL` stores the word's new value with one 8-byte store
//! queued behind them (after settling any region not on the same queue), so the flag
//! lands after the data it publishes; a `FLUSH` is acknowledged, and a `READ`
//! answered, only once the queued copies landed. The new value comes from a host-side
//! shadow, seeded from the device at the word's first signal: such a word must change
//! only through the signals of one registration (device code waits on it, never writes
//! it). That is how GPU plans reach ranks of other nodes without an RDMA NIC.
//!
//! **Promises** ([`HostTcp::GUARANTEES`]): one in-order stream per port and one thread
//! applying it, so signals are strong and puts ordered; `write` copies the source into
//! the socket before returning and `flush` returns after the peer acknowledged
//! applying everything before it, so flush means source reusable *and* remote visible.
//! The source is reusable when `write` returns, staged device memory too (its bytes
//! are copied out first): `write_copies_source`, so callers skip the flushes that ask
//! only for that, a round trip each.
//! `write_signal` sends the write and its signal in one socket send.
//! `get`: a port `read` is answered by the peer's receiver after every earlier frame,
//! and its bytes land before the `ACK` of a later flush. No LL8/LL16 packets, no graph
//! capture.
//!
//! **Failures.** A closed connection is [`HalError::PeerDead`] on the next operation;
//! `flush` gives up with [`HalError::Timeout`] after the timeout (the bootstrap's, or
//! [`HostTcp::with_timeout`]); a frame either side refuses closes the connection and
//! later operations fail with an error naming the peer.

pub mod handshake;
pub mod hostmem;
mod link;
mod port;
pub mod regions;
mod register;
pub mod wire;

use std::sync::Arc;
use std::time::Duration;

use commhal_hal::settings::host::HOST_TCP_SPIN_US;
use commhal_hal::transport::{PeerContext, PortMapped};
use commhal_hal::{
    Endpoint, Export, FlushMeaning, Guarantees, HalError, Reach, Region, Registrable, Result,
    SignalStrength, Transport,
};

pub use hostmem::HostRegion;
pub use port::TcpPort;
pub use regions::{SignalHook, TcpLocal, TcpRemote};

use crate::memory::{ShmMapping, ShmRegion};
use hostmem::HostBytes;
use regions::{Mem, RegionTable};

/// The backend's name, as in [`Export::backend`] and the registry.
pub const BACKEND: &str = "host-tcp";

/// Reach cost across hosts or virtual nodes.
pub const COST_REMOTE: u32 = 100;
/// Reach cost on one node: a fallback behind shared memory (host-emu: 10/20).
pub const COST_SAME_NODE: u32 = 60;

/// The TCP port transport. Cheap to clone; clones share the region table.
#[derive(Debug, Clone)]
pub struct HostTcp {
    table: Arc<RegionTable>,
    timeout: Option<Duration>,
    /// How long a receiver polls after traffic before it blocks.
    receive_spin: Duration,
}

impl HostTcp {
    /// What `host-tcp` promises (see the module docs for why).
    pub const GUARANTEES: Guarantees = Guarantees {
        signal: SignalStrength::Strong,
        put_put_ordered: true,
        flush: FlushMeaning {
            source_reusable: true,
            remote_visible: true,
        },
        write_copies_source: true,
        get: true,
        ll8: false,
        ll16: false,
        graph_capture: false,
        max_transfer: u64::MAX,
        fifo_depth: crate::FIFO_DEPTH,
    };

    /// A transport with its own, empty region table and a random instance id; its
    /// receivers poll for `COMMHAL_HOST_TCP_SPIN_US` after traffic (an invalid value is
    /// an error naming it).
    pub fn new() -> Result<HostTcp> {
        let receive_spin = HOST_TCP_SPIN_US.duration_or_default()?;
        let instance = u64::from_le_bytes(handshake::random_bytes()?);
        Ok(HostTcp {
            table: Arc::new(RegionTable::new(instance)),
            timeout: None,
            receive_spin,
        })
    }

    /// Bound `flush` and every socket send by `timeout` instead of the bootstrap's
    /// timeout (affects ports connected afterwards).
    pub fn with_timeout(mut self, timeout: Duration) -> HostTcp {
        self.timeout = Some(timeout);
        self
    }

    /// Let receiver threads poll their socket for `spin` after the last bytes arrived
    /// instead of `COMMHAL_HOST_TCP_SPIN_US` (zero: they always block in a read;
    /// affects ports connected afterwards).
    pub fn with_receive_spin(mut self, spin: Duration) -> HostTcp {
        self.receive_spin = spin;
        self
    }

    /// Call `hook` with the semaphore word right after each `SIGNAL` a receiver thread
    /// of this transport applies to host memory (e.g. to wake threads sleeping on it
    /// with a futex; words of staged device memory have no host address to pass).
    /// Set once, before connecting; later calls are ignored. Shared by clones.
    pub fn with_signal_hook(self, hook: SignalHook) -> HostTcp {
        let _ = self.table.on_signal.set(hook);
        self
    }

    /// This transport's instance id: the owner recorded in its exports.
    pub fn instance(&self) -> u64 {
        self.table.instance()
    }
}

impl Transport for HostTcp {
    fn name(&self) -> &str {
        BACKEND
    }

    fn guarantees(&self) -> Guarantees {
        Self::GUARANTEES
    }

    /// Yes, cost [`COST_REMOTE`], across hosts or virtual nodes (whether the network
    /// actually connects them shows at `connect`); yes, cost [`COST_SAME_NODE`], on one
    /// node, as a fallback behind shared memory. Ranks that drive a GPU qualify too:
    /// their device memory travels through copies ([`Region::staged`]).
    fn reach(&self, local: &Endpoint, remote: &Endpoint) -> Reach {
        if local.same_node(remote) {
            Reach::Yes {
                cost: COST_SAME_NODE,
            }
        } else {
            Reach::Yes { cost: COST_REMOTE }
        }
    }
}

impl PortMapped for HostTcp {
    type Local = TcpLocal;
    type Remote = TcpRemote;
    type Port = TcpPort;

    /// Accepts host-emu [`ShmRegion`]/[`ShmMapping`], [`HostRegion`] and [`TcpLocal`]
    /// (re-registered here), also behind `Box<dyn Region>`, device memory that
    /// offers copies through pinned host memory ([`Region::staged`]: CUDA regions),
    /// and any other host memory of this process registrable by address
    /// ([`Registrable::Host`]: CUDA's pinned memory); anything else is
    /// [`HalError::Unregistered`]. Each call makes a new
    /// registration (a new id).
    fn register(&self, region: &dyn Region) -> Result<TcpLocal> {
        let any = region.as_any();
        let mem = if let Some(r) = any.downcast_ref::<ShmRegion>() {
            Mem::Shm(r.buf().clone())
        } else if let Some(m) = any.downcast_ref::<ShmMapping>() {
            Mem::Shm(m.buf().clone())
        } else if let Some(l) = any.downcast_ref::<TcpLocal>() {
            l.mem().clone()
        } else if let Some(access) = region.staged() {
            Mem::Staged(Arc::new(regions::Staged::new(region.addr(), access)))
        } else if let Some(Registrable::Host { owner }) = region.registrable() {
            Mem::Host(HostBytes::new(region.addr(), region.len(), owner)?)
        } else {
            return Err(HalError::Unregistered {
                backend: BACKEND.into(),
                addr: region.addr(),
                len: region.len(),
            });
        };
        Ok(self.table.register(mem))
    }

    fn export(&self, local: &TcpLocal) -> Result<Export> {
        if local.owner() != self.instance() {
            return Err(HalError::invalid(format!(
                "region {} was registered with another host-tcp transport: export it with the transport that registered it",
                local.id()
            )));
        }
        Ok(regions::export(local))
    }

    fn import(&self, export: Export) -> Result<TcpRemote> {
        regions::import(export)
    }

    /// The lower rank listens and invites the higher one through `ctx.bootstrap`
    /// under `ctx.tag` (see [`handshake`]); both then start a receiver thread.
    fn connect(&self, ctx: &PeerContext<'_>) -> Result<TcpPort> {
        let (me, peer) = (ctx.local.rank, ctx.remote.rank);
        Transport::reach(self, ctx.local, ctx.remote).check_port(BACKEND, me, peer)?;
        let (stream, peer_instance) = if me < peer {
            handshake::listen(ctx, self.instance())?
        } else {
            handshake::dial(ctx, self.instance())?
        };
        let timeout = self.timeout.unwrap_or_else(|| ctx.bootstrap.timeout());
        let link = link::Link::start(
            me,
            peer,
            stream,
            self.table.clone(),
            timeout,
            self.receive_spin,
        )?;
        Ok(TcpPort::new(link, peer_instance, self.instance(), timeout))
    }
}
