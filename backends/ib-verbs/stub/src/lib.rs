//! # commhal-ibverbs-stub — a libibverbs stand-in for CI (no RDMA hardware)
//!
//! A `cdylib` exporting the subset of `libibverbs.so.1` the ib-verbs backend uses,
//! with the same C ABI (the struct layouts come from the backend's `sys/abi.rs`).
//! Point the backend at it with `COMMHAL_IBVERBS_LIB=/path/libcommhal_ibverbs_stub.so`
//! (or the `library` backend option). It emulates one RDMA device shared by every
//! process of the host:
//!
//! * **QP numbers** come from a counter file shared by all processes
//!   (`<dir>/commhal-ibstub-qpn`), so they are unique on the host like on one HCA.
//! * **A QP** owns an *inbox*: a file `<dir>/commhal-ibstub-<qpn>` mapped `MAP_SHARED`,
//!   holding a byte ring (requests from the connected peer), a completed-request
//!   counter, the first error, the fetched values of atomics, and a response area where
//!   RDMA READ data comes back. `ibv_modify_qp` to RTR maps the peer's inbox (found by
//!   `dest_qp_num`) as this QP's *outbox*.
//! * **`post_send`** (through `ctx->ops.post_send`, like real providers) copies the
//!   gathered bytes of an RDMA WRITE, or the add of a FETCH_AND_ADD, into the peer's
//!   ring; an RDMA READ puts only its request there and reserves room for its data in
//!   the response area (the requester is that area's only allocator: it frees each
//!   reservation when the read's completion is polled). `ENOMEM` when the ring, the
//!   response area or the send queue is full (as a full send queue on hardware).
//!   WRITE data is copied at post time, earlier than a NIC would read it. Local
//!   buffers are checked against their registration (an RDMA READ's or atomic's
//!   destination needs `IBV_ACCESS_LOCAL_WRITE`): `IBV_WC_LOC_PROT_ERR` otherwise,
//!   `IBV_WC_LOC_LEN_ERR` past `max_msg_sz`.
//! * **Memory regions**: `ibv_reg_mr` registers host memory as is;
//!   `ibv_reg_dmabuf_mr` maps the dma-buf fd at the offset (a memfd stands in for a
//!   dma-buf) and translates the MR's IOVAs to that mapping on both sides of the data
//!   path.
//! * **The responder** is one thread per device context (the "NIC"), which applies
//!   its QPs' incoming requests in order to memory registered in *this* process
//!   (found by rkey, bounds and access checked): `memcpy` for a WRITE, an atomic
//!   add for a FETCH_AND_ADD (old value returned), a `memcpy` into the requester's
//!   response area for an RDMA READ (needs `IBV_ACCESS_REMOTE_READ`). Requests apply in
//!   posting order, so a READ returns the bytes of the same QP's earlier WRITEs, as on
//!   an RC queue pair. A bad rkey, range or access puts the QP in error:
//!   `IBV_WC_REM_ACCESS_ERR` for that request, `IBV_WC_WR_FLUSH_ERR` after.
//! * **`poll_cq`** (through `ctx->ops.poll_cq`) turns requests the peer applied into
//!   completions, in order, copying a successful READ's data from the response area
//!   into its scatter list first (its bytes are in place once its completion is
//!   returned, as with a NIC); a peer whose QP was destroyed or whose process is gone
//!   completes everything pending with `IBV_WC_RETRY_EXC_ERR` (what an RC QP reports
//!   once its retries are exhausted).
//!
//! **Switches** (environment, read when the library is first used):
//!
//! | variable | effect |
//! |---|---|
//! | `COMMHAL_IBVERBS_STUB_DIR` | directory of the shared files (default: the temp dir) |
//! | `COMMHAL_IBVERBS_STUB_DEVICES` | number of devices listed (default 1; 0 = none) |
//! | `COMMHAL_IBVERBS_STUB_LINK` | `roce` (default: Ethernet, GIDs, LID 0) or `ib` (InfiniBand, LID 1) |
//! | `COMMHAL_IBVERBS_STUB_FAULT` | `wc-error`: every request fails at the responder with `IBV_WC_REM_ACCESS_ERR`; `dead-peer`: every peer looks gone (`IBV_WC_RETRY_EXC_ERR`); `no-atomics`: the device reports `IBV_ATOMIC_NONE` and refuses atomics; `dmabuf-refused`: `ibv_reg_dmabuf_mr` fails with `EOPNOTSUPP` |
//!
//! They are declared in `hal/src/settings/ibverbs.rs`; a value outside its declaration
//! is reported on stderr and the default used.
//!
//! What it is not: an RDMA device. It checks the ABI the backend speaks and the
//! backend's handling of completions and errors; timing, ordering of data placement
//! and every hardware failure mode are not modelled.

#![allow(missing_docs, clippy::missing_safety_doc)]

#[path = "../../src/sys/abi.rs"]
mod abi;

use std::collections::{HashMap, VecDeque};
use std::ffi::{CString, c_char, c_int, c_void};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use abi::*;
use commhal_hal::settings::SettingError;
use commhal_hal::settings::ibverbs::{STUB_DEVICES, STUB_DIR, STUB_FAULT, STUB_LINK};

const MAGIC: u64 = 0x6962_7374_7562_0001;
const RING: u64 = 2 << 20;
const DATA_OFF: usize = 16 << 10;
/// The response area (RDMA READ data), after the ring.
const RESP_OFF: usize = DATA_OFF + RING as usize;
const RESP: u64 = 2 << 20;
const RESULTS_OFF: usize = 64;
const SLOTS: u64 = 1024;
const MAX_MSG: u32 = 512 << 10;
const MSG_HDR: u64 = 32;
const STUB_GID_V2: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1];
const STUB_GID_LINK_LOCAL: [u8; 16] = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const STUB_LID: u16 = 1;
const KIND_WRITE: u32 = 0;
const KIND_FETCH_ADD: u32 = 1;
const KIND_READ: u32 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    WcError,
    DeadPeer,
    NoAtomics,
    DmabufRefused,
}

#[derive(Debug)]
struct Config {
    dir: PathBuf,
    devices: usize,
    ib: bool,
    fault: Fault,
}

/// A switch's value, or its default when the value is invalid. The library has no way
/// to refuse it (its entry points are libibverbs'), so it says so on stderr, once per
/// switch: `tracing` in a dlopened library has no subscriber.
fn or_default<T>(r: Result<T, SettingError>, default: T) -> T {
    r.unwrap_or_else(|e| {
        eprintln!("commhal-ibverbs-stub: {e}; using the default");
        default
    })
}

fn config() -> &'static Config {
    static C: OnceLock<Config> = OnceLock::new();
    C.get_or_init(|| Config {
        dir: STUB_DIR
            .text()
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir),
        devices: or_default(
            STUB_DEVICES.number_or_default(),
            STUB_DEVICES.default_number(),
        ) as usize,
        ib: or_default(STUB_LINK.choice(), None) == Some("ib"),
        fault: match or_default(STUB_FAULT.choice(), None) {
            Some("wc-error") => Fault::WcError,
            Some("dead-peer") => Fault::DeadPeer,
            Some("no-atomics") => Fault::NoAtomics,
            Some("dmabuf-refused") => Fault::DmabufRefused,
            _ => Fault::None,
        },
    })
}

// ---------------------------------------------------------------------------------
// Shared files

/// A `MAP_SHARED` mapping of a whole file, unmapped on drop.
#[derive(Debug)]
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; every access to its header words goes
// through atomics and ring bytes are handed over by release/acquire of head/tail.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    fn open(path: &std::path::Path, len: usize, create: bool) -> Option<Mapping> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(path)
            .ok()?;
        if create && file.metadata().ok()?.len() < len as u64 {
            file.set_len(len as u64).ok()?;
        }
        if file.metadata().ok()?.len() < len as u64 {
            return None;
        }
        use std::os::fd::AsRawFd;
        // SAFETY: mapping `len` bytes of a file at least that long, shared, at an
        // address the kernel picks; the fd may be closed afterwards.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        Some(Mapping { ptr: p.cast(), len })
    }

    fn word(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off.is_multiple_of(8) && off + 8 <= self.len);
        // SAFETY: in bounds and 8-aligned (asserted; mmap is page aligned); shared
        // words are only ever accessed atomically.
        unsafe { &*(self.ptr.add(off) as *const AtomicU64) }
    }

    /// Copy `src` into the ring at byte position `pos` (modulo the ring size).
    fn ring_write(&self, pos: u64, src: &[u8]) {
        self.area_write(DATA_OFF, RING, pos, src);
    }

    /// Copy ring bytes at `pos` into `dst`.
    fn ring_read(&self, pos: u64, dst: &mut [u8]) {
        self.area_read(DATA_OFF, RING, pos, dst);
    }

    /// Copy `src` into the circular area of `size` bytes at `base` (the ring or the
    /// response area), at byte position `pos` modulo `size`.
    fn area_write(&self, base: usize, size: u64, pos: u64, src: &[u8]) {
        assert!(base + size as usize <= self.len, "area outside the mapping");
        let mut done = 0usize;
        while done < src.len() {
            let at = ((pos + done as u64) % size) as usize;
            let n = (src.len() - done).min(size as usize - at);
            // SAFETY: base + at + n <= base + size <= the mapping's length (asserted);
            // the writer owns these bytes (ring: between tail and head + free space;
            // response area: a reservation of the read being answered).
            unsafe {
                std::ptr::copy_nonoverlapping(src.as_ptr().add(done), self.ptr.add(base + at), n)
            };
            done += n;
        }
    }

    /// Copy bytes of the circular area of `size` bytes at `base` at position `pos`
    /// into `dst`.
    fn area_read(&self, base: usize, size: u64, pos: u64, dst: &mut [u8]) {
        assert!(base + size as usize <= self.len, "area outside the mapping");
        let mut done = 0usize;
        while done < dst.len() {
            let at = ((pos + done as u64) % size) as usize;
            let n = (dst.len() - done).min(size as usize - at);
            // SAFETY: in bounds as in `area_write`; the bytes were published by the
            // writer's release (ring: of head; response area: of the completed count).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.ptr.add(base + at),
                    dst.as_mut_ptr().add(done),
                    n,
                )
            };
            done += n;
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned; nothing borrows the
        // mapping past its owner's life.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

// Inbox header words.
const H_MAGIC: usize = 0;
const H_OWNER: usize = 8; // pid << 8 | state (1 alive, 2 destroyed)
const H_HEAD: usize = 16;
const H_TAIL: usize = 24;
const H_COMPLETED: usize = 32;
const H_ERR: usize = 40; // (seq + 1) << 8 | status, 0 = none
const INBOX_LEN: usize = RESP_OFF + RESP as usize;

fn inbox_path(qpn: u32) -> PathBuf {
    config().dir.join(format!("commhal-ibstub-{qpn}"))
}

fn next_qpn() -> Option<u32> {
    static COUNTER: OnceLock<Option<Mapping>> = OnceLock::new();
    let m = COUNTER
        .get_or_init(|| Mapping::open(&config().dir.join("commhal-ibstub-qpn"), 4096, true))
        .as_ref()?;
    let n = m.word(0).fetch_add(1, Ordering::Relaxed);
    Some(((n % 0xff_fff0) + 0x10) as u32)
}

fn pid_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    if r != 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EPERM) {
        return false;
    }
    // An exited process not yet reaped by its parent (a zombie) still answers kill.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !matches!(
            stat.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().chars().next()),
            Some(Some('Z' | 'X'))
        ),
        Err(_) => true,
    }
}

// ---------------------------------------------------------------------------------
// Memory regions (process-wide: rkeys are looked up by the responder thread)

/// A registered region: `addr..addr+len` as work requests name it (the host address
/// for `ibv_reg_mr`, the IOVA for `ibv_reg_dmabuf_mr`), its bytes at host address
/// `base` in this process.
#[derive(Debug, Clone, Copy)]
struct MrInfo {
    addr: u64,
    len: u64,
    base: u64,
    access: c_int,
}

fn mrs() -> &'static Mutex<HashMap<u32, MrInfo>> {
    static M: OnceLock<Mutex<HashMap<u32, MrInfo>>> = OnceLock::new();
    M.get_or_init(Default::default)
}

/// The host address of `addr..addr+len` in the region of `key`, if it lies inside
/// and the region allows `need`.
fn lookup(key: u32, addr: u64, len: u64, need: c_int) -> Option<u64> {
    let map = mrs().lock().ok()?;
    find(&map, key, addr, len, need)
}

/// [`lookup`] in a locked region table.
fn find(map: &HashMap<u32, MrInfo>, key: u32, addr: u64, len: u64, need: c_int) -> Option<u64> {
    let mr = map.get(&key)?;
    let end = addr.checked_add(len)?;
    (addr >= mr.addr && end <= mr.addr + mr.len && (need == 0 || mr.access & need != 0))
        .then_some(mr.base + (addr - mr.addr))
}

// ---------------------------------------------------------------------------------
// Objects handed to the caller. Each starts with the C struct it stands for.

#[repr(C)]
struct StubDevice {
    _byte: u8,
    name: CString,
}

#[repr(C)]
struct StubContext {
    c: ibv_context,
    inner: Arc<CtxInner>,
}

#[derive(Default)]
struct CtxInner {
    qps: Mutex<Vec<Arc<QpInner>>>,
    stop: AtomicBool,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

#[repr(C)]
struct StubPd {
    c: ibv_pd,
}

#[repr(C)]
struct StubMr {
    c: ibv_mr,
    /// The dma-buf's mapping (`ibv_reg_dmabuf_mr`), unmapped at deregistration.
    _dmabuf: Option<Mapping>,
}

#[repr(C)]
struct StubCq {
    c: ibv_cq,
    qps: Mutex<Vec<Arc<QpInner>>>,
}

#[repr(C)]
struct StubQp {
    c: ibv_qp,
    inner: Arc<QpInner>,
    cq: *mut StubCq,
    ctx: Arc<CtxInner>,
}

struct Pending {
    wr_id: u64,
    seq: u64,
    opcode: u32,
    signaled: bool,
    /// A FETCH_AND_ADD's 8-byte result buffer (host address).
    result: Option<u64>,
    /// A posted RDMA READ's data: where it comes back and where it goes.
    read: Option<ReadBack>,
    byte_len: u32,
    local_err: u32,
}

/// An RDMA READ's reservation in the peer inbox's response area and its scatter list.
struct ReadBack {
    /// Byte position of the reservation (modulo `RESP`).
    pos: u64,
    /// Bytes reserved (the read's length rounded up to 8).
    reserved: u64,
    /// Host addresses and lengths of the destination sges, in order.
    dst: Vec<(u64, u32)>,
}

struct Outbox {
    peer: Mapping,
    next_seq: u64,
    pending: VecDeque<Pending>,
    dead_reported: bool,
    /// Response-area positions: reserved up to `resp_head`, freed up to `resp_tail`.
    resp_head: u64,
    resp_tail: u64,
}

struct QpInner {
    qpn: u32,
    inbox: Mapping,
    out: Mutex<Option<Outbox>>,
    sig_all: bool,
    max_send_wr: usize,
}

impl Drop for QpInner {
    fn drop(&mut self) {
        let pid = u64::from(std::process::id());
        self.inbox
            .word(H_OWNER)
            .store(pid << 8 | 2, Ordering::Release);
        let _ = std::fs::remove_file(inbox_path(self.qpn));
    }
}

static DEVICES: OnceLock<Vec<usize>> = OnceLock::new();

fn devices() -> &'static [usize] {
    DEVICES.get_or_init(|| {
        (0..config().devices)
            .map(|i| {
                let d = Box::new(StubDevice {
                    _byte: 0,
                    name: CString::new(format!("commhal_stub{i}")).unwrap_or_default(),
                });
                Box::into_raw(d) as usize
            })
            .collect()
    })
}

// ---------------------------------------------------------------------------------
// Exported entry points

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_get_device_list(num: *mut c_int) -> *mut *mut ibv_device {
    let devs = devices();
    if !num.is_null() {
        // SAFETY: the caller passes a writable int (or null, checked).
        unsafe { *num = devs.len() as c_int };
    }
    let mut v: Vec<*mut ibv_device> = devs.iter().map(|&d| d as *mut ibv_device).collect();
    v.push(std::ptr::null_mut());
    Box::into_raw(v.into_boxed_slice()) as *mut *mut ibv_device
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    if list.is_null() {
        return;
    }
    let n = devices().len() + 1;
    // SAFETY: `list` came from ibv_get_device_list: a boxed slice of n pointers.
    drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(list, n)) });
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_get_device_name(dev: *mut ibv_device) -> *const c_char {
    // SAFETY: `dev` is one of the StubDevices this library listed (never freed).
    unsafe { (*(dev as *mut StubDevice)).name.as_ptr() }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_open_device(dev: *mut ibv_device) -> *mut ibv_context {
    let inner = Arc::new(CtxInner::default());
    let ctx = Box::new(StubContext {
        c: ibv_context {
            device: dev,
            ops: ibv_context_ops {
                _before_poll_cq: [std::ptr::null_mut(); 11],
                poll_cq: Some(poll_cq),
                _between: [std::ptr::null_mut(); 13],
                post_send: Some(post_send),
                _after_post_send: [std::ptr::null_mut(); 6],
            },
        },
        inner: inner.clone(),
    });
    let thread_inner = inner.clone();
    let spawned = std::thread::Builder::new()
        .name("ibstub-responder".into())
        .spawn(move || responder(&thread_inner));
    match spawned {
        Ok(h) => {
            if let Ok(mut t) = inner.thread.lock() {
                *t = Some(h);
            }
            Box::into_raw(ctx) as *mut ibv_context
        }
        Err(_) => std::ptr::null_mut(),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_close_device(ctx: *mut ibv_context) -> c_int {
    // SAFETY: `ctx` came from ibv_open_device and is closed once.
    let ctx = unsafe { Box::from_raw(ctx as *mut StubContext) };
    ctx.inner.stop.store(true, Ordering::Release);
    if let Some(h) = ctx.inner.thread.lock().ok().and_then(|mut t| t.take()) {
        let _ = h.join();
    }
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_device(
    _ctx: *mut ibv_context,
    attr: *mut ibv_device_attr,
) -> c_int {
    // SAFETY: `attr` points to a caller-owned ibv_device_attr; all-zero is valid.
    let a = unsafe {
        std::ptr::write_bytes(attr, 0, 1);
        &mut *attr
    };
    a.max_qp = 1 << 16;
    a.max_qp_wr = SLOTS as c_int;
    a.max_sge = 4;
    a.max_cqe = 1 << 16;
    a.max_qp_rd_atom = 16;
    a.max_qp_init_rd_atom = 16;
    a.atomic_cap = if config().fault == Fault::NoAtomics {
        IBV_ATOMIC_NONE
    } else {
        1
    };
    a.phys_port_cnt = 1;
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_port(
    _ctx: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    if port != 1 {
        return libc::EINVAL;
    }
    // SAFETY: `attr` points to a caller-owned ibv_port_attr; all-zero is valid.
    let a = unsafe {
        std::ptr::write_bytes(attr, 0, 1);
        &mut *attr
    };
    a.state = IBV_PORT_ACTIVE;
    a.max_mtu = 5;
    a.active_mtu = IBV_MTU_1024;
    a.gid_tbl_len = 2;
    a.max_msg_sz = MAX_MSG;
    a.pkey_tbl_len = 1;
    if config().ib {
        a.link_layer = IBV_LINK_LAYER_INFINIBAND;
        a.lid = STUB_LID;
        a.sm_lid = STUB_LID;
    } else {
        a.link_layer = IBV_LINK_LAYER_ETHERNET;
    }
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_gid(
    _ctx: *mut ibv_context,
    port: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    let raw = match (port, index) {
        (1, 0) => STUB_GID_LINK_LOCAL,
        (1, 1) if !config().ib => STUB_GID_V2,
        (1, 1) => [0; 16],
        _ => return libc::EINVAL,
    };
    // SAFETY: `gid` points to a caller-owned ibv_gid.
    unsafe { (*gid).raw = raw };
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    Box::into_raw(Box::new(StubPd {
        c: ibv_pd {
            context: ctx,
            handle: 0,
        },
    })) as *mut ibv_pd
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    // SAFETY: `pd` came from ibv_alloc_pd and is freed once.
    drop(unsafe { Box::from_raw(pd as *mut StubPd) });
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    static NEXT_KEY: AtomicU32 = AtomicU32::new(0x100);
    if addr.is_null() || length == 0 {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    if access & IBV_ACCESS_REMOTE_ATOMIC != 0 && config().fault == Fault::NoAtomics {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    let key = NEXT_KEY.fetch_add(1, Ordering::Relaxed);
    let info = MrInfo {
        addr: addr as u64,
        len: length as u64,
        base: addr as u64,
        access,
    };
    // SAFETY: `pd` is a live StubPd from ibv_alloc_pd (the caller's contract).
    unsafe { new_mr(pd, key, info, None) }
}

/// Record MR `key` (its range and where its bytes live) and return its `ibv_mr`;
/// null with `errno` set when the table is unusable.
///
/// # Safety
/// `pd` is a live StubPd from ibv_alloc_pd.
unsafe fn new_mr(pd: *mut ibv_pd, key: u32, info: MrInfo, dmabuf: Option<Mapping>) -> *mut ibv_mr {
    let (addr, length) = (info.addr, info.len);
    let Ok(mut map) = mrs().lock() else {
        set_errno(libc::ENOMEM);
        return std::ptr::null_mut();
    };
    map.insert(key, info);
    // SAFETY: `pd` is a live StubPd from ibv_alloc_pd.
    let context = unsafe { (*pd).context };
    Box::into_raw(Box::new(StubMr {
        c: ibv_mr {
            context,
            pd,
            addr: addr as usize as *mut c_void,
            length: length as usize,
            handle: key,
            lkey: key,
            rkey: key,
        },
        _dmabuf: dmabuf,
    })) as *mut ibv_mr
}

/// `ibv_reg_dmabuf_mr` (rdma-core >= 34): `length` bytes at `offset` of the dma-buf
/// `fd`, named `iova..iova+length` by work requests. The stub maps the fd
/// `MAP_SHARED` at the offset (a memfd stands in for a dma-buf), so the data path
/// reads and writes the file's pages; like the kernel, which takes its own dma-buf
/// reference, the mapping keeps the file alive after the caller closes `fd`.
/// `COMMHAL_IBVERBS_STUB_FAULT=dmabuf-refused` fails it with `EOPNOTSUPP` (a
/// provider without dma-buf support). Absent from the `stub-nodmabuf` build (cfg
/// `stub_no_dmabuf`), which stands for a libibverbs older than rdma-core 34.
#[cfg(not(stub_no_dmabuf))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_reg_dmabuf_mr(
    pd: *mut ibv_pd,
    offset: u64,
    length: usize,
    iova: u64,
    fd: c_int,
    access: c_int,
) -> *mut ibv_mr {
    if config().fault == Fault::DmabufRefused {
        set_errno(libc::EOPNOTSUPP);
        return std::ptr::null_mut();
    }
    if length == 0 || fd < 0 || iova.checked_add(length as u64).is_none() {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    if access & IBV_ACCESS_REMOTE_ATOMIC != 0 && config().fault == Fault::NoAtomics {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    // SAFETY: sysconf only reads a system constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    let skip = offset % page;
    let Some(map_len) = (length as u64).checked_add(skip) else {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    };
    // SAFETY: maps `map_len` bytes of the caller's fd from a page-aligned offset at an
    // address the kernel picks; a range past the file's end faults only when touched
    // and the responder touches only registered bytes.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_len as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            (offset - skip) as libc::off_t,
        )
    };
    if p == libc::MAP_FAILED {
        set_errno(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINVAL),
        );
        return std::ptr::null_mut();
    }
    let mapping = Mapping {
        ptr: p.cast(),
        len: map_len as usize,
    };
    // The file must cover the registered bytes (the kernel checks the dma-buf size).
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: `fd` is open (mmap succeeded on it); `st` is writable.
    let r = unsafe { libc::fstat(fd, st.as_mut_ptr()) };
    // SAFETY: fstat filled it on success; all-zero is valid otherwise.
    let size = unsafe { st.assume_init() }.st_size.max(0) as u64;
    if r != 0 || size < offset + length as u64 {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    static NEXT_KEY: AtomicU32 = AtomicU32::new(0x8000_0000);
    let key = NEXT_KEY.fetch_add(1, Ordering::Relaxed);
    let info = MrInfo {
        addr: iova,
        len: length as u64,
        base: mapping.ptr as u64 + skip,
        access,
    };
    // SAFETY: `pd` is a live StubPd from ibv_alloc_pd (the caller's contract).
    unsafe { new_mr(pd, key, info, Some(mapping)) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    // SAFETY: `mr` came from ibv_reg_mr and is freed once.
    let mr = unsafe { Box::from_raw(mr as *mut StubMr) };
    if let Ok(mut map) = mrs().lock() {
        map.remove(&mr.c.rkey);
    }
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_create_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut c_void,
    _comp_vector: c_int,
) -> *mut ibv_cq {
    Box::into_raw(Box::new(StubCq {
        c: ibv_cq {
            context: ctx,
            channel,
            cq_context,
            handle: 0,
            cqe,
        },
        qps: Mutex::new(Vec::new()),
    })) as *mut ibv_cq
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    // SAFETY: `cq` came from ibv_create_cq; destroyed once.
    let cq = unsafe { Box::from_raw(cq as *mut StubCq) };
    if cq.qps.lock().map(|q| !q.is_empty()).unwrap_or(false) {
        let _ = Box::into_raw(cq);
        return libc::EBUSY;
    }
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut ibv_pd,
    init: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    // SAFETY: the caller passes a valid init attribute struct.
    let init = unsafe { &*init };
    if init.qp_type != IBV_QPT_RC || init.send_cq.is_null() {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    let Some(qpn) = next_qpn() else {
        set_errno(libc::ENOSPC);
        return std::ptr::null_mut();
    };
    let path = inbox_path(qpn);
    let _ = std::fs::remove_file(&path);
    let Some(inbox) = Mapping::open(&path, INBOX_LEN, true) else {
        set_errno(libc::ENOSPC);
        return std::ptr::null_mut();
    };
    inbox.word(H_MAGIC).store(MAGIC, Ordering::Relaxed);
    let pid = u64::from(std::process::id());
    inbox.word(H_OWNER).store(pid << 8 | 1, Ordering::Release);
    let inner = Arc::new(QpInner {
        qpn,
        inbox,
        out: Mutex::new(None),
        sig_all: init.sq_sig_all != 0,
        max_send_wr: (init.cap.max_send_wr as usize).clamp(1, SLOTS as usize),
    });
    // SAFETY: `pd` is a live StubPd whose context is a live StubContext.
    let (context, ctx_inner) = unsafe {
        let context = (*pd).context;
        (context, (*(context as *mut StubContext)).inner.clone())
    };
    let cq = init.send_cq as *mut StubCq;
    // SAFETY: `send_cq` is a live StubCq (checked non-null above).
    if let Ok(mut q) = unsafe { &*cq }.qps.lock() {
        q.push(inner.clone());
    }
    if let Ok(mut q) = ctx_inner.qps.lock() {
        q.push(inner.clone());
    }
    Box::into_raw(Box::new(StubQp {
        c: ibv_qp {
            context,
            qp_context: init.qp_context,
            pd,
            send_cq: init.send_cq,
            recv_cq: init.recv_cq,
            srq: std::ptr::null_mut(),
            handle: qpn,
            qp_num: qpn,
        },
        inner,
        cq,
        ctx: ctx_inner,
    })) as *mut ibv_qp
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    // SAFETY: `qp` came from ibv_create_qp; destroyed once, before its CQ.
    let qp = unsafe { Box::from_raw(qp as *mut StubQp) };
    let me = Arc::as_ptr(&qp.inner);
    // SAFETY: the CQ outlives its QPs (ibv_destroy_cq refuses while QPs remain).
    if let Ok(mut q) = unsafe { &*qp.cq }.qps.lock() {
        q.retain(|x| Arc::as_ptr(x) != me);
    }
    if let Ok(mut q) = qp.ctx.qps.lock() {
        q.retain(|x| Arc::as_ptr(x) != me);
    }
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> c_int {
    // SAFETY: `qp` is a live StubQp and `attr` a valid attribute struct.
    let (qp, attr) = unsafe { (&*(qp as *mut StubQp), &*attr) };
    if mask & IBV_QP_STATE == 0 {
        return libc::EINVAL;
    }
    match attr.qp_state {
        IBV_QPS_INIT => {
            if mask & IBV_QP_PORT != 0 && attr.port_num != 1 {
                return libc::EINVAL;
            }
            0
        }
        IBV_QPS_RTR => {
            let need = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
            if mask & need != need {
                return libc::EINVAL;
            }
            let ah = &attr.ah_attr;
            let addressed = if config().ib {
                ah.dlid == STUB_LID
            } else {
                ah.is_global == 1 && ah.grh.dgid.raw == STUB_GID_V2
                    || ah.grh.dgid.raw == STUB_GID_LINK_LOCAL
            };
            if !addressed {
                return libc::EINVAL;
            }
            let Some(peer) = Mapping::open(&inbox_path(attr.dest_qp_num), INBOX_LEN, false) else {
                return libc::EINVAL;
            };
            if peer.word(H_MAGIC).load(Ordering::Acquire) != MAGIC {
                return libc::EINVAL;
            }
            if let Ok(mut out) = qp.inner.out.lock() {
                *out = Some(Outbox {
                    peer,
                    next_seq: 0,
                    pending: VecDeque::new(),
                    dead_reported: false,
                    resp_head: 0,
                    resp_tail: 0,
                });
            }
            0
        }
        IBV_QPS_RTS => {
            let ready = qp.inner.out.lock().map(|o| o.is_some()).unwrap_or(false);
            if ready { 0 } else { libc::EINVAL }
        }
        _ => libc::EINVAL,
    }
}

fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

// ---------------------------------------------------------------------------------
// Data path

unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: `qp` is a live StubQp (the caller found this function through its
    // context's ops table).
    let qp = unsafe { &*(qp as *mut StubQp) };
    let Ok(mut guard) = qp.inner.out.lock() else {
        return libc::EINVAL;
    };
    let fail = |w: *mut ibv_send_wr, e: c_int| {
        if !bad.is_null() {
            // SAFETY: `bad` is a writable out-pointer (checked non-null).
            unsafe { *bad = w };
        }
        e
    };
    let Some(out) = guard.as_mut() else {
        return fail(wr, libc::EINVAL);
    };
    let mut cur = wr;
    while !cur.is_null() {
        // SAFETY: the caller's work-request chain is valid until post_send returns.
        let w = unsafe { &*cur };
        if out.pending.len() >= qp.inner.max_send_wr {
            return fail(cur, libc::ENOMEM);
        }
        let signaled = qp.inner.sig_all || w.send_flags & IBV_SEND_SIGNALED != 0;
        let sges: &[ibv_sge] = if w.num_sge > 0 && !w.sg_list.is_null() {
            // SAFETY: sg_list holds num_sge entries (checked non-null, count > 0).
            unsafe { std::slice::from_raw_parts(w.sg_list, w.num_sge as usize) }
        } else {
            &[]
        };
        let total: u64 = sges.iter().map(|s| u64::from(s.length)).sum();
        let mut p = Pending {
            wr_id: w.wr_id,
            seq: out.next_seq,
            opcode: w.opcode,
            signaled,
            result: None,
            read: None,
            byte_len: total as u32,
            local_err: 0,
        };
        let (kind, len, raddr, rkey, add) = match w.opcode {
            IBV_WR_RDMA_WRITE => (KIND_WRITE, total, w.wr.remote_addr, w.rdma_rkey(), 0),
            IBV_WR_ATOMIC_FETCH_AND_ADD => {
                if sges.len() != 1 || sges[0].length != 8 {
                    p.local_err = IBV_WC_LOC_LEN_ERR;
                }
                (
                    KIND_FETCH_ADD,
                    0,
                    w.wr.remote_addr,
                    w.wr.rkey,
                    w.wr.compare_add,
                )
            }
            // The length travels in `add`; the data comes back in the response area.
            IBV_WR_RDMA_READ => (KIND_READ, 0, w.wr.remote_addr, w.rdma_rkey(), total),
            _ => return fail(cur, libc::EINVAL),
        };
        if total > u64::from(MAX_MSG) {
            p.local_err = IBV_WC_LOC_LEN_ERR;
        }
        // Host addresses of the gathered (WRITE) or scattered (READ) bytes: the sges
        // name MR addresses / IOVAs. What the NIC writes locally needs local write
        // access, as on hardware.
        let need = if kind == KIND_WRITE {
            0
        } else {
            IBV_ACCESS_LOCAL_WRITE
        };
        let mut local = Vec::with_capacity(sges.len());
        for s in sges {
            match lookup(s.lkey, s.addr, u64::from(s.length), need) {
                Some(h) if kind == KIND_FETCH_ADD => p.result = Some(h),
                Some(h) => local.push((h, s.length)),
                None => p.local_err = IBV_WC_LOC_PROT_ERR,
            }
        }
        if p.local_err == 0 && !peer_gone(out) {
            let size = MSG_HDR + len.div_ceil(8) * 8;
            let head = out.peer.word(H_HEAD).load(Ordering::Relaxed);
            let tail = out.peer.word(H_TAIL).load(Ordering::Acquire);
            let completed = out.peer.word(H_COMPLETED).load(Ordering::Acquire);
            if RING - (head - tail) < size || out.next_seq - completed >= SLOTS {
                return fail(cur, libc::ENOMEM);
            }
            let reserve = if kind == KIND_READ {
                add.div_ceil(8) * 8
            } else {
                0
            };
            if RESP - (out.resp_head - out.resp_tail) < reserve {
                return fail(cur, libc::ENOMEM);
            }
            let mut hdr = [0u8; MSG_HDR as usize];
            hdr[0..4].copy_from_slice(&kind.to_le_bytes());
            hdr[4..8].copy_from_slice(&(len as u32).to_le_bytes());
            hdr[8..16].copy_from_slice(&raddr.to_le_bytes());
            hdr[16..20].copy_from_slice(&rkey.to_le_bytes());
            hdr[20..24].copy_from_slice(&((out.resp_head % RESP) as u32).to_le_bytes());
            hdr[24..32].copy_from_slice(&add.to_le_bytes());
            if kind == KIND_READ {
                p.read = Some(ReadBack {
                    pos: out.resp_head,
                    reserved: reserve,
                    dst: std::mem::take(&mut local),
                });
                out.resp_head += reserve;
            }
            out.peer.ring_write(head, &hdr);
            let mut pos = head + MSG_HDR;
            if kind == KIND_WRITE {
                for &(h, n) in &local {
                    // SAFETY: the sge lies in a registered region (checked above, `h` its
                    // host address) that the caller keeps alive while the request is
                    // outstanding.
                    let src =
                        unsafe { std::slice::from_raw_parts(h as usize as *const u8, n as usize) };
                    out.peer.ring_write(pos, src);
                    pos += u64::from(n);
                }
            }
            out.peer.word(H_HEAD).store(head + size, Ordering::Release);
            p.seq = out.next_seq;
            out.next_seq += 1;
        } else {
            p.seq = u64::MAX;
        }
        out.pending.push_back(p);
        cur = w.next;
    }
    0
}

fn peer_gone(out: &Outbox) -> bool {
    if config().fault == Fault::DeadPeer {
        return true;
    }
    let owner = out.peer.word(H_OWNER).load(Ordering::Acquire);
    owner & 0xff != 1 || !pid_alive((owner >> 8) as u32)
}

unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: `cq` is a live StubCq (found through its context's ops table).
    let cq = unsafe { &*(cq as *mut StubCq) };
    let Ok(qps) = cq.qps.lock().map(|q| q.clone()) else {
        return -1;
    };
    let mut got = 0usize;
    let n = n.max(0) as usize;
    for qp in qps {
        let Ok(mut guard) = qp.out.lock() else {
            continue;
        };
        let Some(out) = guard.as_mut() else {
            continue;
        };
        let completed = out.peer.word(H_COMPLETED).load(Ordering::Acquire);
        let err = out.peer.word(H_ERR).load(Ordering::Acquire);
        let gone = !out.pending.is_empty() && peer_gone(out);
        while got < n {
            let Some(p) = out.pending.front() else {
                break;
            };
            let status = if p.local_err != 0 {
                p.local_err
            } else if p.seq != u64::MAX && p.seq < completed {
                match err {
                    0 => IBV_WC_SUCCESS,
                    e if p.seq + 1 < e >> 8 => IBV_WC_SUCCESS,
                    e if p.seq + 1 == e >> 8 => (e & 0xff) as u32,
                    _ => IBV_WC_WR_FLUSH_ERR,
                }
            } else if gone {
                if out.dead_reported {
                    IBV_WC_WR_FLUSH_ERR
                } else {
                    out.dead_reported = true;
                    IBV_WC_RETRY_EXC_ERR
                }
            } else {
                break;
            };
            if status == IBV_WC_SUCCESS
                && let Some(addr) = p.result
            {
                let v = out
                    .peer
                    .word(RESULTS_OFF + 8 * (p.seq % SLOTS) as usize)
                    .load(Ordering::Acquire);
                // SAFETY: `addr..addr+8` is registered memory (checked at post time)
                // the caller keeps alive while the request is outstanding.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        v.to_le_bytes().as_ptr(),
                        addr as usize as *mut u8,
                        8,
                    )
                };
            }
            if status == IBV_WC_SUCCESS
                && let Some(r) = &p.read
            {
                let mut pos = r.pos;
                for &(h, n) in &r.dst {
                    // SAFETY: `h..h+n` is registered memory with local write access
                    // (checked at post time) the caller keeps alive while the request
                    // is outstanding; nothing else writes it meanwhile.
                    let d = unsafe {
                        std::slice::from_raw_parts_mut(h as usize as *mut u8, n as usize)
                    };
                    out.peer.area_read(RESP_OFF, RESP, pos, d);
                    pos += u64::from(n);
                }
            }
            // A READ's reservation is freed with its completion (in posting order).
            let freed = p.read.as_ref().map(|r| r.pos + r.reserved);
            if p.signaled || status != IBV_WC_SUCCESS {
                let e = ibv_wc {
                    wr_id: p.wr_id,
                    status,
                    opcode: match p.opcode {
                        IBV_WR_ATOMIC_FETCH_AND_ADD => IBV_WC_FETCH_ADD,
                        IBV_WR_RDMA_READ => IBV_WC_RDMA_READ,
                        _ => IBV_WC_RDMA_WRITE,
                    },
                    byte_len: p.byte_len,
                    qp_num: qp.qpn,
                    ..Default::default()
                };
                // SAFETY: the caller's array holds `n` entries and got < n.
                unsafe { wc.add(got).write(e) };
                got += 1;
            }
            out.pending.pop_front();
            if let Some(t) = freed {
                out.resp_tail = t;
            }
        }
    }
    got as c_int
}

/// The emulated NIC of one context: applies every QP's incoming requests in order.
fn responder(ctx: &CtxInner) {
    let mut idle = 0u32;
    while !ctx.stop.load(Ordering::Acquire) {
        let qps = ctx.qps.lock().map(|q| q.clone()).unwrap_or_default();
        let mut progress = false;
        for qp in &qps {
            while apply_one(&qp.inbox) {
                progress = true;
            }
        }
        drop(qps);
        if progress {
            idle = 0;
        } else {
            idle = idle.saturating_add(1);
            if idle < 200 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(if idle < 2000 { 50 } else { 500 }));
            }
        }
    }
}

/// Apply the next request of `inbox`, if any. Returns whether one was applied.
fn apply_one(inbox: &Mapping) -> bool {
    let tail = inbox.word(H_TAIL).load(Ordering::Relaxed);
    let head = inbox.word(H_HEAD).load(Ordering::Acquire);
    if tail == head {
        return false;
    }
    let mut hdr = [0u8; MSG_HDR as usize];
    inbox.ring_read(tail, &mut hdr);
    let word = |r: std::ops::Range<usize>| {
        let mut b = [0u8; 8];
        b[..r.len()].copy_from_slice(&hdr[r]);
        u64::from_le_bytes(b)
    };
    let (kind, len, raddr, rkey, add) = (
        word(0..4) as u32,
        word(4..8),
        word(8..16),
        word(16..20) as u32,
        word(24..32),
    );
    let seq = inbox.word(H_COMPLETED).load(Ordering::Relaxed);
    let in_error = inbox.word(H_ERR).load(Ordering::Relaxed) != 0;
    let mut status = 0u32;
    // Held while the request touches registered memory: an `ibv_dereg_mr` (its owner
    // about to free that memory) waits until the request is done, and later requests
    // find the region gone (a remote access error, as on a NIC, never a crash).
    let mrs = mrs().lock().unwrap_or_else(|p| p.into_inner());
    let lookup = |key: u32, addr: u64, len: u64, need: c_int| find(&mrs, key, addr, len, need);
    if !in_error {
        if config().fault == Fault::WcError {
            status = IBV_WC_REM_ACCESS_ERR;
        } else if kind == KIND_WRITE {
            match lookup(rkey, raddr, len, IBV_ACCESS_REMOTE_WRITE) {
                Some(dst) if len > 0 => {
                    // SAFETY: dst..dst+len lies in memory registered in this process
                    // with remote write access (checked by `lookup`), which stays
                    // registered, hence allocated, while `mrs` is locked.
                    let d = unsafe {
                        std::slice::from_raw_parts_mut(dst as usize as *mut u8, len as usize)
                    };
                    inbox.ring_read(tail + MSG_HDR, d);
                }
                Some(_) => {}
                None => status = IBV_WC_REM_ACCESS_ERR,
            }
        } else if kind == KIND_FETCH_ADD && config().fault != Fault::NoAtomics {
            match lookup(rkey, raddr, 8, IBV_ACCESS_REMOTE_ATOMIC) {
                Some(a) if a % 8 == 0 => {
                    // SAFETY: 8 aligned bytes of memory registered in this process with
                    // remote atomic access (registered while `mrs` is locked); peers use
                    // atomics on semaphore words too.
                    let w = unsafe { &*(a as usize as *const AtomicU64) };
                    let old = w.fetch_add(add, Ordering::AcqRel);
                    inbox
                        .word(RESULTS_OFF + 8 * (seq % SLOTS) as usize)
                        .store(old, Ordering::Release);
                }
                Some(_) => status = IBV_WC_REM_INV_REQ_ERR,
                None => status = IBV_WC_REM_ACCESS_ERR,
            }
        } else if kind == KIND_READ {
            // The requester reserved `add` bytes (<= max_msg_sz) at `resp` of this
            // inbox's response area; published by the completed count's release below.
            let resp = word(20..24);
            match lookup(rkey, raddr, add, IBV_ACCESS_REMOTE_READ) {
                _ if add > u64::from(MAX_MSG) => status = IBV_WC_REM_INV_REQ_ERR,
                Some(a) => {
                    // SAFETY: `a..a+add` lies in memory registered in this process with
                    // remote read access (checked by `lookup`), registered while `mrs`
                    // is locked.
                    let src = unsafe {
                        std::slice::from_raw_parts(a as usize as *const u8, add as usize)
                    };
                    inbox.area_write(RESP_OFF, RESP, resp, src);
                }
                None => status = IBV_WC_REM_ACCESS_ERR,
            }
        } else {
            status = IBV_WC_REM_INV_REQ_ERR;
        }
    }
    drop(mrs);
    if status != 0 {
        inbox
            .word(H_ERR)
            .store((seq + 1) << 8 | u64::from(status), Ordering::Release);
    }
    let size = MSG_HDR + len.div_ceil(8) * 8;
    inbox.word(H_TAIL).store(tail + size, Ordering::Release);
    inbox.word(H_COMPLETED).store(seq + 1, Ordering::Release);
    true
}
