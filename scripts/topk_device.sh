#!/usr/bin/env bash
# One device call for the top-k kernels (issue 16): build attnserve_gpu_tests + bench_topk for sm_90 only,
# the TopkGpu tests, bench_topk, compute-sanitizer memcheck / racecheck on a few TopkGpu tests, and ncu
# (full set, source counters: the hottest SASS lines via scripts/ncu_hot.py) on one case. Every step
# under a timeout; logs in /tmp/tk, the kept ones copied to $OUT (at most 8 files).
#   DEPS=<.device/deps> OUT=<dir> ATTNSERVE_COMMIT=<sha> scripts/topk_device.sh
#   NCU_FILTER  bench_topk case for ncu (default: the 8192 x 4K prefill rows); NCU=0 skips it
#   BENCH_FILTER  bench_topk's name filter (one substring, e.g. 's7 A/B'; default: every case)
#   BENCH_QUICK=1  bench_topk --quick (8 timed calls a case instead of 30)
#   MEMCHECK_FILTER, RACECHECK_FILTER  the sanitizer runs' TopkGpu tests; SAN_TIMEOUT seconds each (25)
set -u
L=/tmp/tk
mkdir -p "$L" "$OUT"
t0=$(date +%s)
ts() { echo "[$(($(date +%s) - t0)) s] $*" | tee -a "$L/run.log"; }
echo "== topk device run  commit ${ATTNSERVE_COMMIT:-?}  $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)  $(date -u +%FT%TZ)" | tee "$L/run.log"
save() { cp "$L/run.log" "$OUT/" 2>/dev/null; for f in "$@"; do [ -f "$L/$f" ] && cp "$L/$f" "$OUT/"; done; }
EXTRA=()
if [ ! -f /usr/include/gtest/gtest.h ] && [ ! -f /usr/local/include/gtest/gtest.h ]; then
  cmake -S "$DEPS/googletest" -B /tmp/gtest-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF \
    -DCMAKE_INSTALL_PREFIX=/tmp/deps -DCMAKE_POSITION_INDEPENDENT_CODE=ON >/dev/null &&
    cmake --build /tmp/gtest-build -j 16 >/dev/null && cmake --install /tmp/gtest-build >/dev/null
  EXTRA+=(-DCMAKE_PREFIX_PATH=/tmp/deps)
fi
[ -f /usr/include/dlpack/dlpack.h ] || EXTRA+=(-DDLPACK_INCLUDE_DIR="$DEPS")
[ -f "$DEPS/cutlass/include/cute/tensor.hpp" ] && EXTRA+=(-DATTNSERVE_CUTLASS_DIR="$DEPS/cutlass/include")
ts "gtest ready"
B=/tmp/bt
if ! { cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNSERVE_CUDA=ON -DATTNSERVE_CUDA_ARCHS=90 \
  -DATTNSERVE_BENCH=ON -DATTNSERVE_BENCH_CUDA_ARCHS=90 "${EXTRA[@]}" >"$L/build.log" 2>&1 &&
  timeout 240 cmake --build $B -j 16 --target attnserve_gpu_tests bench_topk >>"$L/build.log" 2>&1; }; then
  ts "build FAILED"; tail -c 6000 "$L/build.log"; save build.log; exit 1
fi
ts "build rc 0"
BENCH_BIN=$(find $B -name bench_topk -type f -perm -u+x | head -1)
timeout 40 $B/attnserve_gpu_tests --gtest_filter='TopkGpu*' >"$L/gpu_tests.log" 2>&1
ts "gpu tests rc $? ($(grep -c '^\[       OK' "$L/gpu_tests.log") OK, $(grep -c '^\[  FAILED' "$L/gpu_tests.log") FAILED lines)"
grep -E "^\[  FAILED|Failure|error" "$L/gpu_tests.log" | head -20
save gpu_tests.log
BARGS=(); [ "${BENCH_QUICK:-0}" = 1 ] && BARGS=(--quick)
[ -n "${BENCH_FILTER:-}" ] && BARGS+=("$BENCH_FILTER")
timeout 120 "$BENCH_BIN" "${BARGS[@]}" >"$L/bench.log" 2>&1
ts "bench rc $?"
save gpu_tests.log bench.log
MEM=${MEMCHECK_FILTER:-'TopkGpu.ClusterGatherOverflowGoesToTheFallback:TopkGpu.EmitStagedAndDirectAtEveryOutputAlignment:TopkGpu.GraphReplayEqualsEager'}
ATTNSERVE_SEED=1 timeout "${SAN_TIMEOUT:-25}" compute-sanitizer --tool memcheck --error-exitcode 9 $B/attnserve_gpu_tests --gtest_filter="$MEM" >"$L/memcheck.log" 2>&1
ts "memcheck rc $? $(grep -E 'ERROR SUMMARY' "$L/memcheck.log" | tail -1) $(grep -E '^\[  PASSED|^\[  FAILED' "$L/memcheck.log" | tail -1)"
RACE=${RACECHECK_FILTER:-'TopkGpu.ClusterGatherOverflowGoesToTheFallback:TopkGpu.WholeRowRegimeNaNAndTiesAtTheThreshold'}
ATTNSERVE_SEED=1 timeout "${SAN_TIMEOUT:-25}" compute-sanitizer --tool racecheck --error-exitcode 9 $B/attnserve_gpu_tests --gtest_filter="$RACE" >"$L/racecheck.log" 2>&1
ts "racecheck rc $? $(grep -E 'RACECHECK SUMMARY' "$L/racecheck.log" | tail -1) $(grep -E '^\[  PASSED|^\[  FAILED' "$L/racecheck.log" | tail -1)"
save gpu_tests.log bench.log memcheck.log racecheck.log
if [ "${NCU:-1}" = 1 ] && command -v ncu >/dev/null; then
  timeout 30 ncu --clock-control none -k regex:topk_sampled_kernel -c 1 --set full --import-source yes -o /tmp/rep -f \
    "$BENCH_BIN" "${NCU_FILTER:-topk 2048 of 4K x 8192 rows normal}" >"$L/ncu_run.log" 2>&1
  ts "ncu rc $?"
  { ncu -i /tmp/rep.ncu-rep --page details; } >"$L/ncu.txt" 2>&1
  ncu -i /tmp/rep.ncu-rep --page source --csv --print-source sass >/tmp/src.csv 2>/dev/null &&
    python3 scripts/ncu_hot.py /tmp/src.csv 45 >>"$L/ncu.txt" 2>&1
  ts "ncu report done"
fi
save gpu_tests.log bench.log memcheck.log racecheck.log ncu.txt
grep -E "topk|empty" "$L/bench.log" | head -120
