//! One rank's view: bootstrap, device, stream, kernels; the pairing schedule; pair
//! messages; per-case scratch memory; and the case recorder.
//!
//! **Pairs.** Ranks are paired by a round-robin schedule (circle method): in round `r`
//! every rank has at most one partner, so each pair's cases run concurrently with the
//! other pairs'. Every rank of a round runs the same case list, so case ids are
//! identical on every rank and the reports merge; a rank without a partner (odd world)
//! reports not-supported.
//!
//! **Tags.** Pair messages use `TAG_BASE + round << 24 + case << 6 + purpose`, so a case
//! that failed half-way on one side can never confuse a later case.

use std::sync::Arc;
use std::time::{Duration, Instant};

use commhal_cuda_rt::{Context, DeviceBuffer, Stream};
use commhal_hal::bootstrap::{Bootstrap, TcpBootstrap};
use commhal_hal::settings::gpu::GPU_WAIT_NS;
use commhal_hal::settings::launch::LOCAL_RANK;
use commhal_hal::{Device, DeviceKind, Endpoint, HalError, Result};

use crate::gpu::kernels::{GpuOp, Kernels, ops_bytes, pod_bytes};
use crate::report::{RankOutcome, RankResult};

/// Bound on every host wait for device work.
pub const KERNEL_TIMEOUT: Duration = Duration::from_secs(60);

const TAG_BASE: u64 = 0x4750_0000_0000;

/// What one rank concluded about one case.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The property held (optional note).
    Pass(Option<String>),
    /// It did not.
    Fail(String),
    /// The case does not apply (unclaimed guarantee, ...).
    NotSupported(String),
}

impl Verdict {
    /// Pass when `ok`, else fail with `msg()`.
    pub fn from_check(ok: bool, msg: impl FnOnce() -> String) -> Verdict {
        if ok {
            Verdict::Pass(None)
        } else {
            Verdict::Fail(msg())
        }
    }
}

/// This rank: bootstrap, device, a stream and the kernels.
#[derive(Debug)]
pub struct World {
    /// The job's bootstrap.
    pub boot: TcpBootstrap,
    /// Device ordinal this rank drives (`COMMHAL_LOCAL_RANK` modulo the device count).
    pub device: u32,
    /// Its primary context.
    pub ctx: Arc<Context>,
    /// The stream every case launches on.
    pub stream: Stream,
    /// Loaded kernels.
    pub k: Kernels,
    /// Every rank's endpoint.
    pub endpoints: Vec<Endpoint>,
    /// Quick tier.
    pub quick: bool,
    /// Bound of every device wait written into handles, in nanoseconds
    /// (`COMMHAL_GPU_WAIT_NS`; seconds, not minutes).
    pub spin: u64,
}

impl World {
    /// Join the job (`TcpBootstrap::from_env`), pick the device, JIT the kernels.
    pub fn init(quick: bool) -> Result<World> {
        let boot = TcpBootstrap::from_env()?;
        let n = commhal_cuda_rt::driver::device_count()?;
        if n == 0 {
            return Err(HalError::Unavailable {
                backend: "cuda".into(),
                reason: "no CUDA device".into(),
            });
        }
        // in range: the declaration's maximum is u32::MAX
        let local = LOCAL_RANK.number()?.map_or(boot.rank(), |v| v as u32);
        let device = local % n;
        let ctx = commhal_backend_cuda_nvlink::driver::context("gpu-conformance", device)?;
        let stream = Stream::new(&ctx)?;
        let k = Kernels::load(&ctx)?;
        let me = Endpoint::this_process(
            boot.rank(),
            Device {
                kind: DeviceKind::Cuda,
                ordinal: device,
            },
        );
        let mine = serde_json::to_vec(&me)
            .map_err(|e| HalError::invalid(format!("encoding the endpoint: {e}")))?;
        let endpoints = boot
            .all_gather(&mine)?
            .iter()
            .map(|b| {
                serde_json::from_slice::<Endpoint>(b)
                    .map_err(|e| HalError::Bootstrap(format!("a peer sent a bad endpoint: {e}")))
            })
            .collect::<Result<Vec<_>>>()?;
        let spin = GPU_WAIT_NS.number_or_default()?;
        Ok(World {
            boot,
            device,
            ctx,
            stream,
            k,
            endpoints,
            quick,
            spin,
        })
    }

    /// This rank.
    pub fn rank(&self) -> u32 {
        self.boot.rank()
    }
    /// World size.
    pub fn size(&self) -> u32 {
        self.boot.size()
    }
    /// Wait for this rank's stream (bounded).
    pub fn sync(&self, what: &str) -> Result<()> {
        crate::gpu::kernels::sync(&self.stream, KERNEL_TIMEOUT, what)
    }
}

/// The partner of `rank` in round `round` of a round-robin schedule over `size` ranks
/// (circle method); `None` = no partner this round. Rounds: `size - 1` (even) or
/// `size` (odd).
pub fn partner(rank: u32, size: u32, round: u32) -> Option<u32> {
    if size < 2 {
        return None;
    }
    let n = size + size % 2; // add a phantom rank when odd
    let m = n - 1; // ranks 0..m rotate, rank m stays
    let r = round % m;
    let other = if rank == m {
        r
    } else if rank == r {
        m
    } else {
        // rank = r + i pairs with r - i (mod m)
        (2 * r + m - rank % m) % m
    };
    (other < size && other != rank).then_some(other)
}

/// Number of rounds of [`partner`] that cover every pair.
pub fn rounds(size: u32) -> u32 {
    if size < 2 { 0 } else { size + size % 2 - 1 }
}

/// Messages with one partner during one round.
#[derive(Debug)]
pub struct Peer<'w> {
    /// The world.
    pub w: &'w World,
    /// Partner rank.
    pub peer: u32,
    /// True on the lower rank of the pair (the "sender" of one-way cases).
    pub lo: bool,
    round: u32,
    case: u64,
}

impl<'w> Peer<'w> {
    /// The pair of this rank with `peer` in `round`.
    pub fn new(w: &'w World, peer: u32, round: u32) -> Peer<'w> {
        Peer {
            w,
            peer,
            lo: w.rank() < peer,
            round,
            case: 0,
        }
    }
    /// Start the next case (new tag space).
    pub fn next_case(&mut self) {
        self.case += 1;
    }
    /// Tag for `purpose` (< 64) in the current case.
    pub fn tag(&self, purpose: u64) -> u64 {
        TAG_BASE + (u64::from(self.round) << 24) + (self.case << 6) + (purpose & 63)
    }
    /// Both sides arrive before either leaves (`purpose` distinguishes barriers of one
    /// case).
    pub fn barrier(&self, purpose: u64) -> Result<()> {
        let t = self.tag(purpose);
        self.w.boot.send(self.peer, t, &[1])?;
        self.w.boot.recv(self.peer, t)?;
        Ok(())
    }
    /// Swap a small message.
    pub fn swap(&self, purpose: u64, data: &[u8]) -> Result<Vec<u8>> {
        let t = self.tag(purpose);
        self.w.boot.send(self.peer, t, data)?;
        self.w.boot.recv(self.peer, t)
    }
    /// The partner's endpoint.
    pub fn remote(&self) -> &Endpoint {
        &self.w.endpoints[self.peer as usize]
    }
    /// This rank's endpoint.
    pub fn local(&self) -> &Endpoint {
        &self.w.endpoints[self.w.rank() as usize]
    }
}

/// Device scratch for one case: handles, op lists, status words. Layout (bytes):
/// handles at `i * 128` (i < 8), status `[u32; 2]` at 1024, mismatches `u64` at 1032,
/// error flag `u32` at 1040, ok words `u32` at 1056 + 4i, op lists at 4096 + i * 8192.
#[derive(Debug)]
pub struct Scratch {
    buf: DeviceBuffer,
}

impl Scratch {
    const LEN: u64 = 4096 + 8 * 8192;
    /// Ops per list.
    pub const MAX_OPS: usize = 8192 / 32;

    /// Allocate (zeroed).
    pub fn new(ctx: &Arc<Context>) -> Result<Scratch> {
        Ok(Scratch {
            buf: DeviceBuffer::new(ctx, Self::LEN)?,
        })
    }
    /// Zero everything and set `status[0] = 1` (scripts only ever clear it).
    pub fn reset(&self) -> Result<()> {
        self.buf.fill(0)?;
        self.buf.write(1024, &1u32.to_ne_bytes())?;
        Ok(())
    }
    /// Device address of handle slot `i`.
    pub fn handle_addr(&self, i: u64) -> u64 {
        self.buf.addr() + (i % 8) * 128
    }
    /// Write a handle into slot `i`; returns its address.
    pub fn put_handle<T: Copy>(&self, i: u64, h: &T) -> Result<u64> {
        self.buf.write((i % 8) * 128, &pod_bytes(h))?;
        Ok(self.handle_addr(i))
    }
    /// Status words address.
    pub fn status_addr(&self) -> u64 {
        self.buf.addr() + 1024
    }
    /// Mismatch counter address.
    pub fn mismatches_addr(&self) -> u64 {
        self.buf.addr() + 1032
    }
    /// Error flag address.
    pub fn error_addr(&self) -> u64 {
        self.buf.addr() + 1040
    }
    /// Address of ok word `i` (< 8).
    pub fn ok_addr(&self, i: u64) -> u64 {
        self.buf.addr() + 1056 + (i % 8) * 4
    }
    /// Write op list `i` (< 8); returns its address.
    pub fn put_ops(&self, i: u64, ops: &[GpuOp]) -> Result<u64> {
        if ops.len() > Self::MAX_OPS {
            return Err(HalError::invalid(format!(
                "{} ops exceed the scratch list of {}",
                ops.len(),
                Self::MAX_OPS
            )));
        }
        let off = 4096 + (i % 8) * 8192;
        self.buf.write(off, &ops_bytes(ops))?;
        Ok(self.buf.addr() + off)
    }
    fn u32_at(&self, off: u64) -> Result<u32> {
        let mut b = [0u8; 4];
        self.buf.read(off, &mut b)?;
        Ok(u32::from_ne_bytes(b))
    }
    /// Script status: `(ok, first failing op index + 1)`.
    pub fn status(&self) -> Result<(bool, u32)> {
        Ok((self.u32_at(1024)? == 1, self.u32_at(1028)?))
    }
    /// Mismatched bytes counted so far.
    pub fn mismatches(&self) -> Result<u64> {
        let mut b = [0u8; 8];
        self.buf.read(1032, &mut b)?;
        Ok(u64::from_ne_bytes(b))
    }
    /// The device error flag.
    pub fn error_code(&self) -> Result<u32> {
        self.u32_at(1040)
    }
    /// Ok word `i`.
    pub fn ok(&self, i: u64) -> Result<u32> {
        self.u32_at(1056 + (i % 8) * 4)
    }
    /// Set ok word `i`.
    pub fn set_ok(&self, i: u64, v: u32) -> Result<()> {
        self.buf.write(1056 + (i % 8) * 4, &v.to_ne_bytes())?;
        Ok(())
    }

    /// The verdict of scripts run since the last reset: status, mismatches, and the
    /// device error flag (which must be `allowed_error`).
    pub fn script_verdict(&self, what: &str, allowed_error: u32) -> Result<Verdict> {
        let (ok, op) = self.status()?;
        let bad = self.mismatches()?;
        let err = self.error_code()?;
        let mut problems = Vec::new();
        if !ok {
            problems.push(format!("op #{op} failed"));
        }
        if bad > 0 {
            problems.push(format!("{bad} byte(s) differ from the expected pattern"));
        }
        if err != allowed_error {
            problems.push(format!(
                "device error flag {err} ({})",
                commhal_device_src::layout::error_code::describe(err)
            ));
        }
        Ok(if problems.is_empty() {
            Verdict::Pass(None)
        } else {
            Verdict::Fail(format!("{what}: {}", problems.join(", ")))
        })
    }
}

/// Collects this rank's results.
#[derive(Debug, Default)]
pub struct Recorder {
    /// In run order.
    pub results: Vec<RankResult>,
    /// Run only the cases whose id contains this (the same on every rank).
    pub only: Option<String>,
}

impl Recorder {
    /// Run one case body and record its outcome (an error is a failure).
    pub fn case(
        &mut self,
        id: String,
        number: u32,
        property: &str,
        body: impl FnOnce() -> Result<Verdict>,
    ) {
        if self.only.as_ref().is_some_and(|o| !id.contains(o.as_str())) {
            return;
        }
        let start = Instant::now();
        let verdict = body().unwrap_or_else(|e| Verdict::Fail(e.to_string()));
        let outcome = match verdict {
            Verdict::Pass(note) => RankOutcome::Pass { note },
            Verdict::Fail(message) => RankOutcome::Fail { message },
            Verdict::NotSupported(reason) => RankOutcome::NotSupported { reason },
        };
        if let RankOutcome::Fail { message } = &outcome {
            eprintln!("FAIL {id}: {message}");
        }
        self.results.push(RankResult {
            id,
            number,
            property: property.to_string(),
            outcome,
            millis: start.elapsed().as_secs_f64() * 1e3,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--only`: the cases whose id lacks the text neither run nor appear.
    #[test]
    fn only_runs_the_matching_cases() {
        let mut rec = Recorder {
            only: Some("algo=ring".into()),
            ..Recorder::default()
        };
        let mut ran = Vec::new();
        for id in ["coll=allreduce,algo=ring", "coll=allreduce,algo=rd"] {
            rec.case(id.into(), 21, "p", || {
                ran.push(id);
                Ok(Verdict::Pass(None))
            });
        }
        assert_eq!(ran, ["coll=allreduce,algo=ring"]);
        assert_eq!(rec.results.len(), 1);
    }

    /// Every round is a matching and the rounds together cover every pair once.
    #[test]
    fn round_robin_covers_every_pair_once() {
        for size in 1..=9u32 {
            let mut seen = std::collections::HashSet::new();
            for r in 0..rounds(size) {
                for a in 0..size {
                    if let Some(b) = partner(a, size, r) {
                        assert_ne!(a, b);
                        assert_eq!(partner(b, size, r), Some(a), "size {size} round {r}");
                        if a < b {
                            assert!(seen.insert((a, b)), "pair ({a},{b}) twice, size {size}");
                        }
                    }
                }
            }
            assert_eq!(
                seen.len() as u32,
                size * size.saturating_sub(1) / 2,
                "size {size}"
            );
        }
    }

    #[test]
    fn two_ranks_pair_in_round_zero() {
        assert_eq!(partner(0, 2, 0), Some(1));
        assert_eq!(partner(1, 2, 0), Some(0));
        assert_eq!(rounds(2), 1);
        assert_eq!(partner(0, 1, 0), None);
    }
}
