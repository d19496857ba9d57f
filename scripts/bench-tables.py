#!/usr/bin/env python3
"""bench-tables.py — commhal-gpu-bench logs (with --compare or --compare-lib) to markdown
tables.

    scripts/bench-tables.py LOG...            one table per run: size, commhal µs, the
                                              compared library's µs, ratio, in-place ratio
    scripts/bench-tables.py --summary LOG...  one line per run: the lowest ratio, every
                                              size where commhal is slower than the
                                              compared library, and any cell with wrong
                                              elements
    scripts/bench-tables.py --grid LOG...     the runs side by side, per rank count and
                                              dtype, at most 4 collectives per table:
                                              "commhal / NCCL = ratio" (out of place;
                                              the closing notes' form)

A run starts at a line with `####` (per-run scripts' and scripts/gpu-bench.sh's step
headers) that names commhal-gpu-bench or `commhal bench`; its rows are rank 0's table
lines: `[rank 0] `-prefixed (under `commhal launch`) or bare (`--ranks N`, `launch
--no-prefix`). Logs in nccl-tests' format (a `# nThread ...` line before each table)
also start a run there, when the current one already has rows or there is none, so
logs without `####` headers and `--matrix` logs (a table per type) give a run per
table; the `# commhal: <collective> <type> ranks=N` line names it. nccl-tests' footer
lines (`# Out of bounds values`, `# Avg bus bandwidth`) are comments and skipped. The
compared library's rows carry its label in brackets (`[NCCL 2.28.9]`, `[MSCCL++ 0.9.0]`;
older logs: `[nccl]`, shown as NCCL), which names it in the output. The ratio is its
time / commhal's (> 1: commhal faster), out of place; "ip" is the same in place
(all-to-all and send/recv have no in-place variant: "-"). The bench prints its rows
twice (interleaved, then as their own table); the first of each size is used. Python 3
standard library only.
"""
import re
import signal
import sys

ROW = re.compile(r"^(?:\[rank 0\])?\s*(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(-?\d+)\s+"
                 r"([\d.]+)\s+[\d.]+\s+[\d.]+\s+(-?\d+)\s+([\d.]+)\s+[\d.]+\s+[\d.]+\s+(-?\d+)"
                 r"(?:\s+\[([^\]]+)\])?\s*$")
# `# commhal: allreduce half ranks=4 graph=false batch=10` (the table's heading)
TABLE = re.compile(r"^(?:\[rank 0\]\s*)?# commhal: (\S+) (\S+) ranks=(\d+)")
NTHREAD = re.compile(r"^(?:\[rank 0\]\s*)?# nThread ")


def human(b):
    for unit, s in ((1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")):
        if b >= unit and b % unit == 0:
            return f"{b // unit}{s}"
    return str(b)


class Run:
    def __init__(self, header):
        self.header = header
        m = re.search(r"(?:commhal-gpu-bench|commhal bench)\s+(\S.*?)(\s+\(env:.*)?$", header)
        self.args = m.group(1).strip() if m else header
        n = re.search(r"launch -n (\d+)", header)
        self.ranks = n.group(1) if n else "?"
        e = re.search(r"\(env: (.*)\)$", header)
        self.env = e.group(1).strip() if e else ""
        self.ours, self.nccl = {}, {}
        self.lib = "NCCL"  # the compared library's label, from its rows' tag
        self.coll = self.args.split()[0] if self.args else "?"
        d = re.search(r"-d\s+(\S+)", self.args)
        self.dtype = d.group(1) if d else "?"

    def heading(self, m):
        """The table's `# commhal: coll type ranks=N` line fills what the header left
        open (a log without `####` headers, a --matrix table's type)."""
        coll, dtype, ranks = m.group(1), m.group(2), m.group(3)
        if self.coll in ("?", ""):
            self.coll = coll
        if not self.args:
            self.args = f"{coll} -d {dtype}"
        elif self.dtype not in ("?", dtype) or (self.dtype == "?" and "--matrix" in self.args):
            self.args += f" [{dtype}]"
        if self.dtype == "?" or "--matrix" in self.args:
            self.dtype = dtype
        if self.ranks == "?":
            self.ranks = ranks

    def add(self, m):
        size = int(m.group(1))
        cell = (float(m.group(6)), float(m.group(8)), int(m.group(7)), int(m.group(9)))
        if m.group(10):
            self.lib = "NCCL" if m.group(10) == "nccl" else m.group(10)
        (self.nccl if m.group(10) else self.ours).setdefault(size, cell)

    def rows(self):
        for size in sorted(self.ours):
            if size not in self.nccl:
                continue
            a, b = self.ours[size], self.nccl[size]
            ratio = b[0] / a[0] if a[0] > 0 else float("nan")
            ip = b[1] / a[1] if a[1] > 0 and b[1] > 0 else None
            yield size, a, b, ratio, ip


def runs(paths):
    out = []
    for path in paths:
        cur = None
        with open(path, encoding="utf-8", errors="replace") as f:
            header = ""
            for line in f:
                if (line.startswith("####") and "SKIPPED" not in line
                        and ("commhal-gpu-bench" in line or "commhal bench" in line)):
                    header = line.strip("# \n")
                    cur = Run(header)
                    out.append(cur)
                elif NTHREAD.match(line) and (cur is None or cur.ours):
                    cur = Run(header)
                    out.append(cur)
                elif cur is not None:
                    t = TABLE.match(line)
                    if t:
                        cur.heading(t)
                        continue
                    m = ROW.match(line.rstrip("\n"))
                    if m:
                        cur.add(m)
    return [r for r in out if r.ours]


def table(r):
    print(f"\n### {r.ranks} ranks: `{r.args}`" + (f" (env: {r.env})" if r.env else ""))
    print(f"\n| size | commhal µs | {r.lib} µs | ratio | ip |\n|---|---|---|---|---|")
    for size, a, b, ratio, ip in r.rows():
        wrong = " (WRONG)" if a[2] > 0 or a[3] > 0 else ""
        print(f"| {human(size)} | {a[0]:.2f}{wrong} | {b[0]:.2f} | {ratio:.2f} | "
              + (f"{ip:.2f}" if ip is not None else "-") + " |")


def summary(r):
    rows = list(r.rows())
    if not rows:
        print(f"{r.ranks} ranks {r.args}: no rows of a compared library (run with --compare nccl)")
        return
    low = min(min(x[3], x[4] if x[4] is not None else x[3]) for x in rows)
    below = [f"{human(s)} {ro:.2f}" + (f"/{ip:.2f}" if ip is not None else "")
             for s, _, _, ro, ip in rows if ro < 1.0 or (ip is not None and ip < 1.0)]
    wrong = [human(s) for s, a, _, _, _ in rows if a[2] > 0 or a[3] > 0]
    line = f"{r.ranks} ranks {r.args}: {len(rows)} sizes, lowest ratio {low:.2f}"
    line += f"; below {r.lib} (out/in place): " + (", ".join(below) if below else "none")
    if wrong:
        line += "; WRONG at " + ", ".join(wrong)
    print(line)


def grid(found):
    groups = {}
    for r in found:
        groups.setdefault((r.ranks, r.dtype), []).append(r)
    for (ranks, dtype), rs in groups.items():
        for i in range(0, len(rs), 4):
            part = rs[i:i + 4]
            names = ", ".join(r.coll for r in part)
            lib = part[0].lib
            print(f"\n**{ranks} GPUs, {dtype}: {names}** — µs (commhal / {lib}) = ratio "
                  f"{lib}/commhal, out of place\n")
            print("| size | " + " | ".join(r.coll for r in part) + " |")
            print("|---|" + "---|" * len(part))
            cells = [{s: (a, b, ro) for s, a, b, ro, _ in r.rows()} for r in part]
            for size in sorted(set().union(*cells)):
                row = []
                for c in cells:
                    if size not in c:
                        row.append("-")
                        continue
                    a, b, ro = c[size]
                    wrong = " (WRONG)" if a[2] > 0 or a[3] > 0 else ""
                    row.append(f"{a[0]:.2f}{wrong} / {b[0]:.2f} = **{ro:.2f}**")
                print(f"| {human(size)} | " + " | ".join(row) + " |")


def main(argv):
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` is fine
    if "-h" in argv or "--help" in argv:
        print(__doc__.strip())
        return 0
    modes = {"--summary", "--grid"}
    paths = [a for a in argv if a not in modes]
    if not paths:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    found = runs(paths)
    if not found:
        print("bench-tables: no commhal-gpu-bench run with rank-0 rows in " + ", ".join(paths),
              file=sys.stderr)
        return 1
    if "--grid" in argv:
        grid(found)
        return 0
    for r in found:
        (summary if "--summary" in argv else table)(r)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
