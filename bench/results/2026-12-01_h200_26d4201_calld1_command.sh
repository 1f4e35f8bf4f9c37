#!/usr/bin/env bash
# Session 7 device call D1 (lead): build, hang gates of the new opt-in kernels, then the GPU suites the changes since
# call C touch (every suite but the Hopper prefill's heavy cases and the sparse MLA suites, which ran on unchanged code).
# Usage on the device: bash .device/call_d1.sh <commit>   (logs to $OUT)
set -u
cd "$(dirname "$0")/.."
O=${OUT:?}
C=${1:-?}
L=/tmp/d1; mkdir -p $L
T0=$SECONDS
step() { echo "== $(($SECONDS - T0)) s: $*"; }
run_check() {  # name filter suite_timeout overall_timeout
  OUT=$L/$1 DEPS=$PWD/.device/deps ATTNSERVE_COMMIT=$C SANITIZER=0 BENCH=none SUITE_TIMEOUT=$3 GTEST_FILTER="$2" \
    timeout $4 scripts/gpu_check.sh >$L/$1.stdout 2>&1
  local rc=$?
  cp $L/$1/gpu_tests.log $O/gpu_tests_$1.log 2>/dev/null
  grep -E "^\[  FAILED  \]|suite .* rc|passed, .* failed|build " $L/$1.stdout | head -20
  return $rc
}
step "build + gate: indexer quad"
run_check gate_quad 'IndexerSm90PagedEdge.QuadWarpgroupsSmallPagesAndSpans:IndexerSm90Ragged.RandomWindowsMatchCpu:IndexerSm90QScale.*' 45 200
quad_rc=$?
step "quad gate rc $quad_rc"
EXCL='GpuAttentionSm90.Prefill*:GpuAttentionSm90.HeadDims*:GpuAttentionSm90.Gqa*:GpuAttentionSm90.TmaBox*:GpuAttentionSm90.Sliding*:GpuAttentionSm90.StaleMax*:GpuAttentionSm90.F16*:GpuAttentionSm90.Extend*:SparseMla*:WgmmaSm90.*:CuteSm90.*'
[ $quad_rc -ne 0 ] && EXCL+=':*IndexerSm90*'
run_check main "*-$EXCL" 100 $((${DEADLINE:-560} - (SECONDS - T0)))
step "main rc $?"
echo "quad_rc=$quad_rc" >$O/gates.txt
