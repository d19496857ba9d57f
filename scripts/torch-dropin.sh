#!/usr/bin/env bash
# torch-dropin.sh — the PyTorch end-to-end check of the NCCL drop-in, run on a multi-GPU
# host from the repo root with the prebuilt library carried in .gpu/ (nothing is built here):
#
#   .gpu/libcommhal_nccl.so   the drop-in for NCCL 2.28's C API
#   .gpu/env.sh               copy of shared/gpu/env.sh (multicast off, NCCL, CUDA libs)
#
# It needs python3 with torch (torchrun) and 2 or more GPUs; without torch, with fewer
# GPUs or without .gpu/libcommhal_nccl.so it prints "SKIPPED: <reason>" and exits 0.
#
# For N = 2, then N = 4 when there are 4 GPUs, nccl/tests/torch_dropin.py runs under
# torchrun --nproc-per-node N:
#   ref-nN      --mode record, plain NCCL: the reference outputs
#   dropin-nN   --mode compare under LD_PRELOAD=.gpu/libcommhal_nccl.so: the same cases
#               through the drop-in, judged against ref-nN and against the exact results
#   ctypes-nN   --mode ctypes, plain NCCL under PyTorch: the drop-in loaded with ctypes
#               and called as vLLM's pynccl calls it, judged against torch.distributed
# then debug-n2: one small case under the drop-in with COMMHAL_DEBUG=1 (which calls ran
# where), logged on its own.
#
# COMMHAL_NCCL_FALLBACK defaults to the real libnccl.so.2 of the nvidia-nccl wheel (the
# library hands it the calls it does not handle); COMMHAL_NCCL_FALLBACK= (set, empty)
# runs the drop-in without one. TORCH_DROPIN_LIB=<path of the real libnccl.so.2> runs
# the same steps with plain NCCL in the drop-in's place: a check of the test itself.
#
# Outputs under OUT (default ./torch-out): torch-dropin-n2.log and torch-dropin-n4.log
# (every step's whole output, with the per-case tables), debug.log (the COMMHAL_DEBUG=1
# run) and summary.log (one line a step, then the cases that were wrong or raised). The
# recorded tensors (a few GB at N = 4) go to TORCH_DROPIN_DATA (default a new folder
# under /tmp), removed at the end unless TORCH_DROPIN_KEEP=1. Every step is bounded by
# `timeout` and the whole run by TORCH_DROPIN_BUDGET seconds (default 540); a step left
# out for time counts as failed. Exit status: 0 when every step ran and passed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
OUT=${OUT:-$PWD/torch-out}
mkdir -p "$OUT"
BUDGET=${TORCH_DROPIN_BUDGET:-540}
START=$SECONDS
TEST=nccl/tests/torch_dropin.py
LIB=${TORCH_DROPIN_LIB:-$PWD/.gpu/libcommhal_nccl.so}
SUMMARY=()
FAILED=0

skip() {
  echo "SKIPPED: $*" | tee "$OUT/summary.log"
  exit 0
}

# ---- environment ---------------------------------------------------------------
# shellcheck source=scripts/lib-gpu.sh
source scripts/lib-gpu.sh
gpu_env torch-dropin
# NVLink multicast stays off whatever the environment carried in.
export NCCL_NVLS_ENABLE=0
unset COMMHAL_ALLOW_MULTICAST

python3 -c "import torch" 2>/dev/null || skip "python3 cannot import torch"
NGPU=$(python3 -c "import torch; print(torch.cuda.device_count())" 2>/dev/null)
[[ $NGPU =~ ^[0-9]+$ ]] || NGPU=0
((NGPU >= 2)) || skip "needs 2 GPUs, torch sees $NGPU"
[[ -f $LIB ]] || skip "$LIB is missing"

NCCL_DIR=$(python3 -c "import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], 'lib'))" 2>/dev/null)
REAL_NCCL=${NCCL_DIR:+$NCCL_DIR/libnccl.so.2}
export COMMHAL_NCCL_FALLBACK=${COMMHAL_NCCL_FALLBACK-$REAL_NCCL}
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
if command -v torchrun >/dev/null; then
  TORCHRUN=(torchrun)
else
  TORCHRUN=(python3 -m torch.distributed.run)
fi

if [[ -n ${TORCH_DROPIN_DATA:-} ]]; then
  DATA=$TORCH_DROPIN_DATA
  mkdir -p "$DATA"
else
  DATA=$(mktemp -d /tmp/torch-dropin.XXXXXX)
  [[ ${TORCH_DROPIN_KEEP:-0} == 1 ]] || trap 'rm -rf "$DATA"' EXIT
fi
: >"$DATA/problems"

# ---- steps ---------------------------------------------------------------------
# step LOG NAME LIMIT CMD...: run CMD bounded by min(LIMIT, time left - 10 s), its output
# appended to $OUT/LOG; record the outcome and the run's closing `torch_dropin:` line, and
# keep the table lines of cases that were wrong or raised for the summary.
step() {
  local log=$OUT/$1 name=$2 limit=$3
  shift 3
  local left=$((BUDGET - (SECONDS - START) - 10))
  if ((left < 30)); then
    SUMMARY+=("$(printf '%-12s NOT RUN (out of time budget)' "$name")")
    FAILED=1
    return 0
  fi
  ((limit > left)) && limit=$left
  local t0=$SECONDS
  echo "torch-dropin: [$name] (limit ${limit}s)"
  echo "==== [$name] $*" >>"$log"
  timeout --kill-after=15 "$limit" "$@" 2>&1 | tee -a "$log" >"$DATA/$name.out"
  local rc=${PIPESTATUS[0]} dt=$((SECONDS - t0))
  echo "==== [$name] rc=$rc ${dt}s" >>"$log"
  local verdict=ok line
  if ((rc == 124 || rc == 137)); then
    verdict=TIMEOUT
    FAILED=1
  elif ((rc != 0)); then
    verdict="FAIL(rc=$rc)"
    FAILED=1
  fi
  line=$(grep -E '^torch_dropin: ' "$DATA/$name.out" | tail -n 1)
  SUMMARY+=("$(printf '%-12s %-12s %4ss  %s' "$name" "$verdict" "$dt" "$line")")
  grep -E '^[^ ]+ +[^ ]+ +[^ ]+ +(WRONG|error) ' "$DATA/$name.out" | head -n 40 |
    sed "s/^/$name: /" >>"$DATA/problems"
}

# torchrun_cmd N PORT ARGS...: the torchrun command line for N ranks on PORT running the
# test with ARGS, into the array CMD.
torchrun_cmd() {
  local n=$1 port=$2
  shift 2
  CMD=("${TORCHRUN[@]}" --nnodes 1 --nproc-per-node "$n" --master-port "$port" "$TEST" "$@")
}

NS=(2)
((NGPU >= 4)) && NS+=(4)
for n in "${NS[@]}"; do
  log=torch-dropin-n$n.log
  : >"$OUT/$log"
  port=$((29600 + 10 * n))
  torchrun_cmd "$n" $((port + 1)) --mode record --out "$DATA/ref-n$n"
  step "$log" "ref-n$n" 240 env -u LD_PRELOAD "${CMD[@]}"
  torchrun_cmd "$n" $((port + 2)) --mode compare --ref "$DATA/ref-n$n" --out "$DATA/test-n$n" \
    --expect-mapped "$(basename "$LIB")"
  step "$log" "dropin-n$n" 240 env LD_PRELOAD="$LIB" "${CMD[@]}"
  torchrun_cmd "$n" $((port + 3)) --mode ctypes --lib "$LIB" --out "$DATA/ctypes-n$n"
  step "$log" "ctypes-n$n" 120 env -u LD_PRELOAD "${CMD[@]}"
done
: >"$OUT/debug.log"
torchrun_cmd 2 29691 --mode record --cases ^all_reduce_sum_bf16_small --out "$DATA/debug"
step debug.log debug-n2 90 env LD_PRELOAD="$LIB" COMMHAL_DEBUG=1 "${CMD[@]}"

# ---- summary -------------------------------------------------------------------
{
  echo "torch-dropin: $NGPU GPU(s), drop-in $LIB, COMMHAL_NCCL_FALLBACK=${COMMHAL_NCCL_FALLBACK:-<none>}"
  printf '%s\n' "${SUMMARY[@]}"
  if [[ -s $DATA/problems ]]; then
    echo "cases wrong or raising (first 40 a step; the logs have all):"
    cat "$DATA/problems"
  fi
  if ((FAILED)); then
    echo "torch-dropin: FAILED"
  else
    echo "torch-dropin: all steps passed"
  fi
} | tee "$OUT/summary.log"
exit "$FAILED"
