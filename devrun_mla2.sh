#!/usr/bin/env bash
# One device call for branch s6-mla2: an sm_90a-only build (GPU tests, bench_attention), on a quiet GPU
# the A/B of the consumer schedules over the bf16 TMA tiles and of the FP8-656 producers (cp.async / TMA), then side
# by side the MLA GPU suites, racecheck of one bf16 and one FP8 test, ncu of schedules 0 / 3.
# Run as `cd .wt/mla2 && timeout 88 ./devrun_mla2.sh` (worktree copied to /work/main/.wt/mla2). Logs to $OUT.
set -u
cd "$(dirname "$0")"
O=${OUT:-/tmp/o}; mkdir -p "$O"
DEPS=$PWD/../../.device/deps
B=/tmp/mla2-build
L=/tmp/mla2-logs; mkdir -p $L
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
GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
cmake -S . -B $B "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DATTNSERVE_CUDA=ON -DATTNSERVE_CUDA_ARCHS=90 -DATTNSERVE_NCCL=OFF \
  -DATTNSERVE_BENCH=ON -DATTNSERVE_BENCH_CUDA_ARCHS=90 "${EXTRA[@]}" >$L/configure.log 2>&1 || { tail -30 $L/configure.log; cp $L/configure.log "$O/"; exit 1; }
timeout 60 cmake --build $B -j 16 --target attnserve_gpu_tests bench_attention >$L/build.log 2>&1 || { grep -m 30 -B2 -A5 "error" $L/build.log | tee "$O/build_errors.log"; tail -5 $L/build.log; exit 1; }
echo "== build $(( $(date +%s) - t0 )) s"
T=$B/attnserve_gpu_tests
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu); CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
BA=$B/bench/bench_attention
t1=$(date +%s)
{ timeout 14 $BA 'mla sched|mla fp8 producer|mla producer decode b128 hq128'; echo "== bench_attention rc $?"; } >"$O/bench.log" 2>&1
echo "== benches $(( $(date +%s) - t1 )) s"
t1=$(date +%s)
run_tests() { timeout 27 $T --gtest_filter="$1" >"$L/tests_$2.log" 2>&1; echo "== rc $? ($1)" >>"$L/tests_$2.log"; }
run_tests 'GpuMla.*' mla &
run_tests 'GpuMlaSm90.*' sm90 &
run_tests 'GpuMlaFp8.*' fp8 &
for t in GpuMlaSm90.WindowSoftcapAndEdgeCases GpuMlaFp8.RingWrapsSmall; do
  ( ATTNSERVE_SEED=1 timeout 24 $CS --tool racecheck --error-exitcode 9 $T --gtest_filter=$t >>"$L/san_$t.log" 2>&1
    echo "== racecheck $t rc $?" >>"$L/san_$t.log" ) &
done
( S='--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats'
  for v in sched0 sched3; do
    timeout 11 $NCU $S -k regex:mla_sm90_kernel -c 1 $BA "mla sched decode b128 hq128 8K page64 $v r1" >>"$L/ncu_dense.log" 2>&1
    echo "== ncu dense $v rc $?" >>"$L/ncu_dense.log"
  done ) &
wait
echo "== tests+sanitizers+ncu $(( $(date +%s) - t1 )) s"
cat $L/tests_*.log > "$O/gpu_tests.log"; cat $L/san_*.log > "$O/sanitizer.log"; cp $L/ncu_dense.log "$O/"
grep -E "registers|spill" $L/build.log | grep -i spill | grep -v " 0 bytes spill" | head -5
grep -hE "^\[  (PASSED|FAILED) |^== rc|FAILED  \]|^note" "$O/gpu_tests.log"
grep -E "RACECHECK SUMMARY|== racecheck" "$O/sanitizer.log"
grep -E "^mla|==" "$O/bench.log" | cut -c1-170
grep -E "== ncu|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|L2 Hit|Elapsed Cycles" $L/ncu_dense.log | cut -c1-150
echo "== total $(( $(date +%s) - t0 )) s"
