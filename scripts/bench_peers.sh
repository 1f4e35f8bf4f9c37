#!/usr/bin/env bash
# Same-run benchmark of attnserve against its peers, on a machine with an NVIDIA GPU (the device
# machine): builds the Python extension with CUDA, then runs bench/python/bench_peers.py, which writes
#   $OUT/bench_<date>_<gpu>_<commit>.json and .md, and $OUT/decode_bandwidth_vs_context.png
# and prints the Markdown tables last. Fits one 600-second call (build included) with 16 cores.
#
# Environment:
#   OUT         where the results go (default: bench/results)
#   DEPS        folder holding dlpack/dlpack.h, for a system without DLPack headers (-DDLPACK_INCLUDE_DIR)
#   BUILD_DIR   build tree (default: build-py)
#   CUDA_ARCHS  CUDA architectures to compile (default: 90, the H200; the portable kernels run there too)
#   BUDGET_S    seconds for build + benchmark together (default: 570)
#   BENCH_ARGS  extra arguments for bench_peers.py, e.g. "--quick", "--only decode", "--no-flex"
#   ATTNSERVE_COMMIT  commit id for the file names when this is not a git checkout
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
OUT=${OUT:-bench/results}
BUILD=${BUILD_DIR:-build-py}
BUDGET=${BUDGET_S:-570}
mkdir -p "$OUT"
exec > >(tee "$OUT/bench_peers.log") 2>&1

COMMIT=${ATTNSERVE_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
export ATTNSERVE_COMMIT=$COMMIT
PY=$(command -v python3)
GPU=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
echo "== bench_peers  date $(date -u +%Y-%m-%dT%H:%M:%SZ)  commit $COMMIT  gpu ${GPU:-none}  cores $(nproc)"
echo "== python $PY: $("$PY" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available())' 2>&1 | tail -1)"

# ---- build the extension (CUDA on, no tests: GoogleTest is not needed) ---------------------------
CMAKE_EXTRA=()
if [ -n "${DEPS:-}" ] && [ -f "$DEPS/dlpack/dlpack.h" ]; then
  CMAKE_EXTRA+=(-DDLPACK_INCLUDE_DIR="$DEPS")
elif [ ! -f /usr/include/dlpack/dlpack.h ] && [ ! -f /usr/local/include/dlpack/dlpack.h ]; then
  echo "WARNING: no dlpack/dlpack.h on this system and DEPS does not hold one: the build will fail"
fi
# CUTLASS/CuTe headers for whatever Hopper code of the extension uses them (DEPS's copy; no pip there).
if [ -n "${DEPS:-}" ] && [ -f "$DEPS/cutlass/include/cute/tensor.hpp" ]; then
  CMAKE_EXTRA+=(-DATTNSERVE_CUTLASS_DIR="$DEPS/cutlass/include")
fi
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
t0=$(date +%s)
if ! cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DATTNSERVE_CUDA=ON \
       -DATTNSERVE_CUDA_ARCHS="${CUDA_ARCHS:-90}" -DATTNSERVE_PYTHON=ON -DATTNSERVE_TESTS=OFF \
       -DPython_EXECUTABLE="$PY" "${CMAKE_EXTRA[@]}" >"$BUILD.configure.log" 2>&1; then
  echo "configure FAILED:"; tail -40 "$BUILD.configure.log"
  "$PY" -c 'import sysconfig, os; p = sysconfig.get_paths()["include"]; print("Python.h in", p, os.path.exists(os.path.join(p, "Python.h")))'
  exit 1
fi
if ! cmake --build "$BUILD" -j "$(nproc)" --target _attnserve >"$BUILD.build.log" 2>&1; then
  echo "build FAILED:"; grep -E "error|Error" "$BUILD.build.log" | head -30; tail -20 "$BUILD.build.log"
  exit 1
fi
echo "== built the extension (CUDA archs ${CUDA_ARCHS:-90}, -j$(nproc)) in $(( $(date +%s) - t0 )) s"
if ! PYTHONPATH=python "$PY" -c 'import attnserve as A; assert A.built_with_cuda() and A.cuda_available(), "attnserve sees no GPU"'; then
  echo "the extension does not import or sees no GPU"; exit 1
fi
# An attnserve.Error raised with torch loaded must reach Python as an exception (it once killed the
# process when the extension carried its own copy of the C++ runtime's throw/catch symbols).
if ! PYTHONPATH=python "$PY" -c '
import torch, attnserve as A
try:
    A.SlotAllocator(10, 4)
except A.Error as e:
    print("== error path with torch loaded: raised", type(e).__name__)
else:
    raise SystemExit("no error raised for a bad SlotAllocator")'; then
  echo "the error path with torch loaded is broken (see above): the harness would crash"; exit 1
fi
echo "== exported dynamic symbols of the extension: $(nm -D --defined-only "$BUILD"/python/_attnserve*.so 2>/dev/null | wc -l)"

# ---- benchmark -----------------------------------------------------------------------------------
LEFT=$(( BUDGET - ($(date +%s) - T0) - 15 ))
echo "== benchmark: $LEFT s of budget left"
# shellcheck disable=SC2086
PYTHONUNBUFFERED=1 PYTHONPATH=python BENCH_COMMAND="OUT=<dir> scripts/bench_peers.sh ${BENCH_ARGS:-}" \
  timeout -k 5 $(( LEFT + 10 )) "$PY" bench/python/bench_peers.py --out "$OUT" --deadline-s "$LEFT" ${BENCH_ARGS:-}
rc=$?
[ "$rc" -ne 0 ] && echo "bench_peers.py ended with exit code $rc (the tables below hold what finished)"

# ---- the Markdown tables last (the notes on method stay in the file) ------------------------------
MD=$(ls -t "$OUT"/bench_*.md 2>/dev/null | head -1)
echo
ls -l "$OUT"
if [ -n "$MD" ]; then
  echo "== $MD"
  awk '/^## How the peers ran/{skip=1; next} /^## /{skip=0} !skip' "$MD"
else
  echo "no Markdown report was written"
fi
exit "$rc"
