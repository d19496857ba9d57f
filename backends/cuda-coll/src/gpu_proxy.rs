//! The GPU proxy: a FIFO that device code pushes into (the protocol of
//! `device-src/include/commhal/handles.h`) and a host thread that drains it with a
//! port backend (cuda-dma). Used by the plans' port channels ([`crate::plan_ports`])
//! and the GPU conformance cases.
//!
//! Why not `commhal_channels::Fifo`/`ProxyService` as they are: that FIFO owns its ring
//! in ordinary host memory and its `head` is a host atomic, while device code needs the
//! ring and `tail` in pinned, device-mapped memory and claims slots with a device atomic
//! on `head`. So the ring lives here ([`DeviceFifo`]: ring + tail pinned, head in device
//! memory), and the thread ([`GpuProxy`]) performs each trigger with a handler:
//! [`GpuProxy::start_ports`] takes `commhal_channels::proxy::ProxyContext::perform` — the
//! channels crate's definition of what a trigger means (data → `write`, signal →
//! `signal(+1)`, flush → `flush`), generic over `P: PortMapped`; [`GpuProxy::start`]
//! any other (the plans' signals store a value, [`crate::plan_ports`]).
//!
//! Drain loop (per slot `seq`): poll `w1` (acquire) until its valid bit is set, read
//! `w0`, perform, store `w1 = 0`, then `tail = seq + 1` (release). A put (data only)
//! whose next slot is already valid is offered to the handler with it, and the two may
//! be performed as one (then both are cleared and the tail moves by two). FLUSH advances the
//! tail only after the port's flush returned. After a port error the proxy stops
//! advancing the tail: device pushes and flushes then time out (bounded) and the error
//! is reported by [`GpuProxy::stop`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long the drain thread spins after a trigger before it sleeps between polls: a
/// collective's triggers come in bursts, and a thread put to sleep wakes tens of
/// microseconds late (timer slack), which a port between nodes pays on every call.
const SPIN_WINDOW: Duration = Duration::from_millis(2);
/// The poll period once idle longer than [`SPIN_WINDOW`].
const IDLE_SLEEP: Duration = Duration::from_micros(20);

use commhal_channels::fifo::{FLAG_DATA, Trigger};
use commhal_channels::proxy::ProxyContext;
use commhal_cuda_rt::{Context, DeviceBuffer, PinnedHostBuffer};
use commhal_device_src::layout::Trigger as RawTrigger;
use commhal_hal::{HalError, PortMapped, Result};

/// A trigger as the proxy read it: decoded, and its two raw words (a handler may give
/// fields its own meaning).
#[derive(Debug, Clone, Copy)]
pub struct Slot {
    /// The decoded trigger.
    pub trigger: Trigger,
    /// Its words `w0`, `w1`.
    pub raw: [u64; 2],
}

/// What the proxy thread calls for each trigger: the slot, and for a put (data only)
/// the next slot where device code has already filled it (`fifo_push2` fills it
/// first). Returns whether it performed that next slot too.
pub type Handler = Box<dyn FnMut(&Slot, Option<&Slot>) -> Result<bool> + Send>;

/// The device-pushable FIFO: `depth` 16-byte slots and the tail in pinned memory, the
/// head counter in device memory.
#[derive(Debug)]
pub struct DeviceFifo {
    ring: PinnedHostBuffer,
    tail: PinnedHostBuffer,
    head: DeviceBuffer,
    depth: u64,
}

impl DeviceFifo {
    /// A zeroed FIFO of `depth` (> 0) slots.
    pub fn new(ctx: &Arc<Context>, depth: u64) -> Result<DeviceFifo> {
        if depth == 0 || depth > (1 << 20) {
            return Err(HalError::invalid(format!(
                "FIFO depth {depth} must be between 1 and 2^20"
            )));
        }
        Ok(DeviceFifo {
            ring: PinnedHostBuffer::new(ctx, depth * 16)?,
            tail: PinnedHostBuffer::new(ctx, 64)?,
            head: DeviceBuffer::new(ctx, 64)?,
            depth,
        })
    }
    /// Slots.
    pub fn depth(&self) -> u64 {
        self.depth
    }
    /// Device address of the ring (`PortChannelHandle::fifo`).
    pub fn ring_addr(&self) -> u64 {
        self.ring.device_addr()
    }
    /// Device address of the head counter.
    pub fn head_addr(&self) -> u64 {
        self.head.addr()
    }
    /// Device address of the tail counter.
    pub fn tail_addr(&self) -> u64 {
        self.tail.device_addr()
    }

    fn word(&self, seq: u64, w: usize) -> &AtomicU64 {
        let at = (seq % self.depth) as usize * 16 + w * 8;
        // SAFETY: `at + 8 <= depth * 16` (slot index < depth, w < 2); the pinned ring is
        // page-aligned and lives as long as `self`; device code accesses these words
        // only with 64-bit atomics, so viewing them as AtomicU64 is sound.
        unsafe { &*(self.ring.host_ptr().add(at) as *const AtomicU64) }
    }

    /// Slot `seq`, whose `w1` (valid) was just loaded with acquire.
    fn slot(&self, seq: u64, w1: u64) -> Slot {
        let w0 = self.word(seq, 0).load(Ordering::Relaxed);
        Slot {
            trigger: Trigger::decode([w0, w1]),
            raw: [w0, w1],
        }
    }

    fn tail_word(&self) -> &AtomicU64 {
        // SAFETY: the first 8 bytes of the 64-byte pinned tail buffer, page-aligned,
        // alive as long as `self`; the device reads it with 64-bit acquire loads.
        unsafe { &*(self.tail.host_ptr() as *const AtomicU64) }
    }
}

/// A running proxy thread.
#[derive(Debug)]
pub struct GpuProxy {
    fifo: Arc<DeviceFifo>,
    stop: Arc<AtomicBool>,
    error: Arc<Mutex<Option<String>>>,
    done: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl GpuProxy {
    /// Start draining `fifo` with `ctx` (the port(s), memories and semaphores that
    /// trigger ids refer to), each trigger performed the channels' standard way.
    pub fn start_ports<P>(fifo: Arc<DeviceFifo>, mut ctx: ProxyContext<P>) -> Result<GpuProxy>
    where
        P: PortMapped + 'static,
        ProxyContext<P>: Send,
    {
        GpuProxy::start(
            fifo,
            Box::new(move |s, _| ctx.perform(&s.trigger).map(|()| false)),
        )
    }

    /// Start draining `fifo`, each trigger performed by `handler`.
    pub fn start(fifo: Arc<DeviceFifo>, handler: Handler) -> Result<GpuProxy> {
        let stop = Arc::new(AtomicBool::new(false));
        let error = Arc::new(Mutex::new(None));
        let done = Arc::new(AtomicU64::new(0));
        let (f, s, e, d) = (fifo.clone(), stop.clone(), error.clone(), done.clone());
        let thread = std::thread::Builder::new()
            .name("commhal-gpu-proxy".into())
            .spawn(move || drain(f, handler, s, e, d))
            .map_err(|e| HalError::io("starting the GPU proxy thread", e))?;
        Ok(GpuProxy {
            fifo,
            stop,
            error,
            done,
            thread: Some(thread),
        })
    }

    /// Triggers completed so far.
    pub fn completed(&self) -> u64 {
        self.done.load(Ordering::Acquire)
    }

    /// The first port error, if any.
    pub fn error(&self) -> Option<String> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The FIFO.
    pub fn fifo(&self) -> &Arc<DeviceFifo> {
        &self.fifo
    }

    /// Stop after the triggers already pushed; returns the first port error.
    pub fn stop(mut self) -> Result<()> {
        self.halt();
        match self.error() {
            Some(e) => Err(HalError::backend("gpu-proxy", format!("proxy: {e}"))),
            None => Ok(()),
        }
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for GpuProxy {
    fn drop(&mut self) {
        self.halt();
    }
}

fn drain(
    fifo: Arc<DeviceFifo>,
    mut handler: Handler,
    stop: Arc<AtomicBool>,
    error: Arc<Mutex<Option<String>>>,
    done: Arc<AtomicU64>,
) {
    let mut seq = 0u64;
    let mut last = Instant::now();
    loop {
        // The stop flag is read before the slot, so a trigger written before `stop`
        // is still performed (same rule as the channels proxy).
        let stopping = stop.load(Ordering::Acquire);
        let w1 = fifo.word(seq, 1).load(Ordering::Acquire);
        if w1 & RawTrigger::VALID == 0 {
            if stopping {
                return;
            }
            if last.elapsed() < SPIN_WINDOW {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(IDLE_SLEEP);
            }
            continue;
        }
        last = Instant::now();
        let slot = fifo.slot(seq, w1);
        let next = (slot.trigger.flags == FLAG_DATA)
            .then(|| fifo.word(seq + 1, 1).load(Ordering::Acquire))
            .filter(|w| w & RawTrigger::VALID != 0)
            .map(|w| fifo.slot(seq + 1, w));
        let took_next = match handler(&slot, next.as_ref()) {
            Ok(took) => took && next.is_some(),
            Err(e) => {
                let t = slot.trigger;
                tracing::error!("GPU proxy: trigger {seq} ({t:?}) failed: {e}");
                *error.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(format!("trigger {seq} ({t:?}): {e}"));
                // Stop advancing: device code times out instead of trusting a failed op.
                return;
            }
        };
        for s in seq..=seq + u64::from(took_next) {
            fifo.word(s, 1).store(0, Ordering::Relaxed);
        }
        seq += 1 + u64::from(took_next);
        fifo.tail_word().store(seq, Ordering::Release);
        done.store(seq, Ordering::Release);
    }
}
