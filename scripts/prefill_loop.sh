#!/usr/bin/env bash
# Device loop for the Hopper prefill work, sized for one short device call: configure and build for
# sm_90 alone (the H200 runs the sm_90 code of the portable kernels anyway; their sm_80 copy would
# double that part of the build), the GPU test suites of GTEST_FILTER (one process per suite, each
# under SUITE_TIMEOUT), the prefill and extend cases of bench_attention, and optionally one ncu
# profile of the ping-pong kernel. Logs under $OUT: prefill_loop.log (everything), gpu_tests.log,
# bench_prefill.log, bench_extend.log (+ build.log on failure, ncu*.txt with NCU=1).
#   DEPS          googletest/ (source), dlpack/, cutlass/include (scripts/prepare_device_deps.sh)
#   GTEST_FILTER  default 'GpuAttentionSm90.*:WgmmaSm90.*:GpuAttention.*'
#   SUITE_TIMEOUT, BENCH_TIMEOUT  seconds per suite / bench run (45, 60): a hung kernel (a deadlocked
#                 pipeline, a setmaxnreg split past the launch's registers) costs only that much
#   NCU=1         also profile NCU_KERNEL (regex, default attention_sm90_ws) in NCU_CASE
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?}"
B=${BUILD_DIR:-build-gpu}
JOBS=$(nproc)
exec > >(tee "$OUT/prefill_loop.log") 2>&1
echo "== prefill_loop  $(date -u +%FT%TZ)  commit ${ATTNSERVE_COMMIT:-?}  $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | head -1)"
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
grep -E "spill" "$OUT/build.log" | grep -v " 0 bytes spill" | head -5
rm -f "$OUT/build.log"

# Tests: one process per suite.
t1=$(date +%s)
T=$B/attnserve_gpu_tests
: >"$OUT/gpu_tests.log"
for suite in $("$T" --gtest_filter="${GTEST_FILTER:-GpuAttentionSm90.*:WgmmaSm90.*:GpuAttention.*}" --gtest_list_tests |
  awk '/^[^ ]/{print $1}' | sed 's/\.$//'); do
  filter=$(echo "${GTEST_FILTER:-GpuAttentionSm90.*:WgmmaSm90.*:GpuAttention.*}" | tr ':' '\n' | grep "^$suite\." | paste -sd: -)
  timeout "${SUITE_TIMEOUT:-45}" "$T" --gtest_filter="$filter" >>"$OUT/gpu_tests.log" 2>&1 || echo "  suite $suite: rc $?"
done
echo "== tests $(($(date +%s) - t1)) s: $(grep -c '^\[       OK \]' "$OUT/gpu_tests.log") ok, $(grep -cE "^\[  FAILED  \] [A-Za-z].*ms\)$" "$OUT/gpu_tests.log") failed"
grep -E '^\[  FAILED  \] [A-Z]' "$OUT/gpu_tests.log"
grep -B2 -A6 -E "Failure" "$OUT/gpu_tests.log" | head -40

# Benches (prefill cases, then extend cases; each run starts with the copy ceiling).
t2=$(date +%s)
timeout "${BENCH_TIMEOUT:-60}" "$B/bench/bench_attention" prefill >"$OUT/bench_prefill.log" 2>&1 || echo "  bench prefill: rc $?"
timeout "${BENCH_TIMEOUT:-60}" "$B/bench/bench_attention" extend >"$OUT/bench_extend.log" 2>&1 || echo "  bench extend: rc $?"
echo "== benches $(($(date +%s) - t2)) s"
cat "$OUT/bench_prefill.log" "$OUT/bench_extend.log" | grep -E "^(device|copy|prefill|extend)" | cut -c1-150

if [ "${NCU:-0}" = 1 ]; then
  timeout 90 ncu --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
    --section SchedulerStats --section InstructionStats --section SourceCounters --import-source no \
    -k "regex:${NCU_KERNEL:-attention_sm90_ws}" --launch-skip 2 --launch-count 1 -o /tmp/prof -f \
    "$B/bench/bench_attention" "${NCU_CASE:-prefill b1 s8K hq32 hkv8 d128 causal sm90pp}" >/tmp/ncu_run.txt 2>&1
  ncu -i /tmp/prof.ncu-rep --page details --print-details all >"$OUT/ncu.txt" 2>&1
  ncu -i /tmp/prof.ncu-rep --page source --csv --print-source sass >/tmp/src.csv 2>&1
  python3 scripts/ncu_hot.py /tmp/src.csv 60 >"$OUT/ncu_hot.txt" 2>&1
  grep -E "Duration|Issue Slots|Eligible Warps|highest-utilized|Executed Instructions  |Warp Cycles Per Issued|Registers" "$OUT/ncu.txt" | head -20
fi
echo "== total $(($(date +%s) - t0)) s"
true
