"""Markdown tables from the JSON of bench/torch/sweep.py and decode.py runs.

    python3 bench/torch/tables.py torch-out/results.json.tar     # as scripts/torch-bench.sh leaves it
    python3 bench/torch/tables.py DIR                            # *.json and status.tsv in DIR
    python3 bench/torch/tables.py a.json b.json ...

Libraries are labelled nccl, mscclpp and commhal (scripts/torch-bench.sh's --label);
"none" is decode's compute-only floor. status.tsv (written by scripts/torch-bench.sh,
one line per run: name, bench, api, library, tp, verdict, seconds) fills the cells of a
library whose run left no number: crashed, timeout, failed, SKIPPED.

Sweep: one table per api x TP x collective x mode; columns NCCL, MSCCL++ and commhal
us per call, and the best of the others over commhal (> 1: commhal is faster).

Decode: one table per api x TP; per batch the floor (no all-reduce), each library's
step us and tokens/s, its communication overhead (step - floor), and commhal's
overhead over NCCL's against the target (<= 1/3 at batch <= 8, <= 1/2 above); then the
output check of every decode run (mean |out| against NCCL's, spread between ranks).
"""

import argparse
import json
import os
import sys
import tarfile

LIBS = ("nccl", "mscclpp", "commhal")
NAMES = {"nccl": "NCCL", "mscclpp": "MSCCL++", "commhal": "commhal"}
APIS = ("torch", "ctypes")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")


def rank_of(value, order):
    return order.index(value) if value in order else len(order)


def load(paths):
    """(docs, runs): every JSON document, and status.tsv's lines split into fields, in
    the order the runs ran."""
    docs, status_lines = [], []

    def take(name, text):
        if name.endswith(".json"):
            try:
                docs.append(json.loads(text))
            except json.JSONDecodeError as e:
                print(f"tables: {name}: {e}", file=sys.stderr)
        elif os.path.basename(name) == "status.tsv":
            status_lines.extend(text.splitlines())

    for path in paths:
        if os.path.isdir(path):
            for name in sorted(os.listdir(path)):
                if name.endswith(".json") or name == "status.tsv":
                    with open(os.path.join(path, name)) as f:
                        take(name, f.read())
        elif path.endswith(".tar"):
            with tarfile.open(path) as tar:
                for member in tar.getmembers():
                    if member.isfile():
                        take(member.name, tar.extractfile(member).read().decode())
        else:
            with open(path) as f:
                take(path, f.read())

    runs = [line.split("\t") for line in status_lines]
    return docs, [r for r in runs if len(r) >= 7]


def verdicts(runs):
    """{(bench, api, library, tp): verdict} from status.tsv's fields."""
    return {(r[1], r[2], r[3], int(r[4])): r[5] for r in runs}


def results(docs, bench):
    return [r for d in docs if d.get("bench") == bench for r in d.get("results", [])]


def missing(status, bench, api, library, tp):
    """What to print where a library has no number: its run's verdict, else a dash."""
    verdict = status.get((bench, api, library, tp), "")
    return verdict if verdict and not verdict.startswith("ok") else "-"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def fmt_size(n):
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def runs_section(runs):
    if not runs:
        return []
    rows = [[r[0], r[5], r[6]] for r in runs]
    return ["## Runs", ""] + table(["run", "verdict", "s"], rows) + [""]


def libraries_section(docs):
    """Which library each run really used: the version it reported and the NCCL-like
    libraries mapped into rank 0 (an LD_PRELOAD that did not take shows here)."""
    rows = []
    for d in sorted(docs, key=lambda d: (d.get("bench", ""), d.get("api", ""), -d.get("tp", 0), d.get("library", ""))):
        facts = d.get("facts") or {}
        mapped = ", ".join(os.path.basename(p) for p in facts.get("mapped", []))
        row = [d.get("bench", "?"), d.get("api", "?"), str(d.get("tp", "?")), d.get("library", "?")]
        row += [str(facts.get("version", "")), mapped, "yes" if d.get("complete") else "no"]
        rows.append(row)
    if not rows:
        return []
    header = ["bench", "api", "TP", "library", "version", "mapped", "complete"]
    return ["## Libraries", ""] + table(header, rows) + [""]


def sweep_section(docs, status):
    recs = results(docs, "sweep")
    by = {}
    for r in recs:
        by.setdefault((r["api"], r["tp"], r["collective"], r["mode"]), {}).setdefault(r["bytes"], {})[r["library"]] = r
    out = []
    order = sorted(by, key=lambda k: (rank_of(k[0], APIS), -k[1], rank_of(k[2], COLLECTIVES), k[3] != "eager"))
    for key in order:
        api, tp, collective, mode = key
        rows = []
        for nbytes in sorted(by[key]):
            cell = by[key][nbytes]
            row = [fmt_size(nbytes)]
            for lib in LIBS:
                r = cell.get(lib)
                if r is None:
                    row.append(missing(status, "sweep", api, lib, tp))
                else:
                    row.append(f"{r['us']:.1f}" + ("" if r["ok"] else " WRONG"))
            row.append(sweep_ratio(cell))
            rows.append(row)
        header = ["size"] + [f"{NAMES[lib]} us" for lib in LIBS] + ["best other / commhal"]
        out += [f"### sweep: {collective} {mode}, api {api}, TP {tp}", ""] + table(header, rows) + [""]
    return (["## Collective sweep (bf16, us per call)", ""] + out) if out else []


def sweep_ratio(cell):
    ours = cell.get("commhal")
    others = [cell[lib]["us"] for lib in LIBS if lib != "commhal" and lib in cell and cell[lib]["ok"]]
    if ours is None or not others:
        return "-"
    if not ours["ok"]:
        return "wrong"
    return f"{min(others) / ours['us']:.2f}"


def target_for(batch):
    return 1 / 3 if batch <= 8 else 1 / 2


def decode_section(docs, status):
    recs = results(docs, "decode")
    step = {(r["api"], r["library"], r["tp"], r["batch"]): r for r in recs}
    floors = {(r["tp"], r["batch"]): r["step_us"] for r in recs if r["api"] == "none"}
    tps = sorted({r["tp"] for r in recs}, reverse=True)
    out = []
    for api in APIS:
        for tp in tps:
            batches = sorted({r["batch"] for r in recs if r["tp"] == tp and r["api"] in (api, "none")})
            if not any((api, lib, tp, b) in step for lib in LIBS for b in batches):
                continue
            rows = [decode_row(api, tp, b, step, floors, status) for b in batches]
            header = ["batch", "floor us"]
            for lib in LIBS:
                header += [f"{NAMES[lib]} us", f"{NAMES[lib]} tok/s"]
            header += [f"{NAMES[lib]} over floor us" for lib in LIBS]
            header += ["commhal / NCCL overhead", "target"]
            out += [f"### decode: api {api}, TP {tp}", ""] + table(header, rows) + [""]
    if not out:
        return []
    intro = [
        "## Decode step (Llama-3-70B-shaped layers, one CUDA graph per step)",
        "",
        "Overhead = step - floor, the floor being the same step with every all-reduce left out.",
        "",
    ]
    return intro + out


def decode_check_section(docs):
    """Per decode run and batch: mean |out| against NCCL's through torch (the same
    weights, cache and input everywhere, so only rounding should differ) and the largest
    difference between ranks of the replicated hidden state."""
    recs = [r for r in results(docs, "decode") if "out_absmean" in r and r["api"] != "none"]
    ref = {(r["tp"], r["batch"]): r["out_absmean"] for r in recs if r["api"] == "torch" and r["library"] == "nccl"}
    rows = []
    for r in sorted(recs, key=lambda r: (rank_of(r["api"], APIS), -r["tp"], r["batch"], rank_of(r["library"], LIBS))):
        base = ref.get((r["tp"], r["batch"]))
        rel = f"{abs(r['out_absmean'] - base) / base:.1e}" if base else "-"
        finite = "yes" if r.get("finite", True) else "NO"
        rows.append([r["api"], str(r["tp"]), str(r["batch"]), r["library"], rel, f"{r['rank_spread']:.1e}", finite])
    if not rows:
        return []
    intro = [
        "### decode output check",
        "",
        (
            "Mean |out| relative to NCCL's through torch: rounding alone stays far below a percent;"
            " an all-reduce that drops or repeats a contribution does not. Rank spread: the largest"
            " difference of the replicated hidden state between ranks (0 when every rank gets the same sums)."
        ),
        "",
    ]
    header = ["api", "TP", "batch", "library", "mean abs out vs NCCL", "rank spread", "finite"]
    return intro + table(header, rows) + [""]


def decode_row(api, tp, batch, step, floors, status):
    floor = floors.get((tp, batch))
    row = [str(batch), f"{floor:.0f}" if floor is not None else missing(status, "decode", "none", "none", tp)]
    overhead = {}
    for lib in LIBS:
        r = step.get((api, lib, tp, batch))
        if r is None:
            row += [missing(status, "decode", api, lib, tp), ""]
            continue
        row += [f"{r['step_us']:.0f}" + ("" if r.get("finite", True) else " NaN"), f"{r['tokens_per_s']:.0f}"]
        if floor is not None:
            overhead[lib] = r["step_us"] - floor
    row += [f"{overhead[lib]:.1f}" if lib in overhead else "-" for lib in LIBS]
    target = target_for(batch)
    if "commhal" in overhead and overhead.get("nccl", 0) > 0:
        ratio = overhead["commhal"] / overhead["nccl"]
        row += [f"{ratio:.2f}", f"<= {target:.2f} {'met' if ratio <= target else 'missed'}"]
    else:
        row += ["-", f"<= {target:.2f}"]
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("paths", nargs="+", help="a results tar, a directory, or JSON / status.tsv files")
    args = p.parse_args()
    docs, runs = load(args.paths)
    status = verdicts(runs)
    lines = ["# PyTorch benchmarks: NCCL, MSCCL++, commhal", ""]
    lines += runs_section(runs)
    lines += decode_section(docs, status)
    lines += decode_check_section(docs)
    lines += sweep_section(docs, status)
    lines += libraries_section(docs)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
