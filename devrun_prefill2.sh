#!/usr/bin/env bash
# One device call for branch s6-prefill2: sm_90a-only build (GPU tests, bench_attention), the TMA-vs-cp.async
# A/B on a quiet GPU (boost, then --sustained), then side by side the GPU suites and one racecheck, and the
# producer's SASS counts. Logs to $OUT.
set -u
cd "$(dirname "$0")"
O=${OUT:-/tmp/o}; mkdir -p "$O"
DEPS=$PWD/../../.device/deps
B=/tmp/p2-build
L=/tmp/p2-logs; mkdir -p $L
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
cmake --build $B -j 16 --target attnserve_gpu_tests bench_attention >$L/build.log 2>&1 || { grep -m 30 -B2 -A5 "error" $L/build.log | tee "$O/build_errors.log"; exit 1; }
echo "== build $(( $(date +%s) - t0 )) s"
T=$B/attnserve_gpu_tests; BA=$B/bench/bench_attention
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
t1=$(date +%s)
{ timeout 8 $BA tmaab; echo "== bench rc $?"; timeout 11 $BA --sustained tmaab; echo "== bench sustained rc $?"; } >"$O/bench.log" 2>&1
echo "== benches $(( $(date +%s) - t1 )) s"
t1=$(date +%s)
run_tests() { timeout 18 $T --gtest_filter="$1" >"$O/tests_$2.log" 2>&1; echo "== rc $? ($1)" >>"$O/tests_$2.log"; }
run_tests 'GpuAttentionSm90.TmaBoxShapesAndFallback:GpuAttentionSm90.PrefillB1LongCausalGqa32x8:GpuAttentionSm90.AutoSelects*' a &
run_tests 'GpuAttentionSm90.HeadDims*' b &
run_tests 'GpuAttentionSm90.*-GpuAttentionSm90.HeadDims*:GpuAttentionSm90.TmaBoxShapesAndFallback:GpuAttentionSm90.PrefillB1LongCausalGqa32x8:GpuAttentionSm90.AutoSelects*' c &
run_tests 'GpuAttentionFp8.*' fp8 &
( ATTNSERVE_SEED=1 timeout 18 $CS --tool racecheck --error-exitcode 9 $T --gtest_filter=GpuAttentionSm90.PrefillCausalAndNonCausal >$O/racecheck.log 2>&1
  echo "== racecheck rc $?" >>$O/racecheck.log ) &
( CO=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
  OBJ=$(find $B -name 'attn90_bf16_d128.cu.o' | head -1)
  $CO -sass "$OBJ" > $L/d128.sass 2>&1
  awk '/Function : .*attention_sm90_ws_kernel.*Li128ELi128ELb1ELb1E/{f=1;print;next} /Function : /{f=0} f' $L/d128.sass > $L/pp.sass
  { echo "pp kernel SASS lines $(wc -l < $L/pp.sass)"; for i in UTMALDG LDGSTS LDG SYNCS ARRIVES BAR; do echo "$i $(grep -c "$i" $L/pp.sass)"; done; } > $O/sass_counts.log
  cp $L/pp.sass "$O/pp_d128.sass" ) &
wait
echo "== tests+racecheck $(( $(date +%s) - t1 )) s"
cat $O/tests_*.log > $L/gpu_tests.log
grep -hE "^\[  (PASSED|FAILED) |^== rc|FAILED  \]|tests ran" $L/gpu_tests.log
grep -E "RACECHECK SUMMARY|== racecheck" "$O/racecheck.log"
cat $O/sass_counts.log
grep -E "MHz" "$O/bench.log" | sed 's/  */ /g' | cut -c1-160
echo "== total $(( $(date +%s) - t0 )) s"
