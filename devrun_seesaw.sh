#!/usr/bin/env bash
# One device call for branch s6-mla-seesaw-unmeasured (the seesaw consumers of src/cuda/mla/sm90/seesaw.cuh, never run
# on a GPU when written): an sm_90a-only build (GPU tests, bench_attention); the Hopper MLA GPU suite FIRST, alone, under
# a short timeout (a hung seesaw kernel stops there, before anything else spends device time); only if it passed: the
# A/B of the consumer schedules (split d_v / seesaw, TMA producer) on a quiet GPU, then side by side the other two MLA
# suites, racecheck of one Hopper MLA test (it runs the seesaw too) and ncu of both schedules at b128 x 8K h_q 128.
# Run as `cd .wt/seesaw && timeout 150 ./devrun_seesaw.sh` (worktree copied to /work/main/.wt/seesaw). Logs to $OUT.
# Delete this script (keep it as bench/results/..._command.log) once its results are committed.
set -u
cd "$(dirname "$0")"
O=${OUT:-/tmp/o}
mkdir -p "$O"
DEPS=$PWD/../../.device/deps
B=/tmp/seesaw-build
L=/tmp/seesaw-logs
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
timeout 75 cmake --build $B -j 16 --target attnserve_gpu_tests bench_attention >$L/build.log 2>&1 || {
  grep -m 30 -B2 -A5 "error" $L/build.log | tee "$O/build_errors.log"
  tail -5 $L/build.log
  exit 1
}
echo "== build $(($(date +%s) - t0)) s"
T=$B/attnserve_gpu_tests
BA=$B/bench/bench_attention
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
grep -E "spill" $L/build.log | grep -v " 0 bytes spill" | head -5
# 1. The seesaw's correctness gate, alone (default split d_v + cp.async + TMA + seesaw at every check; ~5 s when it works).
t1=$(date +%s)
timeout 40 $T --gtest_filter='GpuMlaSm90.*' >"$O/gpu_tests_sm90.log" 2>&1
rc=$?
echo "== GpuMlaSm90 rc $rc, $(($(date +%s) - t1)) s"
grep -hE "^\[  (PASSED|FAILED) |FAILED  \]" "$O/gpu_tests_sm90.log"
if [ $rc -ne 0 ]; then
  grep -m 20 -B3 -A3 "Failure\|error" "$O/gpu_tests_sm90.log" | cut -c1-200
  echo "== stopped: GpuMlaSm90 failed or hung (rc 124: timeout), no benches"
  exit 1
fi
# 2. The A/B (quiet GPU): split d_v / seesaw, two rounds, five shapes.
t1=$(date +%s)
{
  timeout 40 $BA 'mla seesaw'
  echo "== bench_attention rc $?"
} >"$O/bench.log" 2>&1
echo "== benches $(($(date +%s) - t1)) s"
# 3. The other MLA suites, racecheck, ncu, side by side.
t1=$(date +%s)
run_tests() {
  timeout 30 $T --gtest_filter="$1" >"$L/tests_$2.log" 2>&1
  echo "== rc $? ($1)" >>"$L/tests_$2.log"
}
run_tests 'GpuMla.*' mla &
run_tests 'GpuMlaFp8.*' fp8 &
(
  ATTNSERVE_SEED=1 timeout 40 $CS --tool racecheck --error-exitcode 9 $T \
    --gtest_filter=GpuMlaSm90.WindowSoftcapAndEdgeCases >>"$L/san.log" 2>&1
  echo "== racecheck GpuMlaSm90.WindowSoftcapAndEdgeCases rc $?" >>"$L/san.log"
) &
(
  S='--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats'
  for v in split-dv seesaw; do
    timeout 15 $NCU $S -k regex:mla_sm90_kernel -c 1 $BA "mla seesaw decode b128 hq128 8K page64 $v r1" >>"$L/ncu.log" 2>&1
    echo "== ncu $v rc $?" >>"$L/ncu.log"
  done
) &
wait
echo "== tests+sanitizer+ncu $(($(date +%s) - t1)) s"
cat $L/tests_*.log >"$O/gpu_tests_other.log"
cp $L/san.log "$O/sanitizer.log"
cp $L/ncu.log "$O/ncu.log"
grep -hE "^\[  (PASSED|FAILED) |^== rc|FAILED  \]" "$O/gpu_tests_other.log"
grep -E "RACECHECK SUMMARY|== racecheck" "$O/sanitizer.log"
grep -E "^mla|==" "$O/bench.log" | cut -c1-170
grep -E "== ncu|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|L2 Hit|Elapsed Cycles|Stall|Issued Warp" $L/ncu.log |
  cut -c1-150
echo "== total $(($(date +%s) - t0)) s"
