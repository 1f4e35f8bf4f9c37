#!/usr/bin/env bash
# Installs what attnserve needs on a fresh Debian machine (idempotent: skips what is there).
#   Debian: cmake, g++, GoogleTest, Google Benchmark, DLPack headers.
#   PyPI (pinned in python/requirements-dev.txt): nanobind, scikit-build-core, numpy, ml_dtypes, pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v cmake >/dev/null || need_apt+=(cmake)
command -v g++ >/dev/null || need_apt+=(g++)
[ -f /usr/include/gtest/gtest.h ] || need_apt+=(libgtest-dev)
[ -f /usr/include/benchmark/benchmark.h ] || need_apt+=(libbenchmark-dev)
[ -f /usr/include/dlpack/dlpack.h ] || need_apt+=(libdlpack-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "[setup] apt-get install ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if ! $PY -c "import nanobind, numpy, ml_dtypes, pytest, scikit_build_core" 2>/dev/null; then
  echo "[setup] pip install -r python/requirements-dev.txt"
  $PY -m pip install -q --disable-pip-version-check --root-user-action=ignore -r python/requirements-dev.txt
fi
