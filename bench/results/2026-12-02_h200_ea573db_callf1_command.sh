#!/usr/bin/env bash
# Session 9 device call F1 (lead): s9-trial = main f0bf28b + s8-fp8dec2 (lean FP8 key loop, opt-in) + s8-topk2
# (bin-list select, opt-in), sm_90 build kept in build-f for the next warm call; gates of the two opt-in kernels,
# their A/B bench rows, then the whole GPU suite, one process per suite.
# Usage on the device, from the tree's root: DEADLINE=<s> bash .device/call_f1.sh <commit>  (logs to $OUT)
set -u
O=${OUT:?}
C=${1:-?}
DEPS=$PWD/.device/deps
T0=$SECONDS
DL=${DEADLINE:-570}
left() { echo $((DL - (SECONDS - T0))); }
step() { echo "== $(($SECONDS - T0)) s: $*"; }
L=/tmp/f1; mkdir -p $L
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
  timeout 240 cmake --build $B -j 16 --target attnserve_gpu_tests bench_attention bench_topk >$L/build.log 2>&1
echo "build rc $?"; grep -m 20 -E "error|FAILED" $L/build.log; grep -E "spill" $L/build.log | grep -v " 0 bytes spill" | head -5
T=$B/attnserve_gpu_tests BA=$B/bench/bench_attention BT=$B/bench/bench_topk
[ -x $T ] || { echo "no test binary"; exit 1; }
declare -A GATE
gate() {  # name filter
  step "gate $1"
  ATTNSERVE_SEED=9 timeout 60 $T --gtest_filter="$2" >$L/gate_$1.log 2>&1
  GATE[$1]=$?
  echo "   gate $1 rc ${GATE[$1]}"; grep -E "^\[  (PASSED|FAILED)|Failure" $L/gate_$1.log | head -8
  cat $L/gate_$1.log >>$O/gates.log
}
gate fp8lean 'GpuAttention.Fp8DirectOperands:GpuAttention.Fp8KvWithDescale'
gate topk 'TopkGpu.BinListSelectGivesTheSameBits'
run() {  # log timeout command...: skipped when less than its timeout is left
  local log=$1 t=$2; shift 2
  if [ "$(left)" -lt "$t" ]; then echo "skip (deadline): $*"; return; fi
  step "$*"
  timeout "$t" "$@" >>$O/$log 2>&1
  echo "   rc $?" | tee -a $O/$log
}
[ ${GATE[fp8lean]} = 0 ] && run bench_fp8lean.log 45 $BA --quick '^same fp8lean'
[ ${GATE[topk]} = 0 ] && run bench_topk.log 50 $BT --quick 's8 bin A/B'
EXCL=''
[ ${GATE[topk]} = 0 ] || EXCL+=':TopkGpu.*'
[ ${GATE[fp8lean]} = 0 ] || EXCL+=':GpuAttention.*'
step "suite (excluded: ${EXCL:-none})"
$T --gtest_filter="*-${EXCL#:}" --gtest_list_tests | awk '/^[^ ]/{suite=$1; next} {print suite $1}' >$L/names.txt
: >$L/gpu_tests.log; p=0; f=0
for suite in $(sed 's/\..*//' $L/names.txt | uniq); do
  [ "$(left)" -lt 20 ] && { echo "deadline: suites from $suite on not run"; break; }
  filter=$(grep "^$suite\." $L/names.txt | paste -sd: -)
  lim=150; [ "$(left)" -lt 170 ] && lim=$(( $(left) - 15 ))
  ATTNSERVE_SEED=9 timeout $lim $T --gtest_filter="$filter" >$L/suite.log 2>&1; rc=$?
  cat $L/suite.log >>$L/gpu_tests.log
  sp=$(grep -Eo '^\[  PASSED  \] [0-9]+' $L/suite.log | grep -Eo '[0-9]+$' || true)
  sf=$(grep -Eo '^\[  FAILED  \] [0-9]+ test' $L/suite.log | grep -Eo '[0-9]+' | head -1 || true)
  p=$((p + ${sp:-0})); f=$((f + ${sf:-0}))
  [ $rc -ne 0 ] && [ -z "$sf" ] && { f=$((f + 1)); echo "  suite $suite: rc $rc (crashed or timed out)"; }
done
cp $L/gpu_tests.log $O/
grep -E "^\[  FAILED  \]" $L/gpu_tests.log | grep -v "listed below" | head -20
echo "== suite: $p passed, $f failed"
step "end"
