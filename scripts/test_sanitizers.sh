#!/usr/bin/env bash
# The C++ tests (ctest -L cpu) under AddressSanitizer + UndefinedBehaviorSanitizer, CPU only
# (ATTNSERVE_CUDA=OFF), in their own build folder. CI runs it after scripts/test.sh (.ci/run).
# -O1 -g1: the usual sanitizer build with line tables only (file:line in every report; -g's full
# debug info only serves a debugger and cost ~45 % more compile time on a test file). Any report fails
# the run: UBSan does not recover, ASan stops at its first error.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

BUILD=${BUILD_DIR:-build-asan}
JOBS=${JOBS:-$(nproc)}
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S . -B "$BUILD" -DATTNSERVE_CUDA=OFF -DATTNSERVE_TESTS=ON -DATTNSERVE_BENCH=OFF -DATTNSERVE_PYTHON=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_CXX_FLAGS="$SAN" \
  -DCMAKE_EXE_LINKER_FLAGS="$SAN" -DCMAKE_SHARED_LINKER_FLAGS="$SAN" >/dev/null
cmake --build "$BUILD" -j "$JOBS" --target attnserve_tests

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
set +e
ctest --test-dir "$BUILD" -L cpu -j "$JOBS" --output-on-failure 2>&1 | tee "$BUILD/ctest.log"
rc=${PIPESTATUS[0]}
set -e
total=$(grep -Eo 'out of [0-9]+' "$BUILD/ctest.log" | tail -1 | grep -Eo '[0-9]+' || echo 0)
failed=$(grep -Eo '[0-9]+ tests failed' "$BUILD/ctest.log" | tail -1 | grep -Eo '^[0-9]+' || echo 0)
reports=$(grep -cE 'ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:' "$BUILD/ctest.log" || true)
echo "attnserve sanitizer tests (ASan + UBSan, CPU): C++ $((total - failed))/$total passed, $reports sanitizer reports"
[ "$rc" -eq 0 ] && [ "$total" -gt 0 ] && [ "$reports" -eq 0 ]
