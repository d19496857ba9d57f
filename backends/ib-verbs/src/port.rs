//! [`IbPort`]: one RC queue pair and its completion queue, driven by the proxy.
//!
//! * `write` posts `IBV_WR_RDMA_WRITE`s (split at the port's `max_msg_sz`) and returns
//!   when they are posted. A full send queue (`ENOMEM`) is drained by polling
//!   completions, bounded by the flush timeout.
//! * `read` posts `IBV_WR_RDMA_READ`s the same way (the peer's region is registered
//!   with `IBV_ACCESS_REMOTE_READ`, ours with `IBV_ACCESS_LOCAL_WRITE`; the export's
//!   address and rkey serve reads and writes alike). The responder of an RC queue pair
//!   executes requests in order, so a read returns the bytes of the port's earlier
//!   writes; its data is in the destination once its completion was polled, i.e. when
//!   the next `flush` returns. A later write does not wait for it (only
//!   `IBV_SEND_FENCE`, which the port sets on signals alone, makes a request wait for
//!   earlier reads to complete), hence the trait's "flush in between".
//!   The queue pair allows one RDMA READ or atomic in flight (`max_rd_atomic = 1`), so
//!   reads are serialised by the NIC. **Run against the stub provider only, never on
//!   RDMA hardware.**
//! * `signal` posts `IBV_WR_ATOMIC_FETCH_AND_ADD` of `add` on the peer's 8-byte word,
//!   fenced (`IBV_SEND_FENCE`) after the earlier requests; the fetched value lands in
//!   a per-port scratch buffer and is ignored. On a device without atomics
//!   (`atomic_cap == IBV_ATOMIC_NONE`) it writes the counter's next value instead,
//!   from a per-port shadow of that counter (exact because the signalling port is the
//!   counter's only writer, as in cuda-dma; its starting value is read once with an
//!   8-byte RDMA READ) and waits for that write's completion before the scratch
//!   source is reused.
//! * `flush` polls the CQ until every posted request completed, bounded by the flush
//!   timeout ([`HalError::Timeout`]). A failed completion is mapped to an error that
//!   says what to check; the QP is then in the error state, so the port stays failed
//!   and every later call returns that error.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use commhal_backend_host_emu::HostRegion;
use commhal_hal::error::{Transfer, check_semaphore_offset, check_transfer};
use commhal_hal::{HalError, Port, Rank, Region, Result};

use crate::BACKEND;
use crate::region::{IbLocal, IbRemote};
use crate::sys::abi::{self, ibv_wc};
use crate::sys::{Cq, Qp, Rdma, Work};
use std::sync::Arc;

/// `ENOMEM`: the send queue is full.
const ENOMEM: i32 = 12;

/// A connection to one peer. Owned by the proxy thread.
#[derive(Debug)]
pub struct IbPort {
    qp: Qp,
    cq: Arc<Cq>,
    scratch: IbLocal,
    scratch_mem: HostRegion,
    peer: Rank,
    timeout: Duration,
    max_msg: u64,
    atomics: bool,
    outstanding: u64,
    next_wr: u64,
    shadow: HashMap<(u64, u32), u64>,
    failed: Option<String>,
}

impl IbPort {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        qp: Qp,
        cq: Arc<Cq>,
        scratch: IbLocal,
        scratch_mem: HostRegion,
        peer: Rank,
        timeout: Duration,
        max_msg: u64,
        atomics: bool,
    ) -> IbPort {
        IbPort {
            qp,
            cq,
            scratch,
            scratch_mem,
            peer,
            timeout,
            max_msg,
            atomics,
            outstanding: 0,
            next_wr: 1,
            shadow: HashMap::new(),
            failed: None,
        }
    }

    /// The peer rank.
    pub fn peer(&self) -> Rank {
        self.peer
    }

    /// This side's queue pair number.
    pub fn qp_num(&self) -> u32 {
        self.qp.qp_num
    }

    /// Announce the current value of a remote counter (only used without atomics,
    /// where signals write `shadow + add`; default 0).
    pub fn set_semaphore_value(&mut self, sem: &IbRemote, off: u64, value: u64) -> Result<()> {
        check_semaphore_offset("remote semaphore", off, sem.len)?;
        self.shadow.insert((sem.addr + off, sem.rkey), value);
        Ok(())
    }

    fn check_failed(&self) -> Result<()> {
        match &self.failed {
            None => Ok(()),
            Some(msg) => Err(HalError::backend(
                BACKEND,
                format!(
                    "the port to rank {} failed earlier and cannot be used: {msg}",
                    self.peer
                ),
            )),
        }
    }

    fn fail(&mut self, e: HalError) -> HalError {
        if self.failed.is_none() {
            self.failed = Some(e.to_string());
        }
        e
    }

    /// Post `work`, draining completions while the send queue is full.
    /// Post `len` bytes between `local` and `remote` (address, key) as RDMA `op`s of
    /// at most `max_msg_sz` bytes each.
    fn post_split(
        &mut self,
        (local, lkey): (u64, u32),
        (remote, rkey): (u64, u32),
        len: u64,
        op: Rdma,
    ) -> Result<()> {
        let mut done = 0;
        while done < len {
            let n = (len - done).min(self.max_msg);
            self.post(Work::Rdma {
                op,
                local: local + done,
                len: n as u32,
                lkey,
                remote: remote + done,
                rkey,
            })?;
            done += n;
        }
        Ok(())
    }

    fn post(&mut self, work: Work) -> Result<()> {
        let deadline = Instant::now() + self.timeout;
        loop {
            let id = self.next_wr;
            match self.qp.post(id, work) {
                Ok(()) => {
                    self.next_wr += 1;
                    self.outstanding += 1;
                    return Ok(());
                }
                Err(ENOMEM) => {
                    if self.poll_some()? == 0 {
                        if Instant::now() >= deadline {
                            let e = HalError::Timeout {
                                what: format!(
                                    "room in the send queue of the ib-verbs port to rank {} ({} requests outstanding): is the peer alive and its port up?",
                                    self.peer, self.outstanding
                                ),
                                millis: self.timeout.as_millis() as u64,
                            };
                            return Err(self.fail(e));
                        }
                        std::thread::yield_now();
                    }
                }
                Err(e) => {
                    let e = HalError::backend(
                        BACKEND,
                        format!(
                            "ibv_post_send to rank {} failed (errno {e}): the queue pair is not ready (RTS) or the request is malformed; check the connection set-up messages",
                            self.peer
                        ),
                    );
                    return Err(self.fail(e));
                }
            }
        }
    }

    /// Poll once; returns how many completions arrived (errors fail the port).
    fn poll_some(&mut self) -> Result<usize> {
        let mut wc = [ibv_wc::default(); 32];
        let n = self.cq.poll(&mut wc).map_err(|m| {
            HalError::backend(BACKEND, format!("{m}: the verbs provider is broken"))
        })?;
        for c in &wc[..n] {
            if c.status != abi::IBV_WC_SUCCESS {
                let e = wc_error(self.peer, c);
                return Err(self.fail(e));
            }
            self.outstanding = self.outstanding.saturating_sub(1);
        }
        Ok(n)
    }

    /// The current value of a remote counter, read once with an RDMA READ (devices
    /// without atomics: from then on this port's shadow is exact, being its only writer).
    fn read_counter(&mut self, remote: u64, rkey: u32) -> Result<u64> {
        self.post(Work::Rdma {
            op: Rdma::Read,
            local: self.scratch.addr() + 16,
            len: 8,
            lkey: self.scratch.lkey(),
            remote,
            rkey,
        })?;
        self.drain("the RDMA READ of a remote semaphore's starting value")?;
        let mut b = [0u8; 8];
        self.scratch_mem.read(16, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    fn drain(&mut self, what: &str) -> Result<()> {
        self.check_failed()?;
        let deadline = Instant::now() + self.timeout;
        let mut idle = 0u32;
        while self.outstanding > 0 {
            if self.poll_some()? > 0 {
                idle = 0;
                continue;
            }
            if Instant::now() >= deadline {
                let e = HalError::Timeout {
                    what: format!(
                        "{what}: {} RDMA requests to rank {} still not completed; is the peer alive and the link up (`ibstat`)?",
                        self.outstanding, self.peer
                    ),
                    millis: self.timeout.as_millis() as u64,
                };
                return Err(self.fail(e));
            }
            idle += 1;
            if idle < 100 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        Ok(())
    }
}

/// A failed work completion, as an error that says what to check.
pub fn wc_error(peer: Rank, wc: &ibv_wc) -> HalError {
    let s = wc.status;
    let hint = match s {
        abi::IBV_WC_RETRY_EXC_ERR => {
            return HalError::PeerDead {
                rank: peer,
                detail: format!(
                    "RDMA requests were not acknowledged (IBV_WC_RETRY_EXC_ERR, status {s}): its process or NIC is gone or the path is broken; check the peer, `ibstat`, cabling, and on RoCE the GID index and that both IPs route"
                ),
            };
        }
        abi::IBV_WC_LOC_LEN_ERR => {
            "local length error (IBV_WC_LOC_LEN_ERR): a message exceeded the port's max_msg_sz"
        }
        abi::IBV_WC_LOC_QP_OP_ERR => {
            "local QP operation error (IBV_WC_LOC_QP_OP_ERR): the request does not fit the queue pair's attributes"
        }
        abi::IBV_WC_LOC_PROT_ERR => {
            "local protection error (IBV_WC_LOC_PROT_ERR): a local buffer (a write's source, a read's destination, which needs local write access) is not registered or was deregistered before the flush"
        }
        abi::IBV_WC_WR_FLUSH_ERR => {
            "flushed (IBV_WC_WR_FLUSH_ERR): the queue pair is in the error state after an earlier failure"
        }
        abi::IBV_WC_REM_INV_REQ_ERR => {
            "remote invalid request (IBV_WC_REM_INV_REQ_ERR): the peer refused the operation; check that it supports atomics and the semaphore is 8-byte aligned"
        }
        abi::IBV_WC_REM_ACCESS_ERR => {
            "remote access error (IBV_WC_REM_ACCESS_ERR): the peer's region is not registered for remote write/read/atomic access or the range is outside it; check that the export came from that peer's live registration"
        }
        abi::IBV_WC_REM_OP_ERR => {
            "remote operation error (IBV_WC_REM_OP_ERR): the peer's NIC could not complete the request"
        }
        abi::IBV_WC_RNR_RETRY_EXC_ERR => {
            "receiver not ready (IBV_WC_RNR_RETRY_EXC_ERR): the peer posted no receive"
        }
        abi::IBV_WC_FATAL_ERR => {
            "fatal NIC error (IBV_WC_FATAL_ERR): check `dmesg` and the device's firmware"
        }
        abi::IBV_WC_GENERAL_ERR => "general error (IBV_WC_GENERAL_ERR): check `dmesg`",
        _ => "see `enum ibv_wc_status` in infiniband/verbs.h",
    };
    HalError::backend(
        BACKEND,
        format!(
            "RDMA request to rank {peer} failed with completion status {s} (vendor error {:#x}): {hint}",
            wc.vendor_err
        ),
    )
}

impl Port for IbPort {
    type Local = IbLocal;
    type Remote = IbRemote;

    fn write(
        &mut self,
        dst: &IbRemote,
        dst_off: u64,
        src: &IbLocal,
        src_off: u64,
        len: u64,
    ) -> Result<()> {
        self.check_failed()?;
        check_transfer(
            "ib-verbs",
            Transfer::Write,
            len,
            (
                &format_args!("rank {}'s buffer", self.peer),
                dst_off,
                dst.len,
            ),
            (src_off, src.len()),
        )?;
        self.post_split(
            (src.addr() + src_off, src.lkey()),
            (dst.addr + dst_off, dst.rkey),
            len,
            Rdma::Write,
        )
    }

    /// `IBV_WR_RDMA_READ`s of at most `max_msg_sz` bytes each; complete when the next
    /// `flush` returns. Run against the stub verbs provider only, never on RDMA
    /// hardware.
    fn read(
        &mut self,
        dst: &IbLocal,
        dst_off: u64,
        src: &IbRemote,
        src_off: u64,
        len: u64,
    ) -> Result<()> {
        self.check_failed()?;
        check_transfer(
            "ib-verbs",
            Transfer::Read,
            len,
            (
                &format_args!("rank {}'s buffer", self.peer),
                src_off,
                src.len,
            ),
            (dst_off, dst.len()),
        )?;
        self.post_split(
            (dst.addr() + dst_off, dst.lkey()),
            (src.addr + src_off, src.rkey),
            len,
            Rdma::Read,
        )
    }

    fn signal(&mut self, sem: &IbRemote, off: u64, add: u64) -> Result<()> {
        self.check_failed()?;
        check_semaphore_offset(
            &format!("ib-verbs semaphore (rank {}'s buffer)", self.peer),
            off,
            sem.len,
        )?;
        let remote = sem.addr + off;
        if self.atomics {
            return self.post(Work::FetchAdd {
                local: self.scratch.addr(),
                lkey: self.scratch.lkey(),
                remote,
                rkey: sem.rkey,
                add,
            });
        }
        let key = (remote, sem.rkey);
        let current = match self.shadow.get(&key) {
            Some(&v) => v,
            None => self.read_counter(remote, sem.rkey)?,
        };
        let next = current.wrapping_add(add);
        let scratch = self.scratch.addr() + 8;
        self.scratch_mem.write(8, &next.to_le_bytes())?;
        self.post(Work::Rdma {
            op: Rdma::Write,
            local: scratch,
            len: 8,
            lkey: self.scratch.lkey(),
            remote,
            rkey: sem.rkey,
        })?;
        self.shadow.insert(key, next);
        self.drain("the 8-byte signal write (device without atomics)")
    }

    fn flush(&mut self) -> Result<()> {
        let what = format!(
            "the ib-verbs port to rank {} to complete its requests",
            self.peer
        );
        self.drain(&what)
    }
}
