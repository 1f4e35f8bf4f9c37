#!/usr/bin/env bash
# Device loop for the Hopper lightning-indexer work, sized for one short device call (prefill_loop.sh's
# shape): build for sm_90 alone, the Indexer GPU suites, bench_indexer's ragged 8K and paged next_n 2 / 4
# cases (every ws overlap mode), ncu of the ws ragged kernel in mode 0 (and in NCU_MODE2, default: the
# fastest mode of the 8K bench), racecheck on one test. Logs under $OUT: indexer_loop.log (everything),
# gpu_tests.log, bench_ragged.log, bench_paged.log, ncu_mode<m>.txt, ncu_hot_mode0.txt, racecheck.log.
#   DEPS          googletest/ (source), dlpack/, cutlass/include (scripts/prepare_device_deps.sh)
#   GTEST_FILTER  default '*Indexer*'
#   SUITE_TIMEOUT seconds per suite (30): a hung kernel costs only that much
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?}"
B=${BUILD_DIR:-build-gpu}
JOBS=$(nproc)
exec > >(tee "$OUT/indexer_loop.log") 2>&1
echo "== indexer_loop  $(date -u +%FT%TZ)  commit ${ATTNSERVE_COMMIT:-?}  $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | head -1)"
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
       cmake --build "$B" -j "$JOBS" --target attnserve_gpu_tests bench_indexer >>"$OUT/build.log" 2>&1; }; then
  echo "== build FAILED"; grep -E -m 30 "error|FAILED" "$OUT/build.log"; exit 1
fi
echo "== build $(($(date +%s) - t0)) s"
grep -E "C7520|C7508|C7510" "$OUT/build.log" | head -5
grep -E "spill" "$OUT/build.log" | grep -v " 0 bytes spill" | head -5
rm -f "$OUT/build.log"

# Tests: one process per suite.
t1=$(date +%s)
T=$B/attnserve_gpu_tests
F=${GTEST_FILTER:-*Indexer*}
: >"$OUT/gpu_tests.log"
for suite in $("$T" --gtest_filter="$F" --gtest_list_tests | awk '/^[^ ]/{print $1}' | sed 's/\.$//'); do
  timeout "${SUITE_TIMEOUT:-30}" "$T" --gtest_filter="$suite.*" \
    >>"$OUT/gpu_tests.log" 2>&1 || echo "  suite $suite: rc $?"
done
echo "== tests $(($(date +%s) - t1)) s: $(grep -c '^\[       OK \]' "$OUT/gpu_tests.log") ok, $(grep -cE "^\[  FAILED  \] [A-Za-z].*ms\)$" "$OUT/gpu_tests.log") failed"
grep -E '^\[  FAILED  \] [A-Z]' "$OUT/gpu_tests.log"
grep -B2 -A6 -E "Failure" "$OUT/gpu_tests.log" | head -40

BI=$B/bench/bench_indexer
t2=$(date +%s)
timeout 40 "$BI" "prefill 8192" >"$OUT/bench_ragged.log" 2>&1 || echo "  bench ragged: rc $?"
grep -E "^(device|copy|indexer)" "$OUT/bench_ragged.log" | cut -c1-140
echo "== bench ragged $(($(date +%s) - t2)) s"

NCU_ARGS=(--clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats
  --section SchedulerStats --section InstructionStats --section LaunchStats --kernel-name-base mangled
  --launch-skip 2 --launch-count 1)
ncu_mode() {  # $1 mode, $2 extra sections (source counters for mode 0)
  timeout 45 ncu "${NCU_ARGS[@]}" $2 -k "regex:indexer_ws_kernelILi4ELb0ELb0ELb1ELi$1E" -o /tmp/prof$1 -f \
    "$BI" "prefill 8192" >/tmp/ncu_run$1.txt 2>&1 || { echo "  ncu mode $1: rc $?"; tail -5 /tmp/ncu_run$1.txt; }
  ncu -i /tmp/prof$1.ncu-rep --page details --print-details all >"$OUT/ncu_mode$1.txt" 2>&1
  grep -E "SM Frequency|Duration|Issue Slots Busy|Eligible Warps|No Eligible|highest-utilized|Executed Instructions  |Warp Cycles Per Issued|Registers|Compute \(SM\) Throughput" "$OUT/ncu_mode$1.txt" | head -14
}
t3=$(date +%s)
ncu_mode 0 "--section SourceCounters --import-source no"
ncu -i /tmp/prof0.ncu-rep --page source --csv --print-source sass >/tmp/src0.csv 2>&1
python3 scripts/ncu_hot.py /tmp/src0.csv 40 >"$OUT/ncu_hot_mode0.txt" 2>&1
ncu -i /tmp/prof0.ncu-rep --page raw --csv >/tmp/raw0.csv 2>&1
tr ',' '\n' </tmp/raw0.csv | grep -n -i "gmma\|pipe_tensor" | head -10
echo "== ncu mode 0 $(($(date +%s) - t3)) s"

t4=$(date +%s)
timeout 40 "$BI" "heads 64 next_n 4" >"$OUT/bench_paged.log" 2>&1 || echo "  bench paged 4: rc $?"
timeout 30 "$BI" "b 128 ctx 32K heads 64 next_n 2" >>"$OUT/bench_paged.log" 2>&1 || echo "  bench paged 2: rc $?"
grep -E "^indexer" "$OUT/bench_paged.log" | grep -v sm80 | cut -c1-140
echo "== bench paged $(($(date +%s) - t4)) s"

M2=${NCU_MODE2:-$(grep "sm90ws_ragged mode" "$OUT/bench_ragged.log" | awk '{for(i=1;i<=NF;i++) if($i=="us"){print $(i-1), $0; break}}' |
  sort -n | head -1 | grep -o "mode [0-9]" | cut -d' ' -f2)}
if [ -n "$M2" ] && [ "$M2" != 0 ]; then t5=$(date +%s); ncu_mode "$M2" ""; echo "== ncu mode $M2 $(($(date +%s) - t5)) s"; fi

t6=$(date +%s)
timeout "${SAN_TIMEOUT:-25}" compute-sanitizer --tool racecheck --racecheck-report hazard \
  "$T" --gtest_filter="${RACECHECK_FILTER:-IndexerSm90Ragged.CausalPrefillWindows}" >"$OUT/racecheck.log" 2>&1 || echo "  racecheck: rc $?"
tail -4 "$OUT/racecheck.log"
echo "== racecheck $(($(date +%s) - t6)) s"
echo "== total $(($(date +%s) - t0)) s"
true
