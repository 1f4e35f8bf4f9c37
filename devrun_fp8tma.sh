#!/usr/bin/env bash
# One device call for branch s6-mla-fp8-tma-unmeasured (not yet run): an sm_90a-only build of the GPU tests and
# bench_attention, the FP8-656 dense MLA producers' bench A/B on a quiet GPU, then the MLA Hopper GPU tests and a
# racecheck of the FP8 TMA path side by side. Run as `cd .wt/<dir> && timeout 120 ./devrun_fp8tma.sh` with the
# worktree copied to /work/main/.wt/<dir> (carry .wt/<dir> and .device). Logs to $OUT.
set -u
cd "$(dirname "$0")"
O=${OUT:-/tmp/o}; mkdir -p "$O"
DEPS=$PWD/../../.device/deps
B=/tmp/mla-fp8-build
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
  -DATTNSERVE_BENCH=ON -DATTNSERVE_BENCH_CUDA_ARCHS=90 "${EXTRA[@]}" >/tmp/cfg.log 2>&1 || { tail -30 /tmp/cfg.log; exit 1; }
cmake --build $B -j 16 --target attnserve_gpu_tests bench_attention >/tmp/build.log 2>&1 || { grep -m 30 -B2 -A5 "error" /tmp/build.log | tee "$O/build_errors.log"; exit 1; }
echo "== build $(( $(date +%s) - t0 )) s"
T=$B/attnserve_gpu_tests
timeout 20 $B/bench/bench_attention 'mla fp8 producer|mla producer decode b128 hq128' >"$O/bench.log" 2>&1; echo "== bench rc $?" >>"$O/bench.log"
timeout 40 $T --gtest_filter='GpuMlaFp8.*:GpuMlaSm90.*:GpuMla.*' >"$O/gpu_tests.log" 2>&1 &
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck; do
  ATTNSERVE_SEED=1 timeout 30 $CS --tool $tool --error-exitcode 9 $T --gtest_filter=GpuMlaFp8.RingWrapsSmall >>"$O/sanitizer.log" 2>&1
  echo "== $tool rc $?" >>"$O/sanitizer.log"
done
wait
grep -hE "^\[  (PASSED|FAILED) |FAILED  \]" "$O/gpu_tests.log"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|== (memcheck|racecheck)" "$O/sanitizer.log"
grep -E "^mla|==" "$O/bench.log" | cut -c1-160
echo "== total $(( $(date +%s) - t0 )) s"
