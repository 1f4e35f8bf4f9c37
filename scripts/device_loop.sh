#!/usr/bin/env bash
# One short device call for kernel work (scripts/gpu_check.sh stays the full check): build the GPU
# tests and bench_$BENCH_NAME for the H200 alone (sm_90 + sm_90a: the H200 runs the sm_90 copy of the
# portable kernels, an sm_80 copy would double that part of the build) or take binaries built on
# another machine (BIN), run the GPU test suites of GTEST_FILTER (one process per suite, each under
# SUITE_TIMEOUT), the bench's cases of each BENCH_FILTER, ncu profiles of NCU_CASES and a racecheck run
# of RACECHECK_FILTER. Every step has a time limit (a hung kernel costs only that much); DEADLINE_S skips
# later steps. Logs under OUT: device_loop.log (everything), gpu_tests.log, bench.log, ncu_N.txt and
# ncu_hot_N.txt, racecheck.log (+ build.log when the build fails).
# The indexer's loop (was scripts/indexer_loop.sh): GTEST_FILTER='*Indexer*' BENCH_NAME=indexer
#   BENCH_FILTER='prefill 8192;heads 64 next_n 4;b 128 ctx 32K heads 64 next_n 2'
#   NCU_CASES='prefill 8192@indexer_ws_kernelILi4ELb0ELb0ELb1ELi0E' NCU_ARGS='--clock-control none
#   --kernel-name-base mangled' RACECHECK_FILTER=IndexerSm90Ragged.CausalPrefillWindows
#
# Environment:
#   OUT           where logs go (default /tmp/device_loop)
#   DEPS          googletest/ (source), dlpack/, cutlass/include (scripts/prepare_device_deps.sh), used
#                 where the system lacks them
#   BUILD_DIR     build folder (default build-gpu); CMAKE_EXTRA: more configure flags (e.g. -DATTNSERVE_NCCL=OFF)
#   BIN           run prebuilt binaries instead: a folder with attnserve_gpu_tests and bench_$BENCH_NAME
#                 (and libcudart.so.13, libgomp.so.1 as a fallback). Build them on the CPU machine with
#                 `cmake -S . -B build-sm90 -DATTNSERVE_CUDA=ON -DATTNSERVE_CUDA_ARCHS=90 -DATTNSERVE_BENCH=ON
#                 -DATTNSERVE_BENCH_CUDA_ARCHS=90 -DATTNSERVE_NCCL=OFF && cmake --build build-sm90 --target
#                 attnserve_gpu_tests bench_attention` (NCCL off: the device's libnccl is elsewhere)
#   GTEST_FILTER  the test suites (default 'GpuAttentionSm90.*:WgmmaSm90.*:GpuAttention.*'; 'none': no tests)
#   SUITE_TIMEOUT seconds per suite (60)
#   BENCH_NAME    which bench/cuda/bench_<name>.cu (default attention)
#   BENCH_FILTER  the bench's name filters, ';' between runs (default 'prefill;extend'; 'none': no
#                 bench); within one filter bench_attention takes '|' between alternatives and '^' for a prefix
#   BENCH_TIMEOUT seconds per bench run (60)
#   PTXAS_KERNEL  print ptxas' register and spill lines of the kernels matching this regex (a build)
#   NCU_CASES     bench case names to profile, ';' between them (default none): one ncu run each, of the
#                 (NCU_SKIP + 1)-th launch (default 2) of a kernel matching NCU_KERNEL (regex, default
#                 'attention'; a case 'name@regex' has its own), with NCU_ARGS (default '--clock-control
#                 none'; '--kernel-name-base mangled' to match template arguments), sections NCU_SECTIONS
#   RACECHECK_FILTER  tests to run under compute-sanitizer racecheck (default none), SAN_TIMEOUT seconds (60)
#   DEADLINE_S    skip benches and profiles past it (seconds since the start; default none)
#   ATTNSERVE_COMMIT  commit id for the log header
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/device_loop}
mkdir -p "$OUT"
exec > >(tee "$OUT/device_loop.log") 2>&1
echo "== device_loop  $(date -u +%FT%TZ)  commit ${ATTNSERVE_COMMIT:-?}  $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>/dev/null | head -1)"
FILTER=${GTEST_FILTER:-GpuAttentionSm90.*:WgmmaSm90.*:GpuAttention.*}
BENCH_NAME=${BENCH_NAME:-attention}
DEADLINE_S=${DEADLINE_S:-0}
past_deadline() { [ "$DEADLINE_S" -gt 0 ] && [ $SECONDS -ge "$DEADLINE_S" ]; }

# ---- build (or prebuilt binaries)
if [ -n "${BIN:-}" ]; then
  BIN=$(cd "$BIN" && pwd)
  export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64:$BIN"
  T=$BIN/attnserve_gpu_tests BENCH_BIN=$BIN/bench_$BENCH_NAME
  ldd "$T" | grep -E "not found" && echo "== missing libraries"
else
  B=${BUILD_DIR:-build-gpu}
  T=$B/attnserve_gpu_tests BENCH_BIN=$B/bench/bench_$BENCH_NAME
  GEN=()
  command -v ninja >/dev/null && GEN=(-G Ninja)
  read -r -a EXTRA <<<"${CMAKE_EXTRA:-}"
  if [ ! -f /usr/include/gtest/gtest.h ] && [ -n "${DEPS:-}" ] && [ -d "$DEPS/googletest" ]; then
    cmake -S "$DEPS/googletest" -B /tmp/gtest-build "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF \
      -DCMAKE_INSTALL_PREFIX=/tmp/deps -DCMAKE_POSITION_INDEPENDENT_CODE=ON >/dev/null &&
      cmake --build /tmp/gtest-build -j "$(nproc)" >/dev/null && cmake --install /tmp/gtest-build >/dev/null
    EXTRA+=(-DCMAKE_PREFIX_PATH=/tmp/deps)
  fi
  [ -n "${DEPS:-}" ] && [ -f "$DEPS/dlpack/dlpack.h" ] && EXTRA+=(-DDLPACK_INCLUDE_DIR="$DEPS")
  [ -n "${DEPS:-}" ] && [ -f "$DEPS/cutlass/include/cute/tensor.hpp" ] && EXTRA+=(-DATTNSERVE_CUTLASS_DIR="$DEPS/cutlass/include")
  t0=$SECONDS
  if ! { cmake -S . -B "$B" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DATTNSERVE_CUDA=ON -DATTNSERVE_CUDA_ARCHS=90 \
           -DATTNSERVE_BENCH=ON -DATTNSERVE_BENCH_CUDA_ARCHS=90 -DATTNSERVE_DEMO=OFF "${EXTRA[@]}" >"$OUT/build.log" 2>&1 &&
         cmake --build "$B" -j "$(nproc)" --target attnserve_gpu_tests "bench_$BENCH_NAME" >>"$OUT/build.log" 2>&1; }; then
    echo "== build FAILED"; grep -E -m 30 "error|FAILED" "$OUT/build.log"; exit 1
  fi
  echo "== build $((SECONDS - t0)) s"
  grep -E "C7520|C7508" "$OUT/build.log" | head -5
  grep -E "spill" "$OUT/build.log" | grep -v " 0 bytes spill" | head -5
  [ -n "${PTXAS_KERNEL:-}" ] && grep -E -A2 "$PTXAS_KERNEL" "$OUT/build.log" | grep -E "registers|spill" | head -8
  rm -f "$OUT/build.log"
fi

# ---- tests: one process per suite
if [ "$FILTER" != none ]; then
  t0=$SECONDS
  : >"$OUT/gpu_tests.log"
  # Each suite runs the tests of FILTER it holds, named one by one (FILTER may have wildcards).
  list=$("$T" --gtest_filter="$FILTER" --gtest_list_tests)
  for suite in $(echo "$list" | awk '/^[^ ]/{print $1}' | sed 's/\.$//'); do
    filter=$(echo "$list" | awk -v s="$suite." '/^[^ ]/{on = ($1 == s); next} on {print s $1}' | paste -sd: -)
    timeout "${SUITE_TIMEOUT:-60}" "$T" --gtest_filter="$filter" >>"$OUT/gpu_tests.log" 2>&1 || echo "  suite $suite: rc $?"
  done
  echo "== tests $((SECONDS - t0)) s: $(grep -c '^\[       OK \]' "$OUT/gpu_tests.log") ok," \
    "$(grep -cE "^\[  FAILED  \] [A-Za-z].*ms\)$" "$OUT/gpu_tests.log") failed," \
    "$(grep -c '^\[  SKIPPED \]' "$OUT/gpu_tests.log") skipped"
  grep -E '^\[  FAILED  \] [A-Z]' "$OUT/gpu_tests.log"
  grep -B2 -A6 -E "Failure" "$OUT/gpu_tests.log" | head -60
fi

# ---- benches: one run per filter, all into bench.log (each run starts with the copy ceiling)
IFS=';' read -r -a bench_filters <<<"${BENCH_FILTER:-prefill;extend}"
[ "${BENCH_FILTER:-}" = none ] && bench_filters=()
: >"$OUT/bench.log"
for f in "${bench_filters[@]}"; do
  if past_deadline; then echo "== bench '$f' skipped (DEADLINE_S)"; continue; fi
  t0=$SECONDS
  timeout "${BENCH_TIMEOUT:-60}" "$BENCH_BIN" "$f" >>"$OUT/bench.log" 2>&1
  echo "== bench '$f' rc $? in $((SECONDS - t0)) s"
done
[ ${#bench_filters[@]} -gt 0 ] && grep -E "^(device|copy|prefill|extend|decode|verify|sweep|ab |same|ctx|page|repeat|hd |indexer)" \
  "$OUT/bench.log" | cut -c1-150

# ---- ncu: one profile per case
sections=()
for s in ${NCU_SECTIONS:-SpeedOfLight ComputeWorkloadAnalysis MemoryWorkloadAnalysis WarpStateStats SchedulerStats \
  InstructionStats Occupancy LaunchStats SourceCounters}; do sections+=(--section "$s"); done
IFS=';' read -r -a ncu_cases <<<"${NCU_CASES:-}"
n=0
for c in "${ncu_cases[@]}"; do
  [ -z "$c" ] && continue
  n=$((n + 1))
  kernel=${NCU_KERNEL:-attention}
  [[ "$c" == *@* ]] && kernel=${c#*@} c=${c%%@*}
  if past_deadline || ! command -v ncu >/dev/null; then echo "== ncu $n skipped (DEADLINE_S or no ncu)"; continue; fi
  t0=$SECONDS
  read -r -a nargs <<<"${NCU_ARGS:---clock-control none}"
  timeout 90 ncu "${nargs[@]}" "${sections[@]}" --import-source no \
    -k "regex:$kernel" --launch-skip "${NCU_SKIP:-2}" --launch-count 1 -o /tmp/prof_$n -f \
    "$BENCH_BIN" "$c" >/tmp/ncu_run_$n.txt 2>&1
  ncu -i /tmp/prof_$n.ncu-rep --page details --print-details all >"$OUT/ncu_$n.txt" 2>&1
  ncu -i /tmp/prof_$n.ncu-rep --page source --csv --print-source sass >/tmp/src_$n.csv 2>&1
  python3 scripts/ncu_hot.py /tmp/src_$n.csv 60 >"$OUT/ncu_hot_$n.txt" 2>&1
  echo "== ncu $n ($c) in $((SECONDS - t0)) s"
  grep -E "Duration|DRAM Throughput|Memory Throughput|Issue Slots|Eligible Warps|Achieved Occupancy|Executed Instructions  |Warp Cycles Per Issued|Registers Per" \
    "$OUT/ncu_$n.txt" | head -16
done

# ---- racecheck
if [ -n "${RACECHECK_FILTER:-}" ]; then
  if past_deadline; then echo "== racecheck skipped (DEADLINE_S)"; else
    t0=$SECONDS
    timeout "${SAN_TIMEOUT:-60}" compute-sanitizer --tool racecheck --racecheck-report hazard \
      "$T" --gtest_filter="$RACECHECK_FILTER" >"$OUT/racecheck.log" 2>&1
    echo "== racecheck rc $? in $((SECONDS - t0)) s"
    tail -4 "$OUT/racecheck.log"
  fi
fi
echo "== total $SECONDS s"
true
