#!/usr/bin/env bash
# gpu-bench.sh — commhal's NVLink collectives against NCCL, on a multi-GPU host, from
# the repo root, with prebuilt binaries carried in .gpu/ (nothing is built here):
#
#   .gpu/env.sh               copy of shared/gpu/env.sh (multicast off, NCCL, CUDA libs)
#   .gpu/commhal              target/release/commhal            (stripped)
#   .gpu/commhal-gpu-bench    target/release/commhal-gpu-bench  (stripped)
#
# For N = 2 and (with >= 4 GPUs) 4: all-reduce f16 1K..1G x4 with --compare nccl, the
# same through CUDA graphs up to 1 MiB, all-gather f16 and reduce-scatter f16. Every
# step is bounded by `timeout`, the whole run by GPU_BENCH_BUDGET seconds (default
# 330).
#
# GPU_BENCH_SET=extra: only broadcast, reduce, alltoall and sendrecv, f16, 1K..1G x32
# with --compare nccl, on 4 GPUs when there are 4, else 2 (each step `timeout 60`),
# then broadcast and reduce once more with the last rank as root (1K..64M x256);
# budget default 170 s. Every size is checked on every rank (#wrong, outputs poisoned).
#
# GPU_BENCH_SET=cli: the same benchmark through the user-facing command, `commhal bench
# <coll> --backend cuda-nvlink --ranks N --compare nccl --plot ...` (it starts its own
# ranks): all-reduce f16 1K..1G x4, the same with -G to 1 MiB, all-gather 1K..1G x16;
# N = 2 and 4; plots come back as $OUT/<step>.svg; budget default 240 s.
#
# GPU_BENCH_SET=dma: every collective through the copy-engine path
# (COMMHAL_GPU_PATH=dma), f16, 1K..1G x32 with --compare nccl and --gate 0, on 4 GPUs
# when there are 4, else 2; budget default 150 s.
#
# GPU_BENCH_SET=p2p: all-to-all and send/recv as grouped sends and receives
# (`--p2p`, Comm::p2p on the copy engines) on 4 and 2 GPUs against NCCL, then all-reduce
# on two communicators per process (`--split 2`); budget default 240 s.
#
# GPU_BENCH_SET=dense: the closing tables — every collective at every power-of-2 size,
# 1K..1G, with --compare nccl (f16; all-reduce, all-gather and reduce-scatter also bf16
# and f32; broadcast and reduce with root 1), on 4 GPUs when there are 4, and on 2;
# budget default 570 s (about 490 s on 4 x H200; GPU_BENCH_DENSE_RANKS="4"
# runs the 4-rank half alone, about 220 s; on another 4 x H200 host 60 s per f16 step
# ended four of the 4-rank runs before their 1 GiB row, so they get 90 s;
# GPU_BENCH_DENSE_RANKS="8" on 8 x H200 about 400 s). Then
# `scripts/bench-tables.py [--summary] $OUT/bench-*gpu.log` prints the tables (or one
# line per run with every size where commhal is slower than NCCL).
#
# GPU_BENCH_SET=mscclpp: the side-by-side with MSCCL++ 0.9 (issue 31's tables):
# all-reduce, all-gather and reduce-scatter, f16, 1K..4M x2, plain and in CUDA graphs
# (-G 5), `-n 30 -w 5`, --compare mscclpp, on 4 GPUs when there are 4, and on 2; MSCCL++
# from .gpu/mscclpp/mscclpp-0.9.0-sm90-libs.tar.gz (unpacked to a temporary folder,
# multicast off, NCCL for what it hands on); budget default 200 s.
#
# GPU_BENCH_SET=tune: `commhal tune --backend cuda-nvlink --ranks N -b 1K -e 1G -n 60 -w 5
# --out $OUT/gpu-cuda-h200.toml` (every collective; the sweep of the committed 8-rank
# section, 155 s on 8 x H200) for N = 2, 4, then 8 where there are that many GPUs (each
# run replaces its [ranks.N] section and keeps the others; the file's header records the
# commands); sweeps as $OUT/tune-<N>gpu.json; budget default 500 s. Copy the file to
# algorithms/tuning/ (and check `git diff`) to commit the tuned thresholds.
#
# GPU_BENCH_SET=faults: the fault checks of issue 36 on 4 GPUs, each an all-reduce f16 of
# 4 KiB and of 1 MiB with a 5 s device wait bound (--timeout-ms 5000): `--dead-rank 3`
# (rank 3 exits after the setup), `--stop-rank 3` (rank 3 stops itself with SIGSTOP: a
# hung peer; it is continued and exits 17 s later) and `--abort-after-ms 500` (every
# rank aborts its communicator while ranks 1-3 wait for rank 0, which never calls);
# then the abort through `commhal bench --backend cuda-nvlink` (the flags' forwarding).
# Every rank prints one line: its error, how long it took (for the abort: from the
# abort) and whether that was the expected error in its bound; a step fails when one
# was not. Budget default 240 s.
#
# Output ($OUT, default ./gpu-out; few files, so they all come back):
#   bench-<N>gpu.log   every step's output, in order, with a header per step (the tune
#                      set: tune-<N>gpu.log)
#   summary.log        one line per step (ok / FAIL / TIMEOUT, seconds)
#   json.tar           the JSON of every step
# Exit status: 0 when every step that ran passed (results correct).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
G=.gpu
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
JSON=$(mktemp -d)
SET=${GPU_BENCH_SET:-default}
case $SET in
  extra) BUDGET=${GPU_BENCH_BUDGET:-170} ;;
  cli) BUDGET=${GPU_BENCH_BUDGET:-240} ;;
  tune) BUDGET=${GPU_BENCH_BUDGET:-500} ;;
  dma) BUDGET=${GPU_BENCH_BUDGET:-150} ;;
  dense) BUDGET=${GPU_BENCH_BUDGET:-570} ;;
  mscclpp) BUDGET=${GPU_BENCH_BUDGET:-200} ;;
  p2p) BUDGET=${GPU_BENCH_BUDGET:-240} ;;
  faults) BUDGET=${GPU_BENCH_BUDGET:-240} ;;
  default) BUDGET=${GPU_BENCH_BUDGET:-330} ;;
  *) echo "gpu-bench: GPU_BENCH_SET=$SET: expected default, extra, dense, mscclpp, p2p, faults, cli, tune or dma" >&2; exit 2 ;;
esac
START=$(date +%s)
SUMMARY=()
FAILED=0

# shellcheck source=scripts/lib-gpu.sh
source scripts/lib-gpu.sh
gpu_env gpu-bench
export NCCL_NVLS_ENABLE=0
unset COMMHAL_ALLOW_MULTICAST

gpu_use_nvrtc gpu-bench
export COMMHAL_CACHE_DIR=${COMMHAL_CACHE_DIR:-/tmp/commhal-kernel-cache}
export COMMHAL_BOOTSTRAP_TIMEOUT_MS=${COMMHAL_BOOTSTRAP_TIMEOUT_MS:-60000}
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
echo "gpu-bench: $NGPU GPU(s); budget ${BUDGET}s; logs in $OUT"

NEED=("$G/commhal")
[[ $SET == default || $SET == extra || $SET == dense || $SET == mscclpp || $SET == dma || $SET == p2p || $SET == faults ]] && NEED+=("$G/commhal-gpu-bench")
for b in "${NEED[@]}"; do
  [[ -x $b ]] || { echo "gpu-bench: $b not carried (see the header)" >&2; exit 2; }
done

# step LOG NAME LIMIT ARGS...: run `commhal-gpu-bench ARGS` under `commhal launch`,
# bounded by min(LIMIT, time left - 5 s); append to $OUT/LOG.
step() {
  local log=$1 name=$2 limit=$3 n=$4
  shift 4
  local left=$((BUDGET - ($(date +%s) - START) - 5))
  if ((left < 20)); then
    SUMMARY+=("$(printf '%-28s SKIPPED (out of time budget)' "$name")")
    return 0
  fi
  ((limit > left)) && limit=$left
  local t0=$(date +%s)
  {
    echo
    echo "################ $name (limit ${limit}s): commhal launch -n $n -- commhal-gpu-bench $*"
  } >>"$OUT/$log"
  echo "gpu-bench: [$name] (limit ${limit}s)"
  timeout --kill-after=10 "$limit" "$G/commhal" launch -n "$n" -- "$G/commhal-gpu-bench" "$@" --json "$JSON/$name.json" >>"$OUT/$log" 2>&1
  local rc=$? dt=$(($(date +%s) - t0)) verdict=ok
  if ((rc == 124 || rc == 137)); then verdict=TIMEOUT; FAILED=1
  elif ((rc != 0)); then verdict="FAIL(rc=$rc)"; FAILED=1; fi
  SUMMARY+=("$(printf '%-28s %-12s %4ss' "$name" "$verdict" "$dt")")
}

# cmd_step LOG NAME LIMIT CMD...: run CMD (a `commhal` command that starts its own
# ranks), bounded like `step`; append to $OUT/LOG.
cmd_step() {
  local log=$1 name=$2 limit=$3
  shift 3
  local left=$((BUDGET - ($(date +%s) - START) - 5))
  if ((left < 20)); then
    SUMMARY+=("$(printf '%-28s SKIPPED (out of time budget)' "$name")")
    return 0
  fi
  ((limit > left)) && limit=$left
  local t0=$(date +%s)
  {
    echo
    echo "################ $name (limit ${limit}s): $*"
  } >>"$OUT/$log"
  echo "gpu-bench: [$name] (limit ${limit}s)"
  timeout --kill-after=10 "$limit" "$@" >>"$OUT/$log" 2>&1
  local rc=$? dt=$(($(date +%s) - t0)) verdict=ok
  if ((rc == 124 || rc == 137)); then verdict=TIMEOUT; FAILED=1
  elif ((rc != 0)); then verdict="FAIL(rc=$rc)"; FAILED=1; fi
  SUMMARY+=("$(printf '%-28s %-12s %4ss' "$name" "$verdict" "$dt")")
}

if [[ $SET == cli ]]; then
  for N in 2 4; do
    ((NGPU >= N)) || { SUMMARY+=("$(printf '%-28s SKIPPED (needs %s GPUs, found %s)' "cli-${N}gpu" "$N" "$NGPU")"); continue; }
    L=bench-${N}gpu.log
    S=allreduce-f16-cli-${N}gpu
    cmd_step "$L" "$S" 100 "$G/commhal" bench allreduce --backend cuda-nvlink --ranks "$N" -b 1K -e 1G -f 4 -n 40 -w 5 -d half --compare nccl --plot "$OUT/$S.svg"
    S=allreduce-f16-graph-cli-${N}gpu
    cmd_step "$L" "$S" 45 "$G/commhal" bench allreduce --backend cuda-nvlink --ranks "$N" -b 1K -e 1M -f 4 -n 50 -w 5 -d half -G --compare nccl --plot "$OUT/$S.svg"
    S=allgather-f16-cli-${N}gpu
    cmd_step "$L" "$S" 60 "$G/commhal" bench allgather --backend cuda-nvlink --ranks "$N" -b 1K -e 1G -f 16 -n 40 -w 5 -d half --compare nccl --plot "$OUT/$S.svg"
  done
fi

if [[ $SET == tune ]]; then
  for N in 2 4 8; do
    ((NGPU >= N)) || { SUMMARY+=("$(printf '%-28s SKIPPED (needs %s GPUs, found %s)' "tune-${N}gpu" "$N" "$NGPU")"); continue; }
    cmd_step "tune-${N}gpu.log" "tune-${N}gpu" 200 "$G/commhal" tune --backend cuda-nvlink --ranks "$N" -b 1K -e 1G -n 60 -w 5 --out "$OUT/gpu-cuda-h200.toml" --json "$OUT/tune-${N}gpu.json" --record-as algorithms/tuning/gpu-cuda-h200.toml
  done
fi

if [[ $SET == extra ]]; then
  N=0
  ((NGPU >= 2)) && N=2
  ((NGPU >= 4)) && N=4
  if ((N == 0)); then
    SUMMARY+=("$(printf '%-28s SKIPPED (needs 2 GPUs, found %s)' extra "$NGPU")")
  else
    L=bench-${N}gpu.log
    for C in broadcast reduce alltoall sendrecv; do
      step "$L" "$C-f16-${N}gpu" 60 "$N" "$C" -b 1K -e 1G -f 32 -n 40 -w 5 -d half --compare nccl
    done
    for C in broadcast reduce; do
      step "$L" "$C-f16-root$((N - 1))-${N}gpu" 60 "$N" "$C" -b 1K -e 64M -f 256 -n 20 -w 3 -d half -r $((N - 1)) --compare nccl
    done
  fi
fi

if [[ $SET == dma ]]; then
  N=0
  ((NGPU >= 2)) && N=2
  ((NGPU >= 4)) && N=4
  if ((N == 0)); then
    SUMMARY+=("$(printf '%-28s SKIPPED (needs 2 GPUs, found %s)' dma "$NGPU")")
  else
    export COMMHAL_GPU_PATH=dma
    for C in allreduce allgather reducescatter broadcast reduce alltoall sendrecv; do
      step "bench-${N}gpu.log" "$C-dma-${N}gpu" 40 "$N" "$C" -b 1K -e 1G -f 32 -n 20 -w 3 -d half --gate 0 --compare nccl
    done
    unset COMMHAL_GPU_PATH
  fi
fi

if [[ $SET == p2p ]]; then
  # grouped sends and receives (Comm::p2p) as all-to-all and ring send/recv, checked
  # against NCCL; then two communicators per process (--split 2: groups, then world)
  for N in 4 2; do
    ((NGPU >= N)) || { SUMMARY+=("$(printf '%-28s SKIPPED (needs %s GPUs, found %s)' "p2p-${N}gpu" "$N" "$NGPU")"); continue; }
    for C in alltoall sendrecv; do
      step "bench-${N}gpu.log" "$C-p2p-${N}gpu" 60 "$N" "$C" -b 1K -e 1G -f 4 -n 20 -w 3 -d half --p2p --compare nccl
    done
  done
  if ((NGPU >= 4)); then
    step bench-4gpu.log allreduce-split2-4gpu 60 4 allreduce -b 1K -e 256M -f 16 -n 20 -w 3 -d half --split 2
  fi
fi

if [[ $SET == faults ]]; then
  # issue 36: a dead peer, a hung (stopped) peer and an abort, each for a small and a
  # large all-reduce; every rank reports its error and when it came
  if ((NGPU >= 4)); then
    F=(-n 1 -w 0 -d half --timeout-ms 5000)
    for S in 4K 1M; do
      step bench-4gpu.log "allreduce-dead3-$S-4gpu" 60 4 allreduce -b "$S" -e "$S" "${F[@]}" --dead-rank 3
      step bench-4gpu.log "allreduce-stop3-$S-4gpu" 90 4 allreduce -b "$S" -e "$S" "${F[@]}" --stop-rank 3
      step bench-4gpu.log "allreduce-abort500-$S-4gpu" 60 4 allreduce -b "$S" -e "$S" "${F[@]}" --abort-after-ms 500
    done
    cmd_step bench-4gpu.log allreduce-abort500-4K-cli-4gpu 60 "$G/commhal" bench allreduce --backend cuda-nvlink --ranks 4 -b 4K -e 4K "${F[@]}" --abort-after-ms 500
  else
    SUMMARY+=("$(printf '%-28s SKIPPED (needs 4 GPUs, found %s)' faults "$NGPU")")
  fi
fi

if [[ $SET == dense ]]; then
  NS=()
  for N in ${GPU_BENCH_DENSE_RANKS:-4 2}; do
    ((NGPU >= N)) && NS+=("$N")
  done
  ((${#NS[@]})) || SUMMARY+=("$(printf '%-28s SKIPPED (needs %s GPUs, found %s)' dense "${GPU_BENCH_DENSE_RANKS:-2}" "$NGPU")")
  D=(-b 1K -e 1G -f 2 -n 40 -w 5 --compare nccl)
  for N in "${NS[@]}"; do
    for C in allreduce allgather reducescatter; do
      step "bench-${N}gpu.log" "$C-f16-${N}gpu" 90 "$N" "$C" "${D[@]}" -d half
    done
    for C in broadcast reduce alltoall sendrecv; do
      step "bench-${N}gpu.log" "$C-f16-${N}gpu" 90 "$N" "$C" -r 1 "${D[@]}" -d half
    done
  done
  for N in "${NS[@]}"; do
    for T in bfloat16 float; do
      for C in allreduce allgather reducescatter; do
        step "bench-${N}gpu.log" "$C-$T-${N}gpu" 50 "$N" "$C" "${D[@]}" -d "$T"
      done
    done
  done
fi

if [[ $SET == mscclpp ]]; then
  MTAR=$G/mscclpp/mscclpp-0.9.0-sm90-libs.tar.gz
  MDIR=$(mktemp -d)
  REAL=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib", "libnccl.so.2"))' 2>/dev/null)
  if [[ ! -f $MTAR ]] || ! tar -xzf "$MTAR" -C "$MDIR" || [[ ! -f $MDIR/mlib/libmscclpp_nccl.so ]]; then
    SUMMARY+=("$(printf '%-28s SKIPPED (no mlib/libmscclpp_nccl.so from %s)' mscclpp "$MTAR")")
  else
    # its own libraries first; commhal's benchmark loads the C++ runtime before it
    export MSCCLPP_FORCE_DISABLE_NVLS=1 COMMHAL_MSCCLPP_LIB=$MDIR/mlib/libmscclpp_nccl.so
    [[ -n $REAL ]] && export MSCCLPP_NCCL_LIB_PATH=$REAL
    export LD_LIBRARY_PATH=$MDIR/mlib:${LD_LIBRARY_PATH:-}
    for N in 4 2; do
      ((NGPU >= N)) || { SUMMARY+=("$(printf '%-28s SKIPPED (needs %s GPUs, found %s)' "mscclpp-${N}gpu" "$N" "$NGPU")"); continue; }
      for C in allreduce allgather reducescatter; do
        step "bench-${N}gpu.log" "$C-mscclpp-${N}gpu" 30 "$N" "$C" -b 1K -e 4M -f 2 -n 30 -w 5 -d half --compare mscclpp
        step "bench-${N}gpu.log" "$C-mscclpp-graph-${N}gpu" 30 "$N" "$C" -b 1K -e 4M -f 2 -n 30 -w 5 -d half -G 5 --compare mscclpp
      done
    done
  fi
fi

for N in 2 4; do
  [[ $SET == default ]] || break
  ((NGPU >= N)) || { SUMMARY+=("$(printf '%-28s SKIPPED (needs %s GPUs, found %s)' "${N}gpu" "$N" "$NGPU")"); continue; }
  L=bench-${N}gpu.log
  step "$L" "allreduce-f16-${N}gpu" 100 "$N" allreduce -b 1K -e 1G -f 4 -n 40 -w 5 -d half --compare nccl
  step "$L" "allreduce-f16-graph-${N}gpu" 45 "$N" allreduce -b 1K -e 1M -f 4 -n 50 -w 5 -d half -G --compare nccl
  step "$L" "allgather-f16-${N}gpu" 70 "$N" allgather -b 1K -e 1G -f 4 -n 40 -w 5 -d half --compare nccl
  step "$L" "reducescatter-f16-${N}gpu" 70 "$N" reducescatter -b 1K -e 1G -f 4 -n 40 -w 5 -d half --compare nccl
done

(cd "$JSON" && tar cf "$OUT/json.tar" ./*.json 2>/dev/null)
rm -rf "$JSON"
{
  echo "gpu-bench summary ($(($(date +%s) - START))s of ${BUDGET}s):"
  printf '  %s\n' "${SUMMARY[@]}"
} | tee "$OUT/summary.log"
exit $FAILED
