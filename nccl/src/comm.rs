//! [`NcclComm`], what an `ncclComm_t` points at: commhal's GPU communicator
//! ([`commhal_cuda_coll::Comm`]) and, with `COMMHAL_NCCL_FALLBACK`, a parallel NCCL
//! communicator over the same ranks.
//!
//! **Where each call runs** is decided from what every rank passes alike (collective,
//! datatype, op, whether the stream is capturing), so both sides of an operation meet
//! in the same library — except the memory-kind rows below, decided from each rank's own
//! buffers on the assumption that every rank's memory is alike:
//!
//! | call | runs on |
//! |---|---|
//! | every collective, any datatype, sum / prod / min / max / avg / pre-multiplied sum with a host scalar | commhal |
//! | pre-multiplied sum whose scalar lives on the device (`ncclScalarDevice`) | fallback |
//! | send / recv groups outside a graph capture | commhal (copy engines) |
//! | send / recv inside a graph capture | fallback |
//! | a communicator commhal cannot set up (ranks on several hosts, more than 8 ranks, no VMM) or `COMMHAL_NCCL_DISABLE=1` | fallback, every call |
//! | `ncclCommInitAll`, `ncclCommShrink`, `ncclDevCommCreate` | fallback |
//! | memory kind: a collective on memory the peers cannot map, larger than the staging regions | fallback |
//! | memory kind: a send / recv group with a buffer the peers cannot map | fallback |
//!
//! Without a fallback the right-hand "fallback" cases fail with `ncclInvalidUsage` and
//! a message saying so (`ncclGetLastError`).

use std::ffi::{c_int, c_void};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use commhal_cuda_coll::kernels::ReduceOp;
use commhal_cuda_coll::types::Collective;
use commhal_cuda_coll::{CallBufs, CollError, Comm, P2pOp};
use commhal_cuda_rt::{Context, Stream};
use commhal_hal::bootstrap::{Bootstrap, SplitBootstrap, TcpBootstrap, UniqueId, split};

use crate::abi::{NcclError, NcclResult, UniqueIdBytes};
use crate::fallback::{Check as _, FallbackComm};
use crate::settings;

/// The first bytes of an `ncclUniqueId` this library made.
pub const ID_MAGIC: &[u8; 4] = b"CHN1";

/// One operation as the caller passed it (device addresses as integers).
#[derive(Debug, Clone, Copy)]
pub enum Call {
    /// A collective.
    Coll {
        /// Which.
        coll: Collective,
        /// `ncclDataType_t`.
        dtype: c_int,
        /// The reduction, resolved when the call was made (an op made by
        /// `ncclRedOpCreatePreMulSum` may be destroyed before a group runs the call).
        op: OpUse,
        /// NCCL's count.
        count: u64,
        /// Broadcast / reduce root.
        root: u32,
        /// `sendbuff`, `recvbuff`.
        bufs: CallBufs,
    },
    /// `ncclSend` (`recv == false`) or `ncclRecv`.
    P2p {
        /// A receive.
        recv: bool,
        /// The buffer.
        buf: u64,
        /// Elements.
        count: u64,
        /// `ncclDataType_t`.
        dtype: c_int,
        /// The other rank.
        peer: u32,
    },
}

impl Call {
    /// NCCL's name of the call, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Call::P2p { recv: false, .. } => "ncclSend",
            Call::P2p { recv: true, .. } => "ncclRecv",
            Call::Coll { coll, .. } => match coll {
                Collective::Allreduce => "ncclAllReduce",
                Collective::Allgather => "ncclAllGather",
                Collective::Reducescatter => "ncclReduceScatter",
                Collective::Broadcast => "ncclBroadcast",
                Collective::Reduce => "ncclReduce",
                Collective::Alltoall => "ncclAlltoAll",
                Collective::Sendrecv => "sendrecv",
            },
        }
    }
}

/// An op made by `ncclRedOpCreatePreMulSum`.
#[derive(Debug, Clone, Copy)]
pub struct CustomOp {
    /// The datatype it was made for.
    pub dtype: c_int,
    /// The scalar, read at creation (`ncclScalarHostImmediate`); `None`: on the device.
    pub scalar: Option<f64>,
    /// The same op made on the fallback communicator.
    pub fallback_op: Option<c_int>,
}

/// How this rank's bootstrap splits (NCCL's `ncclCommSplit`).
#[derive(Debug)]
enum Splitter {
    Root(Arc<dyn Bootstrap>),
    Split(SplitBootstrap),
}

impl Splitter {
    fn boot(&self) -> &dyn Bootstrap {
        match self {
            Splitter::Root(b) => b.as_ref(),
            Splitter::Split(s) => s,
        }
    }
    fn split(&self, color: Option<u32>, key: u32) -> Result<Option<SplitBootstrap>, NcclError> {
        Ok(match self {
            Splitter::Root(b) => split(b.clone(), color, key)?,
            Splitter::Split(s) => s.split(color, key)?,
        })
    }
}

/// A communicator once set up.
#[derive(Debug)]
pub struct Ready {
    ctx: Arc<Context>,
    boot: Option<Splitter>,
    /// commhal's communicator (`None`: every call goes to the fallback).
    pub coll: Option<Comm>,
    /// Why [`Ready::coll`] is `None`.
    pub why_not: Option<String>,
    /// The parallel NCCL communicator.
    pub fallback: Option<FallbackComm>,
}

#[derive(Debug)]
enum State {
    Initializing,
    Ready(Arc<Ready>),
    Failed(NcclError),
}

/// What an `ncclComm_t` points at.
#[derive(Debug)]
pub struct NcclComm {
    /// This rank.
    pub rank: u32,
    /// Ranks.
    pub size: u32,
    /// CUDA device ordinal.
    pub device: u32,
    state: Mutex<State>,
    became_ready: Condvar,
    ops: Mutex<Vec<Option<CustomOp>>>,
    /// The last error on this communicator (`ncclGetLastError`).
    pub last_error: Mutex<Option<String>>,
}

/// A call's reduction on each library.
#[derive(Debug, Clone, Copy)]
pub struct OpUse {
    /// commhal's (`None`: the op runs on the fallback only, a device-resident
    /// pre-multiply scalar).
    pub ours: Option<ReduceOp>,
    /// The fallback's `ncclRedOp_t` (its own number for an op made by
    /// `ncclRedOpCreatePreMulSum`).
    pub theirs: c_int,
}

impl OpUse {
    /// For collectives that do not reduce.
    pub const NONE: OpUse = OpUse {
        ours: Some(ReduceOp::Sum),
        theirs: 0,
    };
}

/// Where commhal's part of an `ncclUniqueId` starts. The bytes before it hold the
/// fallback NCCL's own id when one is loaded (NCCL reads only its bootstrap handle, about
/// 40 bytes, from the front): so the id is valid for both libraries, NCCL's internal calls
/// of `ncclGetUniqueId` (which the preload routes here) get an id NCCL can use, and the
/// fallback communicator is made from it without a second exchange.
pub const ID_OFFSET: usize = 64;

/// The fallback NCCL's id inside `id`, if `ncclGetUniqueId` put one there.
pub fn nccl_part(id: &UniqueIdBytes) -> Option<UniqueIdBytes> {
    if id.internal[..ID_OFFSET].iter().all(|&c| c == 0) {
        return None;
    }
    let mut out = UniqueIdBytes { internal: [0; 128] };
    out.internal[..ID_OFFSET].copy_from_slice(&id.internal[..ID_OFFSET]);
    Some(out)
}

/// Parse the id bytes this library's `ncclGetUniqueId` wrote.
pub fn parse_id(id: &UniqueIdBytes) -> Result<UniqueId, NcclError> {
    let b: Vec<u8> = id.internal.iter().map(|&c| c as u8).collect();
    if &b[ID_OFFSET..ID_OFFSET + 4] != ID_MAGIC {
        return Err(NcclError::invalid(
            "this ncclUniqueId was not made by libcommhal_nccl's ncclGetUniqueId (another NCCL library made it?): every rank must load the same library",
        ));
    }
    let at = ID_OFFSET + 4;
    Ok(UniqueId::from_bytes(&b[at..at + UniqueId::BYTES])?)
}

/// A fresh id; rank 0's bootstrap listener is bound now, in this process, and (with a
/// fallback) the fallback NCCL's root too.
pub fn new_id() -> Result<UniqueIdBytes, NcclError> {
    let ip = match settings::bootstrap_ip() {
        Some(s) => s.parse().map_err(|_| {
            NcclError::invalid(format!(
                "{}={s}: not an IP address",
                commhal_hal::settings::nccl::BOOTSTRAP_IP.env
            ))
        })?,
        None => default_route_ip(),
    };
    let mut out = UniqueIdBytes { internal: [0; 128] };
    if let Some(lib) = crate::fallback::library()? {
        // SAFETY: a valid out-pointer of NCCL's id size.
        let r = unsafe { (lib.GetUniqueId)(&mut out) };
        lib.check(r, std::ptr::null_mut(), "ncclGetUniqueId")?;
        out.internal[ID_OFFSET..].fill(0);
    }
    let uid = UniqueId::bind(ip)?;
    let bytes = uid.to_bytes();
    for (d, s) in out.internal[ID_OFFSET..]
        .iter_mut()
        .zip(ID_MAGIC.iter().chain(bytes.iter()))
    {
        *d = *s as std::ffi::c_char;
    }
    Ok(out)
}

/// This host's address on its default route (no packet is sent), else loopback.
fn default_route_ip() -> std::net::IpAddr {
    use std::net::{IpAddr, Ipv4Addr, UdpSocket};
    let probe = || -> Option<IpAddr> {
        let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).ok()?;
        s.connect((Ipv4Addr::new(10, 254, 254, 254), 9)).ok()?;
        let ip = s.local_addr().ok()?.ip();
        (!ip.is_unspecified()).then_some(ip)
    };
    probe().unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// The calling thread's CUDA device (`cudaGetDevice`), 0 when none is current.
pub fn current_device() -> Result<u32, NcclError> {
    Ok(commhal_cuda_rt::driver::current_device()?.unwrap_or(0))
}

/// Say once per process, whatever `COMMHAL_DEBUG` says, that a communicator runs
/// entirely on the fallback NCCL (the user preloaded commhal to get commhal).
fn warn_fallback_only(rank: u32, why: &str) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        use std::io::Write;
        let line = format!(
            "commhal-nccl: WARNING: rank {rank}: this communicator runs on the fallback NCCL only: {why}\n"
        );
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    });
}

/// This machine, as the ranks compare it (hostname and boot id).
fn host_key() -> Vec<u8> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates or truncates.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let mut key = if r == 0 {
        buf.iter().take_while(|&&c| c != 0).copied().collect()
    } else {
        Vec::new()
    };
    if let Ok(boot) = std::fs::read("/proc/sys/kernel/random/boot_id") {
        key.push(b'/');
        key.extend(boot);
    }
    key
}

fn wait_bound() -> Result<Duration, NcclError> {
    settings::wait_bound().map_err(NcclError::invalid)
}

/// What each rank can tell alone about setting up commhal's communicator, exchanged
/// before anyone starts (a rank that fails inside the collective setup would leave the
/// others waiting out the bound).
#[derive(Debug)]
struct Precheck {
    host: Vec<u8>,
    disabled: bool,
    nvrtc: bool,
    vmm: bool,
    buffer_bytes: u64,
}

impl Precheck {
    fn local(ctx: &Context, buffer_bytes: u64) -> Result<Precheck, NcclError> {
        let disabled = settings::disabled().map_err(NcclError::invalid)?;
        if !disabled {
            crate::nvrtc::ensure();
        }
        Ok(Precheck {
            host: host_key(),
            disabled,
            nvrtc: commhal_cuda_rt::nvrtc_available(),
            vmm: ctx.supports_vmm_fd().unwrap_or(false),
            buffer_bytes,
        })
    }

    fn encode(&self) -> Vec<u8> {
        let mut v = vec![
            u8::from(self.disabled),
            u8::from(self.nvrtc),
            u8::from(self.vmm),
        ];
        v.extend_from_slice(&self.buffer_bytes.to_le_bytes());
        v.extend_from_slice(&self.host);
        v
    }

    /// Exchange (collective): `Ok(None)` when every rank can set up commhal's
    /// communicator, `Ok(Some(why))` when one cannot (all then use the fallback), an
    /// error when the ranks' settings differ.
    fn agree(&self, b: &dyn Bootstrap) -> Result<Option<String>, NcclError> {
        let all = b.all_gather(&self.encode())?;
        let field = |v: &[u8], i: usize| v.get(i).copied().unwrap_or(0) != 0;
        let bytes = |v: &[u8]| {
            v.get(3..11)
                .and_then(|s| s.try_into().ok())
                .map_or(0, u64::from_le_bytes)
        };
        for (r, v) in all.iter().enumerate() {
            if field(v, 0) != self.disabled || bytes(v) != self.buffer_bytes {
                return Err(NcclError::usage(format!(
                    "rank {r} runs with other COMMHAL_NCCL_DISABLE / COMMHAL_NCCL_BUFFER_BYTES settings than rank {}: set the same environment on every rank",
                    b.rank()
                )));
            }
        }
        let first = |i: usize| all.iter().position(|v| !field(v, i));
        Ok(if self.disabled {
            Some("COMMHAL_NCCL_DISABLE=1".to_string())
        } else if all.iter().any(|v| v.get(11..) != all[0].get(11..)) {
            Some("the ranks are on more than one host (commhal's GPU communicator is NVLink within one host)".to_string())
        } else if let Some(r) = first(1) {
            Some(format!(
                "rank {r} cannot load NVRTC 13 (libnvrtc.so.13) for the kernels: put it on the library path or set COMMHAL_NVRTC_DIR"
            ))
        } else {
            first(2).map(|r| {
                format!("rank {r}'s GPU cannot share cuMem VMM memory through file descriptors")
            })
        })
    }
}

impl Ready {
    /// Make the fallback communicator over `boot` when a fallback library is set
    /// (collective): from the NCCL id inside the caller's id, else from one rank 0 makes
    /// and sends over `boot`.
    fn new_fallback(
        boot: &Splitter,
        nccl_id: Option<UniqueIdBytes>,
    ) -> Result<Option<FallbackComm>, NcclError> {
        Ok(match crate::fallback::library()? {
            Some(lib) => Some(FallbackComm::init(lib, boot.boot(), nccl_id)?),
            None => None,
        })
    }

    /// Set up commhal's communicator over `boot` where every rank can (collective; all
    /// ranks agree on the outcome), next to `fallback`.
    fn build(
        boot: Splitter,
        ctx: Arc<Context>,
        fallback: Option<FallbackComm>,
    ) -> Result<Ready, NcclError> {
        let b = boot.boot();
        // a setting its declaration refuses fails the call here, before the ranks
        // decide between commhal and the fallback
        settings::check().map_err(NcclError::invalid)?;
        let cap = settings::buffer_bytes().map_err(NcclError::invalid)?;
        let mut why_not = Precheck::local(&ctx, cap)?.agree(b)?;
        let mut coll = None;
        if why_not.is_none() {
            // the drop-in runs the hand-written kernels; plans (COMMHAL_GPU_ALGO) get
            // 1 MiB of scratch unless COMMHAL_PLAN_SCRATCH says more
            match Comm::with_plan_scratch(b, ctx.ordinal(), cap, None, wait_bound()?, Some(1 << 20))
            {
                Ok(c) => coll = Some(c),
                Err(e) => why_not = Some(e.to_string()),
            }
        }
        let oks = b.all_gather(&[u8::from(coll.is_some())])?;
        if let Some(bad) = oks.iter().position(|v| v.as_slice() != [1])
            && coll.take().is_some()
        {
            why_not = Some(format!(
                "rank {bad} could not set up commhal's communicator"
            ));
        }
        if let (None, Some(_)) = (&coll, &fallback) {
            warn_fallback_only(b.rank(), why_not.as_deref().unwrap_or("unknown reason"));
        }
        if coll.is_none() && fallback.is_none() {
            return Err(NcclError::usage(format!(
                "commhal cannot run this communicator ({}) and no fallback NCCL is set: set COMMHAL_NCCL_FALLBACK to the real libnccl.so.2",
                why_not.as_deref().unwrap_or("unknown reason")
            )));
        }
        Ok(Ready {
            ctx,
            boot: Some(boot),
            coll,
            why_not,
            fallback,
        })
    }
}

impl NcclComm {
    fn with_state(rank: u32, size: u32, device: u32, state: State) -> Arc<NcclComm> {
        Arc::new(NcclComm {
            rank,
            size,
            device,
            state: Mutex::new(state),
            became_ready: Condvar::new(),
            ops: Mutex::new(Vec::new()),
            last_error: Mutex::new(None),
        })
    }

    /// A communicator that is only the fallback's (`ncclCommInitAll`, shrink).
    pub fn fallback_only(
        fb: FallbackComm,
        rank: u32,
        size: u32,
        device: u32,
        why: &str,
    ) -> Result<Arc<NcclComm>, NcclError> {
        let ctx = Context::new(device)?;
        let ready = Ready {
            ctx,
            boot: None,
            coll: None,
            why_not: Some(why.to_string()),
            fallback: Some(fb),
        };
        Ok(Self::with_state(
            rank,
            size,
            device,
            State::Ready(Arc::new(ready)),
        ))
    }

    /// `ncclCommInitRankConfig`: join the job `id` as `rank` of `nranks` on the calling
    /// thread's device. Non-blocking (`blocking == false`): returns at once; the setup
    /// runs on a thread and [`NcclComm::async_error`] says when it is done.
    pub fn init(
        nranks: c_int,
        id: &UniqueIdBytes,
        rank: c_int,
        blocking: bool,
    ) -> Result<Arc<NcclComm>, NcclError> {
        if nranks < 1 || rank < 0 || rank >= nranks {
            return Err(NcclError::invalid(format!(
                "rank {rank} of {nranks} ranks: need nranks >= 1 and 0 <= rank < nranks"
            )));
        }
        let uid = parse_id(id)?;
        let nccl_id = nccl_part(id);
        let device = current_device()?;
        let (rank, n) = (rank as u32, nranks as u32);
        let comm = Self::with_state(rank, n, device, State::Initializing);
        let setup = move || -> Result<Ready, NcclError> {
            let ctx = Context::new(device)?;
            let boot = Splitter::Root(Arc::new(TcpBootstrap::new(rank, n, &uid, wait_bound()?)?));
            let fallback = Ready::new_fallback(&boot, nccl_id)?;
            Ready::build(boot, ctx, fallback)
        };
        comm.finish_init(blocking, setup)?;
        Ok(comm)
    }

    /// Run `setup` now (blocking) or on a thread, and record its outcome.
    fn finish_init(
        self: &Arc<Self>,
        blocking: bool,
        setup: impl FnOnce() -> Result<Ready, NcclError> + Send + 'static,
    ) -> Result<(), NcclError> {
        // a panic in the setup is an error of this communicator, never a state stuck
        // in `Initializing`
        let setup = move || {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(setup)).unwrap_or_else(|_| {
                Err(NcclError::new(
                    NcclResult::InternalError,
                    "the communicator's setup panicked (a bug in libcommhal_nccl; please report it with COMMHAL_DEBUG=1 output)",
                ))
            })
        };
        if blocking {
            let r = setup();
            let out = r.as_ref().err().cloned();
            self.set_state(r);
            return out.map_or(Ok(()), Err);
        }
        let me = self.clone();
        std::thread::Builder::new()
            .name("commhal-nccl-init".into())
            .spawn(move || {
                let r = setup();
                me.set_state(r);
            })
            .map_err(|e| {
                NcclError::new(
                    NcclResult::SystemError,
                    format!("starting the init thread: {e}"),
                )
            })?;
        Ok(())
    }

    fn set_state(&self, r: Result<Ready, NcclError>) {
        let (st, what) = match r {
            Ok(ready) => {
                let what = match (&ready.coll, &ready.why_not) {
                    (Some(_), _) => "commhal".to_string(),
                    (None, why) => format!("fallback NCCL only ({})", why.as_deref().unwrap_or("")),
                };
                (State::Ready(Arc::new(ready)), what)
            }
            Err(e) => {
                self.note_error(&e);
                (State::Failed(e), "failed".to_string())
            }
        };
        settings::log(|| {
            format!(
                "rank {}/{} device {}: communicator ready: {what}",
                self.rank, self.size, self.device
            )
        });
        if let Ok(mut s) = self.state.lock() {
            *s = st;
        }
        self.became_ready.notify_all();
    }

    /// Keep `e`'s message for `ncclGetLastError`.
    pub fn note_error(&self, e: &NcclError) {
        settings::log(|| format!("rank {}: error: {}", self.rank, e.msg));
        if let Ok(mut l) = self.last_error.lock() {
            *l = Some(e.msg.clone());
        }
    }

    /// The set-up communicator, waiting for a non-blocking init to finish.
    pub fn ready(&self) -> Result<Arc<Ready>, NcclError> {
        let mut s = self.state.lock().map_err(|_| {
            NcclError::new(NcclResult::InternalError, "communicator state poisoned")
        })?;
        loop {
            match &*s {
                State::Ready(r) => return Ok(r.clone()),
                State::Failed(e) => return Err(e.clone()),
                State::Initializing => {
                    s = self.became_ready.wait(s).map_err(|_| {
                        NcclError::new(NcclResult::InternalError, "communicator state poisoned")
                    })?;
                }
            }
        }
    }

    /// `ncclCommGetAsyncError`: in progress while initialising, the init's error, a
    /// dead or aborted peer (host-side check, no device access), else success.
    pub fn async_error(&self) -> NcclResult {
        let ready = match self.state.lock().as_deref() {
            Ok(State::Initializing) => return NcclResult::InProgress,
            Ok(State::Failed(e)) => return e.code,
            Ok(State::Ready(r)) => r.clone(),
            Err(_) => return NcclResult::InternalError,
        };
        if let Some(why) = ready.coll.as_ref().and_then(Comm::peer_failure) {
            self.note_error(&NcclError::new(NcclResult::RemoteError, why));
            return NcclResult::RemoteError;
        }
        if let Some(fb) = &ready.fallback {
            let mut code: c_int = 0;
            // SAFETY: live fallback communicator; valid out-pointer.
            let r = unsafe { (fb.lib.CommGetAsyncError)(fb.raw, &mut code) };
            if r == 0 && code != 0 {
                return NcclResult::from_raw(code);
            }
        }
        NcclResult::Success
    }

    /// `ncclCommSplit`: a communicator of the ranks with the same `color` (`None`:
    /// this rank joins none), ordered by `key`. Collective over this communicator.
    pub fn split(
        &self,
        color: Option<u32>,
        key: c_int,
        blocking: bool,
    ) -> Result<Option<Arc<NcclComm>>, NcclError> {
        let ready = self.ready()?;
        // commhal's split orders by an unsigned key: shift NCCL's int so that negative
        // keys still come first
        let ukey = (i64::from(key) - i64::from(c_int::MIN)) as u32;
        let fb = match &ready.fallback {
            Some(fb) => {
                let mut raw: *mut c_void = std::ptr::null_mut();
                let c = color.map_or(crate::abi::SPLIT_NOCOLOR, |c| c as c_int);
                // SAFETY: live communicator; valid out-pointer; null config = inherit.
                let r = crate::fallback::making(|| unsafe {
                    (fb.lib.CommSplit)(fb.raw, c, key, &mut raw, std::ptr::null_mut())
                });
                fb.lib.check(r, fb.raw, "ncclCommSplit")?;
                (!raw.is_null()).then(|| FallbackComm::new(fb.lib, raw))
            }
            None => None,
        };
        let Some(parent) = &ready.boot else {
            // a fallback-only communicator splits in NCCL alone
            return match fb {
                None => Ok(None),
                Some(fb) => {
                    let (rank, size) = fb.rank_and_size()?;
                    Self::fallback_only(
                        fb,
                        rank,
                        size,
                        self.device,
                        "split of a fallback-only communicator",
                    )
                    .map(Some)
                }
            };
        };
        let Some(sub) = parent.split(color, ukey)? else {
            return Ok(None);
        };
        let (rank, size) = (sub.rank(), sub.size());
        let comm = Self::with_state(rank, size, self.device, State::Initializing);
        let ctx = ready.ctx.clone();
        let setup = move || Ready::build(Splitter::Split(sub), ctx, fb);
        comm.finish_init(blocking, setup)?;
        Ok(Some(comm))
    }

    /// Resolve `op` for `dtype` on both libraries, when the call is made.
    pub fn resolve_op(&self, op: c_int, dtype: c_int) -> Result<OpUse, NcclError> {
        let builtin = |r| OpUse {
            ours: Some(r),
            theirs: op,
        };
        Ok(match op {
            0 => builtin(ReduceOp::Sum),
            1 => builtin(ReduceOp::Prod),
            2 => builtin(ReduceOp::Max),
            3 => builtin(ReduceOp::Min),
            4 => builtin(ReduceOp::Avg),
            o if o >= crate::abi::NUM_BUILTIN_OPS => {
                let ops = self
                    .ops
                    .lock()
                    .map_err(|_| NcclError::new(NcclResult::InternalError, "op table poisoned"))?;
                let Some(Some(c)) = ops.get((o - crate::abi::NUM_BUILTIN_OPS) as usize) else {
                    return Err(NcclError::invalid(format!(
                        "reduction op {o} was not made by ncclRedOpCreatePreMulSum on this communicator (or was destroyed)"
                    )));
                };
                if c.dtype != dtype {
                    return Err(NcclError::invalid(format!(
                        "reduction op {o} was made for datatype {} and used with datatype {dtype}",
                        c.dtype
                    )));
                }
                OpUse {
                    ours: c.scalar.map(ReduceOp::PreMulSum),
                    theirs: c.fallback_op.unwrap_or(o),
                }
            }
            o => {
                return Err(NcclError::invalid(format!(
                    "reduction op {o} is not an ncclRedOp_t (0 sum, 1 prod, 2 max, 3 min, 4 avg, or one made by ncclRedOpCreatePreMulSum)"
                )));
            }
        })
    }

    /// `ncclRedOpCreatePreMulSum`: `scalar` is the host value (`None`: it stays on the
    /// device at `dev_ptr`, and the op runs on the fallback).
    pub fn create_premul(
        &self,
        dtype: c_int,
        scalar: Option<f64>,
        raw_scalar: usize,
        residence: c_int,
    ) -> Result<c_int, NcclError> {
        crate::abi::dtype(dtype)?;
        let ready = self.ready()?;
        let fallback_op = match &ready.fallback {
            Some(fb) => {
                let mut op: c_int = 0;
                // SAFETY: the caller's scalar pointer as NCCL defines it; live communicator.
                let r = unsafe {
                    (fb.lib.RedOpCreatePreMulSum)(
                        &mut op,
                        raw_scalar as *mut c_void,
                        dtype,
                        residence,
                        fb.raw,
                    )
                };
                fb.lib.check(r, fb.raw, "ncclRedOpCreatePreMulSum")?;
                Some(op)
            }
            None if scalar.is_none() => {
                return Err(NcclError::usage(
                    "a pre-multiplied sum with a device-resident scalar (ncclScalarDevice) runs only on the fallback NCCL: set COMMHAL_NCCL_FALLBACK, or pass the scalar as ncclScalarHostImmediate",
                ));
            }
            None => None,
        };
        let mut ops = self
            .ops
            .lock()
            .map_err(|_| NcclError::new(NcclResult::InternalError, "op table poisoned"))?;
        let op = CustomOp {
            dtype,
            scalar,
            fallback_op,
        };
        let slot = match ops.iter().position(Option::is_none) {
            Some(i) => {
                ops[i] = Some(op);
                i
            }
            None => {
                ops.push(Some(op));
                ops.len() - 1
            }
        };
        Ok(crate::abi::NUM_BUILTIN_OPS + slot as c_int)
    }

    /// `ncclRedOpDestroy`.
    pub fn destroy_op(&self, op: c_int) -> Result<(), NcclError> {
        let mut ops = self
            .ops
            .lock()
            .map_err(|_| NcclError::new(NcclResult::InternalError, "op table poisoned"))?;
        let i = (op - crate::abi::NUM_BUILTIN_OPS) as usize;
        let Some(Some(c)) = ops.get(i).copied() else {
            return Err(NcclError::invalid(format!(
                "reduction op {op} is not a live op of this communicator"
            )));
        };
        ops[i] = None;
        // the fallback's op lives until the group that may use it has run (calls
        // resolved their op when they were made, so commhal's side is done)
        if let (Some(fop), Ok(ready)) = (c.fallback_op, self.ready())
            && ready.fallback.is_some()
        {
            crate::group::after_group(move || {
                if let Some(fb) = &ready.fallback {
                    // SAFETY: an op of this fallback communicator, kept alive by `ready`.
                    let r = unsafe { (fb.lib.RedOpDestroy)(fop, fb.raw) };
                    let _ = fb.lib.check(r, fb.raw, "ncclRedOpDestroy");
                }
            });
        }
        Ok(())
    }

    /// Wait for every stream of the device, then free (`ncclCommDestroy`); `abort`:
    /// stop this rank's device waits first (`ncclCommAbort`).
    pub fn teardown(&self, abort: bool) -> Result<(), NcclError> {
        let ready = match self.ready() {
            Ok(r) => r,
            Err(_) => return Ok(()),
        };
        if abort {
            // this communicator only: its waits and kernels stop, its siblings go on
            if let Some(c) = &ready.coll {
                c.abort(&format!("ncclCommAbort on rank {}", self.rank));
            }
            if let Some(fb) = &ready.fallback {
                fb.abort_on_drop
                    .store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
        if ready.coll.is_some() {
            ready.ctx.synchronize()?;
        }
        Ok(())
    }

    /// Run one call now on `stream` (a group's members go through [`crate::group`]).
    pub fn run_coll(&self, call: &Call, stream: usize) -> Result<(), NcclError> {
        let Call::Coll {
            coll,
            dtype,
            op,
            count,
            root,
            bufs,
        } = *call
        else {
            return Err(NcclError::new(
                NcclResult::InternalError,
                "run_coll of a send/recv",
            ));
        };
        let ready = self.ready()?;
        let dt = crate::abi::dtype(dtype)?;
        if count == 0 {
            return Ok(());
        }
        match (&ready.coll, op.ours) {
            (Some(c), Some(rop)) => {
                // SAFETY: the caller's live stream (NCCL's contract); checked against
                // the device's context.
                let s = unsafe { Stream::borrowed(&ready.ctx, stream as *mut _) }?;
                let path = match c.launch_on(coll, dt, rop, count, root, bufs, &s) {
                    Ok(p) => p,
                    // memory the peers cannot map (stream-ordered pool memory), larger
                    // than the staging regions: NCCL runs it, when there is one (see
                    // the module docs for the caveat)
                    Err(CollError::CannotStage(why)) if ready.fallback.is_some() => {
                        return self.fallback_coll(&ready, call, op.theirs, stream, &why);
                    }
                    Err(e) => return Err(e.into()),
                };
                settings::log(|| {
                    format!(
                        "rank {}: {} {count} x {} {} -> commhal ({})",
                        self.rank,
                        call.name(),
                        dt.name(),
                        if coll.redop() == "sum" {
                            format!("{rop:?}")
                        } else {
                            String::new()
                        },
                        path.name()
                    )
                });
                Ok(())
            }
            (_, ours) => {
                let why = match ours {
                    None => "pre-multiplied sum with a device-resident scalar".to_string(),
                    Some(_) => ready.why_not.clone().unwrap_or_default(),
                };
                self.fallback_coll(&ready, call, op.theirs, stream, &why)
            }
        }
    }

    fn fallback_coll(
        &self,
        ready: &Ready,
        call: &Call,
        op: c_int,
        stream: usize,
        why: &str,
    ) -> Result<(), NcclError> {
        let Call::Coll {
            coll,
            dtype,
            count,
            root,
            bufs,
            ..
        } = *call
        else {
            return Err(NcclError::new(
                NcclResult::InternalError,
                "fallback_coll of a send/recv",
            ));
        };
        let Some(fb) = &ready.fallback else {
            return Err(NcclError::usage(format!(
                "{}: commhal does not run this call ({why}) and no fallback NCCL is set: set COMMHAL_NCCL_FALLBACK to the real libnccl.so.2",
                call.name()
            )));
        };
        settings::log(|| {
            format!(
                "rank {}: {} {count} -> fallback NCCL ({why})",
                self.rank,
                call.name()
            )
        });
        let (s, r, n) = (
            bufs.send as *const c_void,
            bufs.recv as *mut c_void,
            count as usize,
        );
        let (l, c, root) = (fb.lib, fb.raw, root as c_int);
        let stream = stream as *mut c_void;
        // SAFETY: the caller's arguments, passed through unchanged to NCCL's function of
        // the same prototype, on a live communicator.
        let rc = unsafe {
            match coll {
                Collective::Allreduce => (l.AllReduce)(s, r, n, dtype, op, c, stream),
                Collective::Allgather => (l.AllGather)(s, r, n, dtype, c, stream),
                Collective::Reducescatter => (l.ReduceScatter)(s, r, n, dtype, op, c, stream),
                Collective::Broadcast => (l.Broadcast)(s, r, n, dtype, root, c, stream),
                Collective::Reduce => (l.Reduce)(s, r, n, dtype, op, root, c, stream),
                Collective::Alltoall => match l.AlltoAll {
                    Some(f) => f(s, r, n, dtype, c, stream),
                    None => {
                        return Err(NcclError::usage(
                            "the fallback NCCL has no ncclAlltoAll (NCCL >= 2.28 has)",
                        ));
                    }
                },
                Collective::Sendrecv => {
                    return Err(NcclError::new(
                        NcclResult::InternalError,
                        "sendrecv is not an NCCL call",
                    ));
                }
            }
        };
        l.check(rc, c, call.name())
    }

    /// Why a group cannot run on commhal's copy engines because of its buffers: a
    /// receive buffer the sender cannot open (neither `cudaMalloc` memory nor cuMem VMM
    /// pieces exportable as fds: stream-ordered pool memory). Send buffers are checked as well, so that a rank that only
    /// sends routes as its receivers do; every rank's memory is alike in such jobs.
    fn unmappable_buffer(&self, c: &Comm, ops: &[P2pOp]) -> Result<Option<String>, NcclError> {
        for op in ops {
            let (P2pOp::Recv {
                buf,
                count,
                dtype,
                peer,
            }
            | P2pOp::Send {
                buf,
                count,
                dtype,
                peer,
            }) = *op;
            if peer != self.rank && count > 0 && !c.peers_can_map(buf, count * dtype.size())? {
                return Ok(Some(format!(
                    "buffer {buf:#x} is memory the peers cannot open (neither cudaMalloc nor fd-exportable cuMem VMM memory)"
                )));
            }
        }
        Ok(None)
    }

    /// Run a group's sends and receives on one stream: commhal's copy engines outside a
    /// graph capture, else the fallback.
    pub fn run_p2p(&self, calls: &[Call], stream: usize) -> Result<(), NcclError> {
        let ready = self.ready()?;
        let mut ops = Vec::with_capacity(calls.len());
        for call in calls {
            let Call::P2p {
                recv,
                buf,
                count,
                dtype,
                peer,
            } = *call
            else {
                continue;
            };
            if peer >= self.size {
                return Err(NcclError::invalid(format!(
                    "{} peer {peer} is not a rank of this {}-rank communicator",
                    call.name(),
                    self.size
                )));
            }
            let dtype = crate::abi::dtype(dtype)?;
            ops.push(if recv {
                P2pOp::Recv {
                    buf,
                    count,
                    dtype,
                    peer,
                }
            } else {
                P2pOp::Send {
                    buf,
                    count,
                    dtype,
                    peer,
                }
            });
        }
        let why = match &ready.coll {
            Some(c) => {
                // SAFETY: the caller's live stream (NCCL's contract).
                let s = unsafe { Stream::borrowed(&ready.ctx, stream as *mut _) }?;
                let unmappable = match &ready.fallback {
                    Some(_) => self.unmappable_buffer(c, &ops)?,
                    None => None,
                };
                if let Some(why) = unmappable {
                    why
                } else if !c.routes().copy_engines {
                    "send/recv runs on the copy engines, and cuda-dma is not in COMMHAL_BACKENDS"
                        .to_string()
                } else if s.is_capturing()? {
                    "send/recv inside a CUDA graph capture".to_string()
                } else {
                    c.p2p(&ops, &s)?;
                    settings::log(|| {
                        format!(
                            "rank {}: {} sends/receives -> commhal (copy engines)",
                            self.rank,
                            ops.len()
                        )
                    });
                    return Ok(());
                }
            }
            None => ready.why_not.clone().unwrap_or_default(),
        };
        let Some(fb) = &ready.fallback else {
            return Err(NcclError::usage(format!(
                "ncclSend/ncclRecv: commhal does not run this group ({why}) and no fallback NCCL is set: set COMMHAL_NCCL_FALLBACK to the real libnccl.so.2"
            )));
        };
        settings::log(|| {
            format!(
                "rank {}: {} sends/receives -> fallback NCCL ({why})",
                self.rank,
                calls.len()
            )
        });
        let l = fb.lib;
        let stream = stream as *mut c_void;
        // SAFETY: NCCL group calls; every op's arguments are the caller's, unchanged.
        unsafe {
            l.check((l.GroupStart)(), fb.raw, "ncclGroupStart")?;
            let mut first_err = Ok(());
            for call in calls {
                let Call::P2p {
                    recv,
                    buf,
                    count,
                    dtype,
                    peer,
                } = *call
                else {
                    continue;
                };
                let r = if recv {
                    (l.Recv)(
                        buf as *mut c_void,
                        count as usize,
                        dtype,
                        peer as c_int,
                        fb.raw,
                        stream,
                    )
                } else {
                    (l.Send)(
                        buf as *const c_void,
                        count as usize,
                        dtype,
                        peer as c_int,
                        fb.raw,
                        stream,
                    )
                };
                if first_err.is_ok() {
                    first_err = l.check(r, fb.raw, call.name());
                }
            }
            let end = l.check((l.GroupEnd)(), fb.raw, "ncclGroupEnd");
            first_err.and(end)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agree_on_two_ranks(
        mk: impl Fn(u32) -> Precheck + Sync,
    ) -> Vec<Result<Option<String>, NcclError>> {
        let boots = commhal_hal::bootstrap::InProcBootstrap::create(2);
        std::thread::scope(|s| {
            let hs: Vec<_> = boots
                .into_iter()
                .map(|b| {
                    let mk = &mk;
                    s.spawn(move || mk(b.rank()).agree(&b))
                })
                .collect();
            hs.into_iter().map(|h| h.join().expect("rank")).collect()
        })
    }

    fn pre(nvrtc: bool, host: &[u8], buffer_bytes: u64) -> Precheck {
        Precheck {
            host: host.to_vec(),
            disabled: false,
            nvrtc,
            vmm: true,
            buffer_bytes,
        }
    }

    #[test]
    fn every_rank_decides_alike_before_the_setup() {
        for r in agree_on_two_ranks(|_| pre(true, b"h", 64)) {
            assert!(r.expect("agree").is_none());
        }
        // one rank without NVRTC: both use the fallback, naming it
        for r in agree_on_two_ranks(|rank| pre(rank == 0, b"h", 64)) {
            let why = r.expect("agree").expect("fallback");
            assert!(why.contains("rank 1 cannot load NVRTC"), "{why}");
        }
        for r in agree_on_two_ranks(|rank| pre(true, if rank == 0 { b"a" } else { b"b" }, 64)) {
            assert!(
                r.expect("agree")
                    .expect("fallback")
                    .contains("more than one host")
            );
        }
        // settings that differ are an error on every rank
        for r in agree_on_two_ranks(|rank| pre(true, b"h", 64 + u64::from(rank))) {
            let e = r.expect_err("settings differ");
            assert!(e.msg.contains("same environment"), "{}", e.msg);
        }
    }

    #[test]
    fn ids_carry_commhal_and_the_fallback_nccl_side_by_side() {
        let mut id = new_id().expect("id");
        assert!(nccl_part(&id).is_none(), "no fallback loaded in tests");
        let uid = parse_id(&id).expect("parse");
        // a fallback's id in the front leaves commhal's part intact
        for (i, c) in id.internal[..ID_OFFSET].iter_mut().enumerate() {
            *c = (i as u8 | 1) as std::ffi::c_char;
        }
        assert_eq!(parse_id(&id).expect("parse").to_bytes(), uid.to_bytes());
        let front = nccl_part(&id).expect("the front is there");
        assert_eq!(front.internal[..ID_OFFSET], id.internal[..ID_OFFSET]);
        assert!(front.internal[ID_OFFSET..].iter().all(|&c| c == 0));
        // an id from another library is refused with a message
        id.internal[ID_OFFSET] = 0;
        let e = parse_id(&id).expect_err("foreign id");
        assert_eq!(e.code, NcclResult::InvalidArgument);
        assert!(e.msg.contains("ncclGetUniqueId"), "{}", e.msg);
    }
}
