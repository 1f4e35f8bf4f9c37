#!/usr/bin/env bash
# Builds the Python extension in the main build tree and drops it into python/attnserve/
# (use with PYTHONPATH=python). `pip install .` builds the same through scikit-build-core.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
cmake -S . -B "$BUILD" -DATTNSERVE_PYTHON=ON -DATTNSERVE_CUDA="${ATTNSERVE_CUDA:-AUTO}" \
  -DPython_EXECUTABLE="$(command -v python3)" >/dev/null
cmake --build "$BUILD" -j "${JOBS:-$(nproc)}" --target _attnserve _attnserve_stub
