#!/usr/bin/env bash
# Session 7 device call C (lead): the merged tree with the new defaults + the two s6 branches.
# Usage on the device: bash .device/call_c.sh <commit>   (logs to $OUT)
set -u
cd "$(dirname "$0")/.."
O=${OUT:?}
C=${1:-?}
L=/tmp/c; mkdir -p $L
T0=$SECONDS
left() { echo $((${DEADLINE:-540} - (SECONDS - T0))); }
step() { echo "== $(($SECONDS - T0)) s: $*"; }
B=build-gpu
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
# 1. build + the suites the changes touch (one process per suite, each under SUITE_TIMEOUT)
step "gpu_check tests"
OUT=$L DEPS=$PWD/.device/deps ATTNSERVE_COMMIT=$C SANITIZER=0 BENCH=none SUITE_TIMEOUT=100 \
  GTEST_FILTER="${TESTS:-GpuMlaSm90.*:GpuAttention.*:GpuAttentionSm90.*:Indexer*:*Indexer*:TopkGpu.*:BackendGpu.*:PlanGpu.*:SparseGpuGraph.*}" \
  timeout 330 scripts/gpu_check.sh >$L/check_stdout.log 2>&1
step "tests done rc $?"
cp $L/gpu_tests.log $O/gpu_tests.log 2>/dev/null
tail -n 6 $L/check_stdout.log
grep -E "^\[  FAILED  \]|suite .* rc" $L/check_stdout.log | head -20
seesaw_ok=0
grep -q "OK \] GpuMlaSm90\." $L/gpu_tests.log && ! grep -q "FAILED  \] GpuMlaSm90" $L/gpu_tests.log &&
  ! grep -q "suite GpuMlaSm90:" $L/check_stdout.log && seesaw_ok=1
step "seesaw gate $seesaw_ok"
# 2. benches
step "bench build"
cmake --build $B -j 16 --target bench_attention bench_indexer bench_topk >$L/bench_build.log 2>&1 || tail -n 20 $L/bench_build.log
BA=$B/bench/bench_attention
BI=$B/bench/bench_indexer
BT=$B/bench/bench_topk
run_bench() {  # timeout binary filter...
  local t=$1; shift
  [ "$(left)" -lt 20 ] && { echo "skip (deadline): $*"; return; }
  [ "$t" -gt "$(left)" ] && t=$(left)
  timeout "$t" "$@" --quick 2>&1 | tee -a $O/bench.log | grep -vE "^\s*$" | cut -c1-150 | tail -n 60 >/dev/null
  echo "   rc ${PIPESTATUS[0]} ($*)"
}
: >$O/bench.log
[ $seesaw_ok = 1 ] && run_bench 45 $BA 'mla seesaw'
run_bench 70 $BA '^same lanes'
run_bench 50 $BI
run_profile() {  # name binary filter kernel-regex [sections...]
  local n=$1 bin=$2 f=$3 k=$4; shift 4
  [ "$(left)" -lt 30 ] && { echo "skip (deadline): ncu $n"; return; }
  local sec=(--set full); [ $# -gt 0 ] && sec=("$@")
  timeout 40 $NCU --clock-control none "${sec[@]}" -k "regex:$k" -s 2 -c 1 $bin --quick "$f" >$O/ncu_$n.txt 2>&1
  echo "   ncu $n rc $?"
}
run_profile indexer_ragged8k $BI 'indexer ragged causal prefill 8192 tokens heads 64' indexer_ws
run_profile indexer_paged_n4 $BI 'indexer paged b 128 ctx 32K heads 64 next_n 4 page 64' indexer_ws
run_bench 50 $BT
run_profile topk_8192x4k $BT 'topk 2048 of 4K x 8192 rows normal' topk_sampled
run_profile topk_128x64k $BT 'topk 2048 of 64K x 128 rows normal' topk_sampled
run_bench 40 $BA 'hd prefill'
run_profile decode_pool4x $BA 'same b64x8K hq32 hkv8 page16 pool4x' attention --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Chart --section Occupancy --section WarpStateStats
run_profile decode_pool1x $BA '^same b64x8K hq32 hkv8 page16' attention --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Chart --section Occupancy --section WarpStateStats
step "end"
grep -E "^(mla seesaw|same lanes|indexer|topk|hd prefill)" $O/bench.log | cut -c1-150 | head -150
