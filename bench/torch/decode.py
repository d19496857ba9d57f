"""Tensor-parallel decode step of Llama-3-70B-shaped layers, captured in one CUDA graph,
timed per step, with the two all-reduces per layer served by one NCCL-API library.

    # torch.distributed (LD_PRELOAD swaps the NCCL library torch calls)
    torchrun --nproc-per-node 4 bench/torch/decode.py --comm torch --label nccl --json out.json
    # the library called directly through ctypes (pynccl.py), as vLLM's pynccl does
    torchrun --nproc-per-node 4 bench/torch/decode.py --comm ctypes --lib /path/libnccl.so.2 \
        --label nccl --json out.json
    # no all-reduce at all: the compute-only floor
    torchrun --nproc-per-node 4 bench/torch/decode.py --comm none --json out.json

The model (per layer, bf16, random weights): RMSNorm -> QKV (column-parallel) ->
attention of one new token against a 2048-token KV cache -> O (row-parallel) ->
all-reduce -> residual -> RMSNorm -> gate/up (column-parallel, SwiGLU) -> down
(row-parallel) -> all-reduce -> residual; hidden 8192, 64 query heads, 8 KV heads, head
dim 128, MLP 28672, sharded Megatron-style over the torchrun ranks. The all-reduces are
in place on [batch, 8192] bf16: 16 KiB at batch 1, 1 MiB at batch 64.

For each batch (default 1, 8, 32, 64) the whole step, every layer, is captured in one
CUDA graph and replayed: after warmup, CUDA events around each of --replays replays,
the median, the slowest rank's. Rank 0 writes --json after each batch:
{"bench": "decode", "library", "api", "tp", ..., "complete", "results": [{"library",
"api", "tp", "batch", "step_us", "tokens_per_s", "layers", "context", "finite",
"out_absmean", "rank_spread"}]}, with tokens_per_s = batch * 1e6 / step_us. The last
three check the all-reduces (see output_check): every run draws the same weights,
cache and input, so mean |out| agrees across libraries up to rounding, and the hidden
state stays equal on every rank.

Memory per GPU: about 430 MB of weights per layer at TP 4 (860 MB at TP 2) plus the KV
cache, 2 * batch * (8 / TP) * context * 128 * 2 bytes per layer.
"""

import argparse
import gc
import statistics
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

from sweep import (
    TorchComm,
    all_ranks,
    capture,
    init_distributed,
    library_facts,
    make_comm,
    max_over_ranks,
    run_facts,
    sync_ranks,
    teardown,
    write_json,
)

DTYPE = torch.bfloat16


class Shape:
    """Model sizes and this rank's shard of them."""

    def __init__(self, args, tp):
        self.hidden, self.head_dim, self.ffn = args.hidden, args.head_dim, args.ffn
        for name, n in (("heads", args.heads), ("kv_heads", args.kv_heads), ("ffn", args.ffn)):
            if n % tp:
                raise SystemExit(f"decode: {name} {n} does not split over TP {tp}")
        if args.heads % args.kv_heads:
            raise SystemExit("decode: heads must be a multiple of kv_heads")
        self.heads_local = args.heads // tp
        self.kv_local = args.kv_heads // tp
        self.ffn_local = args.ffn // tp
        self.q_width = self.heads_local * self.head_dim
        self.qkv_width = (self.heads_local + 2 * self.kv_local) * self.head_dim
        self.full_attn_width = args.heads * self.head_dim


class Layer:
    """One layer's shard. Weights are [out, in] (F.linear); each is drawn with std
    1/sqrt(full fan-in), so activations keep their scale through the stack and the
    row-parallel partial sums add up to a unit-scale output."""

    def __init__(self, s, device):
        def w(out_f, in_f, fan_in):
            return torch.empty(out_f, in_f, dtype=DTYPE, device=device).normal_(0.0, fan_in**-0.5)

        self.ln1 = torch.ones(s.hidden, dtype=DTYPE, device=device)
        self.ln2 = torch.ones(s.hidden, dtype=DTYPE, device=device)
        self.qkv = w(s.qkv_width, s.hidden, s.hidden)  # column-parallel: this rank's heads
        self.o = w(s.hidden, s.q_width, s.full_attn_width)  # row-parallel
        self.gate_up = w(2 * s.ffn_local, s.hidden, s.hidden)  # column-parallel, gate then up
        self.down = w(s.hidden, s.ffn_local, s.ffn)  # row-parallel


def rms_norm(x, weight, eps=1e-5):
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def attend_gqa(q, k, v):
    """q [B, H, 1, D] against k, v [B, KV, T, D]; query head h reads KV head h // (H / KV)."""
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


def attend_folded(q, k, v):
    """The same attention without enable_gqa: the H / KV query heads that share a KV head
    become that head's H / KV query positions (no mask: one new token sees the whole
    cache), so the KV heads are never repeated in memory."""
    b, h, _, d = q.shape
    kv = k.shape[1]
    out = F.scaled_dot_product_attention(q.reshape(b, kv, h // kv, d), k, v)
    return out.reshape(b, h, 1, d)


def pick_attention(choice, device):
    if choice == "fold":
        return attend_folded, "fold"
    q = torch.zeros(1, 4, 1, 64, dtype=DTYPE, device=device)
    kv = torch.zeros(1, 2, 8, 64, dtype=DTYPE, device=device)
    try:
        attend_gqa(q, kv, kv)
        return attend_gqa, "gqa"
    except TypeError:  # a torch without enable_gqa
        return attend_folded, "fold (enable_gqa missing)"


def decode_step(x, layers, cache, s, all_reduce, attend):
    """One token for each of the batch's sequences through every layer; x is [B, hidden]."""
    b = x.shape[0]
    for i, w in enumerate(layers):
        h = rms_norm(x, w.ln1)
        qkv = F.linear(h, w.qkv)
        q = qkv[:, : s.q_width].view(b, s.heads_local, 1, s.head_dim)
        # The new token's k and v (qkv[:, q_width:]) would get rotary embeddings and be
        # written into the cache here; both are skipped, as they cost the same whatever
        # library serves the all-reduces (q is not rotated either).
        a = attend(q, cache[i, 0], cache[i, 1])
        o = F.linear(a.reshape(b, s.q_width), w.o)
        all_reduce(o)
        x = x + o
        h = rms_norm(x, w.ln2)
        gu = F.linear(h, w.gate_up)
        m = F.silu(gu[:, : s.ffn_local]) * gu[:, s.ffn_local :]
        d = F.linear(m, w.down)
        all_reduce(d)
        x = x + d
    return x  # the final norm and the LM head are left out, like the cache write


def skip_all_reduce(tensor):
    """--comm none: the compute-only floor, every all-reduce left out."""


def time_replays(graph, warmup, replays, ctx):
    for _ in range(warmup):
        graph.replay()
    sync_ranks(ctx)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
    for start, end in zip(starts, ends):
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) * 1e3 for start, end in zip(starts, ends))


def output_check(out, ctx):
    """What the step's output says about the all-reduces: finite on every rank; mean
    |out| (rank 0's), equal across libraries up to rounding since every run draws the
    same weights, cache and input; and the largest difference of any rank's output from
    rank 0's: the hidden state is replicated over the TP ranks, so all-reduces that
    give every rank the same sum keep it 0 (--comm none has no such sync)."""
    mine = out.float().cpu()
    ref = mine.clone()
    dist.broadcast(ref, src=0, group=ctx.gloo)
    spread = max_over_ranks((mine - ref).abs().max().item(), ctx)
    finite = all_ranks(bool(torch.isfinite(mine).all().item()), ctx)
    return {"finite": finite, "out_absmean": ref.abs().mean().item(), "rank_spread": spread}


def run_batch(batch, layers, s, all_reduce, attend, args, ctx):
    """(step us of the slowest rank, output_check's dict) for one batch size."""
    # KV cache of every layer: [layer, k|v, batch, kv heads, context, head dim]
    cache = torch.empty(args.layers, 2, batch, s.kv_local, args.context, s.head_dim, dtype=DTYPE, device=ctx.device)
    cache.normal_()
    # the input hidden state is replicated over the TP ranks, as in a real model
    same_everywhere = torch.Generator(device=ctx.device).manual_seed(args.seed + batch)
    x = torch.empty(batch, s.hidden, dtype=DTYPE, device=ctx.device).normal_(generator=same_everywhere)
    result = {}

    def body():
        result["out"] = decode_step(x, layers, cache, s, all_reduce, attend)

    graph = capture(body, 1, args.warmup, args.capture_mode)
    us = time_replays(graph, args.warmup, args.replays, ctx)
    return max_over_ranks(us, ctx), output_check(result["out"], ctx)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--comm", choices=("torch", "ctypes", "none"), required=True)
    p.add_argument("--lib", help="the NCCL-API library for --comm ctypes")
    p.add_argument("--label", help="library name in the output (nccl, commhal, mscclpp)")
    p.add_argument("--json", help="write results here (rank 0)")
    p.add_argument("--batches", default="1,8,32,64")
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--context", type=int, default=2048)
    p.add_argument("--hidden", type=int, default=8192)
    p.add_argument("--heads", type=int, default=64)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--ffn", type=int, default=28672)
    p.add_argument("--warmup", type=int, default=5, help="eager steps before capture, replays before timing")
    p.add_argument("--replays", type=int, default=50)
    p.add_argument(
        "--attn", choices=("gqa", "fold"), default="gqa", help="SDPA with enable_gqa, or query heads folded per KV head"
    )
    p.add_argument("--capture-mode", default="thread_local", choices=("global", "thread_local", "relaxed"))
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--teardown-timeout", type=float, default=20.0)
    args = p.parse_args()
    if args.comm == "ctypes" and not args.lib:
        p.error("--comm ctypes needs --lib")
    if args.label is None:
        args.label = {"torch": "nccl", "none": "none"}.get(args.comm) or args.lib.rsplit("/", 1)[-1]
    return args


def main():
    args = parse_args()
    ctx = init_distributed(torch_nccl=args.comm == "torch")
    if args.comm == "none":
        comm, lib = TorchComm(), None  # nothing to destroy but the process groups
        all_reduce = skip_all_reduce
    else:
        comm, lib = make_comm(args.comm, args.lib, ctx)
        all_reduce = comm.all_reduce
    lead = ctx.rank == 0
    s = Shape(args, ctx.world)
    attend, attn_name = pick_attention(args.attn, ctx.device)
    torch.manual_seed(args.seed + ctx.rank)  # each rank its shard; the same whatever the library
    layers = [Layer(s, ctx.device) for _ in range(args.layers)]

    doc = {"bench": "decode", "library": args.label, "api": args.comm, **run_facts(ctx), "attention": attn_name}
    doc.update(lib_path=args.lib, args=vars(args), complete=False, results=[])
    doc["facts"] = library_facts(args.comm, lib) if args.comm != "none" else {}
    if lead:
        print(
            f"decode: {args.label} via {args.comm}, TP {ctx.world}, {args.layers} layers, context "
            f"{args.context}, attention {attn_name} on {doc['device']}; {doc['facts']}",
            flush=True,
        )
        print(f"{'batch':>5} {'step us':>10} {'tokens/s':>10} {'mean |out|':>10} {'rank spread':>11}", flush=True)

    for batch in (int(b) for b in args.batches.split(",")):
        us, check = run_batch(batch, layers, s, all_reduce, attend, args, ctx)
        gc.collect()  # the batch's graph, cache and activations go before the next
        torch.cuda.empty_cache()
        rec = {"library": args.label, "api": args.comm, "tp": ctx.world, "batch": batch, "step_us": us}
        rec.update(tokens_per_s=batch * 1e6 / us, layers=args.layers, context=args.context, **check)
        doc["results"].append(rec)
        if lead:
            note = "" if check["finite"] else "  NON-FINITE"
            print(
                f"{batch:>5} {us:10.1f} {rec['tokens_per_s']:10.0f} {check['out_absmean']:10.4f} "
                f"{check['rank_spread']:11.2e}{note}",
                flush=True,
            )
            write_json(args.json, doc)

    doc["complete"] = True
    if lead:
        write_json(args.json, doc)
    del layers
    sync_ranks(ctx)
    teardown(comm, args.teardown_timeout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
