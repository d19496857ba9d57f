//! Every `unsafe` line of the backend: loading libibverbs with `libloading` and thin
//! owning wrappers over the verbs objects (context, PD, MR, CQ, QP), each freed on
//! drop in dependency order (an MR or QP holds its PD, a QP its CQ, a PD its context).
//!
//! **How each call is reached.** The 17 functions of [`abi::SYMBOLS`] are exported
//! by `libibverbs.so.1` and resolved by name. `ibv_post_send` and `ibv_poll_cq` are
//! `static inline` in rdma-core's header, calling through the context's ops table;
//! this module does the same: `qp->context->ops.post_send` and
//! `cq->context->ops.poll_cq` (slots 25 and 11 of `struct ibv_context_ops`). The stub
//! provider fills that table like a real provider, so the same code path runs against
//! both. `ibv_query_port` is a macro over an inline function in newer headers; the
//! exported symbol it falls back to is called here with a buffer larger than any
//! known layout.

pub mod abi;

use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use abi::*;

/// The default library name (`COMMHAL_IBVERBS_LIB`'s declared default).
pub const DEFAULT_LIB: &str = commhal_hal::settings::ibverbs::LIB.default;

type GetDeviceList = unsafe extern "C" fn(*mut c_int) -> *mut *mut ibv_device;
type FreeDeviceList = unsafe extern "C" fn(*mut *mut ibv_device);
type GetDeviceName = unsafe extern "C" fn(*mut ibv_device) -> *const c_char;
type OpenDevice = unsafe extern "C" fn(*mut ibv_device) -> *mut ibv_context;
type CloseDevice = unsafe extern "C" fn(*mut ibv_context) -> c_int;
type QueryDevice = unsafe extern "C" fn(*mut ibv_context, *mut ibv_device_attr) -> c_int;
type QueryPort = unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int;
type QueryGid = unsafe extern "C" fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int;
type AllocPd = unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_pd;
type DeallocPd = unsafe extern "C" fn(*mut ibv_pd) -> c_int;
type RegMr = unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr;
type RegDmabufMr = unsafe extern "C" fn(*mut ibv_pd, u64, usize, u64, c_int, c_int) -> *mut ibv_mr;
type DeregMr = unsafe extern "C" fn(*mut ibv_mr) -> c_int;
type CreateCq =
    unsafe extern "C" fn(*mut ibv_context, c_int, *mut c_void, *mut c_void, c_int) -> *mut ibv_cq;
type DestroyCq = unsafe extern "C" fn(*mut ibv_cq) -> c_int;
type CreateQp = unsafe extern "C" fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp;
type DestroyQp = unsafe extern "C" fn(*mut ibv_qp) -> c_int;
type ModifyQp = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int;

/// The loaded library and its entry points. Loaded once per path and never unloaded
/// (providers may keep threads running inside it).
#[derive(Debug)]
pub struct Verbs {
    path: String,
    _lib: libloading::Library,
    get_device_list: GetDeviceList,
    free_device_list: FreeDeviceList,
    get_device_name: GetDeviceName,
    open_device: OpenDevice,
    close_device: CloseDevice,
    query_device: QueryDevice,
    query_port: QueryPort,
    query_gid: QueryGid,
    alloc_pd: AllocPd,
    dealloc_pd: DeallocPd,
    reg_mr: RegMr,
    /// `ibv_reg_dmabuf_mr`: rdma-core 34 and newer only, so looked up optionally.
    reg_dmabuf_mr: Option<RegDmabufMr>,
    dereg_mr: DeregMr,
    create_cq: CreateCq,
    destroy_cq: DestroyCq,
    create_qp: CreateQp,
    destroy_qp: DestroyQp,
    modify_qp: ModifyQp,
}

/// Why the library could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// No such library (the loader's message).
    NotFound(String),
    /// The library lacks an entry point.
    MissingSymbol(String),
}

/// The library path in effect: `explicit`, else `COMMHAL_IBVERBS_LIB`, else
/// [`DEFAULT_LIB`].
pub fn library_path(explicit: Option<&str>) -> String {
    explicit
        .map(str::to_string)
        .or_else(|| commhal_hal::settings::ibverbs::LIB.text())
        .unwrap_or_else(|| DEFAULT_LIB.to_string())
}

impl Verbs {
    /// Load (once per path) the library at `path`.
    pub fn load(path: &str) -> Result<&'static Verbs, LoadError> {
        static LOADED: OnceLock<Mutex<HashMap<PathBuf, Result<&'static Verbs, LoadError>>>> =
            OnceLock::new();
        let map = LOADED.get_or_init(Default::default);
        let mut map = map.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(PathBuf::from(path))
            .or_insert_with(|| Verbs::open(path).map(|v| &*Box::leak(Box::new(v))))
            .clone()
    }

    fn open(path: &str) -> Result<Verbs, LoadError> {
        // SAFETY: loading libibverbs (or the stub) runs its initialisers, which are
        // written to be loaded into any process.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| {
            let detail = std::error::Error::source(&e).map(|s| s.to_string());
            LoadError::NotFound(detail.unwrap_or_else(|| e.to_string()))
        })?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the symbol is a function with the C signature of
                // infiniband/verbs.h, which the field's type spells out.
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|_| LoadError::MissingSymbol($name.to_string()))?
            };
        }
        Ok(Verbs {
            path: path.to_string(),
            get_device_list: sym!("ibv_get_device_list"),
            free_device_list: sym!("ibv_free_device_list"),
            get_device_name: sym!("ibv_get_device_name"),
            open_device: sym!("ibv_open_device"),
            close_device: sym!("ibv_close_device"),
            query_device: sym!("ibv_query_device"),
            query_port: sym!("ibv_query_port"),
            query_gid: sym!("ibv_query_gid"),
            alloc_pd: sym!("ibv_alloc_pd"),
            dealloc_pd: sym!("ibv_dealloc_pd"),
            reg_mr: sym!("ibv_reg_mr"),
            // SAFETY: as in `sym!`: the C signature of ibv_reg_dmabuf_mr in
            // infiniband/verbs.h (rdma-core >= 34); absent from older libraries.
            reg_dmabuf_mr: unsafe { lib.get::<RegDmabufMr>(b"ibv_reg_dmabuf_mr\0") }
                .ok()
                .map(|s| *s),
            dereg_mr: sym!("ibv_dereg_mr"),
            create_cq: sym!("ibv_create_cq"),
            destroy_cq: sym!("ibv_destroy_cq"),
            create_qp: sym!("ibv_create_qp"),
            destroy_qp: sym!("ibv_destroy_qp"),
            modify_qp: sym!("ibv_modify_qp"),
            _lib: lib,
        })
    }

    /// Whether the library exports `ibv_reg_dmabuf_mr` (rdma-core 34 and newer).
    pub fn has_dmabuf(&self) -> bool {
        self.reg_dmabuf_mr.is_some()
    }

    /// The path it was loaded from.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Names of every device, in the library's order. `Err(errno)` when listing fails
    /// (e.g. no kernel support: `ENOSYS`).
    pub fn device_names(&self) -> Result<Vec<String>, i32> {
        let mut n: c_int = 0;
        // SAFETY: `n` is a valid out-pointer; the list is freed below.
        let list = unsafe { (self.get_device_list)(&mut n) };
        if list.is_null() {
            return Err(last_errno());
        }
        let mut names = Vec::new();
        for i in 0..n.max(0) as usize {
            // SAFETY: the list holds `n` device pointers followed by a null.
            let dev = unsafe { *list.add(i) };
            names.push(self.name_of(dev));
        }
        // SAFETY: `list` came from ibv_get_device_list and is freed once.
        unsafe { (self.free_device_list)(list) };
        Ok(names)
    }

    fn name_of(&self, dev: *mut ibv_device) -> String {
        // SAFETY: `dev` is a live entry of a device list; the name is a C string
        // owned by the library.
        let p = unsafe { (self.get_device_name)(dev) };
        if p.is_null() {
            return String::from("?");
        }
        // SAFETY: non-null C string owned by the library.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A device attribute summary.
#[derive(Debug, Clone, Copy)]
pub struct DeviceAttr {
    /// `atomic_cap != IBV_ATOMIC_NONE`.
    pub atomics: bool,
    /// Number of physical ports.
    pub ports: u8,
    /// Largest send queue.
    pub max_qp_wr: u32,
}

/// A port attribute summary.
#[derive(Debug, Clone, Copy)]
pub struct PortAttr {
    /// `IBV_PORT_ACTIVE` is 4.
    pub state: u32,
    /// Local identifier (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// `IBV_LINK_LAYER_*`.
    pub link_layer: u8,
    /// `enum ibv_mtu` of the active MTU.
    pub active_mtu: u32,
    /// Largest message.
    pub max_msg_sz: u32,
    /// GID table length.
    pub gid_tbl_len: i32,
}

/// An open device context. Closed on drop.
#[derive(Debug)]
pub struct Context {
    verbs: &'static Verbs,
    ptr: *mut ibv_context,
    name: String,
}

// SAFETY: verbs contexts are thread-safe (libibverbs serialises internally).
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

impl Context {
    /// Open the device called `name`.
    pub fn open(verbs: &'static Verbs, name: &str) -> Result<Context, String> {
        let mut n: c_int = 0;
        // SAFETY: valid out-pointer; the list is freed below.
        let list = unsafe { (verbs.get_device_list)(&mut n) };
        if list.is_null() {
            return Err(format!(
                "ibv_get_device_list failed (errno {})",
                last_errno()
            ));
        }
        let mut found = std::ptr::null_mut();
        for i in 0..n.max(0) as usize {
            // SAFETY: the list holds `n` device pointers.
            let dev = unsafe { *list.add(i) };
            if verbs.name_of(dev) == name {
                found = dev;
            }
        }
        let ctx = if found.is_null() {
            std::ptr::null_mut()
        } else {
            // SAFETY: `found` is a live entry of the list (freed only afterwards;
            // an open context keeps its device alive).
            unsafe { (verbs.open_device)(found) }
        };
        let errno = last_errno();
        // SAFETY: freed once, after opening.
        unsafe { (verbs.free_device_list)(list) };
        if found.is_null() {
            return Err(format!("no RDMA device named `{name}`"));
        }
        if ctx.is_null() {
            return Err(format!(
                "ibv_open_device({name}) failed (errno {errno}): check permissions on /dev/infiniband/uverbs*"
            ));
        }
        Ok(Context {
            verbs,
            ptr: ctx,
            name: name.to_string(),
        })
    }

    /// The device name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `ibv_query_device`.
    pub fn query_device(&self) -> Result<DeviceAttr, i32> {
        let mut a = std::mem::MaybeUninit::<ibv_device_attr>::zeroed();
        // SAFETY: live context; `a` is a writable attribute struct.
        let r = unsafe { (self.verbs.query_device)(self.ptr, a.as_mut_ptr()) };
        if r != 0 {
            return Err(r);
        }
        // SAFETY: all-zero is a valid ibv_device_attr and the call filled it.
        let a = unsafe { a.assume_init() };
        Ok(DeviceAttr {
            atomics: a.atomic_cap != IBV_ATOMIC_NONE,
            ports: a.phys_port_cnt,
            max_qp_wr: a.max_qp_wr.max(0) as u32,
        })
    }

    /// `ibv_query_port`.
    pub fn query_port(&self, port: u8) -> Result<PortAttr, i32> {
        let mut a = std::mem::MaybeUninit::<PortAttrBuf>::zeroed();
        // SAFETY: live context; the buffer is larger than any ibv_port_attr layout.
        let r = unsafe { (self.verbs.query_port)(self.ptr, port, a.as_mut_ptr().cast()) };
        if r != 0 {
            return Err(r);
        }
        // SAFETY: all-zero is valid and the call filled the leading fields.
        let a = unsafe { a.assume_init() }.attr;
        Ok(PortAttr {
            state: a.state,
            lid: a.lid,
            link_layer: a.link_layer,
            active_mtu: a.active_mtu,
            max_msg_sz: a.max_msg_sz,
            gid_tbl_len: a.gid_tbl_len,
        })
    }

    /// `ibv_query_gid`.
    pub fn query_gid(&self, port: u8, index: i32) -> Result<[u8; 16], i32> {
        let mut g = ibv_gid::default();
        // SAFETY: live context; `g` is a writable gid.
        let r = unsafe { (self.verbs.query_gid)(self.ptr, port, index, &mut g) };
        if r != 0 { Err(r) } else { Ok(g.raw) }
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: opened by us, closed once, after every object made from it (they
        // hold an Arc of this context).
        unsafe { (self.verbs.close_device)(self.ptr) };
    }
}

/// A protection domain. Deallocated on drop.
#[derive(Debug)]
pub struct Pd {
    ctx: Arc<Context>,
    ptr: *mut ibv_pd,
}

// SAFETY: verbs objects may be used from any thread.
unsafe impl Send for Pd {}
// SAFETY: as above.
unsafe impl Sync for Pd {}

impl Pd {
    /// `ibv_alloc_pd`.
    pub fn alloc(ctx: Arc<Context>) -> Result<Pd, i32> {
        // SAFETY: live context.
        let ptr = unsafe { (ctx.verbs.alloc_pd)(ctx.ptr) };
        if ptr.is_null() {
            return Err(last_errno());
        }
        Ok(Pd { ctx, ptr })
    }
}

impl Pd {
    /// Whether the library can register dma-bufs (`ibv_reg_dmabuf_mr`).
    pub fn has_dmabuf(&self) -> bool {
        self.ctx.verbs.has_dmabuf()
    }

    /// The library's path (for messages).
    pub fn library(&self) -> &str {
        self.ctx.verbs.path()
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: allocated by us; every MR and QP holds an Arc of this PD.
        unsafe { (self.ctx.verbs.dealloc_pd)(self.ptr) };
    }
}

/// A registered memory region. Deregistered on drop.
#[derive(Debug)]
pub struct Mr {
    pd: Arc<Pd>,
    ptr: *mut ibv_mr,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}

// SAFETY: verbs objects may be used from any thread.
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}

impl Mr {
    /// `ibv_reg_mr` of `len` bytes at `addr`. The caller keeps that memory alive for
    /// the MR's life (the backend holds the region's owner next to the MR).
    pub fn register(pd: Arc<Pd>, addr: u64, len: u64, access: i32) -> Result<Mr, i32> {
        // SAFETY: live PD; registration only pins and records the range.
        let ptr = unsafe {
            (pd.ctx.verbs.reg_mr)(pd.ptr, addr as usize as *mut c_void, len as usize, access)
        };
        if ptr.is_null() {
            return Err(last_errno());
        }
        Ok(Mr::from_raw(pd, ptr))
    }

    /// An MR the library just returned (non-null), with its keys.
    fn from_raw(pd: Arc<Pd>, ptr: *mut ibv_mr) -> Mr {
        // SAFETY: a live MR returned by the library.
        let (lkey, rkey) = unsafe { ((*ptr).lkey, (*ptr).rkey) };
        Mr {
            pd,
            ptr,
            lkey,
            rkey,
        }
    }

    /// `ibv_reg_dmabuf_mr`: `len` bytes at `offset` of the dma-buf `fd`, addressed by
    /// work requests as `iova..iova+len`. `Err(None)` when the library lacks the call,
    /// `Err(Some(errno))` when it fails.
    ///
    /// The fd may be closed once this returns: the kernel (`ib_umem_dmabuf_get`)
    /// takes its own reference on the dma-buf for the MR's life and drops it at
    /// deregistration, so the registration does not depend on this descriptor. The
    /// memory behind the dma-buf must stay allocated for the MR's life (the caller
    /// holds its owner next to the MR).
    pub fn register_dmabuf(
        pd: Arc<Pd>,
        fd: BorrowedFd<'_>,
        offset: u64,
        len: u64,
        iova: u64,
        access: i32,
    ) -> Result<Mr, Option<i32>> {
        let Some(reg) = pd.ctx.verbs.reg_dmabuf_mr else {
            return Err(None);
        };
        // SAFETY: live PD; `fd` is open for the call (borrowed); the provider only
        // takes a reference on the dma-buf and records the range.
        let ptr = unsafe { reg(pd.ptr, offset, len as usize, iova, fd.as_raw_fd(), access) };
        if ptr.is_null() {
            return Err(Some(last_errno()));
        }
        Ok(Mr::from_raw(pd, ptr))
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered by us, deregistered once.
        unsafe { (self.pd.ctx.verbs.dereg_mr)(self.ptr) };
    }
}

/// A completion queue. Destroyed on drop (after its QPs, which hold it).
#[derive(Debug)]
pub struct Cq {
    ctx: Arc<Context>,
    ptr: *mut ibv_cq,
}

// SAFETY: verbs objects may be used from any thread.
unsafe impl Send for Cq {}
// SAFETY: as above.
unsafe impl Sync for Cq {}

impl Cq {
    /// `ibv_create_cq` with `depth` entries.
    pub fn create(ctx: Arc<Context>, depth: i32) -> Result<Cq, i32> {
        // SAFETY: live context; no completion channel.
        let ptr = unsafe {
            (ctx.verbs.create_cq)(
                ctx.ptr,
                depth,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        if ptr.is_null() {
            return Err(last_errno());
        }
        Ok(Cq { ctx, ptr })
    }

    /// `ibv_poll_cq` through `cq->context->ops.poll_cq`: completions into `out`.
    pub fn poll(&self, out: &mut [ibv_wc]) -> Result<usize, String> {
        // SAFETY: a live CQ's context pointer and its ops table are set by the
        // provider at creation and stay valid while the CQ lives.
        let f = unsafe { (*(*self.ptr).context).ops.poll_cq };
        let Some(f) = f else {
            return Err("the provider's ops table has no poll_cq".into());
        };
        // SAFETY: `out` holds out.len() writable entries.
        let n = unsafe {
            f(
                self.ptr,
                out.len().min(i32::MAX as usize) as c_int,
                out.as_mut_ptr(),
            )
        };
        if n < 0 {
            return Err(format!("ibv_poll_cq returned {n}"));
        }
        Ok(n as usize)
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: created by us, destroyed once after its QPs.
        unsafe { (self.ctx.verbs.destroy_cq)(self.ptr) };
    }
}

/// Which way an RDMA transfer goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rdma {
    /// `IBV_WR_RDMA_WRITE`: local → remote.
    Write,
    /// `IBV_WR_RDMA_READ`: remote → local (the local memory registered with local
    /// write access, the remote with remote read access).
    Read,
}

/// One work request, as the port posts them.
#[derive(Debug, Clone, Copy)]
pub enum Work {
    /// An RDMA WRITE or READ of `len` bytes between `local` (lkey) and `remote` (rkey):
    /// the port's `write` and `read`, and the 8-byte write or read of a remote counter
    /// on devices without atomics.
    Rdma {
        /// Its direction.
        op: Rdma,
        /// Local address.
        local: u64,
        /// Bytes.
        len: u32,
        /// Local key.
        lkey: u32,
        /// Remote address.
        remote: u64,
        /// Remote key.
        rkey: u32,
    },
    /// `IBV_WR_ATOMIC_FETCH_AND_ADD` of `add` to the 8 bytes at `remote`, the old
    /// value landing in the 8 bytes at `local`; fenced after earlier requests.
    FetchAdd {
        /// Local 8-byte result buffer.
        local: u64,
        /// Its key.
        lkey: u32,
        /// Remote address (8-aligned).
        remote: u64,
        /// Remote key.
        rkey: u32,
        /// Value added.
        add: u64,
    },
}

/// An RC queue pair. Destroyed on drop.
#[derive(Debug)]
pub struct Qp {
    _pd: Arc<Pd>,
    _cq: Arc<Cq>,
    ctx: Arc<Context>,
    ptr: *mut ibv_qp,
    /// QP number.
    pub qp_num: u32,
}

// SAFETY: verbs objects may be used from any thread (the port serialises posts).
unsafe impl Send for Qp {}
// SAFETY: as above.
unsafe impl Sync for Qp {}

/// The remote side of an RC connection, for the RTR transition.
#[derive(Debug, Clone, Copy)]
pub struct Path {
    /// Peer QP number.
    pub dest_qpn: u32,
    /// Peer's starting PSN.
    pub rq_psn: u32,
    /// Path MTU (`enum ibv_mtu`).
    pub mtu: u32,
    /// Peer LID (InfiniBand).
    pub dlid: u16,
    /// Use the GRH (RoCE; or IB across subnets).
    pub global: bool,
    /// Peer GID.
    pub dgid: [u8; 16],
    /// Our GID index.
    pub sgid_index: u8,
    /// Port number.
    pub port: u8,
}

impl Qp {
    /// `ibv_create_qp`: RC, send and receive completions on `cq`.
    pub fn create(pd: Arc<Pd>, cq: Arc<Cq>, max_send_wr: u32) -> Result<Qp, i32> {
        let mut init = ibv_qp_init_attr {
            qp_context: std::ptr::null_mut(),
            send_cq: cq.ptr,
            recv_cq: cq.ptr,
            srq: std::ptr::null_mut(),
            cap: ibv_qp_cap {
                max_send_wr,
                max_recv_wr: 1,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: IBV_QPT_RC,
            sq_sig_all: 0,
        };
        // SAFETY: live PD and CQ of one context; `init` is a valid attribute struct.
        let ptr = unsafe { (pd.ctx.verbs.create_qp)(pd.ptr, &mut init) };
        if ptr.is_null() {
            return Err(last_errno());
        }
        // SAFETY: a live QP returned by the library.
        let qp_num = unsafe { (*ptr).qp_num };
        Ok(Qp {
            ctx: pd.ctx.clone(),
            _pd: pd,
            _cq: cq,
            ptr,
            qp_num,
        })
    }

    fn modify(&self, attr: &mut ibv_qp_attr, mask: c_int) -> Result<(), i32> {
        // SAFETY: live QP; `attr` is a valid attribute struct.
        let r = unsafe { (self.ctx.verbs.modify_qp)(self.ptr, attr, mask) };
        if r != 0 { Err(r) } else { Ok(()) }
    }

    /// RESET → INIT on `port`, allowing remote write/read/atomic.
    pub fn to_init(&self, port: u8) -> Result<(), i32> {
        let mut a = ibv_qp_attr {
            qp_state: IBV_QPS_INIT,
            port_num: port,
            pkey_index: 0,
            qp_access_flags: (IBV_ACCESS_REMOTE_WRITE
                | IBV_ACCESS_REMOTE_READ
                | IBV_ACCESS_REMOTE_ATOMIC
                | IBV_ACCESS_LOCAL_WRITE) as u32,
            ..Default::default()
        };
        self.modify(
            &mut a,
            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
        )
    }

    /// INIT → RTR towards `path`.
    pub fn to_rtr(&self, path: &Path) -> Result<(), i32> {
        let mut a = ibv_qp_attr {
            qp_state: IBV_QPS_RTR,
            path_mtu: path.mtu,
            dest_qp_num: path.dest_qpn,
            rq_psn: path.rq_psn,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ..Default::default()
        };
        a.ah_attr.dlid = path.dlid;
        a.ah_attr.port_num = path.port;
        if path.global {
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid.raw = path.dgid;
            a.ah_attr.grh.sgid_index = path.sgid_index;
            a.ah_attr.grh.hop_limit = 64;
        }
        self.modify(
            &mut a,
            IBV_QP_STATE
                | IBV_QP_AV
                | IBV_QP_PATH_MTU
                | IBV_QP_DEST_QPN
                | IBV_QP_RQ_PSN
                | IBV_QP_MAX_DEST_RD_ATOMIC
                | IBV_QP_MIN_RNR_TIMER,
        )
    }

    /// RTR → RTS.
    pub fn to_rts(&self, sq_psn: u32) -> Result<(), i32> {
        let mut a = ibv_qp_attr {
            qp_state: IBV_QPS_RTS,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            sq_psn,
            max_rd_atomic: 1,
            ..Default::default()
        };
        self.modify(
            &mut a,
            IBV_QP_STATE
                | IBV_QP_TIMEOUT
                | IBV_QP_RETRY_CNT
                | IBV_QP_RNR_RETRY
                | IBV_QP_SQ_PSN
                | IBV_QP_MAX_QP_RD_ATOMIC,
        )
    }

    /// `ibv_post_send` through `qp->context->ops.post_send` of one signaled request.
    /// `Err(errno)` as the provider returns it (`ENOMEM`: the send queue is full).
    ///
    /// The caller keeps the local and remote memory registered and alive until the
    /// request's completion was polled (the `PortMapped` contract: until a flush).
    pub fn post(&self, wr_id: u64, work: Work) -> Result<(), i32> {
        let mut sge: ibv_sge;
        // SAFETY: all-zero is a valid ibv_send_wr (null pointers, zero counts).
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.send_flags = IBV_SEND_SIGNALED;
        match work {
            Work::Rdma {
                op,
                local,
                len,
                lkey,
                remote,
                rkey,
            } => {
                sge = ibv_sge {
                    addr: local,
                    length: len,
                    lkey,
                };
                wr.opcode = match op {
                    Rdma::Write => IBV_WR_RDMA_WRITE,
                    Rdma::Read => IBV_WR_RDMA_READ,
                };
                wr.set_rdma(remote, rkey);
            }
            Work::FetchAdd {
                local,
                lkey,
                remote,
                rkey,
                add,
            } => {
                sge = ibv_sge {
                    addr: local,
                    length: 8,
                    lkey,
                };
                wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
                wr.send_flags |= IBV_SEND_FENCE;
                wr.wr = wr_atomic {
                    remote_addr: remote,
                    compare_add: add,
                    swap: 0,
                    rkey,
                };
            }
        }
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        // SAFETY: a live QP's context and ops table stay valid while the QP lives.
        let f = unsafe { (*(*self.ptr).context).ops.post_send };
        let Some(f) = f else {
            return Err(libc_enosys());
        };
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        // SAFETY: `wr` and `sge` live across the call (the provider copies what it
        // needs before returning); the memory they name is registered (caller).
        let r = unsafe { f(self.ptr, &mut wr, &mut bad) };
        if r != 0 { Err(r) } else { Ok(()) }
    }
}

fn libc_enosys() -> i32 {
    38
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: created by us, destroyed once (before its CQ and PD, which it holds).
        unsafe { (self.ctx.verbs.destroy_qp)(self.ptr) };
    }
}
