#!/usr/bin/env bash
# Builds attnserve and runs the main job (the demo). Arguments pass through to attnserve_demo.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# With a GPU: a CUDA build. Without one (even where nvcc is installed): a CPU-only build, which is
# all the demo can use there and compiles in a fraction of the time.
if [ -z "${ATTNSERVE_CUDA:-}" ]; then
  if nvidia-smi -L >/dev/null 2>&1; then ATTNSERVE_CUDA=AUTO; else ATTNSERVE_CUDA=OFF; fi
fi
BUILD=${BUILD_DIR:-build-demo-$( [ "$ATTNSERVE_CUDA" = OFF ] && echo cpu || echo cuda )}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DATTNSERVE_CUDA=$ATTNSERVE_CUDA -DATTNSERVE_TESTS=OFF >/dev/null
cmake --build "$BUILD" -j "${JOBS:-$(nproc)}" --target attnserve_demo
exec "$BUILD/attnserve_demo" "$@"
