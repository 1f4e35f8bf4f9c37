#!/usr/bin/env bash
# Prepares .device/deps (ignored by git) for a GPU machine that has no network and no GoogleTest or
# DLPack headers: the GoogleTest sources (Debian's googletest package), dlpack/dlpack.h and the
# CUTLASS/CuTe headers of the pinned nvidia-cutlass wheel (cutlass/include: cute/ and cutlass/).
# Then, on the GPU machine:  DEPS=$PWD/.device/deps scripts/gpu_check.sh   (carry .device)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
[ -d /usr/src/googletest ] || { apt-get install -y -qq googletest >/dev/null; }
rm -rf .device/deps && mkdir -p .device/deps/dlpack
cp -r /usr/src/googletest .device/deps/googletest
cp /usr/include/dlpack/dlpack.h .device/deps/dlpack/
cutlass_include=$(${PYTHON:-python3} scripts/cutlass_include_dir.py) ||
  { echo "nvidia-cutlass not installed (scripts/setup.sh installs it)"; exit 1; }
mkdir -p .device/deps/cutlass/include
cp -r "$cutlass_include/cute" "$cutlass_include/cutlass" .device/deps/cutlass/include/
du -sh .device/deps
