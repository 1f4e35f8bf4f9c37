#!/usr/bin/env bash
# One device call for branch s7-indexer (the opt-in four-math-warpgroup ws kernel, ws_mode kWsQuadMode = 12, never run
# on a GPU when written): an sm_90a-only build (GPU tests, bench_indexer); the quad kernel's own tests FIRST, alone,
# under a short timeout (a hang stops there); only if they passed: the A/B rows on a quiet GPU (default mode vs
# `mode 12 quad`, ragged causal 8K / 4K, paged b128 x 32K next_n 4 / 2), then the whole Hopper indexer suite,
# racecheck of one ragged test (11 forms, the quad one included) and ncu of the quad kernel at ragged causal 8K
# (stall reasons), side by side. Run as `cd .wt/indexer && timeout 300 ./devrun_indexer_quad.sh` (worktree copied to
# /work/main/.wt/indexer). Logs to $OUT. Delete this script (keep it as bench/results/..._command.log) once its
# results are committed.
set -u
cd "$(dirname "$0")"
O=${OUT:-/tmp/o}
mkdir -p "$O"
DEPS=$PWD/../../.device/deps
B=/tmp/indexer-build
L=/tmp/indexer-logs
mkdir -p $L
t0=$(date +%s)
EXTRA=()
if [ ! -f /usr/include/gtest/gtest.h ] && [ ! -f /usr/local/include/gtest/gtest.h ]; then
  cmake -S "$DEPS/googletest" -B /tmp/gtest-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF \
    -DCMAKE_INSTALL_PREFIX=/tmp/deps -DCMAKE_POSITION_INDEPENDENT_CODE=ON >/dev/null &&
    cmake --build /tmp/gtest-build -j 16 >/dev/null && cmake --install /tmp/gtest-build >/dev/null
  EXTRA+=(-DCMAKE_PREFIX_PATH=/tmp/deps)
fi
[ -f /usr/include/dlpack/dlpack.h ] || EXTRA+=(-DDLPACK_INCLUDE_DIR="$DEPS")
EXTRA+=(-DATTNSERVE_CUTLASS_DIR="$DEPS/cutlass/include")
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
cmake -S . -B $B "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DATTNSERVE_CUDA=ON -DATTNSERVE_CUDA_ARCHS=90 -DATTNSERVE_NCCL=OFF \
  -DATTNSERVE_BENCH=ON -DATTNSERVE_BENCH_CUDA_ARCHS=90 "${EXTRA[@]}" >$L/configure.log 2>&1 || {
  tail -30 $L/configure.log
  cp $L/configure.log "$O/"
  exit 1
}
timeout 90 cmake --build $B -j 16 --target attnserve_gpu_tests bench_indexer >$L/build.log 2>&1 || {
  grep -m 30 -B2 -A5 "error" $L/build.log | tee "$O/build_errors.log"
  tail -5 $L/build.log
  exit 1
}
echo "== build $(($(date +%s) - t0)) s"
T=$B/attnserve_gpu_tests
BI=$B/bench/bench_indexer
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
grep -E "spill" $L/build.log | grep -v " 0 bytes spill" | head -5
# 1. The quad kernel's correctness gate, alone (oracle + bits equal to its two-warpgroup twin; ~10 s when it works).
t1=$(date +%s)
timeout 45 $T --gtest_filter='IndexerSm90PagedEdge.QuadWarpgroupsSmallPagesAndSpans:IndexerSm90Ragged.RandomWindowsMatchCpu:IndexerSm90QScale.*' >"$O/gpu_tests_quad.log" 2>&1
rc=$?
echo "== quad gate rc $rc, $(($(date +%s) - t1)) s"
grep -hE "^\[  (PASSED|FAILED) |FAILED  \]" "$O/gpu_tests_quad.log"
if [ $rc -ne 0 ]; then
  grep -m 20 -B3 -A3 "Failure\|error" "$O/gpu_tests_quad.log" | cut -c1-200
  echo "== stopped: the quad tests failed or hung (rc 124: timeout), no benches"
  exit 1
fi
# 2. The A/B rows (quiet GPU): each case prints the default mode, then `mode 12 quad`, then the other modes.
t1=$(date +%s)
{
  for f in 'prefill 8192' 'prefill 4096' 'b 128 ctx 32K heads 64 next_n 4' 'b 128 ctx 32K heads 64 next_n 2'; do
    timeout 40 $BI --quick "$f"
    echo "== bench_indexer '$f' rc $?"
  done
} >"$O/bench_indexer.log" 2>&1
echo "== benches $(($(date +%s) - t1)) s"
# 3. The whole Hopper indexer suite, racecheck, ncu of the quad kernel (ragged causal 8K), side by side.
t1=$(date +%s)
(
  timeout 120 $T --gtest_filter='*IndexerSm90*' >"$L/tests_all.log" 2>&1
  echo "== rc $? (*IndexerSm90*)" >>"$L/tests_all.log"
) &
(
  ATTNSERVE_SEED=1 timeout 90 $CS --tool racecheck --error-exitcode 9 $T \
    --gtest_filter=IndexerSm90Ragged.RandomWindowsMatchCpu >>"$L/san.log" 2>&1
  echo "== racecheck IndexerSm90Ragged.RandomWindowsMatchCpu rc $?" >>"$L/san.log"
) &
(
  S='--section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section SourceCounters'
  timeout 90 $NCU --clock-control none --kernel-name-base mangled $S -k 'regex:indexer_ws_kernelILi4ELb0ELb0ELb1ELi12E' -c 1 \
    $BI --quick 'prefill 8192' >>"$L/ncu.log" 2>&1
  echo "== ncu quad ragged 8K rc $?" >>"$L/ncu.log"
) &
wait
echo "== tests+sanitizer+ncu $(($(date +%s) - t1)) s"
cp $L/tests_all.log "$O/gpu_tests_indexer.log"
cp $L/san.log "$O/sanitizer.log"
cp $L/ncu.log "$O/ncu_quad_ragged8k.log"
grep -hE "^\[  (PASSED|FAILED) |^== rc|FAILED  \]" "$O/gpu_tests_indexer.log"
grep -E "RACECHECK SUMMARY|== racecheck" "$O/sanitizer.log"
grep -E "^indexer.*(sm90ws|sm90_ragged)|==" "$O/bench_indexer.log" | cut -c1-170
grep -E "== ncu|Duration|Issue Slots Busy|Eligible Warps|Active Warps|Warp Cycles Per Issued|Stall|highest-utilized" $L/ncu.log |
  cut -c1-150
echo "== total $(($(date +%s) - t0)) s"
