#!/usr/bin/env bash
# gpu-check.sh — the GPU checks of commhal, run on a multi-GPU host from the repo root
# with prebuilt binaries carried in .gpu/ (nothing is built here):
#
#   .gpu/env.sh                       copy of shared/gpu/env.sh (multicast off, NCCL, CUDA libs)
#   .gpu/commhal                      target/release/commhal
#   .gpu/commhal-gpu-conformance      target/release/commhal-gpu-conformance
#   .gpu/cudart-gpu-test              cuda-rt's `gpu` test binary (cargo test --release --no-run)
#   .gpu/cudart-nvrtc-test            (optional) cuda-rt's `nvrtc_compile` test binary
#   .gpu/cuda-dma-gpu-test            cuda-dma's `gpu` test binary (one GPU, in-process nvlink + dma)
#   .gpu/commhal-gpu-bench            (optional) target/release/commhal-gpu-bench: the
#                                     back-to-back chain check (--cycle-roots), the
#                                     LL16 and LL63 slot reuse behind one-way kernels
#                                     (--mix-sendrecv), the all-reduce copy-engine route
#                                     check and the collectives on cuMem VMM buffers
#
# Every step is bounded with `timeout` and the whole script by a deadline
# (GPU_CHECK_BUDGET seconds, default 450), so it ends well within 8 minutes. Each step
# logs to $OUT/<step>.log (OUT defaults to ./gpu-out); a summary is printed at the end
# and written to $OUT/summary.log. Exit status: 0 when every step that ran passed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
G=.gpu
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
BUDGET=${GPU_CHECK_BUDGET:-450}
START=$(date +%s)
SUMMARY=()
FAILED=0

# ---- environment ---------------------------------------------------------------
# shellcheck source=scripts/lib-gpu.sh
source scripts/lib-gpu.sh
gpu_env gpu-check
gpu_use_nvrtc gpu-check
export COMMHAL_CACHE_DIR=${COMMHAL_CACHE_DIR:-/tmp/commhal-kernel-cache}
# Short: a case that fails on one rank must not hold its partner for long.
export COMMHAL_BOOTSTRAP_TIMEOUT_MS=${COMMHAL_BOOTSTRAP_TIMEOUT_MS:-10000}
export RUST_BACKTRACE=1
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)

# ---- steps ---------------------------------------------------------------------
# step NAME LIMIT_SECONDS CMD...: run bounded by min(LIMIT, time left - 10 s), log to
# $OUT/NAME.log, record the outcome and the log's closing summary line if any.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((BUDGET - ($(date +%s) - START) - 10))
  if ((left < 15)); then
    SUMMARY+=("$(printf '%-26s SKIPPED (out of time budget)' "$name")")
    return 0
  fi
  ((limit > left)) && limit=$left
  local t0=$(date +%s)
  echo "gpu-check: [$name] (limit ${limit}s) $*"
  timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$? dt=$(($(date +%s) - t0))
  local tail
  tail=$(grep -E '[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped|^test result:' "$OUT/$name.log" | tail -n 1)
  local verdict=ok
  if ((rc == 124 || rc == 137)); then
    verdict="TIMEOUT"
    FAILED=1
  elif ((rc != 0)); then
    verdict="FAIL(rc=$rc)"
    FAILED=1
  fi
  SUMMARY+=("$(printf '%-26s %-12s %4ss  %s' "$name" "$verdict" "$dt" "$tail")")
}

have() { [[ -x $1 ]] || { SUMMARY+=("$(printf '%-26s SKIPPED (%s not carried)' "$2" "$1")"); return 1; }; }

step topology 20 bash -c 'nvidia-smi -L; echo; nvidia-smi topo -m; echo; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv'
have $G/commhal info && step info 30 $G/commhal info
[[ -x $G/cudart-nvrtc-test ]] && step cudart-nvrtc-test 60 env COMMHAL_REQUIRE_NVRTC=1 $G/cudart-nvrtc-test
have $G/cudart-gpu-test cudart-gpu-test &&
  step cudart-gpu-test 90 env COMMHAL_REQUIRE_GPU=1 $G/cudart-gpu-test --test-threads=1
for t in cuda-dma-gpu-test; do
  [[ -x $G/$t ]] && step "$t" 30 env COMMHAL_REQUIRE_GPU=1 $G/$t --test-threads=1
done

CONF=$G/commhal-gpu-conformance
if have $CONF gpu-conformance && have $G/commhal gpu-conformance; then
  if ((NGPU >= 2)); then
    # includes case 21 through the GPU communicator: NVRTC compiles every plan on first use
    step conformance-nvlink-2gpu 200 $G/commhal launch -n 2 -- $CONF conformance --backend cuda-nvlink
    step conformance-dma-2gpu 100 $G/commhal launch -n 2 -- $CONF conformance --backend cuda-dma
    for N in 4 8; do
      ((NGPU >= N)) && step conformance-all-${N}gpu 100 $G/commhal launch -n $N -- $CONF conformance --backend all --quick
    done
    step bench-2gpu 90 $G/commhal launch -n 2 -- $CONF bench
    if command -v compute-sanitizer >/dev/null; then
      # One sanitizer per rank process (compute-sanitizer follows one process tree).
      step memcheck-2gpu 100 $G/commhal launch -n 2 -- compute-sanitizer --tool memcheck --error-exitcode 3 $CONF conformance --backend all --quick
      step racecheck-2gpu 70 $G/commhal launch -n 2 -- compute-sanitizer --tool racecheck --error-exitcode 3 $CONF conformance --backend cuda-nvlink --quick
    else
      SUMMARY+=("compute-sanitizer          SKIPPED (not on PATH)")
    fi
    step conformance-legacy-ipc 60 env COMMHAL_CUDA_LEGACY_IPC=1 $G/commhal launch -n 2 -- $CONF conformance --backend cuda-nvlink --quick
  else
    SUMMARY+=("gpu-conformance            SKIPPED (needs 2 GPUs, found $NGPU)")
  fi
fi

# Broadcast / reduce chains back to back with rotating roots, chains forced from 1 MiB
# (the neighbour start and the credits): every reduce root checks its own sum; exit
# 1 on a wrong element. On every GPU (the broadcast chain needs 3 ranks).
if [[ -x $G/commhal-gpu-bench ]] && ((NGPU >= 3)); then
  CHAINS=(env COMMHAL_COLL_BCAST_LL63_MAX=0 COMMHAL_COLL_BCAST_CHAIN_MIN=1048576
    COMMHAL_COLL_REDUCE_LL63_MAX=0 COMMHAL_COLL_REDUCE_CHAIN_MIN=1048576)
  for c in broadcast reduce; do
    step "cycle-roots-$c-${NGPU}gpu" 40 "${CHAINS[@]}" $G/commhal launch -n "$NGPU" -- \
      $G/commhal-gpu-bench "$c" -r 1 -b 1M -e 256M -f 4 -n 10 -w 2 -d half --cycle-roots
  done
fi

# The all-reduce copy-engine route (dma.rs allreduce_ring_first, the head kernel from
# step 1, allreduce_ring_tail) forced from 16 bytes (LL capped at 8
# bytes: COMMHAL_COLL_LL_MAX must be > 0), odd sizes and large ones, in and out of place;
# exit 1 on a wrong element. On every GPU (the route needs 3 ranks).
if [[ -x $G/commhal-gpu-bench ]] && ((NGPU >= 3)); then
  ROUTE=(env COMMHAL_COLL_LL_MAX=8 COMMHAL_COLL_AR_RING_MIN=16 COMMHAL_COLL_AR_CE_MIN=16)
  step "allreduce-ce-route-${NGPU}gpu" 40 "${ROUTE[@]}" $G/commhal launch -n "$NGPU" -- \
    $G/commhal-gpu-bench allreduce -b 16 -e 252720 -f 3 -n 10 -w 2 -d half
  step "allreduce-ce-route-big-${NGPU}gpu" 40 "${ROUTE[@]}" $G/commhal launch -n "$NGPU" -- \
    $G/commhal-gpu-bench allreduce -b 16M -e 256M -f 4 -n 10 -w 2 -d bf16
fi

# The caller's buffers in cuMem VMM memory of 2 MiB pieces (PyTorch's expandable
# segments): every collective maps the peers' pieces zero-copy; exit 1 on a wrong
# element. On 2 GPUs and on every GPU.
if [[ -x $G/commhal-gpu-bench ]]; then
  for N in 2 "$NGPU"; do
    ((NGPU >= N && N >= 2)) || continue
    for c in allreduce allgather reducescatter broadcast reduce alltoall sendrecv; do
      step "vmm-$c-${N}gpu" 40 $G/commhal launch -n "$N" -- \
        $G/commhal-gpu-bench "$c" -b 1K -e 64M -f 16 -n 5 -w 1 -d half --buffers vmm
    done
    [[ $N == "$NGPU" ]] && break
  done
fi

# The all-peers LL16 and LL63 kernels with a one-way LL16 send/recv before every launch
# (--mix-sendrecv), plain and captured: their slot reuse behind the peers_done fence
# (to 16 MiB: the LL63 windows); exit 1 on a wrong element. On every GPU (2 or more).
# Last: the newest check, so a short budget drops it before the older ones.
if [[ -x $G/commhal-gpu-bench ]] && ((NGPU >= 2)); then
  for c in allgather allreduce reducescatter; do
    step "mix-sendrecv-$c-${NGPU}gpu" 40 $G/commhal launch -n "$NGPU" -- \
      $G/commhal-gpu-bench "$c" -b 1K -e 16M -f 4 -n 10 -w 2 -d half --mix-sendrecv
    step "mix-sendrecv-graph-$c-${NGPU}gpu" 40 $G/commhal launch -n "$NGPU" -- \
      $G/commhal-gpu-bench "$c" -b 1K -e 16M -f 4 -n 10 -w 2 -d half --mix-sendrecv -G 2
  done
fi

# ---- summary -------------------------------------------------------------------
{
  echo "gpu-check summary ($NGPU GPU(s), $(($(date +%s) - START))s, logs in $OUT):"
  printf '  %s\n' "${SUMMARY[@]}"
  for f in "$OUT"/conformance-*.log "$OUT"/memcheck-*.log "$OUT"/racecheck-*.log; do
    [[ -f $f ]] || continue
    n=$(grep -cE 'FAIL|ERROR SUMMARY: [1-9]|========= (Invalid|Race|Error)' "$f" || true)
    ((n > 0)) && echo "  $(basename "$f"): $n line(s) mention failures; first ones:" &&
      grep -E 'FAIL|ERROR SUMMARY: [1-9]|========= (Invalid|Race|Error)' "$f" | head -n 5 | sed 's/^/      /'
  done
  [[ -f $OUT/bench-2gpu.log ]] && echo "  bench:" && grep -E 'latency|bandwidth' "$OUT/bench-2gpu.log" | sed 's/^/      /' | head -n 30
} | tee "$OUT/summary.log"
# The device tool returns at most 8 files: pack the step logs into one archive.
(cd "$OUT" && tar czf gpu-check-logs.tgz --exclude=summary.log --exclude='*.tgz' -- *.log 2>/dev/null &&
  find . -maxdepth 1 -name '*.log' ! -name summary.log -delete)
exit $FAILED
