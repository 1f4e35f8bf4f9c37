#!/usr/bin/env bash
# Session 8 device call E1 (lead): the head's whole GPU suite (gpu_check, no sanitizers), then the quick benches of
# the session-7 defaults as defaults, each skipped past DEADLINE seconds.
# Usage on the device: DEADLINE=<s> bash .device/call_e1.sh <commit>   (logs to $OUT)
set -u
cd "$(dirname "$0")/.."
O=${OUT:?}
C=${1:-?}
T0=$SECONDS
DL=${DEADLINE:-580}
left() { echo $((DL - (SECONDS - T0))); }
step() { echo "== $(($SECONDS - T0)) s: $*"; }
B=build-gpu
step "gpu_check (tests only)"
OUT=/tmp/gc DEPS=$PWD/.device/deps ATTNSERVE_COMMIT=$C SANITIZER=0 BENCH=none SUITE_TIMEOUT=150 \
  timeout $(( $(left) - 110 )) scripts/gpu_check.sh >/tmp/gc_stdout.log 2>&1
echo "gpu_check rc $?"
cp /tmp/gc/gpu_check.log /tmp/gc/gpu_tests.log $O/ 2>/dev/null
tail -n 12 /tmp/gc_stdout.log
step "bench build"
timeout $(( $(left) - 60 )) cmake --build $B -j 16 --target bench_attention bench_indexer bench_topk >/tmp/e1_build.log 2>&1 ||
  { tail -n 20 /tmp/e1_build.log; grep -m 10 error /tmp/e1_build.log; }
run() {  # log timeout command...: skipped when less than its timeout is left
  local log=$1 t=$2; shift 2
  if [ "$(left)" -lt "$t" ]; then echo "skip (deadline): $*"; return; fi
  step "$*"
  timeout "$t" "$@" >>$O/$log 2>&1
  echo "   rc $?" | tee -a $O/$log
}
BI=$B/bench/bench_indexer BT=$B/bench/bench_topk BA=$B/bench/bench_attention
run bench_topk.log 30 $BT --quick 's7 A/B'
run bench_ring.log 25 $BA --quick '^same ring'
for f in 'prefill 8192' 'b 128 ctx 32K heads 64 next_n 4' 'b 128 ctx 32K heads 64 next_n 2'; do
  run bench_indexer.log 12 $BI --quick "$f"
done
step "end"
