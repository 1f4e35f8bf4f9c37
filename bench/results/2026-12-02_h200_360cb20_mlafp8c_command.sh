#!/usr/bin/env bash
# Session 9 device call F5 (lead): s9-mlafp8c (cluster-shared FP8 dequantization on the dense schedule, opt-in) from a
# copy of its worktree; gate, A/B rows, its tests + the dense suite. Usage: cd .wt/mlafp8c && bash ../../.device/call_f5.sh
set -u
O=${OUT:?}; D=$PWD/../../.device/deps; T0=$SECONDS
E=(); [ -f /usr/include/dlpack/dlpack.h ] || E+=(-DDLPACK_INCLUDE_DIR=$D)
[ -f /usr/include/gtest/gtest.h ] || [ -f /usr/local/include/gtest/gtest.h ] || { cmake -S $D/googletest -B /tmp/gt -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF -DCMAKE_INSTALL_PREFIX=/tmp/gtd >/dev/null && cmake --build /tmp/gt -j 16 >/dev/null && cmake --install /tmp/gt >/dev/null; E+=(-DCMAKE_PREFIX_PATH=/tmp/gtd); }
cmake -S . -B /tmp/cb -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNSERVE_CUDA=ON -DATTNSERVE_CUDA_ARCHS=90 -DATTNSERVE_BENCH=ON \
  -DATTNSERVE_BENCH_CUDA_ARCHS=90 -DATTNSERVE_CUTLASS_DIR=$D/cutlass/include "${E[@]}" >/tmp/cc.log 2>&1 &&
  timeout 150 cmake --build /tmp/cb -j 16 --target attnserve_gpu_tests bench_sparse >/tmp/cbl.log 2>&1
echo "build $? at $((SECONDS - T0)) s"; grep -m5 -E "error|FAILED" /tmp/cbl.log
T=/tmp/cb/attnserve_gpu_tests
ATTNSERVE_SEED=9 timeout 60 $T --gtest_filter='SparseMlaGpuSm90Fp8Cluster.Gate' >$O/gate.log 2>&1; G=$?
echo "gate $G at $((SECONDS - T0)) s"; grep -E "^\[  (PASSED|FAILED)" $O/gate.log
[ $G = 0 ] && { timeout 60 /tmp/cb/bench/bench_sparse --quick 's9c-fp8cluster' >$O/bench.log 2>&1; echo "bench $? at $((SECONDS - T0)) s"; }
[ $G = 0 ] && { ATTNSERVE_SEED=9 timeout 70 $T --gtest_filter='SparseMlaGpuSm90Fp8Cluster.*:SparseMlaGpuSm90Dense.*' >$O/gpu_tests.log 2>&1; echo "tests $? at $((SECONDS - T0)) s"; grep -E "^\[  (PASSED|FAILED)" $O/gpu_tests.log; }
grep -E "s9c" $O/bench.log 2>/dev/null | sed 's/  */ /g' | cut -c1-150
