#!/usr/bin/env bash
# Install NVRTC (CUDA 13.0) from PyPI into a project-local directory, so CI can
# compile the device sources without a CUDA toolkit, driver or GPU.
#
# Usage:  scripts/install-nvrtc.sh [DEST]        (DEST defaults to .cache/nvrtc)
#         export LD_LIBRARY_PATH="$(scripts/install-nvrtc.sh):$LD_LIBRARY_PATH"
#   or    export COMMHAL_NVRTC_DIR="$(scripts/install-nvrtc.sh)"
# Prints exactly one line on stdout: the directory holding libnvrtc.so.13 and
# libnvrtc-builtins.so.13.0. Progress goes to stderr. Re-running is a no-op when the
# pinned version is already there. Override the pin with NVRTC_WHEEL_VERSION.
set -euo pipefail

VERSION="${NVRTC_WHEEL_VERSION:-13.0.88}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${1:-$ROOT/.cache/nvrtc}"
LIBDIR="$DEST/nvidia/cu13/lib"
STAMP="$DEST/.installed-$VERSION"

if [[ ! -f "$STAMP" || ! -e "$LIBDIR/libnvrtc.so.13" ]]; then
  PY="${PYTHON:-python3}"
  command -v "$PY" >/dev/null || { echo "install-nvrtc: $PY not found (set PYTHON)" >&2; exit 1; }
  echo "install-nvrtc: installing nvidia-cuda-nvrtc==$VERSION into $DEST" >&2
  if [[ -d "$DEST" ]] && [[ -n "$(ls -A "$DEST")" ]]; then
    # Only ever replace a directory this script made.
    compgen -G "$DEST/.installed-*" >/dev/null || {
      echo "install-nvrtc: $DEST exists and was not made by this script; refusing to replace it" >&2
      exit 1
    }
    rm -rf "$DEST"
  fi
  mkdir -p "$DEST"
  "$PY" -m pip install --quiet --disable-pip-version-check --no-deps \
    --target "$DEST" "nvidia-cuda-nvrtc==$VERSION" >&2
  touch "$STAMP"
fi

for f in libnvrtc.so.13 libnvrtc-builtins.so.13.0; do
  [[ -e "$LIBDIR/$f" ]] || { echo "install-nvrtc: $LIBDIR/$f missing after install" >&2; exit 1; }
done
# Unversioned name too, for tools that dlopen("libnvrtc.so").
ln -sf libnvrtc.so.13 "$LIBDIR/libnvrtc.so"
echo "$LIBDIR"
