#!/usr/bin/env bash
# Session 9 device call F4 (lead): s9-trial with the sparse dense-schedule defaults + s9-smlafp8 (fp8_v2, opt-in);
# the gate of fp8_v2, the sparse suites on the new defaults, fp8_v2's A/B rows and tests, memcheck of the dense-schedule
# kernels, racecheck of fp8_v2, one ncu of fp8_v2.
# Usage on the device, from the tree's root: DEADLINE=<s> bash .device/call_f4.sh <commit>  (logs to $OUT)
set -u
O=${OUT:?}
C=${1:-?}
DEPS=$PWD/.device/deps
T0=$SECONDS
DL=${DEADLINE:-570}
left() { echo $((DL - (SECONDS - T0))); }
step() { echo "== $(($SECONDS - T0)) s: $*"; }
L=/tmp/f4; mkdir -p $L
EXTRA=()
if [ ! -f /usr/include/gtest/gtest.h ] && [ ! -f /usr/local/include/gtest/gtest.h ]; then
  cmake -S "$DEPS/googletest" -B /tmp/gtest-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF \
    -DCMAKE_INSTALL_PREFIX=$PWD/build-f-deps -DCMAKE_POSITION_INDEPENDENT_CODE=ON >/dev/null &&
    cmake --build /tmp/gtest-build -j 16 >/dev/null && cmake --install /tmp/gtest-build >/dev/null
  EXTRA+=(-DCMAKE_PREFIX_PATH=$PWD/build-f-deps)
fi
[ -f /usr/include/dlpack/dlpack.h ] || EXTRA+=(-DDLPACK_INCLUDE_DIR="$DEPS")
[ -f "$DEPS/cutlass/include/cute/tensor.hpp" ] && EXTRA+=(-DATTNSERVE_CUTLASS_DIR="$DEPS/cutlass/include")
B=$PWD/build-f
step "configure + build (sm_90) of $C"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNSERVE_CUDA=ON -DATTNSERVE_CUDA_ARCHS=90 \
  -DATTNSERVE_BENCH=ON -DATTNSERVE_BENCH_CUDA_ARCHS=90 "${EXTRA[@]}" >$L/configure.log 2>&1 &&
  timeout 240 cmake --build $B -j 16 --target attnserve_gpu_tests bench_sparse >$L/build.log 2>&1
echo "build rc $?"; grep -m 20 -E "error|FAILED" $L/build.log; grep -E "spill" $L/build.log | grep -v " 0 bytes spill" | head -5
T=$B/attnserve_gpu_tests BA=$B/bench/bench_attention BS=$B/bench/bench_sparse
[ -x $T ] || { echo "no test binary"; exit 1; }
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
run() {  # log timeout command...: skipped when less than its timeout is left
  local log=$1 t=$2; shift 2
  if [ "$(left)" -lt "$t" ]; then echo "skip (deadline): $*"; return 1; fi
  step "$*"
  timeout "$t" "$@" >>$O/$log 2>&1
  local rc=$?
  echo "   rc $rc" | tee -a $O/$log
  grep -E "^\[  (PASSED|FAILED)|ERROR SUMMARY|RACECHECK SUMMARY" $O/$log | tail -4
  return $rc
}
run gate.log 60 env ATTNSERVE_SEED=9 $T --gtest_filter='SparseMlaGpuSm90Fp8V2.Gate'
G=$?
# The sparse suites on the session-9 default (dense-schedule kernels for h_q % 64 == 0), one process.
run gpu_tests_sparse.log 150 env ATTNSERVE_SEED=9 $T \
  --gtest_filter='SparseMlaGpu.*:SparseMlaGpuEdges.*:SparseMlaGpuSplits.*:SparseGpuGraph*:SparseTreeGpu.*:SparseMlaGpuSm90.*:SparseMlaGpuSm90Dense.*:BackendGpu.*'
[ $G = 0 ] && run bench_fp8v2.log 70 $BS --quick 'fp8v2'
[ $G = 0 ] && run gpu_tests_fp8v2.log 70 env ATTNSERVE_SEED=9 $T --gtest_filter='SparseMlaGpuSm90Fp8V2.*'
run memcheck_dense.log 60 env ATTNSERVE_SEED=1 $CS --tool memcheck --error-exitcode 9 $T \
  --gtest_filter='SparseMlaGpuSm90Dense.InvalidRepeatedSlotsAndEmptyRows'
[ $G = 0 ] && run racecheck_fp8v2.log 60 env ATTNSERVE_SEED=1 $CS --tool racecheck --error-exitcode 9 $T \
  --gtest_filter='SparseMlaGpuSm90Fp8V2.Gate'
[ $G = 0 ] && run ncu_fp8v2.txt 45 $NCU --section SpeedOfLight --section WarpStateStats -k regex:'sparse_mla90_(fp8_v2_)?kernel' \
  -c 1 $BS --quick '=sparse decode fp8v2 r1 rows 128 h_q 128 topk 2048 fp8 fp8_v2 15'
step "end"
