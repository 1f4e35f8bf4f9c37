#!/usr/bin/env bash
# Session 9 device call F3 (lead): s9-trial + s9-smla (sparse MLA on the dense MLA schedule, opt-in), sm_90 build in
# build-f; the new kernels' gate, their A/B rows, their tests, the dense MLA suites (refactored, same SASS), one ncu
# of the new sparse prefill and one of the FP8 decode pair (direct / lean).
# Usage on the device, from the tree's root: DEADLINE=<s> bash .device/call_f3.sh <commit>  (logs to $OUT)
set -u
O=${OUT:?}
C=${1:-?}
DEPS=$PWD/.device/deps
T0=$SECONDS
DL=${DEADLINE:-570}
left() { echo $((DL - (SECONDS - T0))); }
step() { echo "== $(($SECONDS - T0)) s: $*"; }
L=/tmp/f3; mkdir -p $L
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
  timeout 240 cmake --build $B -j 16 --target attnserve_gpu_tests bench_attention bench_sparse >$L/build.log 2>&1
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
run gate.log 60 env ATTNSERVE_SEED=9 $T --gtest_filter='SparseMlaGpuSm90Dense.HeadCounts'
G=$?
[ $G = 0 ] && run bench_sparse.log 120 $BS --quick 's9-dense-ab'
[ $G = 0 ] && run gpu_tests.log 120 env ATTNSERVE_SEED=9 $T --gtest_filter='SparseMlaGpuSm90Dense.*'
run gpu_tests.log 90 env ATTNSERVE_SEED=9 $T --gtest_filter='GpuMla.*:GpuMlaSm90.*:GpuMlaFp8.*:SparseMlaGpuSm90.*'
[ $G = 0 ] && run ncu_smla_dense.txt 90 $NCU --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
  --section MemoryWorkloadAnalysis -k regex:sparse_mla90_dense_kernel -c 1 $BS --quick \
  '=s9-dense-ab sparse prefill s_kv 8K rows 4096 h_q 128 topk 2048 bf16 hopper dense-schedule'
# The session-9 defaults (FP8 decode on the lean loop, top-k bin list up to 64K) across the suites they reach.
run gpu_tests_defaults.log 200 env ATTNSERVE_SEED=9 $T \
  --gtest_filter='GpuAttention.*:GpuAttentionFp8.*:TopkGpu.*:GpuGraph.*:GpuGraphPlanner.*:BackendGpu.*:PlanGpu.*'
[ "$(left)" -gt 150 ] && run ncu_fp8lean.txt 60 $NCU --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
  --section InstructionStats -k regex:paged_attention_kernel -c 2 $BA --quick '^same fp8lean b64x8K hq32 hkv8 page16'
[ $G = 0 ] && run racecheck.log 60 env ATTNSERVE_SEED=1 $CS --tool racecheck --error-exitcode 9 $T \
  --gtest_filter='SparseMlaGpuSm90Dense.HeadCounts'
step "end"
