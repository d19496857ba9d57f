#!/usr/bin/env python3
"""PyTorch end-to-end correctness test for libcommhal_nccl.so, the NCCL 2.28 drop-in.

Run under torchrun, one process per GPU (torchrun sets RANK, WORLD_SIZE, LOCAL_RANK), from
the repo root:

  # 1. reference outputs from plain NCCL
  torchrun --nproc-per-node 4 nccl/tests/torch_dropin.py --mode record --out ref
  # 2. the same cases through the drop-in, saved to test/ and judged against ref/
  LD_PRELOAD=$PWD/.gpu/libcommhal_nccl.so torchrun --nproc-per-node 4 \
      nccl/tests/torch_dropin.py --mode compare --ref ref --out test \
      --expect-mapped libcommhal_nccl.so
  # 3. plain NCCL under PyTorch; the drop-in loaded with ctypes and called the way
  #    vLLM's pynccl calls it, its results judged against torch.distributed's
  torchrun --nproc-per-node 4 nccl/tests/torch_dropin.py --mode ctypes \
      --lib .gpu/libcommhal_nccl.so --out ct

  python3 nccl/tests/torch_dropin.py --list     # the case names; no GPU, no torchrun

--cases A,^B runs only the cases whose name contains A or starts with B (every rank must get
the same filter). scripts/torch-dropin.sh runs steps 1-3 for 2 and 4 GPUs. --backend gloo
runs the cases gloo supports on the CPU: a check of this harness on a machine without GPUs,
not of the drop-in.

Inputs come from a CPU torch.Generator seeded from (case, tag, rank), so every run sees
the same bits and every rank can rebuild every other rank's input; from those each case
computes the exact result in float64 / int64.

Files: each rank writes OUT/rank{r}.pt (record, compare: case -> status, message and
output tensors on the CPU) and OUT/verdict{r}.json (its judgement of every case). Rank 0
waits for every rank's verdict file -- a file, not a collective, so that the report does
not depend on the library under test -- then prints one line per case,

  case  dtype  size  status(ok|WRONG|error|skipped)  max|d| vs nccl  max|d| vs exact  note

and the closing line `torch_dropin: N ok, M wrong, K errors, S skipped`. compare and ctypes
exit 1 when a case is WRONG or raised (an error) or a rank left no verdict; record exits 0
once its report is out (it judges plain NCCL, and the compare run judges the drop-in).

Judging one output tensor:
  * integer types, MIN/MAX and data movement (gather, broadcast, all-to-all, send/recv)
    must equal NCCL's output bit for bit, and the exact result unless NCCL's differs too;
  * float SUM, AVG, PRODUCT and PREMUL_SUM may differ from NCCL by reduction order; they
    pass when |test - exact| <= (n+1)*eps*M + eps*|exact| elementwise, n the number of
    inputs reduced, eps = torch.finfo(dtype).eps, M = sum of |inputs| (AVG: that / n;
    PREMUL_SUM: sum of |factor*input|; PRODUCT: product of |inputs|). A result off that
    bound still passes when NCCL's own result is off it too and the two agree within it.
    The "vs nccl" column adds, in ulp, max |test - nccl| / (eps * |nccl|).
A case that raises is an error, unless plain NCCL raised on it too (then it is skipped
with NCCL's message); a case that does not apply is skipped with the reason.
"""

import argparse
import ctypes
import functools
import json
import os
import struct
import sys
import threading
import time
import traceback
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist

# ---------------------------------------------------------------------------------------
# Sizes, dtypes, ops

SIZES = {"one": 1, "odd": 7, "small": 1000, "large": 4096 * 1024 + 3}
MID = 1024 * 1024 + 5  # per-rank count of the larger case of the other collectives
BIG_BYTES = 64 << 20  # the 64 MiB all_reduce SUM
DTYPES = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": torch.float32,
    "int32": torch.int32,
}
FLOATS = ("bf16", "fp16", "fp32")
# The PREMUL_SUM factor: about 0.3696, not a power of two, so the premultiply rounds.
# Its float32 bits are 0x3EBD3EBD: rounded to bfloat16 it is 0x3EBD, and so are its low
# 16 bits. Some PyTorch releases hand NCCL a float32 scalar for a bfloat16 PREMUL_SUM,
# of which NCCL reads 2 bytes; with this factor both readings give the same bfloat16.
PREMUL_FACTOR = struct.unpack("<f", (0x3EBD3EBD).to_bytes(4, "little"))[0]
BITWISE = "bitwise"
ROUNDED = "rounded"
DROPIN_NAME = "libcommhal_nccl"


class Skip(Exception):
    """Raised by a case that does not apply here; the message says why."""


def make_premul_sum(factor):
    """ReduceOp.PREMUL_SUM with this factor (a Python float or a tensor)."""
    make = getattr(dist, "_make_nccl_premul_sum", None)
    if make is None:
        make = torch._C._distributed_c10d._make_nccl_premul_sum
    return make(factor)


def reduce_op(op: str):
    if op == "premul_sum":
        return make_premul_sum(PREMUL_FACTOR)
    ops = dist.ReduceOp
    return {"sum": ops.SUM, "product": ops.PRODUCT, "min": ops.MIN, "max": ops.MAX, "avg": ops.AVG}[op]


# ---------------------------------------------------------------------------------------
# Inputs and exact results


def make_input(key: str, dtype: torch.dtype, n: int, kind: str) -> torch.Tensor:
    """n deterministic values for `key` (case/tag/rank), on the CPU.

    Floats: randn * 2**k, k in [-4, 4], so the values span several binades and sums round;
    for PRODUCT magnitudes in [0.5, 1.5] with random signs, so products of a few ranks
    neither overflow nor underflow. int32: full range for MIN/MAX and data movement,
    |x| < 2**28 for SUM (no overflow at 8 ranks), values in {-1, 1, 2} for PRODUCT.
    """
    g = torch.Generator().manual_seed(zlib.crc32(key.encode()))
    if dtype.is_floating_point:
        if kind == "product":
            mag = (1 + 0.125 * torch.randn(n, generator=g)).clamp_(0.5, 1.5)
            sign = torch.randint(0, 2, (n,), generator=g).mul_(2).sub_(1)
            x = mag * sign
        else:
            x = torch.randn(n, generator=g)
            x.mul_(torch.exp2(torch.randint(-4, 5, (n,), generator=g).float()))
        return x.to(dtype)
    if kind == "product":
        x = torch.tensor([-1, 1, 2])[torch.randint(0, 3, (n,), generator=g)]
    elif kind in ("sum", "avg", "premul_sum"):
        x = torch.randint(-(1 << 28), 1 << 28, (n,), generator=g)
    else:
        x = torch.randint(-(1 << 31), 1 << 31, (n,), generator=g)
    return x.to(dtype)


def exact_of(t: torch.Tensor) -> torch.Tensor:
    return t.double() if t.is_floating_point() else t.long()


def host(t: torch.Tensor) -> torch.Tensor:
    """A CPU copy that later writes to t cannot reach."""
    return t.detach().to("cpu", copy=True)


def reduce_exact(xs: list, op: str, dtype: torch.dtype):
    """(exact, magnitude, rule) of reducing the tensors xs elementwise with op."""
    vals = [exact_of(x) for x in xs]
    is_float = dtype.is_floating_point
    if op in ("min", "max"):
        out = vals[0].clone()
        for v in vals[1:]:
            out = torch.minimum(out, v) if op == "min" else torch.maximum(out, v)
        return out, None, BITWISE
    if op == "product":
        out = vals[0].clone()
        for v in vals[1:]:
            out.mul_(v)
        return (out, out.abs(), ROUNDED) if is_float else (out, None, BITWISE)
    if op == "premul_sum":
        # The factor as NCCL receives it: rounded to the tensor's dtype.
        f = torch.tensor(PREMUL_FACTOR, dtype=dtype).double().item()
        vals = [v * f for v in vals]
    out = vals[0].clone()
    for v in vals[1:]:
        out.add_(v)
    if not is_float:
        return out, None, BITWISE
    mag = vals[0].abs()
    for v in vals[1:]:
        mag.add_(v.abs())
    if op == "avg":
        out.div_(len(vals))
        mag.div_(len(vals))
    return out, mag, ROUNDED


@dataclass
class Check:
    """One output tensor of a case and how to judge it."""

    got: torch.Tensor  # the output, on the CPU
    exact: torch.Tensor  # float64 or int64
    rule: str = BITWISE
    magnitude: torch.Tensor | None = None  # float64, for the ROUNDED tolerance
    terms: int = 1  # inputs reduced into each element
    nccl: torch.Tensor | None = None  # ctypes mode: the same collective through torch.distributed


def reduced(got: torch.Tensor, xs: list, op: str, dtype: torch.dtype) -> Check:
    exact, mag, rule = reduce_exact(xs, op, dtype)
    return Check(host(got), exact, rule, mag, len(xs))


def moved(got: torch.Tensor, expected: torch.Tensor) -> Check:
    """A data-movement output: must equal `expected` bit for bit."""
    return Check(host(got), exact_of(expected))


# ---------------------------------------------------------------------------------------
# Context and case registry


@dataclass
class Ctx:
    rank: int
    world: int
    device: torch.device
    case: str = ""
    notes: list = field(default_factory=list)
    groups: dict = field(default_factory=dict)
    nccl: "NcclLib | None" = None  # ctypes mode

    def inputs(self, dtype, n, kind, tag=""):
        """Every rank's input of this case, indexed by rank."""
        return [make_input(f"{self.case}/{tag}/{r}", dtype, n, kind) for r in range(self.world)]

    def dev(self, t):
        return t.to(self.device, copy=True)

    def blank(self, n, dtype):
        """An output buffer filled with a marker, so unwritten elements show."""
        fill = float("nan") if dtype.is_floating_point else -12345
        return torch.full((n,), fill, dtype=dtype, device=self.device)

    def note(self, text):
        self.notes.append(text)

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


@dataclass
class Case:
    name: str
    fn: Callable
    dtype: str = "-"
    size: str = "-"


TORCH_CASES: list = []
CTYPES_CASES: list = []


def case(name, dtype_label="-", size_label="-", /, *, registry=None, **params):
    """Decorator: register fn(ctx, **params) as the case `name`."""

    def deco(fn):
        reg = TORCH_CASES if registry is None else registry
        reg.append(Case(name, functools.partial(fn, **params), dtype_label, str(size_label)))
        return fn

    return deco


def skipped(ctx, reason):
    raise Skip(reason)


# ---------------------------------------------------------------------------------------
# Cases through torch.distributed


def all_reduce_case(ctx, op, dtype, n):
    dt = DTYPES[dtype]
    xs = ctx.inputs(dt, n, op)
    t = ctx.dev(xs[ctx.rank])
    dist.all_reduce(t, op=reduce_op(op))
    return {"out": reduced(t, xs, op, dt)}


def premul_tensor_case(ctx, dtype, n):
    """PREMUL_SUM with a 0-d GPU tensor factor (NCCL reads it on the device)."""
    dt = DTYPES[dtype]
    factor = torch.tensor(PREMUL_FACTOR, dtype=dt, device=ctx.device)
    try:
        op = make_premul_sum(factor)
        ctx.note("factor: 0-d tensor")
    except TypeError:
        op = make_premul_sum([factor])
        ctx.note("factor: list of one tensor")
    xs = ctx.inputs(dt, n, "premul_sum")
    t = ctx.dev(xs[ctx.rank])
    dist.all_reduce(t, op=op)
    return {"out": reduced(t, xs, "premul_sum", dt)}


def all_gather_into_tensor_case(ctx, dtype, n):
    dt = DTYPES[dtype]
    xs = ctx.inputs(dt, n, "data")
    out = ctx.blank(ctx.world * n, dt)
    dist.all_gather_into_tensor(out, ctx.dev(xs[ctx.rank]))
    return {"out": moved(out, torch.cat(xs))}


def reduce_scatter_tensor_case(ctx, op, dtype, n):
    dt, r = DTYPES[dtype], ctx.rank
    xs = ctx.inputs(dt, ctx.world * n, op)
    out = ctx.blank(n, dt)
    dist.reduce_scatter_tensor(out, ctx.dev(xs[r]), op=reduce_op(op))
    return {"out": reduced(out, [x[r * n : (r + 1) * n] for x in xs], op, dt)}


def broadcast_case(ctx, root, dtype, n):
    dt = DTYPES[dtype]
    src = 0 if root == "first" else ctx.world - 1
    xs = ctx.inputs(dt, n, "data")
    t = ctx.dev(xs[ctx.rank])
    dist.broadcast(t, src=src)
    return {"out": moved(t, xs[src])}


def reduce_case(ctx, dtype, n):
    dt = DTYPES[dtype]
    root = 1 % ctx.world
    xs = ctx.inputs(dt, n, "sum")
    t = ctx.dev(xs[ctx.rank])
    dist.reduce(t, dst=root, op=dist.ReduceOp.SUM)
    if ctx.rank != root:
        return {}  # NCCL leaves the other ranks' buffers unspecified
    return {"out": reduced(t, xs, "sum", dt)}


def all_to_all_equal_case(ctx, dtype, n):
    dt, w, r = DTYPES[dtype], ctx.world, ctx.rank
    xs = ctx.inputs(dt, w * n, "data")
    out = ctx.blank(w * n, dt)
    dist.all_to_all_single(out, ctx.dev(xs[r]))
    return {"out": moved(out, torch.cat([xs[j][r * n : (r + 1) * n] for j in range(w)]))}


def a2a_count(src, dst, m):
    """Elements rank src sends rank dst in the unequal all-to-all: 0..6 times m."""
    return ((3 * src + 5 * dst) % 7) * m


def all_to_all_unequal_case(ctx, dtype, m):
    """Unequal splits (some zero, self included): PyTorch runs grouped send/recv."""
    dt, w, r = DTYPES[dtype], ctx.world, ctx.rank
    xs = [
        make_input(f"{ctx.case}//{j}", dt, sum(a2a_count(j, k, m) for k in range(w)), "data")
        for j in range(w)
    ]
    in_splits = [a2a_count(r, j, m) for j in range(w)]
    out_splits = [a2a_count(j, r, m) for j in range(w)]
    out = ctx.blank(sum(out_splits), dt)
    dist.all_to_all_single(out, ctx.dev(xs[r]), output_split_sizes=out_splits, input_split_sizes=in_splits)
    parts = []
    for j in range(w):
        off = sum(a2a_count(j, k, m) for k in range(r))
        parts.append(xs[j][off : off + a2a_count(j, r, m)])
    return {"out": moved(out, torch.cat(parts))}


def send_recv_case(ctx, dtype, n):
    """Ring with isend/irecv: r sends to r+1 and receives from r-1.

    Even ranks send first and odd ranks receive first, so that when PyTorch builds a
    two-rank communicator per pair lazily (each build blocks until both ranks join),
    the pairs meet instead of waiting around the ring.
    """
    dt, w, r = DTYPES[dtype], ctx.world, ctx.rank
    if w % 2:
        raise Skip("the even/odd ordering that keeps the ring free of deadlock needs an even world")
    nxt, prv = (r + 1) % w, (r - 1) % w
    xs = ctx.inputs(dt, n, "data")
    send, recv = ctx.dev(xs[r]), ctx.blank(n, dt)
    if r % 2 == 0:
        works = [dist.isend(send, dst=nxt), dist.irecv(recv, src=prv)]
    else:
        works = [dist.irecv(recv, src=prv), dist.isend(send, dst=nxt)]
    for work in works:
        work.wait()
    return {"recv": moved(recv, xs[prv])}


def batch_p2p_case(ctx, dtype, n):
    """batch_isend_irecv: a ring in both directions in one group."""
    dt, w, r = DTYPES[dtype], ctx.world, ctx.rank
    nxt, prv = (r + 1) % w, (r - 1) % w
    fwd = ctx.inputs(dt, n, "data", tag="fwd")
    bwd = ctx.inputs(dt, n, "data", tag="bwd")
    from_prev, from_next = ctx.blank(n, dt), ctx.blank(n, dt)
    ops = [
        dist.P2POp(dist.isend, ctx.dev(fwd[r]), nxt),
        dist.P2POp(dist.irecv, from_prev, prv),
        dist.P2POp(dist.isend, ctx.dev(bwd[r]), prv),
        dist.P2POp(dist.irecv, from_next, nxt),
    ]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    return {"from_prev": moved(from_prev, fwd[prv]), "from_next": moved(from_next, bwd[nxt])}


def barrier_case(ctx):
    dist.barrier()
    return {"done": Check(torch.ones(1, dtype=torch.int32), torch.ones(1, dtype=torch.int64))}


def all_gather_list_case(ctx, dtype, n):
    dt = DTYPES[dtype]
    xs = ctx.inputs(dt, n, "data")
    outs = [ctx.blank(n, dt) for _ in range(ctx.world)]
    dist.all_gather(outs, ctx.dev(xs[ctx.rank]))
    return {f"from{j}": moved(outs[j], xs[j]) for j in range(ctx.world)}


def halves_group(ctx):
    """(members, group) of this rank's half: [0, w/2) or [w/2, w), made with new_group.

    Every rank creates both groups, in the same order, as new_group requires; with the
    default group bound to a device PyTorch makes them with ncclCommSplit.
    """
    if "halves" not in ctx.groups:
        h = max(1, ctx.world // 2)
        lists = [list(range(0, h)), list(range(h, ctx.world))]
        made = [dist.new_group(ranks=ranks) for ranks in lists]
        i = 0 if ctx.rank in lists[0] else 1
        ctx.groups["halves"] = (lists[i], made[i])
    return ctx.groups["halves"]


def new_group_case(ctx, dtype, n):
    dt = DTYPES[dtype]
    members, group = halves_group(ctx)
    xs = ctx.inputs(dt, n, "sum")
    t = ctx.dev(xs[ctx.rank])
    dist.all_reduce(t, group=group)
    return {"out": reduced(t, [xs[m] for m in members], "sum", dt)}


def split_group_case(ctx, dtype, n):
    """dist.split_group into even and odd ranks, then all_reduce inside."""
    if not hasattr(dist, "split_group"):
        raise Skip("torch.distributed.split_group does not exist in this PyTorch")
    w = ctx.world
    lists = [list(range(0, w, 2)), list(range(1, w, 2))]
    members = lists[ctx.rank % 2]
    if "split" not in ctx.groups:
        group = dist.split_group(split_ranks=lists)
        if group is None:
            raise RuntimeError(f"split_group returned None on rank {ctx.rank}, a member of {members}")
        ctx.groups["split"] = group
    group = ctx.groups["split"]
    ctx.note(f"split_group gave {type(group).__name__} of {dist.get_world_size(group)} for {members}")
    dt = DTYPES[dtype]
    xs = ctx.inputs(dt, n, "sum")
    t = ctx.dev(xs[ctx.rank])
    dist.all_reduce(t, group=group)
    return {"out": reduced(t, [xs[m] for m in members], "sum", dt)}


def graph_case(ctx, coll, dtype, n):
    """Capture one collective in a CUDA graph, then replay it 3 times with new inputs.

    Warm-up runs on a side stream before capture, as torch.cuda.graph's documentation asks;
    every replay copies new contents into the captured input buffer first.
    """
    if ctx.device.type != "cuda":
        raise Skip("CUDA graphs need a GPU")
    dt, w, r = DTYPES[dtype], ctx.world, ctx.rank
    in_n = w * n if coll == "reduce_scatter_tensor" else n
    kind = "data" if coll in ("all_gather_into_tensor", "broadcast") else "sum"
    inp = torch.zeros(in_n, dtype=dt, device=ctx.device)
    out = torch.zeros(w * n if coll == "all_gather_into_tensor" else n, dtype=dt, device=ctx.device)
    if coll in ("all_reduce", "broadcast"):
        out = inp  # in place

    def run():
        if coll == "all_reduce":
            dist.all_reduce(inp)
        elif coll == "all_gather_into_tensor":
            dist.all_gather_into_tensor(out, inp)
        elif coll == "reduce_scatter_tensor":
            dist.reduce_scatter_tensor(out, inp)
        else:
            dist.broadcast(inp, src=0)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            run()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()

    checks = {}
    for k in range(3):
        xs = ctx.inputs(dt, in_n, kind, tag=f"replay{k}")
        inp.copy_(xs[r])
        graph.replay()
        if coll == "all_reduce":
            checks[f"replay{k}"] = reduced(out, xs, "sum", dt)
        elif coll == "all_gather_into_tensor":
            checks[f"replay{k}"] = moved(out, torch.cat(xs))
        elif coll == "reduce_scatter_tensor":
            checks[f"replay{k}"] = reduced(out, [x[r * n : (r + 1) * n] for x in xs], "sum", dt)
        else:
            checks[f"replay{k}"] = moved(out, xs[0])
    torch.cuda.synchronize()
    del graph
    return checks


def register_torch_cases():
    # all_reduce: every op x dtype x size; SUM also 64 MiB.
    for op in ("sum", "product", "min", "max", "avg", "premul_sum"):
        for dtype, dt in DTYPES.items():
            if dtype == "int32" and op == "avg":
                case("all_reduce_avg_int32", "int32", reason="ReduceOp.AVG is checked on float types only")(
                    skipped
                )
                continue
            if dtype == "int32" and op == "premul_sum":
                reason = "PyTorch's PREMUL_SUM takes half, float, bfloat16 or double only"
                case("all_reduce_premul_sum_int32", "int32", reason=reason)(skipped)
                continue
            sizes = dict(SIZES)
            if op == "sum":
                sizes["64mib"] = BIG_BYTES // dt.itemsize
            for tag, n in sizes.items():
                case(f"all_reduce_{op}_{dtype}_{tag}", dtype, n, op=op, dtype=dtype, n=n)(all_reduce_case)

    data_dtypes = ("bf16", "fp32", "int32")
    for dtype in data_dtypes:
        for tag, n in (("odd", 7), ("small", 1000), ("mid", MID)):
            case(f"all_gather_into_tensor_{dtype}_{tag}", dtype, n, dtype=dtype, n=n)(
                all_gather_into_tensor_case
            )
    for op in ("sum", "max"):
        for dtype in data_dtypes:
            for tag, n in (("odd", 7), ("mid", MID)):
                case(f"reduce_scatter_tensor_{op}_{dtype}_{tag}", dtype, n, op=op, dtype=dtype, n=n)(
                    reduce_scatter_tensor_case
                )
    for root in ("first", "last"):
        for dtype in data_dtypes:
            for tag, n in (("odd", 7), ("mid", MID)):
                case(f"broadcast_root_{root}_{dtype}_{tag}", dtype, n, root=root, dtype=dtype, n=n)(
                    broadcast_case
                )
    for dtype in data_dtypes:
        for tag, n in (("odd", 7), ("mid", MID)):
            case(f"reduce_sum_root1_{dtype}_{tag}", dtype, n, dtype=dtype, n=n)(reduce_case)
    for dtype in ("bf16", "fp32"):
        for tag, n in (("odd", 7), ("mid", MID)):
            case(f"all_to_all_single_equal_{dtype}_{tag}", dtype, n, dtype=dtype, n=n)(all_to_all_equal_case)
        for tag, m in (("tiny", 1), ("mid", 100003)):
            case(f"all_to_all_single_unequal_{dtype}_{tag}", dtype, f"{m}x0..6", dtype=dtype, m=m)(
                all_to_all_unequal_case
            )
    for dtype in ("bf16", "fp32"):
        for tag, n in (("odd", 7), ("mid", MID)):
            case(f"send_recv_ring_{dtype}_{tag}", dtype, n, dtype=dtype, n=n)(send_recv_case)
            case(f"batch_isend_irecv_ring_{dtype}_{tag}", dtype, n, dtype=dtype, n=n)(batch_p2p_case)
    case("barrier")(barrier_case)
    for dtype in data_dtypes:
        for tag, n in (("odd", 7), ("mid", MID)):
            case(f"all_gather_list_{dtype}_{tag}", dtype, n, dtype=dtype, n=n)(all_gather_list_case)
    for dtype in ("bf16", "fp32"):
        for tag, n in (("small", 1000), ("large", SIZES["large"])):
            case(f"new_group_all_reduce_sum_{dtype}_{tag}", dtype, n, dtype=dtype, n=n)(new_group_case)
    for coll in ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "broadcast"):
        label = {"all_reduce": "all_reduce_sum", "reduce_scatter_tensor": "reduce_scatter_tensor_sum"}.get(
            coll, coll
        )
        for dtype in ("bf16", "fp32"):
            for tag, n in (("odd", 7), ("mid", MID)):
                case(f"graph_{label}_{dtype}_{tag}", dtype, n, coll=coll, dtype=dtype, n=n)(graph_case)
    # Last: the probes PyTorch itself may reject, so that a rejection cannot disturb
    # the cases above.
    for dtype in FLOATS:
        for tag, n in (("odd", 7), ("large", SIZES["large"])):
            case(f"all_reduce_premul_sum_tensor_{dtype}_{tag}", dtype, n, dtype=dtype, n=n)(
                premul_tensor_case
            )
    for dtype, tag, n in (("fp32", "small", 1000), ("bf16", "large", SIZES["large"])):
        case(f"split_group_all_reduce_sum_{dtype}_{tag}", dtype, n, dtype=dtype, n=n)(split_group_case)


# ---------------------------------------------------------------------------------------
# The drop-in through ctypes, as vLLM's pynccl uses NCCL

NCCL_DTYPE = {
    torch.int8: 0,
    torch.uint8: 1,
    torch.int32: 2,
    torch.int64: 4,
    torch.float16: 6,
    torch.float32: 7,
    torch.float64: 8,
    torch.bfloat16: 9,
}
NCCL_OP = {"sum": 0, "product": 1, "max": 2, "min": 3, "avg": 4}


class NcclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


class NcclError(RuntimeError):
    pass


class NcclLib:
    """NCCL's C API from one shared library, loaded RTLD_LOCAL."""

    _vp, _int, _size = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
    SIGNATURES = {
        "ncclGetVersion": [ctypes.POINTER(ctypes.c_int)],
        "ncclGetUniqueId": [ctypes.POINTER(NcclUniqueId)],
        "ncclCommInitRank": [ctypes.POINTER(ctypes.c_void_p), _int, NcclUniqueId, _int],
        "ncclCommDestroy": [_vp],
        "ncclAllReduce": [_vp, _vp, _size, _int, _int, _vp, _vp],
        "ncclAllGather": [_vp, _vp, _size, _int, _vp, _vp],
        "ncclReduceScatter": [_vp, _vp, _size, _int, _int, _vp, _vp],
        "ncclBroadcast": [_vp, _vp, _size, _int, _int, _vp, _vp],
        "ncclSend": [_vp, _size, _int, _int, _vp, _vp],
        "ncclRecv": [_vp, _size, _int, _int, _vp, _vp],
        "ncclGroupStart": [],
        "ncclGroupEnd": [],
        "ncclCommAbort": [_vp],
    }

    def __init__(self, path):
        self.path = path
        self.lib = ctypes.CDLL(path, mode=os.RTLD_LOCAL)
        self.missing = []
        for name, argtypes in self.SIGNATURES.items():
            fn = getattr(self.lib, name, None)
            if fn is None:
                self.missing.append(name)
                continue
            fn.restype = ctypes.c_int  # ncclResult_t
            fn.argtypes = argtypes
        for name, argtypes in (
            ("ncclGetErrorString", [ctypes.c_int]),
            ("ncclGetLastError", [ctypes.c_void_p]),
        ):
            fn = getattr(self.lib, name, None)
            if fn is None:
                self.missing.append(name)
                continue
            fn.restype = ctypes.c_char_p
            fn.argtypes = argtypes
        self.comm = ctypes.c_void_p()

    def _text(self, name, arg):
        if name in self.missing:
            return f"<{name} not exported>"
        raw = getattr(self.lib, name)(arg)
        return raw.decode(errors="replace") if raw else "<null>"

    def check(self, name, rc):
        if rc != 0:
            raise NcclError(
                f"{name} returned {rc} ({self._text('ncclGetErrorString', rc)}); "
                f"ncclGetLastError: {self._text('ncclGetLastError', self.comm)}"
            )

    def call(self, name, *args):
        if name in self.missing:
            raise NcclError(f"{name} is not exported by {self.path}")
        self.check(name, getattr(self.lib, name)(*args))


def stream():
    return torch.cuda.current_stream().cuda_stream


def need_comm(ctx):
    if not ctx.nccl.comm.value:
        raise Skip("no communicator: ctypes_comm_init_rank failed")
    return ctx.nccl


def ct_version_case(ctx):
    version = ctypes.c_int()
    ctx.nccl.call("ncclGetVersion", ctypes.byref(version))
    ctx.note(f"drop-in ncclGetVersion {version.value}, torch's NCCL {torch.cuda.nccl.version()}")
    return {}


def ct_init_case(ctx):
    """ncclGetUniqueId on rank 0, its 128 bytes broadcast, ncclCommInitRank everywhere."""
    nc = ctx.nccl
    uid = NcclUniqueId()
    payload = [None]
    if ctx.rank == 0:
        try:
            nc.call("ncclGetUniqueId", ctypes.byref(uid))
            payload = [ctypes.string_at(ctypes.addressof(uid), ctypes.sizeof(uid))]
        except Exception as e:
            payload = [f"rank 0: {e}"]
    dist.broadcast_object_list(payload, src=0)  # through torch's own (real) NCCL
    if isinstance(payload[0], str):
        raise NcclError(payload[0])
    uid = NcclUniqueId.from_buffer_copy(payload[0])
    with torch.cuda.device(ctx.device):
        nc.call("ncclCommInitRank", ctypes.byref(nc.comm), ctx.world, uid, ctx.rank)
    ctx.note(f"comm {nc.comm.value:#x}")
    return {}


def ct_all_reduce_case(ctx, op, dtype, n, inplace=False, default_stream=False):
    if default_stream:
        with torch.cuda.stream(torch.cuda.default_stream()):
            return ct_all_reduce_case(ctx, op, dtype, n, inplace)
    nc, dt, r = need_comm(ctx), DTYPES[dtype], ctx.rank
    xs = ctx.inputs(dt, n, op)
    src = ctx.dev(xs[r])
    dst = src if inplace else ctx.blank(n, dt)
    nc.call(
        "ncclAllReduce", src.data_ptr(), dst.data_ptr(), n, NCCL_DTYPE[dt], NCCL_OP[op], nc.comm, stream()
    )
    ctx.sync()
    ref = ctx.dev(xs[r])
    dist.all_reduce(ref, op=reduce_op(op))
    chk = reduced(dst, xs, op, dt)
    chk.nccl = host(ref)
    return {"out": chk}


def ct_all_gather_case(ctx, dtype, n):
    nc, dt, r = need_comm(ctx), DTYPES[dtype], ctx.rank
    xs = ctx.inputs(dt, n, "data")
    src, dst = ctx.dev(xs[r]), ctx.blank(ctx.world * n, dt)
    nc.call("ncclAllGather", src.data_ptr(), dst.data_ptr(), n, NCCL_DTYPE[dt], nc.comm, stream())
    ctx.sync()
    ref = ctx.blank(ctx.world * n, dt)
    dist.all_gather_into_tensor(ref, ctx.dev(xs[r]))
    chk = moved(dst, torch.cat(xs))
    chk.nccl = host(ref)
    return {"out": chk}


def ct_reduce_scatter_case(ctx, op, dtype, n):
    nc, dt, r = need_comm(ctx), DTYPES[dtype], ctx.rank
    xs = ctx.inputs(dt, ctx.world * n, op)
    src, dst = ctx.dev(xs[r]), ctx.blank(n, dt)
    nc.call(
        "ncclReduceScatter", src.data_ptr(), dst.data_ptr(), n, NCCL_DTYPE[dt], NCCL_OP[op], nc.comm, stream()
    )
    ctx.sync()
    ref = ctx.blank(n, dt)
    dist.reduce_scatter_tensor(ref, ctx.dev(xs[r]), op=reduce_op(op))
    chk = reduced(dst, [x[r * n : (r + 1) * n] for x in xs], op, dt)
    chk.nccl = host(ref)
    return {"out": chk}


def ct_broadcast_case(ctx, root, dtype, n):
    nc, dt, r = need_comm(ctx), DTYPES[dtype], ctx.rank
    src_rank = 0 if root == "first" else ctx.world - 1
    xs = ctx.inputs(dt, n, "data")
    src, dst = ctx.dev(xs[r]), ctx.blank(n, dt)
    nc.call("ncclBroadcast", src.data_ptr(), dst.data_ptr(), n, NCCL_DTYPE[dt], src_rank, nc.comm, stream())
    ctx.sync()
    ref = ctx.dev(xs[r])
    dist.broadcast(ref, src=src_rank)
    chk = moved(dst, xs[src_rank])
    chk.nccl = host(ref)
    return {"out": chk}


def ct_send_recv_case(ctx, dtype, n):
    """ncclSend to r+1 and ncclRecv from r-1 inside ncclGroupStart/End."""
    nc, dt, w, r = need_comm(ctx), DTYPES[dtype], ctx.world, ctx.rank
    nxt, prv = (r + 1) % w, (r - 1) % w
    xs = ctx.inputs(dt, n, "data")
    send, recv = ctx.dev(xs[r]), ctx.blank(n, dt)
    nc.call("ncclGroupStart")
    try:
        nc.call("ncclSend", send.data_ptr(), n, NCCL_DTYPE[dt], nxt, nc.comm, stream())
        nc.call("ncclRecv", recv.data_ptr(), n, NCCL_DTYPE[dt], prv, nc.comm, stream())
    finally:
        end = nc.lib.ncclGroupEnd()
    nc.check("ncclGroupEnd", end)
    return {"recv": moved(recv, xs[prv])}


def ct_destroy_case(ctx):
    nc = need_comm(ctx)
    ctx.sync()
    nc.call("ncclCommDestroy", nc.comm)
    nc.comm = ctypes.c_void_p()
    return {}


# The bound on ncclCommAbort with a collective in flight: abort returns, and the caller's
# stream drains, within this many seconds (the liveness target).
ABORT_BOUND_S = 2.0


def ct_abort_in_flight_case(ctx, n):
    """Ranks other than 0 call an all-reduce that rank 0 never joins; 300 ms later a
    second thread on every rank calls ncclCommAbort, as PyTorch's watchdog does.
    Small n: a packet kernel that needs no host exchange, so the call returns and its
    kernel spins on the stream. Large n: the kernel reaches into the peers' buffers, so
    the call waits on the host for rank 0's entry in the call table. Either way abort
    must return, the call end and the stream drain within ABORT_BOUND_S of the abort on
    every rank, and the device stay usable."""
    nc, dt = need_comm(ctx), torch.float32
    comm = nc.comm.value
    buf = torch.zeros(n, dtype=dt, device=ctx.device)
    got = {}

    def abort_later():
        time.sleep(0.3)
        got["t0"] = time.monotonic()
        got["rc"] = nc.lib.ncclCommAbort(comm)
        got["abort"] = time.monotonic()

    aborter = threading.Thread(target=abort_later, daemon=True)
    aborter.start()
    call_rc, t_call = None, None
    if ctx.rank != 0:
        call_rc = nc.lib.ncclAllReduce(
            buf.data_ptr(), buf.data_ptr(), n, NCCL_DTYPE[dt], NCCL_OP["sum"], comm, stream()
        )
        t_call = time.monotonic()
    aborter.join(timeout=ABORT_BOUND_S + 10)
    nc.comm = ctypes.c_void_p()
    if aborter.is_alive():
        raise NcclError(f"ncclCommAbort has not returned {ABORT_BOUND_S + 10} s after it was called")
    torch.cuda.current_stream().synchronize()
    t0 = got["t0"]
    drained = time.monotonic() - t0
    probe = ctx.dev(torch.arange(4, dtype=dt)) * 2  # the context survived
    ctx.sync()
    mine = {
        "abort": got["abort"] - t0,
        "call": None if t_call is None else t_call - t0,  # < 0: returned before the abort
        "call_rc": call_rc,
        "drained": drained,
    }
    every = [None] * ctx.world
    dist.all_gather_object(every, mine)  # through torch's own NCCL: one note for all ranks
    ctx.note(
        "after the abort: "
        + "; ".join(
            f"r{r}: abort {m['abort']:.3f} s"
            + ("" if m["call"] is None else f", call rc {m['call_rc']} at {m['call']:+.3f} s")
            + f", drained {m['drained']:.3f} s"
            for r, m in enumerate(every)
        )
    )
    if got["rc"] != 0:
        raise NcclError(f"ncclCommAbort returned {got['rc']}")
    if max(drained, got["abort"] - t0) > ABORT_BOUND_S:
        raise NcclError(f"abort took {drained:.3f} s, above the {ABORT_BOUND_S} s bound")
    if probe.tolist() != [0.0, 2.0, 4.0, 6.0]:
        raise NcclError(f"the device computes wrong after the abort: {probe.tolist()}")
    return {}


def register_ctypes_cases():
    reg = CTYPES_CASES
    case("ctypes_get_version", registry=reg)(ct_version_case)
    case("ctypes_comm_init_rank", registry=reg)(ct_init_case)
    for op, dtype in (
        ("sum", "bf16"),
        ("sum", "fp32"),
        ("sum", "int32"),
        ("product", "fp32"),
        ("max", "bf16"),
        ("min", "int32"),
        ("avg", "fp32"),
        ("avg", "fp16"),
    ):
        for tag, n in (("odd", 7), ("mid", MID)):
            case(f"ctypes_all_reduce_{op}_{dtype}_{tag}", dtype, n, registry=reg, op=op, dtype=dtype, n=n)(
                ct_all_reduce_case
            )
    for variant in ("inplace", "default_stream"):
        case(
            f"ctypes_all_reduce_sum_fp32_{variant}",
            "fp32",
            MID,
            registry=reg,
            op="sum",
            dtype="fp32",
            n=MID,
            **{variant: True},
        )(ct_all_reduce_case)
    for dtype in ("bf16", "fp32"):
        for tag, n in (("odd", 7), ("mid", MID)):
            case(f"ctypes_all_gather_{dtype}_{tag}", dtype, n, registry=reg, dtype=dtype, n=n)(
                ct_all_gather_case
            )
    for op, dtype in (("sum", "fp32"), ("max", "bf16")):
        for tag, n in (("odd", 7), ("mid", MID)):
            case(
                f"ctypes_reduce_scatter_{op}_{dtype}_{tag}", dtype, n, registry=reg, op=op, dtype=dtype, n=n
            )(ct_reduce_scatter_case)
    for root in ("first", "last"):
        case(
            f"ctypes_broadcast_root_{root}_fp32_mid",
            "fp32",
            MID,
            registry=reg,
            root=root,
            dtype="fp32",
            n=MID,
        )(ct_broadcast_case)
    for tag, n in (("odd", 7), ("mid", MID)):
        case(f"ctypes_send_recv_ring_fp32_{tag}", "fp32", n, registry=reg, dtype="fp32", n=n)(
            ct_send_recv_case
        )
    case("ctypes_comm_destroy", registry=reg)(ct_destroy_case)
    # more communicators, each aborted with a call in flight
    for what, n in (("kernel_spinning", 4096), ("host_waiting", MID)):
        case(f"ctypes_comm_init_rank_for_{what}", registry=reg)(ct_init_case)
        case(f"ctypes_comm_abort_{what}", "fp32", n, registry=reg, n=n)(ct_abort_in_flight_case)


register_torch_cases()
register_ctypes_cases()


# ---------------------------------------------------------------------------------------
# Judging


def bits(t: torch.Tensor) -> torch.Tensor:
    if not t.is_floating_point():
        return t
    return t.contiguous().view(
        {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    )


def max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max()) if a.numel() else 0.0


def tolerance(chk: Check) -> torch.Tensor:
    fi = torch.finfo(chk.got.dtype)
    k = chk.terms + 1
    return k * fi.eps * chk.magnitude + fi.eps * chk.exact.abs() + k * fi.eps * fi.tiny


def judge(chk: Check, nccl: torch.Tensor | None):
    """(status, max|d| vs nccl, ulp vs nccl, max|d| vs exact, note) of one output."""
    got, exact = chk.got, chk.exact
    if got.shape != exact.shape:
        return "WRONG", None, None, None, f"shape {tuple(got.shape)}, expected {tuple(exact.shape)}"
    if nccl is not None and (nccl.shape != got.shape or nccl.dtype != got.dtype):
        note = f"NCCL gave {nccl.dtype}{tuple(nccl.shape)}, this run {got.dtype}{tuple(got.shape)}"
        return "WRONG", None, None, None, note
    g = exact_of(got)
    n = None if nccl is None else exact_of(nccl)
    d_exact = max_abs(g, exact)
    d_nccl = None if n is None else max_abs(g, n)
    ulp = None
    if n is not None and got.is_floating_point() and got.numel():
        fi = torch.finfo(got.dtype)
        ulp = float(((g - n).abs() / (fi.eps * n.abs().clamp_min(fi.tiny))).max())

    def result(status, note=""):
        return status, d_nccl, ulp, d_exact, note

    if chk.rule == BITWISE or not got.is_floating_point():
        exact_ok = torch.equal(g, exact)
        if n is None:
            if exact_ok:
                return result("ok")
            return result("WRONG", f"{int((g != exact).sum())} of {g.numel()} differ from exact")
        differ = int((bits(got) != bits(nccl)).sum())
        if differ:
            return result("WRONG", f"{differ} of {g.numel()} differ from NCCL bitwise")
        return result("ok") if exact_ok else result("ok", "equals NCCL, which differs from the exact result")

    tol = tolerance(chk)
    within = (g - exact).abs() <= tol  # False for NaN
    if bool(within.all()):
        return result("ok")
    if n is not None:
        nccl_off = not bool(((n - exact).abs() <= tol).all())
        if nccl_off and bool(((g - n).abs() <= tol).all()):
            return result("ok", "matches NCCL, which is off the exact result beyond tolerance too")
    return result("WRONG", f"{int((~within).sum())} of {g.numel()} beyond tolerance of exact")


RANK_ORDER = {"skipped": 0, "ok": 1, "WRONG": 2, "error": 3}


def worse(a, b):
    return a if RANK_ORDER[a] >= RANK_ORDER[b] else b


def fmax(a, b):
    if a is None:
        return b
    return a if b is None else max(a, b)


def table_row(name, status, note="", dtype="-", size="-"):
    """A rank's row of the report, before any difference is measured."""
    return {
        "case": name,
        "dtype": dtype,
        "size": size,
        "status": status,
        "d_nccl": None,
        "ulp": None,
        "d_exact": None,
        "note": note,
    }


def verdict(c: Case, status, msg, checks, notes, ref_entry, have_ref):
    """One rank's row for one case."""
    row = table_row(c.name, status, dtype=c.dtype, size=c.size)
    notes = list(notes)
    if status == "skipped":
        row["note"] = msg
        return row
    if status == "error":
        if ref_entry is not None and ref_entry["status"] == "error":
            row.update(status="skipped", note=f"plain NCCL raised too: {ref_entry['msg']}")
        else:
            row["note"] = msg
        return row
    ref_out = None
    if have_ref:
        if ref_entry is None:
            notes.append("no NCCL record of this case")
        elif ref_entry["status"] != "done":
            notes.append(f"plain NCCL {ref_entry['status']}: {ref_entry['msg']}")
        else:
            ref_out = ref_entry["outputs"]
    worst = "ok"
    for name, chk in checks.items():
        nccl = chk.nccl
        if nccl is None and ref_out is not None:
            nccl = ref_out.get(name)
            if nccl is None:
                notes.append(f"{name}: not in the NCCL record")
        st, d_n, ulp, d_e, note = judge(chk, nccl)
        worst = worse(worst, st)
        row["d_nccl"] = fmax(row["d_nccl"], d_n)
        row["ulp"] = fmax(row["ulp"], ulp)
        row["d_exact"] = fmax(row["d_exact"], d_e)
        if note:
            notes.append(f"{name}: {note}" if len(checks) > 1 else note)
    row["status"] = worst
    row["note"] = "; ".join(notes)
    return row


# ---------------------------------------------------------------------------------------
# Running


def one_line(e: BaseException) -> str:
    text = " ".join(line.strip() for line in str(e).strip().splitlines()[:2])
    return f"{type(e).__name__}: {text}"[:300]


def select(cases, spec):
    """The cases whose name holds one of the comma-separated parts of spec (^part: starts with)."""
    if not spec:
        return list(cases)
    parts = [p for p in spec.split(",") if p]

    def hit(name, part):
        return name.startswith(part[1:]) if part.startswith("^") else part in name

    return [c for c in cases if any(hit(c.name, p) for p in parts)]


def run_case(ctx: Ctx, c: Case):
    """(status, message, checks); the case ends with a device synchronize."""
    ctx.case, ctx.notes = c.name, []
    try:
        checks = c.fn(ctx)
        ctx.sync()
        return "done", "", checks
    except Skip as e:
        return "skipped", str(e), {}
    except Exception as e:
        print(f"rank {ctx.rank}: case {c.name} raised:", file=sys.stderr)
        traceback.print_exc()
        try:
            ctx.sync()
        except Exception as e2:
            print(f"rank {ctx.rank}: synchronize after {c.name}: {one_line(e2)}", file=sys.stderr)
        return "error", one_line(e), {}


def progress(ctx, i, total, c, status, dt):
    if ctx.rank == 0:
        print(f"[{i + 1}/{total}] {c.name} {status} {dt:.2f}s", file=sys.stderr, flush=True)


def mapped(substr: str) -> bool:
    """Whether a file whose path holds substr is mapped into this process."""
    try:
        with open("/proc/self/maps") as f:
            return any(substr in line for line in f)
    except OSError:
        return False


def load_ref(args, ctx):
    """(reference cases or None, note) from --ref."""
    path = os.path.join(args.ref, f"rank{ctx.rank}.pt")
    if not os.path.exists(path):
        return None, f"no reference file {path}: judging against the exact results only"
    data = torch.load(path, map_location="cpu", weights_only=True)
    if data.get("world") != ctx.world:
        return None, f"{path} is from a world of {data.get('world')}, not {ctx.world}: ignored"
    return data["cases"], ""


def run_torch(args, ctx):
    """record / compare: run the cases, save the outputs, judge them."""
    rows = []
    if args.expect_mapped and not mapped(args.expect_mapped):
        note = f"{args.expect_mapped} is not mapped (LD_PRELOAD={os.environ.get('LD_PRELOAD', '')!r})"
        rows.append(table_row("dropin_mapped", "error", note))
    ref, have_ref = None, args.mode == "compare"
    if have_ref:
        ref, note = load_ref(args, ctx)
        if ref is None:
            have_ref = False
            rows.append(table_row("nccl_reference", "error", note))
    cases = select(TORCH_CASES, args.cases)
    record = {}
    for i, c in enumerate(cases):
        t0 = time.monotonic()
        status, msg, checks = run_case(ctx, c)
        progress(ctx, i, len(cases), c, status, time.monotonic() - t0)
        record[c.name] = {"status": status, "msg": msg, "outputs": {k: v.got for k, v in checks.items()}}
        ref_entry = ref.get(c.name) if ref is not None else None
        rows.append(verdict(c, status, msg, checks, ctx.notes, ref_entry, have_ref))
        del checks
    path = os.path.join(args.out, f"rank{ctx.rank}.pt")
    torch.save({"world": ctx.world, "rank": ctx.rank, "cases": record}, path)
    return rows


def run_ctypes(args, ctx):
    """ctypes: the drop-in called directly, judged against torch.distributed (real NCCL)."""
    rows = []

    def error_row(name, note):
        rows.append(table_row(name, "error", note))

    if ctx.device.type != "cuda":
        error_row("ctypes_mode", "needs the nccl backend on GPUs")
        return rows
    if mapped(DROPIN_NAME):
        error_row(
            "ctypes_plain_nccl", f"{DROPIN_NAME} is already mapped before ctypes loads it (LD_PRELOAD?)"
        )
    try:
        ctx.nccl = NcclLib(args.lib)
    except OSError as e:
        error_row("ctypes_load", f"{args.lib}: {e}")
        return rows
    if ctx.nccl.missing:
        print(f"rank {ctx.rank}: not exported by {args.lib}: {', '.join(ctx.nccl.missing)}", file=sys.stderr)
    cases = select(CTYPES_CASES, args.cases)
    # A stream of its own, as vLLM's pynccl runs on; ctypes_all_reduce_*_default_stream
    # passes the default (null) stream instead.
    side = torch.cuda.Stream()
    for i, c in enumerate(cases):
        t0 = time.monotonic()
        with torch.cuda.stream(side):
            status, msg, checks = run_case(ctx, c)
        progress(ctx, i, len(cases), c, status, time.monotonic() - t0)
        rows.append(verdict(c, status, msg, checks, ctx.notes, None, False))
    if ctx.nccl.comm.value:  # a run filtered without ctypes_comm_destroy
        try:
            ctx.nccl.call("ncclCommDestroy", ctx.nccl.comm)
        except Exception as e:
            print(f"rank {ctx.rank}: ncclCommDestroy: {one_line(e)}", file=sys.stderr)
    return rows


def verdict_path(out, rank):
    return os.path.join(out, f"verdict{rank}.json")


def write_verdicts(out, rank, rows):
    path = verdict_path(out, rank)
    with open(path + ".tmp", "w") as f:
        json.dump({"rank": rank, "rows": rows}, f)
    os.replace(path + ".tmp", path)


def collect_verdicts(out, world, wait_s):
    """Every rank's rows that arrive within wait_s seconds: {rank: rows}."""
    deadline = time.monotonic() + wait_s
    got = {}
    while True:
        for r in range(world):
            if r not in got and os.path.exists(verdict_path(out, r)):
                with open(verdict_path(out, r)) as f:
                    got[r] = json.load(f)["rows"]
        if len(got) == world or time.monotonic() > deadline:
            return got
        time.sleep(0.5)


def fmt_d(d, ulp=None):
    if d is None:
        return "-"
    return f"{d:.2e}" + (f" ({ulp:.3g} ulp)" if ulp is not None else "")


def table_line(case_name, dtype, size, status, vs_nccl, vs_exact, note):
    return f"{case_name:<46} {dtype:<6} {size:>10}  {status:<8} {vs_nccl:<24} {vs_exact:<16} {note}"


def merge_case(entries, nranks):
    """One table row from every rank's row of a case: worst status, largest differences."""
    live = [row["status"] for _, row in entries if row["status"] != "skipped"]
    status = max(live, key=RANK_ORDER.get) if live else "skipped"
    d_n = ulp = d_e = None
    for _, row in entries:
        d_n, ulp, d_e = fmax(d_n, row["d_nccl"]), fmax(ulp, row["ulp"]), fmax(d_e, row["d_exact"])
    # The note of the first rank with the case's status, else the first note.
    noted = [(r, row["note"]) for r, row in entries if row["note"] and row["status"] == status]
    noted = noted or [(r, row["note"]) for r, row in entries if row["note"]]
    note = ""
    if noted:
        r, text = noted[0]
        note = text if nranks == 1 else f"r{r}: {text}"
    return status, fmt_d(d_n, ulp), fmt_d(d_e), note


def report(args, world, per_rank) -> int:
    """Rank 0: print one line per case (worst over ranks) and the summary; the exit status."""
    nccl_version = torch.cuda.nccl.version() if torch.cuda.is_available() else "-"
    print(
        f"torch_dropin {args.mode}: world {world}, torch {torch.__version__}, torch.cuda.nccl {nccl_version}"
    )
    print(
        "tolerance for float SUM/AVG/PRODUCT/PREMUL_SUM: |test - exact| <= (n+1)*eps*M + eps*|exact|, "
        "n = inputs reduced, eps = torch.finfo(dtype).eps, M = sum |inputs| (AVG: /n; "
        "PREMUL_SUM: of |factor*input|; PRODUCT: product of |inputs|); "
        "integers, MIN/MAX and data movement: bit-exact vs NCCL and exact"
    )
    if args.mode == "record":
        print("record mode judges plain NCCL against the exact results (there is no 'vs nccl' column)")
    by_case = {}  # case -> [(rank, row)], in the order of the cases
    for r in sorted(per_rank):
        for row in per_rank[r]:
            by_case.setdefault(row["case"], []).append((r, row))
    print(table_line("case", "dtype", "size", "status", "max|d| vs nccl", "max|d| vs exact", "note"))
    counts = {"ok": 0, "WRONG": 0, "error": 0, "skipped": 0}
    for name, entries in by_case.items():
        status, vs_nccl, vs_exact, note = merge_case(entries, len(per_rank))
        counts[status] += 1
        first = entries[0][1]
        print(table_line(name, first["dtype"], first["size"], status, vs_nccl, vs_exact, note))
    missing = [r for r in range(world) if r not in per_rank]
    for r in missing:
        print(f"rank {r}: no verdict file within {args.wait}s (it crashed, hung or is still running)")
    counts["error"] += len(missing)
    ok, wrong, errors, skips = (counts[k] for k in ("ok", "WRONG", "error", "skipped"))
    print(f"torch_dropin: {ok} ok, {wrong} wrong, {errors} errors, {skips} skipped", flush=True)
    if args.mode == "record":
        return 0
    return 1 if wrong or errors else 0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=("record", "compare", "ctypes"), default="record")
    p.add_argument("--out", help="folder for rank{r}.pt and verdict{r}.json")
    p.add_argument("--ref", help="compare: the folder a record run wrote")
    p.add_argument(
        "--lib",
        default=os.environ.get("COMMHAL_DROPIN_LIB", ".gpu/libcommhal_nccl.so"),
        help="ctypes: the drop-in to load (default .gpu/libcommhal_nccl.so)",
    )
    p.add_argument(
        "--cases",
        default="",
        help="comma-separated parts; run only the cases whose name holds one (^part: starts with it)",
    )
    p.add_argument(
        "--expect-mapped",
        metavar="NAME",
        default="",
        help="an error row unless a file whose path holds NAME is mapped into the process "
        "(that LD_PRELOAD took)",
    )
    p.add_argument(
        "--backend",
        choices=("nccl", "gloo"),
        default="nccl",
        help="gloo: run on the CPU, a check of this harness without GPUs",
    )
    p.add_argument("--timeout", type=int, default=120, help="process-group timeout, seconds")
    p.add_argument(
        "--wait", type=int, default=300, help="rank 0's wait for the other ranks' verdicts, seconds"
    )
    p.add_argument("--list", action="store_true", help="print the case names and exit")
    args = p.parse_args(argv)
    if not args.list and not args.out:
        p.error("--out is required")
    if args.mode == "compare" and not args.ref:
        p.error("--mode compare needs --ref")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.list:
        for c in select(TORCH_CASES, args.cases) + select(CTYPES_CASES, args.cases):
            print(f"{c.name:<46} {c.dtype:<6} {c.size:>10}")
        return 0
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if world < 2:
        print("torch_dropin: needs 2 or more ranks", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    # Before the rendezvous, so that rank 0 cannot read a verdict an earlier run left.
    for stale in (verdict_path(args.out, rank), os.path.join(args.out, f"rank{rank}.pt")):
        if os.path.exists(stale):
            os.remove(stale)
    torch.set_num_threads(max(1, min(8, (os.cpu_count() or 1) // world)))
    timeout = timedelta(seconds=args.timeout)
    if args.backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        # device_id: eager communicator init, and new_group through ncclCommSplit.
        dist.init_process_group("nccl", device_id=device, timeout=timeout)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", timeout=timeout)
    if rank == 0:
        print(
            f"torch_dropin {args.mode}: LD_PRELOAD={os.environ.get('LD_PRELOAD', '')!r} "
            f"COMMHAL_NCCL_FALLBACK={os.environ.get('COMMHAL_NCCL_FALLBACK', '<unset>')!r} "
            f"{DROPIN_NAME} mapped: {mapped(DROPIN_NAME)}",
            file=sys.stderr,
            flush=True,
        )
    ctx = Ctx(rank, world, device)
    rows = run_ctypes(args, ctx) if args.mode == "ctypes" else run_torch(args, ctx)
    write_verdicts(args.out, rank, rows)
    rc = 0
    if rank == 0:
        rc = report(args, world, collect_verdicts(args.out, world, args.wait))
    try:
        dist.destroy_process_group()
    except Exception as e:
        print(f"rank {rank}: destroy_process_group: {one_line(e)}", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
