//! Port channels of GPU plans: the ops a plan runs between ranks of different virtual
//! nodes (`COMMHAL_NODE`; [`commhal_algorithms::builders::ports_across_nodes`] makes
//! them port-channel ops), carried by a port backend (cuda-dma, the copy engines)
//! through a proxy thread instead of by the SMs.
//!
//! Setup (collective, once per communicator when the ranks span several nodes): this
//! rank's input, output and plan area are registered with the port backend, exported
//! to every rank of another node ("far" rank) and imported from them; one port per far
//! rank is connected; a device-pushable FIFO ([`DeviceFifo`]) and its drain thread
//! ([`GpuProxy`]) start; and a table for the kernels (`PlanPorts` in plan.h: the FIFO,
//! and every rank's regions as this process addresses them) goes to device memory.
//!
//! What a trigger means here (plan.h, "port channels"):
//!
//! | trigger | ids | done as |
//! |---|---|---|
//! | PUT | semaphore id = far rank p; local id k (0 input, 1 output, 2 area); remote id 3p + k | `write` on the port to p |
//! | SIGNAL | semaphore id = p; remote id 3p + 2 (p's plan area), `dst_offset` = the word; `w0` = the value | `signal` on the port to p with the difference to the value last written there, so the word becomes the value |
//! | FLUSH | semaphore id = p | `flush` on the port to p; nothing more on host-tcp, whose `write` returned once it had copied its source out |
//!
//! A word of a far rank's area is written by this rank only (its own row of
//! handshake flags, semaphores it signals), so the difference is exact and each word
//! only grows, as the SM stores of memory channels make it. The port orders a signal
//! after the port's earlier writes (cuda-dma: one stream), and the kernels flush each
//! put before going on.
//!
//! On one host the far ranks' regions stay mapped by the memory backend (the hand
//! kernels address every GPU of the host); the generated kernels do not touch them but
//! through these triggers.

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use commhal_channels::fifo::{FLAG_DATA, FLAG_FLUSH, FLAG_SIGNAL, Trigger};
use commhal_cuda_rt::{Context, DeviceBuffer};
use commhal_hal::bootstrap::{Bootstrap, recv_export, send_export};
use commhal_hal::dynamic::{DynPort, DynPortMapped};
use commhal_hal::transport::PeerContext;
use commhal_hal::{Endpoint, HalError, Region};

use crate::error::{CollError, Result};
use crate::gpu_proxy::{DeviceFifo, GpuProxy};
use crate::layout::MAX_RANKS;

/// Regions per rank a trigger can name: input, output, plan area.
pub const REGIONS: usize = 3;
/// Slots of the FIFO.
const FIFO_DEPTH: u64 = 1024;
/// Bootstrap tags of the exports (`+ region`) and of the port connections (`+ peer`).
const TAG_EXPORTS: u64 = 0x504f_5254_0000;
const TAG_CONNECT: u64 = 0x504f_5254_0100;

/// The table the kernels read (`struct PlanPorts` in plan.h).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct PortTable {
    /// Device address of the FIFO ring.
    pub fifo: u64,
    /// Its slots.
    pub depth: u64,
    /// Device address of the head counter.
    pub head: u64,
    /// Device address of the tail counter.
    pub tail: u64,
    /// `base[r][k]`: region k of rank r as this process addresses it (0: none).
    pub base: [[u64; REGIONS]; MAX_RANKS],
    /// Their lengths.
    pub len: [[u64; REGIONS]; MAX_RANKS],
}

const _: () = assert!(std::mem::size_of::<PortTable>() == 32 + 2 * 8 * MAX_RANKS * REGIONS);

/// The virtual node of every rank, and the ranks per node plans are built for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nodes {
    /// `node[r]`: rank r's virtual node.
    pub node: Vec<u32>,
}

impl Nodes {
    /// Ranks per node when the nodes are equal runs of consecutive ranks (what the
    /// hierarchical builders need); `None` otherwise. One node: the rank count.
    pub fn ranks_per_node(&self) -> Option<u32> {
        let n = self.node.len() as u32;
        let mut distinct = self.node.clone();
        distinct.dedup();
        let k = distinct.len() as u32;
        if k <= 1 {
            return Some(n.max(1));
        }
        let mut sorted = distinct.clone();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() != distinct.len() || !n.is_multiple_of(k) {
            return None; // a node's ranks are not one run, or runs differ in size
        }
        let rpn = n / k;
        let equal_runs =
            (0..n as usize).all(|r| self.node[r] == self.node[r / rpn as usize * rpn as usize]);
        equal_runs.then_some(rpn)
    }

    /// The ranks on another node than `rank` (bit p: rank p).
    pub fn far_of(&self, rank: u32) -> u32 {
        let me = self.node[rank as usize];
        self.node
            .iter()
            .enumerate()
            .filter(|&(_, &x)| x != me)
            .fold(0, |m, (p, _)| m | (1 << p))
    }
}

/// The port channels of this rank's plans: the proxy, its ports and the kernels' table.
#[derive(Debug)]
pub struct PlanPorts {
    proxy: GpuProxy,
    table: DeviceBuffer,
    backend: String,
}

/// What the proxy thread owns.
struct Carrier {
    /// Whether a FLUSH trigger flushes the port. A FLUSH asks only that the sources
    /// of the puts before it may be written again (codegen: the kernels flush before
    /// anything may write this rank's memory, and at a block's end), and the proxy
    /// performs triggers in order. On host-tcp a `write` returns once it copied its
    /// source out (staged device memory too), so a FLUSH performed after it is already
    /// true there; its port flush would add a TCP round trip (the peer acknowledges
    /// applying every earlier frame). Other backends (cuda-dma: copies queued on a
    /// stream) flush.
    flush_ports: bool,
    ports: Vec<Option<Box<dyn DynPort>>>,
    locals: Vec<Box<dyn Region>>,
    remotes: Vec<Option<Box<dyn Any + Send + Sync>>>,
    /// Last value this rank made each far word (port, remote id, offset).
    written: HashMap<(u32, u32, u64), u64>,
}

fn port_to(
    ports: &mut [Option<Box<dyn DynPort>>],
    p: u32,
) -> commhal_hal::Result<&mut Box<dyn DynPort>> {
    ports
        .get_mut(p as usize)
        .and_then(Option::as_mut)
        .ok_or_else(|| {
            HalError::invalid(format!(
                "a plan trigger names rank {p}, which has no port (not a rank of another node)"
            ))
        })
}

fn remote(
    remotes: &[Option<Box<dyn Any + Send + Sync>>],
    id: u32,
) -> commhal_hal::Result<&(dyn Any + Send + Sync)> {
    remotes
        .get(id as usize)
        .and_then(Option::as_deref)
        .ok_or_else(|| {
            HalError::invalid(format!(
                "a plan trigger names remote region {id}, which was not imported"
            ))
        })
}

impl Carrier {
    fn perform(&mut self, t: &Trigger, raw: [u64; 2]) -> commhal_hal::Result<()> {
        let Carrier {
            flush_ports,
            ports,
            locals,
            remotes,
            written,
        } = self;
        let p = t.semaphore;
        if t.flags & FLAG_DATA != 0 {
            let src = locals.get(t.src_memory as usize).ok_or_else(|| {
                HalError::invalid(format!(
                    "a plan trigger names local region {}",
                    t.src_memory
                ))
            })?;
            let dst = remote(remotes, t.dst_memory)?;
            (**port_to(ports, p)?).write(dst, t.dst_offset, src.as_ref(), t.src_offset, t.size)?;
        }
        if t.flags & FLAG_SIGNAL != 0 {
            // the value rides in w0 (plan.h far_store)
            let value = raw[0];
            let key = (p, t.dst_memory, t.dst_offset);
            let last = written.get(&key).copied().unwrap_or(0);
            let dst = remote(remotes, t.dst_memory)?;
            (**port_to(ports, p)?).signal(dst, t.dst_offset, value.wrapping_sub(last))?;
            written.insert(key, value);
        }
        if t.flags & FLAG_FLUSH != 0 {
            let port = port_to(ports, p)?;
            if *flush_ports {
                (**port).flush()?;
            }
        }
        Ok(())
    }
}

impl PlanPorts {
    /// Collective setup (every rank, same `nodes`). `regions[k]`: this rank's input,
    /// output and plan area; `addrs[k][r]`: region k of rank r as this process
    /// addresses it; `endpoints[r]`: rank r's endpoint.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        boot: &dyn Bootstrap,
        ctx: &Arc<Context>,
        backend: (&str, &Arc<dyn DynPortMapped>),
        regions: [&dyn Region; REGIONS],
        addrs: [[u64; MAX_RANKS]; REGIONS],
        endpoints: &[Endpoint],
        nodes: &Nodes,
    ) -> Result<PlanPorts> {
        // The calls go to the trait object itself (`(**port)`): `Arc<dyn DynPortMapped>`
        // is a `DynPortMapped` too (through its `PortMapped` impl), whose handles box the
        // object's, which the object's own ports would refuse.
        let (name, port) = backend;
        let me = boot.rank();
        let far = nodes.far_of(me);
        let setup = |what: &str, e: HalError| {
            CollError::invalid(format!(
                "the plans' port channels to the other virtual nodes ({name}): {what}: {e}"
            ))
        };
        let mut locals = Vec::with_capacity(REGIONS);
        for r in regions {
            locals.push(
                (**port)
                    .register(r)
                    .map_err(|e| setup("registering a region", e))?,
            );
        }
        let fars: Vec<u32> = (0..boot.size()).filter(|p| far & (1 << p) != 0).collect();
        for &p in &fars {
            for (k, l) in locals.iter().enumerate() {
                let x = (**port)
                    .export(l.as_ref())
                    .map_err(|e| setup("exporting a region", e))?;
                send_export(boot, p, TAG_EXPORTS + k as u64, &x)?;
            }
        }
        let mut remotes: Vec<Option<Box<dyn Any + Send + Sync>>> =
            (0..REGIONS * MAX_RANKS).map(|_| None).collect();
        let mut ports: Vec<Option<Box<dyn DynPort>>> = (0..MAX_RANKS).map(|_| None).collect();
        for &p in &fars {
            for k in 0..REGIONS {
                let x = recv_export(boot, p, TAG_EXPORTS + k as u64)?;
                remotes[REGIONS * p as usize + k] = Some(
                    (**port)
                        .import(x)
                        .map_err(|e| setup("importing a region", e))?,
                );
            }
        }
        for &p in &fars {
            let pc = PeerContext {
                bootstrap: boot,
                local: &endpoints[me as usize],
                remote: &endpoints[p as usize],
                tag: TAG_CONNECT + u64::from(p.min(me)) * MAX_RANKS as u64 + u64::from(p.max(me)),
            };
            ports[p as usize] = Some((**port).connect(&pc).map_err(|e| setup("connecting", e))?);
        }
        let fifo = Arc::new(DeviceFifo::new(ctx, FIFO_DEPTH)?);
        let mut t = PortTable {
            fifo: fifo.ring_addr(),
            depth: fifo.depth(),
            head: fifo.head_addr(),
            tail: fifo.tail_addr(),
            ..PortTable::default()
        };
        for (k, r) in regions.iter().enumerate() {
            for (rank, &a) in addrs[k].iter().enumerate().take(boot.size() as usize) {
                t.base[rank][k] = a;
                t.len[rank][k] = if a == 0 { 0 } else { r.len() };
            }
        }
        let table = DeviceBuffer::new(ctx, std::mem::size_of::<PortTable>() as u64)?;
        table.write(0, table_bytes(&t))?;
        let mut carrier = Carrier {
            flush_ports: !commhal_backend_host_emu::tcp::write_reads_source((**port).name()),
            ports,
            locals,
            remotes,
            written: HashMap::new(),
        };
        let proxy = GpuProxy::start(fifo, Box::new(move |t, raw| carrier.perform(t, raw)))?;
        boot.barrier()?;
        Ok(PlanPorts {
            proxy,
            table,
            backend: name.to_string(),
        })
    }

    /// The port backend's name.
    pub fn backend(&self) -> &str {
        &self.backend
    }

    /// Device address of the kernels' table (`PlanArgs::ports`).
    pub fn table_addr(&self) -> u64 {
        self.table.addr()
    }

    /// The proxy's first error, naming the backend.
    pub fn error(&self) -> Option<String> {
        self.proxy
            .error()
            .map(|e| format!("{}: the plans' port proxy stopped: {e}", self.backend))
    }
}

fn table_bytes(t: &PortTable) -> &[u8] {
    // SAFETY: PortTable is #[repr(C)], made of u64 only (no padding), and the slice
    // borrows `t` for its lifetime.
    unsafe {
        std::slice::from_raw_parts(
            (t as *const PortTable).cast::<u8>(),
            std::mem::size_of::<PortTable>(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use commhal_hal::{Device, DeviceKind, MemoryKind};
    use std::sync::Mutex;

    /// A port that records what the proxy asked of it.
    #[derive(Debug, Default)]
    struct Recorder(Arc<Mutex<Vec<String>>>);

    impl DynPort for Recorder {
        fn write(
            &mut self,
            dst: &(dyn Any + Send + Sync),
            dst_off: u64,
            src: &dyn Region,
            src_off: u64,
            len: u64,
        ) -> commhal_hal::Result<()> {
            let d = dst.downcast_ref::<u32>().copied().unwrap_or(99);
            self.0.lock().unwrap().push(format!(
                "write remote{d}+{dst_off} <- local@{}+{src_off} {len}",
                src.addr()
            ));
            Ok(())
        }
        fn read(
            &mut self,
            _: &dyn Region,
            _: u64,
            _: &(dyn Any + Send + Sync),
            _: u64,
            _: u64,
        ) -> commhal_hal::Result<()> {
            unreachable!("plans never read over ports")
        }
        fn signal(
            &mut self,
            sem: &(dyn Any + Send + Sync),
            off: u64,
            add: u64,
        ) -> commhal_hal::Result<()> {
            let d = sem.downcast_ref::<u32>().copied().unwrap_or(99);
            self.0
                .lock()
                .unwrap()
                .push(format!("signal remote{d}+{off} add {add}"));
            Ok(())
        }
        fn flush(&mut self) -> commhal_hal::Result<()> {
            self.0.lock().unwrap().push("flush".into());
            Ok(())
        }
    }

    #[derive(Debug)]
    struct Fake(u64);

    impl Region for Fake {
        fn addr(&self) -> u64 {
            self.0
        }
        fn len(&self) -> u64 {
            1 << 20
        }
        fn device(&self) -> Device {
            Device {
                kind: DeviceKind::Cuda,
                ordinal: 0,
            }
        }
        fn kind(&self) -> MemoryKind {
            MemoryKind::Device
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    fn raw(t: Trigger) -> [u64; 2] {
        t.encode().unwrap()
    }

    #[test]
    fn the_carrier_writes_stores_values_and_flushes() {
        let log = Arc::new(Mutex::new(Vec::new()));
        // rank 0 talks to far rank 1: its remote regions are ids 3, 4, 5
        let mut c = Carrier {
            flush_ports: true,
            ports: vec![None, Some(Box::new(Recorder(log.clone())))],
            locals: (0..3u64)
                .map(|k| Box::new(Fake(0x1000 * (k + 1))) as Box<dyn Region>)
                .collect(),
            remotes: (0..6u32)
                .map(|id| (id >= 3).then(|| Box::new(id) as Box<dyn Any + Send + Sync>))
                .collect(),
            written: HashMap::new(),
        };
        // PUT from local output (1) into rank 1's area (remote 5), then FLUSH
        let put = Trigger::put(1, 5, 64, 1, 128, 4096);
        c.perform(&put, raw(put)).unwrap();
        let flush = Trigger::flush(1);
        c.perform(&flush, raw(flush)).unwrap();
        // SIGNAL stores (L << 32) | k: the value rides in w0 (len | src_offset << 32)
        let store = |v: u64| {
            let mut t = Trigger::signal(1);
            t.dst_memory = 5;
            t.dst_offset = 8 * 77;
            t.size = v & 0xffff_ffff;
            t.src_offset = v >> 32;
            t
        };
        for v in [(3u64 << 32) | 1, (3 << 32) | 2, (4 << 32) | 1] {
            let t = store(v);
            c.perform(&t, raw(t)).unwrap();
        }
        let got = log.lock().unwrap().clone();
        assert_eq!(
            got,
            vec![
                "write remote5+64 <- local@8192+128 4096".to_string(),
                "flush".to_string(),
                format!("signal remote5+616 add {}", (3u64 << 32) | 1),
                "signal remote5+616 add 1".to_string(),
                format!("signal remote5+616 add {}", (1u64 << 32) - 1),
            ]
        );
        // a rank without a port, a region never imported: errors, not panics
        let bad = Trigger::put(0, 5, 0, 0, 0, 8);
        assert!(c.perform(&bad, raw(bad)).is_err());
        let bad = Trigger::put(1, 2, 0, 0, 0, 8);
        assert!(c.perform(&bad, raw(bad)).is_err());
        // Where writes return with their source copied out (host-tcp), a FLUSH is done
        // once the proxy reached it: the port is not flushed; a rank without a port is
        // still an error.
        log.lock().unwrap().clear();
        c.flush_ports = false;
        c.perform(&put, raw(put)).unwrap();
        c.perform(&flush, raw(flush)).unwrap();
        assert_eq!(
            log.lock().unwrap().clone(),
            vec!["write remote5+64 <- local@8192+128 4096".to_string()]
        );
        let bad = Trigger::flush(0);
        assert!(c.perform(&bad, raw(bad)).is_err());
    }

    #[test]
    fn nodes_of_equal_consecutive_runs() {
        let n = |v: &[u32]| Nodes { node: v.to_vec() };
        assert_eq!(n(&[0, 0, 0, 0]).ranks_per_node(), Some(4));
        assert_eq!(n(&[0, 0, 1, 1]).ranks_per_node(), Some(2));
        assert_eq!(n(&[5, 5, 2, 2]).ranks_per_node(), Some(2));
        assert_eq!(n(&[0, 1, 0, 1]).ranks_per_node(), None);
        assert_eq!(n(&[0, 0, 0, 1]).ranks_per_node(), None);
        assert_eq!(n(&[0, 1, 2, 3]).ranks_per_node(), Some(1));
        assert_eq!(n(&[0, 0, 1, 1]).far_of(1), 0b1100);
        assert_eq!(n(&[0, 0, 1, 1]).far_of(2), 0b0011);
        assert_eq!(n(&[0, 0]).far_of(0), 0);
    }
}
