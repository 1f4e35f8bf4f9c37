#!/usr/bin/env bash
# Builds attnserve (CPU + CUDA compile when nvcc is present) and runs the whole test suite:
# the C++ tests (ctest) and the Python tests (pytest). Ends with one 'N passed, N failed' line.
# Environment: BUILD_DIR (default build), JOBS, ATTNSERVE_CUDA (AUTO), ATTNSERVE_CUDA_ARCHS (CMake's
# default "80;90"; CI passes "80;90a": each kernel compiled once, for its lowest target).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

BUILD=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DATTNSERVE_CUDA=${ATTNSERVE_CUDA:-AUTO} \
  ${ATTNSERVE_CUDA_ARCHS:+-DATTNSERVE_CUDA_ARCHS=$ATTNSERVE_CUDA_ARCHS} >/dev/null
cmake --build "$BUILD" -j "$JOBS"

set +e
ctest --test-dir "$BUILD" -L cpu -j "$JOBS" --output-on-failure 2>&1 | tee "$BUILD/ctest.log"
cpp_rc=${PIPESTATUS[0]}
set -e
cpp_total=$(grep -Eo 'out of [0-9]+' "$BUILD/ctest.log" | tail -1 | grep -Eo '[0-9]+' || echo 0)
cpp_failed=$(grep -Eo '[0-9]+ tests failed' "$BUILD/ctest.log" | tail -1 | grep -Eo '^[0-9]+' || echo 0)

py_passed=0; py_failed=0; py_rc=0
if [ -d tests/python ] && ls tests/python/test_*.py >/dev/null 2>&1; then
  scripts/build_python.sh
  set +e
  PYTHONPATH="$PWD/python:${PYTHONPATH:-}" python3 -m pytest -q tests/python 2>&1 | tee "$BUILD/pytest.log"
  py_rc=${PIPESTATUS[0]}
  set -e
  py_passed=$(grep -Eo '[0-9]+ passed' "$BUILD/pytest.log" | tail -1 | grep -Eo '[0-9]+' || echo 0)
  py_failed=$(grep -Eo '[0-9]+ failed' "$BUILD/pytest.log" | tail -1 | grep -Eo '[0-9]+' || echo 0)
fi

passed=$(( cpp_total - cpp_failed + py_passed ))
failed=$(( cpp_failed + py_failed ))
echo "attnserve tests: C++ $((cpp_total - cpp_failed))/$cpp_total, Python $py_passed passed $py_failed failed"
echo "$passed passed, $failed failed"
[ "$cpp_rc" -eq 0 ] && [ "$py_rc" -eq 0 ] && [ "$cpp_total" -gt 0 ]
