//! [`IbVerbs`]: the transport, its promises and its `PortMapped` side.

use std::any::Any;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::Arc;
use std::time::Duration;

use commhal_backend_host_emu::HostRegion;
use commhal_hal::registry::BackendOptions;
use commhal_hal::transport::PeerContext;
use commhal_hal::{
    Device, DeviceKind, DmaBufExport, DmaBufRange, Endpoint, Export, FlushMeaning, Guarantees,
    HalError, MemoryKind, MemoryOwner, PortMapped, Rank, Reach, Region, Registrable, Result,
    SignalStrength, Transport,
};

use crate::BACKEND;
use crate::device::{self, Chosen, Link, Wanted};
use crate::port::IbPort;
use crate::region::{IbLocal, IbRemote, host_owner};
use crate::sys::abi::{
    IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_REMOTE_READ,
    IBV_ACCESS_REMOTE_WRITE,
};
use crate::sys::{Cq, Mr, Path, Pd, Qp};

/// Depth of the proxy FIFO ib-verbs is used with.
pub const FIFO_DEPTH: u32 = 512;
/// Send-queue depth of each port's queue pair (and its completion queue).
pub const SQ_DEPTH: u32 = 256;

/// What ib-verbs promises, and why (RC semantics of the InfiniBand specification;
/// **never checked on RDMA hardware**, only against the stub provider):
///
/// * `signal: Strong` — one RC queue pair executes requests in order at the
///   responder, and the signal's atomic is posted with `IBV_SEND_FENCE` after the
///   port's writes, so a peer that sees the add sees the earlier writes.
/// * `put_put_ordered: true` — RC executes writes of one queue pair in order.
/// * `flush: source reusable`, **not** remote visible — flush waits for every work
///   completion: the NIC has read every source. A completion does not promise that
///   the bytes are visible to the peer's CPU without a signal (that would need a
///   read-back, not done).
/// * `write_copies_source: false` — `write` posts `IBV_WR_RDMA_WRITE`s; the NIC reads
///   the source until their completion, which flush waits for.
/// * `get: true` — `Port::read` is `IBV_WR_RDMA_READ` into a local region registered
///   with local write access, from a peer region registered with remote read access
///   (every registration here has both); RC executes it after the port's earlier
///   writes, and flush waits for its completion (the data is in place then).
///   **Exercised against the stub provider only, never on RDMA hardware.**
/// * no LL packets, no graph capture.
pub const GUARANTEES: Guarantees = Guarantees {
    signal: SignalStrength::Strong,
    put_put_ordered: true,
    flush: FlushMeaning {
        source_reusable: true,
        remote_visible: false,
    },
    write_copies_source: false,
    get: true,
    ll8: false,
    ll16: false,
    graph_capture: false,
    max_transfer: u64::MAX,
    fifo_depth: FIFO_DEPTH,
};

/// A dma-buf range to register with [`IbVerbs::register_dmabuf`]: `len` bytes at
/// `offset` of the dma-buf `fd`, addressed by work requests (and peers) as
/// `iova..iova+len`.
#[derive(Debug, Clone, Copy)]
pub struct DmabufRange<'a> {
    /// The dma-buf (for GPU memory, from `cuMemGetHandleForAddressRange`). Only
    /// borrowed: it may be closed once the registration returned.
    pub fd: BorrowedFd<'a>,
    /// Byte offset into the dma-buf.
    pub offset: u64,
    /// Bytes registered.
    pub len: u64,
    /// The address work requests use for the first byte (for GPU memory, its device
    /// address).
    pub iova: u64,
}

impl<'a> From<&'a DmaBufRange> for DmabufRange<'a> {
    /// Borrow a dma-buf a region exported ([`Region::registrable`]).
    fn from(r: &'a DmaBufRange) -> DmabufRange<'a> {
        DmabufRange {
            fd: r.fd.as_fd(),
            offset: r.offset,
            len: r.len,
            iova: r.iova,
        }
    }
}

/// The ib-verbs transport: one device context and protection domain, shared by
/// clones; one RC queue pair and completion queue per port.
#[derive(Debug, Clone)]
pub struct IbVerbs {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    chosen: Chosen,
    pd: Arc<Pd>,
    flush_timeout: Duration,
}

/// Options of `[backend.ib-verbs]`.
#[derive(Debug, Clone, Default)]
pub struct IbOptions {
    /// Library path (default `COMMHAL_IBVERBS_LIB`, else `libibverbs.so.1`).
    pub library: Option<String>,
    /// Device, port and GID index wanted.
    pub want: Wanted,
    /// Flush bound (default `COMMHAL_IBVERBS_FLUSH_TIMEOUT_MS`, else 30 s).
    pub flush_timeout: Option<Duration>,
}

impl IbOptions {
    /// Parse `[backend.ib-verbs]`: `library`, `device`, `port`, `gid_index`,
    /// `flush_timeout_ms`.
    pub fn from_table(t: &BackendOptions) -> Result<IbOptions> {
        let bad = |k: &str, v: &toml::Value, what: &str| {
            HalError::Config(format!("[backend.ib-verbs] {k} must be {what}, got {v}"))
        };
        let mut o = IbOptions::default();
        for (k, v) in t {
            match k.as_str() {
                "library" => {
                    o.library = Some(v.as_str().ok_or_else(|| bad(k, v, "a path"))?.into())
                }
                "device" => {
                    o.want.device =
                        Some(v.as_str().ok_or_else(|| bad(k, v, "a device name"))?.into())
                }
                "port" | "gid_index" => {
                    let n = v
                        .as_integer()
                        .and_then(|n| u8::try_from(n).ok())
                        .ok_or_else(|| bad(k, v, "an integer from 0 to 255"))?;
                    if k == "port" {
                        o.want.port = Some(n);
                    } else {
                        o.want.gid_index = Some(n);
                    }
                }
                "flush_timeout_ms" => {
                    let ms = v
                        .as_integer()
                        .filter(|&n| n > 0)
                        .ok_or_else(|| bad(k, v, "a positive integer"))?;
                    o.flush_timeout = Some(Duration::from_millis(ms as u64));
                }
                other => {
                    return Err(HalError::Config(format!(
                        "[backend.ib-verbs] has no option `{other}` (known: library, device, port, gid_index, flush_timeout_ms)"
                    )));
                }
            }
        }
        Ok(o)
    }
}

fn flush_timeout_from_env() -> Result<Duration> {
    Ok(commhal_hal::settings::ibverbs::FLUSH_TIMEOUT_MS.duration_or_default()?)
}

impl IbVerbs {
    /// Open the device the options (and environment) name, or the first usable one.
    pub fn new(opts: &IbOptions) -> Result<IbVerbs> {
        let path = crate::sys::library_path(opts.library.as_deref());
        let verbs = device::load(&path).map_err(|reason| HalError::Unavailable {
            backend: BACKEND.into(),
            reason,
        })?;
        let want = opts.want.clone().with_env()?;
        let chosen = device::choose(verbs, &want)?;
        let pd = Pd::alloc(chosen.ctx.clone()).map_err(|e| {
            HalError::backend(
                BACKEND,
                format!(
                    "ibv_alloc_pd on {} failed (errno {e}): check the locked-memory limit (ulimit -l) and device permissions",
                    chosen.ctx.name()
                ),
            )
        })?;
        let flush_timeout = match opts.flush_timeout {
            Some(d) => d,
            None => flush_timeout_from_env()?,
        };
        Ok(IbVerbs {
            inner: Arc::new(Inner {
                chosen,
                pd: Arc::new(pd),
                flush_timeout,
            }),
        })
    }

    /// Build from `[backend.ib-verbs]` options.
    pub fn from_options(options: &BackendOptions) -> Result<IbVerbs> {
        IbVerbs::new(&IbOptions::from_table(options)?)
    }

    /// Device name, port, link and GID index in use (for logs and `commhal info`).
    pub fn describe(&self) -> String {
        let c = &self.inner.chosen;
        format!(
            "{} port {} ({}, GID index {}, atomics {})",
            c.ctx.name(),
            c.port,
            match c.link {
                Link::InfiniBand => format!("InfiniBand, LID {}", c.port_attr.lid),
                Link::Roce => "RoCE".to_string(),
            },
            c.gid_index,
            if c.attr.atomics {
                "yes"
            } else {
                "no: signals are 8-byte writes"
            }
        )
    }

    /// Whether the device does atomics (else signals are shadow-counter writes).
    pub fn atomics(&self) -> bool {
        self.inner.chosen.attr.atomics
    }

    /// Whether the loaded libibverbs has `ibv_reg_dmabuf_mr` (rdma-core 34 and newer),
    /// without which device memory cannot be registered.
    pub fn dmabuf(&self) -> bool {
        self.inner.pd.has_dmabuf()
    }

    /// Register a dma-buf range with `ibv_reg_dmabuf_mr`, as memory of `kind` on
    /// `device` kept alive by `owner` for the registration's life. The returned
    /// region's address is `range.iova`. This is what [`PortMapped::register`] does
    /// for GPU memory after exporting it from the CUDA driver; any dma-buf exporter
    /// (or a memfd on the stub provider) can be registered the same way.
    pub fn register_dmabuf(
        &self,
        range: DmabufRange<'_>,
        kind: MemoryKind,
        device: Device,
        owner: Arc<dyn Any + Send + Sync>,
    ) -> Result<IbLocal> {
        self.reg_dmabuf(range, range.iova, range.len, kind, device, owner)
    }

    /// [`Self::register_dmabuf`], the returned region being `addr..addr+len` inside
    /// the registered range.
    fn reg_dmabuf(
        &self,
        range: DmabufRange<'_>,
        addr: u64,
        len: u64,
        kind: MemoryKind,
        device: Device,
        owner: Arc<dyn Any + Send + Sync>,
    ) -> Result<IbLocal> {
        if range.len == 0 {
            return Err(HalError::invalid(
                "ib-verbs cannot register an empty dma-buf range",
            ));
        }
        let inside = addr >= range.iova
            && addr
                .checked_add(len)
                .zip(range.iova.checked_add(range.len))
                .is_some_and(|(end, rend)| end <= rend);
        if !inside {
            return Err(HalError::invalid(format!(
                "region {addr:#x}+{len} lies outside the dma-buf range registered at IOVA {:#x}+{}",
                range.iova, range.len
            )));
        }
        let mr = Mr::register_dmabuf(
            self.inner.pd.clone(),
            range.fd,
            range.offset,
            range.len,
            range.iova,
            self.access(),
        )
        .map_err(|e| match e {
            None => no_dmabuf(self.inner.pd.library()),
            Some(errno) => HalError::backend(
                BACKEND,
                format!(
                    "ibv_reg_dmabuf_mr of {} bytes at offset {} of dma-buf fd {} (IOVA {:#x}) failed (errno {errno}): the NIC driver must support dma-buf (Linux 5.12 or newer, a provider such as mlx5 built with it) and the locked-memory limit (`ulimit -l`) must allow it; where it cannot, stage GPU memory through host memory",
                    range.len,
                    range.offset,
                    range.fd.as_raw_fd(),
                    range.iova
                ),
            ),
        })?;
        Ok(IbLocal::with_range(mr, addr, len, kind, device, owner))
    }

    /// Device memory: the region's exporter (for CUDA memory, the driver) exports the
    /// page-aligned range enclosing it as a dma-buf, which is registered with its
    /// device address as IOVA. Only what [`Region::registrable`] offers is used.
    fn register_device(
        &self,
        region: &dyn Region,
        owner: MemoryOwner,
        export: &DmaBufExport,
    ) -> Result<IbLocal> {
        if !self.dmabuf() {
            return Err(no_dmabuf(self.inner.pd.library()));
        }
        let buf = export(region.addr(), region.len()).map_err(|e| {
            HalError::backend(
                BACKEND,
                format!(
                    "device memory of {} bytes at {:#x} was not exported as a dma-buf, so the NIC cannot register it: {e}. Stage GPU memory through host memory instead (host-emu buffers registered with ib-verbs)",
                    region.len(),
                    region.addr()
                ),
            )
        })?;
        let local = self.reg_dmabuf(
            DmabufRange::from(&buf),
            region.addr(),
            region.len(),
            region.kind(),
            region.device(),
            owner,
        );
        // The fd closes here: the MR holds the kernel's own dma-buf reference.
        drop(buf);
        local
    }

    fn access(&self) -> i32 {
        let mut a = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
        if self.atomics() {
            a |= IBV_ACCESS_REMOTE_ATOMIC;
        }
        a
    }
}

impl Transport for IbVerbs {
    fn name(&self) -> &str {
        BACKEND
    }
    fn guarantees(&self) -> Guarantees {
        GUARANTEES
    }
    /// Host ranks only: yes, cost 80 across hosts or virtual nodes (ahead of
    /// host-tcp's 100); cost 70 on one node (behind shared memory; loopback through
    /// the NIC). GPU ranks are refused: device memory registers (dma-buf), but a port
    /// between GPU ranks has never run on a GPU with an RDMA NIC, so the executor keeps
    /// staging their data through host memory.
    fn reach(&self, local: &Endpoint, remote: &Endpoint) -> Reach {
        if local.device.kind != DeviceKind::Host || remote.device.kind != DeviceKind::Host {
            return Reach::No(format!(
                "ib-verbs ports serve host ranks only (ranks drive {:?} and {:?}): GPU memory is staged through host memory",
                local.device.kind, remote.device.kind
            ));
        }
        if local.same_node(remote) {
            Reach::Yes { cost: 70 }
        } else {
            Reach::Yes { cost: 80 }
        }
    }
}

fn no_dmabuf(library: &str) -> HalError {
    HalError::unsupported(
        BACKEND,
        format!(
            "this libibverbs ({library}) has no ibv_reg_dmabuf_mr (rdma-core >= 34 needed) — GPU memory cannot be registered: install rdma-core 34 or newer, or stage GPU memory through host memory (host-emu buffers registered with ib-verbs)"
        ),
    )
}

/// The connection message two ranks exchange through the bootstrap to connect a
/// queue pair. Layout, little-endian: QPN (u32), PSN (u32), LID (u16), active MTU (u8),
/// link layer (u8: 1 InfiniBand, 2 RoCE), GID (16 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectMsg {
    /// Queue pair number.
    pub qpn: u32,
    /// Starting packet sequence number (24 bits).
    pub psn: u32,
    /// Port LID (InfiniBand addressing).
    pub lid: u16,
    /// Active MTU (the verbs enum value).
    pub mtu: u8,
    /// Link layer of the port.
    pub link: Link,
    /// Port GID (RoCE addressing).
    pub gid: [u8; 16],
}

impl ConnectMsg {
    /// Bytes of an encoded message.
    pub const LEN: usize = 4 + 4 + 2 + 1 + 1 + 16;

    /// The bytes sent to the peer.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(Self::LEN);
        v.extend_from_slice(&self.qpn.to_le_bytes());
        v.extend_from_slice(&self.psn.to_le_bytes());
        v.extend_from_slice(&self.lid.to_le_bytes());
        v.push(self.mtu);
        v.push(match self.link {
            Link::InfiniBand => 1,
            Link::Roce => 2,
        });
        v.extend_from_slice(&self.gid);
        v
    }

    /// Decode rank `peer`'s message.
    pub fn decode(b: &[u8], peer: Rank) -> Result<ConnectMsg> {
        let Some(b) = <&[u8; Self::LEN]>::try_from(b).ok() else {
            return Err(HalError::Bootstrap(format!(
                "rank {peer} sent a {}-byte ib-verbs connection message (expected {}): do both ranks run the same commhal version and backend?",
                b.len(),
                Self::LEN
            )));
        };
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let link = match b[11] {
            1 => Link::InfiniBand,
            2 => Link::Roce,
            other => {
                return Err(HalError::Bootstrap(format!(
                    "rank {peer} sent an ib-verbs connection message with link layer {other} (1 InfiniBand, 2 RoCE): do both ranks run the same commhal version?"
                )));
            }
        };
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[12..28]);
        Ok(ConnectMsg {
            qpn: u32_at(0),
            psn: u32_at(4),
            lid: u16::from_le_bytes([b[8], b[9]]),
            mtu: b[10],
            link,
            gid,
        })
    }
}

impl PortMapped for IbVerbs {
    type Local = IbLocal;
    type Remote = IbRemote;
    type Port = IbPort;

    /// What the region's [`Region::registrable`] offers: host memory
    /// ([`Registrable::Host`]: host-emu's regions and mappings, [`HostRegion`]) with
    /// `ibv_reg_mr`; device memory ([`Registrable::DeviceDmaBuf`]: cuda-nvlink and
    /// cuda-dma allocations) as a dma-buf with `ibv_reg_dmabuf_mr`; an [`IbLocal`]
    /// again. Anything else is [`HalError::Unregistered`] (this backend cannot tell
    /// whether it stays alive).
    fn register(&self, region: &dyn Region) -> Result<IbLocal> {
        if let Some(l) = region.as_any().downcast_ref::<IbLocal>()
            && l.is_dmabuf()
        {
            return Ok(l.clone());
        }
        let offer = region.registrable();
        if let Some(Registrable::DeviceDmaBuf { owner, export }) = &offer
            && !region.is_empty()
        {
            return self.register_device(region, owner.clone(), export);
        }
        let Some((owner, kind)) = host_owner(region, offer) else {
            return Err(HalError::Unregistered {
                backend: BACKEND.into(),
                addr: region.addr(),
                len: region.len(),
            });
        };
        if region.is_empty() {
            return Err(HalError::invalid(
                "ib-verbs cannot register an empty region",
            ));
        }
        let mr = Mr::register(self.inner.pd.clone(), region.addr(), region.len(), self.access())
            .map_err(|e| {
                HalError::backend(
                    BACKEND,
                    format!(
                        "ibv_reg_mr of {} bytes at {:#x} failed (errno {e}): check the locked-memory limit (`ulimit -l`, memlock in limits.conf / the container's --ulimit)",
                        region.len(),
                        region.addr()
                    ),
                )
            })?;
        Ok(IbLocal::new(mr, region, owner, kind))
    }

    fn export(&self, local: &IbLocal) -> Result<Export> {
        Ok(local.export())
    }

    fn import(&self, export: Export) -> Result<IbRemote> {
        IbRemote::import(export)
    }

    /// Create an RC queue pair, exchange QPN/PSN/LID/GID with the peer under
    /// `ctx.tag`, move the QP to RTS, then exchange a second message so neither side
    /// posts before the other is ready to receive.
    fn connect(&self, ctx: &PeerContext<'_>) -> Result<IbPort> {
        let (me, peer) = (ctx.local.rank, ctx.remote.rank);
        Transport::reach(self, ctx.local, ctx.remote).check_port(BACKEND, me, peer)?;
        let c = &self.inner.chosen;
        let verr = |what: &str, e: i32, hint: &str| {
            HalError::backend(
                BACKEND,
                format!("{what} failed (errno {e}) for the port to rank {peer}: {hint}"),
            )
        };
        let cq = Arc::new(
            Cq::create(c.ctx.clone(), (2 * SQ_DEPTH) as i32).map_err(|e| {
                verr(
                    "ibv_create_cq",
                    e,
                    "check the device's CQ limits (`ibv_devinfo -v`)",
                )
            })?,
        );
        let depth = SQ_DEPTH.min(c.attr.max_qp_wr.max(1));
        let qp = Qp::create(self.inner.pd.clone(), cq.clone(), depth).map_err(|e| {
            verr(
                "ibv_create_qp (RC)",
                e,
                "check the device's QP limits and ulimit -l",
            )
        })?;
        qp.to_init(c.port).map_err(|e| {
            verr(
                "ibv_modify_qp to INIT",
                e,
                "check the port number and P_Key table",
            )
        })?;
        let psn = psn_for(qp.qp_num);
        let hello = ConnectMsg {
            qpn: qp.qp_num,
            psn,
            lid: c.port_attr.lid,
            mtu: c.port_attr.active_mtu as u8,
            link: c.link,
            gid: c.gid,
        };
        ctx.bootstrap.send(peer, ctx.tag, &hello.encode())?;
        let theirs = ConnectMsg::decode(&ctx.bootstrap.recv(peer, ctx.tag)?, peer)?;
        let name = |l: Link| match l {
            Link::InfiniBand => "InfiniBand",
            Link::Roce => "RoCE",
        };
        if theirs.link != c.link {
            return Err(HalError::unsupported(
                BACKEND,
                format!(
                    "a port to rank {peer}: its RDMA port is {} but this one is {}: pick ports of the same link layer (COMMHAL_IBVERBS_DEVICE / _PORT)",
                    name(theirs.link),
                    name(c.link)
                ),
            ));
        }
        let path = Path {
            dest_qpn: theirs.qpn,
            rq_psn: theirs.psn,
            mtu: c.port_attr.active_mtu.min(u32::from(theirs.mtu)).max(1),
            dlid: theirs.lid,
            global: c.link == Link::Roce,
            dgid: theirs.gid,
            sgid_index: c.gid_index,
            port: c.port,
        };
        qp.to_rtr(&path).map_err(|e| {
            verr(
                "ibv_modify_qp to RTR",
                e,
                match c.link {
                    Link::Roce => "check the GID index (COMMHAL_IBVERBS_GID_INDEX, `show_gids`) and that both hosts' RoCE IPs route to each other",
                    Link::InfiniBand => "check that the peer's LID is reachable on this subnet (`ibstat`, `ibping`)",
                },
            )
        })?;
        qp.to_rts(psn).map_err(|e| {
            verr(
                "ibv_modify_qp to RTS",
                e,
                "check the QP timeout/retry attributes the device accepts",
            )
        })?;
        ctx.bootstrap.send(peer, ctx.tag, b"rts")?;
        let ready = ctx.bootstrap.recv(peer, ctx.tag)?;
        if ready != b"rts" {
            return Err(HalError::Bootstrap(format!(
                "rank {peer} answered the ib-verbs ready message with {} unexpected bytes",
                ready.len()
            )));
        }
        let scratch = HostRegion::alloc(64)?;
        let scratch_reg = self.register(&scratch)?;
        Ok(IbPort::new(
            qp,
            cq,
            scratch_reg,
            scratch,
            peer,
            self.inner.flush_timeout,
            u64::from(c.port_attr.max_msg_sz.max(4096)),
            self.atomics(),
        ))
    }
}

/// A 24-bit starting PSN that differs between queue pairs and runs.
fn psn_for(qpn: u32) -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    (nanos ^ qpn.wrapping_mul(2_654_435_761)) & 0x00ff_ffff
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_validated() {
        let mut t = BackendOptions::new();
        t.insert("port".into(), 300.into());
        assert!(matches!(
            IbOptions::from_table(&t),
            Err(HalError::Config(_))
        ));
        let mut t = BackendOptions::new();
        t.insert("flush_timeout_ms".into(), 0.into());
        assert!(matches!(
            IbOptions::from_table(&t),
            Err(HalError::Config(_))
        ));
        let mut t = BackendOptions::new();
        t.insert("colour".into(), "blue".into());
        let e = IbOptions::from_table(&t).unwrap_err().to_string();
        assert!(e.contains("colour") && e.contains("gid_index"), "{e}");
        let mut t = BackendOptions::new();
        t.insert("device".into(), "mlx5_0".into());
        t.insert("gid_index".into(), 3.into());
        let o = IbOptions::from_table(&t).unwrap();
        assert_eq!(o.want.device.as_deref(), Some("mlx5_0"));
        assert_eq!(o.want.gid_index, Some(3));
    }

    #[test]
    fn guarantees_claim_get_but_no_remote_visible_flush() {
        let claims = GUARANTEES.claims();
        assert!(claims.contains(&("strong-signal", true)));
        assert!(claims.contains(&("flush-remote-visible", false)));
        assert!(claims.contains(&("get", true)));
        assert!(claims.contains(&("write-copies-source", false)));
    }
}
