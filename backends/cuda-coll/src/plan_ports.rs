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
//! and every rank's windows as this process addresses them) goes to device memory.
//!
//! Triggers carry 32-bit offsets (the channels' trigger format), and the plan area
//! passes 4 GiB at 1 GiB messages, so a trigger's memory id names a *window* of a
//! region, at most 4 GiB long ([`windows`]; plan.h `PLAN_PORT_REGIONS`): the proxy adds
//! the window's offset in its region. Each region is still registered, exported and
//! imported whole, once.
//!
//! What a trigger means here (plan.h, "port channels"):
//!
//! | trigger | ids | done as |
//! |---|---|---|
//! | PUT | semaphore id = far rank p; local id k (this rank's window k); remote id 32p + k (p's window k) | `write` on the port to p, at the windows' offsets plus the trigger's |
//! | SIGNAL | semaphore id = p; remote id 32p + 2 (the start of p's plan area) or 32p + p's inbox window, `dst_offset` = the word; `w0` = the value | `signal` on the port to p with the difference to the value last written there, so the word becomes the value |
//! | FLUSH | semaphore id = p | `flush` on the port to p; nothing more on host-tcp, whose `write` returned once it had copied its source out |
//! | PUT, then SIGNAL to p in the next slot (plan.h `far_put_signal`, both stored before the proxy sees the first) | as above | one `write_signal` (host-tcp: one send) |
//!
//! Where the port backend copies a write's source out on the host (host-tcp), a small
//! put's source is first copied by the kernel into this rank's **outbox**, pinned host
//! memory registered with the backend as one more local window (`register_box`,
//! `COMMHAL_PLAN_OUTBOX`), so the proxy reads it with the CPU: a driver copy of device
//! memory took 12–15 µs per 512-byte put (H200), reading the outbox 0.2–1.2 µs.
//! Likewise each rank's **inbox** (`COMMHAL_PLAN_INBOX`), pinned host memory registered,
//! exported to the far ranks and named by one more window on every rank: launches the
//! plan and the inbox size allow (`PlanPorts::inbox_copy_units`) put their far data and
//! far semaphores there, which the port writes with plain copies on the receiving side.
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
use commhal_cuda_rt::{Context, DeviceBuffer, PinnedHostBuffer, PinnedRegion};
use commhal_hal::bootstrap::{Bootstrap, recv_export, send_export};
use commhal_hal::dynamic::{DynPort, DynPortMapped};
use commhal_hal::settings::gpu::{PLAN_INBOX, PLAN_OUTBOX};
use commhal_hal::transport::PeerContext;
use commhal_hal::{Endpoint, HalError, Region};

use crate::error::{CollError, Result};
use crate::gpu_proxy::{DeviceFifo, GpuProxy, Slot};
use crate::layout::MAX_RANKS;

/// Registered regions per rank: input, output, plan area.
pub const REGIONS: usize = 3;
/// The local region index of the inbox (pinned host memory, exported to the far ranks
/// after the three regions; plan.h `far_scr`).
const INBOX: usize = REGIONS;
/// The local region index of the outbox (pinned host memory, never exported).
const OUTBOX: usize = REGIONS + 1;
/// Regions per rank that far ranks import: the three and the inbox.
const EXPORTED: usize = REGIONS + 1;
/// The far semaphores at the inbox's start, a word per semaphore and sender (plan.h
/// `PLAN_INBOX_DATA`).
const INBOX_DATA: u64 = commhal_algorithms::codegen::MAX_SEMS as u64 * MAX_RANKS as u64 * 8;
/// How this process names a far rank's inbox in the table (rank p at `+ (p << 36)`):
/// an address no region of this process has; only the proxy's window lookup sees it.
const FAR_INBOX_NAME: u64 = 0xE000_0000_0000_0000;
/// Windows per rank a trigger can name (`PLAN_PORT_REGIONS`).
pub const WINDOWS: usize = 32;
/// Distance between the windows of a region past its first (`PLAN_PORT_WINDOW_STEP`);
/// a window spans two steps, the 4 GiB that a trigger's 32-bit offsets reach. Also the
/// largest put of one trigger (plan.h `far_put` splits larger ones).
pub const WINDOW_STEP: u64 = 1 << 31;
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
    /// Device address of this rank's outbox (plan.h `far_box`; 0: none).
    pub outbox: u64,
    /// Its bytes.
    pub outbox_len: u64,
    /// Device address of this rank's inbox (plan.h `far_scr`; 0: none).
    pub inbox: u64,
    /// Its bytes, the same on every rank.
    pub inbox_len: u64,
    /// The window of every rank's inbox.
    pub inbox_window: u64,
    /// Every rank's inbox as named here (0: none).
    pub inbox_base: [u64; MAX_RANKS],
    /// `base[r][k]`: window k of rank r as this process addresses it (0: none).
    pub base: [[u64; WINDOWS]; MAX_RANKS],
    /// Their lengths.
    pub len: [[u64; WINDOWS]; MAX_RANKS],
}

const _: () =
    assert!(std::mem::size_of::<PortTable>() == 72 + 8 * MAX_RANKS + 2 * 8 * MAX_RANKS * WINDOWS);
// remote ids (WINDOWS * rank + window) fit the trigger's 9 bits
const _: () = assert!(WINDOWS * MAX_RANKS <= 512);

impl PortTable {
    /// Set every rank's windows: `addrs[k][r]` is region k of rank r as this process
    /// addresses it (0: not reached); every rank's regions have the lengths `windows`
    /// were made for (the communicator's capacity and plan area agree on every rank).
    pub fn set_windows(&mut self, windows: &[Window], addrs: &[[u64; MAX_RANKS]; REGIONS]) {
        for (k, w) in windows.iter().enumerate() {
            for (rank, &a) in addrs[w.region].iter().enumerate() {
                if a != 0 {
                    self.base[rank][k] = a + w.off;
                    self.len[rank][k] = w.len;
                }
            }
        }
    }

    /// The window of `rank` holding `[addr, addr + n)` and the offset of `addr` in it,
    /// as plan.h `far_locate` finds them (the first such window).
    pub fn locate(&self, rank: u32, addr: u64, n: u64) -> Option<(u32, u64)> {
        let (base, len) = (&self.base[rank as usize], &self.len[rank as usize]);
        (0..WINDOWS)
            .find(|&k| base[k] != 0 && addr >= base[k] && addr + n <= base[k] + len[k])
            .map(|k| (k as u32, addr - base[k]))
    }
}

/// A window of a registered region: what a trigger's memory id names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The region (0 input, 1 output, 2 plan area).
    pub region: usize,
    /// Where the window starts in it.
    pub off: u64,
    /// Its bytes (at most `2 * WINDOW_STEP`).
    pub len: u64,
}

/// The windows of regions of `lens` bytes (plan.h, "port channels"): windows 0, 1, 2
/// start the regions, up to 4 GiB each; then, region by region, one more every
/// [`WINDOW_STEP`] until the region's end is covered. Neighbours overlap by one step, so
/// any range of up to a step inside a region lies whole in one window. Too many: an
/// error saying what to lower.
pub fn windows(lens: [u64; REGIONS]) -> std::result::Result<Vec<Window>, String> {
    let span = 2 * WINDOW_STEP;
    let mut w: Vec<Window> = (0..REGIONS)
        .map(|region| Window {
            region,
            off: 0,
            len: lens[region].min(span),
        })
        .collect();
    for (region, &len) in lens.iter().enumerate() {
        // the window before ends at off + WINDOW_STEP
        let mut off = WINDOW_STEP;
        while off + WINDOW_STEP < len {
            w.push(Window {
                region,
                off,
                len: (len - off).min(span),
            });
            off += WINDOW_STEP;
        }
    }
    if w.len() > WINDOWS {
        return Err(format!(
            "the input, output and plan area ({lens:?} bytes) need {} windows of 4 GiB \
             for the 32-bit offsets of port triggers, more than the {WINDOWS} a rank has: \
             lower COMMHAL_PLAN_SCRATCH or the communicator's capacity",
            w.len()
        ));
    }
    Ok(w)
}

/// [`PlanPorts::inbox_copy_units`] for inboxes of `inbox_len` bytes (0: none): the
/// distance between the two copies is fixed (half of what follows the semaphores), so
/// that a launch's copy never overlaps the other one, which the launch before, of any
/// size, may still be reading (as the plan area's copies, `plan_exec`).
fn inbox_copy_units(inbox_len: u64, copy: u64) -> Option<u32> {
    let stride = inbox_len.checked_sub(INBOX_DATA)? / 2 / 256 * 256;
    (copy <= stride)
        .then(|| u32::try_from(stride >> 8).ok())
        .flatten()
}

/// A host box's memory and its registration with the port backend.
type HostBox = (Arc<PinnedHostBuffer>, Box<dyn Region>);

/// Pinned, device-mapped host memory of `setting`'s bytes, registered with the port
/// backend: this rank's outbox (`COMMHAL_PLAN_OUTBOX`: the kernels copy a put's source
/// into it before its trigger, plan.h `far_send`) or inbox (`COMMHAL_PLAN_INBOX`: the
/// port writes far data and signals into it, plan.h `far_scr`). Only where the backend
/// moves a write's bytes on the host (`write_copies_source`: host-tcp), which then
/// reads and writes them with the CPU instead of a driver copy of device memory: 12–15
/// µs for each 512-byte put's source, 3–5 µs for queueing each arriving write and 2–4
/// µs for each flag store (H200). `None` where the setting is 0 or the backend does not
/// take host memory.
fn register_box(
    ctx: &Arc<Context>,
    port: &Arc<dyn DynPortMapped>,
    setting: &commhal_hal::settings::Setting,
) -> Result<Option<HostBox>> {
    // A bad value turns this box off (with a warning) rather than failing here: the
    // other ranks are about to agree on the inbox collectively.
    let bytes = setting.number_or_default().unwrap_or_else(|e| {
        tracing::warn!("{e}: the plans go without it");
        0
    });
    if bytes == 0 || !(**port).guarantees().write_copies_source {
        return Ok(None);
    }
    let registered = PinnedHostBuffer::new(ctx, bytes)
        .map_err(|e| format!("{bytes} bytes of pinned memory: {e}"))
        .and_then(|buf| {
            let buf = Arc::new(buf);
            (**port)
                .register(&PinnedRegion(buf.clone()))
                .map(|local| (buf, local))
                .map_err(|e| format!("{} does not register host memory: {e}", (**port).name()))
        });
    Ok(registered
        .inspect_err(|e| tracing::debug!("{}: {e}; the plans go without it", setting.env))
        .ok())
}

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
    /// Bytes of every rank's inbox (0: none).
    inbox_len: u64,
    /// Bytes of this rank's outbox (0: none).
    outbox_len: u64,
    /// The outbox and the inbox the table names ([`register_box`]).
    _boxes: [Option<Arc<PinnedHostBuffer>>; 2],
}

/// What the proxy thread owns.
struct Carrier {
    /// Whether a FLUSH trigger flushes the port. A FLUSH asks only that the sources
    /// of the puts before it may be written again (codegen: the kernels flush before
    /// anything may write this rank's memory, and at a block's end), and the proxy
    /// performs triggers in order. Where the port backend claims
    /// `write_copies_source` (host-tcp: staged device memory is copied out before
    /// `write` returns), a FLUSH performed after the writes is already true; its port
    /// flush would add a round trip (host-tcp: the peer acknowledges applying every
    /// earlier frame). Other backends (cuda-dma: copies queued on a stream) flush.
    flush_ports: bool,
    ports: Vec<Option<Box<dyn DynPort>>>,
    /// This rank's registered regions: input, output, plan area, inbox, outbox.
    locals: Vec<Option<Box<dyn Region>>>,
    /// `remotes[EXPORTED * p + k]`: rank p's region k (or its inbox), imported.
    remotes: Vec<Option<Box<dyn Any + Send + Sync>>>,
    /// What the memory ids name, the same on every rank.
    windows: Vec<Window>,
    /// Last value this rank made each far word (port, remote id, offset).
    written: Written,
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

/// The region and offset that `[off, off + len)` of window `k` is: `(region, offset
/// in it)`; an error when there is no window `k` or the range passes its end.
fn in_window(windows: &[Window], k: u32, off: u64, len: u64) -> commhal_hal::Result<(usize, u64)> {
    let w = windows.get(k as usize).ok_or_else(|| {
        HalError::invalid(format!(
            "a plan trigger names window {k}, which does not exist"
        ))
    })?;
    if off.checked_add(len).is_none_or(|end| end > w.len) {
        return Err(HalError::invalid(format!(
            "a plan trigger's {len} bytes at {off} pass the end of window {k} ({} bytes)",
            w.len
        )));
    }
    Ok((w.region, w.off + off))
}

/// The local region and offset of a trigger's source.
fn source<'a>(
    locals: &'a [Option<Box<dyn Region>>],
    windows: &[Window],
    t: &Trigger,
) -> commhal_hal::Result<(&'a dyn Region, u64)> {
    let (k, off) = in_window(windows, t.src_memory, t.src_offset, t.size)?;
    let r = locals.get(k).and_then(Option::as_ref).ok_or_else(|| {
        HalError::invalid(format!(
            "a plan trigger names local region {k}, which is not registered"
        ))
    })?;
    Ok((r.as_ref(), off))
}

/// The imported region and offset of `len` bytes at a trigger's destination: remote
/// id `WINDOWS * p + k` is rank p's window k, and p must be the trigger's port.
fn destination<'a>(
    remotes: &'a [Option<Box<dyn Any + Send + Sync>>],
    windows: &[Window],
    t: &Trigger,
    len: u64,
) -> commhal_hal::Result<(&'a (dyn Any + Send + Sync), u64)> {
    let (p, k) = (t.dst_memory / WINDOWS as u32, t.dst_memory % WINDOWS as u32);
    if p != t.semaphore {
        return Err(HalError::invalid(format!(
            "a plan trigger on the port to rank {} names rank {p}'s memory (id {})",
            t.semaphore, t.dst_memory
        )));
    }
    let (region, off) = in_window(windows, k, t.dst_offset, len)?;
    if region >= EXPORTED {
        return Err(HalError::invalid(format!(
            "a plan trigger names rank {p}'s window {k}, which is local only (the outbox)"
        )));
    }
    let r = remotes
        .get(EXPORTED * p as usize + region)
        .and_then(Option::as_deref)
        .ok_or_else(|| {
            HalError::invalid(format!(
                "a plan trigger names rank {p}'s region {region}, which was not imported"
            ))
        })?;
    Ok((r, off))
}

/// The value this rank last made each far word (port, remote id, offset), which it
/// alone writes (plan.h `far_sem`: a word per sender).
#[derive(Debug, Default)]
struct Written(HashMap<(u32, u32, u64), u64>);

impl Written {
    /// What a signal adds to the word SIGNAL trigger `s` names so that it becomes `value`.
    fn add(&self, s: &Trigger, value: u64) -> u64 {
        let last = self.0.get(&(s.semaphore, s.dst_memory, s.dst_offset));
        value.wrapping_sub(last.copied().unwrap_or(0))
    }
    /// Record that the word became `value`.
    fn set(&mut self, s: &Trigger, value: u64) {
        self.0
            .insert((s.semaphore, s.dst_memory, s.dst_offset), value);
    }
}

impl Carrier {
    /// Perform `slot`; where it is a put and `next` a signal to the same rank (plan.h
    /// `far_put_signal`), both as one `write_signal` (host-tcp: one send). Returns
    /// whether it performed `next`.
    fn perform_slot(&mut self, slot: &Slot, next: Option<&Slot>) -> commhal_hal::Result<bool> {
        let t = &slot.trigger;
        match next {
            Some(n)
                if t.flags == FLAG_DATA
                    && n.trigger.flags == FLAG_SIGNAL
                    && n.trigger.semaphore == t.semaphore =>
            {
                self.put_signal(t, &n.trigger, n.raw[0])?;
                Ok(true)
            }
            _ => self.perform(t, slot.raw).map(|()| false),
        }
    }

    /// A put and a signal to its rank (`value` rides in the signal's `w0`).
    fn put_signal(&mut self, t: &Trigger, s: &Trigger, value: u64) -> commhal_hal::Result<()> {
        let Carrier {
            ports,
            locals,
            remotes,
            windows,
            written,
            ..
        } = self;
        let p = t.semaphore;
        let (src, src_off) = source(locals, windows, t)?;
        let (dst, dst_off) = destination(remotes, windows, t, t.size)?;
        let (sem, off) = destination(remotes, windows, s, 8)?;
        let add = written.add(s, value);
        (**port_to(ports, p)?).write_signal(dst, dst_off, src, src_off, t.size, (sem, off, add))?;
        written.set(s, value);
        Ok(())
    }

    fn perform(&mut self, t: &Trigger, raw: [u64; 2]) -> commhal_hal::Result<()> {
        let Carrier {
            flush_ports,
            ports,
            locals,
            remotes,
            windows,
            written,
        } = self;
        let p = t.semaphore;
        if t.flags & FLAG_DATA != 0 {
            let (src, src_off) = source(locals, windows, t)?;
            let (dst, dst_off) = destination(remotes, windows, t, t.size)?;
            (**port_to(ports, p)?).write(dst, dst_off, src, src_off, t.size)?;
        }
        if t.flags & FLAG_SIGNAL != 0 {
            // the value rides in w0 (plan.h far_store)
            let value = raw[0];
            let (dst, off) = destination(remotes, windows, t, 8)?;
            let add = written.add(t, value);
            (**port_to(ports, p)?).signal(dst, off, add)?;
            written.set(t, value);
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
    /// output and plan area, of the same lengths on every rank; `addrs[k][r]`: region k
    /// of rank r as this process addresses it; `endpoints[r]`: rank r's endpoint.
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
        let mut windows = windows(regions.map(|r| r.len()))
            .map_err(|e| CollError::invalid(format!("the plans' port channels ({name}): {e}")))?;
        let mut locals: Vec<Option<Box<dyn Region>>> = Vec::with_capacity(OUTBOX + 1);
        for r in regions {
            locals.push(Some(
                (**port)
                    .register(r)
                    .map_err(|e| setup("registering a region", e))?,
            ));
        }
        // the host boxes need a window each; the window count is the same on every rank
        let mut room = WINDOWS - windows.len();
        let mut inbox = if room > 0 {
            register_box(ctx, port, &PLAN_INBOX)?
        } else {
            None
        };
        // a launch writes into the far ranks' inboxes: every rank needs one, and uses
        // the smallest
        let mine = inbox.as_ref().map_or(0, |(b, _)| b.len());
        let inbox_len = boot
            .all_gather(&mine.to_le_bytes())?
            .iter()
            .map(|b| b.as_slice().try_into().map_or(0, u64::from_le_bytes))
            .min()
            .unwrap_or(0);
        if inbox_len == 0 {
            inbox = None;
        } else {
            room -= 1;
        }
        let outbox = if room > 0 {
            register_box(ctx, port, &PLAN_OUTBOX)?
        } else {
            None
        };
        let (inbox_buf, inbox_local) = inbox.map_or((None, None), |(b, l)| (Some(b), Some(l)));
        let (outbox_buf, outbox_local) = outbox.map_or((None, None), |(b, l)| (Some(b), Some(l)));
        locals.push(inbox_local);
        locals.push(outbox_local);
        let fars: Vec<u32> = (0..boot.size()).filter(|p| far & (1 << p) != 0).collect();
        let exported = if inbox_buf.is_some() {
            EXPORTED
        } else {
            REGIONS
        };
        for &p in &fars {
            for (k, l) in locals[..exported].iter().enumerate() {
                let l = l.as_ref().expect("the exported regions are registered");
                let x = (**port)
                    .export(l.as_ref())
                    .map_err(|e| setup("exporting a region", e))?;
                send_export(boot, p, TAG_EXPORTS + k as u64, &x)?;
            }
        }
        let mut remotes: Vec<Option<Box<dyn Any + Send + Sync>>> =
            (0..EXPORTED * MAX_RANKS).map(|_| None).collect();
        let mut ports: Vec<Option<Box<dyn DynPort>>> = (0..MAX_RANKS).map(|_| None).collect();
        for &p in &fars {
            for k in 0..exported {
                let x = recv_export(boot, p, TAG_EXPORTS + k as u64)?;
                remotes[EXPORTED * p as usize + k] = Some(
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
        t.set_windows(&windows, &addrs);
        if let Some(b) = &inbox_buf {
            let k = windows.len();
            windows.push(Window {
                region: INBOX,
                off: 0,
                len: inbox_len,
            });
            (t.inbox, t.inbox_len, t.inbox_window) = (b.device_addr(), inbox_len, k as u64);
            t.inbox_base[me as usize] = t.inbox;
            for &p in &fars {
                t.inbox_base[p as usize] = FAR_INBOX_NAME + (u64::from(p) << 36);
            }
            for r in 0..MAX_RANKS {
                if t.inbox_base[r] != 0 {
                    (t.base[r][k], t.len[r][k]) = (t.inbox_base[r], inbox_len);
                }
            }
        }
        if let Some(b) = &outbox_buf {
            let k = windows.len();
            windows.push(Window {
                region: OUTBOX,
                off: 0,
                len: b.len(),
            });
            (t.outbox, t.outbox_len) = (b.device_addr(), b.len());
            (t.base[me as usize][k], t.len[me as usize][k]) = (t.outbox, t.outbox_len);
        }
        let table = DeviceBuffer::new(ctx, std::mem::size_of::<PortTable>() as u64)?;
        table.write(0, table_bytes(&t))?;
        let mut carrier = Carrier {
            flush_ports: !(**port).guarantees().write_copies_source,
            ports,
            locals,
            remotes,
            windows,
            written: Written::default(),
        };
        let proxy = GpuProxy::start(fifo, Box::new(move |s, n| carrier.perform_slot(s, n)))?;
        boot.barrier()?;
        Ok(PlanPorts {
            proxy,
            table,
            backend: name.to_string(),
            inbox_len: t.inbox_len,
            outbox_len: t.outbox_len,
            _boxes: [outbox_buf, inbox_buf],
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

    /// `PlanArgs::inbox_copy` (bytes / 256 between the inbox's two copies) for a launch
    /// whose far scratch copy is `copy` bytes, where every rank's inbox holds it (plan.h
    /// `far_scr`); `None` where the launch has to use the plan area.
    pub fn inbox_copy_units(&self, copy: u64) -> Option<u32> {
        inbox_copy_units(self.inbox_len, copy)
    }

    /// Bytes of a plan block's share of the outbox half a launch of `blocks` plan
    /// blocks uses (plan.h `far_box_share`); 0: its puts go from their sources, which
    /// must then be registered with the port backend.
    pub fn outbox_share(&self, blocks: u32) -> u64 {
        outbox_share(self.outbox_len, blocks)
    }

    /// The proxy's first error, naming the backend.
    pub fn error(&self) -> Option<String> {
        self.proxy
            .error()
            .map(|e| format!("{}: the plans' port proxy stopped: {e}", self.backend))
    }
}

/// plan.h `far_box_share`: an outbox of `len` bytes in two halves (by launch parity),
/// each split among `blocks` plan blocks in multiples of 256 bytes; shares below 1 KiB
/// count as none.
fn outbox_share(len: u64, blocks: u32) -> u64 {
    let share = (len / 2 / 256 * 256) / u64::from(blocks.max(1)) / 256 * 256;
    if share < 1024 { 0 } else { share }
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
    use crate::plan_exec;
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
        fn write_signal(
            &mut self,
            dst: &(dyn Any + Send + Sync),
            dst_off: u64,
            src: &dyn Region,
            src_off: u64,
            len: u64,
            signal: (&(dyn Any + Send + Sync), u64, u64),
        ) -> commhal_hal::Result<()> {
            self.write(dst, dst_off, src, src_off, len)?;
            self.signal(signal.0, signal.1, signal.2)?;
            self.0.lock().unwrap().push("(one send)".into());
            Ok(())
        }
        fn flush(&mut self) -> commhal_hal::Result<()> {
            self.0.lock().unwrap().push("flush".into());
            Ok(())
        }
    }

    /// A region at an address, of a length.
    #[derive(Debug)]
    struct Fake(u64, u64);

    impl Region for Fake {
        fn addr(&self) -> u64 {
            self.0
        }
        fn len(&self) -> u64 {
            self.1
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

    /// Rank 0's carrier to far rank 1, regions of `lens` bytes at 0x1000, 0x2000, 0x3000
    /// (past the first 4 GiB they overlap: only offsets matter), no inbox or outbox;
    /// rank 1's imported regions are recorded as 4, 5, 6 (`EXPORTED * 1 + k`).
    fn carrier(log: &Arc<Mutex<Vec<String>>>, lens: [u64; REGIONS]) -> Carrier {
        Carrier {
            flush_ports: true,
            ports: vec![None, Some(Box::new(Recorder(log.clone())))],
            locals: (0..3)
                .map(|k| Some(Box::new(Fake(0x1000 * (k as u64 + 1), lens[k])) as Box<dyn Region>))
                .chain([None, None])
                .collect(),
            remotes: (0..2 * EXPORTED as u32)
                .map(|id| {
                    (4..7)
                        .contains(&id)
                        .then(|| Box::new(id) as Box<dyn Any + Send + Sync>)
                })
                .collect(),
            windows: windows(lens).unwrap(),
            written: Written::default(),
        }
    }

    #[test]
    fn the_carrier_writes_stores_values_and_flushes() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut c = carrier(&log, [1 << 20; REGIONS]);
        // PUT from local output (window 1) into rank 1's area (remote id 32 + 2 = 34),
        // then FLUSH
        let put = Trigger::put(1, 34, 64, 1, 128, 4096);
        c.perform(&put, raw(put)).unwrap();
        let flush = Trigger::flush(1);
        c.perform(&flush, raw(flush)).unwrap();
        // SIGNAL stores (L << 32) | k: the value rides in w0 (len | src_offset << 32)
        let store = |v: u64| {
            let mut t = Trigger::signal(1);
            t.dst_memory = 34;
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
                "write remote6+64 <- local@8192+128 4096".to_string(),
                "flush".to_string(),
                format!("signal remote6+616 add {}", (3u64 << 32) | 1),
                "signal remote6+616 add 1".to_string(),
                format!("signal remote6+616 add {}", (1u64 << 32) - 1),
            ]
        );
        // a rank without a port, another rank's memory, a window that does not exist, a
        // range past a window's end: errors, not panics
        for bad in [
            Trigger::put(0, 2, 0, 0, 0, 8),
            Trigger::put(1, 2, 0, 0, 0, 8),
            Trigger::put(1, 34 + 3, 0, 0, 0, 8),
            Trigger::put(1, 34, (1 << 20) - 4, 0, 0, 8),
            Trigger::put(1, 34, 0, 0, 1 << 20, 8),
        ] {
            assert!(c.perform(&bad, raw(bad)).is_err(), "{bad:?}");
        }
        // Where writes return with their source copied out (`write_copies_source`:
        // host-tcp), a FLUSH is done once the proxy reached it: the port is not
        // flushed; a rank without a port is still an error.
        log.lock().unwrap().clear();
        c.flush_ports = false;
        c.perform(&put, raw(put)).unwrap();
        c.perform(&flush, raw(flush)).unwrap();
        assert_eq!(
            log.lock().unwrap().clone(),
            vec!["write remote6+64 <- local@8192+128 4096".to_string()]
        );
        let bad = Trigger::flush(0);
        assert!(c.perform(&bad, raw(bad)).is_err());
    }

    #[test]
    fn a_put_and_its_signal_in_the_next_slot_go_as_one_write() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut c = carrier(&log, [1 << 20; REGIONS]);
        let slot = |t: Trigger| Slot {
            trigger: t,
            raw: raw(t),
        };
        let put = slot(Trigger::put(1, 34, 64, 1, 128, 4096));
        let mut sig = Trigger::signal(1);
        sig.dst_memory = 34;
        sig.dst_offset = 8 * 77;
        sig.src_offset = 3;
        sig.size = 1;
        let sig = slot(sig);
        // the signal's value rides in w0: (3 << 32) | 1
        assert!(c.perform_slot(&put, Some(&sig)).unwrap());
        assert!(c.perform_slot(&put, Some(&sig)).unwrap());
        // not merged: nothing next, a flush next, a signal to another rank, a lone signal
        assert!(!c.perform_slot(&put, None).unwrap());
        assert!(
            !c.perform_slot(&put, Some(&slot(Trigger::flush(1))))
                .unwrap()
        );
        let mut other = sig;
        other.trigger.semaphore = 0;
        assert!(!c.perform_slot(&put, Some(&other)).unwrap());
        assert!(!c.perform_slot(&sig, Some(&sig)).unwrap());
        let write = "write remote6+64 <- local@8192+128 4096".to_string();
        assert_eq!(
            log.lock().unwrap().clone(),
            vec![
                write.clone(),
                format!("signal remote6+616 add {}", (3u64 << 32) | 1),
                "(one send)".into(),
                write.clone(),
                // the same value again: the word already holds it
                "signal remote6+616 add 0".into(),
                "(one send)".into(),
                // each alone; the slot after it is performed on its own turn
                write.clone(),
                write.clone(),
                write,
                "signal remote6+616 add 0".into(),
            ]
        );
    }

    #[test]
    fn an_inbox_takes_a_launch_whose_copy_fits_half_of_it_behind_the_semaphores() {
        let mib = 1 << 20;
        // 256 KiB of semaphores, then two copies of (16 MiB - 256 KiB) / 2 whatever the
        // launch's size
        let stride = (16 * mib - INBOX_DATA) / 2;
        assert_eq!(INBOX_DATA, 256 << 10);
        let units = Some((stride >> 8) as u32);
        for copy in [0, 1000, stride] {
            assert_eq!(inbox_copy_units(16 * mib, copy), units);
        }
        assert_eq!(inbox_copy_units(16 * mib, stride + 1), None);
        assert_eq!(inbox_copy_units(0, 0), None);
        assert_eq!(inbox_copy_units(INBOX_DATA - 8, 0), None);
        assert_eq!(inbox_copy_units(u64::MAX, 8), None, "more than u32 units");
    }

    const GIB: u64 = 1 << 30;

    /// A table of ranks 0 and 1, their regions of `lens` bytes at `(rank + 1) << 44`,
    /// `+ (k << 40)` for region k.
    fn table(lens: [u64; REGIONS]) -> PortTable {
        let mut addrs = [[0; MAX_RANKS]; REGIONS];
        for (k, a) in addrs.iter_mut().enumerate() {
            a[0] = (1 << 44) + ((k as u64) << 40);
            a[1] = (2 << 44) + ((k as u64) << 40);
        }
        let mut t = PortTable::default();
        t.set_windows(&windows(lens).unwrap(), &addrs);
        t
    }

    /// The triggers plan.h `far_put` pushes for `n` bytes from rank 0's `src` into
    /// rank `peer`'s `dst`: pieces of at most a step, each end named by its window.
    fn far_put(t: &PortTable, peer: u32, dst: u64, src: u64, n: u64) -> Vec<Trigger> {
        let mut out = Vec::new();
        let mut done = 0;
        while done < n {
            let piece = (n - done).min(WINDOW_STEP);
            let (sk, so) = t.locate(0, src + done, piece).expect("source in a window");
            let (dk, dof) = t
                .locate(peer, dst + done, piece)
                .expect("destination in a window");
            out.push(Trigger::put(
                peer,
                WINDOWS as u32 * peer + dk,
                dof,
                sk,
                so,
                piece,
            ));
            done += piece;
        }
        out
    }

    #[test]
    fn outbox_shares_split_a_half_in_256_byte_multiples() {
        let mib = 1 << 20;
        assert_eq!(outbox_share(8 * mib, 1), 4 * mib);
        assert_eq!(outbox_share(8 * mib, 3), 4 * mib / 3 / 256 * 256);
        assert_eq!(outbox_share(8 * mib, 508), 8192);
        // too small a share is none: the puts then go from registered sources
        assert_eq!(outbox_share(4096, 2), 1024);
        assert_eq!(outbox_share(4096, 3), 0);
        assert_eq!(outbox_share(0, 1), 0);
    }

    #[test]
    fn windows_reach_every_range_of_regions_past_4_gib() {
        let w = |region, off, len| Window { region, off, len };
        // up to 4 GiB: one window each
        assert_eq!(
            windows([GIB, 4 * GIB, 0]).unwrap(),
            vec![w(0, 0, GIB), w(1, 0, 4 * GIB), w(2, 0, 0)]
        );
        // 11 GiB of plan area: windows at 0, 2, 4, 6 and 8 GiB, 4 GiB long but the last
        let area = 11 * GIB;
        assert_eq!(
            windows([GIB, GIB, area]).unwrap(),
            vec![
                w(0, 0, GIB),
                w(1, 0, GIB),
                w(2, 0, 4 * GIB),
                w(2, 2 * GIB, 4 * GIB),
                w(2, 4 * GIB, 4 * GIB),
                w(2, 6 * GIB, 4 * GIB),
                w(2, 8 * GIB, 3 * GIB),
            ]
        );
        // every range of up to a step lies in a window, at an offset below 4 GiB
        let t = table([GIB, GIB, area]);
        let base = t.base[1][2];
        for off in (0..area).step_by((GIB / 4 + 3) as usize) {
            for n in [1, 4096, GIB, WINDOW_STEP] {
                if off + n <= area {
                    let (k, o) = t
                        .locate(1, base + off, n)
                        .unwrap_or_else(|| panic!("{off}+{n}"));
                    assert!(k >= 2 && o + n <= 4 * GIB && t.base[1][k as usize] + o == base + off);
                }
            }
        }
        assert_eq!(
            t.locate(1, base + area - 8, 16),
            None,
            "past the region's end"
        );
        // more windows than a rank has: what to lower
        let e = windows([GIB, GIB, 80 * GIB]).unwrap_err();
        assert!(e.contains("COMMHAL_PLAN_SCRATCH"), "{e}");
    }

    #[test]
    fn puts_past_4_gib_of_the_plan_area_go_through_windows() {
        // two 5.5 GiB scratch copies after the flags: the second copy starts past 4 GiB
        let copy = 5 * GIB + GIB / 2;
        let lens = [GIB, GIB, plan_exec::DATA_OFF + 2 * copy];
        let t = table(lens);
        let (out0, area0, area1) = (t.base[0][1], t.base[0][2], t.base[1][2]);
        let copy1 = area1 + plan_exec::DATA_OFF + copy;
        // 1 GiB of output into rank 1's second copy, 256 MiB in; then 5 GiB of rank 0's
        // first copy into rank 1's second: pieces of 2, 2 and 1 GiB
        let mut triggers = far_put(&t, 1, copy1 + GIB / 4, out0, GIB);
        triggers.extend(far_put(&t, 1, copy1, area0 + plan_exec::DATA_OFF, 5 * GIB));
        let ids: Vec<(u32, u32)> = triggers
            .iter()
            .map(|t| (t.src_memory, t.dst_memory))
            .collect();
        assert_eq!(ids, vec![(1, 36), (2, 36), (3, 37), (3, 38)]);
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut c = carrier(&log, lens);
        for put in &triggers {
            // through the 16 bytes of the FIFO: 32-bit offsets and lengths
            let w = raw(*put);
            assert_eq!(Trigger::decode(w), *put);
            c.perform(&Trigger::decode(w), w).unwrap();
        }
        let d = plan_exec::DATA_OFF;
        let write =
            |dst: u64, src: String, n: u64| format!("write remote6+{dst} <- local@{src} {n}");
        let mut want = vec![write(d + copy + GIB / 4, "8192+0".into(), GIB)];
        for (i, n) in [2 * GIB, 2 * GIB, GIB].into_iter().enumerate() {
            let at = i as u64 * 2 * GIB;
            want.push(write(d + copy + at, format!("12288+{}", d + at), n));
        }
        assert_eq!(log.lock().unwrap().clone(), want);
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
