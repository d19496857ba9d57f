//! The proxy service: a host thread that drains the FIFO and performs each trigger on a
//! port (generic over `P: PortMapped`, so the hot loop monomorphises).
//!
//! Setup happens on a [`ProxyBuilder`]: add ports, local and remote memories and
//! semaphores (each gets a small id that triggers carry), make channels, then
//! [`ProxyBuilder::start`] (or [`ProxyBuilder::start_with`] a custom
//! [`TriggerHandler`]). The FIFO exists from the builder on, so triggers pushed
//! before the start wait in the ring.
//!
//! **Errors.** The first error a handler returns is stored and sets the FIFO's error
//! bit; later pushes and flushes fail, and [`ProxyShared::error`] returns the stored
//! message. The proxy keeps draining (dropping) triggers after an error so that no
//! producer is left waiting.
//!
//! **Stop.** Dropping the [`ProxyService`] (or [`ProxyService::stop`]) sets the stop bit
//! and joins the thread after it has performed the triggers already in the FIFO;
//! later pushes fail.

use std::marker::PhantomData;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;

use commhal_hal::{HalError, Port, PortMapped, Result};

use crate::fifo::{Fifo, MAX_MEMORIES, MAX_SEMAPHORES, STATUS_ERROR, STATUS_STOPPED, Trigger};
use crate::wait::WaitPolicy;

/// Index of a port in the proxy.
pub type PortId = u32;
/// Index of a local or remote memory in the proxy (separate id spaces).
pub type MemoryId = u32;
/// Index of a proxy semaphore.
pub type SemaphoreId = u32;

/// Default FIFO depth.
pub const DEFAULT_FIFO_DEPTH: u64 = 512;

/// A proxy semaphore ("host-to-device" semaphore): the port to use and the peer's
/// semaphore counter (a remote memory id and the counter's byte offset in it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxySemaphore {
    /// Which port (connection) carries this semaphore's triggers.
    pub port: PortId,
    /// Remote memory holding the peer's counter.
    pub remote: MemoryId,
    /// Byte offset of the peer's counter in that memory (8-byte aligned).
    pub offset: u64,
}

/// Everything a trigger handler may touch, owned by the proxy thread.
#[derive(Debug)]
pub struct ProxyContext<P: PortMapped> {
    /// Ports by [`PortId`].
    pub ports: Vec<P::Port>,
    /// Local memories by [`MemoryId`].
    pub locals: Vec<P::Local>,
    /// Remote memories by [`MemoryId`].
    pub remotes: Vec<P::Remote>,
    /// Semaphores by [`SemaphoreId`].
    pub semaphores: Vec<ProxySemaphore>,
}

fn lookup<'a, T>(v: &'a [T], id: u32, what: &str) -> Result<&'a T> {
    v.get(id as usize).ok_or_else(|| {
        HalError::invalid(format!(
            "trigger names {what} id {id} but the proxy has {}: register it on the ProxyBuilder",
            v.len()
        ))
    })
}

impl<P: PortMapped> ProxyContext<P> {
    /// Perform a trigger the standard way: DATA → `write`, SIGNAL → `signal(+1)`,
    /// FLUSH → `flush`, in that order, on the semaphore's port.
    pub fn perform(&mut self, t: &Trigger) -> Result<()> {
        let sem = *lookup(&self.semaphores, t.semaphore, "semaphore")?;
        let port = self.ports.get_mut(sem.port as usize).ok_or_else(|| {
            HalError::invalid(format!(
                "semaphore {} names port {} which does not exist",
                t.semaphore, sem.port
            ))
        })?;
        if t.has_data() && t.size > 0 {
            let dst = lookup(&self.remotes, t.dst_memory, "destination memory")?;
            let src = lookup(&self.locals, t.src_memory, "source memory")?;
            port.write(dst, t.dst_offset, src, t.src_offset, t.size)?;
        }
        if t.has_signal() {
            let remote = lookup(&self.remotes, sem.remote, "semaphore memory")?;
            port.signal(remote, sem.offset, 1)?;
        }
        if t.has_flush() {
            port.flush()?;
        }
        Ok(())
    }
}

/// What the proxy does with each trigger. Install your own with
/// [`ProxyBuilder::start_with`]; [`DefaultHandler`] calls [`ProxyContext::perform`].
pub trait TriggerHandler<P: PortMapped>: Send + 'static {
    /// Perform one trigger. An error is stored as the proxy's first error.
    fn handle(&mut self, trigger: &Trigger, ctx: &mut ProxyContext<P>) -> Result<()>;
}

/// The standard handler: [`ProxyContext::perform`].
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultHandler;

impl<P: PortMapped> TriggerHandler<P> for DefaultHandler {
    fn handle(&mut self, trigger: &Trigger, ctx: &mut ProxyContext<P>) -> Result<()> {
        ctx.perform(trigger)
    }
}

/// State shared by the proxy thread and its channels: the FIFO, the first error and the
/// sizes of registered memories (for channel bounds checks).
#[derive(Debug)]
pub struct ProxyShared {
    fifo: Fifo,
    backend: String,
    first_error: OnceLock<String>,
    sizes: Mutex<Sizes>,
}

#[derive(Debug, Default)]
struct Sizes {
    locals: Vec<u64>,
    remotes: Vec<u64>,
    semaphores: u32,
}

impl ProxyShared {
    /// The FIFO.
    pub fn fifo(&self) -> &Fifo {
        &self.fifo
    }

    /// The first error the proxy hit, if any (also makes channel calls fail).
    pub fn error(&self) -> Option<HalError> {
        self.first_error.get().map(|m| {
            HalError::backend(
                self.backend.clone(),
                format!("proxy stopped after a port error: {m}"),
            )
        })
    }

    /// Length of local memory `id`.
    pub fn local_len(&self, id: MemoryId) -> Result<u64> {
        let s = self.sizes.lock().unwrap_or_else(|e| e.into_inner());
        s.locals.get(id as usize).copied().ok_or_else(|| {
            HalError::invalid(format!(
                "no local memory with proxy id {id}: add it with ProxyBuilder::add_local"
            ))
        })
    }

    /// Length of remote memory `id`.
    pub fn remote_len(&self, id: MemoryId) -> Result<u64> {
        let s = self.sizes.lock().unwrap_or_else(|e| e.into_inner());
        s.remotes.get(id as usize).copied().ok_or_else(|| {
            HalError::invalid(format!(
                "no remote memory with proxy id {id}: add it with ProxyBuilder::add_remote"
            ))
        })
    }

    /// Does semaphore `id` exist?
    pub fn check_semaphore(&self, id: SemaphoreId) -> Result<()> {
        let s = self.sizes.lock().unwrap_or_else(|e| e.into_inner());
        if id < s.semaphores {
            Ok(())
        } else {
            Err(HalError::invalid(format!(
                "no proxy semaphore with id {id}: add it with ProxyBuilder::add_semaphore"
            )))
        }
    }

    /// Turn a refused push or wait into the most helpful error.
    pub(crate) fn explain(&self, e: HalError) -> HalError {
        self.error().unwrap_or(e)
    }
}

/// Collects ports, memories and semaphores, then starts the proxy thread.
#[derive(Debug)]
pub struct ProxyBuilder<P: PortMapped> {
    shared: Arc<ProxyShared>,
    ctx: ProxyContext<P>,
    idle: WaitPolicy,
}

impl<P: PortMapped> ProxyBuilder<P> {
    /// A builder with a FIFO of `depth` triggers (power of two ≥ 2). `backend` names
    /// the transport in error messages.
    pub fn new(backend: &str, depth: u64) -> Result<Self> {
        Ok(ProxyBuilder {
            shared: Arc::new(ProxyShared {
                fifo: Fifo::new(depth)?,
                backend: backend.to_string(),
                first_error: OnceLock::new(),
                sizes: Mutex::new(Sizes::default()),
            }),
            ctx: ProxyContext {
                ports: Vec::new(),
                locals: Vec::new(),
                remotes: Vec::new(),
                semaphores: Vec::new(),
            },
            // Stay responsive for ~a millisecond after the last trigger (spin, then
            // yield), then sleep so an idle proxy does not take a core from the ranks.
            idle: WaitPolicy {
                spins: 2000,
                spin_for: std::time::Duration::ZERO,
                yields: 5000,
                yield_for: std::time::Duration::ZERO,
                sleep: std::time::Duration::from_micros(50),
                futex: false,
                timeout: std::time::Duration::MAX,
            },
        })
    }

    /// The shared state channels are built on.
    pub fn shared(&self) -> &Arc<ProxyShared> {
        &self.shared
    }

    /// How the idle proxy spins, yields and sleeps (the timeout is ignored).
    pub fn set_idle_policy(&mut self, idle: WaitPolicy) {
        self.idle = idle;
    }

    /// Add a connection; returns its id.
    pub fn add_port(&mut self, port: P::Port) -> PortId {
        self.ctx.ports.push(port);
        (self.ctx.ports.len() - 1) as PortId
    }

    /// Add a registered local buffer (a put source); returns its id.
    pub fn add_local(&mut self, local: P::Local) -> Result<MemoryId> {
        use commhal_hal::Region;
        if self.ctx.locals.len() as u32 >= MAX_MEMORIES {
            return Err(HalError::invalid(format!(
                "a proxy holds at most {MAX_MEMORIES} local memories"
            )));
        }
        let len = local.len();
        self.ctx.locals.push(local);
        self.shared
            .sizes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .locals
            .push(len);
        Ok((self.ctx.locals.len() - 1) as MemoryId)
    }

    /// Add an imported peer buffer of `len` bytes (a put destination or semaphore
    /// memory); returns its id.
    pub fn add_remote(&mut self, remote: P::Remote, len: u64) -> Result<MemoryId> {
        if self.ctx.remotes.len() as u32 >= MAX_MEMORIES {
            return Err(HalError::invalid(format!(
                "a proxy holds at most {MAX_MEMORIES} remote memories"
            )));
        }
        self.ctx.remotes.push(remote);
        self.shared
            .sizes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remotes
            .push(len);
        Ok((self.ctx.remotes.len() - 1) as MemoryId)
    }

    /// Add a semaphore: signals go through `port` to the u64 counter at `offset` in
    /// remote memory `remote`. Returns its id.
    pub fn add_semaphore(
        &mut self,
        port: PortId,
        remote: MemoryId,
        offset: u64,
    ) -> Result<SemaphoreId> {
        if port as usize >= self.ctx.ports.len() {
            return Err(HalError::invalid(format!(
                "no port with id {port}: add it with add_port first"
            )));
        }
        let len = self.shared.remote_len(remote)?;
        commhal_hal::error::check_range("proxy semaphore counter", offset, 8, len)?;
        commhal_hal::error::check_aligned("proxy semaphore offset", offset, 8)?;
        if self.ctx.semaphores.len() as u32 >= MAX_SEMAPHORES {
            return Err(HalError::invalid(format!(
                "a proxy holds at most {MAX_SEMAPHORES} semaphores"
            )));
        }
        self.ctx.semaphores.push(ProxySemaphore {
            port,
            remote,
            offset,
        });
        self.shared
            .sizes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .semaphores += 1;
        Ok((self.ctx.semaphores.len() - 1) as SemaphoreId)
    }

    /// Start the proxy thread with the [`DefaultHandler`].
    pub fn start(self) -> Result<ProxyService<P>> {
        self.start_with(DefaultHandler)
    }

    /// Start the proxy thread with a custom handler.
    pub fn start_with<H: TriggerHandler<P>>(self, handler: H) -> Result<ProxyService<P>>
    where
        P::Port: 'static,
        P::Local: 'static,
    {
        let shared = Arc::clone(&self.shared);
        let ctx = self.ctx;
        let idle = self.idle;
        let thread = std::thread::Builder::new()
            .name("commhal-proxy".into())
            .spawn(move || run(shared, ctx, handler, idle))
            .map_err(|e| HalError::io("spawning the proxy thread", e))?;
        Ok(ProxyService {
            shared: self.shared,
            thread: Some(thread),
            _p: PhantomData,
        })
    }
}

/// The proxy loop: drain the FIFO in ticket order until the stop bit is set and every
/// trigger pushed before it has been performed.
fn run<P: PortMapped, H: TriggerHandler<P>>(
    shared: Arc<ProxyShared>,
    mut ctx: ProxyContext<P>,
    mut handler: H,
    idle: WaitPolicy,
) {
    let fifo = &shared.fifo;
    let mut backoff = crate::wait::Backoff::new(&idle);
    loop {
        // Read the stop bit *before* looking for work: a trigger pushed before `stop`
        // was called is then seen by the peek below, so stopping never drops it.
        let stopping = fifo.status() & STATUS_STOPPED != 0;
        if let Some((_ticket, t)) = fifo.peek() {
            if fifo.status() & STATUS_ERROR == 0
                && let Err(e) = handler.handle(&t, &mut ctx)
            {
                tracing::error!(error = %e, "proxy trigger failed");
                let _ = shared.first_error.set(e.to_string());
                fifo.set_status(STATUS_ERROR);
            }
            fifo.complete();
            backoff = crate::wait::Backoff::new(&idle);
            continue;
        }
        if stopping {
            return;
        }
        let _ = backoff.snooze();
    }
}

/// A running proxy. Keep it alive while its channels are used; dropping it stops the
/// thread.
#[derive(Debug)]
pub struct ProxyService<P: PortMapped> {
    shared: Arc<ProxyShared>,
    thread: Option<JoinHandle<()>>,
    _p: PhantomData<fn() -> P>,
}

impl<P: PortMapped> ProxyService<P> {
    /// The shared state channels are built on.
    pub fn shared(&self) -> &Arc<ProxyShared> {
        &self.shared
    }

    /// The first port error, if any.
    pub fn error(&self) -> Option<HalError> {
        self.shared.error()
    }

    /// Stop the thread and join it; returns the first port error, if one happened.
    pub fn stop(mut self) -> Result<()> {
        self.stop_inner();
        match self.shared.error() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn stop_inner(&mut self) {
        self.shared.fifo.set_status(STATUS_STOPPED);
        if let Some(t) = self.thread.take()
            && t.join().is_err()
        {
            let _ = self
                .shared
                .first_error
                .set("the proxy thread panicked".into());
            self.shared.fifo.set_status(STATUS_ERROR);
        }
    }
}

impl<P: PortMapped> Drop for ProxyService<P> {
    fn drop(&mut self) {
        self.stop_inner();
    }
}
