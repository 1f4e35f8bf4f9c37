#!/usr/bin/env bash
# Device loop for the FP8 prefill work (issue 13 deliverable 3), sized for one short device call:
# configure and build for sm_90 alone (attnserve_gpu_tests, bench_attention), the GPU tests of
# GTEST_FILTER (one process per suite, each under SUITE_TIMEOUT), and bench_attention's cases whose
# name contains BENCH_FILTER (default "fp8ab": FP8 and bf16 ping-pong side by side).
# Logs under $OUT: fp8_loop.log (everything), gpu_tests.log, bench.log (+ build.log on failure).
#   DEPS          googletest/ (source), dlpack/, cutlass/include (scripts/prepare_device_deps.sh)
#   GTEST_FILTER  default 'GpuAttentionFp8.*'
#   SUITE_TIMEOUT, BENCH_TIMEOUT  seconds per suite / bench run (60, 60): a hang costs only that much
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?}"
B=${BUILD_DIR:-build-gpu}
JOBS=$(nproc)
FILTER=${GTEST_FILTER:-GpuAttentionFp8.*}
exec > >(tee "$OUT/fp8_loop.log") 2>&1
echo "== fp8_loop  $(date -u +%FT%TZ)  commit ${ATTNSERVE_COMMIT:-?}  $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | head -1)"
t0=$(date +%s)
EXTRA=()
if [ ! -f /usr/include/gtest/gtest.h ] && [ -n "${DEPS:-}" ]; then
  cmake -S "$DEPS/googletest" -B /tmp/gtest-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF \
    -DCMAKE_INSTALL_PREFIX=/tmp/deps -DCMAKE_POSITION_INDEPENDENT_CODE=ON >/dev/null &&
    cmake --build /tmp/gtest-build -j "$JOBS" >/dev/null && cmake --install /tmp/gtest-build >/dev/null
  EXTRA+=(-DCMAKE_PREFIX_PATH=/tmp/deps)
fi
[ -n "${DEPS:-}" ] && [ -f "$DEPS/dlpack/dlpack.h" ] && EXTRA+=(-DDLPACK_INCLUDE_DIR="$DEPS")
[ -n "${DEPS:-}" ] && [ -f "$DEPS/cutlass/include/cute/tensor.hpp" ] && EXTRA+=(-DATTNSERVE_CUTLASS_DIR="$DEPS/cutlass/include")
if ! { cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNSERVE_CUDA=ON -DATTNSERVE_CUDA_ARCHS=90 \
         -DATTNSERVE_BENCH=ON -DATTNSERVE_BENCH_CUDA_ARCHS=90 -DATTNSERVE_DEMO=OFF "${EXTRA[@]}" >"$OUT/build.log" 2>&1 &&
       cmake --build "$B" -j "$JOBS" --target attnserve_gpu_tests bench_attention >>"$OUT/build.log" 2>&1; }; then
  echo "== build FAILED"; grep -E -m 30 "error|FAILED" "$OUT/build.log"; exit 1
fi
echo "== build $(($(date +%s) - t0)) s"
grep -E "C7520|C7508" "$OUT/build.log" | head -5
grep -A2 "attention_sm90_fp8_kernel" "$OUT/build.log" | grep -E "registers|spill" | head -4
rm -f "$OUT/build.log"

t1=$(date +%s)
T=$B/attnserve_gpu_tests
: >"$OUT/gpu_tests.log"
for suite in $("$T" --gtest_filter="$FILTER" --gtest_list_tests | awk '/^[^ ]/{print $1}' | sed 's/\.$//'); do
  filter=$(echo "$FILTER" | tr ':' '\n' | grep "^$suite\." | paste -sd: -)
  timeout "${SUITE_TIMEOUT:-60}" "$T" --gtest_filter="$filter" >>"$OUT/gpu_tests.log" 2>&1 || echo "  suite $suite: rc $?"
done
echo "== tests $(($(date +%s) - t1)) s: $(grep -c '^\[       OK \]' "$OUT/gpu_tests.log") ok, $(grep -cE "^\[  FAILED  \] [A-Za-z].*ms\)$" "$OUT/gpu_tests.log") failed"
grep -E '^\[  FAILED  \] [A-Z]' "$OUT/gpu_tests.log"
grep -B2 -A6 -E "Failure" "$OUT/gpu_tests.log" | head -60

t2=$(date +%s)
timeout "${BENCH_TIMEOUT:-60}" "$B/bench/bench_attention" "${BENCH_FILTER:-fp8ab}" >"$OUT/bench.log" 2>&1 || echo "  bench: rc $?"
echo "== bench $(($(date +%s) - t2)) s"
grep -E "^(device|copy|prefill|extend)" "$OUT/bench.log" | cut -c1-150
echo "== total $(($(date +%s) - t0)) s"
true
