#!/usr/bin/env python3
"""test-bench-tables.py — bench-tables.py on logs in the GPU benchmark's current format.

The committed testdata/gpu-bench-rooted-4gpu.log is an old log (no nccl-tests header or
footer, every line `[rank 0] `-prefixed); scripts/test.sh checks that it still parses.
This builds logs in the current format (nccl-tests' `# nThread` line, `# Using devices`,
the footer, `f8e4m3`-style type names) and checks what bench-tables.py reads from them:
one with bare lines and no `####` header (`commhal bench --backend cuda-nvlink --ranks N
--compare nccl > log`), one under `commhal launch` with a `####` header and two --matrix
tables, and one whose compared rows carry a library's label (`--compare mscclpp`). The numbers are made up; only the layout is the benchmark's. Exit 0 when all
checks pass. Python 3 standard library only.
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
COLUMNS = """#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"""


def row(size, dtype, esize, t, lib=None):
    """One row as tools/gpu-bench/src/bench.rs `fmt_row` prints it (`lib`: the
    compared library's tag)."""
    cell = f"{t:8.2f} {size / t / 1e3:7.2f} {size / t / 1e3:7.2f} {0:6}"
    line = f"{size:12} {size // esize:13} {dtype:>9} {'sum':>7} {-1:>7} {cell} {cell}"
    return line + (f"   [{lib}]" if lib else "")


def table(dtype, esize, ours, theirs, ranks=2, lib="nccl"):
    lines = [
        f"# commhal-gpu-bench: {ranks} ranks, ll_max 131072 B, 512 threads, <= 132 blocks, device wait bound 10s",
        "# nThread 1 nGpus 1 minBytes 1024 maxBytes 4096 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    lines += [f"#  Rank {r:2} Group  0 Pid {1000 + r:6} on      node1 device {r:2} NVIDIA H100 80GB HBM3"
              for r in range(ranks)]
    lines += ["#", "#", f"# commhal: allreduce {dtype} ranks={ranks} graph=false batch=10", COLUMNS]
    sizes = [1024, 2048, 4096]
    for s, a, b in zip(sizes, ours, theirs):
        lines += [row(s, dtype, esize, a), row(s, dtype, esize, b, lib=lib)]
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 0.2000 ", "#"]
    name = "NCCL" if lib == "nccl" else lib
    lines += ["#", f"# {name}: allreduce {dtype} ranks={ranks} graph=false batch=10", COLUMNS]
    lines += [row(s, dtype, esize, b) for s, b in zip(sizes, theirs)]
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 0.1000 ", "#"]
    return lines


def run(args):
    p = subprocess.run([sys.executable, os.path.join(HERE, "bench-tables.py")] + args,
                       capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise SystemExit(f"bench-tables.py {' '.join(args)}: exit {p.returncode}\n{p.stderr}")
    return p.stdout


def check(cond, what, out):
    if not cond:
        raise SystemExit(f"FAILED: {what}\n{out}")


def main():
    with tempfile.TemporaryDirectory() as d:
        bare = os.path.join(d, "bare.log")
        with open(bare, "w", encoding="utf-8") as f:
            f.write("\n".join(table("half", 2, [4.0, 5.0, 8.0], [6.0, 5.0, 6.0])) + "\n")
        out = run(["--summary", bare])
        check(out.strip() == "2 ranks allreduce -d half: 3 sizes, lowest ratio 0.75; "
              "below NCCL (out/in place): 4K 0.75/0.75", "bare log summary", out)
        out = run([bare])
        check(out.count("\n| ") == 4 and "| 1K | 4.00 | 6.00 | 1.50 | 1.50 |" in out,
              "bare log table", out)

        launched = os.path.join(d, "launched.log")
        header = ("#### commhal launch -n 4 -- commhal-gpu-bench allreduce --matrix "
                  "--dtypes half,fp8_e4m3 --compare nccl (env: )")
        lines = table("half", 2, [4.0, 4.0, 4.0], [8.0, 8.0, 8.0], ranks=4)
        lines += table("f8e4m3", 1, [2.0, 2.0, 2.0], [3.0, 3.0, 3.0], ranks=4)
        with open(launched, "w", encoding="utf-8") as f:
            f.write(header + "\n" + "".join(f"[rank 0] {l}\n" for l in lines))
            # other ranks' lines are never rows
            f.write("[rank 1]         1024           512      half     sum      -1     9.00\n")
        out = run(["--summary", launched]).splitlines()
        check(len(out) == 2, "one run per --matrix table", "\n".join(out))
        check(out[0].startswith("4 ranks allreduce --matrix --dtypes half,fp8_e4m3 --compare nccl [half]: "
                                "3 sizes, lowest ratio 2.00"), "half table", out[0])
        check(out[1].startswith("4 ranks allreduce --matrix --dtypes half,fp8_e4m3 --compare nccl [f8e4m3]: "
                                "3 sizes, lowest ratio 1.50"), "fp8 table", out[1])
        grid = run(["--grid", launched])
        check("**4 GPUs, half: allreduce**" in grid and "**4 GPUs, f8e4m3: allreduce**" in grid,
              "grid per type", grid)

        labelled = os.path.join(d, "labelled.log")
        with open(labelled, "w", encoding="utf-8") as f:
            f.write("\n".join(table("half", 2, [4.0, 5.0, 8.0], [6.0, 5.0, 6.0],
                                    lib="MSCCL++ 0.9.0")) + "\n")
        out = run(["--summary", labelled])
        check(out.strip() == "2 ranks allreduce -d half: 3 sizes, lowest ratio 0.75; "
              "below MSCCL++ 0.9.0 (out/in place): 4K 0.75/0.75", "labelled summary", out)
        out = run([labelled])
        check("| size | commhal µs | MSCCL++ 0.9.0 µs | ratio | ip |" in out
              and "| 1K | 4.00 | 6.00 | 1.50 | 1.50 |" in out, "labelled table", out)
    print("test-bench-tables.py: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
