#!/usr/bin/env bash
# GPU check, run on a machine with an NVIDIA GPU (the device machine): builds attnserve with CUDA
# using all cores, runs the GPU test suite (every CUDA op against the CPU oracle, CUDA-graph
# replays, raw and planner-driven; the planners' own GPU test), compute-sanitizer memcheck and
# racecheck on a reduced suite, and the memory-bound
# benchmarks. Ends with a short table and one line `N passed, N failed`.
#
# Environment:
#   OUT         where logs go (default: build-gpu/logs)
#   DEPS        folder with googletest/ (source), dlpack/dlpack.h and cutlass/include (CUTLASS/CuTe
#               headers), used when the system lacks them (scripts/prepare_device_deps.sh makes it)
#   BENCH       full (default) | quick | none
#   BENCHES     which bench/cuda/bench_<name>.cu to build and run (default: attention topk indexer sparse tree)
#   BENCH_FILTER  only the cases whose name contains this (e.g. BENCHES=attention BENCH_FILTER=mla)
#   SANITIZER   1 (default) | 0
#   GTEST_FILTER  restricts the main GPU test run (default: all)
#   MEMCHECK_FILTER, RACECHECK_FILTER  replace the sanitizer runs' test filters (default: the lists below)
#   ATTNSERVE_COMMIT  commit id for the log header when this is not a git checkout
#   SUITE_TIMEOUT, SAN_TIMEOUT, BENCH_TIMEOUT  seconds per test suite / sanitizer run / bench (120, 300, 240)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
JOBS=$(nproc)
BUILD=${BUILD_DIR:-build-gpu}
OUT=${OUT:-$BUILD/logs}
mkdir -p "$OUT" "$BUILD"
BENCH=${BENCH:-full}
SANITIZER=${SANITIZER:-1}
COMMIT=${ATTNSERVE_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
GPU=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
LOG=$OUT/gpu_check.log
exec > >(tee "$LOG") 2>&1
echo "== attnserve gpu_check  date $(date -u +%Y-%m-%dT%H:%M:%SZ)  commit $COMMIT  gpu ${GPU:-none}  cores $JOBS"

declare -a NAMES RESULTS
record() { NAMES+=("$1"); RESULTS+=("$2"); }

# ---- dependencies the build needs (GoogleTest, DLPack and CUTLASS/CuTe headers) -----------------
CMAKE_EXTRA=()
if [ ! -f /usr/include/gtest/gtest.h ] && [ ! -f /usr/local/include/gtest/gtest.h ]; then
  if [ -n "${DEPS:-}" ] && [ -d "$DEPS/googletest" ]; then
    echo "== building GoogleTest from $DEPS/googletest"
    cmake -S "$DEPS/googletest" -B /tmp/gtest-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF \
      -DCMAKE_INSTALL_PREFIX=/tmp/deps -DCMAKE_POSITION_INDEPENDENT_CODE=ON >/dev/null &&
      cmake --build /tmp/gtest-build -j "$JOBS" >/dev/null && cmake --install /tmp/gtest-build >/dev/null ||
      { echo "GoogleTest build failed"; exit 1; }
    CMAKE_EXTRA+=(-DCMAKE_PREFIX_PATH=/tmp/deps)
  else
    echo "GoogleTest not found: install libgtest-dev or set DEPS"; exit 1
  fi
fi
if [ ! -f /usr/include/dlpack/dlpack.h ] && [ -n "${DEPS:-}" ] && [ -f "$DEPS/dlpack/dlpack.h" ]; then
  CMAKE_EXTRA+=(-DDLPACK_INCLUDE_DIR="$DEPS")
fi
# CUTLASS/CuTe: DEPS's copy when there is one (the GPU machine has no pip); else CMake asks python.
if [ -n "${DEPS:-}" ] && [ -f "$DEPS/cutlass/include/cute/tensor.hpp" ]; then
  CMAKE_EXTRA+=(-DATTNSERVE_CUTLASS_DIR="$DEPS/cutlass/include")
fi
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)

# ---- build ---------------------------------------------------------------------------------------
t0=$(date +%s)
# ATTNSERVE_BENCH: the bench/cuda targets (built below); for the H200 alone, so 90 (sm_90a) only.
if cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DATTNSERVE_CUDA=ON \
     -DATTNSERVE_CUDA_ARCHS="80;90" -DATTNSERVE_BENCH=ON -DATTNSERVE_BENCH_CUDA_ARCHS=90 \
     "${CMAKE_EXTRA[@]}" >"$OUT/configure.log" 2>&1 &&
   cmake --build "$BUILD" -j "$JOBS" --target attnserve_gpu_tests >"$OUT/build.log" 2>&1; then
  record "build (sm_80 + sm_90, -j$JOBS, $(( $(date +%s) - t0 )) s)" PASS
  rm -f "$OUT/configure.log"
else
  record "build" FAIL
  tail -n 40 "$OUT/configure.log" "$OUT/build.log"
fi
grep -E "spill" "$OUT/build.log" | grep -v " 0 bytes spill" | head -5
# Hopper kernels: wgmma serialized by ptxas (C7520) or setmaxnreg ignored (C7508) cost speed silently.
grep -E "C7520|C7508" "$OUT/build.log" | head -5

# ---- GPU tests -----------------------------------------------------------------------------------
TESTS=$BUILD/attnserve_gpu_tests
gt_passed=0; gt_failed=0
if [ -x "$TESTS" ]; then
  # One process per test suite, each under its own time limit: a kernel that hangs costs its suite,
  # not the run, and the log says which suite it was.
  t0=$(date +%s)
  : >"$OUT/gpu_tests.log"
  # "Suite.Test" names selected by GTEST_FILTER, then one filter per suite listing exactly its tests.
  "$TESTS" --gtest_filter="${GTEST_FILTER:-*}" --gtest_list_tests |
    awk '/^[^ ]/{suite=$1; next} {print suite $1}' >"$OUT/test_names.txt"
  suites=$(sed 's/\..*//' "$OUT/test_names.txt" | uniq)
  test_rc=0; gt_passed=0; gt_failed=0; gt_skipped=0
  for suite in $suites; do
    filter=$(grep "^$suite\." "$OUT/test_names.txt" | paste -sd: -)
    timeout "${SUITE_TIMEOUT:-120}" "$TESTS" --gtest_filter="$filter" >"$OUT/suite.log" 2>&1
    rc=$?
    cat "$OUT/suite.log" >>"$OUT/gpu_tests.log"
    p=$(grep -Eo '^\[  PASSED  \] [0-9]+' "$OUT/suite.log" | grep -Eo '[0-9]+$' || true)
    f=$(grep -Eo '^\[  FAILED  \] [0-9]+ test' "$OUT/suite.log" | grep -Eo '[0-9]+' | head -1 || true)
    k=$(grep -Eo '^\[  SKIPPED \] [0-9]+' "$OUT/suite.log" | grep -Eo '[0-9]+$' || true)
    gt_passed=$((gt_passed + ${p:-0})); gt_failed=$((gt_failed + ${f:-0})); gt_skipped=$((gt_skipped + ${k:-0}))
    if [ "$rc" -ne 0 ]; then
      test_rc=$rc
      [ -z "$f" ] && { gt_failed=$((gt_failed + 1)); echo "  suite $suite: rc $rc (crashed or timed out after ${SUITE_TIMEOUT:-120} s)"; }
    fi
  done
  rm -f "$OUT/suite.log" "$OUT/test_names.txt"
  echo "== gpu tests: rc $test_rc, $(( $(date +%s) - t0 )) s"
  grep -E '^\[ +(OK|FAILED|SKIPPED) +\]' "$OUT/gpu_tests.log" | grep -v "listed below" | sed 's/^/  /'
  grep -B2 -A8 -E "Failure|error:" "$OUT/gpu_tests.log" | head -60
  [ "${gt_skipped:-0}" -gt 0 ] && echo "  ($gt_skipped skipped)"
  record "gpu tests ($gt_passed passed, ${gt_failed:-0} failed, rc $test_rc)" "$([ "${gt_failed:-0}" -eq 0 ] && [ "$gt_passed" -gt 0 ] && echo PASS || echo FAIL)"
fi

# ---- compute-sanitizer on a reduced suite ----------------------------------------------------------
san_runs=0; san_fail=0
if [ "$SANITIZER" = 1 ] && [ -x "$TESTS" ] && command -v compute-sanitizer >/dev/null; then
  DEFAULT_MEMCHECK_FILTER='GpuKvStore.*:GpuMerge.*:GpuAttention.EdgeCases:GpuAttention.DecodeHeadDims64And256:GpuAttention.Fp8KvWithDescale:GpuAttention.ForcedSplitCounts:GpuMla.EdgeCases:GpuMla.ForcedSplitsAndDeterministic'
  DEFAULT_MEMCHECK_FILTER+=':WgmmaSm90.*:CuteSm90.*:GpuAttentionSm90.EdgeCases:GpuAttentionSm90.F16AndHeadDim64'
  DEFAULT_MEMCHECK_FILTER+=':TopkGpu.HeavyTiesLowerPositionWins:TopkGpu.TransformPrefillFindsTheRequest:TopkGpu.DeviceLengthsAreClampedToTheRow:TopkGpu.SampledRegimeBoundariesAndAlignment:TopkGpu.SampledPathAdversarialRows:IndexerPagedGpuEdge.ZeroLenKvAndShortRequests:IndexerPagedGpuEdge.PageIdsOutsideThePoolAreSkipped:IndexerRaggedGpu.CausalPrefillWindows:QuantizeFp8Gpu.*:SparseMlaGpuEdges.*:SparseMlaGpuSplits.AllIndicesInvalidInAChunk:GpuGatherIndexK.*'
  DEFAULT_MEMCHECK_FILTER+=':GpuMlaSm90.SplitAndUnsplit:GpuMlaSm90.WindowSoftcapAndEdgeCases:IndexerSm90PagedEdge.*:IndexerSm90Ragged.CausalPrefillWindows:SparseMlaGpuSm90.InvalidRepeatedSlotsAndEmptyRows:SparseMlaGpuSm90.Fp8ZeroTiles'
  DEFAULT_MEMCHECK_FILTER+=':GpuAttentionSm90Split.Gate:TopkGpu.StreamingFilterGivesTheSameBits'
  # (Top-k checks run 8 kernel choices each, ~20-30 s apiece under racecheck: SampledRegimeBoundariesAndAlignment,
  # > 70 s there, is memcheck's only; the cluster test covers the DSMEM gather.)
  DEFAULT_RACECHECK_FILTER='GpuAttention.EdgeCases:GpuAttention.PipelineDepths:GpuMla.EdgeCases:GpuKvStore.IndexerKeys'
  DEFAULT_RACECHECK_FILTER+=':TopkGpu.HeavyTiesLowerPositionWins:TopkGpu.RowStarts:TopkGpu.ClusterGatherOverflowGoesToTheFallback:SparseMlaGpu.TopkNotMultipleOfTheTile:SparseMlaGpuEdges.TopkLenZeroAndPartial:SparseMlaGpuSplits.RingDepthDoesNotChangeBits'
  DEFAULT_RACECHECK_FILTER+=':GpuMlaSm90.WindowSoftcapAndEdgeCases:IndexerSm90PagedEdge.PageIdsOutsideThePoolAreSkipped:IndexerSm90Ragged.CausalPrefillWindows:SparseMlaGpuSm90.TopkLengthEdgesAndSharpSoftmax'
  # Session 8's defaults: the FP8 direct operands, the split prefill loaders, the top-k streaming filter (its
  # bitwise check at one configuration a shape: ATTNSERVE_TOPK_FEW=1 below).
  DEFAULT_RACECHECK_FILTER+=':GpuAttention.Fp8KvWithDescale:GpuAttentionSm90Split.Gate:TopkGpu.StreamingFilterGivesTheSameBits'
  MEMCHECK_FILTER=${MEMCHECK_FILTER:-$DEFAULT_MEMCHECK_FILTER}
  RACECHECK_FILTER=${RACECHECK_FILTER:-$DEFAULT_RACECHECK_FILTER}
  for tool in memcheck racecheck; do
    filter=$MEMCHECK_FILTER; [ $tool = racecheck ] && filter=$RACECHECK_FILTER
    t0=$(date +%s)
    # Racecheck: top-k checks without the session-7 opt-in variants (ATTNSERVE_TOPK_S7=0; 13 kernel choices a check
    # otherwise), unless the caller sets ATTNSERVE_TOPK_S7.
    s7=1; [ $tool = racecheck ] && s7=${ATTNSERVE_TOPK_S7:-0}
    few=0; [ $tool = racecheck ] && few=1
    ATTNSERVE_TOPK_FEW=$few ATTNSERVE_TOPK_S7=$s7 ATTNSERVE_SEED=1 timeout "${SAN_TIMEOUT:-300}" compute-sanitizer --tool $tool --error-exitcode 9 "$TESTS" --gtest_filter="$filter" \
      >"$OUT/sanitizer_$tool.log" 2>&1
    rc=$?
    summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitizer_$tool.log" | tail -1)
    san_runs=$((san_runs + 1))
    # Pass: the tool ran to its summary and found nothing (test failures are counted above).
    if [ $rc -ne 9 ] && [ $rc -ne 124 ] && echo "$summary" | grep -qE "ERROR SUMMARY: 0 errors|\(0 errors"; then record "compute-sanitizer $tool ($summary, $(( $(date +%s) - t0 )) s)" PASS
    else record "compute-sanitizer $tool (rc $rc: $summary)" FAIL; san_fail=$((san_fail + 1))
      grep -m 20 -E "=========" "$OUT/sanitizer_$tool.log"; fi
  done
fi

# ---- benchmarks (not tests) ------------------------------------------------------------------------
# BENCHES: which bench/cuda/bench_<name>.cu to build and run (default: all of them).
BENCHES=${BENCHES:-attention topk indexer sparse tree}
if [ "$BENCH" != none ] && [ -f "$BUILD/libattnserve.a" ]; then
  # The CMake targets of bench/CMakeLists.txt (one translation unit each, built in parallel). Old
  # binaries go first so a failed build never runs a stale one; keep going past a failed bench.
  targets=(); for b in $BENCHES; do targets+=("bench_$b"); rm -f "$BUILD/bench/bench_$b"; done
  keep_going=(-k 0); [ ${#GEN[@]} -eq 0 ] && keep_going=(-k)
  cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}" -- "${keep_going[@]}" >"$OUT/build_bench.log" 2>&1 &&
    rm -f "$OUT/build_bench.log"
  args=(); [ "$BENCH" = quick ] && args=(--quick)
  [ -n "${BENCH_FILTER:-}" ] && args+=("$BENCH_FILTER")  # name substring, e.g. BENCHES=attention BENCH_FILTER=mla
  for b in $BENCHES; do
    if [ -x "$BUILD/bench/bench_$b" ]; then
      timeout "${BENCH_TIMEOUT:-240}" "$BUILD/bench/bench_$b" "${args[@]}" 2>&1 | tee "$OUT/bench_$b.log"
    else
      echo "bench_$b build failed"; grep -E -m 20 "error|bench_$b" "$OUT/build_bench.log"
    fi
  done
  cat "$OUT"/bench_*.log > "$OUT/bench.log" 2>/dev/null
fi

# ---- table -----------------------------------------------------------------------------------------
echo
echo "== summary  commit $COMMIT  gpu ${GPU:-none}"
printf '%-72s %s\n' "check" "result"
for i in "${!NAMES[@]}"; do printf '%-72s %s\n' "${NAMES[$i]}" "${RESULTS[$i]}"; done
if [ -f "$OUT/bench.log" ]; then
  echo "-- bench (median, GB/s of K+V read; floor = bytes / measured copy bandwidth)"
  grep -E "^(copy|decode|verify|store|mla|prefill|extend|ab |repeat|topk|indexer|sparse)" "$OUT/bench.log" | cut -c1-140
fi
build_fail=0; for r in "${RESULTS[@]}"; do [ "$r" = FAIL ] && build_fail=1; done
passed=$(( ${gt_passed:-0} + san_runs - san_fail ))
failed=$(( ${gt_failed:-0} + san_fail ))
[ ! -x "$TESTS" ] && failed=$((failed + 1))
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
