#!/usr/bin/env bash
# gpu-plans.sh — every builder's plan, compiled to CUDA (algorithms/src/codegen.rs) and
# run on the GPUs through `commhal-gpu-bench` with COMMHAL_GPU_ALGO, checked on every
# rank at every size (0 wrong expected) and timed against NCCL on the same buffers.
# Run from the repo root on a multi-GPU host with .gpu/{env.sh,commhal,commhal-gpu-bench}
# (see scripts/gpu-bench.sh). N = GPU_PLANS_RANKS (default: 4 if there are 4, else 2).
# Whole run bounded by GPU_PLANS_BUDGET seconds (default 400), each step by
# GPU_PLANS_STEP_LIMIT (45).
# GPU_PLANS_NODES=M: the ranks split into M virtual nodes of N/M consecutive ranks
# (COMMHAL_NODE per rank; COMMHAL_BACKENDS=cuda-nvlink,cuda-dma,host-tcp, so ops between
# nodes go through host-tcp port channels), NCCL forced onto its socket transport for
# the same split (NCCL_HOSTID per node, NCCL_NET=Socket, NCCL_SOCKET_IFNAME default
# eth0): every plan that runs across nodes, timed against NCCL 1 KiB-64 MiB, then at
# sizes that are not a multiple of 16 bytes (checked, not timed).
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
    "${WRAP[@]}" "$G/commhal-gpu-bench" "$@" >>"$LOG" 2>&1
  local rc=$? verdict=ok
  if ((rc == 124 || rc == 137)); then verdict=TIMEOUT; FAILED=1
  elif ((rc != 0)); then verdict="FAIL(rc=$rc)"; FAILED=1; fi
  SUMMARY+=("$(printf '%-34s %-12s %4ss' "$name" "$verdict" "$(($(date +%s) - t0))")")
}

WRAP=()
if [[ -n ${GPU_PLANS_NODES:-} ]]; then
  M=$GPU_PLANS_NODES
  ((M >= 2 && N % M == 0)) || { echo "gpu-plans: GPU_PLANS_NODES=$M must divide $N ranks into 2 or more nodes" >&2; exit 2; }
  LOG=$OUT/plans-${N}gpu-${M}nodes.log
  export COMMHAL_BACKENDS=cuda-nvlink,cuda-dma,host-tcp NCCL_NET=Socket
  export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-eth0}
  export COMMHAL_PLAN_SCRATCH=${COMMHAL_PLAN_SCRATCH:-600M}
  # each rank's node from its rank, for commhal and for NCCL alike
  WRAP=(sh -c "export COMMHAL_NODE=\$((COMMHAL_RANK * $M / $N)); export NCCL_HOSTID=vnode\$COMMHAL_NODE; exec \"\$@\"" sh)
  T=(-b 1K -e 64M -f 4 -n 20 -w 3 --compare nccl -d half)
  for a in allreduce:2ph-hb allgather:2ph reducescatter:2ph allreduce:ring allreduce:rd \
    allgather:allpairs allgather:ring reducescatter:allpairs reducescatter:ring; do
    run "$a nodes" "$a" "${a%%:*}" "${T[@]}"
  done
  run "broadcast:chain nodes" "broadcast:chain" broadcast "${T[@]}" -r $((N - 1))
  run "reduce:allpairs nodes" "reduce:allpairs" reduce "${T[@]}" -r $((N - 1))
  run "alltoall:allpairs nodes" "alltoall:allpairs" alltoall "${T[@]}"
  run "sendrecv:direct nodes" "sendrecv:direct" sendrecv "${T[@]}"
  # element counts that leave chunks off 16-byte boundaries
  for a in allreduce:2ph-hb allgather:2ph reducescatter:2ph allreduce:ring; do
    run "$a nodes odd bf16" "$a" "${a%%:*}" -b 1000 -e 1000 -n 5 -w 1 -d bfloat16
    run "$a nodes odd f32" "$a" "${a%%:*}" -b 1040 -e 4M -f 9 -n 3 -w 1 -d float
  done
  {
    echo "gpu-plans on $N GPUs as $M virtual nodes:"
    printf '  %s\n' "${SUMMARY[@]}"
  } | tee "$OUT/plans-summary.log"
  exit $FAILED
fi

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
