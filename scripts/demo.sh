#!/usr/bin/env bash
# Builds attnserve and runs the main job (the demo). Arguments pass through to attnserve_demo.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD=${BUILD_DIR:-build}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DATTNSERVE_CUDA=${ATTNSERVE_CUDA:-AUTO} >/dev/null
cmake --build "$BUILD" -j "${JOBS:-$(nproc)}" --target attnserve_demo
exec "$BUILD/attnserve_demo" "$@"
