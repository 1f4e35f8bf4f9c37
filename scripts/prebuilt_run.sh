#!/usr/bin/env bash
# Device run of binaries built on another machine (no build on the device: its seconds go to the GPU).
# Build here for sm_90 alone, e.g. `cmake -S . -B build-sm90 -DATTNSERVE_CUDA=ON -DATTNSERVE_CUDA_ARCHS=90
# -DATTNSERVE_BENCH=ON -DATTNSERVE_BENCH_CUDA_ARCHS=90 -DATTNSERVE_NCCL=OFF && cmake --build build-sm90
# --target attnserve_gpu_tests bench_attention`, copy the two executables (and libcudart.so.13, libgomp.so.1
# as a fallback) into BIN, carry BIN with the call. NCCL off: the device's libnccl is not where the build
# machine's is, and the context-parallel NCCL tests are not what this runs.
#   BIN           folder with attnserve_gpu_tests, bench_attention (default bin/)
#   GTEST_FILTER  test filter (default: the prefill suites); SUITE_TIMEOUT seconds (60)
#   BENCH_FILTER  bench_attention's name filter (default "hd "); BENCH_TIMEOUT seconds (40)
# Logs under $OUT: gpu_tests.log, bench.log.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?}"
BIN=$(cd "${BIN:-bin}" && pwd)
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64:$BIN"
echo "== prebuilt_run $(date -u +%FT%TZ) commit ${ATTNSERVE_COMMIT:-?} $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | head -1)"
ldd "$BIN/attnserve_gpu_tests" | grep -E "not found" && echo "== missing libraries"
timeout "${SUITE_TIMEOUT:-60}" "$BIN/attnserve_gpu_tests" --gtest_filter="${GTEST_FILTER:-GpuAttentionSm90.*:GpuAttention.*}" \
  >"$OUT/gpu_tests.log" 2>&1
echo "== tests rc $?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|tests ran|SKIPPED \]" "$OUT/gpu_tests.log" | head -30
timeout "${BENCH_TIMEOUT:-40}" "$BIN/bench_attention" "${BENCH_FILTER:-hd }" >"$OUT/bench.log" 2>&1
echo "== bench rc $?"
cat "$OUT/bench.log"
