#!/usr/bin/env bash
# gpu-plans.sh — every builder's plan, compiled to CUDA (algorithms/src/codegen.rs) and
# run on the GPUs through `commhal-gpu-bench` with COMMHAL_GPU_ALGO, checked on every
# rank at every size (0 wrong expected) and timed against NCCL on the same buffers.
# Run from the repo root on a multi-GPU host with .gpu/{env.sh,commhal,commhal-gpu-bench}
# (see scripts/gpu-bench.sh). N = GPU_PLANS_RANKS (default: 4 if there are 4, else 2).
# Whole run bounded by GPU_PLANS_BUDGET seconds (default 400), each step by
# GPU_PLANS_STEP_LIMIT (45).
# Output: $OUT/plans-<N>gpu.log (every run) and $OUT/plans-summary.log (one line each).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
G=.gpu
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
# shellcheck source=scripts/lib-gpu.sh
source scripts/lib-gpu.sh
gpu_env gpu-plans
export NCCL_NVLS_ENABLE=0
unset COMMHAL_ALLOW_MULTICAST
gpu_use_nvrtc gpu-plans
export COMMHAL_CACHE_DIR=${COMMHAL_CACHE_DIR:-/tmp/commhal-kernel-cache}
export COMMHAL_BOOTSTRAP_TIMEOUT_MS=${COMMHAL_BOOTSTRAP_TIMEOUT_MS:-60000}
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
N=${GPU_PLANS_RANKS:-$((NGPU >= 4 ? 4 : 2))}
((NGPU >= N)) || { echo "gpu-plans: needs $N GPUs, found $NGPU" >&2; exit 2; }
LIMIT=${GPU_PLANS_STEP_LIMIT:-45}
LOG=$OUT/plans-${N}gpu.log
FAILED=0
SUMMARY=()

# run NAME ALGO ARGS...: one bench under `commhal launch` with the plan forced.
START=$(date +%s)
BUDGET=${GPU_PLANS_BUDGET:-400}
run() {
  local name=$1 algo=$2
  shift 2
  local t0=$(date +%s)
  if ((t0 - START + LIMIT > BUDGET)); then
    SUMMARY+=("$(printf '%-34s SKIPPED (out of the %ss budget)' "$name" "$BUDGET")")
    return 0
  fi
  echo "################ $name: COMMHAL_GPU_ALGO=$algo commhal-gpu-bench $*" >>"$LOG"
  COMMHAL_GPU_ALGO=$algo timeout --kill-after=5 "$LIMIT" "$G/commhal" launch -n "$N" -- \
    "$G/commhal-gpu-bench" "$@" >>"$LOG" 2>&1
  local rc=$? verdict=ok
  if ((rc == 124 || rc == 137)); then verdict=TIMEOUT; FAILED=1
  elif ((rc != 0)); then verdict="FAIL(rc=$rc)"; FAILED=1; fi
  SUMMARY+=("$(printf '%-34s %-12s %4ss' "$name" "$verdict" "$(($(date +%s) - t0))")")
}

S=(-b 1K -e 64M -f 8 -n 20 -w 3 --compare nccl)
# LL plans (packets, no barriers) are for small messages.
for a in 1pa 2pa-ll@2; do
  run "allreduce:$a" "allreduce:$a" allreduce -b 1K -e 1M -f 4 -n 20 -w 3 --compare nccl -d half
done
for a in 2pa-hb@2 ring@2 rd; do
  run "allreduce:$a" "allreduce:$a" allreduce "${S[@]}" -d half
done
run "allreduce:2pa-hb@2 bf16" "allreduce:2pa-hb@2" allreduce "${S[@]}" -d bfloat16
run "allreduce:2pa-ll@2 f32" "allreduce:2pa-ll@2" allreduce -b 1K -e 1M -f 8 -n 20 -w 3 --compare nccl -d float
for a in allpairs ring; do
  run "allgather:$a" "allgather:$a" allgather "${S[@]}" -d half
  run "reducescatter:$a" "reducescatter:$a" reducescatter "${S[@]}" -d half
done
for a in direct chain; do
  run "broadcast:$a root$((N - 1))" "broadcast:$a" broadcast "${S[@]}" -d half -r $((N - 1))
done
# LL packets into scratch, no handshake (the plan forms of the hand *_ll kernels);
# broadcast:ll's root is a one-way sender held back by its receivers' progress only.
L=(-b 1K -e 1M -f 4 -n 20 -w 3 --compare nccl)
run "allgather:ll" "allgather:ll" allgather "${L[@]}" -d half
run "reducescatter:ll" "reducescatter:ll" reducescatter "${L[@]}" -d half
run "reducescatter:ll f32" "reducescatter:ll" reducescatter "${L[@]}" -d float
run "broadcast:ll root$((N - 1))" "broadcast:ll" broadcast "${L[@]}" -d half -r $((N - 1))
run "broadcast:ll root0 x500" "broadcast:ll" broadcast -b 1K -e 64K -f 8 -n 500 -w 5 -d half -r 0
run "reduce:allpairs root$((N - 1))" "reduce:allpairs" reduce "${S[@]}" -d half -r $((N - 1))
run "alltoall:allpairs" "alltoall:allpairs" alltoall "${S[@]}" -d half
run "sendrecv:direct" "sendrecv:direct" sendrecv "${S[@]}" -d half

{
  echo "gpu-plans on $N GPUs:"
  printf '  %s\n' "${SUMMARY[@]}"
} | tee "$OUT/plans-summary.log"
exit $FAILED
