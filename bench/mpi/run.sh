#!/usr/bin/env bash
# Side by side on this machine: Open MPI (Debian's 4.1.4) MPI_Allreduce and
# `commhal bench allreduce` on host-emu, f32 sum, same sizes, same rank counts.
#   bench/mpi/run.sh [RANKS...]        (default: 2 8)
# Installs Debian's openmpi packages if mpicc is missing (needs root and apt).
set -euo pipefail
cd "$(dirname "$0")/../.."
ranks=("$@"); [ ${#ranks[@]} -gt 0 ] || ranks=(2 8)
if ! command -v mpicc >/dev/null; then
  echo "installing Debian's Open MPI (libopenmpi-dev, openmpi-bin)..." >&2
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libopenmpi-dev openmpi-bin >/dev/null
fi
mkdir -p target/mpi
mpicc -O2 -o target/mpi/allreduce bench/mpi/allreduce.c
cargo build --release -q -p commhal-cli
MIN=${MIN:-1024} MAX=${MAX:-67108864} FACTOR=${FACTOR:-4} ITERS=${ITERS:-20} WARM=${WARM:-3}
for n in "${ranks[@]}"; do
  echo "=== $n ranks ==="
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun --oversubscribe --bind-to none -np "$n" target/mpi/allreduce "$MIN" "$MAX" "$FACTOR" "$ITERS" "$WARM"
  target/release/commhal launch -n "$n" --no-prefix -- target/release/commhal bench allreduce \
    -b "$MIN" -e "$MAX" -f "$FACTOR" -n "$ITERS" -w "$WARM" -d float -o sum 2>/dev/null | grep -v '^$' || true
done
