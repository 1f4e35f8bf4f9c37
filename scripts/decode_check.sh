#!/usr/bin/env bash
# Decode work in one device call (the budget is seconds): build the GPU tests and bench_attention for
# the H200 alone (sm_90 + sm_90a), run the decode/verify tests (the portable kernel's suites, CUDA-graph
# replays, the dense backends and plans), the decode benchmark cases, and, if time is left, one ncu
# profile. Each step has its own time limit; logs go to $OUT.
#
# Environment: OUT (logs), DEPS (googletest/, dlpack/, cutlass/include as for gpu_check.sh),
#   TESTS_FILTER, BENCH_FILTER (bench_attention's filter: substrings joined by '|', '^' = prefix),
#   NCU_CASES (bench case names to profile, ';'-separated; empty: none), DEADLINE_S (skip later
#   steps past it, seconds since the start).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/decode}
BUILD=${BUILD_DIR:-/tmp/build-h200}  # outside the carried tree: kept while the machine stays warm
DEADLINE_S=${DEADLINE_S:-170}
mkdir -p "$OUT"
exec > >(tee "$OUT/decode_check.log") 2>&1
echo "== decode_check  $(date -u +%FT%TZ)  commit ${ATTNSERVE_COMMIT:-unknown}  $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | head -1)"

EXTRA=()
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
if [ ! -f /usr/include/gtest/gtest.h ] && [ -n "${DEPS:-}" ] && [ -d "$DEPS/googletest" ]; then
  cmake -S "$DEPS/googletest" -B /tmp/gtest-build "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF \
    -DCMAKE_INSTALL_PREFIX=/tmp/deps -DCMAKE_POSITION_INDEPENDENT_CODE=ON >/dev/null &&
    cmake --build /tmp/gtest-build -j "$(nproc)" >/dev/null && cmake --install /tmp/gtest-build >/dev/null
  EXTRA+=(-DCMAKE_PREFIX_PATH=/tmp/deps)
fi
[ -n "${DEPS:-}" ] && [ -f "$DEPS/dlpack/dlpack.h" ] && EXTRA+=(-DDLPACK_INCLUDE_DIR="$DEPS")
[ -n "${DEPS:-}" ] && [ -f "$DEPS/cutlass/include/cute/tensor.hpp" ] && EXTRA+=(-DATTNSERVE_CUTLASS_DIR="$DEPS/cutlass/include")

t0=$SECONDS
cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DATTNSERVE_CUDA=ON -DATTNSERVE_CUDA_ARCHS=90 \
  -DATTNSERVE_BENCH=ON -DATTNSERVE_BENCH_CUDA_ARCHS=90 -DATTNSERVE_DEMO=OFF "${EXTRA[@]}" >"$OUT/configure.log" 2>&1 &&
  cmake --build "$BUILD" -j "$(nproc)" --target attnserve_gpu_tests bench_attention >"$OUT/build.log" 2>&1
echo "== build rc $? in $((SECONDS - t0)) s"
grep -E "error" "$OUT/build.log" | head -20

FILTER=${TESTS_FILTER:-'GpuAttention.*:GpuGraph.*:GpuGraphPlanner.*:PlanGpu.Dense*:PlanGpu.GraphReplay*:BackendGpu.Dense*:GpuMerge.*'}
t0=$SECONDS
timeout 60 "$BUILD/attnserve_gpu_tests" --gtest_filter="$FILTER" >"$OUT/gpu_tests.log" 2>&1
echo "== gpu tests rc $? in $((SECONDS - t0)) s"
grep -E '^\[ +(OK|FAILED|SKIPPED|PASSED) +\]' "$OUT/gpu_tests.log" | grep -v "listed below" | tail -60
grep -B2 -A6 -E "Failure" "$OUT/gpu_tests.log" | head -40

if [ $SECONDS -lt "$DEADLINE_S" ]; then
  t0=$SECONDS
  timeout $((DEADLINE_S - SECONDS + 5)) "$BUILD/bench/bench_attention" "${BENCH_FILTER:-^decode|^verify|^sweep decode|^ab |^same|^ctx|^page|^repeat}" \
    >"$OUT/bench.log" 2>&1
  echo "== bench rc $? in $((SECONDS - t0)) s"
  cut -c1-150 "$OUT/bench.log"
fi
# NCU_CASES: bench case names separated by ';', one ncu run each (the 4th launch of its kernel).
IFS=';' read -r -a ncu_cases <<<"${NCU_CASES:-}"
n=0
for c in "${ncu_cases[@]}"; do
  [ -z "$c" ] && continue
  n=$((n + 1))
  if [ $SECONDS -ge $((DEADLINE_S - 12)) ] || ! command -v ncu >/dev/null; then echo "== ncu $n skipped (time or no ncu)"; continue; fi
  t0=$SECONDS
  timeout $((DEADLINE_S - SECONDS)) ncu --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
    --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis -k regex:paged_attention \
    --launch-skip 3 --launch-count 1 "$BUILD/bench/bench_attention" "^$c" >"$OUT/ncu_$n.txt" 2>&1
  echo "== ncu $n ($c) rc $? in $((SECONDS - t0)) s"
  grep -E "DRAM Throughput|Memory Throughput|Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|No Eligible|Eligible Warps|Warp Cycles Per Issued|Theoretical Occupancy" "$OUT/ncu_$n.txt" | head -14
done
echo "== total $SECONDS s"
