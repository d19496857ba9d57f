//! The comparison library of `--compare nccl | mscclpp` and `--compare-lib PATH`: a
//! library with NCCL's C API, opened with `dlopen` (never linked) through
//! [`commhal_cuda_coll::nccl_lib`], run on the same buffers and stream as commhal.
//!
//! Every rank opens the library and the ranks agree on the outcome before any of them
//! makes a communicator: a rank that cannot open it, or that opened another library
//! than rank 0, fails the setup on every rank with that rank's reason, so no rank
//! waits for a peer that will never come.

use std::ffi::{OsStr, c_int, c_void};
use std::path::{Path, PathBuf};

use commhal_cuda_rt::Stream;
use commhal_hal::bootstrap::Bootstrap;
use serde::Serialize;

use crate::cli::{Collective, Compare, Dtype};
use commhal_cuda_coll::error::{CollError, Result};
use commhal_cuda_coll::kernels::ReduceOp;
use commhal_cuda_coll::nccl_lib::{self, NcclLib};
use commhal_hal::settings::gpu::MSCCLPP_LIB;

/// Which library to compare with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Comparison {
    /// `--compare nccl`: `libnccl.so.2`, else `libnccl.so`, from the loader's search.
    Nccl,
    /// `--compare mscclpp`: `$COMMHAL_MSCCLPP_LIB` when set (then only it: a path
    /// someone set is never replaced by a search), else `libmscclpp_nccl.so` from the
    /// loader's search.
    Mscclpp,
    /// `--compare-lib PATH`.
    Path(PathBuf),
}

impl Comparison {
    /// From `--compare` and `--compare-lib` (the flags conflict; `--compare-lib` wins
    /// if both reach here).
    pub fn from_flags(compare: Option<Compare>, lib: Option<&Path>) -> Option<Comparison> {
        match (compare, lib) {
            (_, Some(p)) => Some(Comparison::Path(p.to_path_buf())),
            (Some(Compare::Nccl), None) => Some(Comparison::Nccl),
            (Some(Compare::Mscclpp), None) => Some(Comparison::Mscclpp),
            (None, None) => None,
        }
    }

    /// The flag that asked for it, for messages.
    pub fn flag(&self) -> String {
        match self {
            Comparison::Nccl => "--compare nccl".into(),
            Comparison::Mscclpp => "--compare mscclpp".into(),
            Comparison::Path(p) => format!("--compare-lib {}", p.display()),
        }
    }

    /// The names to open, in order, with `mscclpp_env` the value of
    /// `COMMHAL_MSCCLPP_LIB`.
    pub fn candidates(&self, mscclpp_env: Option<&OsStr>) -> Vec<String> {
        match self {
            Comparison::Nccl => vec!["libnccl.so.2".into(), "libnccl.so".into()],
            Comparison::Mscclpp => match mscclpp_env.filter(|v| !v.is_empty()) {
                Some(v) => vec![v.to_string_lossy().into_owned()],
                None => vec!["libmscclpp_nccl.so".into()],
            },
            Comparison::Path(p) => vec![p.to_string_lossy().into_owned()],
        }
    }

    /// Open the library (kept loaded for the process), with `mscclpp_env` the value of
    /// `COMMHAL_MSCCLPP_LIB`; the error says what was looked for and what to set.
    pub fn open_with(
        &self,
        mscclpp_env: Option<&OsStr>,
    ) -> std::result::Result<&'static NcclLib, String> {
        let names = self.candidates(mscclpp_env);
        let var = MSCCLPP_LIB.env;
        NcclLib::open_kept(&names).map_err(|e| {
            let what = match (self, &e) {
                (_, nccl_lib::LoadError::Missing { .. }) => {
                    "the comparison needs a library with NCCL 2.28's C API (NCCL 2.19 and newer, MSCCL++ 0.9 have every function it requires)".to_string()
                }
                (Comparison::Nccl, _) => "put NCCL's libnccl.so.2 on LD_LIBRARY_PATH (source .gpu/env.sh for the nvidia-nccl wheel's), or name a library with --compare-lib PATH".to_string(),
                (Comparison::Mscclpp, _) if mscclpp_env.is_some_and(|v| !v.is_empty()) => format!(
                    "{var}={}: point {var} at MSCCL++'s libmscclpp_nccl.so (its libmscclpp.so.0 must be on LD_LIBRARY_PATH too)",
                    names[0]
                ),
                (Comparison::Mscclpp, _) => format!(
                    "set {var} to the path of MSCCL++'s libmscclpp_nccl.so, or put its folder on LD_LIBRARY_PATH (its libmscclpp.so.0 must be found too)"
                ),
                (Comparison::Path(_), _) => "give the path of a library that exports NCCL's C API (e.g. libnccl.so.2, MSCCL++'s libmscclpp_nccl.so)".to_string(),
            };
            format!("{}: {e}: {what}", self.flag())
        })
    }

    /// [`Comparison::open_with`] with this process's `COMMHAL_MSCCLPP_LIB`.
    pub fn open(&self) -> std::result::Result<&'static NcclLib, String> {
        self.open_with(MSCCLPP_LIB.text().as_deref().map(OsStr::new))
    }
}

/// What the comparison's columns are labelled with, and where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LibInfo {
    /// Name and version, e.g. `NCCL 2.28.9`, `MSCCL++ 0.9.0` ([`nccl_lib::label`]).
    pub library: String,
    /// The file the loader loaded.
    pub file: String,
    /// `ncclGetVersion`'s code (`None`: it failed).
    pub version_code: Option<i32>,
}

impl LibInfo {
    /// The label and file of `lib`.
    pub fn of(lib: &NcclLib) -> LibInfo {
        LibInfo {
            library: lib.label(),
            file: lib.file.clone(),
            version_code: lib.version_code().ok(),
        }
    }
}

/// `Ok` for ncclSuccess, else an error naming the library, the call and NCCL's texts.
fn check(lib: &NcclLib, r: c_int, call: &str) -> Result<()> {
    if r == nccl_lib::SUCCESS {
        return Ok(());
    }
    let last = lib.last_error(std::ptr::null_mut());
    Err(CollError::Nccl(format!(
        "{} ({}): {call} returned {r} ({}){}",
        lib.label(),
        lib.file,
        lib.error_string(r),
        if last.is_empty() {
            String::new()
        } else {
            format!(": {last}")
        }
    )))
}

/// Every rank's `(ok, text)`, all-gathered: one flag byte, then the text.
fn agree(boot: &dyn Bootstrap, ok: bool, text: &str) -> Result<Vec<(bool, String)>> {
    let mut mine = vec![u8::from(ok)];
    mine.extend_from_slice(text.as_bytes());
    Ok(boot
        .all_gather(&mine)?
        .iter()
        .map(|v| {
            (
                v.first() == Some(&1),
                String::from_utf8_lossy(v.get(1..).unwrap_or_default()).into_owned(),
            )
        })
        .collect())
}

/// The ranks whose entry is not ok, grouped by text: `rank 1: why` / `ranks 0, 2: why`.
fn failures(all: &[(bool, String)]) -> Option<String> {
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for (r, (ok, text)) in all.iter().enumerate() {
        if *ok {
            continue;
        }
        match groups.iter_mut().find(|(t, _)| t == text) {
            Some((_, ranks)) => ranks.push(r),
            None => groups.push((text.clone(), vec![r])),
        }
    }
    if groups.is_empty() {
        return None;
    }
    let parts: Vec<String> = groups
        .iter()
        .map(|(text, ranks)| {
            let list: Vec<String> = ranks.iter().map(|r| r.to_string()).collect();
            format!(
                "rank{} {}: {text}",
                if ranks.len() > 1 { "s" } else { "" },
                list.join(", ")
            )
        })
        .collect();
    Some(parts.join("; "))
}

/// One communicator of the compared library over the same ranks.
#[derive(Debug)]
pub struct Nccl {
    lib: &'static NcclLib,
    comm: nccl_lib::Comm,
    info: LibInfo,
}

impl Nccl {
    /// Collective: every rank opens `which`, and the ranks agree that all of them have
    /// the same library; then rank 0 makes the id, the bootstrap broadcasts it, every
    /// rank joins, and the ranks agree again that every join succeeded. Any failure is
    /// the same error on every rank, naming the ranks and their reasons. The caller's
    /// context must be current (NCCL uses the current device).
    pub fn init(boot: &dyn Bootstrap, which: &Comparison) -> Result<Nccl> {
        let opened = which.open();
        let (ok, text) = match opened {
            Ok(lib) => (true, LibInfo::of(lib).library),
            Err(ref e) => (false, e.clone()),
        };
        let all = agree(boot, ok, &text)?;
        if let Some(bad) = failures(&all) {
            return Err(CollError::Nccl(format!(
                "the comparison library could not be opened on every rank: {bad}"
            )));
        }
        let lib = opened.map_err(CollError::Nccl)?;
        let info = LibInfo::of(lib);
        if let Some((p, (_, other))) = all.iter().enumerate().find(|(_, (_, l))| *l != all[0].1) {
            return Err(CollError::Nccl(format!(
                "{}: the ranks opened different libraries: rank 0 {}, rank {p} {other} (give every rank the same library path)",
                which.flag(),
                all[0].1
            )));
        }
        let mut id = nccl_lib::UniqueId { internal: [0; 128] };
        let mut made = Ok(());
        if boot.rank() == 0 {
            // SAFETY: a valid out-pointer for the 128-byte id.
            made = check(
                lib,
                unsafe { (lib.GetUniqueId)(&mut id) },
                "ncclGetUniqueId",
            );
        }
        let bytes: Vec<u8> = std::iter::once(u8::from(made.is_ok()))
            .chain(id.internal.iter().map(|&c| c as u8))
            .collect();
        let got = boot.broadcast(0, &bytes)?;
        made?;
        if got.len() != 129 || got[0] != 1 {
            return Err(CollError::Nccl(format!(
                "rank 0 could not create an id for {}",
                info.library
            )));
        }
        for (dst, src) in id.internal.iter_mut().zip(&got[1..]) {
            *dst = *src as std::ffi::c_char;
        }
        let mut comm: nccl_lib::Comm = std::ptr::null_mut();
        // SAFETY: out-pointer valid; id from rank 0; every rank calls with the same
        // size and a distinct rank (bootstrap ranks).
        let r = unsafe {
            (lib.CommInitRank)(&mut comm, boot.size() as c_int, id, boot.rank() as c_int)
        };
        let joined = check(lib, r, "ncclCommInitRank");
        let all = agree(
            boot,
            joined.is_ok(),
            &joined
                .as_ref()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default(),
        )?;
        if let Some(bad) = failures(&all) {
            if joined.is_ok() && !comm.is_null() {
                // SAFETY: the communicator made above, given up once; abort does not
                // wait for the peers that failed.
                let _ = unsafe { (lib.CommAbort)(comm) };
            }
            return Err(CollError::Nccl(format!(
                "{} could not make a communicator on every rank: {bad}",
                info.library
            )));
        }
        Ok(Nccl { lib, comm, info })
    }

    /// The library's label and file.
    pub fn info(&self) -> &LibInfo {
        &self.info
    }

    /// NCCL's operator for `op` on `dtype`: a built-in one, or for premulsum one
    /// created with ncclRedOpCreatePreMulSum (the scalar passed by value, rounded to
    /// the type as the commhal kernels get it); `true` = created, destroy it after the
    /// call is queued (NCCL allows that).
    fn red_op(&self, op: ReduceOp, dtype: Dtype) -> Result<(c_int, bool)> {
        Ok(match op {
            ReduceOp::Sum => (nccl_lib::OP_SUM, false),
            ReduceOp::Prod => (nccl_lib::OP_PROD, false),
            ReduceOp::Min => (nccl_lib::OP_MIN, false),
            ReduceOp::Max => (nccl_lib::OP_MAX, false),
            ReduceOp::Avg => (nccl_lib::OP_AVG, false),
            ReduceOp::PreMulSum(_) => {
                let mut scalar = op.scalar_bits(dtype.data_type()).to_ne_bytes();
                let mut created: c_int = 0;
                // SAFETY: `created` is a valid out-location for the op NCCL writes; the
                // scalar points at one element of `dtype`, read during the call
                // (host-immediate residence); comm alive.
                let r = unsafe {
                    (self.lib.RedOpCreatePreMulSum)(
                        &mut created,
                        scalar.as_mut_ptr().cast::<c_void>(),
                        nccl_lib::dtype_code(dtype),
                        nccl_lib::SCALAR_HOST_IMMEDIATE,
                        self.comm,
                    )
                };
                check(self.lib, r, "ncclRedOpCreatePreMulSum")?;
                (created, true)
            }
        })
    }

    /// Queue `coll` with the same buffer convention as
    /// [`commhal_cuda_coll::comm::Comm::launch_rooted`] (`count` per rank for all-gather,
    /// reduce-scatter, all-to-all; `root` for broadcast / reduce). All-to-all and
    /// send/recv are ncclSend/ncclRecv pairs in one group (nccl-tests' alltoall and
    /// sendrecv), out of place only.
    ///
    /// # Safety
    /// `input`/`output` are device buffers of the stream's device, large enough for
    /// the collective, alive until the stream is synchronised.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn launch(
        &self,
        stream: &Stream,
        coll: Collective,
        dtype: Dtype,
        op: ReduceOp,
        count: u64,
        rank: u32,
        nranks: u32,
        root: u32,
        input: u64,
        output: u64,
        in_place: bool,
    ) -> Result<()> {
        if in_place && !coll.in_place_supported() {
            return Err(CollError::invalid(format!(
                "{} has no in-place variant in this benchmark",
                coll.name()
            )));
        }
        let l = self.lib;
        let es = dtype.size();
        let s = stream.raw() as nccl_lib::Stream;
        let dt = nccl_lib::dtype_code(dtype);
        let (nop, created) = if matches!(
            coll,
            Collective::Allreduce | Collective::Reducescatter | Collective::Reduce
        ) {
            self.red_op(op, dtype)?
        } else {
            (nccl_lib::OP_SUM, false)
        };
        let c = count as usize;
        let ptr = |a: u64| a as *mut c_void;
        let r = match coll {
            Collective::Allreduce => {
                let src = if in_place { output } else { input };
                // SAFETY: forwarded contract.
                unsafe { (l.AllReduce)(ptr(src), ptr(output), c, dt, nop, self.comm, s) }
            }
            Collective::Allgather => {
                let src = if in_place {
                    output + u64::from(rank) * count * es
                } else {
                    input
                };
                // SAFETY: forwarded contract.
                unsafe { (l.AllGather)(ptr(src), ptr(output), c, dt, self.comm, s) }
            }
            Collective::Reducescatter => {
                let (src, dst) = if in_place {
                    (output, output + u64::from(rank) * count * es)
                } else {
                    (input, output)
                };
                // SAFETY: forwarded contract.
                unsafe { (l.ReduceScatter)(ptr(src), ptr(dst), c, dt, nop, self.comm, s) }
            }
            Collective::Broadcast => {
                let src = if in_place { output } else { input };
                // SAFETY: forwarded contract.
                unsafe { (l.Broadcast)(ptr(src), ptr(output), c, dt, root as c_int, self.comm, s) }
            }
            Collective::Reduce => {
                let src = if in_place { output } else { input };
                // SAFETY: forwarded contract.
                unsafe {
                    (l.Reduce)(
                        ptr(src),
                        ptr(output),
                        c,
                        dt,
                        nop,
                        root as c_int,
                        self.comm,
                        s,
                    )
                }
            }
            Collective::Alltoall => {
                let chunk = count * es;
                let sends: Vec<(u32, u64)> = (0..nranks)
                    .map(|p| (p, input + u64::from(p) * chunk))
                    .collect();
                let recvs: Vec<(u32, u64)> = (0..nranks)
                    .map(|p| (p, output + u64::from(p) * chunk))
                    .collect();
                // SAFETY: forwarded contract; chunk p of each buffer lies inside it
                // (n × count elements).
                return unsafe { self.send_recv_group(&sends, &recvs, c, dt, s) };
            }
            Collective::Sendrecv => {
                let n = nranks.max(1);
                let next = (rank + 1) % n;
                let prev = (rank + n - 1) % n;
                // SAFETY: forwarded contract.
                return unsafe {
                    self.send_recv_group(&[(next, input)], &[(prev, output)], c, dt, s)
                };
            }
        };
        if created {
            // SAFETY: created above on this comm; NCCL allows destroying a user op once
            // the calls using it are queued.
            let d = unsafe { (l.RedOpDestroy)(nop, self.comm) };
            check(l, d, "ncclRedOpDestroy")?;
        }
        check(l, r, coll.name())
    }

    /// `ncclGroupStart`, every send and receive, `ncclGroupEnd` (always called once
    /// the group started, so a failed call never leaves the library inside a group).
    ///
    /// # Safety
    /// As [`Nccl::launch`]: every buffer is `count` elements of device memory.
    unsafe fn send_recv_group(
        &self,
        sends: &[(u32, u64)],
        recvs: &[(u32, u64)],
        count: usize,
        dt: c_int,
        s: nccl_lib::Stream,
    ) -> Result<()> {
        let l = self.lib;
        // SAFETY: no arguments; pairs with the ncclGroupEnd below.
        check(l, unsafe { (l.GroupStart)() }, "ncclGroupStart")?;
        let mut first_err = Ok(());
        for &(peer, buf) in sends {
            // SAFETY: forwarded contract; peer is a rank of this communicator.
            let r =
                unsafe { (l.Send)(buf as *const c_void, count, dt, peer as c_int, self.comm, s) };
            if first_err.is_ok() {
                first_err = check(l, r, "ncclSend");
            }
        }
        for &(peer, buf) in recvs {
            // SAFETY: forwarded contract; peer is a rank of this communicator.
            let r = unsafe { (l.Recv)(buf as *mut c_void, count, dt, peer as c_int, self.comm, s) };
            if first_err.is_ok() {
                first_err = check(l, r, "ncclRecv");
            }
        }
        // SAFETY: closes the group opened above.
        let end = check(l, unsafe { (l.GroupEnd)() }, "ncclGroupEnd");
        first_err.and(end)
    }
}

impl Drop for Nccl {
    fn drop(&mut self) {
        // SAFETY: made by ncclCommInitRank, destroyed once; callers synchronise first.
        let r = unsafe { (self.lib.CommDestroy)(self.comm) };
        if r != nccl_lib::SUCCESS {
            tracing::warn!("ncclCommDestroy ({}): {r}", self.info.library);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use commhal_hal::bootstrap::InProcBootstrap;

    use super::*;
    use commhal_cuda_coll::nccl_stub::build_stub;

    #[test]
    fn flags_pick_the_library() {
        assert_eq!(Comparison::from_flags(None, None), None);
        assert_eq!(
            Comparison::from_flags(Some(Compare::Nccl), None),
            Some(Comparison::Nccl)
        );
        assert_eq!(
            Comparison::from_flags(Some(Compare::Mscclpp), None),
            Some(Comparison::Mscclpp)
        );
        assert_eq!(
            Comparison::from_flags(None, Some(Path::new("/x.so"))),
            Some(Comparison::Path("/x.so".into()))
        );
        assert_eq!(
            Comparison::Nccl.candidates(None),
            ["libnccl.so.2", "libnccl.so"]
        );
        assert_eq!(Comparison::Mscclpp.candidates(None), ["libmscclpp_nccl.so"]);
        assert_eq!(
            Comparison::Mscclpp.candidates(Some(OsStr::new(""))),
            ["libmscclpp_nccl.so"],
            "an empty variable is unset"
        );
        let set = OsString::from("/opt/m/libmscclpp_nccl.so");
        assert_eq!(
            Comparison::Mscclpp.candidates(Some(&set)),
            ["/opt/m/libmscclpp_nccl.so"],
            "the variable alone when set"
        );
        assert_eq!(
            Comparison::Path("/x.so".into()).candidates(Some(&set)),
            ["/x.so"]
        );
    }

    #[test]
    fn a_library_not_found_says_what_to_set() {
        let e = Comparison::Mscclpp
            .open_with(Some(OsStr::new("/nonexistent/libmscclpp_nccl.so")))
            .unwrap_err();
        assert!(
            e.starts_with("--compare mscclpp: cannot load /nonexistent/libmscclpp_nccl.so")
                && e.contains("COMMHAL_MSCCLPP_LIB=/nonexistent/libmscclpp_nccl.so"),
            "{e}"
        );
        // nothing set, and (here) nothing on the search path under that name
        if let Err(e) = Comparison::Mscclpp.open_with(None) {
            assert!(
                e.contains("cannot load libmscclpp_nccl.so")
                    && e.contains("set COMMHAL_MSCCLPP_LIB"),
                "{e}"
            );
        }
        let e = Comparison::Path("/nonexistent/x.so".into())
            .open_with(None)
            .unwrap_err();
        assert!(
            e.starts_with("--compare-lib /nonexistent/x.so: cannot load /nonexistent/x.so"),
            "{e}"
        );
    }

    /// Two ranks (threads) where one cannot open the library: both fail the same
    /// way, naming that rank, before either makes a communicator; with the library on
    /// both, both join and agree on the label.
    #[test]
    fn ranks_agree_before_they_init() {
        let Some(stub) = build_stub("libnccl.so.2", 22809, &[]) else {
            return;
        };
        let run = |paths: [PathBuf; 2]| {
            let boots = InProcBootstrap::create(2);
            let handles: Vec<_> = boots
                .into_iter()
                .zip(paths)
                .map(|(b, p)| {
                    std::thread::spawn(move || {
                        Nccl::init(&b, &Comparison::Path(p)).map(|n| n.info().clone())
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        };
        let stub = stub.path.clone();
        let got = run([stub.clone().into(), "/nonexistent/libx.so".into()]);
        for r in &got {
            let e = r.as_ref().unwrap_err().to_string();
            assert!(
                e.contains("could not be opened on every rank: rank 1: --compare-lib /nonexistent/libx.so: cannot load /nonexistent/libx.so"),
                "{e}"
            );
        }
        let got = run([stub.clone().into(), stub.clone().into()]);
        for r in got {
            let info = r.unwrap();
            assert_eq!(info.library, "NCCL 2.28.9");
            assert_eq!(info.file, stub);
            assert_eq!(info.version_code, Some(22809));
        }
        // another library on rank 1 (MSCCL++ by its name): refused on both
        let Some(other) = build_stub("libmscclpp_nccl.so", 900, &[]) else {
            return;
        };
        let got = run([stub.into(), other.path.clone().into()]);
        for r in &got {
            let e = r.as_ref().unwrap_err().to_string();
            assert!(
                e.contains(
                    "the ranks opened different libraries: rank 0 NCCL 2.28.9, rank 1 MSCCL++ 0.9.0"
                ),
                "{e}"
            );
        }
    }

    #[test]
    fn failures_group_ranks() {
        let all = [
            (true, "a".to_string()),
            (false, "x".to_string()),
            (false, "y".to_string()),
            (false, "x".to_string()),
        ];
        assert_eq!(failures(&all).unwrap(), "ranks 1, 3: x; rank 2: y");
        assert_eq!(failures(&all[..1]), None);
    }
}
