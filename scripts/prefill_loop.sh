#!/usr/bin/env bash
# Device loop for the Hopper prefill work: gpu_check.sh (build, the selected GPU tests, the prefill
# bench), then the extend cases and one ncu profile of a chosen kernel (details with stall reasons,
# and the hottest SASS lines by stall samples). Logs under $OUT.
#   NCU_KERNEL  regex of the kernel to profile (default attention_sm90_ws); NCU_CASE  bench case name
#   NCU=0 skips the profile
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?}"
# Short limits: a hung kernel (a deadlocked pipeline) otherwise eats the whole device call.
SUITE_TIMEOUT=${SUITE_TIMEOUT:-45} BENCH_TIMEOUT=${BENCH_TIMEOUT:-120} \
  BENCHES=attention BENCH_FILTER=${BENCH_FILTER:-prefill} SANITIZER=${SANITIZER:-0} scripts/gpu_check.sh
B=${BUILD_DIR:-build-gpu}
[ -x "$B/bench_attention" ] && [ "${EXTEND:-1}" != 0 ] && timeout 60 "$B/bench_attention" extend 2>&1 | tee "$OUT/bench_extend.log"
if [ "${NCU:-1}" != 0 ] && [ -x "$B/bench_attention" ]; then
  timeout 120 ncu --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
    --section SchedulerStats --section InstructionStats --section SourceCounters --import-source no \
    -k "regex:${NCU_KERNEL:-attention_sm90_ws}" --launch-skip 2 --launch-count 1 -o /tmp/prof -f \
    "$B/bench_attention" "${NCU_CASE:-prefill b1 s8K hq32 hkv8 d128 causal sm90pp}" >"$OUT/ncu_run.txt" 2>&1
  ncu -i /tmp/prof.ncu-rep --page details --print-details all >"$OUT/ncu.txt" 2>&1
  ncu -i /tmp/prof.ncu-rep --page source --csv --print-source sass >/tmp/src.csv 2>&1
  python3 scripts/ncu_hot.py /tmp/src.csv 60 >"$OUT/ncu_hot.txt" 2>&1
  gzip -c /tmp/src.csv >"$OUT/ncu_source.csv.gz"
  grep -E "Duration|Issue Slots|Eligible Warps|highest-utilized|Executed Instructions  |Warp Cycles Per Issued|Registers" "$OUT/ncu.txt" | head -20
  head -70 "$OUT/ncu_hot.txt" | cut -c1-200
fi
# at most 8 files come back: drop the duplicates
rm -f "$OUT/bench.log" "$OUT/ncu_run.txt"
grep -q "build (sm.*PASS" "$OUT/gpu_check.log" && rm -f "$OUT/build.log"
true
