"""Collective latency sweep through PyTorch: all-reduce, all-gather and reduce-scatter,
bf16, 1 KiB .. 1 GiB, eagerly and inside CUDA graphs, through one NCCL-API library.

    # torch.distributed over whatever NCCL torch loads (LD_PRELOAD swaps the library)
    torchrun --nproc-per-node 4 bench/torch/sweep.py --api torch --label nccl --json out.json
    # the library called directly through ctypes (pynccl.py), torch's own NCCL untouched
    torchrun --nproc-per-node 4 bench/torch/sweep.py --api ctypes --lib /path/libnccl.so.2 \
        --label nccl --json out.json

Size is counted as nccl-tests counts it: the bytes of the all-reduce buffer, of the
gathered all-gather output, of the reduce-scatter input. All-reduce runs in place (the
only form torch.distributed has), through ctypes too, so both APIs time the same call.

Each size: the inputs are filled with rank-dependent values, the collective runs once
(eager) or the graph replays once, and every rank checks the output ("ok" in the JSON,
WRONG in the table); then the timing: CUDA events around `iters` calls (eager) or around
`iters / graph_calls` replays of a graph of `graph_calls` calls, after warmup; the median
of `repeats` such runs, the slowest rank's. Iterations shrink with size
(--bytes-per-repeat) so the whole sweep stays short.

Rank 0 prints the table and writes --json after every size (so a crash keeps what was
measured): {"bench": "sweep", "library", "api", "tp", ..., "complete", "results": [
{"library", "api", "tp", "collective", "bytes", "mode": "eager"|"graph", "us",
"busbw_gbps", "iters", "ok"}]}. Exit status 3 when any check failed.

The helpers above main() (process-group setup, the communicator, JSON, teardown) are
shared with decode.py.
"""

import argparse
import faulthandler
import json
import os
import statistics
import sys

import torch
import torch.distributed as dist

from pynccl import NcclLib, PyNcclComm

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")

# bus bandwidth factor per collective (nccl-tests' convention) for n ranks
BUSBW = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
}


# ---- shared with decode.py -----------------------------------------------------------


class Ctx:
    """Where this process stands: rank, world size, device, the gloo group."""

    def __init__(self, rank, world, device, gloo):
        self.rank = rank
        self.world = world
        self.device = device
        self.gloo = gloo


def init_distributed(torch_nccl):
    """Bind this process's GPU and start torch.distributed under torchrun.

    torch_nccl: the default group is NCCL (initialised eagerly, so no lazy init lands
    inside a timing or a capture) and a gloo group is made beside it; otherwise the
    default group is gloo alone and torch never creates an NCCL communicator. The gloo
    group carries barriers, the timing reductions and PyNcclComm's unique id.
    """
    faulthandler.enable()  # a crashing library still leaves a Python traceback
    pid_dir = os.environ.get("TORCH_BENCH_PID_DIR")
    if pid_dir:  # scripts/torch-bench.sh kills the workers a finished torchrun left behind
        open(os.path.join(pid_dir, str(os.getpid())), "w").close()
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    if torch_nccl:
        dist.init_process_group("nccl", device_id=device)
        gloo = dist.new_group(backend="gloo")
    else:
        dist.init_process_group("gloo")
        gloo = dist.group.WORLD
    return Ctx(dist.get_rank(), dist.get_world_size(), device, gloo)


class TorchComm:
    """torch.distributed's collectives on the default (NCCL) group, PyNcclComm's names."""

    def all_reduce(self, tensor):
        dist.all_reduce(tensor)

    def all_gather(self, out, inp):
        dist.all_gather_into_tensor(out, inp)

    def reduce_scatter(self, out, inp):
        dist.reduce_scatter_tensor(out, inp)

    def destroy(self):
        pass


def make_comm(api, lib_path, ctx):
    """The communicator under test and, for ctypes, the opened library."""
    if api == "torch":
        return TorchComm(), None
    lib = NcclLib(lib_path)
    return PyNcclComm(lib, ctx.gloo), lib


def library_facts(api, lib):
    """What served the collectives: the NCCL-like libraries mapped in this process and
    the version the API reports (LD_PRELOAD is confirmed by the mapped paths)."""
    mapped = set()
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 6:
                name = os.path.basename(fields[5])
                if any(k in name for k in ("nccl", "commhal", "mscclpp")):
                    mapped.add(fields[5])
    version = None
    try:
        version = lib.version() if lib is not None else ".".join(map(str, torch.cuda.nccl.version()))
    except (RuntimeError, AttributeError) as e:  # the version is informative only
        version = f"unknown ({e})"
    return {"mapped": sorted(mapped), "version": version, "ld_preload": os.environ.get("LD_PRELOAD", "")}


def run_facts(ctx):
    return {
        "tp": ctx.world,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(ctx.device),
    }


def max_over_ranks(value, ctx):
    t = torch.tensor([float(value)], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=ctx.gloo)
    return t.item()


def all_ranks(flag, ctx):
    t = torch.tensor([1 if flag else 0], dtype=torch.int32)
    dist.all_reduce(t, op=dist.ReduceOp.MIN, group=ctx.gloo)
    return bool(t.item())


def sync_ranks(ctx):
    """GPU idle and every rank at the same point: the start of a timed run."""
    torch.cuda.synchronize()
    dist.barrier(group=ctx.gloo)


def write_json(path, doc):
    """Replace `path` atomically, so a crash mid-write leaves the previous version."""
    if not path:
        return
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)


def teardown(comm, seconds):
    """Destroy the communicator and the process groups; a library that hangs here costs
    at most `seconds` (faulthandler prints every thread's stack and exits with 1)."""
    faulthandler.dump_traceback_later(seconds, exit=True)
    comm.destroy()
    dist.destroy_process_group()
    faulthandler.cancel_dump_traceback_later()


def capture(fn, calls, warmup, capture_mode):
    """A CUDA graph of `calls` calls of fn, after `warmup` eager calls on a side stream
    (the warmup torch.cuda.graph asks for)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode=capture_mode):
        for _ in range(calls):
            fn()
    torch.cuda.synchronize()
    return graph


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def fmt_size(n):
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


# ---- the sweep -----------------------------------------------------------------------


class Case:
    """One collective at one size on views of the two preallocated buffers: op() runs it,
    fill() writes checkable inputs, verify(calls) checks the output after `calls` runs."""

    def __init__(self, comm, collective, nbytes, bufs, ctx):
        n, r = ctx.world, ctx.rank
        elems = nbytes // bufs[0].element_size()
        a, b = bufs[0][:elems], bufs[1][:elems]
        total = n * (n + 1) / 2  # sum over ranks of (rank + 1)
        block = torch.arange(1, n + 1, device=a.device, dtype=torch.float32).view(n, 1)
        if collective == "all_reduce":
            # rank r contributes r + 1; in place, so `calls` runs multiply by n each time
            self.op = lambda: comm.all_reduce(a)
            self.fill = lambda: a.fill_(r + 1)
            self.verify = lambda calls: _close(a, total * n ** (calls - 1))
        elif collective == "all_gather":
            # rank r contributes r + 1; block j of the output comes from rank j
            inp, out = a[: elems // n], b
            self.op = lambda: comm.all_gather(out, inp)
            self.fill = lambda: (inp.fill_(r + 1), out.zero_())
            self.verify = lambda calls: _close(out.view(n, -1), block)
        elif collective == "reduce_scatter":
            # rank r's block j is (j + 1) * (r + 1); rank r keeps block r summed: (r + 1) * total
            inp, out = a, b[: elems // n]
            self.op = lambda: comm.reduce_scatter(out, inp)
            self.fill = lambda: (inp.view(n, -1).copy_(block * (r + 1)), out.zero_())
            self.verify = lambda calls: _close(out, (r + 1) * total)
        else:
            raise ValueError(collective)


def _close(x, expected):
    """x (bf16) equals `expected` (a number or a broadcastable tensor) within 1 %; exact
    integers are expected in practice, the slack covers bf16 rounding of large sums."""
    return bool(torch.all((x.float() - expected).abs() <= 0.01 * abs(expected)))


def iters_for(nbytes, args):
    return max(args.min_iters, min(args.iters, args.bytes_per_repeat // nbytes))


def time_eager(op, iters, args, ctx):
    for _ in range(args.warmup):
        op()
    samples = []
    for _ in range(args.repeats):
        sync_ranks(ctx)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            op()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / iters)
    return statistics.median(samples)


def time_graph(graph, calls, iters, args, ctx):
    replays = max(1, iters // calls)
    graph.replay()
    samples = []
    for _ in range(args.repeats):
        sync_ranks(ctx)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / (replays * calls))
    return statistics.median(samples)


def measure(comm, collective, nbytes, mode, bufs, args, ctx):
    """(us per call of the slowest rank, checked ok on every rank, iterations)."""
    case = Case(comm, collective, nbytes, bufs, ctx)
    iters = iters_for(nbytes, args)
    if mode == "eager":
        case.fill()
        case.op()
        torch.cuda.synchronize()
        ok = case.verify(1)
        us = time_eager(case.op, iters, args, ctx)
    else:
        graph = capture(case.op, args.graph_calls, args.warmup, args.capture_mode)
        case.fill()
        graph.replay()
        torch.cuda.synchronize()
        ok = case.verify(args.graph_calls)
        us = time_graph(graph, args.graph_calls, iters, args, ctx)
        del graph
    return max_over_ranks(us, ctx), all_ranks(ok, ctx), iters


def sizes(args, world):
    out, n = [], args.min_bytes
    while n <= args.max_bytes:
        if n % (2 * world) == 0:  # whole bf16 elements in every rank's block
            out.append(n)
        n *= args.factor
    return out


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--api", choices=("torch", "ctypes"), required=True)
    p.add_argument("--lib", help="the NCCL-API library for --api ctypes")
    p.add_argument("--label", help="library name in the output (nccl, commhal, mscclpp)")
    p.add_argument("--json", help="write results here (rank 0)")
    p.add_argument("--collectives", default=",".join(COLLECTIVES))
    # not --min / --max: torchrun rejects "--max" as an ambiguous abbreviation of its
    # --max-restarts even after the script's name
    p.add_argument("--min-bytes", type=parse_size, default=parse_size("1K"))
    p.add_argument("--max-bytes", type=parse_size, default=parse_size("1G"))
    p.add_argument("--factor", type=int, default=2)
    p.add_argument(
        "--graph-max", type=parse_size, default=parse_size("64M"), help="largest size timed in CUDA graphs (0: none)"
    )
    p.add_argument("--graph-calls", type=int, default=10, help="calls captured in one graph")
    p.add_argument("--iters", type=int, default=100, help="calls per timed run, small sizes")
    p.add_argument("--min-iters", type=int, default=5, help="calls per timed run, large sizes")
    p.add_argument(
        "--bytes-per-repeat", type=parse_size, default=parse_size("1G"), help="iterations = clamp(this / size)"
    )
    p.add_argument("--repeats", type=int, default=5, help="timed runs per size (median)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--capture-mode", default="thread_local", choices=("global", "thread_local", "relaxed"))
    p.add_argument("--teardown-timeout", type=float, default=20.0)
    args = p.parse_args()
    if args.api == "ctypes" and not args.lib:
        p.error("--api ctypes needs --lib")
    bad = set(args.collectives.split(",")) - set(COLLECTIVES)
    if bad:
        p.error(f"unknown collectives {sorted(bad)}")
    if args.label is None:
        args.label = "nccl" if args.api == "torch" else os.path.basename(args.lib)
    return args


def main():
    args = parse_args()
    ctx = init_distributed(torch_nccl=args.api == "torch")
    comm, lib = make_comm(args.api, args.lib, ctx)
    lead = ctx.rank == 0
    doc = {"bench": "sweep", "library": args.label, "api": args.api, **run_facts(ctx)}
    doc.update(lib_path=args.lib, facts=library_facts(args.api, lib), args=vars(args), complete=False, results=[])
    if lead:
        print(f"sweep: {args.label} via {args.api} on {ctx.world} x {doc['device']}; {doc['facts']}", flush=True)

    # two buffers of the largest size serve every size as views, as in nccl-tests
    bufs = [torch.zeros(args.max_bytes // 2, dtype=torch.bfloat16, device=ctx.device) for _ in range(2)]
    modes = ["eager"] + (["graph"] if args.graph_max > 0 else [])
    wrong = 0
    # every collective eagerly first, then the graphs: a failure in capture keeps the
    # eager numbers of every collective
    for mode in modes:
        for collective in args.collectives.split(","):
            if lead:
                print(f"\n{collective} {mode}\n{'size':>6} {'us':>10} {'busbw GB/s':>11}  check", flush=True)
            for nbytes in sizes(args, ctx.world):
                if mode == "graph" and nbytes > args.graph_max:
                    break
                us, ok, iters = measure(comm, collective, nbytes, mode, bufs, args, ctx)
                busbw = nbytes / us / 1e3 * BUSBW[collective](ctx.world)
                wrong += not ok
                rec = {
                    "library": args.label,
                    "api": args.api,
                    "tp": ctx.world,
                    "collective": collective,
                    "bytes": nbytes,
                }
                rec.update(mode=mode, us=us, busbw_gbps=busbw, iters=iters, ok=ok)
                doc["results"].append(rec)
                if lead:
                    print(f"{fmt_size(nbytes):>6} {us:10.2f} {busbw:11.2f}  {'ok' if ok else 'WRONG'}", flush=True)
                    write_json(args.json, doc)

    doc["complete"] = True
    if lead:
        write_json(args.json, doc)
        print(f"\nsweep: {args.label} via {args.api}: {len(doc['results'])} points, {wrong} wrong", flush=True)
    del bufs
    sync_ranks(ctx)
    teardown(comm, args.teardown_timeout)
    return 3 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
