#!/usr/bin/env bash
# torch-bench.sh — NCCL 2.28, commhal's drop-in and MSCCL++ 0.9's NCCL-API library
# compared through PyTorch, on one multi-GPU host, in one run, from the repo root.
# Nothing is built here; it needs:
#
#   .gpu/env.sh                                  copy of shared/gpu/env.sh (multicast off, NCCL)
#   .gpu/libcommhal_nccl.so                      commhal's drop-in for libnccl.so.2
#   .gpu/mscclpp/mscclpp-0.9.0-sm90-libs.tar.gz  MSCCL++ (mlib/libmscclpp_nccl.so and its libs)
#   torch with torchrun (/opt/torch/.venv/bin/torchrun, else on PATH) and the
#   nvidia-nccl wheel's libnccl.so.2, the NCCL torch links
#
# For TP = 4 (with >= 4 GPUs), then TP = 2, each a torchrun of its own:
#   decode-floor        bench/torch/decode.py --comm none (no all-reduce: the floor)
#   for nccl, commhal, mscclpp:
#     sweep-torch-L     bench/torch/sweep.py --api torch: torch.distributed; commhal and
#     decode-torch-L    MSCCL++ replace torch's NCCL through LD_PRELOAD (workers only)
#   for nccl, commhal:
#     sweep-ctypes-L    the same through ctypes (bench/torch/pynccl.py opens the library
#     decode-ctypes-L   by path, as vLLM does; torch's own NCCL stays plain); the sweep
#                       eager, and in CUDA graphs up to 1 MiB
# then sweep-ctypes-mscclpp and decode-ctypes-mscclpp for both TP sizes, last.
# Every run is bounded by `timeout`, so a library that crashes (MSCCL++ 0.9 segfaults in
# ncclGetUniqueId called through ctypes) or hangs costs one run, shown as such in the
# tables. About 6 minutes on 4 x H100 for everything: 26 runs of 10-20 s, most of it
# torchrun, torch import and communicator setup.
#
# TORCH_BENCH_BUDGET  seconds for the whole run (default 540); runs that would start
#                     with less than 25 s left are SKIPPED
# TORCH_BENCH_ONLY    words that select runs (spaces or commas): sweep decode | tp4 tp2 |
#                     torch ctypes | nccl commhal mscclpp. A run is kept when, in every
#                     group the words touch, it matches one of them; the floor ignores the
#                     api and library groups. E.g. "decode", "sweep tp4", "ctypes,commhal"
# TORCH_BENCH_PORT    first torchrun --master-port (default 29600, +10 per run)
#
# Output ($OUT, default ./torch-out):
#   sweep.log, decode.log  every run's output under a header, and its verdict
#   summary.log            one line per run (ok, crashed, failed, timeout, wrong,
#                          SKIPPED; seconds), then the tables
#   tables.md              bench/torch/tables.py's markdown tables
#   results.json.tar       every run's JSON and status.tsv (tables.py reads the tar)
# Exit status: 0 when every NCCL, commhal and floor run that ran ended ok (MSCCL++ runs
# are recorded, not judged); 0 with SKIPPED when torch, 2 GPUs or NCCL are missing.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
G=$PWD/.gpu
OUT=${OUT:-$PWD/torch-out}
mkdir -p "$OUT"
BUDGET=${TORCH_BENCH_BUDGET:-540}
ONLY=" ${TORCH_BENCH_ONLY:-} "
ONLY=${ONLY//,/ }
PORT=${TORCH_BENCH_PORT:-29600}
MIN_RUN=25
LIBS=(nccl commhal mscclpp)
START=$(date +%s)
FAILED=0
SUMMARY=$OUT/summary.log
: >"$SUMMARY"
: >"$OUT/sweep.log"
: >"$OUT/decode.log"
WORK=$(mktemp -d)
JSON=$WORK/json
PIDS=$WORK/pids
mkdir -p "$JSON" "$PIDS"
: >"$JSON/status.tsv"
trap 'rm -rf "$WORK"' EXIT

say() { echo "torch-bench: $*" | tee -a "$SUMMARY"; }
skip_all() {
  say "SKIPPED: $*"
  exit 0
}

for w in $ONLY; do
  case $w in
    sweep | decode | tp4 | tp2 | torch | ctypes | nccl | commhal | mscclpp) ;;
    *) echo "torch-bench: TORCH_BENCH_ONLY: unknown word '$w'" >&2; exit 2 ;;
  esac
done

# env.sh appends to LD_LIBRARY_PATH, which must exist under `set -u`
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
# shellcheck source=scripts/lib-gpu.sh
source scripts/lib-gpu.sh
gpu_env torch-bench
export NCCL_NVLS_ENABLE=0 MSCCLPP_FORCE_DISABLE_NVLS=1
unset COMMHAL_ALLOW_MULTICAST
gpu_use_nvrtc torch-bench # commhal compiles its kernels with NVRTC on first use
export COMMHAL_CACHE_DIR=${COMMHAL_CACHE_DIR:-/tmp/commhal-kernel-cache}
export COMMHAL_BOOTSTRAP_TIMEOUT_MS=${COMMHAL_BOOTSTRAP_TIMEOUT_MS:-60000}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

TORCHRUN=/opt/torch/.venv/bin/torchrun
[[ -x $TORCHRUN ]] || TORCHRUN=$(command -v torchrun) || skip_all "torchrun not found"
read -r NGPU TORCH_VERSION < <(python3 -c 'import torch; print(torch.cuda.device_count(), torch.__version__)' 2>/dev/null)
[[ ${NGPU:-} =~ ^[0-9]+$ ]] || skip_all "python3 cannot import torch"
((NGPU >= 2)) || skip_all "needs 2 GPUs, found $NGPU"
NCCL_DIR=$(python3 -c "import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], 'lib'))" 2>/dev/null)
REAL=$NCCL_DIR/libnccl.so.2
[[ -n $NCCL_DIR && -e $REAL ]] || skip_all "the nvidia-nccl wheel's libnccl.so.2 not found"
# commhal and MSCCL++ hand what they do not implement to the real NCCL
export COMMHAL_NCCL_FALLBACK=$REAL MSCCLPP_NCCL_LIB_PATH=$REAL

COMMHAL_SO=$G/libcommhal_nccl.so
MTAR=$G/mscclpp/mscclpp-0.9.0-sm90-libs.tar.gz
MLIB=
if [[ -f $MTAR ]]; then
  mkdir -p "$WORK/mscclpp"
  if tar -xzf "$MTAR" -C "$WORK/mscclpp" 2>>"$SUMMARY"; then
    so=$(find "$WORK/mscclpp" -name libmscclpp_nccl.so -print -quit)
    [[ -n $so ]] && MLIB=$(dirname "$so")
  fi
fi

say "$NGPU GPU(s); torch $TORCH_VERSION; NCCL $REAL;" \
  "commhal $([[ -f $COMMHAL_SO ]] && echo "$COMMHAL_SO" || echo missing); MSCCL++ ${MLIB:-missing};" \
  "budget ${BUDGET}s; selection '${TORCH_BENCH_ONLY:-all}'; logs in $OUT"

# why LIB cannot run (nothing when it can)
missing_reason() {
  case $1 in
    commhal) [[ -f $COMMHAL_SO ]] || echo "$COMMHAL_SO not carried" ;;
    mscclpp) [[ -n $MLIB ]] || echo "no libmscclpp_nccl.so from $MTAR" ;;
  esac
}

# the library's NCCL-API .so, for --lib
lib_path() {
  case $1 in
    nccl) echo "$REAL" ;;
    commhal) echo "$COMMHAL_SO" ;;
    mscclpp) echo "$MLIB/libmscclpp_nccl.so" ;;
  esac
}

# worker variables that put LIB under torch.distributed (torch links libnccl.so.2; a
# preloaded library exporting the same symbols takes its place)
torch_env() {
  case $1 in
    commhal) echo "LD_PRELOAD=$COMMHAL_SO" ;;
    mscclpp) echo "LD_PRELOAD=$MLIB/libmscclpp_nccl.so LD_LIBRARY_PATH=$MLIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;;
  esac
}

# worker variables for opening LIB through ctypes (MSCCL++'s library needs its siblings)
ctypes_env() {
  case $1 in
    mscclpp) echo "LD_LIBRARY_PATH=$MLIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;;
  esac
}

# chosen GROUP VALUE: false when TORCH_BENCH_ONLY names a word of GROUP but not VALUE
chosen() {
  local w named=0
  for w in $1; do [[ $ONLY == *" $w "* ]] && named=1; done
  ((named == 0)) || [[ $ONLY == *" $2 "* ]]
}

# selected BENCH API LIB TP
selected() {
  chosen "sweep decode" "$1" && chosen "tp4 tp2" "tp$4" &&
    { [[ $2 == none ]] || { chosen "torch ctypes" "$2" && chosen "nccl commhal mscclpp" "$3"; }; }
}

# record NAME BENCH API LIB TP VERDICT SECONDS [NOTE]: status.tsv and summary.log
record() {
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$6" "$7" >>"$JSON/status.tsv"
  printf '%-27s %-22s %4ss %s\n' "$1" "$6" "$7" "${8:-}" | tee -a "$SUMMARY"
}

# verdict RC LOG JSON: ok, timeout, crashed (a fatal signal in a worker; not SIGTERM,
# which torchrun sends the other workers when one fails), wrong (a failed check), failed;
# "-after-results" when the run wrote all its results first (a hang or crash at exit)
verdict() {
  local rc=$1 log=$2 json=$3 v
  if ((rc == 0)); then
    echo ok
    return
  elif ((rc == 124 || rc == 137)); then v=timeout
  elif grep -Eq 'SIGSEGV|SIGABRT|SIGBUS|SIGILL|SIGFPE|Fatal Python error' "$log"; then v=crashed
  elif grep -q '"ok": false' "$json" 2>/dev/null; then v=wrong
  else v=failed; fi
  [[ $v != wrong ]] && grep -q '"complete": true' "$json" 2>/dev/null && v=$v-after-results
  echo "$v"
}

# kill_leftovers: workers still alive after their torchrun ended (torchrun starts each
# in a session of its own, out of `timeout`'s reach); each wrote its pid to $PIDS
kill_leftovers() {
  local f pid
  for f in "$PIDS"/*; do
    [[ -e $f ]] || continue
    pid=${f##*/}
    if kill -0 "$pid" 2>/dev/null; then
      kill -9 "$pid" 2>/dev/null && echo "torch-bench: killed leftover worker $pid"
    fi
    rm -f "$f"
  done
}

# run BENCH API LIB TP LIMIT ENVS SCRIPT ARGS...: SCRIPT under torchrun on TP GPUs, with
# the VAR=value words ENVS set in the workers only, bounded by min(LIMIT, budget left)
run() {
  local bench=$1 api=$2 lib=$3 tp=$4 limit=$5 envs=$6 script=$7
  shift 7
  local name=$bench-$api-$lib-tp$tp
  [[ $api == none ]] && name=$bench-floor-tp$tp
  selected "$bench" "$api" "$lib" "$tp" || return 0
  local why left
  why=$(missing_reason "$lib")
  if [[ -n $why ]]; then
    record "$name" "$bench" "$api" "$lib" "$tp" SKIPPED 0 "($why)"
    return 0
  fi
  left=$((BUDGET - ($(date +%s) - START)))
  if ((left < MIN_RUN)); then
    record "$name" "$bench" "$api" "$lib" "$tp" SKIPPED 0 "(out of time budget)"
    return 0
  fi
  ((limit > left)) && limit=$left
  PORT=$((PORT + 10))
  local log=$WORK/run.log json=$JSON/$name.json t0 rc v
  t0=$(date +%s)
  # shellcheck disable=SC2086 # envs is a list of VAR=value words
  timeout --kill-after=15 "$limit" "$TORCHRUN" --nproc-per-node="$tp" --master-addr=127.0.0.1 \
    --master-port="$PORT" --no-python env TORCH_BENCH_PID_DIR="$PIDS" $envs \
    python3 -u "$script" "$@" --json "$json" >"$log" 2>&1
  rc=$?
  kill_leftovers >>"$log"
  v=$(verdict "$rc" "$log" "$json")
  [[ $v != ok && $lib != mscclpp ]] && FAILED=1
  {
    echo
    echo "################ $name (limit ${limit}s; workers: $envs python3 $script $*)"
    cat "$log"
    echo "################ $name: $v (rc=$rc), $(($(date +%s) - t0))s"
  } >>"$OUT/$bench.log"
  record "$name" "$bench" "$api" "$lib" "$tp" "$v" "$(($(date +%s) - t0))"
}

# TP_SIZES: 4 (with 4 GPUs), then 2
TP_SIZES=()
for TP in 4 2; do
  if ((NGPU >= TP)); then TP_SIZES+=("$TP"); else say "TP $TP: SKIPPED (needs $TP GPUs, found $NGPU)"; fi
done

# ctypes_run BENCH LIB TP: sweep.py (eager, graphs to 1 MiB) or decode.py calling LIB
# through pynccl.py
ctypes_run() {
  local bench=$1 lib=$2 tp=$3 args
  if [[ $bench == sweep ]]; then
    args=(--api ctypes --lib "$(lib_path "$lib")" --label "$lib" --graph-max 1M)
  else
    args=(--comm ctypes --lib "$(lib_path "$lib")" --label "$lib")
  fi
  run "$bench" ctypes "$lib" "$tp" 90 "$(ctypes_env "$lib")" "bench/torch/$bench.py" "${args[@]}"
}

for TP in "${TP_SIZES[@]}"; do
  run decode none none "$TP" 90 "" bench/torch/decode.py --comm none --label none
  for L in "${LIBS[@]}"; do
    run sweep torch "$L" "$TP" 90 "$(torch_env "$L")" bench/torch/sweep.py --api torch --label "$L"
    run decode torch "$L" "$TP" 90 "$(torch_env "$L")" bench/torch/decode.py --comm torch --label "$L"
  done
  for L in nccl commhal; do
    ctypes_run sweep "$L" "$TP"
    ctypes_run decode "$L" "$TP"
  done
done
# MSCCL++ through ctypes last, for both TP sizes: it is the run known to crash, and
# should it hang instead, the budget it eats is nobody else's
for TP in "${TP_SIZES[@]}"; do
  ctypes_run sweep mscclpp "$TP"
  ctypes_run decode mscclpp "$TP"
done

if python3 bench/torch/tables.py "$JSON" >"$OUT/tables.md" 2>>"$SUMMARY"; then
  { echo; cat "$OUT/tables.md"; } >>"$SUMMARY"
else
  say "tables.py failed (the JSON is in results.json.tar)"
fi
tar -cf "$OUT/results.json.tar" -C "$JSON" .
say "done in $(($(date +%s) - START))s; $( ((FAILED)) && echo "some NCCL/commhal/floor runs not ok" || echo "every judged run ok")"
exit "$FAILED"
