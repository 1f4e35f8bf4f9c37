#!/usr/bin/env bash
# Session 8 device call E3 (lead): main with the defaults set from call E2 (FP8 direct operands, K by TMA for
# prefill, top-k prefetch rule and streaming filter for few rows), sm_90 build; the suites those defaults change,
# sanitizers of the new code, the default rows of the benches, one ncu of the K-by-TMA prefill. Steps in priority
# order, each skipped past DEADLINE seconds.  Usage on the device: DEADLINE=<s> bash .device/call_e3.sh <commit>
set -u
O=${OUT:?}
C=${1:-?}
DEPS=$PWD/.device/deps
T0=$SECONDS
DL=${DEADLINE:-570}
left() { echo $((DL - (SECONDS - T0))); }
step() { echo "== $(($SECONDS - T0)) s: $*"; }
L=/tmp/e3; mkdir -p $L
EXTRA=()
if [ ! -f /usr/include/gtest/gtest.h ] && [ ! -f /usr/local/include/gtest/gtest.h ]; then
  cmake -S "$DEPS/googletest" -B /tmp/gtest-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF \
    -DCMAKE_INSTALL_PREFIX=/tmp/deps -DCMAKE_POSITION_INDEPENDENT_CODE=ON >/dev/null &&
    cmake --build /tmp/gtest-build -j 16 >/dev/null && cmake --install /tmp/gtest-build >/dev/null
  EXTRA+=(-DCMAKE_PREFIX_PATH=/tmp/deps)
fi
[ -f /usr/include/dlpack/dlpack.h ] || EXTRA+=(-DDLPACK_INCLUDE_DIR="$DEPS")
[ -f "$DEPS/cutlass/include/cute/tensor.hpp" ] && EXTRA+=(-DATTNSERVE_CUTLASS_DIR="$DEPS/cutlass/include")
B=/tmp/e3b
step "configure + build (sm_90) of $C"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNSERVE_CUDA=ON -DATTNSERVE_CUDA_ARCHS=90 \
  -DATTNSERVE_BENCH=ON -DATTNSERVE_BENCH_CUDA_ARCHS=90 "${EXTRA[@]}" >$L/configure.log 2>&1 &&
  timeout 240 cmake --build $B -j 16 --target attnserve_gpu_tests bench_attention bench_topk >$L/build.log 2>&1
echo "build rc $?"; grep -m 20 -E "error|FAILED" $L/build.log
T=$B/attnserve_gpu_tests BA=$B/bench/bench_attention BT=$B/bench/bench_topk
[ -x $T ] || { echo "no test binary"; exit 1; }
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
run() {  # log timeout command...: skipped when less than its timeout is left
  local log=$1 t=$2; shift 2
  if [ "$(left)" -lt "$t" ]; then echo "skip (deadline): $*"; return; fi
  step "$*"
  timeout "$t" "$@" >>$O/$log 2>&1
  local rc=$?
  echo "   rc $rc" | tee -a $O/$log
  grep -E "^\[  (PASSED|FAILED)|ERROR SUMMARY|RACECHECK SUMMARY" $O/$log | tail -4
}
# The suites whose defaults changed, one process each (a hang costs its suite).
for f in 'GpuAttention.*' 'GpuAttentionFp8.*' 'GpuAttentionSm90.*' 'GpuAttentionSm90Split.*' 'TopkGpu.*' \
         'BackendGpu.*:PlanGpu.*' 'GpuGraph*' 'IndexerSm90PagedEdge.*'; do
  run gpu_tests.log 150 env ATTNSERVE_SEED=8 $T --gtest_filter="$f"
done
run sanitizer_memcheck.log 90 env ATTNSERVE_SEED=1 $CS --tool memcheck --error-exitcode 9 $T \
  --gtest_filter='GpuAttention.Fp8KvWithDescale:GpuAttentionSm90Split.Gate:TopkGpu.StreamingFilterGivesTheSameBits:IndexerSm90PagedEdge.ZeroLenKvShortRequestsAndNothingVisible'
run sanitizer_racecheck.log 120 env ATTNSERVE_SEED=1 ATTNSERVE_TOPK_S7=1 $CS --tool racecheck --error-exitcode 9 $T \
  --gtest_filter='GpuAttentionSm90Split.Gate:TopkGpu.StreamingFilterGivesTheSameBits:GpuAttention.Fp8KvWithDescale'
run bench_defaults.log 40 $BA --quick '^same fp8direct|kvsplit prefill b1 s8K hq32 hkv8 d128 causal r1|^same ring b64x1K'
run bench_topk.log 30 $BT --quick 's8 A/B'
run ncu_prefill_ktma.txt 60 $NCU --clock-control none --section SpeedOfLight --section SchedulerStats --section WarpStateStats \
  --section ComputeWorkloadAnalysis -k regex:attention_sm90 -c 1 $BA --quick 'kvsplit prefill b1 s8K hq32 hkv8 d128 causal r1 ktma'
step "end"
