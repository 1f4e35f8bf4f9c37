#!/usr/bin/env bash
# Session 7 device call D2 (lead, warm after D1: same build-gpu): the A/B rows of the session-7 opt-in variants,
# sanitizers of the new code, profiles; steps in priority order, each skipped past DEADLINE seconds.
# Usage on the device: DEADLINE=<s> bash .device/call_d2.sh <quad_rc>   (logs to $OUT)
set -u
cd "$(dirname "$0")/.."
O=${OUT:?}
QUAD_RC=${1:-1}
T0=$SECONDS
DL=${DEADLINE:-300}
left() { echo $((DL - (SECONDS - T0))); }
step() { echo "== $(($SECONDS - T0)) s: $*"; }
B=build-gpu
T=$B/attnserve_gpu_tests
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
step "bench build"
timeout 120 cmake --build $B -j 16 --target bench_attention bench_indexer bench_topk bench_tree >/tmp/d2_build.log 2>&1 ||
  { tail -n 20 /tmp/d2_build.log; grep -m 10 error /tmp/d2_build.log; }
run() {  # log timeout command...: skipped when less than its timeout is left
  local log=$1 t=$2; shift 2
  if [ "$(left)" -lt "$t" ]; then echo "skip (deadline): $*"; return; fi
  step "$*"
  timeout "$t" "$@" >>$O/$log 2>&1
  echo "   rc $?" | tee -a $O/$log
}
BI=$B/bench/bench_indexer BT=$B/bench/bench_topk BA=$B/bench/bench_attention
if [ "$QUAD_RC" = 0 ]; then
  for f in 'prefill 8192' 'prefill 4096' 'b 128 ctx 32K heads 64 next_n 4' 'b 128 ctx 32K heads 64 next_n 2'; do
    run bench_indexer.log 30 $BI --quick "$f"
  done
fi
run bench_topk.log 80 $BT --quick 's7 A/B'
run bench_ring.log 80 $BA --quick '^same ring'
run sanitizer_memcheck.log 60 env ATTNSERVE_SEED=1 $CS --tool memcheck --error-exitcode 9 $T --gtest_filter='GpuMerge.*:GpuAttention.RingCountersAcrossDepthsAndPages'
run sanitizer_racecheck.log 60 env ATTNSERVE_SEED=1 ATTNSERVE_TOPK_S7=1 $CS --tool racecheck --error-exitcode 9 $T --gtest_filter='TopkGpu.ClusterGatherOverflowGoesToTheFallback:TopkGpu.TopValuesOutsideTheSample'
run bench_tree.log 40 $B/bench/bench_tree --quick
run bench_mla.log 30 $BA --quick 'mla decode b16 hq128 32K|mla decode b128 hq128 8K|decode b1x32K|same b1x32K|same b4x32K'
if [ "$QUAD_RC" = 0 ]; then
  run ncu_indexer_quad.txt 45 $NCU --clock-control none --kernel-name-base mangled --section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section SourceCounters -k 'regex:indexer_ws_kernelILi4ELb0ELb0ELb1ELi12E' -c 1 $BI --quick 'prefill 8192'
  run sanitizer_racecheck_indexer.log 60 env ATTNSERVE_SEED=1 $CS --tool racecheck --error-exitcode 9 $T --gtest_filter=IndexerSm90Ragged.RandomWindowsMatchCpu
fi
run ncu_topk_lean.txt 40 $NCU --clock-control none --set full -k regex:topk_sampled -s 2 -c 1 $BT --quick 'topk 2048 of 4K x 8192 rows normal [s7 A/B: lean emit + lean select]'
step "end"
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" $O/sanitizer_*.log
