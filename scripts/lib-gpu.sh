#!/usr/bin/env bash
# lib-gpu.sh — shared by scripts/gpu-check.sh, scripts/gpu-bench.sh and the one-off
# device scripts (source it from the repo root; it defines functions and runs nothing by
# itself).
#
#   gpu_env WHO        source .gpu/env.sh (multicast off, NCCL, CUDA libs), or keep
#                      NVLink multicast off by hand when it is missing
#   gpu_use_nvrtc WHO  find NVRTC 13 (find_nvrtc) and export COMMHAL_NVRTC_DIR and
#                      LD_LIBRARY_PATH for the kernel JIT, or warn that the JIT will fail
#   find_nvrtc         print the first directory holding libnvrtc.so.13
#   gpu_begin WHO BUDGET
#                      the start of a one-off device script (an A/B or a closing run
#                      written for one GPU run): gpu_env, multicast off, NVRTC, the
#                      kernel cache and bootstrap timeout, W=$OUT, the clock for gpu_step
#   gpu_step LOG LIMIT "VAR=v ..." CMD...
#                      run CMD with those variables under LIMIT seconds, appending a
#                      header, its output and its exit status to $W/LOG; skipped (and
#                      said so) when it could end past gpu_begin's BUDGET seconds

# shellcheck shell=bash

gpu_env() {
  local who=$1
  if [[ -f .gpu/env.sh ]]; then
    # shellcheck disable=SC1091
    source .gpu/env.sh || true
  else
    echo "$who: .gpu/env.sh missing; keeping NVLink multicast off by hand" >&2
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MSCCLPP_FORCE_DISABLE_NVLS=1
    unset COMMHAL_ALLOW_MULTICAST
  fi
}

# NVRTC 13 (libnvrtc.so.13), the first directory holding it wins: COMMHAL_NVRTC_DIR, the
# CUDA install, scripts/install-nvrtc.sh's .cache/nvrtc, the Python wheel
# nvidia-cuda-nvrtc (under the `nvidia` package or any sys.path entry), ldconfig.
find_nvrtc() {
  local d
  local candidates=("${COMMHAL_NVRTC_DIR:-}" /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-13*/lib64 .cache/nvrtc/nvidia/cu13/lib)
  local py
  py=$(python3 - 2>/dev/null <<'EOF'
import os, sys
roots = []
try:
    import nvidia
    roots += list(nvidia.__path__)
except Exception:
    pass
for p in sys.path:
    roots.append(os.path.join(p, "nvidia"))
seen = set()
for r in roots:
    if not os.path.isdir(r) or r in seen:
        continue
    seen.add(r)
    for dirpath, _, files in os.walk(r):
        if "libnvrtc.so.13" in files:
            print(dirpath)
EOF
)
  while IFS= read -r d; do candidates+=("$d"); done <<<"$py"
  for d in "${candidates[@]}"; do
    [[ -n $d && -e $d/libnvrtc.so.13 ]] && { echo "$d"; return 0; }
  done
  local l
  l=$(ldconfig -p 2>/dev/null | awk '/libnvrtc\.so\.13 /{print $NF; exit}')
  [[ -n $l ]] && { dirname "$l"; return 0; }
  return 1
}

gpu_use_nvrtc() {
  local who=$1
  if NVRTC_DIR=$(find_nvrtc); then
    export COMMHAL_NVRTC_DIR=$NVRTC_DIR
    export LD_LIBRARY_PATH=$NVRTC_DIR:${LD_LIBRARY_PATH:-}
    echo "$who: NVRTC from $NVRTC_DIR"
  else
    echo "$who: libnvrtc.so.13 not found (CUDA 13 install or pip nvidia-cuda-nvrtc); the kernel JIT will fail" >&2
  fi
}

gpu_begin() {
  local who=$1
  GPU_RUN_BUDGET=$2
  OUT=${OUT:-/tmp/out}
  W=$OUT
  gpu_env "$who"
  export NCCL_NVLS_ENABLE=0
  unset COMMHAL_ALLOW_MULTICAST
  gpu_use_nvrtc "$who"
  export COMMHAL_CACHE_DIR=/tmp/commhal-kernel-cache COMMHAL_BOOTSTRAP_TIMEOUT_MS=60000
  GPU_RUN_T0=$(date +%s)
}

gpu_step() {
  local log=$1 limit=$2 envs=$3 rc
  shift 3
  if (($(date +%s) - GPU_RUN_T0 > GPU_RUN_BUDGET - limit)); then
    echo "#### SKIPPED (time) $*" >>"$W/$log"
    return
  fi
  echo "#### $* (env: $envs)" >>"$W/$log"
  # shellcheck disable=SC2086 # envs is a list of VAR=value words
  env $envs timeout --kill-after=5 "$limit" "$@" >>"$W/$log" 2>&1
  rc=$?
  echo "#### rc=$rc t=$(($(date +%s) - GPU_RUN_T0))s" >>"$W/$log"
}

