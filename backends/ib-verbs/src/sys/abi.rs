//! The libibverbs C ABI subset this backend uses: struct layouts and constants as in
//! rdma-core's `infiniband/verbs.h` (x86-64 / aarch64 LP64). Types only, no code: the
//! stub provider (`backends/ib-verbs/stub`) includes this file too, so both sides of
//! the stub agree by construction. Only the leading fields of the structs that the
//! library allocates (`ibv_context`, `ibv_qp`, `ibv_cq`, `ibv_pd`, `ibv_mr`) are
//! declared; the caller never allocates or copies them.
//!
//! The declarations were compared by hand with the text of rdma-core's `verbs.h`; the
//! const assertions at the end pin the offsets that comparison gave. They have not
//! been checked against a real `libibverbs.so.1` at run time.

#![allow(
    non_camel_case_types,
    dead_code,
    missing_docs,
    missing_debug_implementations
)]

use std::ffi::{c_char, c_int, c_uint, c_void};

/// Opaque `struct ibv_device`.
#[repr(C)]
pub struct ibv_device {
    _opaque: [u8; 0],
}

pub type PostSendFn = unsafe extern "C" fn(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int;
pub type PollCqFn = unsafe extern "C" fn(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int;

/// `struct ibv_context_ops`: 32 function pointers. Real libibverbs implements
/// `ibv_post_send` and `ibv_poll_cq` as static inline functions that call
/// `ops.post_send` (slot 25) and `ops.poll_cq` (slot 11); every other slot is a
/// compatibility entry this backend never calls.
#[repr(C)]
pub struct ibv_context_ops {
    pub _before_poll_cq: [*mut c_void; 11],
    pub poll_cq: Option<PollCqFn>,
    pub _between: [*mut c_void; 13],
    pub post_send: Option<PostSendFn>,
    pub _after_post_send: [*mut c_void; 6],
}

/// Leading fields of `struct ibv_context` (cmd_fd, async_fd, ... follow).
#[repr(C)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
}

/// Leading fields of `struct ibv_pd`.
#[repr(C)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// Leading fields of `struct ibv_cq`.
#[repr(C)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut c_void,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
}

/// Leading fields of `struct ibv_qp` (state, type, mutex, cond, ... follow).
#[repr(C)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub handle: u32,
    pub qp_num: u32,
}

/// `union ibv_gid`.
#[repr(C)]
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct ibv_gid {
    pub raw: [u8; 16],
}

/// `struct ibv_device_attr`.
#[repr(C)]
pub struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: c_uint,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `struct ibv_port_attr` as the exported `ibv_query_port` symbol fills it (the
/// compatibility layout; newer headers append fields, so callers pass a larger,
/// zeroed buffer: see [`PortAttrBuf`]).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_port_attr {
    pub state: c_uint,
    pub max_mtu: c_uint,
    pub active_mtu: c_uint,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
}

/// An [`ibv_port_attr`] with room for the fields newer libraries append.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PortAttrBuf {
    pub attr: ibv_port_attr,
    pub _newer_fields: [u64; 8],
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

#[repr(C)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub cap: ibv_qp_cap,
    pub qp_type: c_uint,
    pub sq_sig_all: c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_qp_attr {
    pub qp_state: c_uint,
    pub cur_qp_state: c_uint,
    pub path_mtu: c_uint,
    pub path_mig_state: c_uint,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// The `wr` union of `ibv_send_wr`, as its atomic member (the largest; the rdma
/// member is `remote_addr` then `rkey` at offset 8, see [`ibv_send_wr::rdma_rkey`]).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct wr_atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

#[repr(C)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: c_uint,
    pub send_flags: c_uint,
    pub imm_data: u32,
    /// `wr.rdma` or `wr.atomic` (see [`wr_atomic`]).
    pub wr: wr_atomic,
    pub qp_type_xrc_remote_srqn: u32,
    /// The `bind_mw` / `tso` union, unused here.
    pub _tail: [u64; 6],
}

impl ibv_send_wr {
    /// `wr.rdma.rkey` (offset 8 of the union, where `wr.atomic.compare_add` starts).
    pub fn rdma_rkey(&self) -> u32 {
        self.wr.compare_add as u32
    }
    /// Set `wr.rdma.remote_addr` and `wr.rdma.rkey`.
    pub fn set_rdma(&mut self, remote_addr: u64, rkey: u32) {
        self.wr = wr_atomic {
            remote_addr,
            compare_add: u64::from(rkey),
            swap: 0,
            rkey: 0,
        };
    }
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: c_uint,
    pub opcode: c_uint,
    pub vendor_err: u32,
    pub byte_len: u32,
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

// enum ibv_port_state
pub const IBV_PORT_ACTIVE: c_uint = 4;
// link layers
pub const IBV_LINK_LAYER_UNSPECIFIED: u8 = 0;
pub const IBV_LINK_LAYER_INFINIBAND: u8 = 1;
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;
// enum ibv_atomic_cap
pub const IBV_ATOMIC_NONE: c_uint = 0;
// enum ibv_access_flags
pub const IBV_ACCESS_LOCAL_WRITE: c_int = 1;
pub const IBV_ACCESS_REMOTE_WRITE: c_int = 2;
pub const IBV_ACCESS_REMOTE_READ: c_int = 4;
pub const IBV_ACCESS_REMOTE_ATOMIC: c_int = 8;
// enum ibv_qp_type
pub const IBV_QPT_RC: c_uint = 2;
// enum ibv_qp_state
pub const IBV_QPS_INIT: c_uint = 1;
pub const IBV_QPS_RTR: c_uint = 2;
pub const IBV_QPS_RTS: c_uint = 3;
// enum ibv_qp_attr_mask
pub const IBV_QP_STATE: c_int = 1 << 0;
pub const IBV_QP_ACCESS_FLAGS: c_int = 1 << 3;
pub const IBV_QP_PKEY_INDEX: c_int = 1 << 4;
pub const IBV_QP_PORT: c_int = 1 << 5;
pub const IBV_QP_AV: c_int = 1 << 7;
pub const IBV_QP_PATH_MTU: c_int = 1 << 8;
pub const IBV_QP_TIMEOUT: c_int = 1 << 9;
pub const IBV_QP_RETRY_CNT: c_int = 1 << 10;
pub const IBV_QP_RNR_RETRY: c_int = 1 << 11;
pub const IBV_QP_RQ_PSN: c_int = 1 << 12;
pub const IBV_QP_MAX_QP_RD_ATOMIC: c_int = 1 << 13;
pub const IBV_QP_MIN_RNR_TIMER: c_int = 1 << 15;
pub const IBV_QP_SQ_PSN: c_int = 1 << 16;
pub const IBV_QP_MAX_DEST_RD_ATOMIC: c_int = 1 << 17;
pub const IBV_QP_DEST_QPN: c_int = 1 << 20;
// enum ibv_wr_opcode
pub const IBV_WR_RDMA_WRITE: c_uint = 0;
pub const IBV_WR_RDMA_WRITE_WITH_IMM: c_uint = 1;
pub const IBV_WR_RDMA_READ: c_uint = 4;
pub const IBV_WR_ATOMIC_FETCH_AND_ADD: c_uint = 6;
// enum ibv_wc_opcode
pub const IBV_WC_RDMA_WRITE: c_uint = 1;
pub const IBV_WC_RDMA_READ: c_uint = 2;
pub const IBV_WC_FETCH_ADD: c_uint = 4;
// enum ibv_send_flags
pub const IBV_SEND_FENCE: c_uint = 1;
pub const IBV_SEND_SIGNALED: c_uint = 2;
// enum ibv_wc_status (the ones given names in messages)
pub const IBV_WC_SUCCESS: c_uint = 0;
pub const IBV_WC_LOC_LEN_ERR: c_uint = 1;
pub const IBV_WC_LOC_QP_OP_ERR: c_uint = 2;
pub const IBV_WC_LOC_PROT_ERR: c_uint = 4;
pub const IBV_WC_WR_FLUSH_ERR: c_uint = 5;
pub const IBV_WC_REM_INV_REQ_ERR: c_uint = 9;
pub const IBV_WC_REM_ACCESS_ERR: c_uint = 10;
pub const IBV_WC_REM_OP_ERR: c_uint = 11;
pub const IBV_WC_RETRY_EXC_ERR: c_uint = 12;
pub const IBV_WC_RNR_RETRY_EXC_ERR: c_uint = 13;
pub const IBV_WC_FATAL_ERR: c_uint = 19;
pub const IBV_WC_GENERAL_ERR: c_uint = 21;
// enum ibv_mtu
pub const IBV_MTU_1024: c_uint = 3;

const _: () = {
    assert!(std::mem::size_of::<ibv_context_ops>() == 32 * 8);
    assert!(std::mem::offset_of!(ibv_context_ops, poll_cq) == 11 * 8);
    assert!(std::mem::offset_of!(ibv_context_ops, post_send) == 25 * 8);
    assert!(std::mem::offset_of!(ibv_context, ops) == 8);
    assert!(std::mem::offset_of!(ibv_qp, qp_num) == 52);
    assert!(std::mem::offset_of!(ibv_mr, lkey) == 36);
    assert!(std::mem::offset_of!(ibv_mr, rkey) == 40);
    assert!(std::mem::offset_of!(ibv_device_attr, atomic_cap) == 164);
    assert!(std::mem::offset_of!(ibv_device_attr, phys_port_cnt) == 227);
    assert!(std::mem::size_of::<ibv_device_attr>() == 232);
    assert!(std::mem::offset_of!(ibv_port_attr, lid) == 34);
    assert!(std::mem::offset_of!(ibv_port_attr, link_layer) == 46);
    assert!(std::mem::size_of::<ibv_qp_init_attr>() == 64);
    assert!(std::mem::size_of::<ibv_ah_attr>() == 32);
    assert!(std::mem::offset_of!(ibv_qp_attr, ah_attr) == 56);
    assert!(std::mem::offset_of!(ibv_qp_attr, pkey_index) == 120);
    assert!(std::mem::offset_of!(ibv_qp_attr, port_num) == 129);
    assert!(std::mem::size_of::<ibv_qp_attr>() == 140);
    assert!(std::mem::offset_of!(ibv_send_wr, wr) == 40);
    assert!(std::mem::size_of::<ibv_send_wr>() == 128);
    assert!(std::mem::size_of::<ibv_wc>() == 48);
};

/// Entry points exported by `libibverbs.so.1` that this backend resolves by name.
pub const SYMBOLS: [&str; 17] = [
    "ibv_get_device_list",
    "ibv_free_device_list",
    "ibv_get_device_name",
    "ibv_open_device",
    "ibv_close_device",
    "ibv_query_device",
    "ibv_query_port",
    "ibv_query_gid",
    "ibv_alloc_pd",
    "ibv_dealloc_pd",
    "ibv_reg_mr",
    "ibv_dereg_mr",
    "ibv_create_cq",
    "ibv_destroy_cq",
    "ibv_create_qp",
    "ibv_destroy_qp",
    "ibv_modify_qp",
];
